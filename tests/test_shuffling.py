"""Shuffle-model amplification (Feldman–McMillan–Talwar): closed forms, limits, composition, the PrivateKT audit."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from privfed.accounting.shuffling import shuffle_dominating_pair

import privfed


def test_one_user_is_not_amplified():
    """n = 1: no clones, the pair is Bernoulli(p) vs Bernoulli(1 − p), so ε(δ) = ln((p − δ)/(1 − p)) exactly."""
    mechanism = privfed.ShuffledRandomizedResponse(1.0, num_users=1, num_classes=10)
    p = math.e / (math.e + 1)
    assert mechanism.central_epsilon(1e-6) == pytest.approx(math.log((p - 1e-6) / (1 - p)), abs=2e-4)
    assert mechanism.central_epsilon(1e-6) >= math.log((p - 1e-6) / (1 - p)) - 1e-12


def test_pair_is_a_pair_of_distributions_with_bounded_ratio():
    log_p0, log_p1, left_out = shuffle_dominating_pair(2.0, 500)
    assert np.exp(log_p0).sum() + left_out == pytest.approx(1.0, abs=1e-12)
    assert np.exp(log_p1).sum() == pytest.approx(np.exp(log_p0).sum(), abs=1e-12)
    assert np.all(np.abs(log_p0 - log_p1) <= 2.0 + 1e-9)  # every outcome's loss is within ±ε₀


@pytest.mark.parametrize("epsilon_local, users", [(1.0, 1000), (0.5, 2000), (2.0, 5000)])
def test_below_fmt_closed_form_where_it_applies(epsilon_local, users):
    """FMT Thm 3.1's closed form holds for ε₀ ≤ ln(n/(16 ln(2/δ))); the numerical bound is never above it."""
    delta = 1e-6
    assert epsilon_local <= math.log(users / (16 * math.log(2 / delta)))
    e = math.exp(epsilon_local)
    closed = math.log1p((e - 1) / (e + 1) * (8 * math.sqrt(e * math.log(4 / delta)) / math.sqrt(users) + 8 * e / users))
    numerical = privfed.ShuffledRandomizedResponse(
        epsilon_local, num_users=users, num_classes=10
    ).central_epsilon(delta)
    assert numerical < closed and numerical < epsilon_local


def test_more_users_amplify_more_and_rounds_compose():
    small = privfed.ShuffledRandomizedResponse(1.0, num_users=100, num_classes=10).central_epsilon(1e-6)
    large = privfed.ShuffledRandomizedResponse(1.0, num_users=1000, num_classes=10).central_epsilon(1e-6)
    assert large < small < 1.0
    rounds = privfed.ShuffledRandomizedResponse(1.0, num_users=1000, num_classes=10, reports=20)
    assert large < rounds.central_epsilon(1e-6) < 20 * large
    report = privfed.account(rounds, delta=1e-6)
    assert rounds.central_epsilon(1e-6) <= report.epsilon <= rounds.pure_epsilon()


def test_ledger_and_registry():
    mechanism = privfed.ShuffledRandomizedResponse(1.5, num_users=200, num_classes=4, reports=3)
    ledger = privfed.Ledger(delta=1e-6)
    ledger.record(mechanism)
    assert ledger.account().epsilon == pytest.approx(privfed.account(mechanism, delta=1e-6).epsilon, rel=1e-9)
    assert privfed.Ledger.from_json(ledger.to_json()).account() == ledger.account()
    with pytest.raises(ValueError, match="num_users must be an integer >= 1"):
        privfed.ShuffledRandomizedResponse(1.0, num_users=0, num_classes=4)


def test_privatekt_audit_shows_the_three_figures(tmp_path):
    document = {
        "type": "privfed.claims", "schema_version": 1, "description": "shuffling", "setting": "federated",
        "claim": {"epsilon": 1.0, "delta": 1e-6, "unit": "party", "scope": "per_round", "rounds": 10,
                  "clients_per_round": 1000},
        "mechanisms": [{"kind": "randomized_response", "unit": "party",
                        "parameters": {"num_classes": 10, "epsilon": 1.0, "labels_per_report": 1, "reports": 1}}],
    }
    path = tmp_path / "claims.json"
    path.write_text(json.dumps(document))
    report = privfed.audit(None, claims=path)
    (check,) = [c for c in report.checks if c.name == "shuffling"]
    shuffled = privfed.ShuffledRandomizedResponse(1.0, num_users=1000, num_classes=10, reports=10).central_epsilon(1e-6)
    assert "(1) claim: ε₀ = 1.000" in check.detail and "(3) without one" in check.detail
    assert privfed.accounting.report.round_up(shuffled) in check.detail


def test_account_composes_the_shuffled_reports_through_their_pld():
    """account() of shuffled reports is their PLD (FMT's numerical bound), not min(RDP, pure): 7× tighter here."""
    mechanism = privfed.ShuffledRandomizedResponse(1.0, num_users=10_000, num_classes=10)
    report = privfed.account(mechanism, delta=1e-5)
    central = mechanism.central_epsilon(1e-5)
    assert report.method == "pld"
    assert central <= report.epsilon <= 1.02 * central
    rdp_only = privfed.accounting.conversion.rdp_to_epsilon(np.array(report.orders), np.array(report.rdp), 1e-5,
                                                            "tight")[0]
    assert report.epsilon < rdp_only / 5


def test_a_ledger_composes_a_shuffled_release_with_the_rest_through_one_pld():
    """With randomized response beside it, the ledger's ε is the PLD of both: below min(RDP, pure) of the pair,
    above each alone (the composition is not a maximum), and equal to the PLD composed by hand."""
    from privfed.accounting._dp_accounting import event_pld

    shuffled = privfed.ShuffledRandomizedResponse(1.0, num_users=10_000, num_classes=10, reports=5)
    local = privfed.RandomizedResponse(10, epsilon=0.05, reports=4)
    ledger = privfed.Ledger(delta=1e-5)
    ledger.record(shuffled)
    ledger.record(local)
    report = ledger.account(unit="party")
    assert report.method == "pld"
    both = privfed.account([shuffled, local], delta=1e-5)
    assert report.epsilon == pytest.approx(both.epsilon, rel=1e-9)
    rdp = privfed.accounting.conversion.rdp_to_epsilon(np.array(both.orders), np.array(both.rdp), 1e-5, "tight")[0]
    assert report.epsilon < min(rdp, shuffled.pure_epsilon() + local.pure_epsilon())
    assert report.epsilon > max(shuffled.central_epsilon(1e-5), privfed.account(local, delta=1e-5).epsilon)
    by_hand = event_pld(shuffled.dp_event(), value_discretization_interval=1e-4).compose(
        event_pld(local.dp_event(), value_discretization_interval=1e-4)).get_epsilon_for_delta(1e-5)
    assert report.epsilon == pytest.approx(by_hand, rel=1e-6)
