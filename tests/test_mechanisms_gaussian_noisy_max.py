"""GaussianNoisyMax (PATE 2018 GNMax): oracle vectors, data-independent bound, conditions, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from privfed.accounting.conversion import classic_epsilon, tight_epsilon

import privfed
from tests.conftest import load_oracle, requires_oracles


def _gnmax_cases():
    return load_oracle("pate_gaussian.json")["gnmax"]


@requires_oracles
def test_matches_pate2018_oracle():
    for case in _gnmax_cases():
        expected = case["expected"]
        mechanism = privfed.GaussianNoisyMax(np.array(case["counts"]), case["sigma"])
        orders = np.array(case["orders"])
        np.testing.assert_allclose(mechanism.log_failure_bounds()[:5], expected["logq_per_query"], rtol=1e-9)
        curve = mechanism.rdp(orders, analysis="classic")
        np.testing.assert_allclose(curve, expected["rdp_by_order"], rtol=1e-9, atol=1e-40)
        np.testing.assert_allclose(mechanism.rdp_data_independent(orders), expected["rdp_data_independent_by_order"],
                                   rtol=1e-9)
        epsilon, order = classic_epsilon(orders, curve, case["delta"])
        assert epsilon == pytest.approx(expected["eps"], rel=1e-9) and order == expected["order_opt"]
        assert classic_epsilon(orders, mechanism.rdp_data_independent(orders), case["delta"])[0] == pytest.approx(
            expected["eps_data_independent"], rel=1e-9)
        assert tight_epsilon(orders, mechanism.rdp(orders), case["delta"])[0] == pytest.approx(
            expected["eps_improved_conversion_dp_accounting"], rel=1e-9, abs=1e-12)


@requires_oracles
def test_account_classic_reproduces_oracle_epsilon():
    case = _gnmax_cases()[0]
    mechanism = privfed.GaussianNoisyMax(np.array(case["counts"]), case["sigma"])
    report = privfed.account(mechanism, delta=case["delta"], analysis="classic", orders=case["orders"])
    assert report.epsilon == pytest.approx(case["expected"]["eps"], rel=1e-9)
    assert report.data_dependent and report.method == "rdp"


@settings(max_examples=40, deadline=None)
@given(
    votes=hnp.arrays(np.int64, st.tuples(st.integers(1, 20), st.integers(2, 6)), elements=st.integers(0, 300)),
    sigma=st.floats(0.5, 100.0),
    k=st.integers(1, 4),
)
def test_data_dependent_never_exceeds_data_independent(votes, sigma, k):
    mechanism = privfed.GaussianNoisyMax(votes, sigma, k)
    orders = np.array([1.5, 2.0, 5.0, 20.0, 100.0])
    dependent, independent = mechanism.rdp(orders), mechanism.rdp_data_independent(orders)
    assert np.all(dependent >= 0) and np.all(dependent <= independent * (1 + 1e-12))
    np.testing.assert_allclose(independent, votes.shape[0] * orders * k * k / sigma**2, rtol=1e-12)


def test_votes_per_unit_equals_gnmax_with_scaled_sigma_on_scaled_votes():
    votes = np.array([[40, 5, 5], [25, 20, 5], [50, 0, 0]])
    k = 3
    # Moving k votes at noise σ is GNMax with σ/k on votes/k: same q, same RDP.
    scaled = privfed.GaussianNoisyMax(votes * 2, 20.0, 2)
    base = privfed.GaussianNoisyMax(votes, 10.0, 1)
    orders = np.array([2.0, 10.0, 40.0])
    np.testing.assert_allclose(scaled.rdp(orders), base.rdp(orders), rtol=1e-9)
    assert privfed.GaussianNoisyMax(votes, 10.0, k).rdp_data_independent(orders) == pytest.approx(
        3 * orders * k * k / 100.0)


def test_dp_event_is_the_gaussian_histogram():
    mechanism = privfed.GaussianNoisyMax(np.array([[9, 1], [4, 6]]), 3.0, 2)
    event = mechanism.dp_event()
    assert event.count == 2 and event.event.noise_multiplier == pytest.approx(3.0 / (np.sqrt(2) * 2))
    from privfed.accounting._dp_accounting import event_rdp

    orders = np.array([2.0, 7.0])
    np.testing.assert_allclose(event_rdp(event, orders), mechanism.rdp_data_independent(orders), rtol=1e-12)


def test_unanimous_votes_cost_almost_nothing():
    votes = np.tile([[250, 0, 0, 0]], (100, 1))
    report = privfed.account(privfed.GaussianNoisyMax(votes, 40.0), delta=1e-5)
    assert report.epsilon < report.epsilon_data_independent / 5


@pytest.mark.parametrize(
    "votes, sigma, k, error, match",
    [
        (np.array([[1, 2]]), 0.0, 1, ValueError, "sigma must be finite and > 0"),
        (np.array([[1, 2]]), 1.0, 0, ValueError, "votes_per_unit must be an integer >= 1"),
        (np.array([[1, -2]]), 1.0, 1, ValueError, "votes must hold non-negative integers"),
        (np.array([[1]]), 1.0, 1, ValueError, "at least 2 classes"),
        (np.array([1, 2]), 1.0, 1, ValueError, "2-D"),
    ],
)
def test_bad_arguments_are_refused(votes, sigma, k, error, match):
    with pytest.raises(error, match=match):
        privfed.GaussianNoisyMax(votes, sigma, k)


def test_rebuild_needs_the_votes():
    from privfed.accounting.registry import mechanism_from_record

    mechanism = privfed.GaussianNoisyMax(np.array([[3, 1]]), 2.0)
    record = {"kind": mechanism.kind, "unit": mechanism.unit, "parameters": mechanism.parameters()}
    with pytest.raises(ValueError, match="evidence must contain 'votes'"):
        mechanism_from_record(record)
    rebuilt = mechanism_from_record(record, evidence=mechanism.evidence())
    np.testing.assert_array_equal(rebuilt.votes, mechanism.votes)
