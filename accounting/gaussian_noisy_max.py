"""Report-noisy-max with Gaussian noise on vote counts (GNMax, PATE 2018).

Source: Papernot, Song, Mironov, Raghunathan, Talwar, Erlingsson, "Scalable
private learning with PATE", ICLR 2018 ("PATE 2018"): Prop. 8 (the bound on q),
Thm 6 (data-dependent RDP of a mechanism that is likely to give one answer) and
Prop. 7 (its instantiation and conditions for GNMax). FedKT (Li, He, Song,
IJCAI 2021) names GNMax as the tighter aggregator for future work.
"""

from __future__ import annotations

import math
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, ClassVar

import dp_accounting
import numpy as np
from scipy import stats

from ._checks import check_choice, check_orders, check_positive_finite, check_votes
from ._logmath import log1mexp
from .mechanism import ALL_RELATIONS, ANALYSES
from .noisy_max import VoteMechanism, distinct_counts
from .registry import register
from .smooth_sensitivity import (
    check_smooth_sensitivity_conditions,
    gnmax_local_sensitivity_bounds,
    smooth_sensitivity,
)

__all__ = ["GaussianNoisyMax", "gaussian_log_failure_bounds", "gaussian_noisy_max_rdp", "log1mexp"]

#: Rows of the vote matrix processed at once: a chunk's gap and tail buffers (≈ 1.3 MB for 10 classes) stay in
#: the processor's cache, and are allocated once per call.
_CHUNK_ROWS = 8_192
#: Largest vote count for which the normal tails are tabulated per gap instead of computed per vote.
_MAX_TABULATED_GAP = 1_000_000
#: Largest vote count for which the ratios of two tails are tabulated per pair of gaps ((n + 1)·(n + 2) floats: 8.4 MB
#: at this bound) instead of exponentiated per vote.
_MAX_PAIRED_GAP = 1_023
#: (unique q values) × (orders) evaluated at once.
_CHUNK_CELLS = 1_048_576


def gaussian_log_failure_bounds(votes: np.ndarray, sigma: float) -> np.ndarray:
    """Per query, log q with q ≥ Pr[noisy argmax ≠ true argmax] under N(0, σ²) noise per count.

    PATE 2018, Prop. 8 (a union bound): with i* the first argmax and
    Δ_j = n_{i*} − n_j,

        q ≤ Σ_{j ≠ i*} Pr[N(0, 2σ²) ≥ Δ_j] = Σ_{j ≠ i*} Φ̄(Δ_j / (√2 σ)),

    capped at 1 − 1/C. Computed in log space (``scipy.stats.norm.logsf``, once per
    integer gap up to the largest vote count), in chunks of rows, as
    log q = t_m + log Σ_{j ≠ i*} e^{t_j − t_m} with t_j the log tail of gap Δ_j and
    t_m the largest of them (that of the smallest gap m behind the winner): every
    exponent ≤ 0 and the sum in [1, C). Up to :data:`_MAX_PAIRED_GAP` votes the
    terms e^{t_j − t_m} are tabulated per pair (m, Δ_j) and gathered (the same
    floating-point operations on the same values, once per pair instead of once
    per vote); above it they are computed per vote.
    """
    votes = check_votes(votes)
    sigma = check_positive_finite("sigma", sigma)
    num_queries, num_classes = votes.shape
    cap = math.log1p(-1.0 / num_classes)
    log_bounds = np.empty(num_queries, dtype=float)
    largest = int(votes.max())  # votes are non-negative: no gap exceeds the largest count
    scale = math.sqrt(2.0) * sigma
    # Gaps are integers: the tail is computed once per possible gap and gathered (one normal tail per vote before).
    table = (stats.norm.logsf(np.arange(largest + 1, dtype=float), scale=scale)
             if largest <= _MAX_TABULATED_GAP else None)
    paired = (table, _tail_ratios(table)) if table is not None and largest <= _MAX_PAIRED_GAP else None
    rows = min(_CHUNK_ROWS, num_queries)
    # Classes along the first axis: reductions over classes become element-wise passes over contiguous rows.
    gap_buffer = np.empty((num_classes, rows), dtype=np.intp)
    tail_buffer = np.empty((num_classes, rows), dtype=float)
    for start in range(0, num_queries, rows):
        chunk = votes[start : start + rows]
        gaps, log_tails = gap_buffer[:, : len(chunk)], tail_buffer[:, : len(chunk)]
        gaps[...] = chunk.T
        np.subtract(np.maximum.reduce(gaps, axis=0), gaps, out=gaps)
        winners = (chunk.argmax(axis=1), np.arange(len(chunk)))
        if paired is not None:
            tails, ratios = paired
            gaps[winners] = largest + 1  # the winner's column of the table: its term is 0
            nearest = np.minimum.reduce(gaps, axis=0)  # m: the smallest gap behind the winner
            gaps += nearest * (largest + 2)  # the flat index of the pair (m, Δ_j)
            np.take(ratios, gaps, out=log_tails, mode="clip")  # every pair is in the table: no bounds check
            peak = tails[nearest]
        else:
            if table is None:
                log_tails[...] = stats.norm.logsf(gaps, scale=scale)
            else:
                np.take(table, gaps, out=log_tails, mode="clip")  # every gap is in the table: no bounds check
            log_tails[winners] = -np.inf  # the winner is left out of its own sum
            peak = np.maximum.reduce(log_tails, axis=0)
            np.subtract(log_tails, peak, out=log_tails)
            np.exp(log_tails, out=log_tails)
        log_q = np.log(np.add.reduce(log_tails, axis=0))
        log_q += peak
        np.minimum(log_q, cap, out=log_bounds[start : start + len(chunk)])
    return log_bounds


