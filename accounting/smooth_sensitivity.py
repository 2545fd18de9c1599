"""Smooth sensitivity of GNMax's data-dependent RDP, and the GNSS release (PATE 2018, Sec. 4.2, App. C–D).

Source: Papernot, Song, Mironov, Raghunathan, Talwar, Erlingsson, "Scalable
private learning with PATE", ICLR 2018 ("PATE 2018"); smooth sensitivity after
Nissim, Raskhodnikova, Smith 2007. privfed's own vectorised implementation of
the paper's Algorithms 3–5, written from the paper.

A GNMax answer's data-dependent RDP at order λ is a function β(q) of the bound q
on Pr[answer ≠ plurality] (:func:`~privfed.accounting.gaussian_noisy_max.gaussian_noisy_max_rdp`,
Thm 6). To publish it, PATE 2018 bounds how much β can change between
neighbouring vote histograms:

* **q₀** (``gnmax_logq0``): the q above which the data-independent λ/σ² is used,
  the root of β_dep(q) = λ/σ² (Thm 6's conditions hold below it).
* **One step** (Prop. 13): moving one vote changes q at most to
  q_u = bu(q) = min(1, (m−1)/2 · erfc(erfc⁻¹(2q/(m−1)) − 1/σ)) and at least to
  q_l = bl(q) = (m−1)/2 · erfc(erfc⁻¹(2q/(m−1)) + 1/σ), m classes. Hence the
  local sensitivity at q is LS(q) = max(β(q_u) − β(q), β(q) − β(q_l)) (Alg. 3),
  where q in [q₁, q₀], q₁ = bl(q₀), is replaced by q₁: that plateau is the
  largest LS can be.
* **At distance d** (Algs. 4–5): the largest LS over histograms d votes away.
  From a histogram whose q is above q₀ the walk moves votes from the runner-up
  to the winner (lowering q), from one below q₁ from the winner to the runner-up
  (raising q), one vote per step, until q enters [q₁, q₀]; every further distance
  gets the plateau.
* **β-smooth sensitivity**: SS = max_d e^{−βd} LS(d).

These bounds are valid only where β(q) is non-decreasing on (0, q₀] (condition
C5) and β(bu(q)) − β(q) is non-decreasing on (0, bl(q₀)] (condition C6): both
are checked numerically by :func:`check_smooth_sensitivity_conditions`, which
refuses the order otherwise.

**GNSS** (Thm 23): releasing f(D) + SS_β(D)·N(0, σ²) is (λ, ρ)-RDP for
1 < λ < 1/(2β) with

    ρ(λ) = λ·e^{2β}/σ² + (βλ − ½·ln(1 − 2βλ)) / (λ − 1).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import optimize, special

from ._checks import check_int_at_least, check_positive_finite, check_votes
from ._logmath import log1mexp

__all__ = [
    "check_smooth_sensitivity_conditions",
    "gnmax_local_sensitivity",
    "gnmax_local_sensitivity_bounds",
    "gnmax_logq0",
    "gnss_rdp",
    "smooth_sensitivity",
]


def _check_order(order: object) -> float:
    order = check_positive_finite("order", order)
    if order <= 1.0:
        raise ValueError(f"order must be a Rényi order > 1, got {order!r}")
    return order


def _dependent_bound(log_q: np.ndarray, sigma: float, order: float) -> np.ndarray:
    """Thm 6 with Prop. 7's μ₁, μ₂, without its conditions (callers use it only below q₀)."""
    log_q = np.asarray(log_q, dtype=float)
    variance = sigma * sigma
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        mu2 = sigma * np.sqrt(-log_q)
        mu1 = mu2 + 1.0
        eps1, eps2 = mu1 / variance, mu2 / variance
        log_keep = log1mexp(log_q)
        log_a = (order - 1.0) * (log_keep - log1mexp((log_q + eps2) * (1.0 - 1.0 / mu2)))
        log_b = (order - 1.0) * (eps1 - log_q / (mu1 - 1.0))
        return np.logaddexp(log_keep + log_a, log_q + log_b) / (order - 1.0)


