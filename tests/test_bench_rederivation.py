"""docs/results.md's issue-33 re-derivation table is the rendering of the committed raw results."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_rederivation_table_is_rendered_from_the_committed_results():
    path = ROOT / "bench" / "rederivation.py"
    spec = importlib.util.spec_from_file_location("bench_rederivation", path)
    module = importlib.util.module_from_spec(spec)
    path_before = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = path_before
    document = json.loads((ROOT / "bench" / "results" / "rederivation_issue33.json").read_text(encoding="utf-8"))
    assert {row["item"] for row in document["rows"]} == {1, 2, 3, 4, 5, 9}
    assert module.render(document) in (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
