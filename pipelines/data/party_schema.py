"""The first exchange of every pipeline: each party describes its data's schema, the server checks them.

A party sends the shape of one example, the labels it holds and its number of
examples — never a row. The server checks the feature shapes against the public
set and the label types against each other, and fixes the federation's classes
(the union of the parties' labels, sorted), before any training result is
aggregated. The class set and the party sizes are what the server learns here;
the in-process drivers use the same exchange, so both run modes see the same.

Both are un-noised statistics of the private data, so a ledger records the
exchange as a release only the coordinator sees (:func:`record_schema_exchange`),
unless every party withholds them: given the federation's public label set
(``describe_party(..., public_classes=...)``), a party checks its labels against
it locally and sends that set and :data:`WITHHELD_SIZE` instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..protocol.messages import ArraySpec, MessageError, WireMessage

if TYPE_CHECKING:  # a Flower party's schema step imports this module: it needs no accounting
    from ...accounting import Ledger

__all__ = [
    "MAX_CLASSES", "WITHHELD_SIZE", "PartySchema", "check_public_classes", "describe_party", "federation_classes",
    "local_schema_exchange", "record_schema_exchange",
]

#: ``n_examples`` of a party that withholds its size (it was given the public label set).
WITHHELD_SIZE = -1
#: The most classes a party's schema, and the federation's class union, may declare. The server allocates
#: public-set × classes arrays from the union, so the bound is checked before anything is allocated.
MAX_CLASSES = 10_000


@dataclass(frozen=True, eq=False)
class PartySchema(WireMessage):
    """Party → server: the shape of one example, the labels present, the number of examples."""

    KIND: ClassVar[str] = "party-schema"
    ARRAYS: ClassVar = {"feature_shape": ArraySpec("iu", 1), "classes": ArraySpec("iufbU", 1)}

    feature_shape: np.ndarray
    classes: np.ndarray
    n_examples: int


def describe_party(X: np.ndarray, y: np.ndarray, *, multilabel: bool = False,
                   public_classes: np.ndarray | None = None) -> PartySchema:
    """The schema message of a party's ``(X, y)``.

    ``multilabel=True``: ``y`` is an (n, L) 0/1 indicator array, L >= 2, and ``classes`` are the label
    indices 0..L−1 (which labels are present is not sent). ``public_classes``: the federation's public
    label set; the party checks its labels against it and sends that set and :data:`WITHHELD_SIZE`, so
    that the schema reveals nothing about its data.
    """
    if public_classes is not None and not multilabel:
        public_classes = np.asarray(public_classes)
        outside = np.setdiff1d(np.unique(y), public_classes)
        if len(y) == 0 or len(outside):
            raise ValueError(f"the party's labels must be non-empty and within the public classes "
                             f"{public_classes.tolist()[:10]}, got labels {outside.tolist()[:10]} outside them")
        return PartySchema(np.asarray(X.shape[1:], dtype=np.int64), public_classes, WITHHELD_SIZE)
    if not multilabel:
        return PartySchema(np.asarray(X.shape[1:], dtype=np.int64), np.unique(y), int(len(y)))
    y = np.asarray(y)
    if y.ndim != 2 or len(y) != len(X) or y.shape[1] < 2 or not np.isin(y, (0, 1)).all():
        raise ValueError(
            f"with multilabel=True a party's labels must be a 0/1 indicator array of shape (n = {len(X)}, L >= 2), "
            f"got shape {y.shape}"
        )
    return PartySchema(np.asarray(X.shape[1:], dtype=np.int64), np.arange(y.shape[1]), int(len(y)))


def check_public_classes(classes: object) -> None:
    """Validate an estimator's ``classes=`` (the federation's public label set): None, or at least 2 distinct labels
    in a 1-D array."""
    if classes is None:
        return
    array = np.asarray(classes)
    if array.ndim != 1 or len(np.unique(array)) != len(array) or len(array) < 2:
        raise ValueError(f"classes must be a 1-D array of at least 2 distinct labels, got {classes!r}")


def _label_family(classes: np.ndarray) -> str:
    return "text" if classes.dtype.kind == "U" else "numeric"


def federation_classes(
    schemas: Sequence[PartySchema], feature_shape: tuple[int, ...], names: Sequence[str], *, multilabel: bool = False
) -> np.ndarray:
    """Check every party's schema against the public set's ``feature_shape``; return the sorted class union.

    Raises :class:`MessageError` naming the first party whose feature shape differs, whose label type
    (numeric or text) differs from the first party's, or which holds no example, and a federation
    whose labels hold a single class. ``multilabel=True``: every party must hold the first party's
    label indices 0..L−1 (the same L). A party declaring more than :data:`MAX_CLASSES` classes, or a union
    of more, is refused before any array is built from them.
    """
    for schema, name in zip(schemas, names):
        if len(schema.classes) > MAX_CLASSES:
            raise MessageError(f"{name} declares {len(schema.classes)} classes; a schema may declare at most "
                               f"{MAX_CLASSES}")
    for schema, name in zip(schemas, names):
        if multilabel and not np.array_equal(schema.classes, schemas[0].classes):
            raise MessageError(f"{name} has {len(schema.classes)} labels, {names[0]} has {len(schemas[0].classes)}")
        if tuple(int(d) for d in schema.feature_shape) != tuple(feature_shape):
            raise MessageError(
                f"{name} has features of shape {tuple(int(d) for d in schema.feature_shape)}, "
                f"the public set has {tuple(feature_shape)}"
            )
        if (schema.n_examples < 1 and schema.n_examples != WITHHELD_SIZE) or len(schema.classes) == 0:
            raise MessageError(f"{name} holds no labelled example")
        family, first = _label_family(schema.classes), _label_family(schemas[0].classes)
        if family != first:
            raise MessageError(f"{name} has {family} labels {schema.classes[:5]}, {names[0]} has {first} labels")
    classes = np.unique(np.concatenate([schema.classes for schema in schemas]))
    if len(classes) > MAX_CLASSES:
        raise MessageError(f"parties: the labels hold {len(classes)} classes together; a federation may have at "
                           f"most {MAX_CLASSES}")
    if len(classes) < 2:
        raise MessageError(
            f"parties: the labels hold a single class {classes[0].item()!r} across all parties; "
            "at least 2 classes are needed"
        )
    return classes


def local_schema_exchange(parties: Sequence[tuple[np.ndarray, np.ndarray]], feature_shape: tuple[int, ...], *,
                          public_classes: np.ndarray | None = None
                          ) -> tuple[list[str], list[PartySchema], np.ndarray]:
    """The schema exchange of an in-process run over the (checked) ``parties``, through the messages' wire form.

    ``public_classes``: the federation's public label set (an estimator's ``classes=``); every party then
    withholds its size and labels (:func:`describe_party`). Returns the parties' names (``"party i"``), their
    schemas as the server received them, and the federation's classes (:func:`federation_classes` against
    ``feature_shape``).
    """
    names = [f"party {index}" for index in range(len(parties))]
    schemas = [PartySchema.from_record(describe_party(X, y, public_classes=public_classes).to_record(), sender=name)
               for (X, y), name in zip(parties, names)]
    return names, schemas, federation_classes(schemas, feature_shape, names)


def record_schema_exchange(ledger: Ledger, schemas: Sequence[PartySchema] | None = None) -> None:
    """Record what the schema exchange tells the coordinator, unless every party withheld its size and labels.

    ``schemas``: the parties' schemas (None: a pipeline whose exchange always sends them).
    """
    if schemas is not None and schemas and all(schema.n_examples == WITHHELD_SIZE for schema in schemas):
        return
    ledger.record_unaccounted(
        "the schema exchange: each party's number of examples and the labels it holds reach the coordinator in "
        "clear (given the public label set, classes=..., every party withholds them)",
        observers=("coordinator",),
    )
