"""Rebuilding mechanisms from untrusted records: bounded memory and time, one-line errors, every curve checked."""

from __future__ import annotations

import json
import time
import tracemalloc

import numpy as np
import pytest
from privfed.accounting import (
    ConfidentGNMax,
    GaussianNoisyMax,
    LaplaceNoisyMax,
    Ledger,
    LedgerFormatError,
    LedgerIntegrityError,
    compose_sequential,
)
from privfed.accounting.ledger_entry import GENESIS_SHA256, LedgerEntry, analyse_mechanism, load_json
from privfed.accounting.parallel import compose_parallel
from privfed.accounting.registry import PublicVoteView, public_mechanism_from_record

DELTA = 1e-5


def _ledger() -> Ledger:
    votes = np.random.default_rng(0).integers(0, 10, size=(40, 3))
    ledger = Ledger(delta=DELTA, description="a FedKT-like release")
    ledger.record({"party": LaplaceNoisyMax(votes, 0.05, 2, unit="party"),
                   "example": LaplaceNoisyMax(votes, 0.05, 4, unit="example")})
    return ledger


def reseal(document: dict, *, totals: bool = True) -> dict:
    """A forger's reseal: re-hash the chain and recompute the recorded totals with the public API."""
    previous = GENESIS_SHA256
    for raw in document["entries"]:
        raw["previous_sha256"] = previous
        raw["sha256"] = LedgerEntry.from_dict(raw, "entry").content_sha256()
        previous = raw["sha256"]
    document["head_sha256"] = previous
    if not totals:
        return document
    ledger = Ledger.from_dict({**document, "spent": None, "spent_by_observer": None, "delta": None,
                               "budget": {**document["budget"], "target_epsilon": {}}})
    ledger.delta = document["delta"]
    document["spent"] = ledger.totals()
    document["spent_by_observer"] = {observer: ledger.totals(observer) for observer in ("public", "coordinator")}
    return document


@pytest.mark.parametrize("mechanism", [LaplaceNoisyMax(np.array([[5, 1, 0], [2, 2, 3]]), 0.05, 2, unit="party"),
                                       GaussianNoisyMax(np.array([[5, 1, 0], [2, 2, 3]]), 40.0, 1, unit="party")])
def test_public_view_gives_exactly_the_data_independent_record(mechanism):
    recorded = analyse_mechanism(mechanism, evidence_sha256=None)
    view, public = public_mechanism_from_record(recorded.record())
    assert public and isinstance(view, PublicVoteView) and view.kind == mechanism.kind
    fresh = analyse_mechanism(view, evidence_sha256=None)
    for analysis, curve in recorded.curves.items():
        np.testing.assert_allclose(fresh.curves[analysis].rdp_data_independent, curve.rdp_data_independent, rtol=1e-12)
    assert (fresh.num_queries, fresh.data_dependent, fresh.parameters) == (2, True, recorded.parameters)
    assert fresh.pure_epsilon == recorded.pure_epsilon
    if mechanism.dp_event() is not None:
        assert view.dp_event() == mechanism.dp_event()


def test_parallel_composition_has_a_public_view():
    members = [LaplaceNoisyMax(np.array([[5, 1], [0, 3]]), 0.05, 1, unit="party"),
               LaplaceNoisyMax(np.array([[1, 1], [0, 3], [4, 4]]), 0.05, 1, unit="party")]
    recorded = analyse_mechanism(compose_parallel(members), evidence_sha256=None)
    view, public = public_mechanism_from_record(recorded.record())
    assert public and view.num_queries == 5
    fresh = analyse_mechanism(view, evidence_sha256=None)
    np.testing.assert_allclose(fresh.curves["tight"].rdp_data_independent,
                               recorded.curves["tight"].rdp_data_independent, rtol=1e-12)


def test_compositions_of_compositions_and_of_confident_gnmax_have_a_public_view():
    """The view counts every member that needs private evidence, at any depth: a parallel composition of Confident
    GNMax records and a composition whose one member is a composition of GNMax records were refused (only members
    that were themselves a PublicVoteView counted)."""
    votes = np.array([[5, 1, 0], [2, 2, 3], [9, 0, 0]])
    confident = ConfidentGNMax(votes, threshold=3.0, sigma_threshold=2.0, sigma=4.0,
                               answered=np.array([True, False, True]), unit="party")
    gnmax = GaussianNoisyMax(votes, 40.0, 1, unit="party")
    for mechanism in (compose_parallel([confident, confident]), compose_sequential([compose_parallel([gnmax, gnmax])])):
        recorded = analyse_mechanism(mechanism, evidence_sha256=None)
        view, public = public_mechanism_from_record(recorded.record())
        assert public and view.num_queries == mechanism.num_queries == 6
        fresh = analyse_mechanism(view, evidence_sha256=None)
        assert fresh.parameters == recorded.parameters
        for analysis, curve in recorded.curves.items():
            np.testing.assert_allclose(fresh.curves[analysis].rdp_data_independent, curve.rdp_data_independent,
                                       rtol=1e-12)


