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
from privfed.accounting.mechanism import Mechanism

__all__ = ["mechanism_class", "mechanism_from_record", "mechanism_kinds", "public_mechanism_from_record", "register"]

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


def _placeholder_evidence(record: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """All-zero vote matrices of the recorded shapes, for noisy-max releases whose votes are private."""
    parameters = record.get("parameters", {})
    if record.get("kind") in ("parallel_composition", "sequential_composition"):
        return {
            f"{i}/{name}": array
            for i, member in enumerate(parameters.get("members", []))
            for name, array in _placeholder_evidence(member).items()
        }
    if "num_queries" in parameters and "num_classes" in parameters:
        return {"votes": np.zeros((int(parameters["num_queries"]), int(parameters["num_classes"])), dtype=np.int64)}
    return {}


def public_mechanism_from_record(record: Mapping[str, Any]) -> tuple[Mechanism, bool]:
    """Rebuild a mechanism from ``{"kind", "unit", "parameters"}`` without private data.

    Returns ``(mechanism, placeholder)``. ``placeholder`` is True when the
    mechanism's private evidence (vote matrices) was replaced by all-zero votes
    of the recorded shape: the data-independent curve, ε and ``dp_event()`` of a
    noisy-max release depend only on its public parameters, so they are exact;
    its data-dependent values then mean nothing.
    """
    try:
        return mechanism_from_record(record), False
    except (ValueError, KeyError) as error:
        placeholder = _placeholder_evidence(record)
        if not placeholder:
            raise ValueError(f"cannot rebuild {record.get('kind')!r} from its public parameters: {error}") from None
        return mechanism_from_record(record, evidence=placeholder), True