def _tail_ratios(log_tails: np.ndarray) -> np.ndarray:
    """e^{t_g − t_m} for every pair of gaps (m, g), flat, row m of length n + 2 (n the largest gap): column n + 1 is
    the winner's, e^{−∞} = 0."""
    columns = np.append(log_tails, -np.inf)
    # Pairs with g < m are never gathered (m is the smallest gap), and their ratios may overflow; −∞ − (−∞) where a
    # tail underflows gives nan, as it does computed per vote.
    with np.errstate(invalid="ignore", over="ignore"):
        return np.exp(columns[None, :] - log_tails[:, None]).ravel()


def _data_dependent_applies(log_q: np.ndarray, sigma: float) -> np.ndarray:
    """Where PATE 2018 Prop. 7's conditions that do not involve the order hold, per log q: μ₂ > 1,
    q ≤ e^{(μ₂−1)ε₂} / (μ₁/(μ₁−1) · μ₂/(μ₂−1))^{μ₂}, q·e^{ε₂} < 1 and q > 0 (see :func:`gaussian_noisy_max_rdp`)."""
    variance = sigma * sigma
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        mu2 = sigma * np.sqrt(-log_q)
        mu1 = mu2 + 1.0
        eps2 = mu2 / variance
        return (
            (mu2 > 1.0)
            & (log_q <= (mu2 - 1.0) * eps2 - mu2 * (np.log(mu1 / (mu1 - 1.0)) + np.log(mu2 / (mu2 - 1.0))))
            & (-log_q > eps2)
            & np.isfinite(log_q)
        )


