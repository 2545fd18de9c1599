"""docs/results.md, "A silo's budget check (issue 42)": the first check of a silo's ledger, whole-file scan against
the checked state, and a new process's imports."""

from __future__ import annotations

from typing import Any

from bench.tables import table

RAW = "bench/results/silo_budget/silo_budget.json"


@table("silo-budget-checks", raw=(RAW,))
def silo_budget_checks(documents: list[Any]) -> str:
    """Each figure the median of the run's repeats, pinned to 2 cores (bench/silo_budget.py)."""
    (document,) = documents
    lines = ["| releases in the ledger | file size | first check, whole file scanned | first check, from the checked "
             "state | new process: check / imports / wall | charge (fsync included) |",
             "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in document["timing"]:
        spawned = row["new_process"]
        lines.append(f"| {row['releases']:,} | {row['file_bytes'] / 2**20:.2f} MiB | {row['full_scan_ms']:.1f} ms | "
                     f"{row['cold_check_ms']:.1f} ms | {spawned['check_ms']:.1f} ms / {spawned['import_ms']:,.0f} ms / "
                     f"{spawned['wall_ms']:,.0f} ms | {row['charge_ms']:.1f} ms |")
    return "\n".join(lines)
