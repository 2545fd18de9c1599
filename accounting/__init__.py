"""privfed's accounting core: mechanisms, accountants, the ledger's data model and the secret noise source.

The bottom layer: it imports nothing else of privfed (``tests/test_import_graph.py``; ``docs/architecture.md``).
Depends on numpy, scipy and dp-accounting only, plus randomgen (the secure random source). Every public name
loads its module on first use, so that what needs no ε curve (reading a ledger, a silo budget's check) imports
neither dp-accounting nor scipy.stats.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from .registry import set_kind_importer

if TYPE_CHECKING:
    from .account import account
    from .auditing import AuditResult, audit_release, epsilon_lower_bound
    from .confident_gnmax import ConfidentGNMax
    from .dp_event_release import DpEventRelease
    from .dpsgd import DPSGD, compose_dpsgd, dpsgd_noise_multiplier
    from .fdp_auditing import gdp_lower_bound
    from .fingerprint import data_fingerprint
    from .gaussian_noisy_max import GaussianNoisyMax, gaussian_log_failure_bounds, gaussian_noisy_max_rdp
    from .interop import data_independent_event, flower_mechanism, opacus_mechanism
    from .laplace_noisy_max import LaplaceNoisyMax, laplace_failure_bounds
    from .ledger import Ledger
    from .ledger_budget import BudgetExceededError
    from .ledger_entry import LedgerEntry, LedgerFormatError, LedgerIntegrityError
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

#: public name → the module (in this package) that defines it.
_MODULES = {
    "AuditResult": "auditing",
    "CLASSIC_ORDERS": "orders",
    "DPSGD": "dpsgd",
    "TIGHT_ORDERS": "orders",
    "BudgetExceededError": "ledger_budget",
    "ConfidentGNMax": "confident_gnmax",
    "DpEventRelease": "dp_event_release",
    "GaussianNoisyMax": "gaussian_noisy_max",
    "LaplaceNoisyMax": "laplace_noisy_max",
    "Ledger": "ledger",
    "LedgerEntry": "ledger_entry",
    "LedgerFormatError": "ledger_entry",
    "LedgerIntegrityError": "ledger_entry",
    "Mechanism": "mechanism",
    "NoiseSource": "noise_source",
    "MechanismReport": "report",
    "OBSERVERS": "observers",
    "ParallelComposition": "parallel",
    "PrivacyReport": "report",
    "QuantizedLaplaceEnsemble": "quantized_laplace",
    "RandomizedResponse": "randomized_response",
    "SequentialComposition": "sequential",
    "ShuffledRandomizedResponse": "shuffling",
    "SkellamMechanism": "skellam",
    "SmoothSensitivityRelease": "release",
    "WithheldVotesNoisyMax": "withheld_votes",
    "account": "account",
    "audit_release": "auditing",
    "class_count_weights": "quantized_laplace",
    "compose_dpsgd": "dpsgd",
    "compose_parallel": "parallel",
    "compose_sequential": "sequential",
    "data_fingerprint": "fingerprint",
    "data_independent_event": "interop",
    "dpsgd_noise_multiplier": "dpsgd",
    "epsilon_lower_bound": "auditing",
    "flower_mechanism": "interop",
    "gdp_lower_bound": "fdp_auditing",
    "gaussian_log_failure_bounds": "gaussian_noisy_max",
    "gaussian_noisy_max_rdp": "gaussian_noisy_max",
    "laplace_failure_bounds": "laplace_noisy_max",
    "load_mechanisms": "spec",
    "opacus_mechanism": "interop",
    "quantize_logits": "quantized_laplace",
    "randomized_response_epsilon": "randomized_response",
    "randomized_response_estimate": "randomized_response",
    "randomized_response_keep_probability": "randomized_response",
    "randomized_response_variance": "randomized_response",
    "release_epsilon": "release",
}

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
    "gdp_lower_bound",
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


#: mechanism kind → the module whose class registers it (:mod:`.registry`), imported before a record of it is rebuilt.
_KIND_MODULES = {
    "confident_gnmax": "confident_gnmax", "dp_event": "dp_event_release", "dpsgd": "dpsgd",
    "gaussian_noisy_max": "gaussian_noisy_max", "laplace_noisy_max": "laplace_noisy_max",
    "parallel_composition": "parallel", "quantized_laplace_ensemble": "quantized_laplace",
    "randomized_response": "randomized_response", "smooth_sensitivity_release": "release",
    "sequential_composition": "sequential", "shuffled_randomized_response": "shuffling", "skellam": "skellam",
    "withheld_votes_noisy_max": "withheld_votes",
}


def _import_kinds(kind: str | None) -> None:
    """Import the module of ``kind``, or every kind's module for ``None`` or a kind no module registers (a record
    of a Laplace noisy max then loads neither dp-accounting nor SciPy, which other kinds' modules import)."""
    modules = [_KIND_MODULES[kind]] if isinstance(kind, str) and kind in _KIND_MODULES else list(_KIND_MODULES.values())
    for module in modules:
        importlib.import_module(f".{module}", __name__)


set_kind_importer(_import_kinds)


def __getattr__(name: str) -> Any:
    """Import the module that defines ``name`` on first use (PEP 562) and cache the name here."""
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """This package, whose ``account`` stays the function although a submodule has the same name.

    Importing ``privfed.accounting.account`` (as the ledger does) binds the submodule to the package's attribute
    ``account``; eager imports used to rebind the function afterwards, and this property takes their place.
    """

    @property
    def account(self) -> Any:
        return importlib.import_module(".account", __name__).account

    @account.setter
    def account(self, value: Any) -> None:
        if not isinstance(value, types.ModuleType):
            raise AttributeError(f"{__name__}.account is the function account and cannot be rebound")


sys.modules[__name__].__class__ = _Package
