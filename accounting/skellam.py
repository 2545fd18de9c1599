"""The (distributed) Skellam mechanism on integer vectors.

Source: Agarwal, Kairouz, Liu, "The Skellam Mechanism for Differentially Private
Federated Learning", NeurIPS 2021 (arXiv:2110.04995): the noise, its closure
under summation (so parties can each add a share under secure aggregation) and
the multi-dimensional RDP bound. The exact privacy loss distribution is
dp-accounting's, built from the Skellam probability mass functions
(``scipy.stats.skellam``); the dominance argument that lets one shifted
coordinate stand for any move is privfed's, stated in :class:`SkellamMechanism`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar

import dp_accounting
import numpy as np
from dp_accounting.pld import privacy_loss_distribution
from scipy import stats

from ._checks import check_at_most, check_choice, check_int_at_least, check_orders, check_positive_finite
from ._dp_accounting import PldDpEvent
from .mechanism import ALL_RELATIONS, ANALYSES, UNITS, Mechanism, check_relations
from .registry import register

__all__ = ["SkellamDpEvent", "SkellamMechanism", "skellam_log_pmf"]

#: Most compositions accepted (as DP-SGD's steps).
MAX_COUNT = 10**9
#: Half-width of the PMF support the PLD is built on, in standard deviations beyond the shift; the mass outside
#: (below e^-400 there) is counted as infinite privacy loss, so the truncation only ever raises ε.
_SUPPORT_DEVIATIONS = 30.0
#: Most support points of one coordinate's PMF for the PLD; larger variances are accounted by RDP alone.
MAX_PLD_SUPPORT = 200_001


def skellam_log_pmf(values: np.ndarray, variance: float) -> np.ndarray:
    """log Pr[X₁ − X₂ = k], X₁, X₂ ~ Poisson(variance/2) independent: the Skellam noise of ``variance``."""
    return stats.skellam.logpmf(values, variance / 2.0, variance / 2.0)


@functools.lru_cache(maxsize=64)
def _shift_pld(variance: float, shift: int, interval: float) -> privacy_loss_distribution.PrivacyLossDistribution:
    """Pessimistic PLD of Sk(shift, variance) against Sk(0, variance), the tails beyond the support at loss +∞."""
    half = shift + math.ceil(_SUPPORT_DEVIATIONS * math.sqrt(variance)) + 10
    support = np.arange(-half, half + shift + 1)
    lower = skellam_log_pmf(support, variance)
    upper = skellam_log_pmf(support - shift, variance)
    # Pr[Sk(shift) outside the support]: both tails, read off the Skellam CDF.
    tail = float(stats.skellam.cdf(-half - shift - 1, variance / 2, variance / 2)
                 + stats.skellam.sf(half, variance / 2, variance / 2))
    log_lower = {int(k): float(v) for k, v in zip(support, lower)}
    log_upper: dict[int | None, float] = {int(k): float(v) for k, v in zip(support, upper)}
    if tail > 0.0:  # an outcome only the upper distribution has: its mass becomes infinity mass
        log_upper[None] = math.log(tail)
    return privacy_loss_distribution.from_two_probability_mass_functions(
        log_lower, log_upper, pessimistic_estimate=True, value_discretization_interval=interval, symmetric=True
    )


@dataclass(frozen=True)
class SkellamDpEvent(PldDpEvent):
    """One integer coordinate moved by ``shift`` under Skellam noise of ``variance`` (symmetric in the move).

    dp-accounting has no Skellam event; privfed's PLD bridge
    (:func:`~privfed.accounting._dp_accounting.event_pld`) builds its PLD with :meth:`pld`.
    """

    variance: float
    shift: int

    def pld(self, *, value_discretization_interval: float) -> privacy_loss_distribution.PrivacyLossDistribution:
        """dp-accounting's pessimistic PLD of the pair (Sk(shift), Sk(0)) from their PMFs."""
        return _shift_pld(self.variance, self.shift, value_discretization_interval)


