"""Publishing a data-dependent ε: the smooth-sensitivity release of PATE 2018 (Sec. 4.2, App. C–D).

A data-dependent ε (PATE's) is computed from the private votes, so publishing it
leaks. PATE 2018 publishes instead a *sanitised* value: the data-dependent RDP
at one order λ plus Gaussian noise scaled by its β-smooth sensitivity (the GNSS
mechanism), whose own privacy cost (Thm 23) is added to the total.
"""

from __future__ import annotations

import math
from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar

import numpy as np

from ._checks import check_choice, check_delta, check_orders, check_positive_finite
from .account import account, as_mechanisms
from .confident_gnmax import ConfidentGNMax
from .gaussian_noisy_max import GaussianNoisyMax
from .ledger import Ledger
from .mechanism import ALL_RELATIONS, ANALYSES, UNITS, Mechanism, check_relations, common_relations, relation_for_unit
from .registry import register
from .report import PrivacyReport
from .smooth_sensitivity import check_smooth_sensitivity_conditions, gnss_rdp, smooth_sensitivity

__all__ = ["SmoothSensitivityRelease", "release_epsilon", "summed_local_sensitivity", "summed_smooth_sensitivity"]

#: Releases whose data-dependent RDP has a smooth-sensitivity analysis.
_SANITISABLE = (GaussianNoisyMax, ConfidentGNMax)


