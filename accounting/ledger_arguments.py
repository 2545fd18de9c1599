"""What the ledger's constructor and recording methods accept: each check raises one TypeError or ValueError
line naming the argument, its value and what is valid."""

from __future__ import annotations

import numbers
from collections.abc import Mapping

from ._checks import check_choice
from .mechanism import UNITS, Mechanism

__all__ = ["check_bool", "check_description", "check_seeds", "check_str", "mechanisms_per_unit"]


def mechanisms_per_unit(mechanism: Mechanism | Mapping[str, Mechanism], unit: str | None) -> dict[str, Mechanism]:
    """One release's mechanism per unit, in :data:`UNITS` order, from ``record``'s ``mechanism`` and ``unit``."""
    if isinstance(mechanism, Mapping):
        if unit is not None:
            raise ValueError(f"unit must be None when mechanism is a mapping unit → mechanism, got unit={unit!r}")
        if not mechanism:
            raise ValueError("mechanism must map at least one unit to a mechanism, got an empty mapping")
        for key, member in mechanism.items():
            check_choice("mechanism's unit key", key, UNITS)
            if not isinstance(member, Mechanism):
                raise TypeError(f"mechanism[{key!r}] must be a privfed Mechanism, got {type(member).__name__}")
            if member.unit != key:
                raise ValueError(f"mechanism[{key!r}] protects unit {member.unit!r}, not {key!r}")
        return {key: mechanism[key] for key in UNITS if key in mechanism}
    if not isinstance(mechanism, Mechanism):
        raise TypeError(
            f"mechanism must be a privfed Mechanism or a mapping unit → Mechanism, got {type(mechanism).__name__}"
        )
    if unit is not None and check_choice("unit", unit, UNITS) != mechanism.unit:
        raise ValueError(f"unit is {unit!r} but the mechanism protects unit {mechanism.unit!r}")
    return {mechanism.unit: mechanism}


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is True or False."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def check_description(description: object) -> str:
    """``description`` if it is a string that says something."""
    if not check_str("description", description).strip():
        raise ValueError("description must say what the release was, got an empty string")
    return description  # type: ignore[return-value]


def check_str(name: str, value: object) -> str:
    """``value`` if it is a string."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__}")
    return value


def check_seeds(seeds: Mapping[str, int]) -> dict[str, int]:
    """``seeds`` as a dictionary name → int, if it maps strings to integers."""
    if not isinstance(seeds, Mapping):
        raise TypeError(f"seeds must be a mapping name → integer, got {type(seeds).__name__}")
    for name, value in seeds.items():
        if not isinstance(name, str) or isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"seeds must map names to integers, got {name!r}: {value!r}")
    return {name: int(value) for name, value in seeds.items()}
