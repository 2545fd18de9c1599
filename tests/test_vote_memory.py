"""A noisy-max mechanism keeps a read-only view of int64 votes (no copy) and accounts with little extra memory."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from privfed.accounting.noisy_max import distinct_counts

import privfed


@pytest.mark.parametrize("make", [lambda v: privfed.LaplaceNoisyMax(v, gamma=0.04, votes_per_unit=2, unit="party"),
                                  lambda v: privfed.GaussianNoisyMax(v, 20.0)])
def test_int64_votes_are_not_copied_and_accounting_stays_small(make) -> None:
    votes = np.random.default_rng(0).integers(0, 5, size=(2_000_000, 10), dtype=np.int64)
    votes[:, 0] += 20
    privfed.account(make(votes[:100]), delta=1e-5)  # imports, outside the measurement
    tracemalloc.start()
    try:
        mechanism = make(votes)
        assert np.shares_memory(mechanism.votes, votes) and not mechanism.votes.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            mechanism.votes[0, 0] = 1
        report = privfed.account(mechanism, delta=1e-5)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # The per-query bounds (8 of the 80 bytes a query) and fixed-size chunks; a copy alone would be 1.0x.
    assert peak < 0.5 * votes.nbytes, peak / votes.nbytes
    assert report.epsilon == privfed.account(make(votes.astype(float)), delta=1e-5).epsilon  # converted, same ε


def test_float_votes_are_converted_once_and_the_caller_keeps_a_writable_array() -> None:
    votes = np.array([[3.0, 1.0], [2.0, 2.0]])
    mechanism = privfed.LaplaceNoisyMax(votes, gamma=0.5)
    assert mechanism.votes.dtype == np.int64 and not np.shares_memory(mechanism.votes, votes)
    votes[0, 0] = 9.0  # the caller's array stays writable
    assert votes.flags.writeable and mechanism.votes[0, 0] == 3


@given(st.lists(st.sampled_from([0.5, 0.25, 1e-300, 0.125, 0.5]), max_size=50))
def test_distinct_counts_is_numpy_unique(values) -> None:
    array = np.array(values, dtype=float)
    expected_values, expected_counts = np.unique(array, return_counts=True)
    got_values, got_counts = distinct_counts(array.copy())
    np.testing.assert_array_equal(got_values, expected_values)
    np.testing.assert_array_equal(got_counts, expected_counts)
