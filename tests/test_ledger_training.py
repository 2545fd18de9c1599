"""Training entries in the ledger: composition, the two bounds, coverage rules, JSON; and their mechanisms."""

import json
import math

import numpy as np
import pytest
from privfed.accounting import TIGHT_ORDERS, compose_dpsgd
from privfed.accounting.ledger_entry import LedgerEntry
from privfed.accounting.registry import mechanism_from_record
from privfed.accounting.report import round_up

import privfed
from privfed import (
    DPSGD,
    LaplaceNoisyMax,
    Ledger,
    LedgerFormatError,
    RandomizedResponse,
    SequentialComposition,
    account,
    compose_parallel,
    compose_sequential,
    dpsgd_noise_multiplier,
)

DELTA = 1e-5
TRAINING = compose_parallel([DPSGD(1.0, 0.02, 500), DPSGD(1.5, 0.05, 300)])


def rr(reports=20, unit="example"):
    return RandomizedResponse(10, epsilon=5.0, labels_per_report=2, reports=reports, unit=unit)


def test_sequential_composition_sums_curves_and_rebuilds():
    members = (DPSGD(1.0, 0.02, 100), rr(3))
    composed = compose_sequential(members)
    np.testing.assert_allclose(composed.rdp(TIGHT_ORDERS), sum(m.rdp(TIGHT_ORDERS) for m in members))
    assert account(composed, delta=DELTA).epsilon == pytest.approx(account(list(members), delta=DELTA).epsilon)
    rebuilt = mechanism_from_record({"kind": composed.kind, "unit": composed.unit, "parameters": composed.parameters()})
    assert isinstance(rebuilt, SequentialComposition) and rebuilt.describe() == composed.describe()
    with pytest.raises(ValueError, match="same unit"):
        compose_sequential([DPSGD(1.0, 0.1, 1), rr(unit="party")])
    with pytest.raises(ValueError, match="at least one"):
        compose_sequential([])


def test_compose_dpsgd_adds_steps_only_for_the_same_step():
    merged = compose_dpsgd([DPSGD(1.0, 0.1, 3), DPSGD(1.0, 0.1, 4)])
    assert isinstance(merged, DPSGD) and merged.steps == 7
    assert compose_dpsgd([DPSGD(1.0, 0.1, 3), DPSGD(1.0, 0.2, 4)]).kind == "sequential_composition"
    with pytest.raises(TypeError):
        compose_dpsgd([rr()])


def test_noise_multiplier_meets_the_target_and_refuses_the_unreachable():
    sigma = dpsgd_noise_multiplier(target_epsilon=3.0, delta=DELTA, sample_rate=0.05, steps=400)
    epsilon = account(DPSGD(sigma, 0.05, 400), delta=DELTA).epsilon
    assert epsilon <= 3.0 and DPSGD(sigma * 0.99, 0.05, 400).epsilon(TIGHT_ORDERS, DELTA, analysis="tight")[0] > 3.0
    with pytest.raises(ValueError, match=r"target_epsilon=1e-09 cannot be reached .* 10 steps"):
        dpsgd_noise_multiplier(target_epsilon=1e-9, delta=DELTA, sample_rate=1.0, steps=10)


def test_without_training_the_report_is_unchanged():
    ledger = Ledger(delta=DELTA, primary_unit="example")
    ledger.record(rr(), derived_from_training=True)
    report = ledger.account()
    assert report.source == "aggregation" and not report.alternatives
    assert report.epsilon == account(rr(), delta=DELTA).epsilon


def test_training_bound_wins_when_it_covers_everything_and_is_smaller():
    ledger = Ledger(delta=DELTA, primary_unit="example")
    ledger.record_training(TRAINING)
    ledger.record(rr(), derived_from_training=True)
    ledger.record_unaccounted("predictions sent in clear", derived_from_training=True)
    report = ledger.account()
    assert report.source == "dpsgd"
    assert report.epsilon == pytest.approx(account(TRAINING, delta=DELTA).epsilon, rel=1e-9)
    assert report.alternatives["aggregation"].epsilon == pytest.approx(account(rr(), delta=DELTA).epsilon)
    assert not any(note.startswith("NOT COVERED") for note in report.notes)


def test_aggregation_wins_when_smaller():
    ledger = Ledger(delta=DELTA, primary_unit="example")
    ledger.record_training(DPSGD(0.5, 0.5, 1000))
    ledger.record(rr(1), derived_from_training=True)
    report = ledger.account()
    assert report.source == "aggregation" and report.epsilon < report.alternatives["dpsgd"].epsilon


def test_an_uncovered_release_is_listed_and_blocks_the_training_bound():
    ledger = Ledger(delta=DELTA, primary_unit="example")
    ledger.record_training(TRAINING)
    ledger.record(rr(), derived_from_training=True)
    ledger.record_unaccounted("class counts in clear")
    report = ledger.account()
    assert report.source == "aggregation"
    assert "NOT COVERED by the DP-SGD bound (touches private data outside the DP-trained models, no example-level " \
           "mechanism): class counts in clear" in report.notes
    assert report.uncovered == ("class counts in clear",)
    assert report.epsilon == math.inf
    assert "ε = inf: 1 release(s) seen without any mechanism covering them" in report.summary()


