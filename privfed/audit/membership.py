"""The empirical check: a membership-inference lower bound on ε against the claim (``docs/audit.md#empirical``).

With labelled samples that were (members) and were not (non-members) in the training data, a loss-threshold
attack on the loaded model gives an ε lower bound (:func:`privfed.audit.empirical.membership_epsilon_lower_bound`);
one above the claimed ε fails.
"""

from __future__ import annotations

import math
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from privfed.accounting.documents import read_npz
from privfed.audit.hygiene import Statement
from privfed.audit.report import AuditInputError, Check, format_epsilon

__all__ = ["empirical_check", "empirical_claim", "read_samples"]


def read_samples(value: object, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(X, y) from an ``.npz`` with arrays ``X`` and ``y`` (read with allow_pickle=False) or an (X, y) pair."""
    if isinstance(value, (str, os.PathLike)):
        path = Path(value)
        if not path.is_file():
            raise AuditInputError(f"{name} file {str(path)!r} does not exist")
        if not zipfile.is_zipfile(path):
            raise AuditInputError(f"{name} file {str(path)!r} is not a NumPy .npz file (save X and y with "
                                  "numpy.savez)")
        try:
            arrays = read_npz(path, f"{name} file {str(path)!r}")
        except ValueError as error:
            raise AuditInputError(str(error)) from None
        if not {"X", "y"} <= set(arrays):
            raise AuditInputError(f"{name} file {str(path)!r} must hold arrays 'X' and 'y', got {sorted(arrays)}")
        X, y = arrays["X"], arrays["y"]
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        X, y = np.asarray(value[0]), np.asarray(value[1])
    else:
        raise AuditInputError(f"{name} must be an .npz path or an (X, y) pair, got {type(value).__name__}")
    if X.ndim < 2 or y.ndim != 1 or len(X) != len(y):
        raise AuditInputError(
            f"{name} must hold X of shape (n, features...) and y of shape (n,), got {X.shape}, {y.shape}"
        )
    return X, y


def empirical_claim(statement: Statement) -> float | None:
    """The ε a membership attack on single examples is held to: example level if recorded, else party level.

    A party-level guarantee covers any change to one party's data, so it bounds
    the influence of one of its examples as well.
    """
    for unit in ("example", "party"):
        if unit in statement.reports:
            return statement.reports[unit].epsilon
    return statement.epsilon


def empirical_check(model: Any, samples: tuple[tuple[np.ndarray, np.ndarray], ...], *, claimed: float | None,
                    delta: float | None, confidence: float,
                    random_state: int | None) -> tuple[Check, dict[str, Any] | None]:
    """The membership-inference lower bound on ``model`` against ``claimed``; the check and the report's numbers."""
    name = "membership inference"
    if model is None:
        return Check(name, "warn", "not run: the model could not be loaded safely",
                     "no empirical evidence either way.", "empirical"), None
    from privfed.audit.empirical import membership_epsilon_lower_bound, true_label_scores  # SciPy: only with samples

    (X_in, y_in), (X_out, y_out) = samples
    bound = membership_epsilon_lower_bound(
        true_label_scores(model, X_in, y_in), true_label_scores(model, X_out, y_out),
        delta=0.0 if delta is None else delta, confidence=confidence, random_state=random_state,
    )
    lo_t, hi_t = bound.tpr_interval
    lo_f, hi_f = bound.fpr_interval
    detail = (f"loss-threshold attack: TPR = {bound.tpr:.3f} [{lo_t:.3f}, {hi_t:.3f}], FPR = {bound.fpr:.3f} "
              f"[{lo_f:.3f}, {hi_f:.3f}] on {bound.members_evaluated} + {bound.non_members_evaluated} "
              "held-out samples; "
              f"ε ≥ {math.floor(bound.epsilon_lower * 1000) / 1000:.3f} (rounded down: a lower bound) with "
              f"{confidence:.0%} confidence; claimed ε = {format_epsilon(claimed)}")
    result = {**bound.to_dict(), "claimed_epsilon": claimed}
    if claimed is None:
        return Check(name, "warn", detail, "there is no claimed ε to compare the measured leakage with.",
                     "empirical"), result
    if bound.epsilon_lower > claimed:
        return Check(name, "fail", detail + ": the measured leakage exceeds the claim",
                     "an attack on the model itself shows more leakage than the claimed ε allows, so the claim is "
                     "false (or the samples are not from one distribution).", "empirical"), result
    return Check(name, "pass", detail), result
