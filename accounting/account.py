"""``account()``: compose mechanisms sequentially and convert to (ε, δ)."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ._checks import check_choice, check_delta, check_orders
from .conversion import rdp_to_epsilon
from .mechanism import ANALYSES, Mechanism, common_relations, relation_for_unit
from .observers import check_observer
from .orders import default_orders
from .report import MechanismReport, PrivacyReport

if TYPE_CHECKING:
    import dp_accounting

__all__ = ["METHODS", "Bound", "account", "as_mechanisms", "best_bound", "composed_dp_event", "conversion_description",
           "pld_event", "pure_composition"]

_CONVERSIONS = {
    "classic": (
        "moments-accountant tail bound ε = min_α RDP(α) + ln(1/δ)/(α − 1) (PATE 2017 Thm 2; Mironov 2017 Prop. 3)"
    ),
    "tight": "dp-accounting compute_epsilon (improved RDP conversion, Balle et al. 2020 / Canonne et al. 2020)",
}
_PLD_CONVERSION = (
    "dp-accounting privacy loss distribution of the mechanisms' DpEvents (pessimistic discretization, "
    "self-compositions applied by privfed; a plain Gaussian's exact privacy profile in closed form instead), "
    "tighter than the RDP conversion here"
)
_PURE_CONVERSION = (
    "basic composition of the mechanisms' pure ε-DP guarantees (Σ ε_i, valid for every δ), "
    "tighter than the RDP and PLD bounds here"
)

#: Which accountant gave an ε: the RDP curve, the privacy loss distribution, or pure basic composition.
METHODS: tuple[str, ...] = ("rdp", "pld", "pure")


def conversion_description(analysis: str, method: str) -> str:
    """How ε was obtained: the analysis' RDP conversion, or the PLD or pure composition when smaller."""
    if method == "pld":
        return _PLD_CONVERSION
    if method == "pure":
        return _PURE_CONVERSION
    return _CONVERSIONS[analysis]


PLD_INDEPENDENT_NOTE = (
    "epsilon_data_independent comes from the privacy loss distribution (PLD) of the mechanisms' DpEvents"
)
PURE_INDEPENDENT_NOTE = "epsilon_data_independent comes from basic composition of the mechanisms' pure ε-DP guarantees"


def _is_dp_event(value: object) -> bool:
    """Whether ``value`` is a dp-accounting ``DpEvent`` (none exists before dp-accounting is imported, so a process
    that accounts privfed mechanisms alone never imports it)."""
    dp_accounting = sys.modules.get("dp_accounting")
    return dp_accounting is not None and isinstance(value, dp_accounting.DpEvent)


def as_mechanisms(
    mechanisms: Mechanism | dp_accounting.DpEvent | Iterable[Mechanism | dp_accounting.DpEvent],
) -> tuple[Mechanism, ...]:
    """Normalise one mechanism or a sequence of them to a tuple, checking types.

    A dp-accounting ``DpEvent`` stands for :class:`~accounting.dp_event_release.DpEventRelease`
    of it at example level; wrap it in ``DpEventRelease(event, unit="party")`` for a party-level event.
    """
    if isinstance(mechanisms, Mechanism) or _is_dp_event(mechanisms):
        mechanisms = (mechanisms,)
    try:
        members = tuple(mechanisms)
    except TypeError as error:
        raise TypeError(
            "mechanisms must be a privfed mechanism, a dp-accounting DpEvent or a sequence of them, got "
            f"{type(mechanisms).__name__}"
        ) from error
    for member in members:
        if not (isinstance(member, Mechanism) or _is_dp_event(member)):
            raise TypeError("mechanisms must hold privfed mechanisms or dp-accounting DpEvents, got an element of "
                            f"type {type(member).__name__}")
    if not any(_is_dp_event(m) for m in members):
        return members
    from .dp_event_release import DpEventRelease

    return tuple(DpEventRelease(m) if _is_dp_event(m) else m for m in members)


def composed_dp_event(members: Sequence[Mechanism]) -> dp_accounting.DpEvent | None:
    """The members' dp-accounting events composed (one event for one member), or ``None`` when some member has
    none (or there are no members)."""
    events = [member.dp_event() for member in members]
    if not events or any(event is None for event in events):
        return None
    if len(events) == 1:
        return events[0]
    import dp_accounting  # already imported: the members' events are its

    return dp_accounting.ComposedDpEvent(events)


