"""A silo's budget ledger: charges, refusals, units, tampering, torn writes and two processes racing."""

from __future__ import annotations

import json
import math
import multiprocessing
from pathlib import Path

import numpy as np
import pytest
from privfed.accounting import DPSGD, GaussianNoisyMax, QuantizedLaplaceEnsemble, RandomizedResponse
from privfed.accounting.privacy_filter import FILTER_ORDERS
from privfed.accounting.silo_budget import (
    SiloBudget,
    SiloBudgetExceededError,
    TamperedLedgerError,
    release_cost,
)

import privfed

RELEASE = RandomizedResponse(2, epsilon=0.5, unit="example")


@pytest.fixture
def budget(tmp_path: Path) -> SiloBudget:
    return SiloBudget(tmp_path / "budget.jsonl", epsilon=4.0, delta=1e-5)


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")[:-1]


def _write(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"\n".join(lines) + b"\n")


def test_privfed_exports_silo_budget_lazily() -> None:
    assert privfed.SiloBudget is SiloBudget


def test_charges_are_recorded_with_their_public_description_and_reported_per_study_and_observer(budget) -> None:
    first = budget.charge(RELEASE, study="sepsis", pipeline="privatekt")
    budget.charge(DPSGD(2.0, 0.01, 100), study="icu", pipeline="fedkd", observers=("coordinator",))
    budget.charge(RELEASE, study="sepsis", pipeline="privatekt")
    assert first.index == 0 and first.mechanism["kind"] == "randomized_response" and first.unit == "example"
    assert budget.studies() == ("sepsis", "icu")
    again = SiloBudget.open(budget.path)  # a second process reads the same figures from the file
    assert [c.study for c in again.charges] == ["sepsis", "icu", "sepsis"]
    assert again.spent() == pytest.approx(budget.spent()) and budget.spent() > 0
    assert again.spent(study="sepsis") == pytest.approx(budget.filter.epsilon_of(2 * budget.cost(RELEASE)))
    assert again.spent(observer="public") < again.spent(observer="coordinator")  # the public does not see DP-SGD
    assert again.spent(study="never") == 0.0
    record = json.loads(_lines(budget.path)[1])
    assert {"study", "pipeline", "mechanism", "unit", "observers", "time", "rdp", "previous_sha256", "sha256"} <= set(
        record)
    assert len(record["rdp"]) == len(FILTER_ORDERS)


def test_a_release_that_does_not_fit_is_refused_and_nothing_is_written(budget) -> None:
    big = RandomizedResponse(2, epsilon=0.5, reports=5, unit="example")
    budget.charge(big, study="a", pipeline="privatekt")
    before = budget.path.read_bytes()
    assert not budget.fits(big)
    with pytest.raises(SiloBudgetExceededError) as refused:
        budget.charge(big, study="b", pipeline="privatekt")
    assert refused.value.epsilon > 4.0 and refused.value.study == "b" and "\n" not in str(refused.value)
    assert budget.path.read_bytes() == before
    assert budget.fits(RELEASE)  # a smaller release may still fit: refusals do not end the filter


def test_the_cost_is_known_from_public_parameters_a_record_costs_what_its_mechanism_costs(budget) -> None:
    votes = np.array([[5, 1, 0], [2, 2, 3]])
    mechanism = GaussianNoisyMax(votes, sigma=40.0)
    record = {"kind": mechanism.kind, "unit": mechanism.unit, "parameters": mechanism.parameters()}
    np.testing.assert_allclose(budget.cost(record)[:-1], mechanism.rdp_data_independent(np.asarray(FILTER_ORDERS)))
    assert budget.cost(record)[-1] == np.inf  # Gaussian noise: no pure ε
    charge = budget.charge(record, study="s", pipeline="fedkt")
    assert "votes" not in charge.mechanism["parameters"]  # the public description only, never the vote matrix
    assert charge.mechanism["parameters"]["num_queries"] == 2 and charge.mechanism["parameters"]["sigma"] == 40.0


def test_a_release_whose_cost_needs_the_private_data_is_refused_in_one_line(budget) -> None:
    derived_clip = QuantizedLaplaceEnsemble(3, 1.0, 0.5, 10, data_dependent_clip=True, unit="party")
    with pytest.raises(ValueError, match="no data-independent privacy bound") as refused:
        budget.charge(derived_clip, study="s", pipeline="fedkd")
    assert "\n" not in str(refused.value)
    with pytest.raises(TypeError, match="release must be a privfed Mechanism"):
        budget.fits("randomized_response")