def gaussian_noisy_max_rdp(log_q: np.ndarray, sigma: float, orders: np.ndarray) -> np.ndarray:
    """RDP per (query, order) of GNMax with noise σ, given log q per query (PATE 2018 Thm 6, Prop. 7).

    The mechanism is (μ, μ/σ²)-RDP at every order μ (data-independent bound).
    Prop. 7 takes μ₂ = σ·√(ln(1/q)), μ₁ = μ₂ + 1, εᵢ = μᵢ/σ², and Thm 6 gives,
    at order α,

        RDP(α) ≤ (1/(α−1)) · ln( (1−q)·A^{α−1} + q·B^{α−1} ),
        A = (1−q) / (1 − (q e^{ε₂})^{(μ₂−1)/μ₂}),   B = e^{ε₁} / q^{1/(μ₁−1)},

    under the conditions α < μ₁, μ₂ > 1, q·e^{ε₂} < 1 (so that A > 0) and
    q ≤ e^{(μ₂−1)ε₂} / (μ₁/(μ₁−1) · μ₂/(μ₂−1))^{μ₂}. Elsewhere, and wherever it
    is smaller, the data-independent α/σ² is used; q = 0 gives 0.
    """
    log_q = np.asarray(log_q, dtype=float)[:, None]
    orders = np.asarray(orders, dtype=float)[None, :]
    variance = sigma * sigma
    independent = np.broadcast_to(orders / variance, (log_q.shape[0], orders.shape[1])).copy()
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        mu2 = sigma * np.sqrt(-log_q)
        mu1 = mu2 + 1.0
        eps1, eps2 = mu1 / variance, mu2 / variance
        applies = _data_dependent_applies(log_q[:, 0], sigma)[:, None] & (orders < mu1)
        log_keep = log1mexp(log_q)  # ln(1 − q)
        log_a = log_keep - log1mexp((log_q + eps2) * (1.0 - 1.0 / mu2))
        log_b = eps1 - log_q / (mu1 - 1.0)
        moments = orders - 1.0
        bound = np.logaddexp(log_keep + moments * log_a, log_q + moments * log_b) / moments
    result = np.where(applies, np.minimum(independent, bound), independent)
    result[np.isneginf(log_q[:, 0])] = 0.0
    return result


