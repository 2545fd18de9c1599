"""docs/results.md's coverage table: every headline result of the four papers, each with a status and a reason."""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.tables import coverage  # noqa: E402

DOCUMENT = json.loads((ROOT / coverage.COVERAGE).read_text(encoding="utf-8"))


def _results(paper_prefix: str) -> list[str]:
    paper = next(paper for paper in DOCUMENT["papers"] if paper["paper"].startswith(paper_prefix))
    return [result["result"] for result in paper["results"]]


@pytest.mark.parametrize(("paper", "headlines"), [
    ("FedKT", [f"Table {number}" for number in range(1, 10)]),
    ("FedKD", [f"Table {number}" for number in range(1, 6)] + ["Fig. 2 left", "Fig. 2 right"]),
    ("PrivateKT", ["result figures", "round 100", "round 500"]),
    ("Selective-FD", ["Table 1", "Fig. 4", "Fig. 5", "Fig. 6", "Fig. 7"]),
])
def test_every_headline_result_of_each_paper_is_listed(paper, headlines):
    listed = " ; ".join(_results(paper))
    named = set(re.findall(r"Tables? (\d)(?: and (\d))?", listed))
    numbers = {number for pair in named for number in pair if number}
    for headline in headlines:
        table = re.fullmatch(r"Table (\d)", headline)
        assert (table.group(1) in numbers) if table else headline in listed, f"{paper}: {headline} is not listed"


def test_a_result_short_of_reproduced_without_a_reason_is_refused():
    document = copy.deepcopy(DOCUMENT)
    short = next(result for result in document["papers"][0]["results"]
                 if result["status"] not in ("reproduced", "settings"))
    short["reason"] = None
    with pytest.raises(ValueError, match="needs its reason"):
        coverage.coverage_markdown([document])


def test_a_table_the_page_does_not_register_is_refused():
    document = copy.deepcopy(DOCUMENT)
    document["papers"][0]["results"][0]["tables"] = ["no-such-table"]
    with pytest.raises(ValueError, match=r"tables \['no-such-table'\] are not registered"):
        coverage.coverage_markdown([document])


def test_an_unknown_status_is_refused():
    document = copy.deepcopy(DOCUMENT)
    document["papers"][0]["results"][0]["status"] = "sort of"
    with pytest.raises(ValueError, match="status 'sort of' is not one of"):
        coverage.coverage_markdown([document])