def _conditions_hold(log_q: float, sigma: float, order: float) -> bool:
    """Thm 6's conditions at q (μ₁ ≥ λ and the Lemma bound on q)."""
    mu2 = sigma * math.sqrt(-log_q)
    mu1 = mu2 + 1.0
    if mu1 < order or mu2 <= 1.0:
        return False
    eps2 = mu2 / sigma**2
    return log_q <= (mu2 - 1.0) * eps2 - mu2 * math.log(mu1 / (mu1 - 1.0) * mu2 / (mu2 - 1.0))


@functools.lru_cache(maxsize=256)
def gnmax_logq0(sigma: float, order: float) -> float:
    """ln q₀: below it Thm 6's data-dependent bound holds and is below the data-independent λ/σ².

    The root of β_dep(q) − λ/σ², bracketed below the natural bound
    ln q ≤ min(−(1 + 1/σ)², −((λ − 0.99)/σ)², −1/σ²) where Thm 6's conditions hold.
    """
    sigma, order = check_positive_finite("sigma", sigma), _check_order(order)
    independent = order / sigma**2

    def excess(log_q: float) -> float:
        return float(_dependent_bound(np.array(log_q), sigma, order)) - independent

    upper = min(-((1.0 + 1.0 / sigma) ** 2), -(((order - 0.99) / sigma) ** 2), -1.0 / sigma**2)
    if not _conditions_hold(upper, sigma, order):
        raise ValueError(f"order={order!r} is too large for sigma={sigma!r}: Thm 6's conditions fail at every q")
    if excess(upper) < 0:
        return upper
    lower = 2.0 * upper
    while excess(lower) > 0:
        lower *= 1.5
        if lower < -1e5:
            raise ValueError(f"no q₀ found for sigma={sigma!r}, order={order!r}")
    return float(optimize.brentq(excess, lower, upper, xtol=1e-14, rtol=4 * np.finfo(float).eps))


def _log_bu(log_q: np.ndarray, sigma: float, num_classes: int) -> np.ndarray:
    """ln bu(q): the largest q one moved vote can reach (Prop. 13)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        q = np.exp(log_q)
        value = (num_classes - 1) / 2.0 * special.erfc(-1.0 / sigma + special.erfcinv(2.0 * q / (num_classes - 1)))
        return np.log(np.minimum(1.0, value))


def _log_bl(log_q: np.ndarray, sigma: float, num_classes: int) -> np.ndarray:
    """ln bl(q): the smallest q one moved vote can reach (Prop. 13)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        q = np.exp(log_q)
        return np.log(
            (num_classes - 1) / 2.0 * special.erfc(1.0 / sigma + special.erfcinv(2.0 * q / (num_classes - 1)))
        )


def _rdp(log_q: np.ndarray, sigma: float, order: float, log_q0: float) -> np.ndarray:
    """β(q): λ/σ² at and above q₀, Thm 6 below (0 where q underflows to 0)."""
    log_q = np.asarray(log_q, dtype=float)
    dependent = np.where(np.isneginf(log_q), 0.0, _dependent_bound(np.minimum(log_q, log_q0), sigma, order))
    return np.where(log_q >= log_q0, order / sigma**2, dependent)


def _log_q1(sigma: float, order: float, num_classes: int) -> float:
    return float(_log_bl(np.array(gnmax_logq0(sigma, order)), sigma, num_classes))


def gnmax_local_sensitivity(log_q: object, *, sigma: float, num_classes: int, order: float) -> np.ndarray:
    """LS(q) of the data-dependent RDP at order λ for each ln q (PATE 2018 Alg. 3, Prop. 13).

    Valid only where conditions C5–C6 hold: :func:`check_smooth_sensitivity_conditions`
    refuses the order otherwise (``ValueError``).
    """
    sigma, order = check_positive_finite("sigma", sigma), _check_order(order)
    num_classes = check_int_at_least("num_classes", num_classes, 2)
    check_smooth_sensitivity_conditions(sigma, num_classes, order)
    return _local_sensitivity(log_q, sigma=sigma, num_classes=num_classes, order=order)


