"""A release described by a dp-accounting ``DpEvent``: what another library accounted, recorded in privfed.

dp-accounting's events (Google's ``dp_accounting.dp_event``) are the lingua
franca of DP accounting: Opacus and Flower build them, TF Privacy and JAX
Privacy report them. :class:`DpEventRelease` wraps one so that it can enter a
ledger, be composed with privfed's own mechanisms and be re-accounted by an
auditor: its RDP curve is dp-accounting's :class:`~dp_accounting.rdp.RdpAccountant`
on the event, under the neighbouring relation the event is stated for.

Events are stored as JSON with an explicit discriminator per node
(:func:`event_to_json` / :func:`event_from_json`); only the event types listed
in :data:`SUPPORTED_EVENTS` are read, nothing is imported by name from a file.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar, cast

import dp_accounting
import numpy as np

from ._checks import check_choice, check_orders
from ._dp_accounting import event_rdp
from .mechanism import ANALYSES, UNITS, Mechanism
from .registry import register

__all__ = [
    "RELATIONS",
    "SUPPORTED_EVENTS",
    "DpEventRelease",
    "event_from_json",
    "event_relation",
    "event_to_json",
]

#: dp-accounting's neighbouring relations, by the name a record stores.
RELATIONS: dict[str, dp_accounting.NeighboringRelation] = {
    "add_or_remove_one": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
    "replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE,
}

#: JSON discriminator → (event class, its numeric fields, its nested-event fields).
_LEAVES: dict[str, tuple[type, tuple[str, ...]]] = {
    "gaussian": (dp_accounting.GaussianDpEvent, ("noise_multiplier",)),
    "laplace": (dp_accounting.LaplaceDpEvent, ("noise_multiplier",)),
    "randomized_response": (dp_accounting.RandomizedResponseDpEvent, ("noise_parameter", "num_buckets")),
}
_WRAPPERS: dict[str, tuple[type, tuple[str, ...]]] = {
    "self_composed": (dp_accounting.SelfComposedDpEvent, ("count",)),
    "poisson_sampled": (dp_accounting.PoissonSampledDpEvent, ("sampling_probability",)),
    "sampled_without_replacement": (dp_accounting.SampledWithoutReplacementDpEvent,
                                    ("source_dataset_size", "sample_size")),
}
#: The dp-accounting event types a :class:`DpEventRelease` holds (``ComposedDpEvent`` of them too).
SUPPORTED_EVENTS: tuple[str, ...] = (
    *(cls.__name__ for cls, _ in _LEAVES.values()),
    *(cls.__name__ for cls, _ in _WRAPPERS.values()),
    "ComposedDpEvent",
)
_INTEGER_FIELDS = {"num_buckets", "count", "source_dataset_size", "sample_size"}
#: Deepest nesting of events read from a record (bounded recursion for any file).
MAX_EVENT_DEPTH = 32


def _name_of(event: object) -> str:
    for table in (_LEAVES, _WRAPPERS):
        for name, (cls, _) in table.items():
            if type(event) is cls:
                return name
    if type(event) is dp_accounting.ComposedDpEvent:
        return "composed"
    raise TypeError(
        f"event must be a dp-accounting DpEvent built from {', '.join(SUPPORTED_EVENTS)}; got {type(event).__name__} "
        "(privfed has no RDP curve for it: record it with record_unaccounted, or account it elsewhere)"
    )


def event_to_json(event: dp_accounting.DpEvent, *, _depth: int = 0) -> dict[str, Any]:
    """``event`` as a JSON object: ``{"event": <type>, <fields>...}``, nested events as objects."""
    if _depth > MAX_EVENT_DEPTH:
        raise ValueError(f"event is nested deeper than {MAX_EVENT_DEPTH} levels")
    name = _name_of(event)
    if name == "composed":
        return {"event": name, "events": [event_to_json(e, _depth=_depth + 1) for e in event.events]}
    cls, fields = (_LEAVES | _WRAPPERS)[name]
    document: dict[str, Any] = {"event": name}
    for key in fields:
        value = getattr(event, key)
        document[key] = int(value) if key in _INTEGER_FIELDS else float(value)
    if name in _WRAPPERS:
        document["inner"] = event_to_json(event.event, _depth=_depth + 1)
    return document


#: Real fields whose value must lie in (0, 1]; the others in (0, ∞). Zero noise is no privacy: record_unaccounted.
_PROBABILITY_FIELDS = {"noise_parameter", "sampling_probability"}


def _number(document: Mapping[str, Any], key: str, where: str) -> float | int:
    value = document.get(key)
    if key in _INTEGER_FIELDS:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{where}.{key} must be an integer >= 1, got {value!r}")
        return int(value)
    high = 1.0 if key in _PROBABILITY_FIELDS else math.inf
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < float(value) <= high \
            or not math.isfinite(value):
        raise ValueError(f"{where}.{key} must be a finite number in (0, {high:g}], got {value!r}"
                         + (" (no noise is no privacy: record such a release with record_unaccounted)"
                            if isinstance(value, numbers.Real) and value == 0 else ""))
    return float(value)


def event_from_json(document: object, *, where: str = "event", _depth: int = 0) -> dp_accounting.DpEvent:
    """Rebuild an event written by :func:`event_to_json`; ``ValueError`` naming the bad key otherwise."""
    if _depth > MAX_EVENT_DEPTH:
        raise ValueError(f"{where} is nested deeper than {MAX_EVENT_DEPTH} levels")
    if not isinstance(document, Mapping):
        raise ValueError(f"{where} must be an object with an 'event' key, got {document!r:.80}")
    name = document.get("event")
    events: list[Any] | None = None  # a composed event's members
    if name == "composed":
        expected, events = {"event", "events"}, document.get("events")
        if not isinstance(events, list) or not events:
            raise ValueError(f"{where}.events must be a non-empty list of events, got {events!r:.80}")
    elif name in _LEAVES or name in _WRAPPERS:
        expected = {"event", *(_LEAVES | _WRAPPERS)[name][1], *(("inner",) if name in _WRAPPERS else ())}
    else:
        raise ValueError(f"{where}.event must be one of {sorted([*_LEAVES, *_WRAPPERS, 'composed'])}, got {name!r}")
    stray = sorted(set(document) - expected)
    if stray:
        raise ValueError(f"{where} has unknown key {stray[0]!r}; a {name!r} event has keys {sorted(expected)}")
    if events is not None:
        return dp_accounting.ComposedDpEvent(
            [event_from_json(e, where=f"{where}.events[{i}]", _depth=_depth + 1) for i, e in enumerate(events)]
        )
    cls, fields = (_LEAVES | _WRAPPERS)[name]
    values: dict[str, Any] = {key: _number(document, key, where) for key in fields}
    if name in _WRAPPERS:
        values["event"] = event_from_json(document.get("inner"), where=f"{where}.inner", _depth=_depth + 1)
    return cls(**values)


def _nodes(event: dp_accounting.DpEvent) -> Iterator[dp_accounting.DpEvent]:
    yield event
    if isinstance(event, dp_accounting.ComposedDpEvent):
        for member in event.events:
            yield from _nodes(member)
    elif hasattr(event, "event") and isinstance(event.event, dp_accounting.DpEvent):
        yield from _nodes(event.event)


def event_relation(event: dp_accounting.DpEvent) -> str | None:
    """The neighbouring relation dp-accounting's RDP accountant needs for ``event``; ``None`` if either fits.

    Poisson sampling is analysed under add-or-remove-one, sampling without
    replacement and randomized response under replace-one (dp-accounting 0.6's
    :class:`~dp_accounting.rdp.RdpAccountant`); Gaussian and Laplace events under
    either. ``ValueError`` when an event mixes both, which no single dp-accounting
    accountant can compose.
    """
    needed = set()
    for node in _nodes(event):
        if isinstance(node, dp_accounting.PoissonSampledDpEvent):
            needed.add("add_or_remove_one")
        elif isinstance(node, (dp_accounting.SampledWithoutReplacementDpEvent,
                               dp_accounting.RandomizedResponseDpEvent)):
            needed.add("replace_one")
    if len(needed) > 1:
        raise ValueError("event mixes Poisson sampling (add-or-remove-one) with randomized response or sampling "
                         "without replacement (replace-one): dp-accounting composes them under no single relation")
    return next(iter(needed), None)


def _count(event: dp_accounting.DpEvent) -> int:
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return sum(_count(member) for member in event.events)
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return event.count * _count(event.event)
    return 1


def _pld_ready(event: dp_accounting.DpEvent) -> bool:
    """Whether privfed's PLD (:func:`~accounting._dp_accounting.event_pld`) takes ``event`` as it stands."""
    for node in _nodes(event):
        if isinstance(node, dp_accounting.SampledWithoutReplacementDpEvent):
            return False
        if isinstance(node, dp_accounting.PoissonSampledDpEvent) and not isinstance(
                node.event, dp_accounting.GaussianDpEvent):
            return False
    return True


