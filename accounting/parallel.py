"""Parallel composition over disjoint parties (FedKT Thm 4)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from privfed.accounting.mechanism import Mechanism
from privfed.accounting.registry import mechanism_from_record, register

__all__ = ["ParallelComposition", "compose_parallel"]


@register
@dataclass(frozen=True, eq=False)
class ParallelComposition(Mechanism):
    """Mechanisms that each see a disjoint part of the protected data.

    One protected unit's data lies in exactly one member's input, so between
    neighbouring data sets only that member's output distribution changes
    (FedKT Thm 4; McSherry 2009). Hence, per Rényi order,

        RDP(α) = max_i RDP_i(α),

    which composes further like any other curve. (FedKT's code reports
    max_i ε_i instead; converting the per-order maximum is never smaller, by at
    most a few per cent when parties answer similar queries, and keeps ledgers,
    audits and ``account()`` on one curve.)
    """

    mechanisms: tuple[Mechanism, ...]
    unit: str = field(init=False)

    kind: ClassVar[str] = "parallel_composition"

    def __post_init__(self) -> None:
        members = tuple(self.mechanisms)
        if not members:
            raise ValueError("mechanisms must hold at least one mechanism for a parallel composition, got none")
        for member in members:
            if not isinstance(member, Mechanism):
                raise TypeError(f"mechanisms must be privfed mechanisms, got {type(member).__name__}")
        units = sorted({m.unit for m in members})
        if len(units) != 1:
            raise ValueError(f"mechanisms must all protect the same unit to compose in parallel, got units {units}")
        object.__setattr__(self, "mechanisms", members)
        object.__setattr__(self, "unit", units[0])

    @property
    def data_dependent(self) -> bool:
        return any(m.data_dependent for m in self.mechanisms)

    @property
    def num_queries(self) -> int:
        return sum(m.num_queries for m in self.mechanisms)

    def rdp(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        return np.max([m.rdp(orders, analysis=analysis) for m in self.mechanisms], axis=0)

    def rdp_data_independent(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        return np.max([m.rdp_data_independent(orders, analysis=analysis) for m in self.mechanisms], axis=0)

    def pure_epsilon(self) -> float | None:
        values = [m.pure_epsilon() for m in self.mechanisms]
        return None if any(v is None for v in values) else max(values)  # type: ignore[type-var]

    def parameters(self) -> dict[str, Any]:
        return {"members": [{"kind": m.kind, "unit": m.unit, "parameters": m.parameters()} for m in self.mechanisms]}

    def evidence(self) -> dict[str, np.ndarray]:
        """Members' evidence, keys prefixed ``"<index>/"``."""
        return {f"{i}/{name}": array for i, m in enumerate(self.mechanisms) for name, array in m.evidence().items()}

    @classmethod
    def from_parameters(
        cls, parameters: Mapping[str, Any], *, unit: str, evidence: Mapping[str, np.ndarray] | None = None
    ) -> "ParallelComposition":
        members = []
        for i, record in enumerate(parameters["members"]):
            prefix = f"{i}/"
            own = {k[len(prefix):]: v for k, v in (evidence or {}).items() if k.startswith(prefix)}
            members.append(mechanism_from_record(record, evidence=own))
        return cls(tuple(members))


def compose_parallel(mechanisms: Iterable[Mechanism]) -> ParallelComposition:
    """Compose mechanisms that run on disjoint parties' data: the max over parties (FedKT Thm 4)."""
    return ParallelComposition(tuple(mechanisms))
