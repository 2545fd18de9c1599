"""The privacy ledger: recording, per-unit accounting, JSON, evidence, tampering and the budget filter."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from privfed.accounting import BudgetExceededError, LaplaceNoisyMax, Ledger, LedgerFormatError, LedgerIntegrityError
from privfed.accounting.fingerprint import data_fingerprint
from privfed.accounting.ledger_entry import GENESIS_SHA256, Curve, LedgerEntry
from privfed.accounting.orders import TIGHT_ORDERS

from privfed import accounting

DELTA = 1e-5


def _votes(seed: int, queries: int = 37, parties: int = 20, classes: int = 3) -> np.ndarray:
    """Vote histograms of ``parties`` voters over ``classes`` classes."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, size=(queries, parties))
    return np.stack([(labels == c).sum(axis=1) for c in range(classes)], axis=1)


def _fedkt_release(votes: np.ndarray, gamma: float = 0.05) -> dict[str, LaplaceNoisyMax]:
    """One vote release analysed at party level (k = 1) and example level (k = 2)."""
    return {
        "party": LaplaceNoisyMax(votes, gamma, 1, unit="party"),
        "example": LaplaceNoisyMax(votes, gamma, 2, unit="example"),
    }


@pytest.fixture
def ledger() -> Ledger:
    ledger = Ledger(delta=DELTA, seeds={"partition": 3}, description="test model")
    ledger.record(_fedkt_release(_votes(0)), note="first vote round")
    ledger.record_unaccounted("class counts of every party, sent in clear", observers=("coordinator",))
    ledger.record(LaplaceNoisyMax(_votes(1, queries=11), 0.1, 1, unit="party"), note="second vote round")
    return ledger


# --- accounting ---------------------------------------------------------------------------------------
def test_totals_equal_sequential_composition_per_unit(ledger):
    party = [
        LaplaceNoisyMax(_votes(0), 0.05, 1, unit="party"), LaplaceNoisyMax(_votes(1, queries=11), 0.1, 1, unit="party")
    ]
    example = [LaplaceNoisyMax(_votes(0), 0.05, 2, unit="example")]
    for analysis in ("tight", "classic"):
        report = ledger.account(analysis=analysis)
        expected = accounting.account(party, delta=DELTA, analysis=analysis)
        assert report.unit == "party"
        assert math.isclose(report.epsilon, expected.epsilon, rel_tol=1e-12)
        assert math.isclose(report.epsilon_data_independent, expected.epsilon_data_independent, rel_tol=1e-12)
        assert report.data_dependent
        assert [row.num_queries for row in report.mechanisms] == [37, 11]
        # The second round is analysed at party level only: the example level covers not everything released.
        other = report.other_units["example"]
        expected_example = accounting.account(example, delta=DELTA, analysis=analysis)
        assert other.epsilon == other.epsilon_data_independent == math.inf
        assert any("entry 2 is analysed at party level only" in text for text in other.uncovered)
        assert any(f"alone give ε = {accounting.report.round_up(expected_example.epsilon, 6)}," in note
                   for note in other.notes)
        assert set(report.other_units) == {"example"}


def test_units_are_never_summed_together():
    ledger = Ledger(delta=DELTA)
    ledger.record(_fedkt_release(_votes(0)))
    party_before = ledger.account().epsilon
    example_before = ledger.account(unit="example").epsilon
    ledger.record(LaplaceNoisyMax(_votes(2), 1.0, 1, unit="example"))
    assert ledger.account(unit="example").epsilon > example_before
    assert ledger.account(unit="example").other_units["party"].epsilon == math.inf  # entry 1: example level only
    ledger.record(LaplaceNoisyMax(_votes(2), 1.0, 1, unit="party"))
    assert ledger.account().epsilon > party_before


def test_unaccounted_releases_make_the_epsilon_of_those_who_see_them_infinite(ledger):
    public = ledger.account()
    coordinator = ledger.account(observer="coordinator")
    assert ledger.unaccounted == ("class counts of every party, sent in clear",)
    assert public.observer == "public" and math.isfinite(public.epsilon) and not public.uncovered
    assert coordinator.observer == "coordinator" and coordinator.epsilon == math.inf
    assert coordinator.uncovered == ("class counts of every party, sent in clear",)
    assert any("UNACCOUNTED" in note and "class counts" in note for note in coordinator.notes)
    assert "ε = inf" in str(coordinator) and "against the coordinator" in str(coordinator)
    assert all(row.kind == "laplace_noisy_max" for row in public.mechanisms)
    seen_by_all = Ledger(delta=DELTA)
    seen_by_all.record(_fedkt_release(_votes(0)))
    seen_by_all.record_unaccounted("the model, trained without noise")
    assert seen_by_all.account().epsilon == seen_by_all.account(unit="example").epsilon == math.inf
    with pytest.raises(ValueError, match="description must say"):
        ledger.record_unaccounted("  ")
    with pytest.raises(ValueError, match="observer must be one of public, coordinator, got 'server'"):
        ledger.account(observer="server")
    with pytest.raises(ValueError, match="observers must be chosen from public, coordinator, got 'server'"):
        ledger.record_unaccounted("x", observers=("server",))


