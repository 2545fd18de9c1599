"""privfed: differential-privacy accounting for federated knowledge-transfer pipelines.

The public face of the project: everything a user needs is importable from here.
"""

from pathlib import Path
from typing import Any

# In a source checkout the layers live beside this folder (accounting/, pipelines/, reports/ at the
# repository root, as the design keeps them); an installed distribution maps them under privfed/
# (pyproject.toml's package-dir). Searching the checkout's root for submodules makes `privfed.accounting`
# resolve to the checkout being run, not to whichever checkout was installed in editable mode.
_CHECKOUT_ROOT = Path(__file__).resolve().parent.parent
if (_CHECKOUT_ROOT / "pyproject.toml").is_file() and (_CHECKOUT_ROOT / "accounting" / "__init__.py").is_file():
    __path__.append(str(_CHECKOUT_ROOT))

from privfed.accounting import (  # noqa: E402
    DPSGD,
    BudgetExceededError,
    GaussianNoisyMax,
    LaplaceNoisyMax,
    Ledger,
    LedgerFormatError,
    LedgerIntegrityError,
    Mechanism,
    MechanismReport,
    ParallelComposition,
    PrivacyReport,
    QuantizedLaplaceEnsemble,
    RandomizedResponse,
    account,
    class_count_weights,
    compose_parallel,
    data_fingerprint,
    load_mechanisms,
    quantize_logits,
    randomized_response_epsilon,
    randomized_response_estimate,
    randomized_response_keep_probability,
    randomized_response_variance,
)
from privfed.audit import audit, load_claims
from privfed.audit_report import AuditInputError, AuditReport, Check
from privfed.bundle import BundleError, BundleIntegrityError, load_bundle, save_bundle
from privfed.empirical import (
    MembershipBound,
    OneRunBound,
    clopper_pearson,
    insert_canaries,
    membership_epsilon_lower_bound,
    one_run_audit,
    one_run_epsilon_lower_bound,
    true_label_scores,
)

__version__ = "0.1.0"

# Pipelines and model adapters load on first use, so that `import privfed` (and the
# `privfed account` command) import neither scikit-learn nor torch.
_FROM_PIPELINES = (
    "CentralizedPATE",
    "DensityRatioSelector",
    "FedKD",
    "FedKT",
    "FedMD",
    "IndependentLearning",
    "KuLSIF",
    "PrivateKT",
    "SelectiveFD",
    "Solo",
    "TorchCNN",
    "TorchClassifier",
    "TorchMLP",
    "dirichlet_partition",
    "federated_split",
    "homogeneous_partition",
    "load_dataset",
    "load_reference_rows",
    "reference_rows_split",
)


def __getattr__(name: str) -> Any:
    if name in _FROM_PIPELINES:
        from privfed import pipelines

        return getattr(pipelines, name)
    raise AttributeError(f"module 'privfed' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

__all__ = [
    "AuditInputError",
    "AuditReport",
    "BudgetExceededError",
    "BundleError",
    "BundleIntegrityError",
    "Check",
    "DPSGD",
    "GaussianNoisyMax",
    "LaplaceNoisyMax",
    "Ledger",
    "LedgerFormatError",
    "LedgerIntegrityError",
    "Mechanism",
    "MechanismReport",
    "MembershipBound",
    "OneRunBound",
    "ParallelComposition",
    "PrivacyReport",
    "QuantizedLaplaceEnsemble",
    "RandomizedResponse",
    "__version__",
    "account",
    "audit",
    "class_count_weights",
    "clopper_pearson",
    "compose_parallel",
    "data_fingerprint",
    "insert_canaries",
    "load_bundle",
    "load_claims",
    "membership_epsilon_lower_bound",
    "one_run_audit",
    "one_run_epsilon_lower_bound",
    "save_bundle",
    "load_mechanisms",
    "quantize_logits",
    "randomized_response_epsilon",
    "randomized_response_estimate",
    "randomized_response_keep_probability",
    "randomized_response_variance",
    "true_label_scores",
    *_FROM_PIPELINES,
]