def _local_sensitivity(log_q: object, *, sigma: float, num_classes: int, order: float) -> np.ndarray:
    """Alg. 3 without the C5–C6 check (its callers have made it)."""
    log_q0 = gnmax_logq0(sigma, order)
    log_q1 = _log_q1(sigma, order, num_classes)
    log_q = np.asarray(log_q, dtype=float)
    log_q = np.where((log_q >= log_q1) & (log_q <= log_q0), log_q1, log_q)
    here = _rdp(log_q, sigma, order, log_q0)
    up = _rdp(_log_bu(log_q, sigma, num_classes), sigma, order, log_q0)
    down = _rdp(_log_bl(log_q, sigma, num_classes), sigma, order, log_q0)
    return np.maximum(up - here, here - down)


def _log_q_sorted(votes: np.ndarray, log_tail: np.ndarray, offset: int, cap: float) -> np.ndarray:
    """ln q of Prop. 8 for rows sorted in non-increasing order (winner in column 0).

    ``log_tail[offset + g]`` is ln Φ̄(g/(√2σ)) for the integer gap g. The runner-up
    (column 1) has the smallest gap and so the largest term: the log-sum-exp is
    taken around it.
    """
    terms = log_tail[offset + votes[:, :1] - votes[:, 1:]]
    largest = terms[:, 0]
    rest = np.exp(terms[:, 1:] - largest[:, None]).sum(axis=1)
    return np.minimum(largest + np.log1p(rest), cap)


def gnmax_local_sensitivity_bounds(
    votes: object, *, sigma: float, order: float, num_teachers: int | None = None
) -> np.ndarray:
    """LS(d) for d = 0 … T − 1 per query: the largest local sensitivity at distance d (PATE 2018 Algs. 4–5).

    ``votes`` has shape (queries, classes); T = ``num_teachers`` (default: the
    largest row sum). Vectorised over queries: every query walks one vote per
    step towards [q₁, q₀] (see the module docstring), the walks advance
    together, and a query leaves the loop when it reaches the plateau; the
    cost is O(queries × classes × steps walked). The bounds rest on conditions
    C5–C6: an order that fails them is refused (``ValueError``), as in
    :func:`check_smooth_sensitivity_conditions`.
    """
    votes = check_votes(votes)
    sigma, order = check_positive_finite("sigma", sigma), _check_order(order)
    check_smooth_sensitivity_conditions(sigma, votes.shape[1], order)
    return _local_sensitivity_bounds(votes, sigma=sigma, order=order, num_teachers=num_teachers)


def _local_sensitivity_bounds(votes: np.ndarray, *, sigma: float, order: float, num_teachers: int | None) -> np.ndarray:
    """Algs. 4–5 without the C5–C6 check (see :func:`gnmax_local_sensitivity_bounds`)."""
    total = int(votes.sum(axis=1).max())
    num_teachers = max(total, 1) if num_teachers is None else check_int_at_least("num_teachers", num_teachers, 1)
    if num_teachers < total:
        raise ValueError(
            f"num_teachers must be >= the largest number of votes in a query ({total}), got {num_teachers}"
        )
    num_classes = votes.shape[1]
    log_q0 = gnmax_logq0(sigma, order)
    log_q1 = _log_q1(sigma, order, num_classes)
    local = functools.partial(_local_sensitivity, sigma=sigma, num_classes=num_classes, order=order)
    plateau = float(local(log_q1))
    cap = math.log1p(-1.0 / num_classes)
    offset = 2 * num_teachers + 2  # gaps stay within ±(T + 2) along every walk
    log_tail = special.log_ndtr(-np.arange(-offset, offset + 1, dtype=float) / (math.sqrt(2.0) * sigma))

    # LS(d) depends only on the sorted histogram: walk each distinct one once.
    sorted_votes, inverse = np.unique(-np.sort(-votes, axis=1), axis=0, return_inverse=True)
    sorted_votes = np.ascontiguousarray(sorted_votes)
    log_q = _log_q_sorted(sorted_votes, log_tail, offset, cap)
    bounds = np.full((len(sorted_votes), num_teachers), plateau)
    bounds[:, 0] = local(log_q)
    left = (log_q > log_q0) & (sorted_votes[:, 1] > 0)  # weak consensus: widen the gap
    right = log_q < log_q1  # strong consensus: narrow it
    for distance in range(1, num_teachers):
        rows_left, rows_right = np.flatnonzero(left), np.flatnonzero(right)
        if not len(rows_left) and not len(rows_right):
            break
        if len(rows_left):
            block = sorted_votes[rows_left]
            block[:, 0] += 1
            # Take the vote from the last of the runners-up tied at the top, so the row stays sorted.
            position = (block[:, 1:] == block[:, 1:2]).sum(axis=1)
            block[np.arange(len(block)), position] -= 1
            sorted_votes[rows_left] = block
        if len(rows_right):
            sorted_votes[rows_right, 0] -= 1
            sorted_votes[rows_right, 1] += 1
        rows = np.concatenate([rows_left, rows_right])
        log_q[rows] = _log_q_sorted(sorted_votes[rows], log_tail, offset, cap)
        bounds[rows, distance] = local(log_q[rows])
        left[rows_left] = (log_q[rows_left] > log_q0) & (sorted_votes[rows_left, 1] > 0)
        right[rows_right] = log_q[rows_right] < log_q1
    return bounds[inverse.reshape(-1)]


