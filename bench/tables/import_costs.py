"""docs/results.md, "Fresh-process costs (issues 45, 46)": the table of ``bench/import_costs.py``'s raw results."""

from __future__ import annotations

from bench.tables import table


def _cell(row: dict | None) -> str:
    if row is None:
        return "—"
    return f"{row['cpu_s_median']:.2f} CPU s, {row['peak_rss_mb_median']:.0f} MB"


def markdown(document: dict) -> str:
    """One row per entry point: before and after (median CPU seconds and peak RSS), then the floor below them."""
    summary = document["summary"]
    lines = ["| entry point (fresh process) | before | after | after / before (CPU) |", "|---|---|---|---|"]
    for name, sides in summary.items():
        if "floor" in sides:
            continue
        before, after = sides.get("before"), sides.get("after")
        ratio = f"×{after['cpu_s_median'] / before['cpu_s_median']:.2f}" if before and after else "—"
        lines.append(f"| {name} | {_cell(before)} | {_cell(after)} | {ratio} |")
    lines += ["", "| floor: imported alone (this tree) | median |", "|---|---|"]
    lines += [f"| {name} | {_cell(sides['floor'])} |" for name, sides in summary.items() if "floor" in sides]
    return "\n".join(lines)


table("import-costs", raw=["bench/results/import_costs.json"])(lambda documents: markdown(documents[0]))
