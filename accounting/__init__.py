"""privfed's accounting core: mechanisms, accountants and the ledger's data model.

Depends on numpy, scipy and dp-accounting only.
"""

from accounting.account import account
from accounting.fingerprint import data_fingerprint
from accounting.laplace_noisy_max import LaplaceNoisyMax, laplace_failure_bounds
from accounting.ledger import BudgetExceededError, Ledger, LedgerFormatError, LedgerIntegrityError
from accounting.ledger_entry import LedgerEntry
from accounting.mechanism import Mechanism
from accounting.orders import CLASSIC_ORDERS, TIGHT_ORDERS
from accounting.parallel import ParallelComposition, compose_parallel
from accounting.report import MechanismReport, PrivacyReport

__all__ = [
    "CLASSIC_ORDERS",
    "TIGHT_ORDERS",
    "BudgetExceededError",
    "LaplaceNoisyMax",
    "Ledger",
    "LedgerEntry",
    "LedgerFormatError",
    "LedgerIntegrityError",
    "Mechanism",
    "MechanismReport",
    "ParallelComposition",
    "PrivacyReport",
    "account",
    "compose_parallel",
    "data_fingerprint",
    "laplace_failure_bounds",
]