def smooth_sensitivity(local_sensitivity_bounds: object, *, beta: float) -> np.ndarray:
    """SS_β = max_d e^{−βd}·LS(d) per row of LS(d) (the last axis is the distance d = 0, 1, …)."""
    beta = check_positive_finite("beta", beta)
    bounds = np.asarray(local_sensitivity_bounds, dtype=float)
    return (bounds * np.exp(-beta * np.arange(bounds.shape[-1]))).max(axis=-1)


def gnss_rdp(*, beta: float, noise_scale: float, order: float) -> float:
    """ρ(λ) of releasing f + SS_β·N(0, σ²) with σ = ``noise_scale`` (PATE 2018 Thm 23); needs 1 < λ < 1/(2β)."""
    beta, noise_scale, order = (check_positive_finite("beta", beta), check_positive_finite("noise_scale", noise_scale),
                                _check_order(order))
    if order >= 1.0 / (2.0 * beta):
        raise ValueError(f"order must be < 1/(2·beta) = {1.0 / (2.0 * beta):g} for the GNSS release (Thm 23), "
                         f"got order={order!r} with beta={beta!r}")
    return order * math.exp(2.0 * beta) / noise_scale**2 + (beta * order - 0.5 * math.log1p(-2.0 * order * beta)) / (
        order - 1.0)


@functools.lru_cache(maxsize=256)
def check_smooth_sensitivity_conditions(sigma: float, num_classes: int, order: float) -> None:
    """Refuse ``order`` unless conditions C5 and C6 of PATE 2018 hold for GNMax with σ and m classes.

    C5: β(q) non-decreasing on (0, q₀]; C6: β(bu(q)) − β(q) non-decreasing on
    (0, bl(q₀)]. Checked numerically on 4 000 points of ln q, geometrically
    spaced from ln q₀ (resp. ln bl(q₀)) down to 10⁴ times further or −700, with a
    relative tolerance of 10⁻⁹ for rounding. Raises ``ValueError`` naming the
    failed condition.
    """
    log_q0 = gnmax_logq0(sigma, order)
    for name, top in (("C5", log_q0), ("C6", _log_q1(sigma, order, num_classes))):
        # Increasing ln q up to `top`, from where q is still a normal float64 (bu and bl need q itself).
        log_q = -np.geomspace(-top, min(-top * 1e4, 700.0), 4000)[::-1]
        beta = _dependent_bound(log_q, sigma, order)
        values = beta if name == "C5" else _rdp(_log_bu(log_q, sigma, num_classes), sigma, order, log_q0) - beta
        steps = np.diff(values)
        if np.any(steps < -1e-9 * np.maximum(np.abs(values[1:]), 1e-300)):
            raise ValueError(
                f"order={order!r} fails condition {name} of PATE 2018 (App. C) for sigma={sigma!r} and "
                f"{num_classes} classes: the local-sensitivity bounds would not be valid; choose another order"
            )
