"""CPU time of a benchmark's worker processes, read from /proc (joblib's and Flower's workers are its descendants)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["descendants_cpu"]


def descendants_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of each live descendant process of this one (joblib's workers), from /proc."""
    parents, cpu = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        cpu[int(entry.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    mine, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - mine
        mine |= frontier
    return {pid: cpu[pid] for pid in mine}
