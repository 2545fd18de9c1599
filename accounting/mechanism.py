"""The one interface every accountable release implements.

A :class:`Mechanism` is an immutable description of one release (a batch of
noisy-max answers, a run of DP-SGD, a round of randomized response, …) together
with the unit it protects. An accountant asks it for its Rényi-DP curve at the
orders it chooses; composition is the sum of curves (Mironov 2017, Prop. 1), so
one interface serves sequential composition, parallel composition and the ledger.
"""

from __future__ import annotations

import abc
import inspect
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from ._checks import check_choice
from .conversion import rdp_to_epsilon

if TYPE_CHECKING:
    import dp_accounting

__all__ = [
    "ALL_RELATIONS",
    "ANALYSES",
    "RELATIONS",
    "UNITS",
    "Analysis",
    "Mechanism",
    "Unit",
    "check_relations",
    "common_relations",
    "describe_relations",
    "relation_for_unit",
]

Unit = Literal["example", "party"]
Analysis = Literal["classic", "tight"]

UNITS: tuple[str, ...] = ("example", "party")
ANALYSES: tuple[str, ...] = ("classic", "tight")

#: The neighbouring relations an analysis can be stated for, by the names dp-accounting gives them
#: (``NeighboringRelation``): ``"add_or_remove_one"``, one protected unit (an example, a party's whole data)
#: present in one data set and absent from the other; ``"replace_one"``, one unit's data replaced by any other.
#: Neither implies the other in general: a replacement is a removal and an addition (group privacy of 2),
#: and an addition need not be a replacement (the number of units may be secret).
RELATIONS: tuple[str, ...] = ("add_or_remove_one", "replace_one")
#: Both relations: what a sensitivity-based analysis covers when the sensitivity bounds every move of a unit.
ALL_RELATIONS: frozenset[str] = frozenset(RELATIONS)

_UNIT_TEXT = {
    "example": ("example-level", "neighbouring data sets differ in one training example"),
    "party": ("party-level", "neighbouring federations differ in one party's whole data set"),
}
_RELATION_TEXT = {
    frozenset({"add_or_remove_one"}): "added or removed",
    frozenset({"replace_one"}): "replaced",
    ALL_RELATIONS: "added, removed or replaced",
}


def check_relations(relations: object, name: str = "relations") -> frozenset[str]:
    """``relations`` as a frozenset of names from :data:`RELATIONS`; a one-line error otherwise."""
    if isinstance(relations, str) or not isinstance(relations, Iterable):
        raise TypeError(f"{name} must be a collection of relations from {RELATIONS}, got {relations!r}")
    chosen = list(relations)
    for relation in chosen:
        if not isinstance(relation, str) or relation not in RELATIONS:
            raise ValueError(f"{name} must hold relations from {', '.join(RELATIONS)}, got {relation!r}")
    if not chosen:
        raise ValueError(f"{name} must name at least one relation from {', '.join(RELATIONS)}, got none")
    return frozenset(chosen)


def common_relations(mechanisms: Iterable["Mechanism"]) -> frozenset[str]:
    """The relations every one of ``mechanisms`` is analysed for (their intersection; both for none)."""
    common = ALL_RELATIONS
    for mechanism in mechanisms:
        common = common & mechanism.relations
    return common


def describe_relations(relations: Iterable[str]) -> str:
    """How the protected unit differs between neighbours under ``relations``: "added or removed", "replaced",
    "added, removed or replaced", or a statement that no relation is covered (an empty set)."""
    chosen = frozenset(relations)
    if not chosen:
        return "no neighbouring relation is analysed for every release: no relation is covered"
    return _RELATION_TEXT[check_relations(chosen)]


def relation_for_unit(unit: str, relations: Iterable[str] | None = None) -> str:
    """A one-line statement of the neighbouring relation behind a unit, for the ``relations`` analysed.

    ``relations=None`` states the unit alone and says that the relation is the one each release's
    ε is stated for (what a card prints beside a ledger's per-release relations).
    """
    level, differ = _UNIT_TEXT[check_choice("unit", unit, UNITS)]
    if relations is None:
        return f"{level}: {differ} (the relation analysed is stated with each ε)"
    chosen = frozenset(relations)
    if not chosen:
        return f"{level}: {differ}; {describe_relations(chosen)}"
    return f"{level}: {differ} ({describe_relations(chosen)})"