def test_units_a_party_budget_refuses_example_level_releases(tmp_path: Path) -> None:
    party = SiloBudget(tmp_path / "party.jsonl", epsilon=4.0, delta=1e-5, unit="party")
    with pytest.raises(ValueError, match="party-level budget accepts party-level releases only"):
        party.charge(RELEASE, study="s", pipeline="p")
    party.charge(RandomizedResponse(2, epsilon=0.5), study="s", pipeline="p")  # RR's default unit is party


def test_person_level_cost_is_rdp_group_privacy(tmp_path: Path) -> None:
    person = SiloBudget(tmp_path / "person.jsonl", epsilon=8.0, delta=1e-5, unit="person", max_records_per_person=3)
    orders = np.asarray(FILTER_ORDERS)
    cost, pure = person.cost(RELEASE)[:-1], person.cost(RELEASE)[-1]
    # k = 3 rows: c = 2, cost(β) = 9·ρ(4β) for β >= 2, ∞ below (Mironov 2017, Prop. 11); pure ε: 3ε
    expected = np.where(orders >= 2, 9.0 * RELEASE.rdp_data_independent(4 * orders), np.inf)
    np.testing.assert_allclose(cost, expected)
    assert pure == pytest.approx(1.5)
    # never below the exact divergence when all 3 of a person's rows flip (3 independent reports)
    finite = orders >= 2
    assert np.all(cost[finite] >= 3 * RELEASE.rdp(orders[finite]))
    # a party-level release already covers any change of one person's rows
    np.testing.assert_allclose(person.cost(RandomizedResponse(2, epsilon=0.5)),
                               np.append(RandomizedResponse(2, epsilon=0.5).rdp(orders), 0.5))
    with pytest.raises(ValueError, match="max_records_per_person is required"):
        SiloBudget(tmp_path / "p2.jsonl", epsilon=1.0, delta=1e-5, unit="person")
    with pytest.raises(ValueError, match="applies to unit='person' only"):
        SiloBudget(tmp_path / "p3.jsonl", epsilon=1.0, delta=1e-5, max_records_per_person=2)
    _, one_row = release_cost(RELEASE, FILTER_ORDERS, unit="person", max_records_per_person=1)
    np.testing.assert_allclose(one_row, np.append(RELEASE.rdp(orders), 0.5))


def test_reopening_with_another_policy_is_refused(budget) -> None:
    with pytest.raises(ValueError, match="different policy"):
        SiloBudget(budget.path, epsilon=5.0, delta=1e-5)
    assert SiloBudget.open(budget.path).epsilon == 4.0
    with pytest.raises(ValueError, match="does not exist"):
        SiloBudget.open(budget.path.with_name("missing.jsonl"))


def _tampered(lines: list[bytes], how: str) -> list[bytes]:
    if how == "edited":
        return [lines[0], lines[1].replace(b'"study":"a"', b'"study":"z"'), *lines[2:]]
    if how == "dropped":
        return [lines[0], *lines[2:]]
    if how == "reordered":
        return [lines[0], lines[2], lines[1], *lines[3:]]
    if how == "inserted":
        return [lines[0], lines[1], lines[1], *lines[2:]]
    if how == "edited-last":
        return [*lines[:-1], lines[-1].replace(b'"rdp":[', b'"rdp":[0.0,')[:-1] + b"}"]
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["edited", "dropped", "reordered", "inserted", "edited-last"])
def test_a_tampered_ledger_is_detected_and_refuses_every_charge_until_a_person_resets_it(budget, how) -> None:
    for study in ("a", "b", "c"):
        budget.charge(RELEASE, study=study, pipeline="privatekt")
    spent = budget.spent()
    _write(budget.path, _tampered(_lines(budget.path), how))
    check = SiloBudget.open(budget.path).verify()
    assert not check.intact and check.problem and "line" in check.problem
    for attempt in (lambda: budget.charge(RELEASE, study="d", pipeline="p"), lambda: budget.fits(RELEASE)):
        with pytest.raises(TamperedLedgerError):
            attempt()
    with pytest.raises(ValueError, match="acknowledge must be True"):
        budget.reset(acknowledge=False, reason="checked")
    archive = budget.reset(acknowledge=True, reason="line 2 edited by a test; backups compared")
    assert archive.is_file() and budget.verify().intact
    # the larger of every readable charge summed (duplicates included: an over-count) and the largest running
    # total a readable line records (which still counts the charge of a dropped line)
    carried = {"edited": 3, "dropped": 3, "reordered": 3, "inserted": 4, "edited-last": 3}[how]
    assert budget.spent() == pytest.approx(budget.filter.epsilon_of(carried * budget.cost(RELEASE)))
    assert budget.spent() >= spent - 1e-12
    header = json.loads(_lines(budget.path)[0])
    assert header["restarted_from"]["archive"] == archive.name
    budget.charge(RELEASE, study="d", pipeline="privatekt")
    with pytest.raises(ValueError, match="nothing to reset"):
        budget.reset(acknowledge=True, reason="again")


