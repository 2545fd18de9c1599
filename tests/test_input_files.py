"""Files users write (claims, mechanism files, sweep configurations): every mistake one clear line, exit 2.

A misspelled key is refused with the valid keys and the closest one; it never falls back to a default.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import dp_accounting
import numpy as np
import pytest
from privfed.accounting.documents import load_npy
from privfed.accounting.registry import checked_public_mechanism_from_record, mechanism_kinds

from privfed import AuditInputError, load_claims, load_mechanisms
from privfed.cli import main

ROOT = Path(__file__).resolve().parents[1]
CLAIMS = json.loads((ROOT / "examples" / "claims" / "fedkt_l1_adult.json").read_text())
RR_CLAIMS = json.loads((ROOT / "examples" / "claims" / "privatekt_demo.json").read_text())
QLE_CLAIMS = json.loads((ROOT / "examples" / "claims" / "fedkd_cifar10.json").read_text())


def _write(tmp_path: Path, document: dict, name: str = "claims.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


def _audit_error(tmp_path: Path, document: dict, capsys) -> str:
    path = _write(tmp_path, document)
    assert main(["audit", "--claims", str(path)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "Traceback" not in error and error.startswith("privfed audit: error:")
    return error


# --- claims files ----------------------------------------------------------------------------------------------
def test_a_misspelled_optional_parameter_is_refused_not_defaulted(tmp_path: Path, capsys) -> None:
    # The intended claim (k = 2) fails; with the typo, the default k = 1 used to make it pass.
    intended = copy.deepcopy(CLAIMS)
    intended["claim"]["epsilon"] = 3.72  # k = 1 gives 2.17 (pass), k = 2 gives 4.70 (fail)
    intended["mechanisms"][0]["parameters"]["votes_per_unit"] = 2
    assert main(["audit", "--claims", str(_write(tmp_path, intended, "intended.json"))]) == 1
    capsys.readouterr()
    typo = copy.deepcopy(CLAIMS)
    typo["mechanisms"][0]["parameters"].pop("votes_per_unit")
    typo["mechanisms"][0]["parameters"]["votes_per_units"] = 2
    error = _audit_error(tmp_path, typo, capsys)
    assert "'votes_per_units'" in error and "did you mean 'votes_per_unit'?" in error and "gamma" in error


@pytest.mark.parametrize(
    ("claims", "typo", "meant"),
    [(RR_CLAIMS, "report", "reports"), (QLE_CLAIMS, "draw_per_example", "draws_per_example"),
     (RR_CLAIMS, "label_per_report", "labels_per_report")],
)
def test_every_kind_refuses_misspelled_parameters(claims, typo, meant, tmp_path: Path, capsys) -> None:
    document = copy.deepcopy(claims)
    document["mechanisms"][0]["parameters"][typo] = 2
    error = _audit_error(tmp_path, document, capsys)
    assert f"unknown key {typo!r}" in error and f"did you mean {meant!r}?" in error


@pytest.mark.parametrize(
    ("change", "needles"),
    [
        (lambda d: d.update(epsilonn=3.72), ["'epsilonn'", "valid keys", "'description'"]),
        (lambda d: d["claim"].update(epsilonn=3.72), ["claim", "'epsilonn'", "did you mean 'epsilon'?"]),
        (lambda d: d["mechanisms"][0].update(units="party"), ["'units'", "did you mean 'unit'?"]),
        (lambda d: d.update(model={"file": "m.skops", "sha265": "00"}), ["model", "'sha265'", "'sha256'"]),
        (lambda d: d["mechanisms"][0]["parameters"].update(num_queries=2.5), ["num_queries", "integer", "2.5"]),
        (lambda d: d["mechanisms"][0]["parameters"].update(noise_scale=3.0), ["noise_scale", "disagrees", "25.0"]),
        (lambda d: d["mechanisms"][0].update(kind="laplace_noisy_mx"), ["kind", "did you mean 'laplace_noisy_max'?"]),
        (lambda d: d["claim"].update(rounds=3), ["claim.rounds", "per_round"]),
    ],
)
def test_claims_files_name_the_problem(change, needles, tmp_path: Path, capsys) -> None:
    document = copy.deepcopy(CLAIMS)
    change(document)
    error = _audit_error(tmp_path, document, capsys)
    for needle in needles:
        assert needle in error, (needle, error)


def test_non_finite_numbers_are_refused(tmp_path: Path, capsys) -> None:
    text = json.dumps(CLAIMS).replace(f'"epsilon": {CLAIMS["claim"]["epsilon"]}', '"epsilon": Infinity')
    assert "Infinity" in text
    path = tmp_path / "inf.json"
    path.write_text(text)
    assert main(["audit", "--claims", str(path)]) == 2
    error = capsys.readouterr().err
    assert "Infinity" in error and "finite" in error and error.count("\n") == 1
    with pytest.raises(AuditInputError, match="finite"):
        load_claims(path)


def test_the_shipped_claims_files_load() -> None:
    for path in sorted((ROOT / "examples" / "claims").glob("*.json")):
        load_claims(path)


def test_valid_keys_come_from_each_registered_kind() -> None:
    """The check learns a kind's keys from the class itself: every registered kind rebuilds its own record."""
    from privfed.accounting import account  # noqa: F401  (registers every kind)
    from privfed.accounting.registry import _REGISTRY

    for kind in mechanism_kinds():
        cls = _REGISTRY[kind]
        examples = [m for m in _example_mechanisms() if isinstance(m, cls)]
        for mechanism in examples:
            record = {"kind": mechanism.kind, "unit": mechanism.unit, "parameters": mechanism.parameters()}
            rebuilt, _ = checked_public_mechanism_from_record(json.loads(json.dumps(record)))
            assert rebuilt.kind == kind and dict(rebuilt.parameters()).keys() == dict(mechanism.parameters()).keys()
            stray = json.loads(json.dumps(record))
            stray["parameters"]["not_a_parameter"] = 1
            with pytest.raises(ValueError, match="unknown key 'not_a_parameter'"):
                checked_public_mechanism_from_record(stray)


