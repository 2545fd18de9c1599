"""docs/your-data.md, run as written: three hospitals' CSV files to an audited bundle, printing what it shows."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "your-data.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_the_your_data_walkthrough_runs_and_prints_what_it_shows(tmp_path, monkeypatch, capsys):
    pytest.importorskip("pandas")
    from privfed.cli import main
    from privfed.evaluation import is_near_chance

    monkeypatch.chdir(tmp_path)
    make_files, train = blocks("python")[:2]
    namespace: dict = {}
    exec(compile(make_files, "your-data.md step 1", "exec"), namespace)
    assert sorted(p.name for p in tmp_path.glob("*.csv")) == [
        "hospital_a.csv", "hospital_b.csv", "hospital_c.csv", "public.csv", "test.csv"]
    exec(compile(train, "your-data.md step 2", "exec"), namespace)
    printed = capsys.readouterr().out.splitlines()
    shown = blocks("text")[0].splitlines()
    assert len(printed) == len(shown)
    for got, expected in zip(printed, shown):
        prefix = expected.split("...")[0]  # the doc abbreviates the long analysis text
        assert got.startswith(prefix) and (expected.count("...") or got == expected), (got, expected)
    y_test = namespace["y_test"]
    majority = f"{np.bincount(y_test).max() / len(y_test):.3f}"
    assert f"The majority class alone scores {majority} on these {len(y_test)} test patients" in DOC.read_text()

    card = (tmp_path / "hospitals-bundle" / "MODEL_CARD.md").read_text()  # metrics, data, intended use filled
    accuracy = float(re.search(r"\| test_accuracy \| ([0-9.]+) \|", card).group(1))  # follows the secret noise
    assert 0.0 <= accuracy <= 1.0 and "- `test`: shape (69, 30)" in card
    near_chance = is_near_chance(accuracy, np.bincount(y_test).max() / len(y_test))
    assert "not for diagnosis" in card and ("NEAR CHANCE" in card) == near_chance
    (audit,) = [line for line in blocks("bash")[0].splitlines() if line.startswith("python -m privfed audit")]
    assert main(audit.split()[3:]) == 0
    assert "PASS" in capsys.readouterr().out
