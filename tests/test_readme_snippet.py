"""The README's FedKT snippet, run as written: a useful model on the data it shows, at the ε it states."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def fedkt_snippet() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
    (snippet,) = [block for block in blocks if "privfed.FedKT(" in block]
    return snippet


def test_the_readme_fedkt_snippet_trains_a_useful_model_at_the_stated_epsilon(tmp_path, monkeypatch, capsys):
    import sklearn.linear_model  # noqa: F401  (load BLAS before limiting its threads)
    from threadpoolctl import threadpool_limits

    snippet = fedkt_snippet()
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "too few queries" / "one class" warning
        exec(compile(snippet, "README.md", "exec"), namespace)
    model, split = namespace["model"], namespace["split"]
    accuracy = model.score(split.X_test, split.y_test)
    stated_accuracy = float(re.search(r"≈ (0\.\d+) \(chance: 0\.10\)", snippet).group(1))
    assert accuracy >= 0.5 and abs(accuracy - stated_accuracy) <= 0.05  # chance is 0.1
    stated_epsilon = float(re.search(r"party-level ε = ([\d.]+) at δ = 1e-5", snippet).group(1))
    report = model.ledger_.account()
    assert report.unit == "party" and report.delta == 1e-5
    assert stated_epsilon - 0.1 <= report.epsilon <= stated_epsilon  # the stated ε is an upper bound, and close
    assert (tmp_path / "bundle" / "ledger.json").is_file()
    card = (tmp_path / "bundle" / "MODEL_CARD.md").read_text()  # metrics, data and intended use filled
    assert f"| test_accuracy | {accuracy:.6g} |" in card and "**Test accuracy" in card and "NEAR CHANCE" not in card
    assert "- `public`: shape (500, 64)" in card and "An example on digits, not for real decisions." in card
    printed = capsys.readouterr().out
    assert str(report) in printed