def _example_mechanisms():
    import privfed

    votes = np.array([[5, 1], [3, 3]])
    laplace = privfed.LaplaceNoisyMax(votes, 0.1, 2, unit="party")
    return [
        laplace,
        privfed.GaussianNoisyMax(votes, 4.0),
        privfed.DPSGD(1.1, 0.01, 100),
        privfed.RandomizedResponse(10, epsilon=2.0, reports=3),
        privfed.QuantizedLaplaceEnsemble(10, 1.0, 0.5, 100, draws_per_example=2),
        privfed.compose_parallel([laplace, privfed.LaplaceNoisyMax(votes, 0.2, 2, unit="party")]),
        privfed.DpEventRelease(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(2.0), 5)),
    ]


# --- mechanism files -------------------------------------------------------------------------------------------
def _account_error(path: Path, capsys, *needles: str) -> None:
    assert main(["account", str(path), "--delta", "1e-5"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "Traceback" not in error and error.startswith("privfed account: error:")
    for needle in needles:
        assert needle in error, (needle, error)


@pytest.mark.parametrize(
    ("body", "needles"),
    [
        ('kind = "randomized_response"\nnum_classes = 10\nepsilon = 5.0\nreport = 250\n',
         ["'report'", "did you mean 'reports'?", "labels_per_report"]),
        ('kind = "laplace_noisy_max"\nvotes = "votes.npy"\ngamma = 0.1\nvotes_per_units = 2\n',
         ["'votes_per_units'", "did you mean 'votes_per_unit'?"]),
        ('kind = "dpsgd"\nnoise_multiplier = 1.1\nsample_rate = 0.01\nsteps = 2.5\n', ["steps", "integer", "2.5"]),
        ('kind = "dpsgd"\nnoise_multiplier = inf\nsample_rate = 0.01\nsteps = 10\n', ["noise_multiplier", "finite"]),
        ('kind = "dpsdg"\n', ["kind", "did you mean 'dpsgd'?"]),
        ('kind = "laplace_noisy_max"\nvotes = "../outside.npy"\ngamma = 0.1\n', ["votes", "outside", "folder"]),
        ('kind = "laplace_noisy_max"\nvotes = "/etc/passwd.npy"\ngamma = 0.1\n', ["votes", "outside"]),
        ('kind = "laplace_noisy_max"\nvotes = "text.npy"\ngamma = 0.1\n', ["votes", "not a NumPy .npy file"]),
    ],
)
def test_mechanism_files_name_the_problem(body, needles, tmp_path: Path, capsys) -> None:
    folder = tmp_path / "spec"
    folder.mkdir()
    np.save(folder / "votes.npy", np.array([[5, 1], [3, 3]]))
    np.save(tmp_path / "outside.npy", np.array([[5, 1], [3, 3]]))
    (folder / "text.npy").write_text("1,2\n3,4\n")
    path = folder / "pipeline.toml"
    path.write_text("[[mechanisms]]\n" + body)
    _account_error(path, capsys, *needles)


def test_mechanism_file_top_level_and_json_infinity(tmp_path: Path, capsys) -> None:
    path = tmp_path / "p.toml"
    path.write_text('mechanism = []\n')
    _account_error(path, capsys, "'mechanism'", "did you mean 'mechanisms'?")
    path = tmp_path / "p.json"
    path.write_text('{"mechanisms": [{"kind": "dpsgd", "noise_multiplier": Infinity, "sample_rate": 0.1, "steps": 1}]}')
    _account_error(path, capsys, "Infinity", "finite")
    path = tmp_path / "broken.toml"
    path.write_text("[[mechanisms]\n")
    _account_error(path, capsys, "not valid TOML")


def test_a_mechanism_file_may_name_files_below_its_folder(tmp_path: Path) -> None:
    (tmp_path / "votes").mkdir()
    np.save(tmp_path / "votes" / "v.npy", np.array([[5, 1], [3, 3]]))
    path = tmp_path / "p.toml"
    path.write_text('[[mechanisms]]\nkind = "laplace_noisy_max"\nvotes = "votes/v.npy"\ngamma = 0.1\n')
    assert load_mechanisms(path)[0].num_queries == 2


def test_load_npy_reads_plain_arrays(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.arange(6).reshape(2, 3))
    assert load_npy(tmp_path / "a.npy", "x").tolist() == [[0, 1, 2], [3, 4, 5]]


# --- sweep configurations --------------------------------------------------------------------------------------
def test_sweep_configuration_typos_suggest_the_key(tmp_path: Path, capsys) -> None:
    pytest.importorskip("pandas")
    text = (ROOT / "examples" / "report_digits.toml").read_text()
    for wrong, right, needles in (
        ("[split]", "[splitt]", ["splitt", "did you mean 'split'?"]),
        ("seeds", "seed", ["'seed'", "did you mean 'seeds'?"]),
    ):
        path = tmp_path / "c.toml"
        path.write_text(text.replace(wrong, right, 1))
        assert main(["report", str(path), "--out", str(tmp_path / "out")]) == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and all(n in error for n in needles), error
    path.write_text(text.replace("gamma = [0.1, 0.5, 2.0]", "gamma = [0.1, inf]"))
    assert main(["report", str(path), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert "grid.gamma[1]" in error and "finite" in error and not (tmp_path / "out").exists()


# --- audit samples -----------------------------------------------------------------------------------------------
def test_member_samples_that_are_not_npz_are_refused_without_a_pickle_hint(tmp_path: Path, capsys) -> None:
    pytest.importorskip("sklearn")
    claims = ROOT / "examples" / "claims" / "fedkt_l1_adult.json"
    np.savez(tmp_path / "good.npz", X=np.zeros((4, 2)), y=np.zeros(4))
    np.save(tmp_path / "array.npy", np.zeros((4, 2)))
    (tmp_path / "text.npz").write_text("X,y\n")
    np.savez(tmp_path / "objects.npz", X=np.array([{"a": 1}] * 4, dtype=object), y=np.zeros(4))
    for bad, message in (("array.npy", "not a NumPy .npz file"), ("text.npz", "not a NumPy .npz file"),
                         ("objects.npz", "holds Python objects")):
        code = main(["audit", "--claims", str(claims), "--members", str(tmp_path / bad),
                     "--non-members", str(tmp_path / "good.npz")])
        error = capsys.readouterr().err
        assert code == 2 and error.count("\n") == 1 and message in error and "members file" in error, error
        assert bad in error and "allow_pickle" not in error and "Traceback" not in error


# --- values the accounting cannot represent ----------------------------------------------------------------------
def test_one_answer_epsilon_beyond_700_is_refused_where_files_are_parsed(tmp_path: Path, capsys) -> None:
    from privfed.accounting.documents import MAX_EPSILON_PER_ANSWER as ACCOUNTING_MAX

    from privfed.cli.arguments import MAX_EPSILON_PER_ANSWER

    assert MAX_EPSILON_PER_ANSWER == ACCOUNTING_MAX
    np.save(tmp_path / "votes.npy", np.array([[5, 1], [3, 3]]))
    # The mechanisms refuse these at construction (the message names the parameter and its range); the file's
    # entry is named in front.
    for body, name in (('kind = "laplace_noisy_max"\nvotes = "votes.npy"\ngamma = 400.0\n', "gamma must be <= 350"),
                       ('kind = "randomized_response"\nnum_classes = 10\nepsilon = 800.0\n', "epsilon")):
        path = tmp_path / "p.toml"
        path.write_text("[[mechanisms]]\n" + body)
        _account_error(path, capsys, "mechanisms[0]", name)
    claims = copy.deepcopy(CLAIMS)
    claims["mechanisms"][0]["parameters"]["gamma"] = 400.0
    error = _audit_error(tmp_path, claims, capsys)
    assert "gamma must be <= 350" in error and "700" in error


def test_a_kind_added_elsewhere_is_checked_too_even_if_it_reads_every_item(monkeypatch) -> None:
    """A new registered kind gets the check for free, also when its from_parameters walks ``parameters.items()``."""
    import dataclasses

    from privfed.accounting import registry
    from privfed.accounting.mechanism import Mechanism

    @dataclasses.dataclass(frozen=True)
    class Shuffled(Mechanism):
        epsilon0: float
        n_users: int
        unit: str = "example"
        kind = "test_shuffled"

        data_dependent = False
        num_queries = 1

        def rdp(self, orders, *, analysis="tight"):
            return np.full(len(orders), self.epsilon0)

        rdp_data_independent = rdp

        def parameters(self):
            return {"epsilon0": self.epsilon0, "n_users": self.n_users}

        @classmethod
        def from_parameters(cls, parameters, *, unit, evidence=None):
            names = {"epsilon0", "n_users"}
            return cls(**{k: v for k, v in parameters.items() if k in names}, unit=unit)

    monkeypatch.setitem(registry._REGISTRY, "test_shuffled", Shuffled)
    good = {"kind": "test_shuffled", "unit": "example", "parameters": {"epsilon0": 1.0, "n_users": 100}}
    assert checked_public_mechanism_from_record(good)[0].n_users == 100
    typo = copy.deepcopy(good)
    typo["parameters"]["n_user"] = 5
    with pytest.raises(ValueError, match="unknown key 'n_user'.*did you mean 'n_users'"):
        checked_public_mechanism_from_record(typo)


# --- claims files that cannot change their meaning (issue 33, item 10) ----------------------------------------------
def test_a_duplicate_key_is_refused_in_every_json_privfed_reads(tmp_path: Path, capsys) -> None:
    """JSON readers keep the last of two equal keys: a file could say ε = 1 to one reader and ε = 8 to another."""
    text = json.dumps(CLAIMS).replace('"claim": {', '"claim": {"epsilon": 99.0, ', 1)
    assert text.count('"epsilon"') > json.dumps(CLAIMS).count('"epsilon"')
    path = tmp_path / "twice.json"
    path.write_text(text)
    assert main(["audit", "--claims", str(path)]) == 2
    error = capsys.readouterr().err
    assert "'epsilon' twice" in error and error.count("\n") == 1
    with pytest.raises(AuditInputError, match="twice"):
        load_claims(path)
    # The shared reader behind ledgers, manifests, signatures and mechanism files.
    from privfed.accounting import Ledger, LedgerFormatError
    from privfed.accounting.documents import parse_json

    with pytest.raises(ValueError, match="'a' twice"):
        parse_json('{"a": 1, "b": {"a": 2, "a": 3}}', "document")
    with pytest.raises(LedgerFormatError, match="twice"):
        Ledger.from_json('{"type": "privfed.ledger", "type": "privfed.ledger"}')
    mechanisms = tmp_path / "m.json"
    mechanisms.write_text('{"mechanisms": [{"kind": "dpsgd", "noise_multiplier": 1.0, "noise_multiplier": 0.1, '
                          '"sample_rate": 0.1, "steps": 1}]}')
    _account_error(mechanisms, capsys, "'noise_multiplier' twice")


def test_a_duplicate_key_in_a_bundle_manifest_or_signature_is_refused(tmp_path: Path) -> None:
    from privfed.bundle.manifest import verify_manifest
    from privfed.bundle.signing import signature_verdict

    manifest = b'{"type": "privfed.bundle.manifest", "type": "privfed.bundle.manifest", "files": {}}'
    with pytest.raises(ValueError, match="twice"):
        verify_manifest({"MANIFEST.json": manifest}, where="bundle")
    pytest.importorskip("cryptography")
    verdict = signature_verdict({"MANIFEST.json": b"{}", "SIGNATURE.json": b'{"type": "x", "type": "y"}'}, None)
    assert verdict.status == "invalid" and "'type' twice" in verdict.detail


def test_defaulted_parameters_are_printed_beside_the_claim(tmp_path: Path, capsys) -> None:
    document = copy.deepcopy(RR_CLAIMS)
    parameters = document["mechanisms"][0]["parameters"]
    parameters.pop("labels_per_report", None)
    parameters.pop("reports", None)
    document["claim"].pop("data_dependent", None)
    path = _write(tmp_path, document)
    main(["audit", "--claims", str(path)])
    out = " ".join(capsys.readouterr().out.split())
    assert "defaults used (not stated in the file):" in out
    for name in ("mechanisms[0].parameters.labels_per_report = 1", "mechanisms[0].parameters.reports = 1",
                 "claim.data_dependent = False"):
        assert name in out, (name, out)


def test_too_deep_claims_are_one_line_not_a_recursion_error(tmp_path: Path, capsys) -> None:
    for depth in (70, 100_000):
        path = tmp_path / f"deep{depth}.json"
        path.write_text('{"claim": ' + "[" * depth + "]" * depth + "}")
        assert main(["audit", "--claims", str(path)]) == 2
        error = capsys.readouterr().err
        assert "nested more than 64 levels deep" in error and error.count("\n") == 1


@pytest.mark.parametrize("argv", [
    ["account", "{path}", "--gamma", "0.04", "--votes-per-unit", "2", "--unit", "party", "--delta", "1e-5"],
    ["account", "{path}.json", "--delta", "1e-5"],
    ["report", "--render", "{path}", "--out", "{path}-out"],
])
def test_a_named_pipe_is_called_a_named_pipe_not_a_missing_file(tmp_path, capsys, argv):
    """A FIFO where a file belongs exists: the one-line error names what it is (it used to say "does not exist")."""
    import os

    path = tmp_path / "votes"
    os.mkfifo(path)
    if argv[1].endswith(".json"):
        os.rename(path, tmp_path / "votes.json")
    assert main([arg.format(path=path) for arg in argv]) == 2
    error = capsys.readouterr().err
    assert "named pipe (FIFO), not a regular file" in error and "does not exist" not in error
