"""Confident GNMax (PATE 2018 Algorithm 1): both steps' RDP, the threshold step's smooth sensitivity, registry."""

from __future__ import annotations

import numpy as np
import pytest
from privfed.accounting.registry import mechanism_from_record

import privfed
from tests.conftest import oracle_cases, requires_oracles

_THRESHOLD_CASES = [c for c in oracle_cases("pate_smooth_sensitivity.json", "cases")
                    if c["kind"] == "confident_gnmax_threshold"]
_CONFIDENT_CASES = oracle_cases("pate_gaussian.json", "confident_gnmax")


@requires_oracles
@pytest.mark.parametrize("case", _THRESHOLD_CASES, ids=lambda case: case["id"])
def test_threshold_step_matches_the_oracle(case):
    mechanism = privfed.ConfidentGNMax(np.array([case["votes"]]), threshold=case["threshold"],
                                       sigma_threshold=case["sigma1"], sigma=40.0)
    orders, expected = np.array(case["orders"]), case["expected"]
    assert mechanism.threshold_log_failure_bounds()[0] == pytest.approx(expected["log_pr_answered"], rel=1e-12)
    np.testing.assert_allclose(mechanism.threshold_rdp(orders), expected["rdp_threshold"], rtol=1e-9)
    np.testing.assert_allclose(mechanism.threshold_rdp(orders, data_dependent=False),
                               expected["rdp_threshold_data_independent"], rtol=1e-12)


@requires_oracles
@pytest.mark.parametrize("case", _CONFIDENT_CASES, ids=lambda case: case["id"])
def test_selection_cost_over_many_queries_matches_the_oracle(case):
    mechanism = privfed.ConfidentGNMax(np.array(case["counts"]), threshold=case["threshold"],
                                       sigma_threshold=case["sigma1"], sigma=case["sigma2"])
    np.testing.assert_allclose(mechanism.threshold_rdp(np.array(case["orders"])),
                               case["expected"]["rdp_select_by_order"], rtol=1e-9)


def _votes() -> np.ndarray:
    rng = np.random.default_rng(5)
    return np.array([rng.multinomial(100, p) for p in rng.dirichlet(np.full(5, 0.2), size=60)])


def test_both_steps_compose_and_only_answered_queries_pay_for_gnmax():
    votes = _votes()
    answered = votes.max(axis=1) >= 70
    orders = np.array([2.0, 10.0])
    every = privfed.ConfidentGNMax(votes, threshold=70.0, sigma_threshold=30.0, sigma=10.0)
    some = privfed.ConfidentGNMax(votes, threshold=70.0, sigma_threshold=30.0, sigma=10.0, answered=answered)
    gnmax = privfed.GaussianNoisyMax(votes[answered], 10.0)
    np.testing.assert_allclose(some.rdp(orders), some.threshold_rdp(orders) + gnmax.rdp(orders))
    np.testing.assert_allclose(some.rdp_data_independent(orders),
                               60 * orders / (2 * 30.0**2) + answered.sum() * orders / 10.0**2)
    assert np.all(some.rdp(orders) < every.rdp(orders))
    assert np.all(every.rdp(orders) <= every.rdp_data_independent(orders) + 1e-15)


def test_threshold_local_sensitivity_is_the_largest_step_of_the_top_count():
    """Brute force: LS(d) is the largest |β(v') − β(v'±1)| over top counts v' within d of the actual one."""
    votes = np.array([[40, 30, 30], [90, 5, 5]])
    mechanism = privfed.ConfidentGNMax(votes, threshold=60.0, sigma_threshold=8.0, sigma=10.0)
    bounds = mechanism.threshold_local_sensitivity_bounds(5.0)

    def beta(top):
        return privfed.ConfidentGNMax(np.array([[top, 0]]), threshold=60.0, sigma_threshold=8.0,
                                      sigma=10.0).threshold_rdp(np.array([5.0]))[0] if 0 <= top <= 100 else None

    for row, top in enumerate(votes.max(axis=1)):
        for distance in (0, 3):
            steps = [abs(beta(v) - beta(w)) for v in range(top - distance, top + distance + 1)
                     for w in (v - 1, v + 1) if beta(v) is not None and beta(w) is not None]
            assert bounds[row, distance] >= max(steps) * (1 - 1e-9)
    assert np.all(mechanism.threshold_smooth_sensitivity(order=5.0, beta=0.05) <= bounds.max(axis=1))


def test_registered_and_rebuilt_from_its_record_and_evidence():
    votes = _votes()
    mechanism = privfed.ConfidentGNMax(votes, threshold=70.0, sigma_threshold=30.0, sigma=10.0,
                                       answered=votes.max(axis=1) >= 70, unit="party")
    record = {"kind": "confident_gnmax", "unit": "party", "parameters": mechanism.parameters()}
    rebuilt = mechanism_from_record(record, evidence=mechanism.evidence())
    orders = np.array([3.0])
    assert rebuilt.rdp(orders) == pytest.approx(mechanism.rdp(orders)) and rebuilt.unit == "party"
    ledger = privfed.Ledger(delta=1e-5)
    ledger.record(mechanism)
    assert ledger.account().epsilon == pytest.approx(privfed.account(mechanism, delta=1e-5).epsilon, rel=1e-9)
    report = privfed.release_epsilon(mechanism, delta=1e-5, order=8.0, beta=0.05, noise_scale=10.0, random_state=1)
    assert report.epsilon_data_independent >= privfed.account(mechanism, delta=1e-5).epsilon_data_independent


def test_bad_answered_mask_is_refused():
    with pytest.raises(ValueError, match=r"answered must be a boolean array of shape \(60,\)"):
        privfed.ConfidentGNMax(_votes(), threshold=70.0, sigma_threshold=30.0, sigma=10.0, answered=np.ones(3, bool))
    with pytest.raises(ValueError, match="sigma_threshold must be finite and > 0"):
        privfed.ConfidentGNMax(_votes(), threshold=70.0, sigma_threshold=0.0, sigma=10.0)


def test_a_public_record_states_how_many_queries_were_answered():
    """Claims files and bundles without votes: with num_answered, only the answered queries pay for GNMax."""
    from privfed.accounting import account
    from privfed.accounting.registry import checked_public_mechanism_from_record

    def rebuilt(**extra):
        record = {"kind": "confident_gnmax", "unit": "party",
                  "parameters": {"threshold": 30.0, "sigma_threshold": 15.0, "sigma": 10.0, "votes_per_unit": 1,
                                 "num_queries": 200, "num_classes": 10, **extra}}
        mechanism, public_view = checked_public_mechanism_from_record(record)  # the claims files' key check too
        assert public_view and mechanism.kind == "confident_gnmax"
        return account(mechanism, delta=1e-5).epsilon_data_independent

    expected = privfed.ConfidentGNMax(np.zeros((200, 10), dtype=np.int64), threshold=30.0, sigma_threshold=15.0,
                                      sigma=10.0, answered=np.arange(200) < 83, unit="party")
    assert rebuilt(num_answered=83) == pytest.approx(privfed.account(expected, delta=1e-5).epsilon_data_independent,
                                                    rel=1e-6)
    assert rebuilt(num_answered=83) < rebuilt()
