"""docs/results.md, "Accounting throughput" and "Speed where a user waits (issue 34)"."""

from __future__ import annotations

import re
from typing import Any

from privfed.accounting.report import round_up

from bench.tables import table

ACCOUNTING = "bench/results/accounting_throughput.json"
SAVE_BUNDLE = "bench/results/save_bundle_memo.json"
ACCOUNT_MEMORY = "bench/results/account_memory.json"
ACCOUNT_MEMORY_BASE = "cdb409f"  # bench/account_memory.py's default --base: the commit before the no-copy change


def accounting_markdown(document: dict[str, Any]) -> str:
    """``bench/accounting.py``'s measurements: the whole run per analysis, and the loop against the vectorised path
    on the same slice."""
    settings = document["provenance"]["settings"]
    queries, part = settings["queries"], settings["slice"]
    lines = [f"| analysis (RDP orders) | {queries:,} queries: s (queries/s) "
             f"| ε (data-independent), δ = {settings['delta']:g} | {part:,}-query slice: loop s (queries/s) "
             "| vectorised s | speed-up on the slice | whole-run rate ÷ loop rate |", "|---|---|---|---|---|---|---|"]
    for row in document["rows"]:
        lines.append(
            f"| {row['analysis']} ({row['orders']}) | {row['seconds']:.3f} ({queries / row['seconds']:,.0f}) | "
            f"{round_up(row['epsilon'], 6)} ({round_up(row['epsilon_data_independent'], 6)}) | "
            f"{row['loop_seconds']:.3f} ({part / row['loop_seconds']:,.0f}) | {row['vectorised_seconds']:.4f} | "
            f"×{row['loop_seconds'] / row['vectorised_seconds']:.0f} | "
            f"×{(queries / row['seconds']) / (part / row['loop_seconds']):.0f} |")
    return "\n".join(lines)


def _ratio(value: float) -> str:
    return f"{value:.2g}"


def user_waits_markdown(documents: list[Any]) -> str:
    """The issue-34 speed table: ``save_bundle`` with and without the PLD memo, and the peak memory of
    ``privfed.account`` on large vote matrices before and after the no-copy change."""
    bundle, memory = documents
    rounds = len({row["round"] for row in bundle["rows"]})
    best = bundle["best_seconds"]
    lines = ["| what | before | after | ratio | command |", "|---|---|---|---|---|",
             f"| `save_bundle` of the README's FedKT snippet (40 parties, Gaussian aggregator), best of {rounds} | "
             f"{best['before']:.2f} s (no PLD memo: `PLDMemo(0)`) | {best['after']:.2f} s (a fresh `PLDMemo(256)` "
             f"per save) | ×{bundle['ratio_before_over_after']:.0f} | `{bundle['command']}` |"]
    base = re.search(r"--base (\S+)", memory["command"])
    names = {"laplace": "LaplaceNoisyMax", "gaussian": "GaussianNoisyMax"}
    for index, mechanism in enumerate(dict.fromkeys(row["mechanism"] for row in memory["rows"])):
        sides = {row["side"]: row for row in memory["rows"] if row["mechanism"] == mechanism}
        before, after = sides["before"], sides["after"]
        if before["epsilon"] != after["epsilon"]:
            raise ValueError(f"{ACCOUNT_MEMORY}: the two sides of {mechanism} report different ε")
        classes = before["votes_bytes"] // (8 * before["queries"])
        size = (f"{before['queries']:,} × {classes} int64 votes ({before['votes_bytes'] / 1e6:.0f} MB)" if index == 0
                else f"{before['queries']:,} × {classes} votes")
        commit = f" (commit {base.group(1) if base else ACCOUNT_MEMORY_BASE})" if index == 0 else ""
        command = f"`{memory['command']}`" if index == 0 else "(same run)"
        lines.append(f"| `privfed.account({names[mechanism]})` on {size}: peak extra memory | "
                     f"{before['peak_over_votes']:.3f}×{' the votes' if index == 0 else ''}{commit} | "
                     f"{after['peak_over_votes']:.3f}× | "
                     f"÷{_ratio(before['peak_over_votes'] / after['peak_over_votes'])} | {command} |")
    return "\n".join(lines)


table("accounting-throughput", raw=[ACCOUNTING])(lambda documents: accounting_markdown(documents[0]))
table("speed-user-waits", raw=[SAVE_BUNDLE, ACCOUNT_MEMORY])(user_waits_markdown)
