"""Fitting any classifier on a label subset, in the pipeline's global class space.

Teachers and students see subsets of the data in which some classes may be
missing, or only one class present. scikit-learn-style estimators handle this
unevenly (XGBoost insists on labels 0..K−1), so pipelines fit every model
through :func:`fit_classifier`, which encodes the present classes contiguously,
falls back to a constant predictor for single-class data, and maps predictions
back to global class codes 0..C−1.

A DP-trained model (``dp=`` set) is fitted in the global class space instead:
which classes a party's data holds is itself private, and neither the class
encoding nor a constant predictor is covered by DP-SGD, so every class gets an
output whatever the data (``fit_soft`` on one-hot targets, the same cross-entropy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..protocol.dp_ledger import require_public_sample_rate

__all__ = ["FittedClassifier", "dp_release", "fit_classifier", "is_dp_trained", "is_torch_classifier",
           "with_noise_seed", "with_seed"]


def is_torch_classifier(model: Any) -> bool:
    """A TorchClassifier (``fit_soft`` and ``predict_log_proba``: learns from soft targets, continues training),
    as opposed to a scikit-learn classifier."""
    return hasattr(model, "fit_soft") and hasattr(model, "predict_log_proba")


def is_dp_trained(prototype: Any) -> bool:
    """Whether ``prototype`` trains with DP-SGD (a torch adapter with ``dp=`` set)."""
    return getattr(prototype, "dp", None) is not None


def dp_release(model: Any) -> Any:
    """The DP-SGD mechanism a fitted model (or :class:`FittedClassifier`) was trained with, or None."""
    estimator = model.estimator if isinstance(model, FittedClassifier) else model
    return getattr(estimator, "dp_mechanism_", None)


def with_seed(prototype: Any, seed: int | np.integer) -> Any:
    """An unfitted clone of ``prototype`` whose ``random_state`` (if it has one) is ``seed``."""
    from sklearn.base import clone

    estimator = clone(prototype)
    if "random_state" in estimator.get_params(deep=False):
        estimator.set_params(random_state=int(seed))
    return estimator


def with_noise_seed(model: Any, noise_seed: int | None) -> Any:
    """``model`` with its ``noise_seed`` (DP-SGD's noise and Poisson sampling) set, when it has that parameter.

    None (the default everywhere) leaves the model to draw its noise from its own secret source at fit; an int
    makes that noise reproducible (``noise_seed=`` opt-in; the ledger then says every ε is ∞ for its holders).
    A model without the parameter is returned as it is.
    """
    if "noise_seed" in model.get_params(deep=False):
        model.set_params(noise_seed=noise_seed)
    return model


@dataclass(frozen=True, eq=False)
class FittedClassifier:
    """A fitted estimator and the global class codes its own labels 0..K−1 stand for.

    ``estimator`` is ``None`` when the training labels held a single class: the
    classifier then always predicts ``classes[0]``.
    """

    estimator: Any
    classes: np.ndarray
    n_classes: int

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Global class codes, shape (n,)."""
        if self.estimator is None:
            return np.full(len(X), self.classes[0], dtype=np.int64)
        return self.classes[np.asarray(self.estimator.predict(X), dtype=np.int64)]

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Probabilities over all global classes, shape (n, n_classes); absent classes get 0."""
        proba = np.zeros((len(X), self.n_classes))
        if self.estimator is None:
            proba[:, self.classes[0]] = 1.0
        else:
            proba[:, self.classes] = self.estimator.predict_proba(X)
        return proba


def fit_classifier(prototype: Any, X: np.ndarray, y: np.ndarray, *, n_classes: int,
                   seed: int | np.integer) -> FittedClassifier:
    """Fit a clone of ``prototype`` on global class codes ``y`` (integers in 0..n_classes−1).

    A DP-trained prototype must have a public sampling rate
    (:func:`~privfed.pipelines.protocol.dp_ledger.require_public_sample_rate`): checked before training, since its q
    reaches the coordinator.
    """
    if is_dp_trained(prototype):
        require_public_sample_rate(prototype, "a pipeline's DP-trained model")
        estimator = with_seed(prototype, seed)
        estimator.fit_soft(X, np.eye(n_classes)[np.asarray(y, dtype=np.int64)], classes=np.arange(n_classes))
        return FittedClassifier(estimator, np.arange(n_classes), n_classes)
    present, encoded = np.unique(np.asarray(y, dtype=np.int64), return_inverse=True)
    if len(present) == 1:
        return FittedClassifier(None, present, n_classes)
    estimator = with_seed(prototype, seed)
    estimator.fit(X, encoded)
    return FittedClassifier(estimator, present, n_classes)
