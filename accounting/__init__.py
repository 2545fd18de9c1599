"""privfed's accounting core: mechanisms, accountants and the ledger's data model.

Depends on numpy, scipy and dp-accounting only.
"""

from privfed.accounting.account import account
from privfed.accounting.confident_gnmax import ConfidentGNMax
from privfed.accounting.dpsgd import DPSGD, compose_dpsgd, dpsgd_noise_multiplier
from privfed.accounting.fingerprint import data_fingerprint
from privfed.accounting.gaussian_noisy_max import GaussianNoisyMax, gaussian_log_failure_bounds, gaussian_noisy_max_rdp
from privfed.accounting.laplace_noisy_max import LaplaceNoisyMax, laplace_failure_bounds
from privfed.accounting.ledger import BudgetExceededError, Ledger, LedgerFormatError, LedgerIntegrityError
from privfed.accounting.ledger_entry import LedgerEntry
from privfed.accounting.mechanism import Mechanism
from privfed.accounting.orders import CLASSIC_ORDERS, TIGHT_ORDERS
from privfed.accounting.parallel import ParallelComposition, compose_parallel
from privfed.accounting.quantized_laplace import QuantizedLaplaceEnsemble, class_count_weights, quantize_logits
from privfed.accounting.randomized_response import (
    RandomizedResponse,
    randomized_response_epsilon,
    randomized_response_estimate,
    randomized_response_keep_probability,
    randomized_response_variance,
)
from privfed.accounting.release import SmoothSensitivityRelease, release_epsilon
from privfed.accounting.report import MechanismReport, PrivacyReport
from privfed.accounting.sequential import SequentialComposition, compose_sequential
from privfed.accounting.shuffling import ShuffledRandomizedResponse
from privfed.accounting.spec import load_mechanisms

__all__ = [
    "CLASSIC_ORDERS",
    "DPSGD",
    "TIGHT_ORDERS",
    "BudgetExceededError",
    "ConfidentGNMax",
    "GaussianNoisyMax",
    "LaplaceNoisyMax",
    "Ledger",
    "LedgerEntry",
    "LedgerFormatError",
    "LedgerIntegrityError",
    "Mechanism",
    "MechanismReport",
    "ParallelComposition",
    "PrivacyReport",
    "QuantizedLaplaceEnsemble",
    "RandomizedResponse",
    "SequentialComposition",
    "ShuffledRandomizedResponse",
    "SmoothSensitivityRelease",
    "account",
    "class_count_weights",
    "compose_dpsgd",
    "compose_parallel",
    "compose_sequential",
    "data_fingerprint",
    "dpsgd_noise_multiplier",
    "gaussian_log_failure_bounds",
    "gaussian_noisy_max_rdp",
    "laplace_failure_bounds",
    "load_mechanisms",
    "quantize_logits",
    "randomized_response_epsilon",
    "randomized_response_estimate",
    "randomized_response_keep_probability",
    "randomized_response_variance",
    "release_epsilon",
]
