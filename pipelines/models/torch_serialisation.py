"""The pickle-free saved form of the torch estimators: JSON-able specs and named numpy arrays.

A fitted :class:`~pipelines.models.torch_classifier.TorchClassifier` (or subclass) saves
itself as ``(spec, tensors)`` (:func:`safe_state`): ``spec`` is a JSON-able
``dict`` (format name and version, class name, hyper-parameters, classes with
their dtype, input shape, loss curve, DP-SGD releases and where their noise came
from), ``tensors`` maps the
network's state-dict names to numpy arrays. :func:`load_safe_state` validates
both (keys, class, dtypes, shapes) before rebuilding the network from the
estimator's own architecture; nothing executable is read. The optimizer's state
travels the same way (:func:`optimizer_state_arrays`,
:func:`optimizer_state_from_arrays`), for clients that keep no object between
rounds. The classes a spec may name register themselves (:func:`register_safe_state_class`); this
module knows none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted
from torch import nn

from ...accounting._checks import check_int_at_least
from ...accounting.dpsgd import DPSGD, compose_dpsgd
from ...accounting.noise_source import NOISE_SECRET, NOISE_SEEDED
from .dp_config import DPConfig
from .torch_training import resolve_device

__all__ = [
    "SAFE_STATE_FORMAT",
    "SAFE_STATE_VERSION",
    "load_safe_state",
    "optimizer_state_arrays",
    "optimizer_state_from_arrays",
    "register_safe_state_class",
    "safe_state",
]

SAFE_STATE_FORMAT = "privfed.torch_classifier"
SAFE_STATE_VERSION = 1

_SPEC_KEYS = ("format", "format_version", "class", "params", "classes", "classes_dtype", "input_shape",
              "n_features_in", "loss_curve")

#: The estimator classes :func:`load_safe_state` rebuilds by the name a spec records (``spec["class"]``).
_SAFE_STATE_CLASSES: dict[str, type[BaseEstimator]] = {}

EstimatorClass = TypeVar("EstimatorClass", bound=type[BaseEstimator])


def register_safe_state_class(cls: EstimatorClass) -> EstimatorClass:
    """Let ``from_safe_state`` rebuild ``cls`` from a spec that names it (``cls.__name__``); returns ``cls``.

    The torch estimators register themselves where they are defined (a class decorator), so that
    ``TorchClassifier.from_safe_state`` loads a ``TorchMLP`` or ``TorchCNN`` spec without this module or
    the base class importing their module.
    """
    _SAFE_STATE_CLASSES[cls.__name__] = cls
    return cls


def safe_state(estimator: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(spec, tensors)`` of a fitted torch estimator (the body of ``TorchClassifier.get_safe_state``)."""
    check_is_fitted(estimator)
    params = estimator.get_params(deep=False)
    module_fn = params.pop("module_fn", None)
    spec: dict[str, Any] = {
        "format": SAFE_STATE_FORMAT,
        "format_version": SAFE_STATE_VERSION,
        "class": type(estimator).__name__,
        "params": {name: _json_param(name, value) for name, value in params.items()},
        "classes": _json_classes(estimator.classes_),
        "classes_dtype": estimator.classes_.dtype.str,
        "input_shape": list(estimator.input_shape_),
        "n_features_in": estimator.n_features_in_,
        "loss_curve": [float(loss) for loss in estimator.loss_curve_],
        "architecture": str(estimator.module_),
        "torch_version": torch.__version__,
    }
    if module_fn is not None:
        spec["module_fn"] = f"{getattr(module_fn, '__module__', '?')}.{getattr(module_fn, '__qualname__', '?')}"
    if hasattr(estimator, "feature_names_in_"):
        spec["feature_names_in"] = [str(name) for name in estimator.feature_names_in_]
    if hasattr(estimator, "dp_releases_"):
        spec["dp_releases"] = [release.parameters() for release in estimator.dp_releases_]
        spec["dp_noise"] = [dict(provenance) for provenance in estimator.dp_noise_]
    tensors = {name: tensor.detach().cpu().numpy().copy() for name, tensor in estimator.module_.state_dict().items()}
    return spec, tensors


