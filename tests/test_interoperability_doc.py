"""docs/interoperability.md, run as written: each example prints exactly the output the page shows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "interoperability.md"


def _examples() -> list[tuple[str, str]]:
    """(python block, the text block printed after it) for every worked example."""
    text = DOC.read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```\n\nprints\n\n```text\n(.*?)```", text, flags=re.DOTALL)


def test_the_page_has_one_worked_example_per_library():
    examples = _examples()
    assert len(examples) == 3
    assert ["dp_accounting" in code for code, _ in examples] == [True, False, False]
    assert "opacus" in examples[1][0] and "flwr" in examples[2][0]


@pytest.mark.parametrize("index, library", [(0, "dp_accounting"), (1, "opacus"), (2, "flwr")])
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_each_example_runs_and_prints_what_the_page_shows(index, library, capsys):
    pytest.importorskip(library)
    if library == "opacus":
        pytest.importorskip("torch")
    code, shown = _examples()[index]
    namespace: dict = {}
    exec(compile(code, f"interoperability.md example {index + 1}", "exec"), namespace)
    assert capsys.readouterr().out == shown
    if library == "flwr":  # the 100 per-round compositions are one self-composition in the ledger
        (entry,) = namespace["ledger"].entries
        assert entry.analyses["party"].parameters["event"]["count"] == 100


def test_readme_links_the_page():
    readme = (DOC.parents[1] / "README.md").read_text(encoding="utf-8")
    assert "[docs/interoperability.md](docs/interoperability.md)" in readme
