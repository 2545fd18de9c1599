"""privfed: differential-privacy accounting for federated knowledge-transfer pipelines.

The public face of the project: everything a user needs is importable from here.
"""

from accounting import (
    DPSGD,
    GaussianNoisyMax,
    LaplaceNoisyMax,
    Mechanism,
    MechanismReport,
    ParallelComposition,
    PrivacyReport,
    QuantizedLaplaceEnsemble,
    RandomizedResponse,
    account,
    class_count_weights,
    compose_parallel,
    load_mechanisms,
    quantize_logits,
    randomized_response_epsilon,
    randomized_response_estimate,
    randomized_response_keep_probability,
    randomized_response_variance,
)

__version__ = "0.1.0"

__all__ = [
    "DPSGD",
    "GaussianNoisyMax",
    "LaplaceNoisyMax",
    "Mechanism",
    "MechanismReport",
    "ParallelComposition",
    "PrivacyReport",
    "QuantizedLaplaceEnsemble",
    "RandomizedResponse",
    "__version__",
    "account",
    "class_count_weights",
    "compose_parallel",
    "load_mechanisms",
    "quantize_logits",
    "randomized_response_epsilon",
    "randomized_response_estimate",
    "randomized_response_keep_probability",
    "randomized_response_variance",
]
