"""privfed: differential-privacy accounting for federated knowledge-transfer pipelines.

The public face of the project: everything a user needs is importable from here.
"""

from accounting import (
    BudgetExceededError,
    LaplaceNoisyMax,
    Ledger,
    LedgerFormatError,
    LedgerIntegrityError,
    Mechanism,
    MechanismReport,
    ParallelComposition,
    PrivacyReport,
    account,
    compose_parallel,
    data_fingerprint,
)
from privfed.bundle import BundleError, BundleIntegrityError, load_bundle, save_bundle

__version__ = "0.1.0"

__all__ = [
    "BudgetExceededError",
    "BundleError",
    "BundleIntegrityError",
    "LaplaceNoisyMax",
    "Ledger",
    "LedgerFormatError",
    "LedgerIntegrityError",
    "Mechanism",
    "MechanismReport",
    "ParallelComposition",
    "PrivacyReport",
    "__version__",
    "account",
    "compose_parallel",
    "data_fingerprint",
    "load_bundle",
    "save_bundle",
]