def test_dropping_the_last_lines_is_seen_against_a_head_noted_elsewhere(budget) -> None:
    budget.charge(RELEASE, study="a", pipeline="p")
    head = budget.charge(RELEASE, study="b", pipeline="p").sha256
    assert budget.verify(head=head).intact
    _write(budget.path, _lines(budget.path)[:-1])
    assert budget.verify().intact  # a hash chain alone cannot see it
    check = budget.verify(head=head)
    assert not check.intact and "dropped" in check.problem


def test_a_killed_writer_leaves_a_readable_ledger_and_the_torn_line_is_sealed(budget) -> None:
    budget.charge(RELEASE, study="a", pipeline="p")
    spent = budget.spent()
    whole = _lines(budget.path)
    with open(budget.path, "ab") as stream:  # a charge killed half-way through its write
        stream.write(whole[1][: len(whole[1]) // 2])
    reopened = SiloBudget.open(budget.path)
    check = reopened.verify()
    assert check.intact and check.records == 1 and check.torn_tail_bytes == len(whole[1]) // 2
    assert reopened.spent() == pytest.approx(spent)  # the charge never returned, so its release never happened
    reopened.charge(RELEASE, study="b", pipeline="p")
    lines = _lines(budget.path)
    assert json.loads(lines[3])["type"] == "torn" and len(lines) == 5
    assert reopened.verify().intact and reopened.verify().torn_tail_bytes == 0
    assert [c.study for c in SiloBudget.open(budget.path).charges] == ["a", "b"]


def test_a_complete_record_missing_only_its_newline_counts_in_full(budget) -> None:
    budget.charge(RELEASE, study="a", pipeline="p")
    budget.charge(RELEASE, study="b", pipeline="p")
    budget.path.write_bytes(budget.path.read_bytes()[:-1])
    assert len(SiloBudget.open(budget.path).charges) == 2
    budget.charge(RELEASE, study="c", pipeline="p")
    assert budget.verify().intact and [c.study for c in budget.charges] == ["a", "b", "c"]


def _charge_until_refused(path: str, name: str) -> int:
    budget = SiloBudget.open(path)
    count = 0
    while True:
        try:
            budget.charge(RELEASE, study=name, pipeline="race")
        except SiloBudgetExceededError:
            return count
        count += 1


def test_two_processes_racing_never_overspend(tmp_path: Path) -> None:
    path = tmp_path / "race.jsonl"
    budget = SiloBudget(path, epsilon=6.0, delta=1e-5)
    capacity = 0
    spent = np.zeros(len(FILTER_ORDERS) + 1)
    while budget.filter.admits(spent, budget.cost(RELEASE)):
        spent, capacity = spent + budget.cost(RELEASE), capacity + 1
    assert capacity >= 10
    with multiprocessing.get_context("fork").Pool(2) as pool:
        counts = pool.starmap(_charge_until_refused, [(str(path), "one"), (str(path), "two")])
    assert sum(counts) == capacity and min(counts) >= 1
    assert budget.verify().intact and len(budget.charges) == capacity
    assert budget.spent() <= 6.0 and not math.isnan(budget.spent())


def test_bad_arguments_are_one_line_errors(budget) -> None:
    for arguments, needle in (({"study": "", "pipeline": "p"}, "study must be a non-empty string"),
                              ({"study": "s", "pipeline": None}, "pipeline must be a non-empty string"),
                              ({"study": "s", "pipeline": "p", "observers": ("auditor",)}, "observers must be chosen")):
        with pytest.raises((ValueError, TypeError), match=needle):
            budget.charge(RELEASE, **arguments)
    with pytest.raises(ValueError, match="unit must be one of"):
        SiloBudget(budget.path.with_name("u.jsonl"), epsilon=1.0, delta=1e-5, unit="household")


def test_verify_re_adds_every_charge_a_forged_running_total_is_caught(budget) -> None:
    """A budget check reads the running total of the last line; verify() re-adds every charge behind it."""
    from privfed.accounting.silo_ledger import encode_line

    budget.charge(RELEASE, study="a", pipeline="p")
    budget.charge(RELEASE, study="b", pipeline="p")
    lines = _lines(budget.path)
    record = json.loads(lines[-1])
    previous = record.pop("previous_sha256")
    record.pop("sha256")
    record["total"]["coordinator"] = [0.0] * len(record["total"]["coordinator"])  # "nothing was spent"
    forged, _ = encode_line(record, previous)  # its own sha256 recomputed: the chain alone cannot tell
    _write(budget.path, [*lines[:-1], forged])
    check = SiloBudget.open(budget.path).verify()
    assert not check.intact and "its total is not the previous total plus its cost" in check.problem


def test_the_example_in_docs_budget_runs_as_written(tmp_path: Path, monkeypatch, capsys) -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "budget.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/budget.md", "exec"), {})
    spent, icu, public = (float(v) for v in capsys.readouterr().out.split())
    assert 0 < icu < spent <= 4.0 and public < spent
    assert [c.study for c in SiloBudget.open(tmp_path / "silo.jsonl").charges] == ["sepsis-2026", "icu-2027"]


