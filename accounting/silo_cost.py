"""What a release costs a silo's budget: its data-independent RDP at the filter's orders, then its pure ε.

:func:`release_cost` prices a release by its public parameters alone (a privfed
:class:`~accounting.mechanism.Mechanism` or its ``{"kind", "unit", "parameters"}`` record), so the silo
knows the cost before it touches its data; :class:`~accounting.silo_budget.SiloBudget` charges it.

**Units.** ``"example"`` accepts example- and party-level releases (a party-level guarantee covers any
change of its examples); ``"party"`` accepts party-level releases only; ``"person"`` (rows carrying a
person id, at most ``max_records_per_person = k`` rows each) accepts party-level releases as they are and
example-level ones through RDP group privacy (Mironov 2017, "Rényi differential privacy", Prop. 11 in
arXiv:1702.07476): a mechanism (α, ρ(α))-RDP for neighbours at distance 1 is (β, 3^c·ρ(2^c·β))-RDP for
data sets at distance ≤ 2^c, c = ⌈log₂ k⌉, for β ≥ 2; below order 2 the cost is ∞. A pure ε becomes kε.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from ._checks import check_choice
from .mechanism import Mechanism
from .registry import public_mechanism_from_record
from .silo_ledger import BUDGET_UNITS

__all__ = ["release_cost"]

#: The mechanism units each budget unit accepts (see the module docstring).
_ACCEPTED = {"example": ("example", "party"), "party": ("party",), "person": ("example", "party")}


def _as_mechanism(release: object) -> Mechanism:
    if isinstance(release, Mechanism):
        return release
    if isinstance(release, Mapping):
        mechanism, _ = public_mechanism_from_record(release)
        return mechanism
    raise TypeError(f"release must be a privfed Mechanism or its {{'kind', 'unit', 'parameters'}} record, got "
                    f"{type(release).__name__}")


def release_cost(release: object, orders: Sequence[float], *, unit: str,
                 max_records_per_person: int | None = None) -> tuple[Mechanism, np.ndarray]:
    """The release as a mechanism, and its cost for a budget of ``unit``: its data-independent RDP at each of
    ``orders``, then its pure ε (``inf`` when it has none), the curve :class:`~accounting.privacy_filter.RenyiFilter`
    takes.

    Raises a one-line ``ValueError`` when the release has no data-independent bound (its cost would need the
    private data) or protects a unit the budget cannot use.
    """
    mechanism = _as_mechanism(release)
    unit = check_choice("unit", unit, BUDGET_UNITS)
    if mechanism.unit not in _ACCEPTED[unit]:
        raise ValueError(f"release protects unit {mechanism.unit!r}; a {unit}-level budget accepts "
                         f"{' or '.join(_ACCEPTED[unit])}-level releases only (no bound on a whole party's influence "
                         "follows from an example-level one)")
    points = np.asarray(orders, dtype=float)
    group = 1 if unit != "person" or mechanism.unit == "party" else int(max_records_per_person or 1)
    pure = mechanism.pure_epsilon()
    pure_cost = math.inf if pure is None else group * float(pure)  # pure ε-DP gives kε for k rows, exactly
    if group == 1:
        cost = np.asarray(mechanism.rdp_data_independent(points, analysis="tight"), dtype=float)
    else:  # Mironov 2017, Prop. 11: (β, 3^c·ρ(2^c·β)) for groups of up to 2^c rows, β >= 2
        doublings = math.ceil(math.log2(group))
        inner = np.asarray(mechanism.rdp_data_independent(points * 2**doublings, analysis="tight"), dtype=float)
        cost = np.where(points >= 2.0, 3.0**doublings * inner, np.inf)
    if cost.shape != points.shape or np.isnan(cost).any():
        raise ValueError(f"{type(mechanism).__name__} gave no usable data-independent RDP curve at the filter's orders")
    if np.isinf(cost).all() and math.isinf(pure_cost):
        raise ValueError(f"release {mechanism.kind!r} has no data-independent privacy bound (its cost depends on the "
                         "private data), so a silo cannot charge it before touching its data")
    return mechanism, np.append(cost, pure_cost)
