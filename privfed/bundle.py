"""Model bundles: a model in a safe format, its privacy ledger, optional evidence and a model card.

A bundle is a directory::

    ledger.json        the ledger, with the sha256 of every model file and of evidence.npz
    model.ubj          xgboost models: xgboost's own UBJSON format (Booster.save_model)
    model.skops        scikit-learn models: skops, loaded with an explicit trusted-type list
    model.safetensors  torch models: tensors in safetensors, plus
    architecture.json  the architecture spec (JSON) needed to rebuild the module
    evidence.npz       optional, PRIVATE: the evidence of data-dependent entries (np.savez)
    MODEL_CARD.md      the ledger rendered for people

None of these formats can execute code when read: :func:`load_bundle` never
unpickles (no ``pickle``, ``joblib.load`` or ``torch.load``), loads ``.npz``
with ``allow_pickle=False``, and checks every file's sha256 against the
ledger before reading it.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from privfed.accounting.fingerprint import file_sha256
from privfed.accounting.ledger import Ledger, LedgerIntegrityError
from privfed.model_card import render_model_card

__all__ = [
    "LEDGER_FILE",
    "SKOPS_TRUSTED_TYPES",
    "BundleError",
    "BundleIntegrityError",
    "load_bundle",
    "save_bundle",
]

LEDGER_FILE = "ledger.json"
EVIDENCE_FILE = "evidence.npz"
MODEL_CARD_FILE = "MODEL_CARD.md"
ARCHITECTURE_FILE = "architecture.json"

#: Types beyond skops' own default-trusted set that privfed accepts in a scikit-learn model:
#: the fitted state of trees, forests, gradient boosting and MLPs. Anything else is refused.
SKOPS_TRUSTED_TYPES: tuple[str, ...] = (
    "sklearn.tree._tree.Tree",
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
    "sklearn.neural_network._stochastic_optimizers.AdamOptimizer",
    "sklearn.neural_network._stochastic_optimizers.SGDOptimizer",
)

#: xgboost classes a bundle may name; each is rebuilt empty, then filled by ``load_model``.
_XGBOOST_CLASSES = ("Booster", "XGBClassifier", "XGBRegressor", "XGBRanker", "XGBRFClassifier", "XGBRFRegressor")
#: Packages whose safe-state classes load_bundle may import by the name recorded in a bundle.
_TRUSTED_PACKAGES = ("privfed",)
#: Bundles written before privfed became one import package name ``pipelines.…`` classes.
_LEGACY_PREFIX = "pipelines."
#: The files each model family is stored in; load_bundle reads only these, after checking their sha256.
_FAMILY_FILES = {
    "xgboost": ("model.ubj",),
    "sklearn": ("model.skops",),
    "torch-safe-state": (ARCHITECTURE_FILE, "model.safetensors"),
    "torch-module": (ARCHITECTURE_FILE, "model.safetensors"),
}
_BUNDLE_FILES = (LEDGER_FILE, EVIDENCE_FILE, MODEL_CARD_FILE, ARCHITECTURE_FILE,
                 "model.ubj", "model.skops", "model.safetensors")


class BundleError(ValueError):
    """A bundle is malformed, or would need an unsafe step (unpickling, untrusted types) to load."""


class BundleIntegrityError(BundleError, LedgerIntegrityError):
    """A bundle file does not match the sha256 its ledger records."""


# --- model families -------------------------------------------------------------------------------
def _qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _model_family(model: Any) -> str:
    """The bundle family of ``model``; libraries are only consulted if already imported."""
    if callable(getattr(model, "get_safe_state", None)) and callable(getattr(type(model), "from_safe_state", None)):
        return "torch-safe-state"
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(model, torch.nn.Module):
        return "torch-module"
    xgboost = sys.modules.get("xgboost")
    if xgboost is not None and isinstance(model, (xgboost.Booster, xgboost.XGBModel)):
        return "xgboost"
    sklearn_base = sys.modules.get("sklearn.base")
    if sklearn_base is not None and isinstance(model, sklearn_base.BaseEstimator):
        return "sklearn"
    raise TypeError(
        f"model must be an xgboost model, a scikit-learn estimator, a torch.nn.Module or an object with "
        f"get_safe_state()/from_safe_state() (e.g. privfed.TorchClassifier); got {type(model).__name__}"
    )


def _write_model(model: Any, family: str, directory: Path) -> dict[str, Any]:
    """Write ``model``'s files; return the fingerprint entry (without hashes)."""
    if family == "xgboost":
        import xgboost

        name = type(model).__name__
        if name not in _XGBOOST_CLASSES or getattr(xgboost, name) is not type(model):
            raise TypeError(f"model's xgboost class must be one of {_XGBOOST_CLASSES}, got {_qualified_name(type(model))}")
        model.save_model(os.fspath(directory / "model.ubj"))
        return {"family": family, "class": f"xgboost.{name}", "format": "xgboost UBJSON (save_model)",
                "files": ["model.ubj"]}
    if family == "sklearn":
        import skops.io

        path = directory / "model.skops"
        try:
            skops.io.dump(model, path)
        except Exception as error:  # skops reduces every attribute; some objects (torch tensors) cannot be
            path.unlink(missing_ok=True)
            raise TypeError(
                f"model {type(model).__name__} could not be written with skops ({type(error).__name__}: {error}); "
                "a privfed pipeline is saved through its final_model_, a torch network through TorchClassifier"
            ) from None
        untrusted = sorted(set(skops.io.get_untrusted_types(file=path)) - set(SKOPS_TRUSTED_TYPES))
        if untrusted:
            path.unlink()
            raise TypeError(
                f"model contains types outside privfed's trusted list, which could not be loaded safely: {untrusted}"
            )
        return {"family": family, "class": _qualified_name(type(model)),
                "format": "skops (loaded with an explicit trusted-type list)", "files": ["model.skops"]}
    if family == "torch-safe-state":
        import safetensors.numpy

        spec, tensors = model.get_safe_state()
        arrays = {str(name): np.ascontiguousarray(value) for name, value in tensors.items()}
        for name, array in arrays.items():
            if array.dtype == object:
                raise TypeError(f"get_safe_state() tensor {name!r} has dtype object; tensors must be numeric")
        try:
            architecture = json.dumps({"class": _qualified_name(type(model)), "spec": spec}, indent=2, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise TypeError(f"get_safe_state()'s spec must be JSON-serialisable: {error}") from None
        (directory / ARCHITECTURE_FILE).write_text(architecture)
        safetensors.numpy.save_file(arrays, os.fspath(directory / "model.safetensors"))
        return {"family": family, "class": _qualified_name(type(model)),
                "format": "safetensors + JSON architecture spec", "files": [ARCHITECTURE_FILE, "model.safetensors"]}
    import safetensors.torch  # family == "torch-module"

    state = model.state_dict()
    architecture = {"class": _qualified_name(type(model)), "repr": repr(model),
                    "state": {name: {"shape": list(t.shape), "dtype": str(t.dtype)} for name, t in state.items()}}
    (directory / ARCHITECTURE_FILE).write_text(json.dumps(architecture, indent=2))
    safetensors.torch.save_model(model, os.fspath(directory / "model.safetensors"))
    return {"family": family, "class": _qualified_name(type(model)),
            "format": "safetensors state dict (the module is rebuilt by the caller)",
            "files": [ARCHITECTURE_FILE, "model.safetensors"]}


def _safe_state_class(recorded: str, model_class: type | None) -> type:
    if model_class is not None:
        if model_class.__qualname__ != recorded.rsplit(".", 1)[-1]:
            raise BundleError(f"model_class is {_qualified_name(model_class)} but the bundle was saved from {recorded}")
        return model_class
    if recorded.startswith(_LEGACY_PREFIX):
        recorded = "privfed." + recorded
    module_name, _, class_name = recorded.rpartition(".")
    if module_name.split(".")[0] not in _TRUSTED_PACKAGES:
        raise BundleError(
            f"the bundle's model class {recorded} is outside privfed's packages {_TRUSTED_PACKAGES}; "
            "privfed does not import code named by a bundle: pass load_bundle(path, model_class=...)"
        )
    cls = getattr(importlib.import_module(module_name), class_name, None)
    if not callable(getattr(cls, "from_safe_state", None)):
        raise BundleError(f"the bundle's model class {recorded} has no from_safe_state()")
    return cls


def _read_model(
    fingerprint: Mapping[str, Any], directory: Path, *, module: Any, model_class: type | None,
    module_fn: Callable[..., Any] | None,
) -> Any:
    family, recorded = fingerprint["family"], fingerprint["class"]
    if family == "xgboost":
        import xgboost

        name = recorded.removeprefix("xgboost.")
        if name not in _XGBOOST_CLASSES:
            raise BundleError(f"the bundle's xgboost class must be one of {_XGBOOST_CLASSES}, got {recorded!r}")
        model = getattr(xgboost, name)()
        model.load_model(os.fspath(directory / "model.ubj"))
        return model
    if family == "sklearn":
        import skops.io

        path = directory / "model.skops"
        untrusted = skops.io.get_untrusted_types(file=path)
        refused = sorted(set(untrusted) - set(SKOPS_TRUSTED_TYPES))
        if refused:
            raise BundleError(
                f"model.skops needs types outside privfed's trusted list {refused}; refusing to load it "
                "(they could execute code)"
            )
        return skops.io.load(path, trusted=list(untrusted))
    if family == "torch-safe-state":
        import safetensors.numpy

        architecture = json.loads((directory / ARCHITECTURE_FILE).read_text(encoding="utf-8"))

        cls = _safe_state_class(recorded, model_class)
        tensors = safetensors.numpy.load_file(os.fspath(directory / "model.safetensors"))
        if module_fn is None:
            return cls.from_safe_state(architecture["spec"], tensors)
        return cls.from_safe_state(architecture["spec"], tensors, module_fn=module_fn)
    import safetensors.torch  # family == "torch-module"

    if module is None:
        raise BundleError(
            f"this bundle holds the state dict of a plain torch module ({recorded}); build the module with the "
            "same architecture and pass load_bundle(path, module=...)"
        )
    safetensors.torch.load_model(module, os.fspath(directory / "model.safetensors"), strict=True)
    return module


# --- public API -------------------------------------------------------------------------------------
def save_bundle(
    model: Any,
    path: str | os.PathLike[str],
    ledger: Ledger | None = None,
    evidence: Mapping[str, np.ndarray] | None = None,
    *,
    overwrite: bool = False,
) -> Path:
    """Write ``model`` with its privacy ledger as a bundle directory.

    Parameters
    ----------
    model:
        An xgboost model (``Booster`` or ``XGBClassifier``/…), a scikit-learn
        estimator (saved with skops), an object with ``get_safe_state()`` /
        ``from_safe_state()`` (``pipelines.TorchClassifier``), or a plain
        ``torch.nn.Module`` (its state dict; loading needs the module). A fitted
        privfed pipeline (an object with ``final_model_`` and ``ledger_``, such as
        ``FedKT``) stands for its final model, with its own ledger by default.
    path:
        The bundle directory; created if missing.
    ledger:
        The model's :class:`~accounting.ledger.Ledger` (default: an empty one, and
        the card says no privacy guarantee is recorded). Not modified: the bundle's
        copy receives the model's fingerprint.
    evidence:
        Private evidence to ship for auditors, normally ``ledger.evidence()``;
        checked against the ledger's commitments first. Default: none, so the bundle
        holds no private data.
    overwrite:
        Allow writing into a non-empty directory (bundle files there are replaced).

    Returns
    -------
    pathlib.Path
        The bundle directory.
    """
    if hasattr(model, "final_model_") and hasattr(model, "ledger_"):
        ledger = model.ledger_ if ledger is None else ledger
        model = model.final_model_
    family = _model_family(model)
    if ledger is None:
        ledger = Ledger()
    elif not isinstance(ledger, Ledger):
        raise TypeError(f"ledger must be a privfed Ledger or None, got {type(ledger).__name__}")
    if evidence is not None and not isinstance(evidence, Mapping):
        raise TypeError(f"evidence must be a mapping name → array (ledger.evidence()) or None, got {type(evidence).__name__}")
    directory = Path(path)
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"path must be a directory for the bundle, got the file {directory}")
    if directory.exists() and any(directory.iterdir()) and not overwrite:
        raise FileExistsError(f"path {directory} is not empty; pass overwrite=True to replace a bundle there")
    # A copy: the caller's ledger is left as it was. Checking evidence recomputes every committed curve.
    bundle_ledger = Ledger.from_dict(ledger.to_dict(), evidence=evidence)

    directory.mkdir(parents=True, exist_ok=True)
    for name in _BUNDLE_FILES:
        (directory / name).unlink(missing_ok=True)
    fingerprint = _write_model(model, family, directory)
    fingerprint["files"] = {name: file_sha256(directory / name) for name in fingerprint["files"]}
    bundle_ledger.model_fingerprint = fingerprint
    if evidence is not None:
        np.savez(directory / EVIDENCE_FILE, **{key: np.asarray(value) for key, value in evidence.items()})
        bundle_ledger.evidence_fingerprint = {"file": EVIDENCE_FILE, "sha256": file_sha256(directory / EVIDENCE_FILE)}
    (directory / LEDGER_FILE).write_text(bundle_ledger.to_json(), encoding="utf-8")
    card = render_model_card(bundle_ledger, ledger_sha256=file_sha256(directory / LEDGER_FILE))
    (directory / MODEL_CARD_FILE).write_text(card, encoding="utf-8")
    return directory


