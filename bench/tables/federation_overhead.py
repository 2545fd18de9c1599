"""docs/results.md, "Federation start-up: `simulate` and `privfed federation local` beside the fit (issue 46)"."""

from __future__ import annotations

import statistics
from typing import Any

from bench.tables import table

OVERHEAD = "bench/results/federation_overhead.json"
#: How the tables name each side of bench/federation_overhead.py.
SIDE_NAMES = {
    "fit": "`fit` in one process",
    "simulate, in-process": "`simulate(..., backend=\"in-process\")`",
    "simulate, ray": "`simulate` on Ray (the default)",
    "simulate, ray (before)": "`simulate` on Ray, before",
    "local": "`privfed federation local --run`",
    "local (before)": "`privfed federation local --run`, before",
}
#: The processes of a `local` run, grouped by what they are (bench/federation_overhead.py names each).
KINDS = ("flwr-clientapp", "flwr-serverapp", "flower-superlink", "flower-supernode", "flower-superexec", "flwr run",
         "python -m privfed")


def _each(values: list[float], digits: int = 1) -> str:
    return ", ".join(f"{value:.{digits}f}" for value in values)


def _ratios(values: list[float]) -> str:
    return ", ".join(f"×{value:.2f}" for value in values)


@table("federation-overhead", raw=[OVERHEAD])
def federation_overhead(documents: list[Any]) -> str:
    document = documents[0]
    fits = document["sides"]["fit"]
    lines = ["| side (each repeat) | processes | CPU s, all processes | × the fit's CPU | wall s | × the fit's wall "
             "| peak MiB, summed over processes | import CPU s / the fit call's CPU s (fresh-process sides) |",
             "|---|---|---|---|---|---|---|---|"]
    for side, runs in document["sides"].items():
        if not runs:
            continue
        failed = sum(bool(run.get("failed")) for run in runs)
        cpu = [run["cpu_s_all_processes"] for run in runs]
        wall = [run["wall_s"] for run in runs]
        calls = ", ".join(f"{run['import_cpu_s']:.2f} / {run['fit_cpu_s']:.2f}" for run in runs
                          if "fit_cpu_s" in run) or "—"
        name = SIDE_NAMES[side] + (f" ({failed} of {len(runs)} FAILED)" if failed else "")
        lines.append(
            f"| {name} | {', '.join(str(len(run['processes'])) for run in runs)} | {_each(cpu)} "
            f"| {_ratios([c / fit['cpu_s_all_processes'] for c, fit in zip(cpu, fits)])} | {_each(wall)} "
            f"| {_ratios([w / fit['wall_s'] for w, fit in zip(wall, fits)])} "
            f"| {_each([run['peak_mib_summed'] for run in runs], 0)} | {calls} |")
    loads = [run["load_1min_after"] for runs in document["sides"].values() for run in runs]
    before = document.get("before", "")
    return "\n".join(lines) + (
        f"\n\n{document['sites']} sites of digits, FedKT-L1 (the documented example's run configuration); each side in "
        f"fresh processes, the sides alternating, {len(fits)} repeats; ratios pair a side with the fit of the same "
        f"repeat. 1-minute load {min(loads):.1f}–{max(loads):.1f}. *Before*: the code at {before[:10]} (this "
        "branch's base on main).")


@table("federation-local-processes", raw=[OVERHEAD])
def federation_local_processes(documents: list[Any]) -> str:
    document = documents[0]
    columns = [side for side in ("local", "local (before)") if document["sides"].get(side)]
    lines = ["| process (`privfed federation local --run`) | " + " | ".join(
        f"{SIDE_NAMES[side]}: count, CPU s in all (each) | peak MiB each" for side in columns) + " |",
             "|---|" + "---|---|" * len(columns)]
    for kind in KINDS:
        cells = []
        for side in columns:
            runs = document["sides"][side]
            mine = [[p for p in run["processes"] if p["name"] == kind] for run in runs]
            counts = sorted({len(processes) for processes in mine})
            totals = [sum(p["cpu_s"] for p in processes) for processes in mine]
            each = [p["cpu_s"] for processes in mine for p in processes] or [0.0]
            peaks = [p["peak_mib"] for processes in mine for p in processes] or [0.0]
            cells.append(f"{'/'.join(map(str, counts))}, {_each(totals)} ({min(each):.1f}–{max(each):.1f}) "
                         f"| {statistics.median(peaks):.0f}")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + ("\n\nCPU s in all: per repeat; in brackets the range over single processes. "
                               "Other processes (Ray's, helpers that lived under 0.2 s) are left out.")


@table("federation-floors", raw=[OVERHEAD])
def federation_floors(documents: list[Any]) -> str:
    document = documents[0]
    before = document.get("floors_before", {})
    lines = ["| a fresh interpreter that imports … | CPU s | peak MiB | before: CPU s, peak MiB |", "|---|---|---|---|"]
    for name, floor in document["floors"].items():
        old = before.get(name)
        then = f"{old['cpu_s']:.2f}, {old['peak_mib_summed']:.0f}" if old else "—"
        lines.append(f"| {name} | {floor['cpu_s']:.2f} | {floor['peak_mib_summed']:.0f} | {then} |")
    return "\n".join(lines)
