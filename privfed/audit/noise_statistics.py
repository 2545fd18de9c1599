"""The statistics of ``privfed selftest``: exact-law tests of noise, and the power each one states.

Each test computes p-values against the law and parameters a ledger accounts (χ² goodness of fit, Kolmogorov–Smirnov,
or a z-test of a moment with its known standard error) and states its power: the smallest relative deviation of its
parameter (a scale, a variance, a keep probability) it detects with probability ≥ :data:`POWER` at its α (normal
approximation for moments, non-central χ² for goodness of fit). Used by the checks of privfed's own noise functions
(:mod:`privfed.audit.noise_checks`) and of a user's (:class:`privfed.audit.selftest.MechanismUnderTest`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import integrate, stats

__all__ = ["DEVIATIONS", "POWER", "CheckFailure", "CheckOutcome", "chi2_power", "correlation_p",
           "gaussian_difference_check", "goodness_of_fit_p", "randomized_response_check", "skellam_moments",
           "smallest_deviation", "winner_probabilities", "z_detectable", "z_test_p"]


#: The power every check reports: the smallest deviation detected with at least this probability.
POWER = 0.9

#: The relative deviations a check's power is stated in, smallest first.
DEVIATIONS = (0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)


class CheckFailure(AssertionError):
    """A deterministic property failed (a p-value of 0)."""


@dataclass
class CheckOutcome:
    """What a check found: its p-values, the power it states, and a line of detail for the report."""

    p_values: list[float]
    power: str
    detail: str


def z_test_p(z: float) -> float:
    """Two-sided p-value of a standard normal statistic ``z``."""
    return float(2.0 * stats.norm.sf(abs(z)))


def z_detectable(relative_se: float, alpha: float) -> float:
    """Smallest relative deviation a two-sided z-test with this relative standard error detects w.p. ≥ POWER."""
    return (stats.norm.isf(alpha / 2) + stats.norm.ppf(POWER)) * relative_se


def chi2_power(expected: np.ndarray, alternative: np.ndarray, n: int, alpha: float) -> float:
    """Power of the χ² test at ``alpha`` over ``n`` draws from ``alternative`` (non-central χ²)."""
    keep = expected > 0
    lam = n * float(np.sum((alternative[keep] - expected[keep]) ** 2 / expected[keep]))
    df = max(int(keep.sum()) - 1, 1)
    return float(stats.ncx2.sf(stats.chi2.isf(alpha, df), df, lam)) if lam > 0 else alpha


def goodness_of_fit_p(counts: np.ndarray, expected: np.ndarray) -> float:
    """χ² goodness of fit of ``counts`` to probabilities ``expected``; a count where 0 is expected gives p = 0."""
    n = counts.sum()
    if np.any((expected == 0) & (counts > 0)):
        return 0.0
    keep = expected > 0
    if keep.sum() < 2:
        return 1.0
    return float(stats.chisquare(counts[keep], n * expected[keep] / expected[keep].sum()).pvalue)


def smallest_deviation(power_at: Callable[[float], float]) -> str:
    """The smallest relative deviation d (both ×(1 + d) and ÷(1 + d)) with power ≥ POWER, as text."""
    for d in DEVIATIONS:
        if min(power_at(1.0 + d), power_at(1.0 / (1.0 + d))) >= POWER:
            return f"{d:.0%}"
    return f"> {DEVIATIONS[-1]:.0%}"


def correlation_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p-value of zero correlation (Fisher: r·√n ≈ N(0, 1) under independence)."""
    a, b = np.ravel(a).astype(float), np.ravel(b).astype(float)
    r = float(np.corrcoef(a, b)[0, 1])
    return z_test_p(r * math.sqrt(len(a)))


def winner_probabilities(votes: Sequence[float], law: Any) -> np.ndarray:
    """P[argmax_j (v_j + Z_j) = j] for i.i.d. noise of ``law`` (a frozen scipy distribution)."""
    votes = np.asarray(votes, dtype=float)
    if np.all(votes == votes[0]):
        return np.full(len(votes), 1.0 / len(votes))
    width = law.isf(1e-12)
    probabilities = []
    for j, v in enumerate(votes):
        others = np.delete(votes, j)

        def density(x: float, v: float = v, others: np.ndarray = others) -> float:
            return float(law.pdf(x - v) * np.prod(law.cdf(x - others)))

        low, high = votes.min() - width, votes.max() + width
        probabilities.append(integrate.quad(density, low, high, points=sorted(set(votes)), limit=200)[0])
    probabilities = np.asarray(probabilities)
    return probabilities / probabilities.sum()


def skellam_moments(noise: np.ndarray, variance: float, alpha: float, what: str) -> tuple[list[float], str, str]:
    """Integrality, mean 0 and variance (z-tests with Skellam's exact fourth cumulant), χ² against the pmf."""
    if noise.dtype.kind not in "iu":
        raise CheckFailure(f"{what} must be integers, got dtype {noise.dtype}")
    n = noise.size
    mean_z = noise.mean() / math.sqrt(variance / n)
    variance_se = math.sqrt((2 * variance**2 + variance) / n)  # κ₄ = σ² for Skellam
    variance_z = (noise.var() - variance) / variance_se
    law = stats.skellam(variance / 2, variance / 2)
    edges = np.arange(math.floor(law.ppf(1e-3)), math.ceil(law.isf(1e-3)) + 1)
    observed = np.array([(noise < edges[0]).sum(), *[(noise == k).sum() for k in edges], (noise > edges[-1]).sum()])
    expected = np.array([law.cdf(edges[0] - 1), *law.pmf(edges), law.sf(edges[-1])])
    p_values = [z_test_p(mean_z), z_test_p(variance_z), goodness_of_fit_p(observed, expected)]
    return (p_values, f"variance off by {z_detectable(variance_se / variance, alpha):.1%}",
            f"{what}: variance {noise.var():.4f} vs {variance:g}")


def randomized_response_check(perturb: Callable[[np.ndarray, float, int], np.ndarray], size: int, alpha: float, *,
              beta: float = 0.6, classes: int = 4) -> CheckOutcome:
    """Randomized response on label 0: χ² against (β + (1 − β)/C, (1 − β)/C, …); its power on β."""
    reports = perturb(np.zeros(size, dtype=np.int64), beta, classes)
    counts = np.bincount(reports, minlength=classes)

    def law(keep: float) -> np.ndarray:
        return np.array([keep + (1 - keep) / classes] + [(1 - keep) / classes] * (classes - 1))

    power = smallest_deviation(lambda factor: chi2_power(law(beta), law(min(beta * factor, 1.0)), size, alpha))
    lag = correlation_p(reports[:-1] == 0, reports[1:] == 0)
    return CheckOutcome([goodness_of_fit_p(counts, law(beta)), lag], f"keep probability β off by {power}",
                    f"kept {counts[0] / size:.4f} vs {law(beta)[0]:.4f}")


def gaussian_difference_check(difference: np.ndarray, scale: float, alpha: float, what: str) -> CheckOutcome:
    """``difference`` = two runs that differ only in their noise: N(0, 2·scale²) — its sd (z) and law (KS)."""
    standardised = np.ravel(difference) / (scale * math.sqrt(2.0))
    n = standardised.size
    z = (standardised.std() - 1.0) / math.sqrt(1.0 / (2 * n))
    ks = float(stats.kstest(standardised, "norm").pvalue)
    return CheckOutcome([z_test_p(z), ks], f"noise scale off by {z_detectable(math.sqrt(1 / (2 * n)), alpha):.1%}",
                    f"{what}: spread / expected = {standardised.std():.4f} over {n} coordinates")
