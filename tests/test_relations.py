"""The relation printed is the relation analysed (issue 40, item 4), and the assumptions stated (item 6).

The DP-SGD numbers are checked against dp-accounting's own ``PLDAccountant`` under each neighbouring relation:
privfed's add-or-remove-one ε is labelled add-or-remove-one, its replace-one ε (larger) replace-one.
"""

from __future__ import annotations

import json

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld.pld_privacy_accountant import PLDAccountant
from privfed.accounting import (
    DPSGD,
    DpEventRelease,
    LaplaceNoisyMax,
    RandomizedResponse,
    ShuffledRandomizedResponse,
    SkellamMechanism,
    WithheldVotesNoisyMax,
    account,
    compose_dpsgd,
    compose_parallel,
    compose_sequential,
    data_independent_event,
    dpsgd_noise_multiplier,
    load_mechanisms,
)
from privfed.accounting.ledger_entry import LedgerEntry
from privfed.accounting.mechanism import ALL_RELATIONS, relation_for_unit
from privfed.accounting.observers import DEFAULT_ASSUMPTIONS, OBSERVERS
from privfed.accounting.registry import mechanism_from_record

from privfed import Ledger

DELTA = 1e-5
ADD_REMOVE, REPLACE = ("add_or_remove_one",), ("replace_one",)
BOTH = ("add_or_remove_one", "replace_one")


def _dp_accounting_epsilon(relation: dp_accounting.NeighboringRelation) -> float:
    accountant = PLDAccountant(neighboring_relation=relation)
    accountant.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.1)), 2000))
    return accountant.get_epsilon(DELTA)


# --- DP-SGD: each relation's ε against dp-accounting's PLD, and its label ------------------------
@pytest.mark.parametrize("relation, theirs, printed", [
    ("add_or_remove_one", dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE, "one example added or removed"),
    ("replace_one", dp_accounting.NeighboringRelation.REPLACE_ONE, "one example replaced"),
])
def test_dpsgd_epsilon_and_label_match_dp_accounting_pld_under_each_relation(relation, theirs, printed):
    mechanism = DPSGD(1.1, 0.01, 2000) if relation == "add_or_remove_one" else \
        DPSGD(1.1, 0.01, 2000, neighboring_relation=relation)
    report = account(mechanism, delta=DELTA)
    reference = _dp_accounting_epsilon(theirs)
    assert report.method == "pld"
    assert reference <= report.epsilon <= reference * 1.002, (report.epsilon, reference)
    assert report.relations == (relation,) and report.mechanisms[0].relations == (relation,)
    assert mechanism.relations == frozenset({relation})
    assert printed in str(report) and printed.split("one example ")[1] in report.relation
    assert "replaced" not in str(report) if relation == "add_or_remove_one" else "added" not in str(report)
    assert report.to_dict()["relations"] == [relation]


def test_the_measured_numbers_of_the_issue():
    add_remove = account(DPSGD(1.1, 0.01, 2000), delta=DELTA).epsilon
    replace = account(DPSGD(1.1, 0.01, 2000, neighboring_relation="replace_one"), delta=DELTA).epsilon
    assert 2.159 < add_remove < 2.161 and 3.655 < replace < 3.657


def test_replace_one_rdp_curve_is_a_valid_looser_bound_under_both_analyses():
    mechanism = DPSGD(1.1, 0.01, 2000, neighboring_relation="replace_one")
    pld = account(mechanism, delta=DELTA).epsilon
    for analysis in ("tight", "classic"):
        report = account(mechanism, delta=DELTA, analysis=analysis)
        assert report.relations == REPLACE
        rdp_epsilon = mechanism.epsilon(np.asarray(report.orders), DELTA, analysis=analysis)[0]
        assert rdp_epsilon >= pld  # the weak-triangle RDP bound never undercuts the exact replace-one PLD
    # and it is never below the add-or-remove-one curve it is built from
    orders = np.asarray(account(mechanism, delta=DELTA).orders)
    assert np.all(mechanism.rdp(orders) >= DPSGD(1.1, 0.01, 2000).rdp(orders))


def test_default_dpsgd_is_unchanged_and_replace_one_is_recorded_and_rebuilt():
    assert "neighboring_relation" not in DPSGD(1.1, 0.01, 10).parameters()  # old records and hashes unchanged
    replace = DPSGD(1.1, 0.01, 10, neighboring_relation="replace_one")
    assert replace.parameters()["neighboring_relation"] == "replace_one"
    rebuilt = mechanism_from_record({"kind": "dpsgd", "unit": "example", "parameters": replace.parameters()})
    assert rebuilt.relations == frozenset(REPLACE) and np.array_equal(rebuilt.rdp(np.array([2.0, 8.0])),
                                                                     replace.rdp(np.array([2.0, 8.0])))
    assert compose_dpsgd([replace, replace]).relations == frozenset(REPLACE)
    with pytest.raises(ValueError, match="neighboring_relation must be one of"):
        DPSGD(1.1, 0.01, 10, neighboring_relation="replaced")


