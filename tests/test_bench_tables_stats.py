"""bench/tables/_stats.py: mean ± sd, the t-interval and Welch's difference against closed forms and scipy."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.tables._stats import mean_sd, t_interval, welch_difference  # noqa: E402


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


def test_welch_difference_agrees_with_scipys_test_from_summary_statistics():
    from scipy import stats as scipy_stats

    values = [76.64, 79.98, 78.51, 77.87, 79.56]  # Table 7, Adult, t = 10, seeds 0-4
    difference, (low, high), p_value = welch_difference(values, 81.1, 0.7, 5)
    mean, sd = mean_sd(values)
    expected = scipy_stats.ttest_ind_from_stats(mean, sd, 5, 81.1, 0.7, 5, equal_var=False)
    assert difference == pytest.approx(mean - 81.1)
    assert p_value == pytest.approx(expected.pvalue, rel=1e-12)
    assert low < difference < high < 0


def test_welch_difference_refuses_fewer_than_two_runs_on_a_side():
    with pytest.raises(ValueError, match="at least two runs on each side, got 1 and 5"):
        welch_difference([80.0], 81.1, 0.7, 5)


def test_the_confusion_matrix_follows_from_accuracy_and_the_minority_shares():
    from bench.tables.fedkt import confusion_rates

    # 100 rows, 24 of the minority class; the model calls 10 rows minority, 6 of them rightly: 6 + 72 right
    minority_recall, majority_recall = confusion_rates(78.0, 24.0, 10.0)
    assert minority_recall == pytest.approx(100 * 6 / 24)
    assert majority_recall == pytest.approx(100 * 72 / 76)