def load_safe_state(
    cls: type[BaseEstimator],
    spec: Mapping[str, Any],
    tensors: Mapping[str, np.ndarray],
    *,
    module_fn: Callable[..., nn.Module] | None,
) -> Any:
    """The fitted estimator that :func:`safe_state` described (the body of ``TorchClassifier.from_safe_state``).

    ``spec["class"]`` names ``cls`` or one of the registered classes (:func:`register_safe_state_class`),
    which must be a subclass of ``cls``. The estimator's ``_check_architecture`` validates the stored
    hyper-parameters and its ``_build_module`` rebuilds the network, whose state dict must
    match ``tensors`` exactly.
    """
    target = _class_for_spec(cls, spec)
    params: dict[str, Any] = {
        name: tuple(value) if isinstance(value, list) else value for name, value in spec["params"].items()
    }
    params.setdefault("dp", None)  # states saved before DP-SGD training existed
    params.setdefault("noise_seed", None)  # states saved before DP-SGD noise came from a NoiseSource
    if isinstance(params.get("dp"), Mapping):
        params["dp"] = DPConfig(**params["dp"])
    expected = set(target._get_param_names()) - {"module_fn"}
    if set(params) != expected:
        raise ValueError(
            f"spec['params'] for {target.__name__} must have exactly the keys {sorted(expected)}; "
            f"missing {sorted(expected - set(params))}, unexpected {sorted(set(params) - expected)}"
        )
    if "module_fn" in target._get_param_names():
        if module_fn is None:
            raise ValueError(
                f"this {target.__name__} was built by a user module_fn "
                f"({spec.get('module_fn', 'unknown')}), which is not stored; pass module_fn= to rebuild it"
            )
        estimator = target(module_fn, **params)
    else:
        if module_fn is not None:
            raise ValueError(f"{target.__name__} rebuilds its network from spec; module_fn must be None")
        estimator = target(**params)
    estimator._check_architecture()
    estimator.classes_ = _classes_from_spec(spec)
    estimator._record_input_shape(np.empty((0, *_int_list("input_shape", spec["input_shape"]))))
    if estimator.n_features_in_ != spec["n_features_in"]:
        raise ValueError(
            f"spec['n_features_in'] = {spec['n_features_in']!r} does not match input_shape {spec['input_shape']}"
        )
    if "feature_names_in" in spec:
        estimator.feature_names_in_ = np.asarray(spec["feature_names_in"], dtype=object)
    estimator.loss_curve_ = [float(loss) for loss in spec["loss_curve"]]
    if spec.get("dp_releases"):
        estimator.dp_releases_ = tuple(DPSGD(**release) for release in spec["dp_releases"])
        estimator.dp_mechanism_ = compose_dpsgd(estimator.dp_releases_)
        estimator.dp_noise_ = _dp_noise_from_spec(spec, len(estimator.dp_releases_))
    device = resolve_device(estimator.device)
    with torch.random.fork_rng(devices=[]):
        module = estimator._build_module(estimator.input_shape_, len(estimator.classes_))
    module.load_state_dict(_state_dict_from_arrays(module, tensors), strict=True)
    estimator.module_ = module.to(device).eval()
    estimator.device_ = device
    return estimator