def test_a_replace_one_dpsgd_exports_a_dp_accounting_event_valid_under_either_relation():
    event = data_independent_event(DPSGD(1.1, 0.01, 50, neighboring_relation="replace_one"))
    assert event == dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(0.55), 50)


# --- what each mechanism declares ----------------------------------------------------------------
def test_each_mechanism_declares_what_its_analysis_covers():
    votes = np.array([[5, 1], [3, 3]])
    rr = RandomizedResponse(10, epsilon=1.0)
    assert rr.relations == frozenset(REPLACE) and "party's whole data set (replaced)" in rr.relation
    assert RandomizedResponse(10, epsilon=1.0, unit="example").relations == ALL_RELATIONS
    assert ShuffledRandomizedResponse(1.0, num_users=100, num_classes=10).relations == frozenset(REPLACE)
    assert LaplaceNoisyMax(votes, 0.1).relations == ALL_RELATIONS
    keyed = WithheldVotesNoisyMax("laplace", 0.1, 10, 2, relations={"add_or_remove_one"})
    assert keyed.relations == frozenset(ADD_REMOVE) and keyed.parameters()["relations"] == list(ADD_REMOVE)
    assert "relations" not in WithheldVotesNoisyMax("laplace", 0.1, 10, 2).parameters()
    assert SkellamMechanism(100.0, l1_sensitivity=2.0, l2_sensitivity=1.5).relations == ALL_RELATIONS
    flower = DpEventRelease(dp_accounting.GaussianDpEvent(1.0), relation="add_or_remove_one", unit="party")
    assert flower.relations == frozenset(ADD_REMOVE)  # its ``relation`` field keeps dp-accounting's name
    assert "party's whole data set (added or removed)" in relation_for_unit(flower.unit, flower.relations)
    with pytest.raises(ValueError, match="relations must hold relations from"):
        LaplaceNoisyMax(votes, 0.1, relations={"replace"})
    with pytest.raises(TypeError, match="relations must be a collection"):
        LaplaceNoisyMax(votes, 0.1, relations="replace_one")


def test_the_relations_survive_a_ledger_round_trip_through_the_public_record():
    ledger = Ledger(delta=DELTA, primary_unit="example")
    ledger.record(WithheldVotesNoisyMax("laplace", 0.1, 10, 2, relations={"add_or_remove_one"}))
    rebuilt = Ledger.from_json(ledger.to_json())
    report = rebuilt.account()
    assert report.relations == ADD_REMOVE and report.mechanisms[0].relations == ADD_REMOVE
    assert rebuilt.entries[0].analyses["example"].relation == relation_for_unit("example", ADD_REMOVE)


# --- compositions: what every part covers --------------------------------------------------------
def test_compositions_print_the_intersection_and_say_plainly_when_it_is_empty():
    add_remove, replace = DPSGD(1.1, 0.01, 10), DPSGD(1.1, 0.01, 10, neighboring_relation="replace_one")
    both = LaplaceNoisyMax(np.array([[5, 1]]), 0.1)
    assert account([add_remove, both], delta=DELTA).relations == ADD_REMOVE
    assert compose_sequential([replace, both]).relations == frozenset(REPLACE)
    assert account(both, delta=DELTA).relations == BOTH
    assert "one example added, removed or replaced" in str(account(both, delta=DELTA))
    party = [RandomizedResponse(10, epsilon=1.0), WithheldVotesNoisyMax("laplace", 0.1, 10, 2, unit="party")]
    assert compose_parallel(party).relations == frozenset(REPLACE)
    empty = account([add_remove, replace], delta=DELTA)
    assert empty.relations == () and compose_dpsgd([add_remove, replace]).relations == frozenset()
    assert "NO NEIGHBOURING RELATION COVERED" in str(empty)
    assert "no relation is covered" in empty.relation


def test_ledger_totals_print_what_all_entries_cover():
    ledger = Ledger(delta=DELTA, primary_unit="example")
    ledger.record(LaplaceNoisyMax(np.array([[5, 1], [4, 2]]), 0.1))
    assert ledger.account().relations == BOTH
    ledger.record(DPSGD(1.1, 0.01, 10))
    assert ledger.account().relations == ADD_REMOVE
    ledger.record(DPSGD(1.1, 0.01, 10, neighboring_relation="replace_one"))
    report = ledger.account()
    assert report.relations == () and "NO NEIGHBOURING RELATION COVERED" in str(report)
    assert ledger.relations() == report.relations and ledger.relations(observer="coordinator") == ()


