"""What crosses the wire between a party and the server: small typed messages of arrays and scalars.

Every pipeline is written as party steps and server steps that exchange frozen
dataclasses derived from :class:`WireMessage`. A message holds numpy arrays and
scalars (``int``, ``float``, ``str``, ``bool``) only, so that its transport form, a
:class:`Record` of named arrays and named scalars, maps one to one onto Flower's
``ArrayRecord`` and ``ConfigRecord`` — and nothing executable can travel: arrays of
Python objects are refused, and no message is ever pickled.

:meth:`WireMessage.from_record` is the one gate a received message passes: it
checks the message kind, the exact set of fields, every array's dtype kind,
number of dimensions and expected shape, every scalar's type, and the total size,
and names the sending party in the error. A party step or server step therefore
only ever sees well-formed messages.

The size of a record (:attr:`Record.nbytes`) is its payload: the arrays' bytes
plus 8 bytes per numeric scalar and the UTF-8 length of each string (the
transport's own framing is not counted). Pipelines report it per message kind
and per party in their ``bandwidth_`` attribute.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

import numpy as np

__all__ = ["ArraySpec", "MessageError", "Record", "Traffic", "WireMessage", "record_sizes"]

Scalar = int | float | str | bool
M = TypeVar("M", bound="WireMessage")

#: Default ceiling on one received record (arrays and scalars), in bytes.
DEFAULT_MAX_BYTES = 256 * 2**20


class MessageError(ValueError):
    """A received message is malformed, wrongly shaped or oversized; the message names the sending party."""


@dataclass(frozen=True)
class ArraySpec:
    """What an array field may hold: numpy dtype kinds (``"i"``, ``"u"``, ``"f"``, ``"b"``, ``"U"``) and ``ndim``.

    ``ndim=None`` accepts any number of dimensions (feature arrays); the receiver then passes the expected shape.
    """

    kinds: str
    ndim: int | None


@dataclass(frozen=True, eq=False)
class Record:
    """A message in transport form: its kind, named arrays and named scalars."""

    kind: str
    arrays: Mapping[str, np.ndarray]
    scalars: Mapping[str, Scalar]

    @property
    def nbytes(self) -> int:
        """Payload bytes: arrays' data, 8 per numeric scalar, UTF-8 length of strings."""
        size = sum(int(np.asarray(a).nbytes) for a in self.arrays.values())
        for value in self.scalars.values():
            size += len(value.encode()) if isinstance(value, str) else 8
        return size