@register
@dataclass(frozen=True, eq=False, repr=False)
class GaussianNoisyMax(VoteMechanism):
    """Report-noisy-max over vote counts with N(0, σ²) noise on each count (GNMax).

    ``votes`` has shape (queries, classes); each query releases
    argmax_c (n_c + N(0, σ²)). One protected unit moves at most
    k = ``votes_per_unit`` votes, so the histogram's ℓ2 sensitivity is √2·k and
    the release behaves as GNMax with σ/k for a unit moving one vote.

    **Data-independent**: RDP(α) = α·k²/σ² per query (Gaussian mechanism,
    PATE 2018 §4.1: α/σ² for k = 1), composed over queries; the exact
    dp-accounting event is ``GaussianDpEvent(σ/(√2k))`` per query
    (:meth:`dp_event`), so ``analysis="tight"`` also takes its PLD for the
    data-independent ε.

    **Data-dependent**: per query the bound of
    :func:`gaussian_noisy_max_rdp` (PATE 2018 Thm 6 / Prop. 7) with σ/k, from
    q of :func:`gaussian_log_failure_bounds` computed with the actual σ (Thm 6
    only needs a bound on q for the data set at hand and the mechanism's RDP
    against every neighbour). Both analyses use the same curve: ``classic``
    converts it as PATE 2018 does, ε = min_α RDP(α) + ln(1/δ)/(α − 1);
    ``tight`` with dp-accounting's improved conversion.

    **Smooth sensitivity** (PATE 2018 §4.2, App. C–D):
    :meth:`local_sensitivity_bounds` and :meth:`smooth_sensitivity` bound how
    much the data-dependent RDP can change between neighbours, so that
    :func:`~privfed.accounting.release.release_epsilon` can publish it
    (for k = 1: one unit moves one vote, as the paper's analysis assumes).
    """

    votes: np.ndarray
    sigma: float
    votes_per_unit: int = 1
    _: KW_ONLY
    unit: str = "example"
    data_independent_votes_per_unit: int | None = None
    relations: frozenset[str] = ALL_RELATIONS
    _cache: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    kind: ClassVar[str] = "gaussian_noisy_max"
    noise_parameter: ClassVar[str] = "sigma"

    def __post_init__(self) -> None:
        self._validate_votes()

    @property
    def effective_sigma(self) -> float:
        """σ/k: the noise per vote that one unit can move."""
        return self.sigma / self.votes_per_unit

    def log_failure_bounds(self) -> np.ndarray:
        """Per-query log q (private: computed from the votes). See :func:`gaussian_log_failure_bounds`."""
        if "log_q" not in self._cache:
            self._cache["log_q"] = gaussian_log_failure_bounds(self.votes, self.sigma)
        return self._cache["log_q"]

    def dp_event(self) -> dp_accounting.DpEvent:
        """``GaussianDpEvent(σ/(√2k))`` self-composed once per query (the noisy histogram; argmax is
        post-processing)."""
        return dp_accounting.SelfComposedDpEvent(
            dp_accounting.GaussianDpEvent(noise_multiplier=self.sigma / (math.sqrt(2.0) * self.public_votes_per_unit)),
            self.num_queries,
        )

    def rdp(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        orders = check_orders(orders)
        check_choice("analysis", analysis, ANALYSES)
        values, counts, independent_only = self._applicable_log_failure_bounds()
        total = float(independent_only) * orders / (self.effective_sigma * self.effective_sigma)
        rows = max(1, _CHUNK_CELLS // len(orders))
        for start in range(0, len(values), rows):
            per_query = gaussian_noisy_max_rdp(values[start : start + rows], self.effective_sigma, orders)
            total = total + counts[start : start + rows].astype(float) @ per_query
        return total

    def _applicable_log_failure_bounds(self) -> tuple[np.ndarray, np.ndarray, int]:
        """The distinct log q where the data-dependent bound can apply at some order, their multiplicities (equal
        q give equal moments), and the number of queries held to the data-independent α·k²/σ² at every order
        (q = 0, which costs nothing, is in neither)."""
        if "applicable_log_q" not in self._cache:
            log_q = self._cache["log_q"] if "log_q" in self._cache else gaussian_log_failure_bounds(self.votes,
                                                                                                   self.sigma)
            applies = np.empty(len(log_q), dtype=bool)  # in chunks: temporaries the size of a chunk, not of log q
            for start in range(0, len(log_q), _CHUNK_ROWS):
                applies[start : start + _CHUNK_ROWS] = _data_dependent_applies(log_q[start : start + _CHUNK_ROWS],
                                                                               self.effective_sigma)
            applicable = log_q[applies]  # a fresh array, sorted in place
            independent_only = int(np.count_nonzero(~applies & ~np.isneginf(log_q)))
            self._cache["applicable_log_q"] = (*distinct_counts(applicable), independent_only)
        return self._cache["applicable_log_q"]

    def _check_one_vote_per_unit(self) -> None:
        if self.votes_per_unit != 1 or self.data_independent_votes_per_unit is not None:
            raise ValueError(
                "smooth sensitivity needs votes_per_unit=1 (PATE 2018's analysis moves one vote per neighbour), got "
                f"votes_per_unit={self.votes_per_unit}, data_independent_votes_per_unit="
                f"{self.data_independent_votes_per_unit}"
            )

    def local_sensitivity_bounds(self, order: float, *, num_teachers: int | None = None) -> np.ndarray:
        """LS(d), shape (queries, T): per query the largest local sensitivity of its data-dependent RDP at ``order``
        over histograms d votes away, d = 0 … T − 1 (PATE 2018 Algs. 3–5; T = ``num_teachers``, default the
        largest row sum). Private: computed from the votes."""
        self._check_one_vote_per_unit()
        return gnmax_local_sensitivity_bounds(self.votes, sigma=self.sigma, order=order, num_teachers=num_teachers)

    def smooth_sensitivity(self, *, order: float, beta: float, num_teachers: int | None = None) -> np.ndarray:
        """SS_β = max_d e^{−βd}·LS(d) per query, after checking conditions C5–C6 for ``order`` (private)."""
        self._check_one_vote_per_unit()
        check_smooth_sensitivity_conditions(self.sigma, self.num_classes, float(order))
        return smooth_sensitivity(self.local_sensitivity_bounds(order, num_teachers=num_teachers), beta=beta)

    def rdp_data_independent(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        orders = check_orders(orders)
        check_choice("analysis", analysis, ANALYSES)
        return self.num_queries * orders * (self.public_votes_per_unit / self.sigma) ** 2