# --- assumptions ---------------------------------------------------------------------------------
def test_assumptions_round_trip_through_json_and_are_printed_with_each_observer_they_concern():
    ledger = Ledger(delta=DELTA, primary_unit="party")
    ledger.record(RandomizedResponse(10, epsilon=1.0), assumptions=("a trusted shuffler",))
    ledger.record_unaccounted("the class counts, in clear", observers=("coordinator",),
                              assumptions=("the coordinator colludes with at most 2 parties",))
    document = json.loads(ledger.to_json())
    assert document["entries"][0]["assumptions"] == ["a trusted shuffler"]
    rebuilt = Ledger.from_json(ledger.to_json())
    assert rebuilt.verify() == 1 and [e.assumptions for e in rebuilt.entries] == [e.assumptions for e in
                                                                                     ledger.entries]
    public = rebuilt.account()
    coordinator = rebuilt.account(observer="coordinator")
    assert public.assumptions == ("a trusted shuffler",) and "assumes: a trusted shuffler" in str(public)
    assert coordinator.assumptions == ("a trusted shuffler", "the coordinator colludes with at most 2 parties")
    assert coordinator.to_dict()["assumptions"] == list(coordinator.assumptions)


def test_the_dpsgd_bound_prints_the_assumptions_of_the_training_it_composes():
    ledger = Ledger(delta=DELTA, primary_unit="example")
    ledger.record_training(DPSGD(1.1, 0.01, 10), assumptions=("the sample rate is public",))
    ledger.record(LaplaceNoisyMax(np.tile([[5, 1]], (50, 1)), 1.0), derived_from_training=True)
    report = ledger.account()
    assert report.source == "dpsgd" and report.assumptions == ("the sample rate is public",)
    assert report.relations == ADD_REMOVE and ledger.relations() == ADD_REMOVE
    assert report.alternatives["aggregation"].relations == BOTH


def test_bad_assumptions_are_refused_in_one_line():
    ledger = Ledger(delta=DELTA)
    for bad, error in (("a trusted shuffler", TypeError), (("",), ValueError), (("a", "a"), ValueError),
                       (("two\nlines",), ValueError), ((3,), ValueError)):
        with pytest.raises(error, match="assumptions must"):
            ledger.record(DPSGD(1.1, 0.01, 10), assumptions=bad)
    assert len(ledger) == 0


def test_a_ledger_written_without_assumptions_or_relations_still_loads_and_verifies():
    ledger = Ledger(delta=DELTA, primary_unit="example")
    ledger.record(DPSGD(1.1, 0.01, 10))
    ledger.record_unaccounted("selector decisions")
    document = json.loads(ledger.to_json())
    assert all("assumptions" not in entry for entry in document["entries"])
    # As the code before relations were declared wrote it: the old relation sentence, resealed into the chain.
    previous = "0" * 64
    for position, entry_document in enumerate(document["entries"]):
        for analysis in entry_document["analyses"].values():
            analysis["relation"] = ("example-level: neighbouring data sets differ in one training example "
                                    "(added, removed or replaced)")
        entry = LedgerEntry.from_dict({**entry_document, "previous_sha256": previous}, f"entries[{position}]")
        sealed = LedgerEntry.create(index=entry.index, kind=entry.kind, analyses=entry.analyses,
                                    description=entry.description, note=entry.note, recorded=entry.recorded,
                                    previous_sha256=previous)
        document["entries"][position] = sealed.to_dict()
        previous = sealed.sha256
    document["head_sha256"] = previous
    old = Ledger.from_dict(document)
    assert old.verify() == 1 and all(entry.assumptions == () for entry in old.entries)
    report = old.account()
    assert report.relations == ADD_REMOVE  # what the rebuilt DP-SGD is analysed for, not the old sentence
    # An empty list written out explicitly is not what the format writes.
    document["entries"][0]["assumptions"] = []
    with pytest.raises(ValueError, match="assumptions must be absent"):
        LedgerEntry.from_dict(document["entries"][0], "entries[0]")


def test_every_observer_states_its_default_assumptions():
    assert set(DEFAULT_ASSUMPTIONS) == set(OBSERVERS)
    assert all(any("honest execution" in text for text in DEFAULT_ASSUMPTIONS[o]) for o in OBSERVERS)
    assert any("colludes with no party" in text for text in DEFAULT_ASSUMPTIONS["coordinator"])


def test_the_noise_multiplier_is_calibrated_on_the_relation_asked_for():
    # Without sampling (q = 1, one step) a replaced example moves the sum by 2C, an added one by C: σ doubles.
    add_remove = dpsgd_noise_multiplier(target_epsilon=1.0, delta=DELTA, sample_rate=1.0, steps=1)
    replace = dpsgd_noise_multiplier(target_epsilon=1.0, delta=DELTA, sample_rate=1.0, steps=1,
                                     neighboring_relation="replace_one")
    assert replace / add_remove == pytest.approx(2.0, rel=0.015)
    report = account(DPSGD(replace, 1.0, 1, neighboring_relation="replace_one"), delta=DELTA)
    assert 0.97 <= report.epsilon <= 1.0 and report.relations == REPLACE


def test_a_mechanism_file_states_a_replace_one_dpsgd_run(tmp_path):
    path = tmp_path / "mechanisms.json"
    path.write_text(json.dumps({"mechanisms": [{"kind": "dpsgd", "noise_multiplier": 1.1, "sample_rate": 0.01,
                                                "steps": 10, "neighboring_relation": "replace_one"}]}))
    (mechanism,) = load_mechanisms(path)
    assert mechanism.relations == frozenset(REPLACE)
