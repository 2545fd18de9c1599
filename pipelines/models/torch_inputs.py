"""What the torch estimators accept: their inputs checked against the network they have fitted.

A :class:`~pipelines.models.torch_classifier.TorchClassifier` learns the per-example shape and the classes
at its first training call; every later call (prediction, ``partial_fit``, ``fit_soft(warm_start=True)``)
must bring examples of that shape and, where it names them, the same classes. The checks here raise a
one-line ``ValueError`` naming what differs; each takes the estimator, whose fitted attributes
(``input_shape_``, ``classes_``, ``n_features_in_``) they read and never change.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_array, check_is_fitted, check_X_y, validate_data

__all__ = [
    "check_example_shape",
    "check_fitted_X",
    "check_nonnegative_finite",
    "check_partial_fit_classes",
    "check_partial_fit_data",
    "check_warm_start",
]


def check_nonnegative_finite(name: str, value: object) -> float:
    """``value`` as a float, which must be a finite real number >= 0 (a hyper-parameter such as ``weight_decay``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number >= 0, got {value!r}")
    if not (math.isfinite(value) and float(value) >= 0):
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return float(value)


def check_fitted_X(estimator: BaseEstimator, X: Any) -> np.ndarray:
    """``X`` for prediction: float32, with the per-example shape seen in ``fit`` (the estimator must be fitted)."""
    check_is_fitted(estimator)
    if len(estimator.input_shape_) == 1:
        return validate_data(estimator, X, reset=False, dtype=np.float32)
    return check_example_shape(estimator, check_array(X, allow_nd=True, dtype=np.float32))


def check_example_shape(estimator: BaseEstimator, X: np.ndarray) -> np.ndarray:
    """``X``, whose examples must have the shape seen in ``fit`` (for multi-dimensional examples)."""
    if X.shape[1:] != estimator.input_shape_:
        raise ValueError(
            f"X has examples of shape {X.shape[1:]}, but {type(estimator).__name__} was fitted on shape "
            f"{estimator.input_shape_}"
        )
    return X


def check_warm_start(estimator: BaseEstimator, X: np.ndarray, classes: np.ndarray) -> None:
    """A warm start continues the fitted network: the same classes and the same per-example shape."""
    if not np.array_equal(np.asarray(estimator.classes_), classes):
        raise ValueError(
            f"warm_start=True continues a network fitted on classes {estimator.classes_.tolist()!r}; "
            f"got classes {classes.tolist()!r}"
        )
    if tuple(X.shape[1:]) != estimator.input_shape_:
        raise ValueError(
            f"warm_start=True continues a network fitted on examples of shape {estimator.input_shape_}; "
            f"got shape {tuple(X.shape[1:])}"
        )


def check_partial_fit_classes(estimator: BaseEstimator, classes: Any, *, first: bool) -> None:
    """``partial_fit``'s ``classes``: required on the ``first`` call (at least 2 labels), else equal to ``classes_``."""
    if not first:
        if classes is not None and not np.array_equal(np.unique(np.asarray(classes)), estimator.classes_):
            raise ValueError(
                f"classes={np.asarray(classes).tolist()!r} differs from classes_ {estimator.classes_.tolist()} "
                "of the first call to partial_fit"
            )
        return
    if classes is None:
        raise ValueError("classes must be passed on the first call to partial_fit (every label to be seen)")
    if len(np.unique(np.asarray(classes))) < 2:
        raise ValueError(f"classes must hold at least 2 labels, got {np.asarray(classes).tolist()!r}")


def check_partial_fit_data(
    estimator: BaseEstimator, X: Any, y: Any, first: bool, *, multi_output: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """X as float32 (with the per-example shape of the first call, after it) and y."""
    if first or len(estimator.input_shape_) == 1:
        return validate_data(
            estimator, X, y, allow_nd=True, dtype=np.float32, multi_output=multi_output, reset=first
        )
    X, y = check_X_y(X, y, allow_nd=True, dtype=np.float32, multi_output=multi_output)
    return check_example_shape(estimator, X), y
