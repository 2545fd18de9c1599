"""docs/results.md, "The f-DP one-run estimate beside Steinke et al.'s bound (issue 41)"."""

from __future__ import annotations

from typing import Any

from bench.tables import table


def _fdp_audit(documents: list[Any]) -> str:
    from bench.fdp_audit import table as render  # the script's renderer

    return render(documents[0])


table("fdp-audit", raw=["bench/results/fdp_audit.json"])(_fdp_audit)
