"""The model card's standard privacy statement (privfed/bundle/privacy_statement.py) and its audit check."""

from __future__ import annotations

import numpy as np
import pytest
from privfed.accounting import DPSGD, GaussianNoisyMax, LaplaceNoisyMax, Ledger
from privfed.accounting.report import round_up

from privfed import audit, save_bundle
from privfed.bundle.manifest import MANIFEST_FILE, build_manifest, read_bundle_files
from privfed.bundle.privacy_statement import STATEMENT_HEADING, card_statement, render_privacy_statement

sklearn_linear = pytest.importorskip("sklearn.linear_model")
pytest.importorskip("skops.io")

DELTA = 1e-5


def _rows(statement: str) -> dict[str, str]:
    rows = {}
    for line in statement.splitlines():
        if line.startswith("| ") and not line.startswith("| checklist item"):
            item, text = line[2:-2].split(" | ", 1)
            rows[item] = text
    return rows


def _ledger() -> Ledger:
    votes = np.tile([[40, 1, 0], [38, 2, 0]], (10, 1))
    ledger = Ledger(delta=DELTA, target_epsilon={"party": 100.0}, description="a student of 40 parties")
    ledger.record({"party": GaussianNoisyMax(votes, 6.0, 1, unit="party"),
                   "example": GaussianNoisyMax(votes, 6.0, 1, unit="example")}, note="student labels")
    return ledger


def test_statement_states_every_checklist_item_from_the_ledger():
    ledger = _ledger()
    rows = _rows(render_privacy_statement(ledger))
    party = ledger.account(unit="party")
    assert party.data_dependent and party.epsilon < party.epsilon_data_independent
    assert rows["formal guarantee (party)"].startswith(f"({round_up(party.epsilon_data_independent)}, 1e-05)-DP")
    assert f"data-dependent ε = {round_up(party.epsilon)}" in rows["formal guarantee (party)"]
    example = ledger.account(unit="example")
    assert rows["formal guarantee (example)"].startswith(f"({round_up(example.epsilon_data_independent)}, 1e-05)-DP")
    assert "one party's whole data set" in rows["privacy unit (party)"]
    assert "one training example" in rows["privacy unit (example)"]
    assert party.conversion in rows["accounting (party)"] and example.conversion in rows["accounting (example)"]
    assert rows["not covered"] == "none recorded" and "not accounted" in rows["hyper-parameter tuning"]
    assert rows["budget"] == "party: ε ≤ 100 enforced (data-independent ε)"
    assert "observer" in rows["DP setting"]


def test_an_uncovered_release_makes_the_statement_say_epsilon_is_infinite():
    ledger = Ledger(delta=DELTA)
    ledger.record(LaplaceNoisyMax(np.ones((5, 2), dtype=int), 0.1, 1, unit="party"))
    ledger.record_unaccounted("class counts of every party, sent in clear")
    ledger.record(DPSGD(1.1, 0.01, 200, unit="example"), note="the student's DP-SGD")
    rows = _rows(render_privacy_statement(ledger))
    assert rows["formal guarantee (party)"].startswith("ε = inf for the model as released: 2 release(s)")
    assert rows["formal guarantee (example)"].startswith("ε = inf for the model as released: 2 release(s)")
    assert rows["not covered"].startswith("U1, seen by the public and the coordinator at example and party level: "
                                          "class counts of every party, sent in clear; U2, ")
    assert ("U3, seen by the public and the coordinator at party level: entry 2 is analysed at example level only, "
            "not at party level") in rows["not covered"]
    assert rows["against the coordinator (party)"] == ('ε = inf: it receives 2 release(s) no mechanism covers (U1, U3, '
                                                      'under "not covered")')


def test_the_card_names_each_uncovered_release_once_and_never_says_none_beside_one():
    """Issue 45, item 10: releases only the coordinator sees are "not covered" too, and each long description is
    written once in the card; the tables name it U1, U2."""
    from privfed.bundle.model_card import render_model_card

    ledger = Ledger(delta=DELTA)
    ledger.record(LaplaceNoisyMax(np.ones((5, 2), dtype=int), 0.5, 1, unit="party"))
    first = "the students' predictions each party sends to the coordinator, counted before any noise is added"
    second = "the schema exchange: each party's number of examples and its labels, in clear"
    for description in (first, second):
        ledger.record_unaccounted(description, observers=("coordinator",))
    rows = _rows(render_privacy_statement(ledger))
    assert rows["not covered"] == (f"U1, seen by the coordinator at party level: {first}; "
                                   f"U2, seen by the coordinator at party level: {second}")
    card = render_model_card(ledger)
    assert card.count(first) == card.count(second) == 1 and "none recorded" not in card
    assert "| coordinator | party | ∞ | ∞ | no | U1, U2 |" in card and "| public | party |" in card
    assert "2 release(s) (U1, U2) reach an observer with no mechanism accounting for them" in card
    undeclared = Ledger()  # no δ, so no statement: the card's own section describes the release
    undeclared.record_unaccounted(first, observers=("coordinator",))
    assert render_model_card(undeclared).count(f"- seen by coordinator: {first}") == 1
    assert "No differential-privacy guarantee" in render_privacy_statement(Ledger(delta=DELTA))