def pld_event(members: Sequence[Mechanism], delta: float, *,
              epsilon_hint: float) -> tuple[dp_accounting.DpEvent, float] | None:
    """The composed event whose PLD gives the members' PLD ε, and the ε hint that sizes its grid
    (:func:`~accounting._dp_accounting.pld_interval`); ``None`` when some member has no event, or no PLD is built
    (see :func:`best_bound`).

    ``epsilon_hint`` is a valid upper bound (the data-independent RDP ε); it sizes
    the PLD grid, and no PLD is built when it is infinite. A plain Gaussian event
    (:func:`~accounting._dp_accounting.gaussian_mu`) gets the closed form of its privacy profile instead of a
    PLD, so its hint is returned as given.
    """
    event = composed_dp_event(members)
    if event is None or not math.isfinite(epsilon_hint):
        return None
    from ._dp_accounting import MAX_PLD_COMPOSITIONS, gaussian_mu, pld_compositions

    if pld_compositions(event) > MAX_PLD_COMPOSITIONS:
        return None  # bounded work: beyond the cap the RDP and pure bounds, closed form in the count, stand alone
    if gaussian_mu(event) is not None:
        return event, epsilon_hint  # a plain Gaussian's ε is its closed form: no grid to size
    # The grid must suit the events themselves: a hint computed elsewhere (a ledger's recorded curves, which an
    # edit can make inconsistent with the recorded parameters) could otherwise ask for a fine grid over a huge
    # privacy-loss range and take unbounded time.
    orders = default_orders("tight")
    own = np.sum([member.rdp_data_independent(orders, analysis="tight") for member in members], axis=0)
    epsilon_hint = max(epsilon_hint, rdp_to_epsilon(orders, own, delta, "tight")[0])
    if not math.isfinite(epsilon_hint):
        return None
    return event, epsilon_hint


def _pld_epsilon(members: Sequence[Mechanism], delta: float, *, epsilon_hint: float) -> float | None:
    """ε of the PLD of all members' events composed (:func:`pld_event`), or ``None`` when there is none."""
    found = pld_event(members, delta, epsilon_hint=epsilon_hint)
    if found is None:
        return None
    event, hint = found
    from ._dp_accounting import event_pld_epsilon

    return event_pld_epsilon(event, delta, epsilon_hint=hint)


def pure_composition(pure_epsilons: Iterable[float | None]) -> float | None:
    """Σ ε_i of pure ε_i-DP releases (basic composition), or ``None`` when one has no pure guarantee."""
    values = list(pure_epsilons)
    if any(value is None for value in values):
        return None
    return float(sum(values))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Bound:
    """The smallest valid ε a composition has, and which accountant gave it.

    ``method`` and ``method_data_independent`` are each one of :data:`METHODS`.
    """

    epsilon: float
    order: float
    epsilon_data_independent: float
    method: str
    method_data_independent: str

    def notes(self) -> list[str]:
        """The note a report needs when its data-independent ε came from another accountant than its ε."""
        if self.method_data_independent == self.method:
            return []
        return {"pld": [PLD_INDEPENDENT_NOTE], "pure": [PURE_INDEPENDENT_NOTE]}.get(self.method_data_independent, [])


def best_bound(
    members: Sequence[Mechanism],
    orders: np.ndarray,
    curve: np.ndarray,
    independent_curve: np.ndarray,
    delta: float,
    analysis: str,
    *,
    pure_epsilon: float | None,
) -> Bound:
    """The minimum of every valid bound privfed has for the composition of ``members``.

    Always the analysis' RDP conversion of ``curve`` (and of ``independent_curve``
    for the data-independent ε). Under ``analysis="tight"`` also the privacy loss
    distribution of the members' dp-accounting events (when every member has
    one, and no event is self-composed more than
    :data:`~privfed.accounting._dp_accounting.MAX_PLD_COMPOSITIONS` times without
    a closed form) and basic composition of pure ε-DP, ``pure_epsilon`` (when every member
    is pure DP): both are data-independent, so they cap ε and the
    data-independent ε alike. ``analysis="classic"`` is the papers' own
    arithmetic and stays on its RDP conversion.

    Each of the three is non-decreasing when a mechanism is added (RDP curves add,
    pure ε add, the PLD grid only coarsens to nested grids: see
    :func:`~privfed.accounting._dp_accounting.pld_interval`), so their minimum is too.
    """
    epsilon, order = rdp_to_epsilon(orders, curve, delta, analysis)
    independent, _ = rdp_to_epsilon(orders, independent_curve, delta, analysis)
    candidates = {"rdp": (epsilon, independent)}
    if analysis == "tight":
        pld = _pld_epsilon(members, delta, epsilon_hint=independent)
        if pld is not None:
            candidates["pld"] = (pld, pld)
        if pure_epsilon is not None:
            candidates["pure"] = (pure_epsilon, pure_epsilon)
    method = min(candidates, key=lambda name: candidates[name][0])
    method_independent = min(candidates, key=lambda name: candidates[name][1])
    return Bound(
        epsilon=candidates[method][0],
        order=order,
        epsilon_data_independent=candidates[method_independent][1],
        method=method,
        method_data_independent=method_independent,
    )