def test_a_caveat_scoped_to_one_unit_leaves_the_other_covered():
    ledger = Ledger(delta=DELTA)
    ledger.record(_fedkt_release(_votes(0)))
    ledger.record_unaccounted("the example level uses a data-dependent sensitivity", units=("example",))
    assert math.isfinite(ledger.account(unit="party").epsilon)
    assert ledger.account(unit="example").epsilon == math.inf
    assert Ledger.from_json(ledger.to_json()).entries == ledger.entries


def test_empty_ledger_reports_zero_for_the_requested_unit():
    report = Ledger(delta=DELTA).account(unit="example")
    assert (report.epsilon, report.unit, report.mechanisms, report.other_units) == (0.0, "example", (), {})


def test_bad_arguments_fail_before_recording():
    ledger = Ledger(delta=DELTA)
    votes = _votes(0)
    with pytest.raises(ValueError, match="unit is 'party' but the mechanism protects unit 'example'"):
        ledger.record(LaplaceNoisyMax(votes, 0.05), unit="party")
    with pytest.raises(ValueError, match=r"mechanism\['party'\] protects unit 'example'"):
        ledger.record({"party": LaplaceNoisyMax(votes, 0.05)})
    with pytest.raises(TypeError, match="must be a privfed Mechanism"):
        ledger.record(votes)
    with pytest.raises(ValueError, match="unit must be None"):
        ledger.record(_fedkt_release(votes), unit="party")
    assert len(ledger) == 0
    with pytest.raises(ValueError, match="delta is required with target_epsilon"):
        Ledger(target_epsilon=1.0)
    with pytest.raises(ValueError, match="delta is required"):
        Ledger().account()
    with pytest.raises(ValueError, match="primary_unit must be one of"):
        Ledger(primary_unit="client")


def test_single_query_data_dependent_entry_warns():
    with pytest.warns(UserWarning, match="per-query statistic"):
        Ledger(delta=DELTA).record(LaplaceNoisyMax(_votes(0, queries=1), 0.05))


# --- JSON, evidence, privacy of the public ledger ------------------------------------------------------
def test_json_round_trip_keeps_everything(ledger):
    text = ledger.to_json()
    loaded = Ledger.from_json(text)
    assert loaded.to_json() == text
    assert loaded.entries == ledger.entries
    assert loaded.account() == ledger.account()
    assert loaded.account(analysis="classic", unit="example") == ledger.account(analysis="classic", unit="example")
    document = json.loads(text)
    assert document["type"] == "privfed.ledger" and document["schema_version"] == 3
    assert document["seeds"] == {"partition": 3}
    assert set(document["spent"]) == {"party", "example"}
    assert document["software"]["numpy"] == np.__version__
    assert document["head_sha256"] == document["entries"][-1]["sha256"]
    assert document["entries"][0]["previous_sha256"] == GENESIS_SHA256


def test_unbounded_orders_are_written_as_strict_json():
    curve = Curve(orders=(2.0, 3.0), rdp=(0.5, math.inf), rdp_data_independent=(0.5, math.inf))
    text = json.dumps(curve.to_dict(), allow_nan=False)
    assert '"inf"' in text
    assert Curve.from_dict(json.loads(text), "curve") == curve


def _numbers(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item)
    elif isinstance(value, list):
        yield value
        for item in value:
            yield from _numbers(item)


def test_public_json_reveals_no_votes():
    votes = _votes(5, queries=37)
    votes += 7919  # distinctive counts (the gaps, hence the accounting, are unchanged)
    ledger = Ledger(delta=DELTA)
    ledger.record(_fedkt_release(votes))
    text = ledger.to_json()
    document = json.loads(text)
    assert '"votes"' not in text
    # No vote count, no per-query statistic: no list as long as the number of queries, no failure bound q.
    flat = {v for values in _numbers(document) for v in values if not isinstance(v, (list, dict, str))}
    flat |= {v for entry in document["entries"] for v in entry["analyses"]["party"]["parameters"].values()}
    assert not set(votes.ravel().tolist()) & flat
    assert all(len(values) != votes.shape[0] for values in _numbers(document))
    failure_bounds = {float(q) for q in accounting.laplace_failure_bounds(votes, 0.05)}
    assert not failure_bounds & flat
    # The evidence commitment is salted: it is not a hash of the votes, and equal votes commit differently.
    commitment = document["entries"][0]["analyses"]["party"]["evidence_sha256"]
    assert commitment != data_fingerprint({"votes": votes})
    again = Ledger(delta=DELTA)
    again.record(_fedkt_release(votes))
    assert again.entries[0].analyses["party"].evidence_sha256 != commitment
    # The evidence, kept apart, holds the votes.
    evidence = ledger.evidence()
    assert np.array_equal(evidence[f"{commitment}/votes"], votes)