def test_a_release_analysed_under_another_unit_only_is_not_covered_by_this_units_epsilon():
    ledger = Ledger(delta=DELTA, primary_unit="party")
    ledger.record(rr(unit="party"), note="labels, party level")
    ledger.record(rr(), note="public labels, example level only")
    party = ledger.account()
    assert party.epsilon == math.inf
    accounted = round_up(account(rr(unit="party"), delta=DELTA).epsilon, 6)
    assert any(f"the accounted releases alone give ε = {accounted}," in note for note in party.notes)
    assert party.uncovered == ("entry 1 is analysed at example level only, not at party level "
                               "(public labels, example level only)",)
    assert "ε = inf: 1 release(s) seen without any mechanism" in party.summary()
    assert any(note.startswith("NOT COVERED by this party-level ε: entry 1") for note in party.notes)
    example = party.other_units["example"]
    assert example.uncovered and "entry 0 is analysed at party level only" in example.uncovered[0]
    assert party.to_dict()["uncovered"] == list(party.uncovered)


def test_releases_analysed_under_every_unit_leave_nothing_uncovered():
    ledger = Ledger(delta=DELTA, primary_unit="party")
    ledger.record({"party": rr(unit="party"), "example": rr()})
    for report in (ledger.account(), ledger.account(unit="example")):
        assert report.uncovered == ()
        assert "ε = inf" not in report.summary() and math.isfinite(report.epsilon)


def test_a_release_outside_the_training_and_under_another_unit_only_blocks_the_training_bound():
    ledger = Ledger(delta=DELTA, primary_unit="example")
    ledger.record_training(TRAINING)
    ledger.record(rr(unit="party"), note="a party-level release, not derived")
    report = ledger.account()
    assert report.source == "aggregation"
    assert report.alternatives["dpsgd"].uncovered == report.uncovered
    assert "entry 1 is analysed at party level only" in report.uncovered[0]


def test_an_accounted_release_outside_the_training_is_composed_into_it():
    ledger = Ledger(delta=DELTA, primary_unit="example")
    ledger.record_training(TRAINING)
    ledger.record(rr(1), note="a non-DP party's labels")  # not derived
    report = ledger.account()
    dpsgd = report.alternatives.get("dpsgd", report)
    assert dpsgd.epsilon == pytest.approx(account(compose_sequential([TRAINING, rr(1)]), delta=DELTA).epsilon, rel=1e-6)
    assert any("composed into the DP-SGD bound" in note and "a non-DP party's labels" in note for note in report.notes)


def test_party_level_never_takes_the_training_bound():
    ledger = Ledger(delta=DELTA, primary_unit="party")
    ledger.record_training(TRAINING)
    ledger.record({"party": rr(unit="party"), "example": rr()}, derived_from_training=True)
    assert ledger.account().source == "aggregation" and not ledger.account().alternatives
    assert ledger.account(unit="example").source == "dpsgd"


def test_json_round_trip_and_tampering():
    ledger = Ledger(delta=DELTA, primary_unit="example")
    ledger.record_training(TRAINING, note="teachers")
    ledger.record(rr(), derived_from_training=True)
    document = json.loads(ledger.to_json())
    assert document["entries"][0]["kind"] == "training" and document["entries"][1]["derived_from_training"] is True
    assert "derived_from_training" not in document["entries"][0]
    again = Ledger.from_json(ledger.to_json())
    assert again.account().epsilon == ledger.account().epsilon and again.verify() == 2
    del document["entries"][1]["derived_from_training"]
    with pytest.raises(ValueError, match="edited"):
        Ledger.from_dict(document)
    document["entries"][1]["derived_from_training"] = "yes"
    with pytest.raises(LedgerFormatError, match="derived_from_training"):
        Ledger.from_dict(document)
    with pytest.raises(TypeError, match="derived_from_training must be True or False"):
        ledger.record(rr(), derived_from_training=1)


# --- issue 33 item 7: no noise, no finite ε ----------------------------------------------------------------
def test_only_dp_training_can_be_recorded_as_training():
    ledger = Ledger(delta=DELTA, primary_unit="example")
    with pytest.raises(ValueError, match="must be DP training .* got a 'laplace_noisy_max' mechanism"):
        ledger.record_training(LaplaceNoisyMax(np.array([[9, 1]] * 5), 0.1))
    with pytest.raises(ValueError, match="got a 'randomized_response' mechanism"):
        ledger.record_training(rr())
    ledger.record_training(TRAINING)  # DP-SGD and its compositions are training
    assert len(ledger) == 1


def test_a_release_relabelled_as_training_is_refused_when_read():
    ledger = Ledger(delta=DELTA, primary_unit="example")
    ledger.record(LaplaceNoisyMax(np.array([[9, 1]] * 5), 0.1), note="noisy labels")
    document = json.loads(ledger.to_json())
    entry = document["entries"][0]
    entry["kind"] = "training"  # a forger would hide the release from every bound (and reseal the chain and totals)
    with pytest.raises(LedgerFormatError,
                       match="a 'training' entry must hold DP training .* got kind 'laplace_noisy_max'"):
        LedgerEntry.from_dict(entry, "ledger.entries[0]")


def test_the_audit_fails_a_zero_epsilon_it_cannot_prove(tmp_path):
    from sklearn.tree import DecisionTreeClassifier

    ledger = Ledger(delta=DELTA, primary_unit="example")
    ledger.record_training(TRAINING)  # training only: no release of the model is recorded, so ε would read 0
    assert ledger.account().epsilon == 0.0
    X = np.random.default_rng(0).random((40, 3))
    bundle = privfed.save_bundle(DecisionTreeClassifier().fit(X, X[:, 0] > 0.5), tmp_path / "b", ledger)
    report = privfed.audit(bundle)
    assert report.exit_code == 1 and report.check("size of ε").status == "fail"
    assert "ε = 0 (example level) is not a guarantee" in report.check("size of ε").detail
