"""Validation of the parties' data and the public set, shared by every pipeline, before any work starts.

``parties`` is a non-empty sequence of ``(X, y)`` pairs: ``X`` a numeric array of
shape ``(n, features...)`` (one feature shape for every party), ``y`` ``n`` labels,
all numbers or all strings. ``public`` is an unlabeled numeric array of the same
feature shape. Each check raises one ValueError or TypeError naming the argument
(``parties[2]``, ``public``), the value and what is valid, so that a mistake costs
no training time.

Missing values (NaN) are allowed in ``X`` and ``public`` where some are present
(estimators such as ``HistGradientBoostingClassifier`` and XGBoost handle them),
but an array with no value at all, or with infinities, is refused. Labels may not
be missing.

Examples
--------
>>> import numpy as np
>>> parties, public = check_parties([(np.eye(2), [0, 1])], np.ones((3, 2)))
>>> party_classes(parties)
array([0, 1])
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from typing import Any, cast

import numpy as np

__all__ = ["check_multilabel_parties", "check_parties", "check_party_data", "class_codes", "party_classes"]


def _check_features(value: object, name: str) -> np.ndarray:
    """``value`` as a numeric array of shape (n, features...) with n >= 1, some finite values and no infinity."""
    X = np.asarray(value)
    if X.dtype.kind == "O":
        text = next((item for item in X.flat if isinstance(item, (str, bytes))), None)
        if text is not None:
            raise ValueError(
                f"{name} must hold numbers, it holds text (e.g. {text!r}); encode text features as numbers first"
            )
        try:
            X = X.astype(float)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must hold numbers; it holds other objects (e.g. {X.flat[0]!r})") from None
    if X.dtype.kind not in "biuf":
        example = X.flat[0].item() if X.size else None
        raise ValueError(
            f"{name} must hold numbers, got dtype {X.dtype} (e.g. {example!r}); encode text features as numbers first"
        )
    if X.ndim < 2 or len(X) == 0:
        raise ValueError(f"{name} must be a non-empty array of shape (n, features...), got shape {X.shape}")
    if X.dtype.kind == "f":
        if np.isinf(X).any():
            raise ValueError(f"{name} holds infinite values; replace them (or drop those rows) first")
        if np.isnan(X).all():
            raise ValueError(f"{name} holds no value at all: every entry is NaN")
    return X


def _label_kind(item: object) -> str:
    if isinstance(item, (str, np.str_)):
        return "string"
    if isinstance(item, (numbers.Number, np.bool_)) and not (isinstance(item, float) and item != item):
        return "number"
    return "missing" if item is None or (isinstance(item, float) and item != item) else type(item).__name__


def _check_labels(value: object, name: str) -> np.ndarray:
    """``value`` as a 1-d array of labels that are all numbers or all strings, none missing."""
    y = np.asarray(value)
    if y.dtype.kind in "OUS" and not (isinstance(value, np.ndarray) and y.dtype.kind in "US"):
        # Object arrays, and Python sequences numpy turned into strings ([1, "a"] becomes ["1", "a"]).
        items = y.tolist() if y.dtype.kind == "O" else list(cast(Iterable[Any], value))  # a Python sequence
        kinds = {_label_kind(item) for item in items}
        if "missing" in kinds:
            raise ValueError(f"{name} has missing labels (None or NaN); every example needs a label")
        if len(kinds) > 1:
            first = {kind: next(item for item in items if _label_kind(item) == kind) for kind in sorted(kinds)}
            shown = " and ".join(f"{item!r} ({kind})" for kind, item in first.items())
            raise ValueError(
                f"{name} mixes label types: {shown}; give every label as a number or every one as a string"
            )
        if kinds and kinds != {"string"} and kinds != {"number"}:
            raise ValueError(f"{name} must hold numbers or strings, got {kinds.pop()} labels")
        y = np.asarray(items) if kinds else y
    if y.dtype.kind == "f" and np.isnan(y).any():
        raise ValueError(f"{name} has missing labels (NaN); every example needs a label")
    return y


def check_party_data(parties: object) -> list[tuple[np.ndarray, np.ndarray]]:
    """Validate ``parties``, a non-empty sequence of ``(X, y)`` with one feature shape and one label type."""
    if isinstance(parties, (str, bytes)) or not isinstance(parties, Sequence) or len(parties) == 0:
        raise ValueError(f"parties must be a non-empty sequence of (X, y) pairs, got {type(parties).__name__}")
    checked: list[tuple[np.ndarray, np.ndarray]] = []
    for index, party in enumerate(parties):
        if not isinstance(party, (tuple, list)) or len(party) != 2:
            raise ValueError(f"parties[{index}] must be an (X, y) pair, got {type(party).__name__}")
        X = _check_features(party[0], f"parties[{index}] X")
        y = _check_labels(party[1], f"parties[{index}] y")
        if y.ndim != 1 or len(X) != len(y):
            raise ValueError(
                f"parties[{index}] must hold X of shape (n, features...) and y of shape (n,) with n >= 1; "
                f"got X {X.shape} and y {y.shape}"
            )
        if checked:
            if X.shape[1:] != checked[0][0].shape[1:]:
                raise ValueError(
                    f"parties[{index}] has features of shape {X.shape[1:]}, parties[0] has {checked[0][0].shape[1:]}"
                )
            if (y.dtype.kind in "US") != (checked[0][1].dtype.kind in "US"):
                kinds = ["strings" if labels.dtype.kind in "US" else "numbers" for labels in (checked[0][1], y)]
                raise ValueError(
                    f"parties[{index}] y holds {kinds[1]} but parties[0] y holds {kinds[0]}; "
                    "give every party's labels one type"
                )
        checked.append((X, y))
    return checked


def check_parties(parties: object, public: object) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """Validate ``parties`` (see :func:`check_party_data`) and the unlabeled ``public`` set."""
    checked = check_party_data(parties)
    public = _check_features(public, "public")
    feature_shape = checked[0][0].shape[1:]
    if public.shape[1:] != feature_shape:
        raise ValueError(f"public has features of shape {public.shape[1:]}, the parties have {feature_shape}")
    return checked, public


def party_classes(parties: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """The sorted labels of all (checked) parties; at least two are needed to learn anything."""
    classes = np.unique(np.concatenate([y for _, y in parties]))
    if len(classes) < 2:
        raise ValueError(
            f"parties: the labels hold a single class {classes[0].item()!r} across all parties; "
            "at least 2 classes are needed"
        )
    return classes


def check_multilabel_parties(parties: object, public: object) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """Validate multi-label ``parties`` (``(X, Y)`` pairs, Y an (n, L >= 2) 0/1 indicator array, one L) and ``public``.

    Returns the parties with Y as int64 indicators, and the public set (checked as :func:`check_parties` does).
    """
    checked: list[tuple[np.ndarray, np.ndarray]] = []
    if isinstance(parties, (str, bytes)) or not isinstance(parties, Sequence) or len(parties) == 0:
        raise ValueError(f"parties must be a non-empty sequence of (X, Y) pairs, got {type(parties).__name__}")
    for index, party in enumerate(parties):
        X, Y = np.asarray(party[0]), np.asarray(party[1])
        if X.ndim < 2 or Y.ndim != 2 or len(X) != len(Y) or Y.shape[1] < 2 or not np.isin(Y, (0, 1)).all():
            raise ValueError(
                f"parties[{index}] must hold X of shape (n, features...) and a 0/1 indicator Y of shape "
                f"(n, L >= 2) with multilabel=True; got X {X.shape} and Y {Y.shape}"
            )
        if checked and Y.shape[1] != checked[0][1].shape[1]:
            raise ValueError(f"parties[{index}] has {Y.shape[1]} labels, parties[0] has {checked[0][1].shape[1]}")
        checked.append((X, Y.astype(np.int64)))
    _, public = check_parties([(X, np.zeros(len(X))) for X, _ in checked], public)
    return checked, public


def class_codes(classes: np.ndarray, y: np.ndarray, *, party: str) -> np.ndarray:
    """A party's labels ``y`` as codes 0..C−1 into the federation's sorted ``classes``; ValueError naming
    ``party`` when it holds a label outside them."""
    codes = np.searchsorted(classes, y).clip(0, len(classes) - 1)
    if not np.array_equal(classes[codes], y):
        raise ValueError(f"{party} holds labels outside the federation's classes {classes.tolist()}")
    return codes
