"""One registry of mechanism kinds, so that a mechanism can be rebuilt from what was recorded.

Ledgers, mechanism files for ``privfed account`` and audits record a mechanism
as ``{"kind": ..., "unit": ..., "parameters": {...}}``. Data-independent
mechanisms are rebuilt from their public parameters alone; data-dependent ones
also need their private evidence (for example the vote matrix), which is kept
out of public records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import numpy as np

from accounting.mechanism import Mechanism

__all__ = ["mechanism_class", "mechanism_from_record", "mechanism_kinds", "register"]

_REGISTRY: dict[str, type[Mechanism]] = {}

M = TypeVar("M", bound=type[Mechanism])


def register(cls: M) -> M:
    """Class decorator: make ``cls.kind`` rebuildable by :func:`mechanism_from_record`."""
    if cls.kind in _REGISTRY and _REGISTRY[cls.kind] is not cls:
        raise ValueError(f"mechanism kind {cls.kind!r} is already registered to {_REGISTRY[cls.kind].__name__}")
    _REGISTRY[cls.kind] = cls
    return cls


def mechanism_kinds() -> tuple[str, ...]:
    """The registered kinds, sorted."""
    return tuple(sorted(_REGISTRY))


def mechanism_class(kind: str) -> type[Mechanism]:
    """The class registered for ``kind``."""
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise ValueError(f"kind must be one of {', '.join(mechanism_kinds())}; got {kind!r}") from None


def mechanism_from_record(
    record: Mapping[str, Any], *, evidence: Mapping[str, np.ndarray] | None = None
) -> Mechanism:
    """Rebuild a mechanism from ``{"kind", "unit", "parameters"}`` (and its evidence if data-dependent)."""
    if not isinstance(record, Mapping) or "kind" not in record:
        raise ValueError(f"record must be a mapping with a 'kind' key, got {record!r}")
    cls = mechanism_class(record["kind"])
    return cls.from_parameters(record.get("parameters", {}), unit=record.get("unit", "example"), evidence=evidence)
