"""Safe loading: the model opened only through formats that cannot run code (``docs/audit.md#safe-loading``).

A bundle's model through :func:`~privfed.bundle.load.open_bundle_files`; a foreign model by its suffix's safe reader
(skops with a trusted-type list, xgboost's own format, safetensors). Anything read by unpickling is refused,
never opened.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from privfed.accounting.ledger import Ledger, LedgerFormatError, LedgerIntegrityError
from privfed.audit.report import INTEGRITY_MEANING, UNSAFE_MEANING, Check
from privfed.bundle.families import SKOPS_TRUSTED_TYPES
from privfed.bundle.load import open_bundle_files
from privfed.bundle.manifest import BundleError
from privfed.bundle.skops_import import import_skops_io

__all__ = ["load_bundle_model", "load_foreign_model"]


#: Model-file suffixes whose standard readers unpickle (and so can run code): always refused.
_PICKLE_SUFFIXES = (".pkl", ".pickle", ".joblib", ".pt", ".pth", ".ckpt", ".bin", ".sav", ".dill")
#: Model-file suffixes privfed reads safely.
_FOREIGN_SUFFIXES = (".skops", ".ubj", ".json", ".safetensors")


def load_bundle_model(files: Mapping[str, bytes], ledger: Ledger, *, module: Any,
                      model_class: type | None) -> tuple[Any, Check]:
    """The bundle's model opened from its safe files (None when it cannot be), and the safe-loading check."""
    family = (ledger.model_fingerprint or {}).get("family")
    if family == "torch-module" and module is None:
        import safetensors.numpy

        try:
            tensors = safetensors.numpy.load(files["model.safetensors"])
        except Exception as error:  # safetensors' own error for a truncated or foreign file
            return None, Check("safe loading", "fail", f"model.safetensors is not a readable safetensors file: "
                               f"{type(error).__name__}", INTEGRITY_MEANING, "safe-loading")
        return None, Check("safe loading", "warn", f"model.safetensors read safely ({len(tensors)} tensors), but the "
                           "model is a plain torch module: its architecture is needed to run it (Python: "
                           "privfed.audit(..., module=...))", "the tensors are safe, but the empirical check needs the "
                           "model's code, which a bundle never ships.", "safe-loading")
    try:
        model, _ = open_bundle_files(files, module=module, model_class=model_class)
    except BundleError as error:
        return None, Check("safe loading", "fail", f"refused: {error}", UNSAFE_MEANING, "safe-loading")
    except (LedgerFormatError, LedgerIntegrityError) as error:
        return None, Check("safe loading", "fail", f"load_bundle refused the bundle: {error}", INTEGRITY_MEANING,
                           "integrity")
    return model, Check("safe loading", "pass", f"{type(model).__name__} loaded from {family} files without unpickling")


def load_foreign_model(path: Path, *, module: Any) -> tuple[Any, Check]:
    """The foreign model read by its suffix's safe reader; a failed check (never a traceback) when unreadable."""
    try:
        return _read_foreign_model(path, module=module)
    except Exception as error:  # each reader's own error for a corrupt, truncated or mislabelled file
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return None, Check("safe loading", "fail", f"{path.name} is not a readable {path.suffix} model: "
                           f"{type(error).__name__}{': ' + message if message else ''}", INTEGRITY_MEANING,
                           "safe-loading")


def _read_foreign_model(path: Path, *, module: Any) -> tuple[Any, Check]:
    """:func:`load_foreign_model` before a reader's own error is turned into a failed check."""
    suffix = path.suffix.lower()
    if suffix in _PICKLE_SUFFIXES:
        return None, Check("safe loading", "fail", f"refused: {path.name} is a {suffix} file, which is read by "
                           "unpickling (it can run code when opened); not opened", UNSAFE_MEANING, "safe-loading")
    if suffix not in _FOREIGN_SUFFIXES:
        return None, Check("safe loading", "fail", f"refused: {path.name} is not in a format privfed reads safely "
                           f"({', '.join(_FOREIGN_SUFFIXES)})", UNSAFE_MEANING, "safe-loading")
    if suffix == ".skops":
        skops_io = import_skops_io()

        untrusted = skops_io.get_untrusted_types(file=path)
        refused = sorted(set(untrusted) - set(SKOPS_TRUSTED_TYPES))
        if refused:
            return None, Check("safe loading", "fail", f"refused: {path.name} needs types outside privfed's trusted "
                               f"list: {refused}", UNSAFE_MEANING, "safe-loading")
        model = skops_io.load(path, trusted=list(untrusted))
        return model, Check("safe loading", "pass", f"{type(model).__name__} loaded with skops and a trusted-type list")
    if suffix in (".ubj", ".json"):
        import xgboost

        model = xgboost.XGBClassifier()
        try:
            model.load_model(os.fspath(path))
        except (xgboost.core.XGBoostError, ValueError) as error:
            return None, Check("safe loading", "fail", f"{path.name} is not a readable xgboost model: "
                               f"{str(error).splitlines()[0]}", INTEGRITY_MEANING, "safe-loading")
        return model, Check("safe loading", "pass", "XGBClassifier loaded from xgboost's own model format")
    import safetensors.numpy

    tensors = safetensors.numpy.load_file(os.fspath(path))
    if module is None:
        return None, Check("safe loading", "warn", f"{path.name} read safely ({len(tensors)} tensors); the module's "
                           "architecture is needed to run it (Python: privfed.audit(..., module=...))",
                           "the tensors are safe, but the empirical check needs the model's code.", "safe-loading")
    import safetensors.torch

    safetensors.torch.load_model(module, os.fspath(path), strict=True)
    return module, Check("safe loading", "pass", f"{type(module).__name__} filled from safetensors")