def test_evidence_round_trip_through_npz_and_recomputation(ledger, tmp_path):
    np.savez(tmp_path / "evidence.npz", **ledger.evidence())
    with np.load(tmp_path / "evidence.npz", allow_pickle=False) as archive:
        arrays = {key: archive[key] for key in archive.files}
    loaded = Ledger.from_json(ledger.to_json(), evidence=arrays)
    assert loaded.verify() == 3  # every (entry, unit) analysis rebuilt from parameters + evidence
    # Without evidence every data-independent curve is still rebuilt, from the public parameters alone.
    assert Ledger.from_json(ledger.to_json()).verify() == 3
    with pytest.raises(ValueError, match="without its evidence file"):
        Ledger.from_json(ledger.to_json()).evidence()


# --- tampering -----------------------------------------------------------------------------------------
def _edited(ledger: Ledger, edit) -> str:
    document = json.loads(ledger.to_json())
    edit(document)
    return json.dumps(document)


def _resealed(document: dict) -> dict:
    """Recompute every entry's sha256 and the chain, as a forger who edits an entry consistently would."""
    previous = GENESIS_SHA256
    for i, raw in enumerate(document["entries"]):
        entry = LedgerEntry.from_dict(raw, f"entries[{i}]")
        sealed = LedgerEntry.create(index=i, kind=entry.kind, analyses=entry.analyses, description=entry.description,
                                    note=entry.note, recorded=entry.recorded, previous_sha256=previous,
                                    derived_from_training=entry.derived_from_training, observers=entry.observers,
                                    units=entry.units)
        document["entries"][i] = sealed.to_dict()
        previous = sealed.sha256
    document["head_sha256"] = previous
    return document


def test_edited_spent_epsilon_is_detected(ledger):
    text = _edited(ledger, lambda d: d["spent"]["party"].update(epsilon=d["spent"]["party"]["epsilon"] / 2))
    with pytest.raises(LedgerIntegrityError, match=r"ledger.spent.party.epsilon is .* the spent ε was edited"):
        Ledger.from_json(text)


def test_edited_entry_curve_is_detected(ledger):
    def edit(document):
        curve = document["entries"][0]["analyses"]["party"]["curves"]["tight"]["rdp"]
        curve[:] = [value / 2 for value in curve]

    with pytest.raises(LedgerIntegrityError, match="entry 0 .* edited after it was recorded"):
        Ledger.from_json(_edited(ledger, edit))


def test_dropped_entries_are_detected(ledger):
    with pytest.raises(LedgerIntegrityError, match="entry 1 .* removed, inserted or reordered"):
        Ledger.from_json(_edited(ledger, lambda d: d["entries"].pop(1)))
    with pytest.raises(LedgerIntegrityError, match="removed from or added at the end"):
        Ledger.from_json(_edited(ledger, lambda d: d["entries"].pop()))


def test_swapped_or_edited_evidence_is_detected(ledger):
    other = Ledger(delta=DELTA)
    other.record(_fedkt_release(_votes(0)))  # the same votes, but other salts
    with pytest.raises(LedgerIntegrityError,
                       match=r"evidence for entry 0 \(laplace_noisy_max, (example|party)\) is missing"):
        Ledger.from_json(ledger.to_json(), evidence=other.evidence())
    evidence = ledger.evidence()
    key = next(k for k in evidence if k.endswith("/votes"))
    evidence[key] = evidence[key].copy()
    evidence[key][0, 0] += 1
    with pytest.raises(LedgerIntegrityError, match="does not match its sha256 commitment"):
        Ledger.from_json(ledger.to_json(), evidence=evidence)
    with pytest.raises(LedgerIntegrityError, match="belongs to another ledger"):
        Ledger.from_json(ledger.to_json(), evidence={**ledger.evidence(), **other.evidence()})