def test_a_budget_held_open_sees_what_another_process_charged_and_an_edit_made_since(budget) -> None:
    other = SiloBudget.open(budget.path)
    budget.charge(RELEASE, study="a", pipeline="p")
    assert budget.fits(RELEASE)  # checked once: its view is cached with the file's size and times
    six = RandomizedResponse(2, epsilon=0.5, reports=6, unit="example")
    other.charge(six, study="b", pipeline="p")
    assert budget.spent() == pytest.approx(other.spent()) and not budget.fits(six)  # it read the appended line
    lines = _lines(budget.path)
    _write(budget.path, [lines[0], lines[1].replace(b'"study":"a"', b'"study":"abc"'), *lines[2:]])
    with pytest.raises(TamperedLedgerError, match="line 2"):  # the file changed under it: checked whole again
        budget.fits(RELEASE)


# --- signed records -------------------------------------------------------------------------------------------
def _rechained(path: Path, edit) -> None:
    """Apply ``edit`` to the parsed records and recompute every line's two hashes (an attacker without the key)."""
    from privfed.accounting.fingerprint import sha256_hex
    from privfed.accounting.ledger_entry import GENESIS_SHA256

    previous, lines = GENESIS_SHA256, []
    for number, line in enumerate(path.read_bytes().splitlines()):
        record = json.loads(line)
        record.pop("sha256")
        record["previous_sha256"] = previous
        edit(number, record)
        body = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        body = b'{"previous_sha256":"' + previous.encode() + b'",' + body[1:].replace(
            b'"previous_sha256":"' + previous.encode() + b'",', b"")
        previous = sha256_hex(body)
        lines.append(body[:-1] + b',"sha256":"' + previous.encode() + b'"}')
    path.write_bytes(b"\n".join(lines) + b"\n")


