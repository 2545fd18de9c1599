"""docs/results.md, "What of each paper this page covers": every headline result of the four papers with its
status (reproduced / reduced scale / not attempted), the reason and the tables of the page that show it.

The list is curated by hand in ``bench/results/paper_coverage.json`` (issue 44) from the papers' texts in
``../shared/papers``; rendering it checks that every status is one the file defines, that every result short of
"reproduced" gives its reason, and that every table it names is registered, so the list cannot point at a table
the page no longer has.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from bench.tables import load_all, table

COVERAGE = "bench/results/paper_coverage.json"
ORDER = ("reproduced", "reduced scale", "not attempted", "settings")


def _checked(document: dict[str, Any]) -> None:
    registered = load_all()
    for paper in document["papers"]:
        for result in paper["results"]:
            where = f"{COVERAGE}: {paper['paper']}, {result['result']}"
            if result["status"] not in document["statuses"]:
                raise ValueError(f"{where}: status {result['status']!r} is not one of {sorted(document['statuses'])}")
            if result["status"] in ("reduced scale", "not attempted") and not result["reason"]:
                raise ValueError(f"{where}: a result with status {result['status']!r} needs its reason")
            unknown = [name for name in result["tables"] if name not in registered]
            if unknown:
                raise ValueError(f"{where}: tables {unknown} are not registered in bench.tables")


def coverage_markdown(documents: list[Any]) -> str:
    """The statuses' meanings, one line of counts per paper, then one row per headline result."""
    document = documents[0]
    _checked(document)
    lines = [f"*{status}*: {meaning}." for status, meaning in document["statuses"].items()]
    lines.append("")
    for paper in document["papers"]:
        counts = Counter(result["status"] for result in paper["results"])
        lines.append(f"{paper['paper']}: " + ", ".join(f"{counts[status]} {status}" for status in ORDER
                                                     if counts[status]) + ".")
    lines += ["", "| paper | result | status | reason | what was run, or why not | tables on this page |",
              "|---|---|---|---|---|---|"]
    for paper in document["papers"]:
        short = paper["paper"].split(" (")[0]
        for result in paper["results"]:
            tables = ", ".join(f"`{name}`" for name in result["tables"]) or "–"
            lines.append(f"| {short} | {result['result']} | {result['status']} | {result['reason'] or '–'} | "
                         f"{result['detail']} | {tables} |")
    return "\n".join(lines)


table("paper-coverage", raw=[COVERAGE])(coverage_markdown)
