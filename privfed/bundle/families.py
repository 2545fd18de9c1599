"""The model families a bundle holds, each in a format that cannot execute code when read.

* ``xgboost``: xgboost's own UBJSON (``Booster.save_model``), rebuilt as the xgboost class it was saved from;
* ``sklearn``: skops, loaded with skops' default-trusted types plus :data:`SKOPS_TRUSTED_TYPES`, nothing else;
* ``torch-safe-state``: an object with ``get_safe_state()``/``from_safe_state()`` (``privfed.TorchClassifier``):
  its tensors in safetensors and its JSON spec in ``architecture.json``; rebuilt by the caller's class or the
  privfed class the bundle names (a ``privfed.pipelines`` class by its name in ``privfed.pipelines.__all__``,
  wherever its module was when the bundle was saved);
* ``torch-module``: a plain ``torch.nn.Module``'s state dict in safetensors, loaded into a module the caller builds.

:func:`write_model` writes a model's files, :func:`read_model` rebuilds it from bytes already verified
(:mod:`privfed.bundle.load`); neither unpickles. Libraries are imported only by the family that needs them.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from privfed.accounting.documents import parse_json
from privfed.bundle.layout import ARCHITECTURE_FILE
from privfed.bundle.manifest import BundleError
from privfed.bundle.skops_import import import_skops_io

__all__ = ["FAMILY_FILES", "SKOPS_TRUSTED_TYPES", "model_family", "read_model", "write_model"]

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
#: The package whose safe-state classes a bundle names by module: resolved by class name among its exports.
_PIPELINES_PACKAGE = "privfed.pipelines"
#: A recorded class name: dotted Python identifiers, nothing else.
_CLASS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")
#: The files each model family is stored in; load_bundle reads only these, after checking their sha256.
FAMILY_FILES = {
    "xgboost": ("model.ubj",),
    "sklearn": ("model.skops",),
    "torch-safe-state": (ARCHITECTURE_FILE, "model.safetensors"),
    "torch-module": (ARCHITECTURE_FILE, "model.safetensors"),
}


def _qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def model_family(model: Any) -> str:
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


def write_model(model: Any, family: str, directory: Path) -> dict[str, Any]:
    """Write ``model``'s files; return the fingerprint entry (without hashes)."""
    if family == "xgboost":
        import xgboost

        name = type(model).__name__
        if name not in _XGBOOST_CLASSES or getattr(xgboost, name) is not type(model):
            raise TypeError(
                f"model's xgboost class must be one of {_XGBOOST_CLASSES}, got {_qualified_name(type(model))}"
            )
        model.save_model(os.fspath(directory / "model.ubj"))
        return {"family": family, "class": f"xgboost.{name}", "format": "xgboost UBJSON (save_model)",
                "files": ["model.ubj"]}
    if family == "sklearn":
        skops_io = import_skops_io()

        path = directory / "model.skops"
        try:
            skops_io.dump(model, path)
        except Exception as error:  # skops reduces every attribute; some objects (torch tensors) cannot be
            path.unlink(missing_ok=True)
            raise TypeError(
                f"model {type(model).__name__} could not be written with skops ({type(error).__name__}: {error}); "
                "a privfed pipeline is saved through its final_model_, a torch network through TorchClassifier"
            ) from None
        untrusted = sorted(set(skops_io.get_untrusted_types(file=path)) - set(SKOPS_TRUSTED_TYPES))
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
    """The class a safe-state bundle is rebuilt with: ``model_class``, or the privfed class the bundle names."""
    if model_class is not None:
        if model_class.__qualname__ != recorded.rsplit(".", 1)[-1]:
            raise BundleError(f"model_class is {_qualified_name(model_class)} but the bundle was saved from {recorded}")
        return model_class
    if recorded.startswith(_LEGACY_PREFIX):
        recorded = "privfed." + recorded
    if not _CLASS_NAME.fullmatch(recorded):
        raise BundleError(f"the bundle's model class {recorded!r} is not a dotted Python name; refused")
    module_name, _, class_name = recorded.rpartition(".")
    if module_name.split(".")[0] not in _TRUSTED_PACKAGES:
        raise BundleError(
            f"the bundle's model class {recorded} is outside privfed's packages {_TRUSTED_PACKAGES}; "
            "privfed does not import code named by a bundle: pass load_bundle(path, model_class=...)"
        )
    in_pipelines = module_name == _PIPELINES_PACKAGE or module_name.startswith(_PIPELINES_PACKAGE + ".")
    if in_pipelines:
        cls = _exported_pipeline_class(class_name)
    else:
        try:
            cls = getattr(importlib.import_module(module_name), class_name, None)
        except ImportError:
            raise BundleError(f"the bundle's model class {recorded} names no privfed module; refused") from None
    if not _has_safe_state(cls):
        where = f" exported by {_PIPELINES_PACKAGE}" if in_pipelines else ""
        raise BundleError(f"the bundle's model class {recorded} is not a class with get_safe_state()/from_safe_state()"
                          f"{where}; refused")
    return cls


