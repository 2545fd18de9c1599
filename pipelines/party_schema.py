"""The first exchange of every pipeline: each party describes its data's schema, the server checks them.

A party sends the shape of one example, the labels it holds and its number of
examples — never a row. The server checks the feature shapes against the public
set and the label types against each other, and fixes the federation's classes
(the union of the parties' labels, sorted), before any training result is
aggregated. The class set and the party sizes are what the server learns here;
the in-process drivers use the same exchange, so both run modes see the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .messages import ArraySpec, MessageError, WireMessage

__all__ = ["PartySchema", "describe_party", "federation_classes"]


@dataclass(frozen=True, eq=False)
class PartySchema(WireMessage):
    """Party → server: the shape of one example, the labels present, the number of examples."""

    KIND: ClassVar[str] = "party-schema"
    ARRAYS: ClassVar = {"feature_shape": ArraySpec("iu", 1), "classes": ArraySpec("iufbU", 1)}

    feature_shape: np.ndarray
    classes: np.ndarray
    n_examples: int


def describe_party(X: np.ndarray, y: np.ndarray, *, multilabel: bool = False) -> PartySchema:
    """The schema message of a party's ``(X, y)``.

    ``multilabel=True``: ``y`` is an (n, L) 0/1 indicator array, L >= 2, and ``classes`` are the label
    indices 0..L−1 (which labels are present is not sent).
    """
    if not multilabel:
        return PartySchema(np.asarray(X.shape[1:], dtype=np.int64), np.unique(y), int(len(y)))
    y = np.asarray(y)
    if y.ndim != 2 or len(y) != len(X) or y.shape[1] < 2 or not np.isin(y, (0, 1)).all():
        raise ValueError(
            f"with multilabel=True a party's labels must be a 0/1 indicator array of shape (n = {len(X)}, L >= 2), "
            f"got shape {y.shape}"
        )
    return PartySchema(np.asarray(X.shape[1:], dtype=np.int64), np.arange(y.shape[1]), int(len(y)))


def _label_family(classes: np.ndarray) -> str:
    return "text" if classes.dtype.kind == "U" else "numeric"


def federation_classes(
    schemas: Sequence[PartySchema], feature_shape: tuple[int, ...], names: Sequence[str], *, multilabel: bool = False
) -> np.ndarray:
    """Check every party's schema against the public set's ``feature_shape``; return the sorted class union.

    Raises :class:`MessageError` naming the first party whose feature shape differs, whose label type
    (numeric or text) differs from the first party's, or which holds no example, and a federation
    whose labels hold a single class. ``multilabel=True``: every party must hold the first party's
    label indices 0..L−1 (the same L).
    """
    for schema, name in zip(schemas, names):
        if multilabel and not np.array_equal(schema.classes, schemas[0].classes):
            raise MessageError(f"{name} has {len(schema.classes)} labels, {names[0]} has {len(schemas[0].classes)}")
        if tuple(int(d) for d in schema.feature_shape) != tuple(feature_shape):
            raise MessageError(
                f"{name} has features of shape {tuple(int(d) for d in schema.feature_shape)}, "
                f"the public set has {tuple(feature_shape)}"
            )
        if schema.n_examples < 1 or len(schema.classes) == 0:
            raise MessageError(f"{name} holds no labelled example")
        family, first = _label_family(schema.classes), _label_family(schemas[0].classes)
        if family != first:
            raise MessageError(f"{name} has {family} labels {schema.classes[:5]}, {names[0]} has {first} labels")
    classes = np.unique(np.concatenate([schema.classes for schema in schemas]))
    if len(classes) < 2:
        raise MessageError(
            f"parties: the labels hold a single class {classes[0].item()!r} across all parties; "
            "at least 2 classes are needed"
        )
    return classes
