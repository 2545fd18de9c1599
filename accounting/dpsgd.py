"""DP-SGD: the Poisson-subsampled Gaussian mechanism composed over training steps.

Sources: Abadi et al., "Deep learning with differential privacy", CCS 2016
(the algorithm and the moments accountant); Mironov, Talwar, Zhang, "Rényi
differential privacy of the sampled Gaussian mechanism", 2019 (the RDP that
dp-accounting and Opacus compute). privfed delegates the numbers to dp-accounting.
Replace-one: Mironov, "Rényi differential privacy", CSF 2017, Prop. 11 (the weak
triangle inequality, for the RDP curve) and dp-accounting's replace-one privacy
loss distribution of the Poisson-subsampled Gaussian (for the tight ε).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar

import dp_accounting
import numpy as np
from dp_accounting.pld import privacy_loss_distribution

from ._checks import (
    check_at_most,
    check_choice,
    check_delta,
    check_int_at_least,
    check_orders,
    check_positive_finite,
    check_probability,
)
from ._dp_accounting import PldDpEvent, event_rdp
from .account import best_bound
from .mechanism import ANALYSES, RELATIONS, UNITS, Mechanism
from .orders import default_orders
from .registry import register
from .sequential import compose_sequential

__all__ = ["DPSGD", "ReplaceOneSampledGaussianDpEvent", "compose_dpsgd", "dpsgd_noise_multiplier",
           "replace_one_rdp", "sampled_gaussian_rdp"]

#: The largest noise multiplier :func:`dpsgd_noise_multiplier` considers.
MAX_NOISE_MULTIPLIER = 1000.0

#: Smallest noise multiplier accepted: at 10⁻⁴ dp-accounting's RDP already overflows.
MIN_NOISE_MULTIPLIER = 1e-3
#: Most steps accepted (10⁹; at 10¹² dp-accounting's RDP overflows).
MAX_STEPS = 10**9


@dataclass(frozen=True)
class ReplaceOneSampledGaussianDpEvent(PldDpEvent):
    """One DP-SGD step under replace-one: the Poisson-subsampled Gaussian with one example replaced.

    dp-accounting's ``PoissonSampledDpEvent(q, GaussianDpEvent(σ))`` names no relation: its RDP
    accountant states it for add-or-remove-one only. This leaf carries the relation with it, so that the
    PLD bridge (:func:`~privfed.accounting._dp_accounting.event_pld`) builds dp-accounting's replace-one
    PLD (``from_gaussian_mechanism(..., neighboring_relation=REPLACE_ONE)``: the replaced example's
    clipped gradient ``g`` becomes another ``g'``, each included with probability q, ‖g‖, ‖g'‖ ≤ C) and
    no consumer can account it under add-or-remove-one by mistake.
    """

    noise_multiplier: float
    sampling_probability: float

    def pld(self, *, value_discretization_interval: float) -> privacy_loss_distribution.PrivacyLossDistribution:
        """dp-accounting's pessimistic replace-one PLD of one Poisson-subsampled Gaussian step."""
        return privacy_loss_distribution.from_gaussian_mechanism(
            standard_deviation=self.noise_multiplier,
            sampling_prob=self.sampling_probability,
            value_discretization_interval=value_discretization_interval,
            neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
        )


def replace_one_rdp(add_or_remove: Any, orders: np.ndarray) -> np.ndarray:
    """A replace-one RDP bound at ``orders`` from an add-or-remove-one RDP curve ``add_or_remove(orders)``.

    A replacement D → D' passes through D'' = D minus the example (a removal, then an addition).
    Mironov 2017, Prop. 11 (weak triangle inequality, p = q = 2): for α > 1,

        D_α(P‖R) ≤ (α − ½)/(α − 1) · D_{2α}(P‖Q) + D_{2α−1}(Q‖R),

    with P, Q, R the outputs on D, D'', D'. ``add_or_remove`` must bound both directions (a removal and
    an addition); dp-accounting's sampled-Gaussian RDP does (Mironov, Talwar, Zhang 2019, Thm 5: the
    mixture-to-Gaussian direction dominates). Valid, and looser than the replace-one PLD, which
    :meth:`DPSGD.dp_event` gives for the tight ε.
    """
    orders = np.asarray(orders, dtype=float)
    return (orders - 0.5) / (orders - 1.0) * add_or_remove(2.0 * orders) + add_or_remove(2.0 * orders - 1.0)