def load_bundle(
    path: str | os.PathLike[str],
    *,
    module: Any = None,
    model_class: type | None = None,
    module_fn: Callable[..., Any] | None = None,
) -> tuple[Any, Ledger]:
    """Load a bundle written by :func:`save_bundle`, verifying it first.

    In order: the ledger's format, chain of entries and recorded totals; the
    sha256 of every model file and of ``evidence.npz`` against the ledger (before
    any of them is read); the evidence against each entry's commitment; every
    recomputable curve; and only then the model, from its safe format.

    Parameters
    ----------
    path:
        The bundle directory.
    module:
        For a plain ``torch.nn.Module`` bundle: a module of the same architecture,
        into which the state dict is loaded.
    model_class:
        For a safe-state bundle whose class is outside privfed's packages: the class
        to rebuild it with (its name must match the recorded one).
    module_fn:
        Passed to ``from_safe_state`` for safe-state bundles that need it.

    Returns
    -------
    (model, ledger)
        The ledger holds the evidence when the bundle ships it (``ledger.evidence()``).

    Raises
    ------
    BundleIntegrityError
        A file does not match its recorded sha256.
    BundleError
        The bundle is malformed or would need an unsafe step to load.
    LedgerFormatError, LedgerIntegrityError
        The ledger itself is malformed or inconsistent.
    """
    directory = Path(path)
    ledger_path = directory / LEDGER_FILE
    if not ledger_path.is_file():
        raise BundleError(f"{directory} is not a privfed bundle: it has no {LEDGER_FILE}")
    text = ledger_path.read_text(encoding="utf-8")
    ledger = Ledger.from_json(text)
    fingerprint = ledger.model_fingerprint
    if not fingerprint or not isinstance(fingerprint.get("files"), dict) or not fingerprint["files"]:
        raise BundleError(f"{LEDGER_FILE} records no model files (ledger.model.files): not a bundle's ledger")
    if fingerprint.get("family") not in _FAMILY_FILES:
        raise BundleError(
            f"the bundle's model family {fingerprint.get('family')!r} is not one privfed loads safely "
            f"({', '.join(_FAMILY_FILES)}); refusing — privfed never unpickles a model"
        )
    if not isinstance(fingerprint.get("class"), str):
        raise BundleError(f"{LEDGER_FILE}: ledger.model.class must be a string, got {fingerprint.get('class')!r}")
    if sorted(fingerprint["files"]) != sorted(_FAMILY_FILES[fingerprint["family"]]):
        raise BundleError(
            f"{LEDGER_FILE}: a {fingerprint['family']} model must list exactly the files "
            f"{list(_FAMILY_FILES[fingerprint['family']])}, got {sorted(fingerprint['files'])}"
        )
    for name, recorded in fingerprint["files"].items():
        _check_file(directory, name, recorded, what="model file")

    evidence_record = ledger.evidence_fingerprint
    if evidence_record is not None:
        _check_file(directory, EVIDENCE_FILE, evidence_record.get("sha256"), what="evidence file")
        with np.load(directory / EVIDENCE_FILE, allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in archive.files}
        ledger = Ledger.from_json(text, evidence=arrays)  # checks commitments and recomputes their curves
    elif (directory / EVIDENCE_FILE).exists():
        raise BundleIntegrityError(f"{EVIDENCE_FILE} is present but {LEDGER_FILE} does not reference it: it was added")
    else:
        ledger.verify()
    model = _read_model(fingerprint, directory, module=module, model_class=model_class, module_fn=module_fn)
    return model, ledger


def _check_file(directory: Path, name: str, recorded: object, *, what: str) -> None:
    if Path(name).name != name:
        raise BundleError(f"{LEDGER_FILE} names the {what} {name!r}, which is not a plain file name")
    path = directory / name
    if not path.is_file():
        raise BundleIntegrityError(f"the {what} {name} recorded in {LEDGER_FILE} is missing from {directory}")
    actual = file_sha256(path)
    if actual != recorded:
        raise BundleIntegrityError(
            f"the {what} {name} has sha256 {actual} but {LEDGER_FILE} records {recorded}: "
            "the file was modified or replaced after the bundle was written"
        )