class Mechanism(abc.ABC):
    """A release whose privacy loss privfed can account.

    Subclasses are frozen dataclasses. They state their mathematics in their
    docstring and implement :meth:`rdp` (the analysis' best valid bound, which
    may use private statistics) and :meth:`rdp_data_independent` (a bound that
    holds whatever the private data).
    """

    #: Short, stable identifier used in reports and ledgers.
    kind: ClassVar[str] = "mechanism"
    #: The protected unit: ``"example"`` or ``"party"``.
    unit: str

    @property
    def relations(self) -> frozenset[str]:
        """The neighbouring relations (names from :data:`RELATIONS`) this mechanism's analysis covers.

        Every privfed mechanism states its own; the default, empty, says that the analysis states none,
        so no report of a composition containing it claims a relation.
        """
        return frozenset()

    @property
    def relation(self) -> str:
        """The neighbouring relation this mechanism's guarantee is stated for, in words (unit and :attr:`relations`)."""
        return relation_for_unit(self.unit, self.relations)

    @property
    @abc.abstractmethod
    def data_dependent(self) -> bool:
        """Whether :meth:`rdp` depends on private data (its value then leaks, and is labelled so)."""

    @property
    @abc.abstractmethod
    def num_queries(self) -> int:
        """Number of answers (queries, steps, reports) this release consists of."""

    @abc.abstractmethod
    def rdp(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        """RDP ε(α) at each order α > 1, composed over the release's queries."""

    @abc.abstractmethod
    def rdp_data_independent(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        """RDP bound at each order that holds for every data set."""

    @abc.abstractmethod
    def parameters(self) -> Mapping[str, Any]:
        """The public parameters, JSON-serialisable; never private data such as votes."""

    def epsilon(
        self,
        orders: np.ndarray,
        delta: float,
        *,
        analysis: str,
        data_independent: bool = False,
        curve: np.ndarray | None = None,
    ) -> tuple[float, float]:
        """(ε, optimal order) of this mechanism released on its own.

        ``curve`` is this mechanism's RDP at ``orders`` if the caller already has it.
        """
        if curve is None:
            curve = (self.rdp_data_independent if data_independent else self.rdp)(orders, analysis=analysis)
        return rdp_to_epsilon(orders, curve, delta, analysis)

    def pure_epsilon(self) -> float | None:
        """ε of the basic (pure, δ = 0) composition, where the mechanism has one."""
        return None

    def dp_event(self) -> dp_accounting.DpEvent | None:
        """The whole release as a dp-accounting event, composed over its queries; ``None`` if it has none.

        Given only where the event describes the release exactly or dominates it
        (a valid upper bound), for the mechanism's own unit. Under
        ``analysis="tight"``, :func:`~accounting.account.account` also converts it
        through a privacy loss distribution (PLD) and reports the tighter of PLD
        and RDP.
        """
        return None

    def notes(self) -> tuple[str, ...]:
        """Warnings a reader of this mechanism's ε must see (collected into :class:`PrivacyReport.notes`)."""
        return ()

    def evidence(self) -> dict[str, np.ndarray]:
        """Private arrays the accounting was computed from (empty for data-independent mechanisms).

        They never go into public records: ledgers store them in a separate
        evidence file, referenced by hash.
        """
        return {}

    @classmethod
    def from_parameters(
        cls, parameters: Mapping[str, Any], *, unit: str, evidence: Mapping[str, np.ndarray] | None = None
    ) -> "Mechanism":
        """Rebuild from :meth:`parameters` (and :meth:`evidence` for data-dependent mechanisms).

        The default passes the constructor's own arguments found in ``parameters``;
        derived values recorded for readers are ignored.
        """
        import dataclasses

        names = {f.name for f in dataclasses.fields(cls) if f.init} - {"unit"}  # type: ignore[arg-type]
        arguments = {name: parameters[name] for name in names if name in parameters}
        if evidence:
            arguments.update({name: evidence[name] for name in names if name in evidence})
        return cls(**arguments, unit=unit)  # type: ignore[call-arg]

    @classmethod
    def from_public_parameters(cls, parameters: Mapping[str, Any], *, unit: str) -> Mechanism | None:
        """A view of the release rebuilt from its public :meth:`parameters` alone; ``None`` if none is needed.

        The hook of :func:`~privfed.accounting.registry.public_mechanism_from_record` for a kind whose
        :meth:`from_parameters` needs private :meth:`evidence` (a vote matrix): the view's data-independent
        curve, pure ε and ``dp_event()`` are exact, and its data-independent curve stands in for the
        data-dependent one. The default, ``None``, says that :meth:`from_parameters` rebuilds the release
        without evidence.
        """
        return None

    @classmethod
    def defaulted_parameters(cls, parameters: Mapping[str, Any], *, where: str = "parameters") -> dict[str, Any]:
        """``{"<where>.<name>": default}`` for every constructor argument that ``parameters`` omit.

        The hook of :func:`~privfed.accounting.registry.defaulted_parameters`. Arguments without a default, and
        those defaulting to ``None`` ("derived from the others"), are not listed.
        """
        defaults: dict[str, Any] = {}
        for name, parameter in inspect.signature(cls).parameters.items():
            if name in ("self", "unit") or name in parameters or parameter.default in (inspect.Parameter.empty, None):
                continue
            default = parameter.default
            defaults[f"{where}.{name}"] = sorted(default) if isinstance(default, frozenset) else default
        return defaults

    def describe(self) -> dict[str, Any]:
        """``{"kind": ..., "unit": ..., "relations": [...], **parameters}`` for reports."""
        return {"kind": self.kind, "unit": self.unit, "relations": sorted(self.relations), **self.parameters()}
