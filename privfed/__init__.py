"""privfed: differential-privacy accounting for federated knowledge-transfer pipelines.

The public face of the project: everything a user needs is importable from here. The top layer
(``docs/architecture.md``): it may import ``privfed.accounting``, ``privfed.pipelines`` and ``privfed.reports``
(root folders of a checkout, found through ``__path__`` below), and holds ``cli`` (the command line, imported only
by ``__main__``), ``bundle``, ``evidence``, ``audit``, ``federation`` (the Flower app), ``evaluation`` (accuracy
against the majority class) and ``output_folder`` (output folders, checked before any work).
"""

import sys
import types
from pathlib import Path
from typing import Any

# In a source checkout the layers live beside this folder (accounting/, pipelines/, reports/ at the
# repository root, as the design keeps them); an installed distribution maps them under privfed/
# (pyproject.toml's package-dir). Searching the checkout's root for submodules makes `privfed.accounting`
# resolve to the checkout being run, not to whichever checkout was installed in editable mode.
_CHECKOUT_ROOT = Path(__file__).resolve().parent.parent
if (_CHECKOUT_ROOT / "pyproject.toml").is_file() and (_CHECKOUT_ROOT / "accounting" / "__init__.py").is_file():
    __path__.append(str(_CHECKOUT_ROOT))

__version__ = "0.1.0"

# Every public name loads on first use, so that `import privfed` costs nothing and `privfed --help` answers at
# once; pipeline classes and model adapters import neither scikit-learn nor torch until they are used.
_FROM_ACCOUNTING = (
    "AuditResult",
    "DPSGD",
    "OBSERVERS",
    "BudgetExceededError",
    "ConfidentGNMax",
    "DpEventRelease",
    "GaussianNoisyMax",
    "LaplaceNoisyMax",
    "Ledger",
    "LedgerFormatError",
    "LedgerIntegrityError",
    "Mechanism",
    "MechanismReport",
    "NoiseSource",
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
    "compose_parallel",
    "compose_sequential",
    "data_fingerprint",
    "data_independent_event",
    "dpsgd_noise_multiplier",
    "epsilon_lower_bound",
    "flower_mechanism",
    "gdp_lower_bound",
    "load_mechanisms",
    "opacus_mechanism",
    "quantize_logits",
    "randomized_response_epsilon",
    "randomized_response_estimate",
    "randomized_response_keep_probability",
    "randomized_response_variance",
    "release_epsilon",
)
_FROM_AUDIT = ("audit", "audit_parameters", "load_claims")
_FROM_AUDIT_REPORT = ("AuditInputError", "AuditReport", "Check")
_FROM_BUNDLE_MANIFEST = ("BundleError", "BundleIntegrityError")
_FROM_BUNDLE_LOAD = ("LegacyBundleWarning", "bundle_digest", "load_bundle")
_FROM_EMPIRICAL_AUDIT = ("empirical_audit",)
_FROM_SELFTEST = ("selftest",)
_FROM_SIGNING = ("generate_signing_key", "sign_bundle")
_FROM_SILO_BUDGET = ("SiloBudget",)
_FROM_MODEL_SIGNATURE = ("sign_bundle_model_signing",)
_FROM_EVALUATION = ("evaluate_accuracy",)
_FROM_EMPIRICAL = (
    "MembershipBound",
    "OneRunBound",
    "clopper_pearson",
    "insert_canaries",
    "membership_epsilon_lower_bound",
    "one_run_audit",
    "one_run_epsilon_lower_bound",
    "plant_canaries",
    "true_label_scores",
)
_FROM_PIPELINES = (
    "CentralizedPATE",
    "DPConfig",
    "DPDensityRatioSelector",
    "DensityRatioSelector",
    "FedKD",
    "FedKT",
    "FedMD",
    "IndependentLearning",
    "KerasInitialised",
    "KuLSIF",
    "PartyData",
    "PrivateKT",
    "SelectiveFD",
    "Solo",
    "TorchCNN",
    "TorchClassifier",
    "TorchMLP",
    "dirichlet_partition",
    "federated_split",
    "homogeneous_partition",
    "label_mixture_partition",
    "load_dataset",
    "load_parties",
    "load_reference_rows",
    "reference_rows_split",
)
_LAZY = {
    **dict.fromkeys(_FROM_ACCOUNTING, "privfed.accounting"),
    **dict.fromkeys(_FROM_AUDIT, "privfed.audit"),
    **dict.fromkeys(_FROM_AUDIT_REPORT, "privfed.audit.report"),
    **dict.fromkeys(_FROM_BUNDLE_MANIFEST, "privfed.bundle.manifest"),
    **dict.fromkeys(_FROM_BUNDLE_LOAD, "privfed.bundle.load"),
    "save_bundle": "privfed.bundle.save",
    **dict.fromkeys(_FROM_SIGNING, "privfed.bundle.signing"),
    **dict.fromkeys(_FROM_SILO_BUDGET, "privfed.accounting.silo_budget"),
    **dict.fromkeys(_FROM_MODEL_SIGNATURE, "privfed.bundle.model_signature"),
    **dict.fromkeys(_FROM_EVALUATION, "privfed.evaluation"),
    **dict.fromkeys(_FROM_EMPIRICAL, "privfed.audit.empirical"),
    **dict.fromkeys(_FROM_EMPIRICAL_AUDIT, "privfed.audit.empirical_pipelines"),
    "write_evidence_pack": "privfed.evidence.pack",
    **dict.fromkeys(_FROM_SELFTEST, "privfed.audit.selftest"),
    **dict.fromkeys(_FROM_PIPELINES, "privfed.pipelines"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        setattr(sys.modules[__name__], name, value)
        return value
    raise AttributeError(f"module 'privfed' has no attribute {name!r}")


class _Package(types.ModuleType):
    """privfed's module type: a public name keeps its meaning when a submodule of the same name loads.

    Importing a submodule binds it as a package attribute (``privfed.audit``, the module); where the public API
    gives that name to something the submodule defines (the function :func:`privfed.audit.audit`), the public
    object is bound instead, as an eager ``from privfed.audit import audit`` did.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and _LAZY.get(name) == value.__name__ == f"{__name__}.{name}":
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

__all__ = sorted(["__version__", *_LAZY])
