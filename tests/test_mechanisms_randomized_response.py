"""RandomizedResponse (PrivateKT): closed forms, dp-accounting oracles, the PLD-count bug, estimator."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from privfed.accounting._dp_accounting import event_pld_epsilon, pld_interval
from privfed.accounting.conversion import classic_epsilon, tight_epsilon

import privfed
from tests.conftest import load_oracle, requires_oracles


def _rr_cases():
    return load_oracle("dp_accounting.json")["randomized_response"]


# --- closed forms -------------------------------------------------------------
@requires_oracles
def test_beta_from_epsilon_matches_closed_forms():
    for case in load_oracle("closed_forms.json")["rr_beta_from_eps"]:
        expected = case["expected"]
        beta = privfed.randomized_response_keep_probability(case["eps_total"], num_classes=case["C"],
                                                            labels_per_report=case["K"])
        assert beta == pytest.approx(expected["beta"], rel=1e-9)
        mechanism = privfed.RandomizedResponse(case["C"], epsilon=case["eps_total"], labels_per_report=case["K"])
        assert mechanism.epsilon_per_label == pytest.approx(expected["eps_per_prediction"], rel=1e-9)
        assert mechanism.pure_epsilon() == pytest.approx(expected["eps_total_roundtrip"], rel=1e-9)


@requires_oracles
def test_epsilon_from_beta_matches_closed_forms():
    for case in load_oracle("closed_forms.json")["rr_eps_from_beta"]:
        expected = case["expected"]
        mechanism = privfed.RandomizedResponse(case["C"], keep_probability=case["beta"], labels_per_report=case["K"])
        assert mechanism.epsilon_per_report == pytest.approx(expected["eps_total"], rel=1e-9)
        assert mechanism.noise_parameter == pytest.approx(expected["dp_accounting_noise_parameter"], rel=1e-12)
        assert mechanism.epsilon_per_label == pytest.approx(expected["dp_accounting_rr_pure_eps_per_prediction"],
                                                            rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(epsilon=st.floats(1e-3, 20.0), classes=st.integers(2, 1000), labels=st.integers(1, 50))
def test_beta_and_epsilon_are_inverse(epsilon, classes, labels):
    beta = privfed.randomized_response_keep_probability(epsilon, num_classes=classes, labels_per_report=labels)
    assert 0.0 < beta < 1.0
    back = privfed.randomized_response_epsilon(beta, num_classes=classes, labels_per_report=labels)
    assert back == pytest.approx(epsilon, rel=1e-9)
    # The likelihood ratio of one label is exactly e^{ε/K}.
    keep_true, keep_other = beta + (1 - beta) / classes, (1 - beta) / classes
    assert math.log(keep_true / keep_other) == pytest.approx(epsilon / labels, rel=1e-9)


# --- composition over reports: RDP, PLD, pure --------------------------------
@requires_oracles
def test_rdp_and_pld_match_dp_accounting_oracle():
    for case in _rr_cases():
        expected = case["expected"]
        mechanism = privfed.RandomizedResponse(case["num_classes_C"], keep_probability=case["keep_prob_beta"],
                                               labels_per_report=case["num_predictions_K"])
        assert mechanism.num_queries == case["count"]
        orders = np.asarray(dp_accounting.rdp.RdpAccountant()._orders)
        curve = mechanism.rdp(orders)
        epsilon, order = tight_epsilon(orders, curve, case["delta"])
        assert epsilon == pytest.approx(expected["replace_one_rdp_eps"], rel=1e-9)
        assert order == expected["replace_one_rdp_opt_order"]
        assert classic_epsilon(orders, curve, case["delta"])[0] == pytest.approx(
            expected["replace_one_rdp_eps_classic_conversion"], rel=1e-9)
        # privfed's interval is the oracle's ε₀/1000 rounded down to 10⁻⁴·2^k (nested grids: see pld_interval).
        interval = pld_interval(mechanism.dp_event())
        assert (
            expected["pld_value_discretization_interval"] / 2
            < interval
            <= expected["pld_value_discretization_interval"] * (1 + 1e-9)
        )
        assert math.log2(interval / 1e-4) == pytest.approx(round(math.log2(interval / 1e-4)), abs=1e-9)
        assert event_pld_epsilon(mechanism.dp_event(), case["delta"]) == pytest.approx(
            expected["replace_one_pld_eps"], rel=2e-3)
        assert mechanism.pure_epsilon() == pytest.approx(expected["pure_composition_eps"], rel=1e-9)


@requires_oracles
def test_pld_self_composes_where_dp_accounting_pld_accountant_does_not():
    """dp-accounting 0.6.0's PLDAccountant ignores ``count`` for randomized response; privfed must not."""
    for case in _rr_cases():
        expected = case["expected"]
        mechanism = privfed.RandomizedResponse(case["num_classes_C"], keep_probability=case["keep_prob_beta"],
                                               labels_per_report=case["num_predictions_K"])
        ours = event_pld_epsilon(mechanism.dp_event(), case["delta"])
        buggy = expected["replace_one_pld_accountant_compose_count_eps"]
        assert ours > 2 * buggy  # composing K labels costs far more than one label
        # privfed grid: ε₀/1000 rounded down to 10⁻⁴·2^k
        assert ours == pytest.approx(expected["replace_one_pld_eps"], rel=2e-3)
        report = privfed.account(mechanism, delta=case["delta"])
        assert report.epsilon == pytest.approx(min(expected["replace_one_pld_eps"], expected["replace_one_rdp_eps"]),
                                               rel=1e-3)
        assert report.epsilon > 2 * buggy


