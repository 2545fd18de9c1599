"""Report-noisy-max with Laplace noise on vote counts (PATE 2017; FedKT).

Sources: Papernot et al., "Semi-supervised knowledge transfer for deep learning
from private training data", ICLR 2017 (Thm 2, Thm 3, Lemma 4 — here "PATE 2017");
Papernot et al., "Scalable private learning with PATE", ICLR 2018 (``rdp_pure_eps``
form of the same bound at general orders — "PATE 2018"); Li, He, Song,
"Practical one-shot federated learning for cross-silo setting", IJCAI 2021
(Thm 1–4, 8–10, Lemma 7 — "FedKT").
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, ClassVar

import numpy as np

from ._checks import (
    MAX_EPSILON_PER_ANSWER,
    check_at_most,
    check_choice,
    check_orders,
    check_positive_finite,
    check_votes,
)
from .mechanism import ALL_RELATIONS, ANALYSES
from .noisy_max import VoteMechanism, distinct_counts
from .rdp_closed_forms import laplace_rdp
from .registry import register

__all__ = ["LaplaceNoisyMax", "laplace_failure_bounds"]

#: Rows of the vote matrix processed at once: a chunk's gap and term buffers (≈ 1.9 MB for 10 classes) stay in
#: the processor's cache, and are allocated once per call.
_CHUNK_ROWS = 8_192
#: (distinct q values) × (orders) evaluated at once in the per-order step: small enough to stay in cache.
_CHUNK_CELLS = 131_072
#: Largest vote count for which per-gap terms are tabulated instead of recomputed per cell.
_MAX_TABULATED_GAP = 1_000_000
#: Above this exponent e^{ελ} could overflow a float64; the log-space form is used instead.
_MAX_LINEAR_EXPONENT = 700.0


#: Floor of a failure bound q: an underflow to 0 would understate the privacy cost.
_SMALLEST_FAILURE_BOUND = float(np.finfo(float).tiny)


def _gap_terms(gaps: np.ndarray, gamma: float) -> np.ndarray:
    """Per gap Δ the complex number (2 + γΔ)/(4e^{γΔ}) + 0i for Δ > 0, and 0 + 1i for Δ = 0.

    Summed over a query's classes, the real part is the sum of the terms of the classes behind the winner and the
    imaginary part counts the classes tied with it (the winner included): one gather and one sum give both.
    """
    scaled = gamma * gaps
    with np.errstate(over="ignore"):  # e^{γΔ} = inf gives the term's true limit, 0
        terms = ((2.0 + scaled) / (4.0 * np.exp(scaled))).astype(complex)
    terms[gaps == 0] = 1j
    return terms


def laplace_failure_bounds(votes: np.ndarray, gamma: float) -> np.ndarray:
    """Per query, the bound q on Pr[noisy argmax ≠ true argmax] under Laplace(1/γ) noise.

    PATE 2017, Thm 3 / Lemma 4 (FedKT Lemma 7): with n* the top count and
    Δ_j = n* − n_j the gap of class j to the winner j* (the first argmax),

        q = min( Σ_{j ≠ j*} (2 + γΔ_j) / (4 e^{γΔ_j}),  1 − 1/C ).

    A class tied with the winner (Δ_j = 0) contributes exactly 1/2. Vectorised
    (the terms are tabulated per integer gap) and computed in chunks of rows.

    q is floored at the smallest positive normal float: for large γΔ the sum
    underflows to 0, which would claim the argmax deterministic (RDP 0, ε 0),
    while the true probability is positive. Any q ≥ Pr[M(d) ≠ j*] keeps PATE
    2017's Thm 3 valid, so the floor is conservative.
    """
    votes = check_votes(votes)
    gamma = check_positive_finite("gamma", gamma)
    num_queries, num_classes = votes.shape
    cap = 1.0 - 1.0 / num_classes
    bounds = np.empty(num_queries, dtype=float)
    largest = int(votes.max())  # votes are non-negative: no gap exceeds the largest count
    table = _gap_terms(np.arange(largest + 1), gamma) if largest <= _MAX_TABULATED_GAP else None
    rows = min(_CHUNK_ROWS, num_queries)
    # Classes along the first axis: reductions over classes become element-wise passes over contiguous rows.
    gap_buffer = np.empty((num_classes, rows), dtype=np.intp)
    term_buffer = np.empty((num_classes, rows), dtype=complex)
    for start in range(0, num_queries, rows):
        chunk = votes[start : start + rows]
        gaps, terms = gap_buffer[:, : len(chunk)], term_buffer[:, : len(chunk)]
        gaps[...] = chunk.T
        np.subtract(np.maximum.reduce(gaps, axis=0), gaps, out=gaps)
        if table is None:
            terms[...] = _gap_terms(gaps, gamma)
        else:
            np.take(table, gaps, out=terms, mode="clip")  # every gap is in the table: no bounds check
        sums = np.add.reduce(terms, axis=0)
        # The winner's own zero gap is among the ties: each of the others contributes 1/2, hence "ties − 1".
        q = sums.real + 0.5 * (sums.imag - 1.0)
        np.clip(q, _SMALLEST_FAILURE_BOUND, cap, out=bounds[start : start + len(chunk)])
    return bounds


def _pure_bounds(epsilon: float, orders: np.ndarray) -> np.ndarray:
    """RDP bounds implied by ε-DP alone: min(ε²α/2, ε) (Bun–Steinke 2016; Mironov 2017, Prop. 3)."""
    return np.minimum(0.5 * epsilon * epsilon * orders, epsilon)


def _data_dependent_rdp(q: np.ndarray, epsilon: float, orders: np.ndarray) -> np.ndarray:
    """Data-dependent RDP bound per (query, order) for an ε-DP mechanism with outlier probability ≤ q.

    PATE 2017, Thm 3 at integer λ = α − 1 and PATE 2018 (``rdp_pure_eps``) at any
    order, valid when q < (e^ε − 1)/(e^{2ε} − 1) = 1/(e^ε + 1) (callers pass only such q):

        λ · RDP(α) ≤ log( (1 − q) · x^λ + q · e^{ελ} ),   x = (1 − q)/(1 − e^ε q).

    Evaluated as log1p((1 − q)·expm1(λ log x) + q·expm1(ελ)) — accurate when the
    moment is tiny — or, if e^{ελ} could overflow, as a log-space logaddexp.
    """
    moments = orders - 1.0
    log_keep = np.log1p(-q)
    log_ratio = log_keep - np.log1p(-math.exp(epsilon) * q)
    if epsilon * moments.max() < _MAX_LINEAR_EXPONENT:
        bound = np.multiply.outer(log_ratio, moments)
        np.expm1(bound, out=bound)
        bound *= (1.0 - q)[:, None]
        bound += np.multiply.outer(q, np.expm1(epsilon * moments))
        np.log1p(bound, out=bound)
    else:
        with np.errstate(divide="ignore"):
            log_q = np.log(q)
        bound = np.logaddexp(
            log_keep[:, None] + np.multiply.outer(log_ratio, moments),
            log_q[:, None] + epsilon * moments,
        )
    bound /= moments
    return bound


@register
@dataclass(frozen=True, eq=False, repr=False)
class LaplaceNoisyMax(VoteMechanism):
    """Report-noisy-max over vote counts with Laplace(1/γ) noise on each count.

    ``votes`` has shape (queries, classes). For each query the mechanism
    releases argmax_c (n_c + Lap(1/γ)). One protected unit moves at most
    k = ``votes_per_unit`` votes (FedKT: party level k = s under L1 and k = t
    under L2; example level k = 1 under L2 and k = z under L1).

    **Data-independent guarantee.** Moving k votes changes two counts by at
    most k each, so the noisy histogram has ℓ1 sensitivity 2k and each answer
    is (ε₀, 0)-DP with ε₀ = 2kγ (PATE 2017, Thm 2 generalised; FedKT Thm 1).

    **Classic analysis** (``analysis="classic"``, the papers'): per query and
    moment λ = α − 1, the log-moment

        α(λ) = min( 2k²γ²λ(λ+1),  2kγλ,  log((1−q)((1−q)/(1−e^{2kγ}q))^λ + q e^{2kγλ}) ),

    the last term only when q < (e^{2kγ}−1)/(e^{4kγ}−1), with q from
    :func:`laplace_failure_bounds`; summed over queries (PATE 2017 Thm 2–3,
    FedKT Thm 8–10). RDP(α) = α(λ)/λ.

    **Tight analysis** (``analysis="tight"``): per query the smaller of the
    classic bound (at any real order, PATE 2018's form) and the exact RDP of the
    noisy histogram itself, 2 · RDP_Laplace(α; shift k, scale 1/γ) — the argmax
    is post-processing of the histogram, and the Laplace RDP is convex in the
    shift, so two coordinates moved by k each is the worst case of any move of k
    votes. See ``docs/accounting.md`` for the argument.
    """

    votes: np.ndarray
    gamma: float
    votes_per_unit: int = 1
    _: KW_ONLY
    unit: str = "example"
    data_independent_votes_per_unit: int | None = None
    relations: frozenset[str] = ALL_RELATIONS
    _cache: dict[Hashable, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    kind: ClassVar[str] = "laplace_noisy_max"
    noise_parameter: ClassVar[str] = "gamma"

    def __post_init__(self) -> None:
        self._validate_votes()
        check_at_most(
            "gamma", self.gamma, MAX_EPSILON_PER_ANSWER / (2.0 * self.public_votes_per_unit),
            f"one answer's ε = 2·votes_per_unit·gamma must be <= {MAX_EPSILON_PER_ANSWER:g}, where e^ε still fits "
            f"a float64; with votes_per_unit = {self.public_votes_per_unit}",
        )

    @property
    def epsilon_per_query(self) -> float:
        """ε₀ = 2kγ: the pure-DP guarantee of one answer."""
        return 2.0 * self.votes_per_unit * self.gamma

    def failure_bounds(self) -> np.ndarray:
        """Per-query q (private: computed from the votes). See :func:`laplace_failure_bounds`."""
        if "q" not in self._cache:
            self._cache["q"] = laplace_failure_bounds(self.votes, self.gamma)
        return self._cache["q"]

    # --- accounting -----------------------------------------------------------
    def _applicable_failure_bounds(self) -> tuple[np.ndarray, np.ndarray, int]:
        """The distinct q below 1/(e^ε + 1), where the data-dependent bound applies, their multiplicities (equal q
        give equal moments), and the number of queries whose q is not below it."""
        if "applicable_q" not in self._cache:
            q = self._cache["q"] if "q" in self._cache else laplace_failure_bounds(self.votes, self.gamma)
            applicable = q[q < 1.0 / (math.exp(self.epsilon_per_query) + 1.0)]  # a fresh array, sorted in place
            self._cache["applicable_q"] = (*distinct_counts(applicable), len(q) - len(applicable))
        return self._cache["applicable_q"]

    def _per_query_independent_of_votes(self, orders: np.ndarray, analysis: str, votes_per_unit: int) -> np.ndarray:
        """Per-query RDP bound that ignores the votes, for a unit moving ``votes_per_unit`` votes."""
        bound = _pure_bounds(2.0 * votes_per_unit * self.gamma, orders)
        if analysis == "tight":
            histogram = laplace_rdp(1.0 / (votes_per_unit * self.gamma), orders, count=2)
            bound = np.minimum(bound, histogram)
        return bound

    def rdp(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        orders = check_orders(orders)
        check_choice("analysis", analysis, ANALYSES)
        key = ("rdp", analysis, orders.tobytes())
        if key not in self._cache:
            self._cache[key] = self._compose_rdp(orders, analysis)
        return self._cache[key].copy()

    def _compose_rdp(self, orders: np.ndarray, analysis: str) -> np.ndarray:
        independent = self._per_query_independent_of_votes(orders, analysis, self.votes_per_unit)
        values, counts, not_applicable = self._applicable_failure_bounds()
        total = float(not_applicable) * independent
        counts = counts.astype(float)
        rows = max(1, _CHUNK_CELLS // len(orders))
        for start in range(0, len(values), rows):
            bound = _data_dependent_rdp(values[start : start + rows], self.epsilon_per_query, orders)
            np.minimum(bound, independent, out=bound)
            total += counts[start : start + rows] @ bound
        return total

    def rdp_data_independent(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        orders = check_orders(orders)
        check_choice("analysis", analysis, ANALYSES)
        return self.num_queries * self._per_query_independent_of_votes(orders, analysis, self.public_votes_per_unit)

    def pure_epsilon(self) -> float:
        """Basic composition: N · 2kγ (k the data-independent votes per unit)."""
        return self.num_queries * 2.0 * self.public_votes_per_unit * self.gamma

    def parameters(self) -> dict[str, Any]:
        return {**super().parameters(), "noise_scale": 1.0 / self.gamma, "epsilon_per_query": self.epsilon_per_query}
