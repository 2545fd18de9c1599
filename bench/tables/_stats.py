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
