"""Smooth sensitivity of GNMax's data-dependent RDP and its GNSS release (PATE 2018 Sec. 4.2, App. C–D)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from privfed.accounting.gaussian_noisy_max import gaussian_log_failure_bounds
from privfed.accounting.smooth_sensitivity import (
    check_smooth_sensitivity_conditions,
    gnmax_local_sensitivity,
    gnmax_local_sensitivity_bounds,
    gnmax_logq0,
    gnss_rdp,
    smooth_sensitivity,
)

import privfed
from tests.conftest import oracle_cases, requires_oracles

_SS_CASES = [
    c for c in oracle_cases("pate_smooth_sensitivity.json", "cases") if c["kind"] == "gnmax_smooth_sensitivity"
]
_GAUSSIAN_SS_CASES = oracle_cases("pate_gaussian.json", "smooth_sensitivity_gnmax")


# --- against the reference values (TF Privacy's routines, called with their arguments in the right order) -----
@requires_oracles
@pytest.mark.parametrize("case", _SS_CASES, ids=lambda case: case["id"])
def test_local_and_smooth_sensitivity_match_the_oracle(case):
    expected = case["expected"]
    mechanism = privfed.GaussianNoisyMax(np.array([case["votes"]]), case["sigma"])
    bounds = mechanism.local_sensitivity_bounds(case["order"], num_teachers=case["num_teachers"])
    assert bounds.shape == (1, case["num_teachers"])
    np.testing.assert_allclose(bounds[0, :10], expected["local_sensitivity_first10"], rtol=1e-9, atol=1e-300)
    # The module function, without the C5–C6 check (the reference does not check them; some cases fail C6).
    assert smooth_sensitivity(bounds, beta=case["beta"])[0] == pytest.approx(expected["smooth_sensitivity"], rel=1e-9)
    assert mechanism.rdp(np.array([case["order"]]))[0] == pytest.approx(expected["rdp_data_dependent"], rel=1e-9)
    assert gnss_rdp(beta=case["beta"], noise_scale=case["sigma"], order=case["order"]) == pytest.approx(
        expected["rdp_gnss_of_sigma"], rel=1e-12)


@requires_oracles
@pytest.mark.parametrize("case", _GAUSSIAN_SS_CASES, ids=lambda case: case["id"])
def test_distance_profile_matches_the_oracle(case):
    expected = case["expected"]
    votes = np.array([case["votes"]])
    assert gnmax_logq0(case["sigma"], case["order"]) == pytest.approx(expected["logq0"], rel=1e-9)
    assert gaussian_log_failure_bounds(votes, case["sigma"])[0] == pytest.approx(expected["logq"], rel=1e-12)
    bounds = gnmax_local_sensitivity_bounds(votes, sigma=case["sigma"], order=case["order"],
                                            num_teachers=case["num_teachers"])[0]
    assert len(bounds) == expected["local_sensitivity_len"]
    np.testing.assert_allclose(bounds[:20], expected["local_sensitivity_by_distance_first20"], rtol=1e-9)
    assert bounds.max() == pytest.approx(expected["local_sensitivity_max"], rel=1e-9)
    assert smooth_sensitivity(bounds, beta=case["beta"]) == pytest.approx(expected["smooth_sensitivity"], rel=1e-9)
    assert gnss_rdp(beta=case["beta"], noise_scale=case["sigma"], order=case["order"]) == pytest.approx(
        expected["rdp_of_gnss_release"], rel=1e-12)


# --- properties that need no reference ----------------------------------------------------------------------
def test_local_sensitivity_bounds_one_vote_moves():
    """LS(0) bounds |β(D) − β(D′)| for every histogram D′ one moved vote away (brute force over all moves)."""
    sigma, order = 10.0, 5.0
    votes = np.array([60, 25, 15])
    log_q0 = gnmax_logq0(sigma, order)
    mechanism = privfed.GaussianNoisyMax(votes[None, :], sigma)
    here = mechanism.rdp(np.array([order]))[0]
    ls0 = mechanism.local_sensitivity_bounds(order)[0, 0]
    for source in range(3):
        for target in range(3):
            if source == target:
                continue
            moved = votes.copy()
            moved[source] -= 1
            moved[target] += 1
            there = privfed.GaussianNoisyMax(moved[None, :], sigma).rdp(np.array([order]))[0]
            assert abs(there - here) <= ls0 * (1 + 1e-9)
    assert log_q0 < 0


def test_vectorised_walks_equal_one_query_at_a_time():
    rng = np.random.default_rng(3)
    votes = np.array([rng.multinomial(100, p) for p in rng.dirichlet(np.full(4, 0.4), size=40)])
    together = gnmax_local_sensitivity_bounds(votes, sigma=15.0, order=8.0, num_teachers=100)
    for row in range(len(votes)):
        alone = gnmax_local_sensitivity_bounds(votes[row:row + 1], sigma=15.0, order=8.0, num_teachers=100)
        np.testing.assert_array_equal(together[row], alone[0])
    # The plateau is the largest LS can be, and smoothing never exceeds the largest LS.
    plateau = gnmax_local_sensitivity(np.log(0.1), sigma=15.0, num_classes=4, order=8.0)
    assert together.max() <= max(together[:, -1].max(), plateau) * (1 + 1e-12)
    assert np.all(smooth_sensitivity(together, beta=0.05) <= together.max(axis=1))


def test_gnss_rdp_refuses_orders_outside_its_range():
    with pytest.raises(ValueError, match=r"order must be < 1/\(2·beta\) = 10"):
        gnss_rdp(beta=0.05, noise_scale=1.0, order=10.0)


def test_conditions_are_checked_and_cached():
    check_smooth_sensitivity_conditions(40.0, 10, 10.0)  # PATE 2018's MNIST setting passes
    # σ = 10, two classes, λ = 10: β(bu(q)) − β(q) decreases just below q₁ (C6 fails), so the order is refused.
    with pytest.raises(ValueError, match="fails condition C6"):
        privfed.GaussianNoisyMax(np.array([[32, 18]]), 10.0).smooth_sensitivity(order=10.0, beta=0.04)
    with pytest.raises(ValueError, match="votes_per_unit=1"):
        privfed.GaussianNoisyMax(np.array([[5, 1]]), 10.0, 2).smooth_sensitivity(order=5.0, beta=0.05)


# --- the release ------------------------------------------------------------------------------------------
def _votes(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.array([rng.multinomial(250, p) for p in rng.dirichlet(np.full(10, 0.1), size=200)])


def test_release_adds_the_gnss_cost_and_noise_scaled_by_the_smooth_sensitivity():
    mechanism = privfed.GaussianNoisyMax(_votes(), 40.0)
    order, beta, scale = 10.0, 0.02, 10.0
    report = privfed.release_epsilon(mechanism, delta=1e-5, order=order, beta=beta, noise_scale=scale,
                                     random_state=7)
    z = np.random.default_rng(7).standard_normal()
    expected = (mechanism.rdp(np.array([order]))[0]
                + scale * z * mechanism.smooth_sensitivity(order=order, beta=beta).sum()
                + gnss_rdp(beta=beta, noise_scale=scale, order=order))
    assert report.rdp == pytest.approx((expected,), rel=1e-12)
    assert not report.data_dependent and report.method == "smooth_sensitivity" and "SANITISED" in str(report)
    assert report.epsilon < report.epsilon_data_independent
    assert report.epsilon_data_independent > privfed.account(mechanism, delta=1e-5).epsilon_data_independent
    again = privfed.release_epsilon(mechanism, delta=1e-5, order=order, beta=beta, noise_scale=scale, random_state=7)
    assert again.epsilon == report.epsilon


def test_a_ledger_records_the_release_as_its_own_entry():
    ledger = privfed.Ledger(delta=1e-5, primary_unit="example")
    mechanism = privfed.GaussianNoisyMax(_votes(1), 40.0)
    ledger.record(mechanism)
    report = privfed.release_epsilon(ledger, delta=1e-5, order=10.0, beta=0.02, noise_scale=10.0, random_state=0)
    assert len(ledger) == 2 and ledger.entries[-1].analyses["example"].kind == "smooth_sensitivity_release"
    total = ledger.account()
    assert total.epsilon_data_independent == pytest.approx(report.epsilon_data_independent, rel=1e-9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = privfed.Ledger.from_json(ledger.to_json(), evidence=ledger.evidence())
    assert loaded.account().epsilon == pytest.approx(total.epsilon, rel=1e-12)


@pytest.mark.parametrize("build, kwargs, match", [
    (lambda: privfed.LaplaceNoisyMax(np.array([[9, 1]]), 0.1), {}, "at least one GaussianNoisyMax"),
    (lambda: [privfed.GaussianNoisyMax(np.array([[9, 1]]), 10.0), privfed.LaplaceNoisyMax(np.array([[9, 1]]), 0.1)],
     {}, "cannot sanitise a data-dependent laplace_noisy_max"),
    (lambda: privfed.GaussianNoisyMax(np.array([[9, 1]]), 10.0), {"order": 30.0},
     r"order must be in \(1, 1/\(2·beta\)\)"),
])
def test_release_refuses_what_it_cannot_sanitise(build, kwargs, match):
    arguments = {"delta": 1e-5, "order": 5.0, "beta": 0.02, "noise_scale": 5.0, **kwargs}
    with pytest.raises(ValueError, match=match):
        privfed.release_epsilon(build(), **arguments)
