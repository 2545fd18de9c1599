"""privfed's accounting core: mechanisms, accountants, the ledger's data model and the secret noise source.

Depends on numpy, scipy and dp-accounting only, plus randomgen (the secure random source).
"""

from .account import account
from .auditing import AuditResult, audit_release, epsilon_lower_bound
from .confident_gnmax import ConfidentGNMax
from .dp_event_release import DpEventRelease
from .dpsgd import DPSGD, compose_dpsgd, dpsgd_noise_multiplier
from .fingerprint import data_fingerprint
from .gaussian_noisy_max import GaussianNoisyMax, gaussian_log_failure_bounds, gaussian_noisy_max_rdp
from .interop import data_independent_event, flower_mechanism, opacus_mechanism
from .laplace_noisy_max import LaplaceNoisyMax, laplace_failure_bounds
from .ledger import BudgetExceededError, Ledger, LedgerFormatError, LedgerIntegrityError
from .ledger_entry import LedgerEntry
from .mechanism import Mechanism
from .noise_source import NoiseSource
from .observers import OBSERVERS
from .orders import CLASSIC_ORDERS, TIGHT_ORDERS
from .parallel import ParallelComposition, compose_parallel
from .quantized_laplace import QuantizedLaplaceEnsemble, class_count_weights, quantize_logits
from .randomized_response import (
    RandomizedResponse,
    randomized_response_epsilon,
    randomized_response_estimate,
    randomized_response_keep_probability,
    randomized_response_variance,
)
from .release import SmoothSensitivityRelease, release_epsilon
from .report import MechanismReport, PrivacyReport
from .sequential import SequentialComposition, compose_sequential
from .shuffling import ShuffledRandomizedResponse
from .skellam import SkellamMechanism
from .spec import load_mechanisms
from .withheld_votes import WithheldVotesNoisyMax

__all__ = [
    "AuditResult",
    "CLASSIC_ORDERS",
    "DPSGD",
    "TIGHT_ORDERS",
    "BudgetExceededError",
    "ConfidentGNMax",
    "DpEventRelease",
    "GaussianNoisyMax",
    "LaplaceNoisyMax",
    "Ledger",
    "LedgerEntry",
    "LedgerFormatError",
    "LedgerIntegrityError",
    "Mechanism",
    "NoiseSource",
    "MechanismReport",
    "OBSERVERS",
    "ParallelComposition",
    "PrivacyReport",
    "QuantizedLaplaceEnsemble",
    "RandomizedResponse",
    "SequentialComposition",
    "ShuffledRandomizedResponse",
    "SkellamMechanism",
    "SmoothSensitivityRelease",
    "WithheldVotesNoisyMax",
    "account",
    "audit_release",
    "class_count_weights",
    "compose_dpsgd",
    "compose_parallel",
    "compose_sequential",
    "data_fingerprint",
    "data_independent_event",
    "dpsgd_noise_multiplier",
    "epsilon_lower_bound",
    "flower_mechanism",
    "gaussian_log_failure_bounds",
    "gaussian_noisy_max_rdp",
    "laplace_failure_bounds",
    "load_mechanisms",
    "opacus_mechanism",
    "quantize_logits",
    "randomized_response_epsilon",
    "randomized_response_estimate",
    "randomized_response_keep_probability",
    "randomized_response_variance",
    "release_epsilon",
]