def test_card_carries_the_statement_and_audit_checks_it(tmp_path):
    rng = np.random.default_rng(0)
    features = rng.normal(size=(40, 3))
    model = sklearn_linear.LogisticRegression().fit(features, (features[:, 0] > 0).astype(int))
    votes = np.tile([[9, 1], [6, 4]], (5, 1))
    ledger = Ledger(delta=DELTA, description="a student of 10 parties")  # Laplace: cheap to audit three times
    ledger.record({"party": LaplaceNoisyMax(votes, 0.05, 1, unit="party"),
                   "example": LaplaceNoisyMax(votes, 0.05, 2, unit="example")}, note="student labels")
    bundle = save_bundle(model, tmp_path / "bundle", ledger)
    card = (bundle / "MODEL_CARD.md").read_text()
    assert card_statement(card).rstrip() == render_privacy_statement(_ledger_of(bundle)).rstrip()
    assert audit(bundle).check("privacy statement").status == "pass"
    # A publisher who edits the statement's ε (and reseals the manifest) is caught by the statement check.
    stated = _rows(card_statement(card))["formal guarantee (party)"].split(",")[0][1:]
    edited = card.replace(f"({stated}, 1e-05)-DP at party level", "(0.5, 1e-05)-DP at party level")
    assert edited != card
    (bundle / "MODEL_CARD.md").write_text(edited)
    (bundle / MANIFEST_FILE).write_bytes(build_manifest(read_bundle_files(bundle)))
    report = audit(bundle)
    assert report.check("privacy statement").status == "fail" and report.exit_code == 1
    # A card without the section (an older privfed's) is a warning, not a pass.
    start = edited.index(STATEMENT_HEADING)
    (bundle / "MODEL_CARD.md").write_text(edited[:start] + edited[edited.index("\n## ", start) + 1:])
    (bundle / MANIFEST_FILE).write_bytes(build_manifest(read_bundle_files(bundle)))
    assert audit(bundle).check("privacy statement").status == "warn"


def _ledger_of(bundle):
    return Ledger.from_json((bundle / "ledger.json").read_text())


def test_audit_prints_epsilon_per_observer_as_one_table_once(tmp_path):
    """Issue 45, items 9 and 10: one table, a row per observer, below the verdict table; an ∞ that holds for every
    data set is not called data-dependent."""
    rng = np.random.default_rng(0)
    features = rng.normal(size=(40, 3))
    model = sklearn_linear.LogisticRegression().fit(features, (features[:, 0] > 0).astype(int))
    ledger = Ledger(delta=DELTA, description="a student of 10 parties")
    ledger.record(LaplaceNoisyMax(np.tile([[9, 1], [6, 4]], (5, 1)), 0.05, 1, unit="party"), note="student labels")
    ledger.record_unaccounted("class counts of every party, sent in clear", observers=("coordinator",))
    report = audit(save_bundle(model, tmp_path / "bundle", ledger))
    text = report.table()
    assert report.check("recorded totals").detail == ("the totals recorded for public and coordinator equal those "
                                                      "recomputed from the entries (tight analysis, δ = 1e-05); the "
                                                      "ε per observer table is below")
    public = round_up(ledger.account(unit="party").epsilon)
    table = text[text.index("\nε per observer"):text.rindex("\n\n")].strip().splitlines()
    assert [line.split() for line in table[1:]] == [
        ["observer", "ε", "(party", "level)"], ["-" * 11, "-" * 15], ["public", public], ["coordinator", "inf"]]
    assert text.count("ε per observer, recomputed") == 1 and "data-dependent" not in "\n".join(table)
    assert report.to_dict()["epsilons"]["observers"] == {"public": {"party": public}, "coordinator": {"party": "inf"}}