@register
@dataclass(frozen=True, eq=False)
class SkellamMechanism(Mechanism):
    """Integer vectors released with Skellam noise: X₁ − X₂, X₁, X₂ ~ Poisson(variance/2) per coordinate.

    ``variance`` is the total variance per coordinate of one release (the noise
    the released sum carries: under secure aggregation, n parties adding shares
    of variance σ²/n give exactly Sk(σ²), Skellam being closed under summation).
    A *move* (the change one protected unit makes to the integer vector) must
    have ℓ1 norm ≤ ``l1_sensitivity`` and ℓ2 norm ≤ ``l2_sensitivity``; if
    ``moved_coordinates`` m and ``coordinate_sensitivity`` c are given, it also
    changes at most m coordinates by at most c each (a FedKT consistent-vote
    histogram: per query at most 2 counts, by s each). ``count`` releases are
    composed (queries, rounds).

    **RDP, any integer move** (``rdp``, both analyses). The multi-dimensional
    Skellam RDP bound of Agarwal, Kairouz & Liu (NeurIPS 2021, arXiv:2110.04995,
    §3, stated for noise Sk(μ, μ) of variance 2μ; Google's ``distributed_dp``
    accounting implements it in terms of the central variance and cites it as
    "Corollary 4.1"). Here μ = variance/2, so with v = variance:

        ε(α) ≤ α Δ₂²/(2v) + min( ((2α − 1) Δ₂² + 6 Δ₁)/(4v²),  3 Δ₁/(2v) ),

    per release, times ``count`` (RDP composition adds, Mironov 2017 Prop. 1).
    It is evaluated at ⌈α⌉: Rényi divergence is non-decreasing in α, so that is
    valid at fractional orders whatever order range the theorem covers. With m
    and c given, Δ₁ = min(l1, m·c) and Δ₂ = min(l2, √m·c) (every allowed move
    satisfies both).

    **Exact PLD where it is valid** (:meth:`dp_event`, taken under
    ``analysis="tight"`` by :func:`~privfed.accounting.account.account` when
    smaller). An integer move changes at most m' = min(m, ⌊Δ₁⌋, ⌊Δ₂²⌋)
    coordinates (each non-zero integer adds ≥ 1 to both norms) by at most
    c' = min(c, ⌊Δ₁⌋, ⌊Δ₂⌋) each. The pair (Sk(0), Sk(c')) per coordinate,
    composed m'·``count`` times, dominates every such move:

    * the noise is independent per coordinate, so the output pair is the product
      of per-coordinate pairs; unmoved coordinates are identical pairs;
    * the Skellam PMF is symmetric and log-concave (a convolution of log-concave
      Poisson PMFs), so the hockey-stick divergence H_{e^ε}(Sk(d) ‖ Sk(0)) is the
      same for ±d and non-decreasing in |d| (monotone likelihood ratio; checked
      numerically in ``tests/test_mechanisms_skellam.py``): (Sk(c'), Sk(0))
      dominates each moved coordinate's pair, and also an identical pair;
    * dominating pairs compose (Zhu, Dong & Wang, AISTATS 2022, Thm 10), so the
      m'·count-fold product dominates the release. Releases composed adaptively
      are covered by the same theorem.

    The PLD is dp-accounting's ``from_two_probability_mass_functions`` on the
    Skellam PMFs (pessimistic rounding; the mass beyond ±30 standard
    deviations counted as infinite loss), self-composed. Beyond
    :data:`MAX_PLD_SUPPORT` support points (variance ≳ 4·10⁷) no PLD is built
    and the RDP bound stands alone.

    **Unit.** ``"example"`` or ``"party"``: whichever unit the sensitivities are
    stated for (one example's, or one party's, largest move). ``relations`` (default both)
    are the neighbouring relations whose moves the sensitivities bound: the analysis covers
    exactly those.
    """

    variance: float
    _: KW_ONLY
    l1_sensitivity: float
    l2_sensitivity: float
    count: int = 1
    unit: str = "example"
    coordinate_sensitivity: int | None = None
    moved_coordinates: int | None = None
    relations: frozenset[str] = ALL_RELATIONS

    kind: ClassVar[str] = "skellam"

    def __post_init__(self) -> None:
        variance = check_positive_finite("variance", self.variance)
        l1 = check_positive_finite("l1_sensitivity", self.l1_sensitivity)
        l2 = check_positive_finite("l2_sensitivity", self.l2_sensitivity)
        for name, value in (("l1_sensitivity", l1), ("l2_sensitivity", l2)):
            if value < 1.0:
                raise ValueError(f"{name} must be >= 1 (every non-zero integer move has norm >= 1), got {value!r}")
        if l2 > l1:
            raise ValueError(f"l2_sensitivity must be <= l1_sensitivity (a vector's ℓ2 norm never exceeds its ℓ1 "
                             f"norm), got l2_sensitivity={l2!r} > l1_sensitivity={l1!r}")
        count = int(check_at_most("count", check_int_at_least("count", self.count, 1), MAX_COUNT,
                                  "the composition of more releases is not accounted"))
        check_choice("unit", self.unit, UNITS)
        object.__setattr__(self, "relations", check_relations(self.relations))
        if (self.coordinate_sensitivity is None) != (self.moved_coordinates is None):
            raise ValueError("give both coordinate_sensitivity and moved_coordinates (a move changes at most "
                             "moved_coordinates coordinates by at most coordinate_sensitivity each) or neither; got "
                             f"coordinate_sensitivity={self.coordinate_sensitivity!r}, "
                             f"moved_coordinates={self.moved_coordinates!r}")
        if self.coordinate_sensitivity is not None:
            object.__setattr__(self, "coordinate_sensitivity",
                               check_int_at_least("coordinate_sensitivity", self.coordinate_sensitivity, 1))
            object.__setattr__(self, "moved_coordinates",
                               check_int_at_least("moved_coordinates", self.moved_coordinates, 1))
        for name, value in (("variance", variance), ("l1_sensitivity", l1), ("l2_sensitivity", l2), ("count", count)):
            object.__setattr__(self, name, value)

    @property
    def data_dependent(self) -> bool:
        return False

    @property
    def num_queries(self) -> int:
        """Noisy vectors released (composed)."""
        return self.count

    @property
    def standard_deviation(self) -> float:
        """√variance: the noise's standard deviation per coordinate."""
        return math.sqrt(self.variance)

    def sensitivities(self) -> tuple[float, float]:
        """(Δ₁, Δ₂) the RDP bound uses: the given norms, capped by m·c and √m·c when m and c are given."""
        l1, l2 = self.l1_sensitivity, self.l2_sensitivity
        c, m = self.coordinate_sensitivity, self.moved_coordinates
        if c is not None and m is not None:  # given together or not at all (__post_init__)
            l1, l2 = min(l1, float(m * c)), min(l2, math.sqrt(m) * c)
        return l1, l2

    def dominating_move(self) -> tuple[int, int]:
        """(m', c'): every allowed integer move changes at most m' coordinates by at most c' each."""
        l1, l2 = self.l1_sensitivity, self.l2_sensitivity
        moved = min(math.floor(l1), math.floor(l2 * l2 + 1e-9))
        shift = min(math.floor(l1), math.floor(l2 + 1e-12))
        c, m = self.coordinate_sensitivity, self.moved_coordinates
        if c is not None and m is not None:  # given together or not at all (__post_init__)
            moved, shift = min(moved, m), min(shift, c)
        return moved, shift

    def rdp(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        orders = check_orders(orders)
        check_choice("analysis", analysis, ANALYSES)
        alpha = np.ceil(orders - 1e-12)
        l1, l2 = self.sensitivities()
        v = self.variance
        per_release = alpha * l2**2 / (2 * v) + np.minimum(((2 * alpha - 1) * l2**2 + 6 * l1) / (4 * v**2),
                                                           3 * l1 / (2 * v))
        return self.count * per_release

    def rdp_data_independent(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        return self.rdp(orders, analysis=analysis)

    def dp_event(self) -> dp_accounting.DpEvent | None:
        """``SkellamDpEvent(variance, c')`` self-composed m'·count times (see the class docstring)."""
        moved, shift = self.dominating_move()
        half = shift + math.ceil(_SUPPORT_DEVIATIONS * self.standard_deviation) + 10
        if 2 * half + shift + 1 > MAX_PLD_SUPPORT:
            return None
        return dp_accounting.SelfComposedDpEvent(SkellamDpEvent(self.variance, shift), moved * self.count)

    def parameters(self) -> dict[str, Any]:
        return {
            "variance": self.variance,
            "l1_sensitivity": self.l1_sensitivity,
            "l2_sensitivity": self.l2_sensitivity,
            "count": self.count,
            "coordinate_sensitivity": self.coordinate_sensitivity,
            "moved_coordinates": self.moved_coordinates,
            "standard_deviation": self.standard_deviation,
            **({} if self.relations == ALL_RELATIONS else {"relations": sorted(self.relations)}),
        }
