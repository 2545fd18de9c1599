"""A ledger's budget filter: a release that would take a unit's spent ε past its target is refused before it is
recorded.

``Ledger(target_epsilon=..., delta=...)`` checks every release with :func:`check_budget` and raises
:class:`BudgetExceededError` before appending. By default the filter compares the *data-independent* ε
(``budget_basis="data_independent"``) under the ledger's analysis: the point where a pipeline stops then
depends only on public parameters, so the number of answered queries can be published. With
``budget_basis="data_dependent"`` the stopping point depends on the private votes and is itself private.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ._checks import check_choice, check_positive_finite
from .conversion import rdp_to_epsilon
from .ledger_entry import LedgerEntry, UnitAnalysis
from .ledger_totals import releases, total_curve
from .mechanism import UNITS

__all__ = ["BUDGET_BASES", "BudgetExceededError", "check_budget", "target_per_unit"]

#: What the budget filter compares with the target: the data-independent ε (default) or the data-dependent one.
BUDGET_BASES: tuple[str, ...] = ("data_independent", "data_dependent")


class BudgetExceededError(RuntimeError):
    """A release was refused because it would take a unit's spent ε past the ledger's target.

    Nothing was recorded. Attributes: ``unit``, ``epsilon`` (what would have been
    spent), ``target_epsilon``, ``delta``, ``analysis``, ``basis``.
    """

    def __init__(self, *, unit: str, epsilon: float, target_epsilon: float, delta: float, analysis: str, basis: str):
        self.unit, self.epsilon, self.target_epsilon = unit, epsilon, target_epsilon
        self.delta, self.analysis, self.basis = delta, analysis, basis
        super().__init__(
            f"recording this release would spend ε = {epsilon!r} > target {target_epsilon!r} at {unit} level "
            f"({analysis} analysis, δ = {delta:g}, {basis.replace('_', '-')} ε); "
            "it was refused and nothing was recorded"
        )


def target_per_unit(target_epsilon: object) -> dict[str, float]:
    """The ``target_epsilon`` argument of a ledger as unit → ε (empty for None: no budget)."""
    if target_epsilon is None:
        return {}
    if isinstance(target_epsilon, Mapping):
        for unit in target_epsilon:
            check_choice("target_epsilon's unit", unit, UNITS)
        return {
            unit: check_positive_finite(f"target_epsilon[{unit!r}]", value) for unit, value in target_epsilon.items()
        }
    value = check_positive_finite("target_epsilon", target_epsilon)
    return {unit: value for unit in UNITS}


def check_budget(entries: Sequence[LedgerEntry], analyses: Mapping[str, UnitAnalysis], *,
                 target_epsilon: Mapping[str, float], delta: float | None, analysis: str, basis: str) -> None:
    """Raise :class:`BudgetExceededError` if the release analysed as ``analyses`` (unit → analysis), appended to
    ``entries``, would take a unit with a target past it; nothing else happens."""
    for unit, new_release in analyses.items():
        target = target_epsilon.get(unit)
        if target is None:
            continue
        if delta is None:  # set with the target in Ledger.__init__; the attribute may have been cleared since
            raise ValueError("delta is required with target_epsilon: the budget is an (ε, δ) guarantee; set delta")
        orders, rdp, independent = total_curve(releases(entries, unit), unit, analysis, extra=new_release)
        curve = independent if basis == "data_independent" else rdp
        epsilon, _ = rdp_to_epsilon(orders, curve, delta, analysis)
        if epsilon > target:
            raise BudgetExceededError(
                unit=unit, epsilon=epsilon, target_epsilon=target, delta=delta, analysis=analysis, basis=basis,
            )
