"""docs/reports.md's Adult example re-renders from its committed raw results (issue 36)."""

from __future__ import annotations

import re
from pathlib import Path

from privfed.cli import main

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "bench" / "results" / "reports_adult_table8" / "results.csv"


def _tables(text: str) -> list[str]:
    return [match.group(0) for match in re.finditer(r"(?m)^\|.*\|\n\| ---.*\|\n(?:\|.*\|\n?)+", text)]


def test_the_adult_report_pages_are_rendered_from_the_committed_results(tmp_path):
    assert main(["report", "--render", str(RAW), "--out", str(tmp_path / "out")]) == 0
    rendered = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    page = (ROOT / "docs" / "reports-example-adult.md").read_text(encoding="utf-8")
    lines = [line for line in page.split("\n") if not line.startswith(("Plot: ", "![ε versus accuracy]"))]
    assert lines == [line for line in rendered.split("\n") if not line.startswith(("Plot: ", "![ε versus accuracy]"))]
    guide = (ROOT / "docs" / "reports.md").read_text(encoding="utf-8")
    section = guide[guide.index("### Rendered example: FedKT's Table 8 shape on Adult"):]
    copied = _tables(section[:section.index("How to read it")])
    assert len(copied) == 2 and all(table.strip() in rendered for table in copied)
