"""The empirical audits' recording model: a classifier that keeps the labels a pipeline released to it."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone

__all__ = ["ReleasedLabels"]


class ReleasedLabels(ClassifierMixin, BaseEstimator):
    """A classifier that remembers the labels it was trained on (the pipeline's released noisy labels).

    Wraps ``estimator`` (None: learns nothing, for a model nobody uses after the audit); the pipeline fits it
    exactly where it fits its own model, so ``labels_`` holds the very labels the pipeline released.
    """

    def __init__(self, estimator: Any = None) -> None:
        self.estimator = estimator

    def fit(self, X: np.ndarray, y: np.ndarray) -> ReleasedLabels:
        self.labels_ = np.asarray(y).copy()
        self.classes_ = np.unique(self.labels_)
        if self.estimator is not None:
            self.estimator_ = clone(self.estimator).fit(X, y)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.estimator_.predict(X)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return self.estimator_.predict_proba(X)
