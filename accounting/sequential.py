"""Sequential composition of releases on the same data (Mironov 2017, Prop. 1)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import dp_accounting
import numpy as np

from ._checks import check_int_at_least
from ._composition import CompositionBase
from .mechanism import Mechanism
from .registry import register

__all__ = ["RepeatedRelease", "SequentialComposition", "compose_repeated", "compose_sequential"]


@register
@dataclass(frozen=True, eq=False)
class SequentialComposition(CompositionBase):
    """Mechanisms run one after another on the same protected data (each may see the earlier outputs).

    Rényi DP composes additively under adaptive composition (Mironov 2017,
    Prop. 1), so per order

        RDP(α) = Σ_i RDP_i(α);

    the dp-accounting event is the ``ComposedDpEvent`` of the members' events
    (when every member has one), so ``account()`` also takes its PLD. It is what
    ``account([m1, m2, ...])`` computes, packaged as one mechanism so that a
    composition can be stored (a DP-trained model's ``dp_mechanism_`` after warm
    starts) and composed further, e.g. in parallel over parties.
    """

    mechanisms: tuple[Mechanism, ...]
    unit: str = field(init=False)

    kind: ClassVar[str] = "sequential_composition"

    def __post_init__(self) -> None:
        self._check_members("sequential composition")

    def rdp(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        return np.sum([m.rdp(orders, analysis=analysis) for m in self.mechanisms], axis=0)

    def rdp_data_independent(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        return np.sum([m.rdp_data_independent(orders, analysis=analysis) for m in self.mechanisms], axis=0)

    def pure_epsilon(self) -> float | None:
        values = [m.pure_epsilon() for m in self.mechanisms]
        return None if any(v is None for v in values) else sum(values)  # type: ignore[arg-type]

    def dp_event(self) -> dp_accounting.DpEvent | None:
        events = [m.dp_event() for m in self.mechanisms]
        return None if any(e is None for e in events) else dp_accounting.ComposedDpEvent(events)


def compose_sequential(mechanisms: Iterable[Mechanism]) -> SequentialComposition:
    """Compose mechanisms run one after another on the same data: RDP curves summed per order."""
    return SequentialComposition(tuple(mechanisms))


@dataclass(frozen=True, eq=False)
class RepeatedRelease(Mechanism):
    """One release repeated ``count`` times on the same data, in memory and time independent of ``count``.

    The sequential composition of ``count`` copies (Mironov 2017, Prop. 1):
    RDP(α) = count · RDP₁(α), pure ε = count · ε₁, and the dp-accounting event is
    the release's event self-composed ``count`` times (a PLD is built only up to
    :data:`~privfed.accounting._dp_accounting.MAX_PLD_COMPOSITIONS` uses). Used to
    compose a per-round claim over its rounds; not stored in ledgers.
    """

    release: Mechanism
    count: int
    unit: str = field(init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.release, Mechanism):
            raise TypeError(f"release must be a privfed mechanism, got {type(self.release).__name__}")
        object.__setattr__(self, "count", check_int_at_least("count", self.count, 1))
        object.__setattr__(self, "unit", self.release.unit)

    @property
    def kind(self) -> str:  # type: ignore[override]
        return self.release.kind

    @property
    def relations(self) -> frozenset[str]:
        return self.release.relations

    @property
    def data_dependent(self) -> bool:
        return self.release.data_dependent

    @property
    def num_queries(self) -> int:
        return self.count * self.release.num_queries

    def rdp(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        return self.count * np.asarray(self.release.rdp(orders, analysis=analysis), dtype=float)

    def rdp_data_independent(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        return self.count * np.asarray(self.release.rdp_data_independent(orders, analysis=analysis), dtype=float)

    def pure_epsilon(self) -> float | None:
        value = self.release.pure_epsilon()
        return None if value is None else self.count * value

    def dp_event(self) -> dp_accounting.DpEvent | None:
        event = self.release.dp_event()
        return None if event is None else dp_accounting.SelfComposedDpEvent(event, self.count)

    def notes(self) -> tuple[str, ...]:
        return self.release.notes()

    def parameters(self) -> dict[str, Any]:
        return {**self.release.parameters(), "repetitions": self.count}


def compose_repeated(release: Mechanism, count: int) -> Mechanism:
    """``release`` run ``count`` times on the same data, as one mechanism (the release itself when count is 1)."""
    return release if count == 1 else RepeatedRelease(release, count)