def test_consistently_forged_parameters_are_caught_with_the_evidence(ledger):
    document = json.loads(ledger.to_json())
    document["entries"][0]["analyses"]["party"]["parameters"]["gamma"] = 0.01  # claims less noise was spent
    text = json.dumps(_resealed(document))
    Ledger.from_json(text)  # self-consistent: a forger can rewrite the public ledger (docs/ledger.md)
    with pytest.raises(LedgerIntegrityError, match="entry 0 .* does not match the mechanism rebuilt"):
        Ledger.from_json(text, evidence=ledger.evidence())


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.pop("entries"), "missing required keys: entries"),
        (lambda d: d.update(type="something"), "ledger.type must be 'privfed.ledger'"),
        (lambda d: d.update(schema_version=4), "written by a newer privfed"),
        (lambda d: d["entries"][0].pop("note"), r"ledger.entries\[0\] is missing the required key 'note'"),
        (lambda d: d["entries"][0]["analyses"]["party"].update(num_queries="37"),
         r"entries\[0\].analyses.party.num_queries must be an integer"),
        (lambda d: d["entries"][0]["analyses"]["party"]["curves"]["tight"]["rdp"].append(1.0),
         rf"curves.tight.rdp has {len(TIGHT_ORDERS) + 1} values for {len(TIGHT_ORDERS)} orders"),
        (lambda d: d.update(delta=2.0), "delta must be in the open interval"),
    ],
)
def test_malformed_ledgers_say_exactly_what_is_wrong(ledger, edit, message):
    with pytest.raises(LedgerFormatError, match=message):
        Ledger.from_json(_edited(ledger, edit))


# --- budget filter -------------------------------------------------------------------------------------
def _epsilon_of_first(votes: np.ndarray, queries: int, *, data_independent: bool) -> float:
    report = accounting.account(LaplaceNoisyMax(votes[:queries], 0.05, 1, unit="party"), delta=DELTA)
    return report.epsilon_data_independent if data_independent else report.epsilon


@pytest.mark.parametrize("basis", ["data_independent", "data_dependent"])
def test_budget_filter_stops_at_the_right_query(basis):
    votes = _votes(7, queries=200, parties=25)
    target = 1.5
    ledger = Ledger(target_epsilon={"party": target}, delta=DELTA, budget_basis=basis)
    answered = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # one entry per query, on purpose
        with pytest.raises(BudgetExceededError) as refused:
            for query in range(len(votes)):
                ledger.record(LaplaceNoisyMax(votes[query : query + 1], 0.05, 1, unit="party"))
                answered += 1
    assert len(ledger) == answered  # the refused query was not recorded
    independent = basis == "data_independent"
    assert _epsilon_of_first(votes, answered, data_independent=independent) <= target
    assert _epsilon_of_first(votes, answered + 1, data_independent=independent) > target
    assert refused.value.unit == "party" and refused.value.target_epsilon == target
    assert math.isclose(refused.value.epsilon, _epsilon_of_first(votes, answered + 1, data_independent=independent),
                        rel_tol=1e-9)


def test_fits_finds_the_same_count_by_bisection():
    votes = _votes(7, queries=200, parties=25)
    ledger = Ledger(target_epsilon=1.5, delta=DELTA)
    low, high = 0, len(votes)  # invariant: low queries fit, high + 1 do not (or high = all)
    while low < high:
        middle = (low + high + 1) // 2
        if ledger.fits(LaplaceNoisyMax(votes[:middle], 0.05, 1, unit="party")):
            low = middle
        else:
            high = middle - 1
    assert len(ledger) == 0
    assert _epsilon_of_first(votes, low, data_independent=True) <= 1.5 < _epsilon_of_first(
        votes, low + 1, data_independent=True)
    ledger.record(LaplaceNoisyMax(votes[:low], 0.05, 1, unit="party"), note=f"{low} queries answered")
    assert not ledger.fits(LaplaceNoisyMax(votes[:1], 0.05, 1, unit="party"))


def test_budget_applies_to_every_unit_of_a_release():
    ledger = Ledger(target_epsilon=2.0, delta=DELTA)  # the same target for both units
    votes = _votes(3, queries=15)
    release = _fedkt_release(votes, gamma=0.05)
    party_only = ledger.fits(release["party"])
    assert party_only and not ledger.fits(release)  # example level (k = 2) passes the target first
    with pytest.raises(BudgetExceededError, match="at example level"):
        ledger.record(release)
    assert len(ledger) == 0


def rdp_to_epsilon_of(report):
    from privfed.accounting.conversion import tight_epsilon

    return tight_epsilon(report.orders, report.rdp, report.delta)[0]


def test_ledger_totals_equal_account_for_pld_accounted_mechanisms():
    """Data-independent releases are rebuilt from their parameters: the ledger reports account()'s PLD bound."""
    from privfed.accounting import DPSGD, RandomizedResponse, account

    mechanisms = [DPSGD(1.1, 0.01, 500), RandomizedResponse(10, epsilon=1.0, reports=5, unit="example")]
    ledger = Ledger(delta=1e-5, primary_unit="example")
    for mechanism in mechanisms:
        ledger.record(mechanism)
    direct = account(mechanisms, delta=1e-5)
    for candidate in (ledger, Ledger.from_json(ledger.to_json())):
        report = candidate.account()
        assert report.method == direct.method == "pld"
        assert report.epsilon == pytest.approx(direct.epsilon, rel=1e-12)
        assert report.epsilon < rdp_to_epsilon_of(report)
