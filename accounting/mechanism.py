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
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import dp_accounting
import numpy as np

from ._checks import check_choice
from .conversion import rdp_to_epsilon

__all__ = ["ANALYSES", "UNITS", "Analysis", "Mechanism", "Unit", "relation_for_unit"]

Unit = Literal["example", "party"]
Analysis = Literal["classic", "tight"]

UNITS: tuple[str, ...] = ("example", "party")
ANALYSES: tuple[str, ...] = ("classic", "tight")

_RELATIONS = {
    "example": "example-level: neighbouring data sets differ in one training example (added, removed or replaced)",
    "party": "party-level: neighbouring federations differ in one party's whole data set (replaced)",
}


def relation_for_unit(unit: str) -> str:
    """A one-line statement of the neighbouring relation behind a unit."""
    return _RELATIONS[check_choice("unit", unit, UNITS)]


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
    def relation(self) -> str:
        """The neighbouring relation this mechanism's guarantee is stated for."""
        return relation_for_unit(self.unit)

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
            defaults[f"{where}.{name}"] = parameter.default
        return defaults

    def describe(self) -> dict[str, Any]:
        """``{"kind": ..., "unit": ..., **parameters}`` for reports."""
        return {"kind": self.kind, "unit": self.unit, **self.parameters()}
