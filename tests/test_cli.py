"""The ``privfed account`` command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from privfed.accounting import LaplaceNoisyMax, account

from privfed import accounting
from privfed.cli import main

EXAMPLE_VOTES = Path(__file__).resolve().parents[1] / "examples" / "votes.npy"


@pytest.fixture
def votes_file(tmp_path: Path) -> Path:
    path = tmp_path / "votes.npy"
    np.save(path, np.array([[40, 2], [25, 17], [30, 12]]))
    return path


def test_text_report(votes_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["account", str(votes_file), "--gamma", "0.04", "--votes-per-unit", "2", "--unit", "party", "--delta", "1e-5"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "party-level" in out and "DATA-DEPENDENT" in out and "tight analysis" in out


def test_json_report_equals_the_python_api(votes_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["account", str(votes_file), "--gamma", "0.04", "--delta", "1e-5", "--analysis", "classic", "--json"])
    data = json.loads(capsys.readouterr().out)
    expected = account(LaplaceNoisyMax(np.load(votes_file), 0.04), delta=1e-5, analysis="classic")
    assert code == 0 and data["epsilon"] == expected.epsilon and data["analysis"] == "classic"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--gamma", "0", "--delta", "1e-5"], "gamma"),
        (["--gamma", "0.1", "--delta", "1.5"], "delta"),
        (["--gamma", "0.1", "--delta", "1e-5", "--votes-per-unit", "0"], "--votes-per-unit"),
        (["--delta", "1e-5"], "--gamma"),
    ],
)
def test_bad_input_exits_2_with_one_line(votes_file: Path, arguments: list[str], message: str, capsys) -> None:
    assert main(["account", str(votes_file), *arguments]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_unreadable_and_pickled_files_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["account", str(tmp_path / "missing.npy"), "--gamma", "0.1", "--delta", "1e-5"]) == 2
    pickled = tmp_path / "objects.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert main(["account", str(pickled), "--gamma", "0.1", "--delta", "1e-5"]) == 2
    assert "holds Python objects" in capsys.readouterr().err


def test_installed_command_runs_on_the_shipped_example() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "privfed", "account", str(EXAMPLE_VOTES), "--gamma", "0.04",
         "--votes-per-unit", "2", "--unit", "party", "--delta", "1e-5"],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ε = ")


def test_mechanism_file_is_accounted_like_the_python_api(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    np.save(tmp_path / "votes.npy", np.array([[30, 2, 1], [20, 15, 0]]))
    (tmp_path / "pipeline.toml").write_text(
        '[[mechanisms]]\nkind = "dpsgd"\nnoise_multiplier = 1.0\nsample_rate = 0.02\nsteps = 300\n\n'
        '[[mechanisms]]\nkind = "laplace_noisy_max"\nvotes = "votes.npy"\ngamma = 0.1\n'
    )
    assert main(["account", str(tmp_path / "pipeline.toml"), "--delta", "1e-5", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    from privfed.accounting import DPSGD

    expected = account([DPSGD(1.0, 0.02, 300), LaplaceNoisyMax(np.load(tmp_path / "votes.npy"), 0.1)], delta=1e-5)
    assert data["epsilon"] == expected.epsilon
    assert [m["kind"] for m in data["mechanisms"]] == ["dpsgd", "laplace_noisy_max"]


def test_mechanism_file_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[[mechanisms]]\nkind = 'no_such_kind'\n")
    assert main(["account", str(bad), "--delta", "1e-5"]) == 2
    assert "kind" in capsys.readouterr().err
    broken = tmp_path / "broken.toml"
    broken.write_text("[[mechanisms]\n")
    assert main(["account", str(broken), "--delta", "1e-5"]) == 2
    assert main(["account", str(bad), "--delta", "1e-5", "--gamma", "0.1"]) == 2
    assert "--gamma applies to a .npy" in capsys.readouterr().err


def test_demo_writes_a_bundle_whose_ledger_matches_the_printout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import privfed

    out = tmp_path / "bundle"
    assert main(["demo", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    model, ledger = privfed.load_bundle(out)
    report = ledger.account(unit="party")
    assert f"ε = {accounting.report.round_up(report.epsilon)}" in printed and "party-level" in printed
    assert hasattr(model, "predict") and (out / "MODEL_CARD.md").is_file()
    card = (out / "MODEL_CARD.md").read_text()  # metrics, data and intended use filled
    assert "| test_accuracy |" in card and "- `public`: shape" in card and "not for any real decision" in card
    assert main(["demo", "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
