"""privfed's accounting core: mechanisms, accountants and the ledger's data model.

Depends on numpy, scipy and dp-accounting only.
"""

from accounting.account import account
from accounting.laplace_noisy_max import LaplaceNoisyMax, laplace_failure_bounds
from accounting.mechanism import Mechanism
from accounting.orders import CLASSIC_ORDERS, TIGHT_ORDERS
from accounting.parallel import ParallelComposition, compose_parallel
from accounting.report import MechanismReport, PrivacyReport

__all__ = [
    "CLASSIC_ORDERS",
    "TIGHT_ORDERS",
    "LaplaceNoisyMax",
    "Mechanism",
    "MechanismReport",
    "ParallelComposition",
    "PrivacyReport",
    "account",
    "compose_parallel",
    "laplace_failure_bounds",
]