@register
@dataclass(frozen=True, eq=False)
class DpEventRelease(Mechanism):
    """A release whose privacy loss is a dp-accounting ``DpEvent``, accounted as dp-accounting accounts it.

    The RDP curve is dp-accounting's :class:`~dp_accounting.rdp.RdpAccountant` on
    ``event`` under ``relation`` (``"add_or_remove_one"`` or ``"replace_one"``;
    default: the one the event needs, :func:`event_relation`, else
    add-or-remove-one), the same curve under both analyses. Where privfed's PLD
    takes the event, :meth:`dp_event` returns it, so ``account()`` also reports its
    PLD bound. Data-independent by construction: a ``DpEvent`` names public noise
    parameters only.

    ``event`` may also be given as its JSON object (:func:`event_to_json`), as a
    mechanism file for ``privfed account`` lists it (``kind = "dp_event"``).

    **Unit**: the caller's (``"example"`` by default): the event must describe the
    release for one such unit (Opacus's events are per example, Flower's DP-FedAvg
    events per client, i.e. ``"party"``).
    """

    event: dp_accounting.DpEvent
    _: KW_ONLY
    # None (the event's own relation) is replaced by a str in __post_init__. The name, public API, shadows
    # Mechanism.relation (a str property) with a dp-accounting relation name; hence the ignore.
    relation: str | None = None  # type: ignore[assignment]
    unit: str = "example"

    kind: ClassVar[str] = "dp_event"

    def __post_init__(self) -> None:
        if isinstance(self.event, Mapping):  # its JSON form (:func:`event_to_json`), as mechanism files give it
            object.__setattr__(self, "event", event_from_json(self.event))
        if not isinstance(self.event, dp_accounting.DpEvent):
            raise TypeError(f"event must be a dp_accounting.DpEvent or its JSON form, got {type(self.event).__name__}")
        event_from_json(event_to_json(self.event))  # the same checks a stored record gets
        needed = event_relation(self.event)
        relation = (needed or "add_or_remove_one") if self.relation is None else self.relation
        check_choice("relation", relation, RELATIONS)
        if needed is not None and relation != needed:
            raise ValueError(f"relation is {relation!r} but dp-accounting accounts this event under {needed!r} only")
        object.__setattr__(self, "relation", relation)
        check_choice("unit", self.unit, UNITS)

    @property
    def relations(self) -> frozenset[str]:
        """``{relation}``: the one relation dp-accounting accounts the event under here."""
        return frozenset({cast(str, self.relation)})

    @property
    def data_dependent(self) -> bool:
        return False

    @property
    def num_queries(self) -> int:
        """Leaf events applied, self-compositions multiplied out."""
        return _count(self.event)

    def dp_event(self) -> dp_accounting.DpEvent | None:
        return self.event if _pld_ready(self.event) else None

    def rdp(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        orders = check_orders(orders)
        check_choice("analysis", analysis, ANALYSES)
        return event_rdp(self.event, orders, relation=RELATIONS[cast(str, self.relation)])

    def rdp_data_independent(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        return self.rdp(orders, analysis=analysis)

    def parameters(self) -> dict[str, Any]:
        return {"event": event_to_json(self.event), "relation": self.relation}

    @classmethod
    def from_parameters(
        cls, parameters: Mapping[str, Any], *, unit: str, evidence: Mapping[str, np.ndarray] | None = None
    ) -> "DpEventRelease":
        return cls(event_from_json(parameters["event"], where="parameters.event"),
                   relation=parameters.get("relation"), unit=unit)