def test_reports_compose_and_tight_is_at_most_pure():
    one = privfed.RandomizedResponse(10, epsilon=1.0, labels_per_report=10)
    many = privfed.RandomizedResponse(10, epsilon=1.0, labels_per_report=10, reports=20)
    assert many.pure_epsilon() == pytest.approx(20.0)
    orders = np.array([2.0, 8.0, 32.0])
    np.testing.assert_allclose(many.rdp(orders), 20 * one.rdp(orders), rtol=1e-12)
    report = privfed.account(many, delta=1e-6)
    assert one.pure_epsilon() < report.epsilon < many.pure_epsilon()
    assert report.unit == "party" and not report.data_dependent


def test_classic_rdp_is_the_pure_dp_bound_per_label():
    mechanism = privfed.RandomizedResponse(4, epsilon=2.0, labels_per_report=4, reports=3)
    orders = np.array([1.5, 4.0, 100.0])
    expected = 12 * np.minimum(0.5 * 0.25 * orders, 0.5)
    np.testing.assert_allclose(mechanism.rdp(orders, analysis="classic"), expected, rtol=1e-12)
    assert np.all(mechanism.rdp(orders) <= mechanism.rdp(orders, analysis="classic") + 1e-12)


# --- the aggregate estimator (PrivateKT Eq. 3) ---------------------------------
def test_estimate_is_exact_in_expectation_and_variance_matches_simulation():
    rng = np.random.default_rng(1)
    classes, beta = 5, 0.3
    true_labels = rng.integers(0, classes, size=400)
    true_counts = np.bincount(true_labels, minlength=classes)
    trials = 4000
    keep = rng.random((trials, true_labels.size)) < beta
    noisy = np.where(keep, true_labels, rng.integers(0, classes, size=(trials, true_labels.size)))
    reported = np.stack([np.bincount(row, minlength=classes) for row in noisy])
    estimates = privfed.randomized_response_estimate(reported, keep_probability=beta)
    variance = privfed.randomized_response_variance(true_counts, keep_probability=beta)
    standard_error = np.sqrt(variance / trials)
    assert np.all(np.abs(estimates.mean(axis=0) - true_counts) < 5 * standard_error)
    np.testing.assert_allclose(estimates.var(axis=0), variance, rtol=0.15)
    # Expected reported counts map back exactly.
    expected_reported = beta * true_counts + (1 - beta) * true_counts.sum() / classes
    np.testing.assert_allclose(
        (expected_reported - (1 - beta) * true_counts.sum() / classes) / beta, true_counts)


def test_estimate_with_beta_one_returns_the_counts():
    counts = np.array([[3, 0, 7], [1, 1, 1]])
    np.testing.assert_allclose(privfed.randomized_response_estimate(counts, keep_probability=1.0), counts)
    np.testing.assert_allclose(privfed.randomized_response_variance(counts, keep_probability=1.0), 0.0)


# --- bad input -------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({}, ValueError, "exactly one of epsilon"),
        ({"epsilon": 1.0, "keep_probability": 0.5}, ValueError, "exactly one of epsilon"),
        ({"epsilon": -1.0}, ValueError, "epsilon must be finite and > 0"),
        ({"epsilon": math.inf}, ValueError, "epsilon"),
        ({"keep_probability": 1.0}, ValueError, r"keep_probability must be in \(0, 1\)"),
        ({"epsilon": 1.0, "reports": 0}, ValueError, "reports must be an integer >= 1"),
        ({"epsilon": 1.0, "labels_per_report": 1.5}, TypeError, "labels_per_report"),
        ({"epsilon": 1.0, "unit": "client"}, ValueError, "unit must be one of"),
    ],
)
def test_bad_arguments_are_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        privfed.RandomizedResponse(10, **kwargs)


def test_bad_num_classes_and_counts_are_refused():
    with pytest.raises(ValueError, match="num_classes must be an integer >= 2"):
        privfed.RandomizedResponse(1, epsilon=1.0)
    with pytest.raises(ValueError, match="reported_counts"):
        privfed.randomized_response_estimate(np.array([-1, 2]), keep_probability=0.5)
    with pytest.raises(ValueError, match="keep_probability"):
        privfed.randomized_response_estimate(np.array([1, 2]), keep_probability=0.0)


def test_rebuilds_from_its_record():
    from privfed.accounting.registry import mechanism_from_record

    mechanism = privfed.RandomizedResponse(10, epsilon=2.0, labels_per_report=5, reports=3, unit="example")
    rebuilt = mechanism_from_record(mechanism.describe() | {"parameters": mechanism.parameters()})
    assert rebuilt.unit == "example" and rebuilt.reports == 3
    assert rebuilt.keep_probability == mechanism.keep_probability
    assert rebuilt.epsilon_per_report == pytest.approx(2.0, rel=1e-12)