class WireMessage:
    """Base of the messages: frozen dataclasses whose array fields are listed in :attr:`ARRAYS`.

    Subclasses set :attr:`KIND` (the message type, e.g. ``"fedkt-votes"``) and
    :attr:`ARRAYS` (field name → :class:`ArraySpec`); every other field is a scalar
    whose annotation (``int``, ``float``, ``str`` or ``bool``) is enforced on receipt. A scalar annotated
    ``X | None`` (default None) is optional: left out of the record while None, None when absent on receipt.
    """

    KIND: ClassVar[str]
    ARRAYS: ClassVar[Mapping[str, ArraySpec]] = {}

    def to_record(self) -> Record:
        """The transport form (arrays are not copied)."""
        arrays, scalars = {}, {}
        for field in fields(self):  # type: ignore[arg-type]
            value = getattr(self, field.name)
            if field.name in self.ARRAYS:
                arrays[field.name] = np.asarray(value)
            elif value is not None:
                scalars[field.name] = value
        return Record(self.KIND, arrays, scalars)

    @classmethod
    def _scalar_types(cls) -> dict[str, type]:
        hints = typing.get_type_hints(cls)
        return {f.name: hints[f.name] for f in fields(cls) if f.name not in cls.ARRAYS}  # type: ignore[arg-type]

    @classmethod
    def _optional_scalars(cls) -> set[str]:
        """The scalars annotated ``X | None``: absent from a record while None."""
        return {name for name, kind in cls._scalar_types().items() if type(None) in typing.get_args(kind)}

    @classmethod
    def from_record(
        cls: type[M],
        record: Record,
        *,
        sender: str,
        shapes: Mapping[str, tuple[int | None, ...]] | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> M:
        """Validate a received record and build the message, or raise :class:`MessageError` naming ``sender``.

        ``shapes`` gives the expected shape of array fields (``None`` for a free dimension).
        """
        where = f"{sender} sent a malformed {cls.KIND!r} message"
        if record.kind != cls.KIND:
            raise MessageError(f"{sender} sent a {record.kind!r} message where a {cls.KIND!r} message was expected")
        scalar_types, optional = cls._scalar_types(), cls._optional_scalars()
        for got, expected, what in ((record.arrays, cls.ARRAYS, "arrays"), (record.scalars, scalar_types, "scalars")):
            if not set(expected) - optional <= set(got) <= set(expected):
                absent = f" (optional: {sorted(optional)})" if what == "scalars" and optional else ""
                raise MessageError(f"{where}: {what} {sorted(got)}, expected exactly {sorted(expected)}{absent}")
        size = record.nbytes
        if size > max_bytes:
            raise MessageError(f"{sender} sent an oversized {cls.KIND!r} message: {size} bytes, at most {max_bytes}")
        values: dict[str, Any] = {}
        for name, spec in cls.ARRAYS.items():
            array = record.arrays[name]
            if (
                not isinstance(array, np.ndarray)
                or array.dtype.kind not in spec.kinds
                or (spec.ndim is not None and array.ndim != spec.ndim)
            ):
                described = f"{array.dtype} array of {array.ndim} dimensions" if isinstance(array, np.ndarray) else (
                    type(array).__name__
                )
                dimensions = "any number of" if spec.ndim is None else str(spec.ndim)
                raise MessageError(
                    f"{where}: {name} is a {described}, expected {dimensions} dimensions of dtype kind "
                    f"{' or '.join(spec.kinds)}"
                )
            expected_shape = (shapes or {}).get(name)
            if expected_shape is not None and (
                len(expected_shape) != array.ndim
                or any(e is not None and e != g for e, g in zip(expected_shape, array.shape))
            ):
                shown = tuple("*" if e is None else e for e in expected_shape)
                raise MessageError(f"{where}: {name} has shape {array.shape}, expected {shown}")
            values[name] = array
        for name, kind in scalar_types.items():
            if name in optional:
                if name not in record.scalars:
                    values[name] = None
                    continue
                (kind,) = (t for t in typing.get_args(kind) if t is not type(None))
            value = record.scalars[name]
            if kind is bool:
                valid = isinstance(value, bool)
            elif kind is float:
                valid = isinstance(value, (int, float)) and not isinstance(value, bool)
            else:
                valid = isinstance(value, kind) and not isinstance(value, bool)
            if not valid:
                raise MessageError(f"{where}: {name} = {value!r} is not a {kind.__name__}")
            values[name] = float(value) if kind is float else value
        return cls(**values)


def record_sizes(sent: list[list[Record]]) -> dict[str, list[int]]:
    """Bytes per message kind and per party, from the records each party sent (in party order)."""
    kinds = sorted({record.kind for records in sent for record in records})
    return {kind: [sum(r.nbytes for r in records if r.kind == kind) for records in sent] for kind in kinds}


class Traffic:
    """Bytes per message kind and per party over a run of rounds, summed as the parties' records pass.

    Parameters
    ----------
    sizes : dict of ndarray
        Bytes so far per message kind, one entry per party (:func:`record_sizes`'s form, as arrays).
    """

    def __init__(self, sizes: Mapping[str, np.ndarray]) -> None:
        self.sizes = dict(sizes)

    @classmethod
    def of(cls, sent: list[list[Record]]) -> Traffic:
        """The traffic of the records each party sent (in party order), e.g. the schema exchange."""
        return cls({kind: np.asarray(sizes) for kind, sizes in record_sizes(sent).items()})

    def add(self, sent: list[list[Record]]) -> None:
        """Count one more exchange: the records each party sent or received (in party order)."""
        for kind, sizes in record_sizes(sent).items():
            self.sizes[kind] = self.sizes.get(kind, 0) + np.asarray(sizes)

    def totals(self) -> dict[str, list[int]]:
        """Bytes per kind (sorted) and per party, as plain integers (a pipeline's ``bandwidth_``)."""
        return {kind: [int(size) for size in self.sizes[kind]] for kind in sorted(self.sizes)}

    def arrays(self) -> dict[str, np.ndarray]:
        """The counts as named arrays (``traffic.<kind>``), for a round checkpoint."""
        return {f"traffic.{kind}": sizes for kind, sizes in self.sizes.items()}

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> Traffic:
        """The traffic that :meth:`arrays` saved (other names in ``arrays`` are ignored)."""
        return cls({name.removeprefix("traffic."): sizes for name, sizes in arrays.items()
                    if name.startswith("traffic.")})