def account(
    mechanisms: Mechanism | dp_accounting.DpEvent | Iterable[Mechanism | dp_accounting.DpEvent],
    *,
    delta: float,
    analysis: str = "tight",
    orders: Iterable[float] | None = None,
    observer: str | None = None,
) -> PrivacyReport:
    """Account one mechanism or the sequential composition of several.

    The RDP curves of the mechanisms are summed order by order (Mironov 2017,
    Prop. 1) and converted to (ε, δ) with the analysis' conversion. All
    mechanisms must protect the same unit: privfed never composes an
    example-level guarantee with a party-level one. The report's neighbouring
    relation (``relations``, ``relation``) is what every mechanism's analysis
    covers: the intersection of their :attr:`Mechanism.relations`.

    Parameters
    ----------
    mechanisms:
        A :class:`Mechanism` or a sequence of them, released one after another. A
        dp-accounting ``DpEvent`` is accepted wherever a mechanism is: it is accounted as
        :class:`~accounting.dp_event_release.DpEventRelease` (dp-accounting's RDP of the
        event, and its PLD where privfed builds one) at example level.
    delta:
        Target δ in (0, 1).
    analysis:
        ``"tight"`` (default): privfed's best valid bound, on a wide grid of orders
        (fractional ones included) with dp-accounting's conversion; where every
        mechanism has a dp-accounting event (:meth:`Mechanism.dp_event`), the
        privacy loss distribution of the composed events is computed too, and where
        every mechanism is pure ε-DP, basic composition Σ ε_i; the smallest ε is
        reported, ``method`` saying which (``"rdp"``, ``"pld"`` or ``"pure"``).
        ``"classic"``: the papers' analysis and conversion, on orders 2..9 (the
        papers' moments λ = 1..8) unless ``orders`` is given.
    orders:
        Rényi orders α > 1 to evaluate; default depends on ``analysis``.
    observer:
        Who sees the mechanisms' outputs (``"public"`` or ``"coordinator"``, see
        :mod:`~privfed.accounting.observers`), stated on the report; ``None`` (default):
        not stated. The mechanisms are accounted the same whoever observes them; a
        ledger (:meth:`privfed.Ledger.account`) chooses the releases each observer sees.

    Returns
    -------
    PrivacyReport

    Examples
    --------
    >>> import numpy as np, privfed
    >>> votes = np.array([[48, 2], [30, 20]])
    >>> report = privfed.account(privfed.LaplaceNoisyMax(votes, gamma=0.05), delta=1e-5)
    >>> report.epsilon <= report.epsilon_data_independent
    True
    """
    analysis = check_choice("analysis", analysis, ANALYSES)
    delta = check_delta(delta)
    observer = None if observer is None else check_observer(observer)
    grid = default_orders(analysis) if orders is None else check_orders(orders)
    members = as_mechanisms(mechanisms)
    units = sorted({m.unit for m in members})
    if len(units) > 1:
        raise ValueError(
            f"mechanisms must all protect the same unit (example or party) to compose, got units {units}; "
            "account each unit separately"
        )
    unit = units[0] if units else None

    rows: list[MechanismReport] = []
    curves, independent_curves = [], []
    for member in members:
        curve = member.rdp(grid, analysis=analysis)
        independent = member.rdp_data_independent(grid, analysis=analysis)
        curves.append(curve)
        independent_curves.append(independent)
        alone = best_bound([member], grid, curve, independent, delta, analysis, pure_epsilon=member.pure_epsilon())
        rows.append(
            MechanismReport(
                kind=member.kind,
                unit=member.unit,
                parameters=member.parameters(),
                num_queries=member.num_queries,
                data_dependent=member.data_dependent,
                epsilon=alone.epsilon,
                order=alone.order,
                epsilon_data_independent=alone.epsilon_data_independent,
                pure_epsilon=member.pure_epsilon(),
                method=alone.method,
                relations=tuple(sorted(member.relations)),
            )
        )

    total = np.sum(curves, axis=0) if curves else np.zeros_like(grid)
    total_independent = np.sum(independent_curves, axis=0) if curves else np.zeros_like(grid)
    if rows:
        bound = best_bound(
            members, grid, total, total_independent, delta, analysis,
            pure_epsilon=pure_composition(m.pure_epsilon() for m in members),
        )
    else:
        bound = Bound(0.0, float(grid[0]), 0.0, "rdp", "rdp")

    notes = [note for member in members for note in member.notes()] + bound.notes()
    relations = common_relations(members)

    return PrivacyReport(
        epsilon=bound.epsilon,
        delta=delta,
        order=bound.order,
        orders=tuple(float(a) for a in grid),
        rdp=tuple(float(r) for r in total),
        log_moments=tuple(float(r) for r in total * (grid - 1.0)),
        data_dependent=any(m.data_dependent for m in members),
        epsilon_data_independent=bound.epsilon_data_independent,
        analysis=analysis,
        conversion=conversion_description(analysis, bound.method),
        unit=unit,
        relation=relation_for_unit(unit, relations) if unit else None,
        relations=tuple(sorted(relations)) if unit else None,
        mechanisms=tuple(rows),
        notes=tuple(dict.fromkeys(notes)),
        method=bound.method,
        observer=observer,
        dp_event=composed_dp_event(members),
        rdp_data_independent=tuple(float(r) for r in total_independent),
    )
