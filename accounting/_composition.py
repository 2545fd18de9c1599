"""What parallel and sequential compositions share: a tuple of member mechanisms of one unit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .mechanism import Mechanism, common_relations
from .registry import defaulted_parameters as defaulted_record_parameters
from .registry import mechanism_from_record, public_mechanism_from_record

__all__ = ["CompositionBase"]


class CompositionBase(Mechanism):
    """Members' validation, parameters, evidence and rebuilding; subclasses define how curves combine.

    Subclasses are frozen dataclasses with a ``mechanisms`` field and a non-init ``unit`` field.
    """

    mechanisms: tuple[Mechanism, ...]

    def _check_members(self, what: str) -> None:
        members = tuple(self.mechanisms)
        if not members:
            raise ValueError(f"mechanisms must hold at least one mechanism for a {what}, got none")
        for member in members:
            if not isinstance(member, Mechanism):
                raise TypeError(f"mechanisms must be privfed mechanisms, got {type(member).__name__}")
        units = sorted({m.unit for m in members})
        if len(units) != 1:
            raise ValueError(f"mechanisms must all protect the same unit for a {what}, got units {units}")
        object.__setattr__(self, "mechanisms", members)
        object.__setattr__(self, "unit", units[0])

    @property
    def relations(self) -> frozenset[str]:
        """What every member's analysis covers (the intersection; empty when they share none)."""
        return common_relations(self.mechanisms)

    @property
    def data_dependent(self) -> bool:
        return any(m.data_dependent for m in self.mechanisms)

    @property
    def num_queries(self) -> int:
        return sum(m.num_queries for m in self.mechanisms)

    def parameters(self) -> dict[str, Any]:
        return {"members": [{"kind": m.kind, "unit": m.unit, "parameters": m.parameters()} for m in self.mechanisms]}

    def evidence(self) -> dict[str, np.ndarray]:
        """Members' evidence, keys prefixed ``"<index>/"``."""
        return {f"{i}/{name}": array for i, m in enumerate(self.mechanisms) for name, array in m.evidence().items()}

    @classmethod
    def from_parameters(
        cls, parameters: Mapping[str, Any], *, unit: str, evidence: Mapping[str, np.ndarray] | None = None
    ) -> "CompositionBase":
        members = []
        for i, record in enumerate(parameters["members"]):
            prefix = f"{i}/"
            own = {k[len(prefix):]: v for k, v in (evidence or {}).items() if k.startswith(prefix)}
            members.append(mechanism_from_record(record, evidence=own))
        return cls(tuple(members))  # type: ignore[call-arg]

    @classmethod
    def from_public_parameters(cls, parameters: Mapping[str, Any], *, unit: str) -> Mechanism | None:
        """The composition of its members' public views (members rebuilt whole where they need no evidence);
        ``None`` when no member, at any depth, needs private evidence."""
        members = parameters.get("members")
        if not isinstance(members, list) or not members:
            raise ValueError("parameters.members must be a non-empty list of mechanism records")
        rebuilt = [public_mechanism_from_record(member) for member in members]
        if not any(public for _, public in rebuilt):
            return None
        return cls(tuple(mechanism for mechanism, _ in rebuilt))  # type: ignore[call-arg]

    @classmethod
    def defaulted_parameters(cls, parameters: Mapping[str, Any], *, where: str = "parameters") -> dict[str, Any]:
        """The members' defaulted parameters, under ``<where>.members[i]``."""
        defaults: dict[str, Any] = {}
        for index, member in enumerate(parameters.get("members") or []):
            defaults.update(defaulted_record_parameters(member, where=f"{where}.members[{index}]"))
        return defaults
