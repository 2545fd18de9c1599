"""Is the published model any use? Accuracy on labelled held-out data, against the majority-class rate.

A private model can be useless: enough noise makes its labels random. :func:`evaluate_accuracy` measures a
fitted model on a labelled test set and names the bar it must clear — the accuracy of always answering the
test set's most frequent class — and :func:`accuracy_line` says it in one line, with **near chance** when
the model closes less than :data:`NEAR_CHANCE_FRACTION` of the gap between that bar and a perfect score.
The metrics' names (``test_accuracy``, ``test_majority_class_rate``, ``test_examples``) are what the model
card (:mod:`privfed.bundle.model_card`) reads to print the same verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from privfed.pipelines.protocol.preflight import NEAR_CHANCE_FRACTION, is_near_chance

__all__ = ["NEAR_CHANCE_FRACTION", "accuracy_line", "evaluate_accuracy", "is_near_chance"]


def evaluate_accuracy(model: Any, X: Any, y: Any) -> dict[str, float]:
    """``{"test_accuracy", "test_majority_class_rate", "test_examples"}`` of ``model`` on labelled ``(X, y)``."""
    y = np.asarray(y)
    if y.ndim != 1 or len(y) == 0 or len(X) != len(y):
        raise ValueError(f"the test set must hold as many labels as rows (one label each), got {len(X)} rows and "
                         f"labels of shape {y.shape}")
    predictions = np.asarray(model.predict(X))
    _, counts = np.unique(y, return_counts=True)
    return {"test_accuracy": float(np.mean(predictions == y)),
            "test_majority_class_rate": float(counts.max() / len(y)), "test_examples": float(len(y))}


def accuracy_line(metrics: Mapping[str, float]) -> str | None:
    """One line stating the test accuracy and the majority-class bar, "near chance" plainly; None without them."""
    if not {"test_accuracy", "test_majority_class_rate"} <= set(metrics):
        return None
    accuracy, bar = metrics["test_accuracy"], metrics["test_majority_class_rate"]
    examples = f" on {int(metrics['test_examples']):,} test examples" if "test_examples" in metrics else ""
    line = f"test accuracy {accuracy:.3f}{examples} (always answering the majority class: {bar:.3f})"
    if is_near_chance(accuracy, bar):
        line += ("; NEAR CHANCE: this model is not useful — add less noise (a larger gamma, a smaller sigma, more "
                 "epsilon) or more data per party")
    return line
