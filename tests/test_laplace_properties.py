"""Properties the Laplace noisy-max accountant must satisfy on any input (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from privfed.accounting import LaplaceNoisyMax, account

DELTA = 1e-5

votes_strategy = st.integers(2, 5).flatmap(
    lambda classes: arrays(np.int64, st.tuples(st.integers(1, 12), st.just(classes)), elements=st.integers(0, 60))
)
gammas = st.floats(0.005, 1.0)
ks = st.integers(1, 5)
analyses = st.sampled_from(["classic", "tight"])


def _eps(votes, gamma, k, analysis, independent=False):
    report = account(LaplaceNoisyMax(votes, gamma, k), delta=DELTA, analysis=analysis)
    return report.epsilon_data_independent if independent else report.epsilon


@given(votes_strategy, gammas, gammas, ks, analyses)
def test_data_independent_epsilon_grows_with_gamma(votes, gamma_a, gamma_b, k, analysis):
    low, high = sorted((gamma_a, gamma_b))
    assert _eps(votes, low, k, analysis, True) <= _eps(votes, high, k, analysis, True) * (1 + 1e-12)


@given(votes_strategy, gammas, ks, ks, analyses)
def test_epsilon_grows_with_votes_per_unit(votes, gamma, k_a, k_b, analysis):
    low, high = sorted((k_a, k_b))
    for independent in (True, False):
        assert _eps(votes, gamma, low, analysis, independent) <= (
            _eps(votes, gamma, high, analysis, independent) * (1 + 1e-12)
        )


@given(votes_strategy, st.data(), gammas, ks, analyses)
def test_adding_a_query_never_lowers_epsilon(votes, data, gamma, k, analysis):
    extra = data.draw(arrays(np.int64, (1, votes.shape[1]), elements=st.integers(0, 60)))
    longer = np.vstack([votes, extra])
    for independent in (True, False):
        assert _eps(votes, gamma, k, analysis, independent) <= (
            _eps(longer, gamma, k, analysis, independent) * (1 + 1e-12)
        )


@given(votes_strategy, gammas, ks, analyses)
def test_data_dependent_never_exceeds_data_independent(votes, gamma, k, analysis):
    report = account(LaplaceNoisyMax(votes, gamma, k), delta=DELTA, analysis=analysis)
    assert report.epsilon <= report.epsilon_data_independent * (1 + 1e-12)
    assert report.data_dependent


@given(votes_strategy, gammas, ks)
def test_tight_never_exceeds_classic(votes, gamma, k):
    mechanism = LaplaceNoisyMax(votes, gamma, k)
    tight = account(mechanism, delta=DELTA, analysis="tight")
    classic = account(mechanism, delta=DELTA, analysis="classic")
    assert tight.epsilon <= classic.epsilon * (1 + 1e-12)
    assert tight.epsilon_data_independent <= classic.epsilon_data_independent * (1 + 1e-12)


@given(votes_strategy, gammas, ks, st.lists(st.floats(1.01, 300.0), min_size=1, max_size=6))
def test_tight_curve_is_below_classic_curve_at_every_order(votes, gamma, k, orders):
    mechanism = LaplaceNoisyMax(votes, gamma, k)
    orders = np.array(orders)
    assert np.all(mechanism.rdp(orders, analysis="tight") <= mechanism.rdp(orders, analysis="classic") * (1 + 1e-12))
    assert np.all(mechanism.rdp(orders) >= 0)


@given(votes_strategy, gammas, ks, analyses)
def test_rdp_never_exceeds_pure_composition(votes, gamma, k, analysis):
    """Each query is 2kγ-DP, so the composed RDP is at most N·2kγ at every order."""
    mechanism = LaplaceNoisyMax(votes, gamma, k)
    report = account(mechanism, delta=DELTA, analysis=analysis)
    assert max(report.rdp) <= mechanism.pure_epsilon() * (1 + 1e-12)


@pytest.mark.parametrize("analysis", ["tight", "classic"])
def test_underflowing_failure_bounds_stay_positive(analysis):
    # γ = 300 puts (2 + γΔ)/(4e^{γΔ}) below the smallest float for every gap ≥ 3. The bound must
    # stay positive (floored): q = 0 would claim the argmax deterministic, RDP exactly 0. (The
    # data-dependent ε may still convert to 0 at δ = 1e-5 — dp-accounting's conversion gives (0, δ)
    # once the divergence is below -log(1 - δ²) — which is correct for these votes.)
    votes = np.array([[40, 0, 3, 1], [20, 17, 0, 0]] * 40)
    mechanism = LaplaceNoisyMax(votes, gamma=300.0)
    assert np.all(mechanism.failure_bounds() > 0)
    assert np.all(mechanism.rdp(np.array([1.5, 2.0, 8.0, 64.0]), analysis=analysis) > 0)