def _exported_pipeline_class(class_name: str) -> object:
    """The object ``privfed.pipelines`` exports as ``class_name`` (None when it exports no such name).

    A pipeline class is found by its name in ``privfed.pipelines.__all__``, not by the module the bundle recorded:
    bundles record the defining module (``privfed.pipelines.torch_models.TorchMLP`` before the modules moved,
    ``pipelines.torch_models.TorchMLP`` before that), which names nothing once privfed's modules move, and the
    recorded module path is never imported.
    """
    pipelines = importlib.import_module(_PIPELINES_PACKAGE)
    return getattr(pipelines, class_name) if class_name in pipelines.__all__ else None


def _has_safe_state(cls: object) -> bool:
    """Whether ``cls`` is a class with the safe-state protocol: ``get_safe_state()`` and ``from_safe_state()``."""
    return isinstance(cls, type) and callable(getattr(cls, "get_safe_state", None)) and callable(
        getattr(cls, "from_safe_state", None))


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def read_model(
    fingerprint: Mapping[str, Any], files: Mapping[str, bytes], *, module: Any, model_class: type | None,
    module_fn: Callable[..., Any] | None,
) -> Any:
    """The model, from the bytes that were verified (never reopened); BundleError for anything unreadable."""
    family, recorded = fingerprint["family"], fingerprint["class"]
    if family == "torch-safe-state":
        cls = _safe_state_class(recorded, model_class)
    elif family == "torch-module" and module is None:
        raise BundleError(
            f"this bundle holds the state dict of a plain torch module ({recorded}); build the module with the "
            "same architecture and pass load_bundle(path, module=...)"
        )
    names = FAMILY_FILES[family]
    try:
        if family == "xgboost":
            import xgboost

            name = recorded.removeprefix("xgboost.")
            if name not in _XGBOOST_CLASSES:
                raise BundleError(f"the bundle's xgboost class must be one of {_XGBOOST_CLASSES}, got {recorded!r}")
            model = getattr(xgboost, name)()
            model.load_model(bytearray(files["model.ubj"]))
            return model
        if family == "sklearn":
            skops_io = import_skops_io()

            data = files["model.skops"]
            untrusted = skops_io.get_untrusted_types(data=data)
            refused = sorted(set(untrusted) - set(SKOPS_TRUSTED_TYPES))
            if refused:
                raise BundleError(
                    f"model.skops needs types outside privfed's trusted list {refused}; refusing to load it "
                    "(they could execute code)"
                )
            return skops_io.loads(data, trusted=list(untrusted))
        if family == "torch-safe-state":
            import safetensors.numpy

            architecture = parse_json(files[ARCHITECTURE_FILE], ARCHITECTURE_FILE)
            tensors = safetensors.numpy.load(files["model.safetensors"])
            if module_fn is None:
                return cls.from_safe_state(architecture["spec"], tensors)
            return cls.from_safe_state(architecture["spec"], tensors, module_fn=module_fn)
        return _fill_module(module, files["model.safetensors"])  # family == "torch-module"
    except BundleError:
        raise
    except Exception as error:  # every reader's own error for a truncated, empty or foreign file
        raise BundleError(
            f"the model file(s) {', '.join(names)} could not be read as {family}: {_first_line(error)}"
        ) from None


def _fill_module(module: Any, data: bytes) -> Any:
    """``module`` filled from a verified ``model.safetensors`` (a JSON header and raw bytes: no pickle, no code).

    The verified bytes go to a private temporary file, which safetensors' own ``load_model`` reads:
    the bundle's file is not opened again after its hash was checked, and tensors that share
    storage in ``module`` (stored once by ``save_model``) are matched as safetensors matches them.
    """
    import tempfile

    import safetensors.torch

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.safetensors"
        path.write_bytes(data)
        missing, unexpected = safetensors.torch.load_model(module, os.fspath(path), strict=False)
    if missing or unexpected:
        raise BundleError(f"model.safetensors does not fit the module given: missing {sorted(missing)}, "
                          f"unexpected {sorted(unexpected)}")
    return module
