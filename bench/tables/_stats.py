"""Summaries over seeds shared by the table renderers: mean ± sd and a t-interval for the mean."""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import stats


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """The mean and the sample standard deviation (n − 1) of ``values``; sd is nan for one value."""
    values = [float(value) for value in values]
    if not values:
        raise ValueError("values: need at least one value, got none")
    mean = math.fsum(values) / len(values)
    if len(values) == 1:
        return mean, math.nan
    return mean, math.sqrt(math.fsum((value - mean) ** 2 for value in values) / (len(values) - 1))


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """The two-sided ``level`` t-interval for the mean: mean ± t_{(1+level)/2, n−1} · sd / √n (needs n ≥ 2)."""
    if not 0 < level < 1:
        raise ValueError(f"level: must lie in (0, 1), got {level!r}")
    if len(values) < 2:
        raise ValueError(f"values: a t-interval needs at least two values, got {len(values)}")
    mean, sd = mean_sd(values)
    half = float(stats.t.ppf((1 + level) / 2, len(values) - 1)) * sd / math.sqrt(len(values))
    return mean - half, mean + half


def welch_difference(values: Sequence[float], reference_mean: float, reference_sd: float, reference_n: int,
                     level: float = 0.95) -> tuple[float, tuple[float, float], float]:
    """Our mean minus a published mean ± sd over ``reference_n`` runs: the difference, its Welch ``level``
    interval (Welch–Satterthwaite degrees of freedom) and the two-sided Welch p-value (needs n ≥ 2 on both sides)."""
    if not 0 < level < 1:
        raise ValueError(f"level: must lie in (0, 1), got {level!r}")
    if len(values) < 2 or reference_n < 2:
        raise ValueError(f"values, reference_n: Welch's test needs at least two runs on each side, got "
                         f"{len(values)} and {reference_n}")
    if not reference_sd >= 0:
        raise ValueError(f"reference_sd: must be a standard deviation ≥ 0, got {reference_sd!r}")
    mean, sd = mean_sd(values)
    ours, theirs = sd ** 2 / len(values), reference_sd ** 2 / reference_n
    error = math.sqrt(ours + theirs)
    if error == 0:
        raise ValueError("values, reference_sd: both sides have zero spread; the difference has no interval")
    freedom = (ours + theirs) ** 2 / (ours ** 2 / (len(values) - 1) + theirs ** 2 / (reference_n - 1))
    difference = mean - reference_mean
    half = float(stats.t.ppf((1 + level) / 2, freedom)) * error
    p_value = 2 * float(stats.t.sf(abs(difference) / error, freedom))
    return difference, (difference - half, difference + half), p_value
