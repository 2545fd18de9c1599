"""``privfed budget init|show|verify|export|reset``: what a silo's data officer runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from privfed.accounting import DPSGD, RandomizedResponse
from privfed.accounting.silo_budget import SiloBudget

from privfed.cli import main


@pytest.fixture
def ledger(tmp_path: Path, capsys) -> Path:
    path = tmp_path / "silo.jsonl"
    assert main(["budget", "init", str(path), "--epsilon", "4", "--delta", "1e-6"]) == 0
    budget = SiloBudget.open(path)
    budget.charge(DPSGD(1.5, 0.01, 200), study="sepsis", pipeline="fedkd")
    budget.charge(RandomizedResponse(10, epsilon=1.0, unit="example"), study="icu", pipeline="privatekt",
                  observers=("coordinator",))
    capsys.readouterr()
    return path


def test_show_prints_each_study_the_totals_per_observer_and_what_remains(ledger: Path, capsys) -> None:
    budget = SiloBudget.open(ledger)
    assert main(["budget", "show", str(ledger)]) == 0
    out = capsys.readouterr().out
    assert "2 releases in 2 studies" in out and "sepsis: 1 release (fedkd)" in out and "icu: 1 release" in out
    assert f"total for the coordinator: ε = {budget.spent():.4g} spent, {4 - budget.spent():.4g} remaining" in out
    assert main(["budget", "show", str(ledger), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["spent"]["public"] == pytest.approx(budget.spent(observer="public"))
    assert [row["study"] for row in summary["studies"]] == ["sepsis", "icu"]
    assert summary["studies"][1]["epsilon"]["public"] == 0.0


def test_export_writes_dp_events_and_the_privacy_statement(ledger: Path, capsys) -> None:
    assert main(["budget", "export", str(ledger), "--format", "dpevents"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["budget"]["epsilon"] == 4.0
    first, second = document["releases"]
    assert first["dp_event"]["event"] == "self_composed" and first["dp_event"]["count"] == 200
    assert second["dp_event"]["event"] == "self_composed" and second["observers"] == ["coordinator"]
    assert main(["budget", "export", str(ledger), "--format", "statement"]) == 0
    statement = capsys.readouterr().out
    assert "(4, 1e-06)-differentially private for each observer, protecting one row" in statement
    assert "Rényi privacy filter" in statement and "sepsis (fedkd)" in statement


def test_verify_exits_1_on_tampering_and_reset_needs_acknowledge(ledger: Path, capsys) -> None:
    assert main(["budget", "verify", str(ledger)]) == 0
    head = capsys.readouterr().out.split("head sha256 ")[1].split()[0]
    assert main(["budget", "verify", str(ledger), "--head", head]) == 0
    lines = ledger.read_bytes().split(b"\n")
    ledger.write_bytes(b"\n".join([lines[0], lines[2], lines[1], *lines[3:]]))
    capsys.readouterr()
    assert main(["budget", "verify", str(ledger)]) == 1
    assert "FAILED" in capsys.readouterr().out
    assert main(["budget", "show", str(ledger)]) == 1
    assert "privfed budget reset" in capsys.readouterr().out
    assert main(["budget", "reset", str(ledger), "--reason", "checked"]) == 2
    assert "--acknowledge is required" in capsys.readouterr().err
    assert main(["budget", "reset", str(ledger), "--acknowledge", "--reason", "lines 2-3 swapped; compared with "
                                                                             "the backup"]) == 0
    assert "archived" in capsys.readouterr().out
    assert main(["budget", "verify", str(ledger)]) == 0


@pytest.mark.parametrize("arguments, needle", [
    (["init", "{path}", "--epsilon", "4", "--delta", "1e-6"], "exists; a silo budget is created once"),
    (["init", "{new}", "--epsilon", "0", "--delta", "1e-6"], "--epsilon: must be a number in (0, inf)"),
    (["init", "{new}", "--epsilon", "1", "--delta", "1"], "--delta: must be a number in (0, 1)"),
    (["init", "{new}", "--epsilon", "1", "--delta", "1e-6", "--unit", "person"], "max_records_per_person is required"),
    (["show", "{missing}"], "does not exist"),
    (["export", "{path}", "--format", "csv"], "invalid choice"),
])
def test_bad_input_is_one_line_and_exit_2(ledger: Path, capsys, arguments, needle) -> None:
    names = {"path": ledger, "new": ledger.with_name("new.jsonl"), "missing": ledger.with_name("missing.jsonl")}
    assert main(["budget", *[a.format(**names) for a in arguments]]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and needle in error and "Traceback" not in error


def test_init_signs_with_the_silos_key_and_verify_checks_it(tmp_path: Path, capsys) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from privfed.accounting.silo_budget import load_key

    key = Ed25519PrivateKey.generate()
    private, public = tmp_path / "silo.key", tmp_path / "silo.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    path = tmp_path / "signed.jsonl"
    assert main(["budget", "init", str(path), "--epsilon", "4", "--delta", "1e-6", "--signing-key", str(private)]) == 0
    SiloBudget.open(path, signing_key=load_key(private, private=True)).charge(DPSGD(1.5, 0.01, 200), study="s",
                                                                              pipeline="fedkd")
    assert main(["budget", "verify", str(path), "--public-key", str(public)]) == 0
    other = tmp_path / "other.pub"
    other.write_bytes(Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    capsys.readouterr()
    assert main(["budget", "verify", str(path), "--public-key", str(other)]) == 1
    assert "not signed with the expected public key" in capsys.readouterr().out
    with pytest.raises(ValueError, match="not a readable, unencrypted PEM private key"):
        load_key(public, private=True)