@register
@dataclass(frozen=True, eq=False)
class SmoothSensitivityRelease(Mechanism):
    """The GNSS release of one number: f(D) + SS_β(D)·N(0, σ²), σ = ``noise_scale`` (PATE 2018 Thm 23).

    f is the data-dependent RDP of the releases before it and SS_β its β-smooth
    sensitivity. Its RDP at order λ is

        ρ(λ) = λ·e^{2β}/σ² + (βλ − ½·ln(1 − 2βλ)) / (λ − 1)   for 1 < λ < 1/(2β),

    and unbounded (∞) at λ ≥ 1/(2β). Data-independent; its unit is the unit of
    the releases it sanitises, and ``relations`` (default both) the relations their smooth
    sensitivity is stated for (:func:`release_epsilon` passes the releases' common ones).
    """

    beta: float
    noise_scale: float
    _: KW_ONLY
    unit: str = "example"
    relations: frozenset[str] = ALL_RELATIONS

    kind: ClassVar[str] = "smooth_sensitivity_release"

    def __post_init__(self) -> None:
        object.__setattr__(self, "beta", check_positive_finite("beta", self.beta))
        object.__setattr__(self, "noise_scale", check_positive_finite("noise_scale", self.noise_scale))
        check_choice("unit", self.unit, UNITS)
        object.__setattr__(self, "relations", check_relations(self.relations))

    @property
    def data_dependent(self) -> bool:
        return False

    @property
    def num_queries(self) -> int:
        return 1

    def rdp(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        orders = check_orders(orders)
        check_choice("analysis", analysis, ANALYSES)
        return np.array([
            gnss_rdp(beta=self.beta, noise_scale=self.noise_scale, order=float(a))
            if a < 1 / (2 * self.beta) else np.inf
            for a in orders
        ])

    def rdp_data_independent(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        return self.rdp(orders, analysis=analysis)

    def parameters(self) -> dict[str, Any]:
        return {"beta": self.beta, "noise_scale": self.noise_scale,
                **({} if self.relations == ALL_RELATIONS else {"relations": sorted(self.relations)})}


def _mechanisms_of(source: object) -> tuple[list[Mechanism], Any]:
    if isinstance(source, Ledger):
        return source.mechanisms(), source
    return list(as_mechanisms(source)), None


def summed_local_sensitivity(members: list[Mechanism], *, order: float) -> np.ndarray:
    """LS(d) of the summed data-dependent RDP of the GNMax releases among ``members``, d = 0 … T − 1.

    The local sensitivity at distance d of a sum is at most the sum of its terms'
    (each term's neighbour set at distance d is the same), so the arrays LS(d) of
    every GNMax query (and of Confident GNMax's threshold steps) are added distance
    by distance, on one common T (the largest vote total among the releases). This
    is PATE 2018's procedure (App. C, and TF Privacy's ``pate_2018`` analysis): the
    smooth sensitivity of the sum, max_d e^{−βd}·Σ LS(d), is at most the sum of
    the per-query smooth sensitivities, often several times smaller.
    Conditions C5–C6 are checked for ``order`` (``ValueError`` otherwise).
    """
    sanitisable = [member for member in members if isinstance(member, _SANITISABLE)]
    num_teachers = max(max(int(member.votes.sum(axis=1).max()), 1) for member in sanitisable)
    total = np.zeros(num_teachers)
    for member in sanitisable:
        check_smooth_sensitivity_conditions(member.sigma, member.num_classes, order)
        if not isinstance(member, ConfidentGNMax) or member.num_answered:
            total += member.local_sensitivity_bounds(order, num_teachers=num_teachers).sum(axis=0)
        if isinstance(member, ConfidentGNMax):
            total += member.threshold_local_sensitivity_bounds(order, num_teachers=num_teachers).sum(axis=0)
    return total


def summed_smooth_sensitivity(members: list[Mechanism], *, order: float, beta: float) -> float:
    """SS_β of the summed data-dependent RDP: max_d e^{−βd}·LS(d) of :func:`summed_local_sensitivity`."""
    return float(smooth_sensitivity(summed_local_sensitivity(members, order=order), beta=beta))


def _estimate_epsilon(rdp: float, *, order: float, delta: float) -> float:
    """ε at ``delta`` of an RDP estimate at one order: the conversion dp-accounting applies at that order
    (Canonne, Kamath, Steinke 2020, Prop. 12), ρ + ln(1 − 1/λ) − ln(δλ)/(λ − 1).

    dp-accounting returns ε = 0 outright for an RDP at most −ln(1 − δ²) (then the total
    variation is at most δ, a (0, δ) guarantee): that needs a proven RDP, which a noisy
    estimate clamped at 0 is not; so the conversion's own formula is used at every value.
    """
    return rdp + math.log1p(-1.0 / order) - math.log(delta * order) / (order - 1.0)


def release_epsilon(
    mechanism_or_ledger: Mechanism | list[Mechanism] | Any,
    *,
    delta: float,
    order: float,
    beta: float,
    noise_scale: float,
    random_state: int | np.random.Generator | None = None,
) -> PrivacyReport:
    """Publish the data-dependent ε of GNMax releases through PATE 2018's smooth-sensitivity release.

    For the releases R (a mechanism, a sequence, or a :class:`Ledger`'s
    mechanisms of its primary unit) and the order λ = ``order``:

    1. f = Σ RDP_R(λ): the data-dependent RDP of each :class:`GaussianNoisyMax`
       and :class:`ConfidentGNMax` (Thm 6; both steps of the latter) plus the
       data-independent RDP of every data-independent release;
    2. SS = the β-smooth sensitivity of f's data-dependent part: the local-sensitivity
       bounds LS(d) of every GNMax query (and Confident GNMax's threshold steps)
       are summed distance by distance, then SS = max_d e^{−βd}·Σ LS(d)
       (:func:`summed_smooth_sensitivity`, PATE 2018's procedure); conditions
       C5–C6 are checked for λ, else ``ValueError``;
    3. the released value f̃ = f + SS·σ·z, z ~ N(0, 1) from ``random_state``
       (σ = ``noise_scale``): the GNSS mechanism;
    4. its cost ρ(λ) (Thm 23, requires λ < 1/(2β)) is added: the sanitised RDP is
       max(f̃ + ρ(λ), 0) (RDP is never negative; a noisy draw below 0 is clamped),
       converted to ε at ``delta`` with dp-accounting's conversion at λ (> 0).

    The report's ε is this sanitised ε; ``data_dependent`` is False, since it is
    safe to publish (its release is accounted). It is a noisy **estimate** of the
    data-dependent bound (PATE 2018 Table 2 reports the same quantity), not an
    upper bound: its summary and ``str()`` say so, and
    ``epsilon_data_independent`` (which includes ρ) remains the guarantee that
    holds for every data set. Neither f nor SS appears in the
    report (both are private). A ledger gets the GNSS release as an entry of its own.

    Examples
    --------
    >>> import numpy as np, privfed
    >>> votes = np.array([[240, 5, 5], [200, 30, 20]] * 50)
    >>> report = privfed.release_epsilon(privfed.GaussianNoisyMax(votes, 40.0), delta=1e-5, order=10.0,
    ...                                  beta=0.02, noise_scale=10.0, random_state=0)
    >>> report.epsilon < report.epsilon_data_independent
    True
    """
    delta = check_delta(delta)
    order = check_positive_finite("order", order)
    beta = check_positive_finite("beta", beta)
    noise_scale = check_positive_finite("noise_scale", noise_scale)
    if not 1.0 < order < 1.0 / (2.0 * beta):
        raise ValueError(f"order must be in (1, 1/(2·beta)) = (1, {1.0 / (2.0 * beta):g}) for the GNSS release "
                         f"(PATE 2018 Thm 23), got order={order!r}")
    members, ledger = _mechanisms_of(mechanism_or_ledger)
    if not any(isinstance(m, _SANITISABLE) for m in members):
        raise ValueError("mechanism_or_ledger must hold at least one GaussianNoisyMax or ConfidentGNMax release: only "
                         "their data-dependent ε has a smooth-sensitivity analysis (see docs/accounting.md)")
    for member in members:
        if member.data_dependent and not isinstance(member, _SANITISABLE):
            raise ValueError(
                f"release_epsilon cannot sanitise a data-dependent {member.kind} release: only GaussianNoisyMax and "
                "ConfidentGNMax have a smooth-sensitivity analysis (for LaplaceNoisyMax see docs/accounting.md)"
            )
    units = sorted({m.unit for m in members})
    if len(units) != 1:
        raise ValueError(f"mechanism_or_ledger must protect one unit, got units {units}")
    grid = np.array([order])
    value = sum(float(member.rdp(grid)[0]) if isinstance(member, _SANITISABLE)
                else float(member.rdp_data_independent(grid)[0]) for member in members)
    sensitivity = summed_smooth_sensitivity(members, order=order, beta=beta)
    relations = common_relations(members)
    gnss = SmoothSensitivityRelease(beta, noise_scale, unit=units[0], relations=relations or ALL_RELATIONS)
    noise = float(np.random.default_rng(random_state).standard_normal())
    # RDP is never negative: a noisy draw below 0 is clamped at 0.
    sanitised = max(value + sensitivity * noise_scale * noise + float(gnss.rdp(grid)[0]), 0.0)
    epsilon = _estimate_epsilon(sanitised, order=order, delta=delta)
    independent = account([*members, gnss], delta=delta).epsilon_data_independent
    if ledger is not None:
        ledger.record(gnss, note=(f"smooth-sensitivity (GNSS) release of the data-dependent RDP at order {order:g}: "
                                  f"β = {beta:g}, noise scale σ = {noise_scale:g}; sanitised RDP {sanitised:.6g}"))
    return PrivacyReport(
        epsilon=max(epsilon, 0.0),
        delta=delta,
        order=order,
        orders=(order,),
        rdp=(sanitised,),
        log_moments=(sanitised * (order - 1.0),),
        data_dependent=False,
        epsilon_data_independent=independent,
        analysis="tight",
        conversion=("PATE 2018 smooth-sensitivity release at one order: data-dependent RDP + smooth sensitivity × "
                    "N(0, σ²) (GNSS) + the GNSS cost ρ(λ) (Thm 23), converted by dp-accounting's RDP conversion"),
        unit=units[0],
        relation=relation_for_unit(units[0], relations),
        relations=tuple(sorted(relations)),
        mechanisms=(),
        notes=(
            "SANITISED data-dependent ε (PATE 2018 §4.2): safe to publish, its release is accounted; it is a noisy "
            "estimate of the private data-dependent bound and can fall below it; epsilon_data_independent is the "
            "worst-case guarantee (GNSS cost included)",
        ),
        method="smooth_sensitivity",
    )

