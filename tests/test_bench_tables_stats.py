"""bench/tables/_stats.py: mean ± sd and the t-interval against closed forms."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.tables._stats import mean_sd, t_interval  # noqa: E402


def test_mean_sd_is_the_sample_standard_deviation():
    assert mean_sd([1.0, 2.0, 3.0]) == (2.0, 1.0)
    mean, sd = mean_sd([5.0])
    assert mean == 5.0 and math.isnan(sd)


def test_t_interval_uses_the_t_quantile_with_n_minus_1_degrees_of_freedom():
    low, high = t_interval([1.0, 2.0, 3.0])
    # closed form for 2 degrees of freedom: t_p = (2p − 1) · sqrt(2 / (4p(1 − p))); sd = 1, n = 3
    t = 0.95 * math.sqrt(2 / (4 * 0.975 * 0.025))
    assert high - 2.0 == pytest.approx(t / math.sqrt(3), rel=1e-9)
    assert 2.0 - low == pytest.approx(high - 2.0, rel=1e-12)
    low90, high90 = t_interval([1.0, 2.0, 3.0], level=0.9)
    assert low < low90 < high90 < high


def test_bad_input_is_one_clear_error():
    with pytest.raises(ValueError, match="at least two values"):
        t_interval([1.0])
    with pytest.raises(ValueError, match="level"):
        t_interval([1.0, 2.0], level=1.5)
    with pytest.raises(ValueError, match="at least one value"):
        mean_sd([])