@register
@dataclass(frozen=True, eq=False)
class DPSGD(Mechanism):
    """DP-SGD training: ``steps`` Poisson-subsampled Gaussian mechanisms.

    Each step includes every example independently with probability
    q = ``sample_rate``, clips each per-example gradient to ℓ2 norm C and adds
    N(0, σ²C²) with σ = ``noise_multiplier`` to their sum. Its RDP is that of the
    sampled Gaussian mechanism (Mironov et al. 2019), composed ``steps`` times;
    the dp-accounting event is
    ``PoissonSampledDpEvent(q, GaussianDpEvent(σ))`` self-composed ``steps`` times
    (:meth:`dp_event`), so ``analysis="tight"`` also takes its PLD.

    **Unit and relation**: example level. ``neighboring_relation`` is the relation analysed
    (:attr:`relations`), never both:

    * ``"add_or_remove_one"`` (default; one training example present or absent), as Opacus and
      dp-accounting state DP-SGD: the sampled Gaussian's RDP and add-or-remove-one PLD;
    * ``"replace_one"`` (one example replaced by another): the PLD is dp-accounting's replace-one
      PLD of the same step (:class:`ReplaceOneSampledGaussianDpEvent`), the RDP curve
      :func:`replace_one_rdp` of the add-or-remove-one curve. Replace-one ε is larger (1.3–2× at
      usual settings: ``DPSGD(1.1, 0.01, 2000)`` at δ = 10⁻⁵ gives 2.16 add-or-remove-one and
      3.66 replace-one).

    For party-level DP-SGD (each party's data a unit, user-level sampling), pass ``unit="party"``
    only when the party is what is sampled and clipped.

    ``analysis="classic"`` is the moments accountant of Abadi et al.: the same
    RDP curve, converted with the classic tail bound on orders 2..9.
    """

    noise_multiplier: float
    sample_rate: float
    steps: int
    _: KW_ONLY
    unit: str = "example"
    neighboring_relation: str = "add_or_remove_one"

    kind: ClassVar[str] = "dpsgd"

    def __post_init__(self) -> None:
        noise = check_positive_finite("noise_multiplier", self.noise_multiplier)
        if noise < MIN_NOISE_MULTIPLIER:
            raise ValueError(f"noise_multiplier must be >= {MIN_NOISE_MULTIPLIER:g} (below it the RDP of one step "
                             f"overflows a float64 and no guarantee is left to account), got {noise!r}")
        object.__setattr__(self, "noise_multiplier", noise)
        object.__setattr__(self, "sample_rate", check_probability("sample_rate", self.sample_rate, open_high=False))
        steps = check_int_at_least("steps", self.steps, 1)
        object.__setattr__(self, "steps", int(check_at_most(
            "steps", steps, MAX_STEPS, "dp-accounting's RDP of more steps overflows a float64")))
        check_choice("unit", self.unit, UNITS)
        check_choice("neighboring_relation", self.neighboring_relation, RELATIONS)

    @property
    def relations(self) -> frozenset[str]:
        """``{neighboring_relation}``: the one relation this run is analysed for."""
        return frozenset({self.neighboring_relation})

    @property
    def data_dependent(self) -> bool:
        return False

    @property
    def num_queries(self) -> int:
        """Noisy gradient steps."""
        return self.steps

    def add_or_remove_event(self) -> dp_accounting.DpEvent:
        """``PoissonSampledDpEvent(q, GaussianDpEvent(σ))`` self-composed ``steps`` times (dp-accounting's
        DP-SGD event, which its accountants state for add-or-remove-one)."""
        return dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(
                self.sample_rate, dp_accounting.GaussianDpEvent(self.noise_multiplier)
            ),
            self.steps,
        )

    def dp_event(self) -> dp_accounting.DpEvent:
        """The run under its relation: :meth:`add_or_remove_event`, or
        :class:`ReplaceOneSampledGaussianDpEvent` self-composed ``steps`` times."""
        if self.neighboring_relation == "add_or_remove_one":
            return self.add_or_remove_event()
        return dp_accounting.SelfComposedDpEvent(
            ReplaceOneSampledGaussianDpEvent(self.noise_multiplier, self.sample_rate), self.steps)

    def rdp(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        orders = check_orders(orders)
        check_choice("analysis", analysis, ANALYSES)
        if self.neighboring_relation == "add_or_remove_one":
            return self._add_or_remove_rdp(orders)
        return replace_one_rdp(self._add_or_remove_rdp, orders)

    def _add_or_remove_rdp(self, orders: np.ndarray) -> np.ndarray:
        """dp-accounting's RDP of :meth:`add_or_remove_event` at ``orders``, through :func:`sampled_gaussian_rdp`."""
        return sampled_gaussian_rdp(self.noise_multiplier, self.sample_rate, self.steps,
                                    tuple(float(a) for a in orders)).copy()

    def rdp_data_independent(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        return self.rdp(orders, analysis=analysis)

    def parameters(self) -> dict[str, Any]:
        """σ, q and steps; ``neighboring_relation`` only when replace-one (records of add-or-remove-one
        runs, the default, are unchanged)."""
        parameters: dict[str, Any] = {"noise_multiplier": self.noise_multiplier, "sample_rate": self.sample_rate,
                                      "steps": self.steps}
        if self.neighboring_relation != "add_or_remove_one":
            parameters["neighboring_relation"] = self.neighboring_relation
        return parameters


@functools.lru_cache(maxsize=256)
def sampled_gaussian_rdp(noise_multiplier: float, sample_rate: float, steps: int,
                         orders: tuple[float, ...]) -> np.ndarray:
    """RDP of ``steps`` Poisson-sampled Gaussian steps at ``orders`` (dp-accounting's ``RdpAccountant``), computed
    once per process for each set of arguments and read-only.

    The curve costs up to a CPU second on the tight grid (each fractional order sums a series), and one run asks
    for it many times: ``account()`` for the ε, its data-independent ε and the PLD's grid hint, σ's calibration
    for the σ it returns, the ledger, and an empirical audit's claim. The last 256 argument sets are kept (a few
    hundred curves of 72 floats).
    """
    curve = event_rdp(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(sample_rate, dp_accounting.GaussianDpEvent(noise_multiplier)), steps),
        np.array(orders))
    curve.setflags(write=False)
    return curve


def compose_dpsgd(releases: Sequence[DPSGD]) -> Mechanism:
    """DP-SGD releases run one after another on the same data, as one mechanism.

    Releases with the same noise multiplier, sampling rate, unit and relation are the
    same sampled Gaussian step repeated, so their composition is exactly one
    :class:`DPSGD` with the steps added (the same dp-accounting event); otherwise
    a :func:`~privfed.accounting.sequential.compose_sequential` of them.
    """
    releases = tuple(releases)
    if not releases or not all(isinstance(r, DPSGD) for r in releases):
        raise TypeError(f"releases must be one or more DPSGD mechanisms, got {releases!r}")
    first = releases[0]

    def step(run: DPSGD) -> tuple[float, float, str, str]:
        return run.noise_multiplier, run.sample_rate, run.unit, run.neighboring_relation

    if all(step(r) == step(first) for r in releases):
        return DPSGD(first.noise_multiplier, first.sample_rate, sum(r.steps for r in releases), unit=first.unit,
                     neighboring_relation=first.neighboring_relation)
    return compose_sequential(releases)


def dpsgd_noise_multiplier(*, target_epsilon: float, delta: float, sample_rate: float, steps: int,
                           neighboring_relation: str = "add_or_remove_one") -> float:
    """The smallest noise multiplier σ (to about 1 %) whose DP-SGD run has ε ≤ ``target_epsilon`` at ``delta``.

    ``neighboring_relation`` is the relation the target is stated for (:class:`DPSGD`'s:
    ``"add_or_remove_one"``, the default, or ``"replace_one"``, which needs a larger σ).
    σ is calibrated on the analysis ``privfed.account()`` reports for
    ``DPSGD(σ, sample_rate, steps, neighboring_relation=...)`` under ``analysis="tight"``: the smaller of
    dp-accounting's RDP bound and its privacy loss distribution (PLD). The
    reported ε lies in [0.97, 1] × ``target_epsilon`` (the search stops once it is
    within 1 % below the target); a σ calibrated on the RDP bound alone would
    leave 8–34 % of the target unused where the PLD is the tighter bound.

    The search: bisection on the RDP bound (cheap) gives σ_RDP, whose reported ε
    is ≤ target; then secant steps on ln ε against ln σ aimed just below the
    target (bisection once the target is bracketed), keeping the σ returned on
    the side whose reported ε is ≤ target.

    Raises
    ------
    ValueError
        If even σ = :data:`MAX_NOISE_MULTIPLIER` gives ε > ``target_epsilon``
        (the target cannot be reached with these steps and this sampling rate).

    Examples
    --------
    >>> import privfed
    >>> sigma = dpsgd_noise_multiplier(target_epsilon=2.0, delta=1e-5, sample_rate=0.01, steps=1000)
    >>> 0.97 * 2.0 <= privfed.account(DPSGD(sigma, 0.01, 1000), delta=1e-5).epsilon <= 2.0
    True
    """
    return _calibrated(
        check_positive_finite("target_epsilon", target_epsilon),
        check_delta(delta),
        check_probability("sample_rate", sample_rate, open_high=False),
        check_int_at_least("steps", steps, 1),
        check_choice("neighboring_relation", neighboring_relation, RELATIONS),
    )


#: The calibrated σ's reported ε is at least this fraction of the target.
_CALIBRATION_FLOOR = 0.99


def _reported_epsilon(sigma: float, sample_rate: float, steps: int, delta: float, relation: str) -> float:
    """ε that ``account()`` reports for one DP-SGD release (its ``best_bound``, analysis "tight")."""
    mechanism = DPSGD(sigma, sample_rate, steps, neighboring_relation=relation)
    orders = default_orders("tight")
    curve = mechanism.rdp(orders)
    return best_bound([mechanism], orders, curve, curve, delta, "tight", pure_epsilon=None).epsilon


@functools.lru_cache(maxsize=256)
def _calibrated(target: float, delta: float, sample_rate: float, steps: int, relation: str) -> float:
    # Work on x = ln σ and y = ln(reported ε / target): y decreases in x, and the answer is an x with
    # ln(_CALIBRATION_FLOOR) <= y <= 0. The upper end (y <= 0) is always a valid σ.
    floor, aim = math.log(_CALIBRATION_FLOOR), 0.5 * math.log(_CALIBRATION_FLOOR)

    def gap(x: float) -> float:
        return math.log(_reported_epsilon(math.exp(x), sample_rate, steps, delta, relation) / target)

    x_high = math.log(_rdp_calibrated(target, delta, sample_rate, steps, relation))
    y_high = gap(x_high)
    x_low = y_low = None  # an end whose ε is above the target, once found
    previous = (x_high - 0.1, y_high + 0.2)  # a slope of −2 until two points are known
    for _ in range(40):
        if y_high >= floor:
            break
        if x_low is not None and x_high - x_low < 1e-6:
            break
        # Secant through the last two points, aimed just below the target.
        slope = (y_high - previous[1]) / (x_high - previous[0]) if x_high != previous[0] else -2.0
        slope = min(slope, -0.1)
        x = x_high + (aim - y_high) / slope
        x = max(x, x_high - math.log(2.0))  # never more than halve σ in one step
        if x_low is not None and not x_low < x < x_high:
            x = 0.5 * (x_low + x_high)
        x = max(x, math.log(MIN_NOISE_MULTIPLIER))
        y = gap(x)
        previous = (x, y)
        if y <= 0:
            x_high, y_high = x, y
            if x <= math.log(MIN_NOISE_MULTIPLIER):
                break
        else:
            x_low, y_low = x, y
            previous = (x_high, y_high) if y_low is None else (x, y)
    return math.exp(x_high)


@functools.lru_cache(maxsize=256)
def _rdp_calibrated(target: float, delta: float, sample_rate: float, steps: int,
                    relation: str = "add_or_remove_one") -> float:
    """The smallest σ (to 0.1 %) whose RDP bound alone gives ε ≤ target (the start of :func:`_calibrated`)."""
    orders = default_orders("tight")

    def epsilon(sigma: float) -> float:
        return DPSGD(sigma, sample_rate, steps, neighboring_relation=relation).epsilon(orders, delta,
                                                                                        analysis="tight")[0]

    reached = epsilon(MAX_NOISE_MULTIPLIER)
    if reached > target:
        raise ValueError(
            f"target_epsilon={target!r} cannot be reached by DP-SGD with sample_rate={sample_rate:g} and "
            f"{steps} steps at delta={delta:g}: even noise_multiplier={MAX_NOISE_MULTIPLIER:g} gives "
            f"ε = {reached:.6g}; "
            "raise target_epsilon, or train fewer epochs or with a smaller sampling rate"
        )
    low, high = 0.0, MAX_NOISE_MULTIPLIER  # invariant: epsilon(high) <= target
    while high - low > 1e-3 * high:
        middle = (low + high) / 2 if low > 0 else high / 2
        if epsilon(middle) <= target:
            high = middle
        else:
            low = middle
        if low == 0 and high < 1e-3:
            break
    return high