def optimizer_state_arrays(state: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
    """An optimizer's ``state_dict()`` as ``"<parameter index>.<name>"`` → array (copies); empty for None."""
    state = state or {"state": {}}
    return {f"{index}.{name}": value.detach().cpu().numpy().copy()
            for index, entries in state["state"].items() for name, value in entries.items()
            if isinstance(value, torch.Tensor)}


def optimizer_state_from_arrays(
    arrays: Mapping[str, np.ndarray], *, param_groups: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The ``state_dict()`` that :func:`optimizer_state_arrays` wrote, with ``param_groups``; None when empty."""
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in arrays.items():
        index, _, name = str(key).partition(".")
        if not index.isdigit() or not name:
            raise ValueError(f"optimizer state key {key!r} must be '<parameter index>.<name>'")
        state.setdefault(int(index), {})[name] = torch.from_numpy(np.array(value))
    return {"state": state, "param_groups": param_groups} if state else None


# ------------------------------------------------------------------ spec values
def _json_param(name: str, value: object) -> Any:
    """A hyper-parameter as a JSON value (tuples as lists, devices as strings)."""
    if isinstance(value, np.random.RandomState):
        return None
    if isinstance(value, DPConfig):
        return value.to_dict()
    if isinstance(value, torch.device):
        return str(value)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (tuple, list)):
        return [_json_param(name, item) for item in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"hyper-parameter {name}={value!r} cannot be written to a safe state (not JSON-able)")


def _json_classes(classes: np.ndarray) -> list[Any]:
    if classes.dtype.kind not in "biufUO" or (
        classes.dtype.kind == "O" and not all(isinstance(label, str) for label in classes)
    ):
        raise TypeError(f"classes_ of dtype {classes.dtype} cannot be written to a safe state; use int or str labels")
    return classes.tolist()


def _classes_from_spec(spec: Mapping[str, Any]) -> np.ndarray:
    dtype = np.dtype(spec["classes_dtype"])
    if dtype.kind not in "biufUO":
        raise ValueError(f"spec['classes_dtype'] must be a bool, int, float or str dtype, got {dtype}")
    classes = np.asarray(spec["classes"], dtype=dtype)
    if classes.ndim != 1 or len(classes) < 2:
        raise ValueError(f"spec['classes'] must list at least 2 class labels, got {spec['classes']!r}")
    return classes


def _dp_noise_from_spec(spec: Mapping[str, Any], n_releases: int) -> tuple[dict[str, Any] | None, ...]:
    """``dp_noise_`` from ``spec["dp_noise"]``; None per release for a state saved before it was recorded (its
    noise then derived from ``random_state``)."""
    if "dp_noise" not in spec:
        return (None,) * n_releases
    recorded = spec["dp_noise"]
    if not isinstance(recorded, list) or len(recorded) != n_releases or not all(
            isinstance(entry, Mapping) and entry.get("source") in (NOISE_SECRET, NOISE_SEEDED) for entry in recorded):
        raise ValueError(f"spec['dp_noise'] must list one noise provenance ({{'source': 'secret' or 'seeded', ...}}) "
                         f"per DP-SGD release ({n_releases}), got {recorded!r}")
    return tuple(dict(entry) for entry in recorded)


def _int_list(name: str, values: object) -> tuple[int, ...]:
    if not isinstance(values, list) or not values:
        raise ValueError(f"spec[{name!r}] must be a non-empty list of integers >= 1, got {values!r}")
    return tuple(check_int_at_least(f"spec[{name!r}]", value, 1) for value in values)


def _class_for_spec(cls: type[BaseEstimator], spec: Mapping[str, Any]) -> type[BaseEstimator]:
    if not isinstance(spec, Mapping):
        raise TypeError(f"spec must be a mapping, got {type(spec).__name__}")
    missing = [key for key in _SPEC_KEYS if key not in spec]
    if missing:
        raise ValueError(f"spec is missing the keys {missing}")
    if spec["format"] != SAFE_STATE_FORMAT:
        raise ValueError(f"spec['format'] must be {SAFE_STATE_FORMAT!r}, got {spec['format']!r}")
    if spec["format_version"] != SAFE_STATE_VERSION:
        raise ValueError(
            f"spec['format_version'] {spec['format_version']!r} is not supported (this privfed reads "
            f"version {SAFE_STATE_VERSION})"
        )
    name = spec["class"]
    target = cls if name == cls.__name__ else _SAFE_STATE_CLASSES.get(name)
    if target is None or not issubclass(target, cls):
        raise ValueError(f"spec['class'] is {name!r}, which {cls.__name__}.from_safe_state cannot load")
    if not isinstance(spec["params"], Mapping):
        raise ValueError(f"spec['params'] must be a mapping, got {type(spec['params']).__name__}")
    return target


def _state_dict_from_arrays(module: nn.Module, tensors: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """Check ``tensors`` against the module's state dict (names, shapes, dtypes) and convert them."""
    expected = module.state_dict()
    missing, unexpected = sorted(expected.keys() - tensors.keys()), sorted(tensors.keys() - expected.keys())
    if missing or unexpected:
        raise ValueError(f"tensors do not match the network: missing {missing}, unexpected {unexpected}")
    state = {}
    for name, reference in expected.items():
        array = tensors[name]
        if not isinstance(array, np.ndarray):
            raise TypeError(f"tensors[{name!r}] must be a numpy array, got {type(array).__name__}")
        tensor = torch.from_numpy(np.array(array, copy=True))
        if tensor.shape != reference.shape or tensor.dtype != reference.dtype:
            raise ValueError(
                f"tensors[{name!r}] has shape {tuple(tensor.shape)} and dtype {tensor.dtype}; the network expects "
                f"{tuple(reference.shape)} and {reference.dtype}"
            )
        state[name] = tensor
    return state
