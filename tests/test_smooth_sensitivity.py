"""Smooth sensitivity of GNMax's data-dependent RDP and its GNSS release (PATE 2018 Sec. 4.2, App. C–D)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from privfed.accounting.gaussian_noisy_max import gaussian_log_failure_bounds
from privfed.accounting.smooth_sensitivity import _local_sensitivity_bounds as unchecked_local_sensitivity_bounds
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


def _conditions_hold(sigma, num_classes, order):
    try:
        check_smooth_sensitivity_conditions(float(sigma), int(num_classes), float(order))
    except ValueError:
        return False
    return True


def _checked_or_refused(votes, *, sigma, order, num_teachers):
    """LS(d) as the reference computes it (it checks no condition); where C5–C6 fail, privfed refuses the order."""
    if not _conditions_hold(sigma, votes.shape[1], order):
        with pytest.raises(ValueError, match="fails condition C"):
            gnmax_local_sensitivity_bounds(votes, sigma=sigma, order=order, num_teachers=num_teachers)
    return unchecked_local_sensitivity_bounds(votes, sigma=float(sigma), order=float(order), num_teachers=num_teachers)

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
    bounds = _checked_or_refused(np.array([case["votes"]]), sigma=case["sigma"], order=case["order"],
                                 num_teachers=case["num_teachers"])
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
    bounds = _checked_or_refused(votes, sigma=case["sigma"], order=case["order"], num_teachers=case["num_teachers"])[0]
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
    summed = mechanism.local_sensitivity_bounds(order, num_teachers=250).sum(axis=0)  # Σ over queries, per distance
    sensitivity = (summed * np.exp(-beta * np.arange(250))).max()
    expected = (mechanism.rdp(np.array([order]))[0] + scale * z * sensitivity
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


def test_the_release_takes_the_smooth_sensitivity_of_the_summed_local_sensitivities():
    """PATE 2018's procedure: SS of Σ_q LS_q(d), never above Σ_q SS_q and here clearly below (less noise)."""
    from privfed.accounting.release import summed_smooth_sensitivity

    order, beta = 10.0, 0.02
    for seed in range(3):
        mechanism = privfed.GaussianNoisyMax(_votes(seed), 40.0)
        per_query_sum = mechanism.smooth_sensitivity(order=order, beta=beta).sum()
        bounds = mechanism.local_sensitivity_bounds(order, num_teachers=250)
        by_hand = max(np.exp(-beta * d) * bounds[:, d].sum() for d in range(250))
        summed = summed_smooth_sensitivity([mechanism], order=order, beta=beta)
        assert summed == pytest.approx(by_hand, rel=1e-12)
        assert summed < per_query_sum / 1.1


def test_confident_gnmax_release_sums_both_steps_local_sensitivities():
    from privfed.accounting.release import summed_local_sensitivity

    votes = _votes(2)
    answered = votes.max(axis=1) >= 150
    mechanism = privfed.ConfidentGNMax(votes, threshold=150.0, sigma_threshold=50.0, sigma=40.0, answered=answered)
    order = 10.0
    expected = (mechanism.local_sensitivity_bounds(order, num_teachers=250).sum(axis=0)
                + mechanism.threshold_local_sensitivity_bounds(order, num_teachers=250).sum(axis=0))
    np.testing.assert_allclose(summed_local_sensitivity([mechanism], order=order), expected, rtol=1e-12)


def test_a_negative_noisy_rdp_is_clamped_and_printed_as_an_estimate():
    """The noise can drive the released RDP below 0: it is clamped at 0, and the ε is an estimate, never ε = 0."""
    mechanism = privfed.GaussianNoisyMax(np.array([[150, 100]] * 100), 20.0)
    order = 10.0
    report = privfed.release_epsilon(mechanism, delta=1e-5, order=order, beta=0.04, noise_scale=20.0, random_state=4)
    unclamped = (mechanism.rdp(np.array([order]))[0] + gnss_rdp(beta=0.04, noise_scale=20.0, order=order)
                 + 20.0 * np.random.default_rng(4).standard_normal()
                 * privfed.accounting.release.summed_smooth_sensitivity([mechanism], order=order, beta=0.04))
    assert unclamped < 0  # the draw this test is about
    assert report.rdp == (0.0,)
    # The conversion at λ of RDP 0: ln(1 − 1/λ) − ln(δλ)/(λ − 1) > 0.
    assert report.epsilon == pytest.approx(np.log1p(-1 / order) - np.log(1e-5 * order) / (order - 1), rel=1e-12)
    assert report.epsilon > 0
    for text in (str(report), report.summary(), repr(report)):
        assert "ESTIMATE" in text and "ε = 0" not in text and "ε ≈ 0.9181" in text


@pytest.mark.parametrize("sigma, order", [(2.0, 5.0), (10.0, 10.0)])
def test_local_sensitivity_bounds_refuse_orders_failing_c5_c6(sigma, order):
    """Without the check, LS(d) at an order failing C6 is too small: σ = 2, λ = 5, T = 30, [0, 30] gives
    0.1725 at distance 20 where moving 20 votes from [0, 30] reaches [20, 10], whose LS is 0.2583."""
    votes = np.array([[0, 30]])
    with pytest.raises(ValueError, match="fails condition C"):
        gnmax_local_sensitivity_bounds(votes, sigma=sigma, order=order, num_teachers=30)
    with pytest.raises(ValueError, match="fails condition C"):
        gnmax_local_sensitivity(np.array([-3.0]), sigma=sigma, num_classes=2, order=order)
    with pytest.raises(ValueError, match="fails condition C"):
        privfed.GaussianNoisyMax(votes, sigma).local_sensitivity_bounds(order, num_teachers=30)


def test_the_unchecked_walk_is_too_small_where_c6_fails():
    """Why the check is needed: the walk's LS(20) for [0, 30] is below the true LS at a histogram 20 votes away."""
    sigma, order = 2.0, 5.0
    walked = unchecked_local_sensitivity_bounds(np.array([[0, 30]]), sigma=sigma, order=order, num_teachers=30)[0]
    from privfed.accounting.smooth_sensitivity import _local_sensitivity

    there = float(_local_sensitivity(gaussian_log_failure_bounds(np.array([[20, 10]]), sigma), sigma=sigma,
                                     num_classes=2, order=order)[0])
    assert walked[20] < there
