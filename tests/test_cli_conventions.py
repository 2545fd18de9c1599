"""The command line's conventions: --version, instant help, documented exit codes, checks before work, Ctrl-C."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import privfed
from privfed.cli.command_line import _parser, main

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ("account", "examples", "demo", "audit", "report", "budget")


def _one_error_line(capsys, *needles: str) -> str:
    captured = capsys.readouterr()
    error = captured.err
    assert error.count("\n") == 1, error
    assert "Traceback" not in error
    for needle in needles:
        assert needle in error, (needle, error)
    return error


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


# --- help, version, descriptions -------------------------------------------------------------------------------
def test_version_prints_the_package_version(capsys) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"privfed {privfed.__version__}"


def test_help_imports_neither_numpy_nor_the_accounting_core() -> None:
    code = ("import sys\nfrom privfed.cli import main\n"
            "for argv in (['--help'], *[[c, '--help'] for c in %r]):\n"
            "    assert main(argv) == 0\n"
            "heavy = {'numpy', 'scipy', 'dp_accounting', 'sklearn', 'pandas', 'privfed.accounting'}\n"
            "heavy &= set(sys.modules)\n"
            "assert not heavy, heavy\n") % (COMMANDS,)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_import_privfed_is_lazy_and_names_still_resolve() -> None:
    code = ("import sys, privfed\nassert 'privfed.accounting' not in sys.modules\n"
            "import privfed.cli.audit_command\nfrom privfed.audit import load_claims\n"
            "assert callable(privfed.audit) and privfed.audit.__name__ == 'audit'\n"
            "assert privfed.account.__module__.startswith('privfed.accounting')\n"
            "missing = [n for n in privfed.__all__ if not hasattr(privfed, n)]\nassert not missing, missing\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_has_a_description_an_example_and_its_exit_codes(command: str) -> None:
    parser = _subparsers()[command]
    assert parser.description and len(parser.description) > 40
    assert f"privfed {command}" in parser.epilog and "exit codes:" in parser.epilog


def test_usage_errors_are_one_line_and_exit_2(capsys) -> None:
    assert main([]) == 2
    _one_error_line(capsys, "COMMAND", "--help")
    assert main(["acount"]) == 2
    _one_error_line(capsys, "invalid choice", "account")


# --- privfed examples ------------------------------------------------------------------------------------------
def test_examples_writes_the_shipped_files_and_they_run(tmp_path: Path, capsys) -> None:
    target = tmp_path / "ex"
    assert main(["examples", str(target)]) == 0
    written = {p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()}
    assert {"votes.npy", "pipeline.toml", "pipeline_votes.npy", "report_digits.toml",
            "claims/fedkt_l1_adult.json"} <= written
    assert (target / "votes.npy").read_bytes() == (ROOT / "examples" / "votes.npy").read_bytes()
    listed = capsys.readouterr().out.splitlines()  # one file per line
    assert listed[0] == f"wrote {len(written)} example files to {target}:"
    assert sorted(line.strip() for line in listed[1:1 + len(written)]) == sorted(written)
    assert main(["account", str(target / "votes.npy"), "--gamma", "0.04", "--delta", "1e-5"]) == 0
    assert main(["account", str(target / "pipeline.toml"), "--delta", "1e-5"]) == 0
    assert main(["audit", "--claims", str(target / "claims" / "fedkt_l1_adult.json")]) in (0, 1)


def test_examples_refuses_to_replace_files_and_to_write_into_a_file(tmp_path: Path, capsys) -> None:
    assert main(["examples", str(tmp_path)]) == 0
    (tmp_path / "votes.npy").write_bytes(b"mine")
    capsys.readouterr()
    assert main(["examples", str(tmp_path)]) == 2
    _one_error_line(capsys, "already exists", "--overwrite")
    assert (tmp_path / "votes.npy").read_bytes() == b"mine"
    assert main(["examples", str(tmp_path), "--overwrite"]) == 0
    assert (tmp_path / "votes.npy").read_bytes() == (ROOT / "examples" / "votes.npy").read_bytes()
    capsys.readouterr()
    assert main(["examples", str(tmp_path / "votes.npy")]) == 2
    _one_error_line(capsys, "is a file", "DIR")


# --- checks before work ----------------------------------------------------------------------------------------
@pytest.fixture
def no_training(monkeypatch):
    """Fail the test if the demo starts training."""
    import privfed.cli.demo_command

    def trained(*args, **kwargs):
        raise AssertionError("the demo trained before checking its arguments")

    monkeypatch.setattr(privfed.cli.demo_command, "run_demo", trained)


@pytest.mark.parametrize(
    ("arguments", "needles"),
    [
        (["--gamma", "400"], ["--gamma", "(0, 350]", "700"]),
        (["--gamma", "0"], ["--gamma", "(0, inf)"]),
        (["--gamma", "inf"], ["--gamma"]),
        (["--query-fraction", "0.001"], ["--query-fraction", "[0.002, 1]"]),
        (["--query-fraction", "1.5"], ["--query-fraction", "(0, 1]"]),
        (["--seed", "-1"], ["--seed", ">= 0"]),
    ],
)
def test_demo_checks_its_arguments_before_training(arguments, needles, tmp_path, no_training, capsys) -> None:
    assert main(["demo", "--out", str(tmp_path / "bundle"), *arguments]) == 2
    _one_error_line(capsys, "privfed demo: error:", *needles)


def test_demo_checks_its_output_folder_before_training(tmp_path: Path, no_training, capsys) -> None:
    existing = tmp_path / "file"
    existing.write_text("keep me")
    for out in (existing, existing / "bundle"):
        for flags in ([], ["--overwrite"]):
            assert main(["demo", "--out", str(out), *flags]) == 2
            _one_error_line(capsys, "--out", str(existing))
    assert existing.read_text() == "keep me"
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("")
    assert main(["demo", "--out", str(full)]) == 2
    _one_error_line(capsys, "--out", "not empty", "--overwrite")


@pytest.mark.skipif(not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() == 0,
                    reason="root may write into read-only folders")
def test_an_unwritable_output_folder_is_refused_before_work(tmp_path: Path, no_training, capsys) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert main(["demo", "--out", str(locked / "bundle")]) == 2
    _one_error_line(capsys, "--out", "not writable")
    assert main(["report", "--render", "results.csv", "--out", str(locked / "out")]) == 2
    _one_error_line(capsys, "--out", "not writable")


@pytest.mark.parametrize(
    ("arguments", "needles"),
    [
        (["--gamma", "400", "--delta", "1e-5"], ["--gamma", "(0, 350]", "700"]),
        (["--gamma", "200", "--votes-per-unit", "2", "--delta", "1e-5"], ["--gamma", "(0, 175]", "k = 2"]),
        (["--gamma", "nan", "--delta", "1e-5"], ["--gamma"]),
        (["--gamma", "0.1", "--delta", "0"], ["--delta", "(0, 1)"]),
        (["--gamma", "0.1", "--delta", "1e-5", "--votes-per-unit", "1.5"], ["--votes-per-unit", "integer"]),
    ],
)
def test_account_ranges_are_checked_before_reading(arguments, needles, capsys) -> None:
    assert main(["account", str(ROOT / "examples" / "votes.npy"), *arguments]) == 2
    _one_error_line(capsys, "privfed account: error:", *needles)


def test_npy_only_flags_are_refused_with_a_mechanism_file(capsys) -> None:
    for flag, value in (("--unit", "party"), ("--votes-per-unit", "2"), ("--gamma", "0.1")):
        assert main(["account", str(ROOT / "examples" / "pipeline.toml"), "--delta", "1e-5", flag, value]) == 2
        _one_error_line(capsys, flag, "applies to a .npy vote file")


# --- Ctrl-C ----------------------------------------------------------------------------------------------------
def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys) -> None:
    import importlib

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    # privfed.accounting.account stays the function (it cannot be rebound): patch it in its own module.
    monkeypatch.setattr(importlib.import_module("privfed.accounting.account"), "account", interrupted)
    assert main(["account", str(ROOT / "examples" / "votes.npy"), "--gamma", "0.1", "--delta", "1e-5"]) == 130
    _one_error_line(capsys, "privfed account: interrupted")


def test_a_corrupt_votes_file_never_suggests_unpickling(tmp_path: Path, capsys) -> None:
    cases = {
        "text.npy": (b"queries,classes\n1,2\n", "not a NumPy .npy file"),
        "garbage.npy": (bytes(range(256)) * 4, "not a NumPy .npy file"),
        "truncated.npy": ((ROOT / "examples" / "votes.npy").read_bytes()[:200], "truncated or corrupt"),
    }
    for name, (content, message) in cases.items():
        (tmp_path / name).write_bytes(content)
        assert main(["account", str(tmp_path / name), "--gamma", "0.1", "--delta", "1e-5"]) == 2
        error = _one_error_line(capsys, "VOTES file", name, message)
        assert "allow_pickle" not in error
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert main(["account", str(tmp_path / "objects.npy"), "--gamma", "0.1", "--delta", "1e-5"]) == 2
    error = _one_error_line(capsys, "VOTES file", "holds Python objects", "never unpickles")
    assert "allow_pickle" not in error
    (tmp_path / "folder.npy").mkdir()
    assert main(["account", str(tmp_path / "folder.npy"), "--gamma", "0.1", "--delta", "1e-5"]) == 2
    _one_error_line(capsys, "folder.npy' is a folder")


# --- privfed report: failed runs, Ctrl-C, resuming --------------------------------------------------------------
SWEEP = """
name = "cli-conventions"
seeds = [0]
[pipeline]
estimator = "FedKT"
[pipeline.params]
n_partitions = 1
n_teachers = 2
privacy = "L1"
[pipeline.models.teacher]
class = "sklearn.tree.DecisionTreeClassifier"
params = { max_depth = 3 }
[data]
sklearn = "load_iris"
[split]
n_parties = 2
beta = "homogeneous"
public_size = 40
test_size = 40
[grid]
gamma = [0.5, 1.0]
query_fraction = [0.5]
"""


@pytest.fixture
def sweep_file(tmp_path: Path) -> Path:
    pytest.importorskip("pandas")
    pytest.importorskip("matplotlib")
    path = tmp_path / "sweep.toml"
    path.write_text(SWEEP)
    return path


def test_report_exits_3_with_one_line_per_distinct_failure(sweep_file: Path, tmp_path: Path, capsys) -> None:
    # 100 teachers for parties of 35 rows: only the data tells, so fit refuses it run by run.
    sweep_file.write_text(SWEEP.replace("n_teachers = 2", "n_teachers = 100"))
    assert main(["report", str(sweep_file), "--out", str(tmp_path / "out"), "--no-progress"]) == 3
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "privfed report: 2 of 2 runs failed:" in lines[0] and "n_teachers" in lines[0]


def test_report_checks_every_grid_value_before_the_first_run(sweep_file: Path, tmp_path: Path, capsys) -> None:
    """A value the estimator refuses whatever the data (n_teachers = 0, a negative gamma in the grid): exit 2,
    one line naming the run's values, before any run (no output folder)."""
    for old, new, needle in (("n_teachers = 2", "n_teachers = 0", "n_teachers"),
                             ("gamma = [0.5, 1.0]", "gamma = [0.5, -1.0]", "gamma = -1.0")):
        sweep_file.write_text(SWEEP.replace(old, new))
        assert main(["report", str(sweep_file), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
        _one_error_line(capsys, "checked before any run", needle)
        assert not (tmp_path / "out").exists()


def test_ctrl_c_says_how_many_runs_are_saved_and_a_rerun_reuses_them(sweep_file, tmp_path, monkeypatch, capsys):
    import privfed.reports.sweep as sweep

    real, calls = sweep._run_point, []

    def interrupt_the_second(task):
        calls.append(task)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(task)

    out = tmp_path / "out"
    monkeypatch.setattr(sweep, "_run_point", interrupt_the_second)
    assert main(["report", str(sweep_file), "--out", str(out), "--no-progress"]) == 130
    error = capsys.readouterr().err
    assert error == "privfed report: interrupted after 1 of 2 runs; rerun the same command to resume\n"
    monkeypatch.setattr(sweep, "_run_point", real)
    assert main(["report", str(sweep_file), "--out", str(out), "--no-progress"]) == 0
    assert "resuming: reusing 1 of 2 runs" in capsys.readouterr().err


def test_messages_name_the_real_problem(tmp_path: Path, capsys) -> None:
    """A folder given to account, a missing audit target, a missing signing key, a missing vote file, a flag typo."""
    (tmp_path / "folder").mkdir()
    assert main(["account", str(tmp_path / "folder"), "--delta", "1e-5"]) == 2
    _one_error_line(capsys, "is a folder; give a vote matrix (.npy) or a mechanism file")
    assert main(["account", str(tmp_path / "absent.npy"), "--delta", "1e-5"]) == 2
    _one_error_line(capsys, "VOTES file", "does not exist")
    assert main(["audit", str(tmp_path / "missing-dir")]) == 2
    _one_error_line(capsys, "missing-dir' does not exist")
    assert main(["sign", str(tmp_path / "folder"), "--key", str(tmp_path / "nokey.pem")]) == 2
    _one_error_line(capsys, "--key", "nokey.pem' does not exist")
    assert main(["account", "votes.npy", "--gama", "1", "--delta", "1e-5"]) == 2
    _one_error_line(capsys, "unrecognized arguments: --gama 1; did you mean '--gamma'?")
