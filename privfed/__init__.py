"""privfed: differential-privacy accounting for federated knowledge-transfer pipelines.

The public face of the project: everything a user needs is importable from here.
"""

from accounting import (
    LaplaceNoisyMax,
    Mechanism,
    MechanismReport,
    ParallelComposition,
    PrivacyReport,
    account,
    compose_parallel,
)

__version__ = "0.1.0"

__all__ = [
    "LaplaceNoisyMax",
    "Mechanism",
    "MechanismReport",
    "ParallelComposition",
    "PrivacyReport",
    "__version__",
    "account",
    "compose_parallel",
]
