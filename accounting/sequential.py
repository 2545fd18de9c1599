"""Sequential composition of releases on the same data (Mironov 2017, Prop. 1)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

import dp_accounting
import numpy as np

from ._composition import CompositionBase
from .mechanism import Mechanism
from .registry import register

__all__ = ["SequentialComposition", "compose_sequential"]


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