def test_a_ledger_claiming_twenty_million_queries_costs_no_memory():
    """The probe's 21 KB ledger claiming 2 × 10⁷ queries cost 25.6 s and 1.7 GB through a placeholder vote matrix."""
    document = json.loads(_ledger().to_json())
    for member in document["entries"][0]["analyses"].values():
        member["parameters"]["num_queries"] = member["num_queries"] = 20_000_000
        fresh = analyse_mechanism(public_mechanism_from_record(member)[0], evidence_sha256=None)
        member["pure_epsilon"] = fresh.pure_epsilon
        member["curves"] = {name: curve.to_dict() for name, curve in fresh.curves.items()}
    text = json.dumps(reseal(document))
    tracemalloc.start()
    start = time.perf_counter()
    ledger = Ledger.from_json(text)
    assert ledger.verify() == 2
    ledger.account()
    elapsed, peak = time.perf_counter() - start, tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert elapsed < 5.0 and peak < 50e6, (elapsed, peak)


@pytest.mark.parametrize("count", [0, -3, 2.5, True, "7"])
def test_malformed_counts_are_one_line_errors(count):
    document = json.loads(_ledger().to_json())
    document["entries"][0]["analyses"]["party"]["parameters"]["num_queries"] = count
    with pytest.raises(LedgerFormatError, match="num_queries must be an integer"):
        Ledger.from_json(json.dumps(reseal(document, totals=False))).verify()


def test_verify_checks_entries_with_evidence_commitments_without_the_evidence():
    """Ledger.verify() used to skip every entry with an evidence commitment: resealed curves loaded unnoticed."""
    def halve(member):
        for curve in member["curves"].values():
            curve["rdp_data_independent"] = [v / 2 for v in curve["rdp_data_independent"]]
            curve["rdp"] = [min(a, b) for a, b in zip(curve["rdp"], curve["rdp_data_independent"])]

    def flip(member):
        member["data_dependent"] = False

    def more_queries(member):
        member["num_queries"] += 1

    for forge, message in ((halve, "rdp_data_independent differs"), (flip, "data-dependent: False"),
                           (more_queries, "records 41 queries")):
        document = json.loads(_ledger().to_json())
        assert document["entries"][0]["analyses"]["party"]["evidence_sha256"] is not None
        forge(document["entries"][0]["analyses"]["party"])
        with pytest.raises(LedgerIntegrityError, match=message):
            Ledger.from_json(json.dumps(reseal(document))).verify()


@pytest.mark.parametrize("record", [5, [], {"kind": 5}, {"kind": "laplace_noisy_max", "parameters": 3},
                                    {"kind": "parallel_composition", "unit": "party", "parameters": {"members": [5]}}])
def test_garbage_records_are_value_errors(record):
    with pytest.raises(ValueError):
        public_mechanism_from_record(record)


def test_deeply_nested_json_is_a_format_error():
    with pytest.raises(LedgerFormatError, match="nested more than"):
        load_json("[" * 100_000 + "]" * 100_000, "ledger")
    with pytest.raises(LedgerFormatError, match="nested more than 64"):
        Ledger.from_json("[" * 70 + "]" * 70)


def test_parameters_inconsistent_with_recorded_curves_cost_bounded_time():
    """A Gaussian entry whose votes_per_unit was raised to 400 (curves left as recorded) made the PLD grid, sized by
    the recorded curves, fine over a huge privacy-loss range: loading the ledger took minutes."""
    votes = np.random.default_rng(0).integers(0, 9, size=(20, 3))
    ledger = Ledger(delta=DELTA)
    ledger.record(GaussianNoisyMax(votes, 30.0, 2, unit="example"))
    document = json.loads(ledger.to_json())
    document["entries"][0]["analyses"]["example"]["parameters"]["votes_per_unit"] = 400
    start = time.perf_counter()
    with pytest.raises(LedgerIntegrityError, match="spent"):
        Ledger.from_json(json.dumps(reseal(document, totals=False)))
    assert time.perf_counter() - start < 10.0