def test_signed_records_an_edit_rechained_passes_the_hash_chain_and_fails_the_signature(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from privfed.accounting.silo_ledger import scan_file

    key = Ed25519PrivateKey.generate()
    path = tmp_path / "signed.jsonl"
    budget = SiloBudget(path, epsilon=8.0, delta=1e-5, signing_key=key)
    for study in ("a", "b", "c"):
        budget.charge(DPSGD(1.1, 0.01, 100), study=study, pipeline="fedkd")
    assert all("signature" in json.loads(line) for line in path.read_bytes().splitlines())
    assert budget.verify(public_key=key.public_key()).intact
    assert SiloBudget.open(path).fits(DPSGD(1.1, 0.01, 100))  # a reader checks the last line's signature
    with pytest.raises(ValueError, match="signed ledger: charging it needs the silo's signing_key"):
        SiloBudget.open(path).charge(DPSGD(1.1, 0.01, 100), study="d", pipeline="fedkd")

    # The attack: rename study "b" and re-chain every hash after it. The hash chain alone passes ...
    _rechained(path, lambda number, record: record.update(study="other") if record.get("study") == "b" else None)
    scan = scan_file(path.read_bytes(), path, full=True)
    assert [c.study for c in scan.charges] == ["a", "other", "c"]
    # ... the signatures fail: every check of the budget, a new reader's, and verify with the public key.
    check = SiloBudget.open(path).verify(public_key=key.public_key())
    assert not check.intact and "line 3" in check.problem and "signature does not verify" in check.problem
    with pytest.raises(TamperedLedgerError, match="signature does not verify"):
        SiloBudget.open(path).fits(DPSGD(1.1, 0.01, 100))
    with pytest.raises(TamperedLedgerError, match="signature does not verify"):
        SiloBudget.open(path, signing_key=key).charge(DPSGD(1.1, 0.01, 100), study="d", pipeline="fedkd")


def test_stripping_the_signatures_and_the_key_is_caught_against_the_silos_key(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    path = tmp_path / "signed.jsonl"
    SiloBudget(path, epsilon=8.0, delta=1e-5, signing_key=key).charge(DPSGD(1.1, 0.01, 100), study="a",
                                                                       pipeline="fedkd")
    _rechained(path, lambda number, record: (record.pop("signature"), record.pop("public_key", None)))
    assert SiloBudget.open(path).verify().intact  # now an unsigned ledger, consistent in itself
    check = SiloBudget.open(path).verify(public_key=key.public_key())
    assert not check.intact and "not signed with the expected public key" in check.problem
    with pytest.raises(ValueError, match="different policy"):
        SiloBudget.open(path, signing_key=key)
    # Re-signing with another key is caught the same way.
    other = Ed25519PrivateKey.generate()
    assert not SiloBudget(tmp_path / "o.jsonl", epsilon=8.0, delta=1e-5, signing_key=other).verify(
        public_key=key.public_key().public_bytes_raw().hex()).intact
    with pytest.raises(TypeError, match="Ed25519"):
        SiloBudget(tmp_path / "x.jsonl", epsilon=8.0, delta=1e-5, signing_key="not a key")


# --- a new process starts from the state the last check left ---------------------------------------------------
def test_a_new_budget_object_starts_from_the_checked_state_without_rescanning(budget, monkeypatch) -> None:
    import time

    from privfed.accounting import silo_budget as module

    for study in ("a", "b", "c"):
        budget.charge(RELEASE, study=study, pipeline="privatekt")
    spent = budget.spent()
    assert (budget.path.parent / "budget.jsonl.checked").is_file()
    scan_file = module.scan_file
    monkeypatch.setattr(module, "scan_file", lambda *a, **k: pytest.fail("the whole file was scanned"))
    fresh = SiloBudget.open(budget.path)
    assert fresh.spent() == spent and fresh.fits(RELEASE)
    fresh.charge(RELEASE, study="d", pipeline="privatekt")  # and its own charge moves the state on
    assert SiloBudget.open(budget.path).spent() == fresh.spent()
    monkeypatch.setattr(module, "scan_file", scan_file)

    # An in-place edit that keeps the file's size changes its stamp (mtime, ctime): a new object scans it all.
    time.sleep(0.02)
    lines = _lines(budget.path)
    lines[2] = lines[2].replace(b'"study":"b"', b'"study":"x"')
    _write(budget.path, lines)
    with pytest.raises(TamperedLedgerError, match="line 3"):
        SiloBudget.open(budget.path).fits(RELEASE)


def test_a_damaged_or_stale_checked_state_only_costs_a_full_scan(budget) -> None:
    budget.charge(RELEASE, study="a", pipeline="privatekt")
    state = budget.path.parent / "budget.jsonl.checked"
    for content in (b"not json", b'{"size": 1}', state.read_bytes().replace(b'"count":1', b'"count":0')):
        state.write_bytes(content)
        assert SiloBudget.open(budget.path).spent() == budget.spent()


def test_person_rows_keeps_each_persons_first_k_rows_so_group_privacy_holds(tmp_path: Path) -> None:
    budget = SiloBudget(tmp_path / "p.jsonl", epsilon=4.0, delta=1e-5, unit="person", max_records_per_person=2)
    ids = np.array(["ann", "bob", "ann", "cy", "ann", "bob", "bob", "dee"])
    rows = budget.person_rows(ids)
    assert rows.tolist() == [0, 1, 2, 3, 5, 7]  # ann's rows 0 and 2, bob's 1 and 5, cy's 3, dee's 7
    assert max(np.unique(ids[rows], return_counts=True)[1]) == 2
    # One person's rows do not move another's: without ann, the others keep the same rows.
    others = ids != "ann"
    assert ids[others][budget.person_rows(ids[others])].tolist() == [i for i in ids[rows] if i != "ann"]
    with pytest.raises(ValueError, match="person-level budget"):
        SiloBudget(tmp_path / "e.jsonl", epsilon=4.0, delta=1e-5).person_rows(ids)
    with pytest.raises(ValueError, match="one id per row"):
        budget.person_rows(ids.reshape(2, 4))


def test_the_person_level_example_in_docs_budget_runs_as_written(tmp_path: Path, monkeypatch, capsys) -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "budget.md").read_text()
    code = text.split("```python\n")[2].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/budget.md", "exec"), {})
    assert capsys.readouterr().out.strip() == "[0 1 2 4]"
