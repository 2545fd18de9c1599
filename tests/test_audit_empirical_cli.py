"""``privfed audit --empirical CONFIG.toml``: one pipeline run with canaries from the command line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from privfed.cli import main

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "audit_fedkt_l1.toml"


def test_the_example_config_prints_claim_bound_confidence_and_verdict(capsys):
    assert main(["audit", "--empirical", str(CONFIG)]) == 0
    lines = capsys.readouterr().out.splitlines()
    fields = {line.split()[0]: line for line in lines[1:]}
    assert fields["claimed"].startswith("claimed ε     1.000 at δ = 0 ")  # the Laplace noisy max: pure ε-DP
    bound = float(re.search(r"lower bound\s+([0-9.]+) at 95% confidence", fields["lower"]).group(1))
    assert 0 <= bound <= 1.0
    assert fields["verdict"].startswith("verdict       PASS: no violation found")
    assert "(Steinke, Nasr and Jagielski: any mechanism;" in fields["lower"]  # which bound is which
    assert re.match(r"f-DP bound    μ ≥ [0-9.]+ at 95% confidence \(Mahloujifar, Melis and Chaudhuri", fields["f-DP"])
    assert fields["f-DP"].endswith("no ε at δ = 0 (a Gaussian trade-off curve is never pure DP)")  # a pure claim


def test_json_output(capsys):
    assert main(["audit", "--empirical", str(CONFIG), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["unit"] == "party" and result["num_canaries"] == 400 and result["claimed_epsilon"] == \
        pytest.approx(1.0) and result["violation"] is False and result["details"]["design"] == "fedkt-l1"


def test_the_docs_command_block_runs_as_written(tmp_path, monkeypatch, capsys):
    doc = (ROOT / "docs" / "audit.md").read_text(encoding="utf-8")
    block = re.search(r"<a id=\"empirical-cli\"></a>.*?```bash\n(.*?)```", doc, flags=re.DOTALL).group(1)
    monkeypatch.chdir(tmp_path)
    for line in block.strip().splitlines():
        assert line.startswith("privfed "), line
        assert main(line.split()[1:]) == 0, line
    assert "verdict       PASS" in capsys.readouterr().out
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (line,) = [line for line in readme.splitlines() if line.startswith("privfed audit --empirical")]
    assert main(line.split("#")[0].split()[1:]) == 0  # the README's line, after `privfed examples ex`


def _config(tmp_path: Path, edit) -> str:
    text = edit(CONFIG.read_text(encoding="utf-8"))
    path = tmp_path / "audit.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda text: text.split("[audit]")[0], "[audit]"),
    (lambda text: text.replace("num_canaries = 400", "num_canaries = 1"), "audit.num_canaries"),
    (lambda text: text.replace("confidence = 0.95", "confidance = 0.95"), "audit.confidance"),
    (lambda text: text.replace("seeds = [0]", "seeds = [0, 1]"), "one seed"),
    (lambda text: text + "\n[grid]\ngamma = [0.1, 0.2]\n", "[grid]"),
    (lambda text: text.replace('privacy = "L1"', 'privacy = "L0"'), "L0"),
    (lambda text: text.replace("gamma = 0.25", "gama = 0.25"), "gama"),
])
def test_bad_configs_exit_2_with_one_line(tmp_path, capsys, edit, message):
    assert main(["audit", "--empirical", _config(tmp_path, edit)]) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1


def test_empirical_is_alone(tmp_path, capsys):
    assert main(["audit", "somewhere", "--empirical", str(CONFIG)]) == 2
    assert "--empirical" in capsys.readouterr().err


def test_an_audit_too_small_to_refute_the_claim_says_so(tmp_path, capsys):
    """10 canaries (40 queries each: a claim of 40): every guess right would bound ε by 0.597 only."""
    config = _config(tmp_path, lambda text: text.replace("num_canaries = 400", "num_canaries = 10"))
    assert main(["audit", "--empirical", config]) == 0
    out = capsys.readouterr().out
    assert "verdict       PASS, but this audit CANNOT refute the claim: even every guess right bounds ε by 0.597" in out
    assert "at most 0.597 with every guess right" in out
    assert main(["audit", "--empirical", config, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["can_refute"] is False and result["max_lower_bound"] == pytest.approx(0.598, abs=1e-3)
