"""docs/results.md, "Secure aggregation that scales, accounting targets, FedKT's memory (issue 46)"."""

from __future__ import annotations

from typing import Any

from bench.tables import table

SCALING = "bench/results/secaggplus_scaling.json"
ACCOUNTING = "bench/results/accounting_targets.json"
MEMORY = "bench/results/fedkt_memory.json"
IDEAL_NS = 7.0  # issue 46's estimate of the ideal classic Laplace cost per query


def _ratios(values: list[float]) -> str:
    return ", ".join(f"×{value:.2f}" for value in values)


@table("secaggplus-scaling", raw=[SCALING])
def secaggplus_scaling(documents: list[Any]) -> str:
    lines = ["| parties n | window m / threshold t (dropouts) | plain CPU s | window CPU s (× plain, per repeat) "
             "| every party with every other: CPU s (× plain) | bytes per party: plain / window / everyone "
             "| Flower's cryptography per party: window (everyone) |", "|---|---|---|---|---|---|---|"]
    for row in documents[0]["rows"]:
        everyone, everyone_bytes, everyone_floor = "not run", "—", ""
        if "everyone_cpu_median" in row:
            everyone = f"{row['everyone_cpu_median']:.2f} ({_ratios(row['everyone_over_plain'])})"
            everyone_bytes = f"{row['everyone_bytes_per_party']:.0f}"
            everyone_floor = f" ({1e3 * row['crypto_floor_per_party_everyone']['total']:.1f} ms)"
        lines.append(
            f"| {row['parties']} | {row['num_shares']} / {row['threshold']} ({row['dropouts']}) "
            f"| {row['plain_cpu_median']:.2f} | {row['window_cpu_median']:.2f} ({_ratios(row['window_over_plain'])}) "
            f"| {everyone} | {row['plain_bytes_per_party']:.0f} / {row['window_bytes_per_party']:.0f} / "
            f"{everyone_bytes} | {1e3 * row['crypto_floor_per_party']['total']:.1f} ms{everyone_floor} |")
    return "\n".join(lines) + ("\n\nCPU seconds: medians of the repeats; m = n where every party shares with every "
                               "other.")


@table("accounting-targets", raw=[ACCOUNTING])
def accounting_targets(documents: list[Any]) -> str:
    document = documents[0]
    per_query, repeated = document["per_query"], document["gnmax_tight_repeated_parameters"]
    laplace = per_query["laplace_classic_cpu_ns_per_query"]
    largest = max(document["ledgers"], key=lambda row: row["entries"])
    compared = max((row for row in document["ledgers"] if "rows_pld_cpu_s" in row), key=lambda row: row["entries"])
    per_row_pld = compared["rows_pld_cpu_s"] / compared["entries"]
    rows = [
        ("classic Laplace ≤ 5× the estimated ideal (≈ 7 ns/query)",
         f"{laplace:.0f} ns/query CPU (×{laplace / IDEAL_NS:.1f}; one read of the votes: "
         f"{per_query['read_votes_cpu_ns_per_query']:.1f} ns)", "no" if laplace > 5 * IDEAL_NS else "yes"),
        ("GNMax classic ≥ 10 M queries/s",
         f"{per_query['gnmax_classic_queries_per_cpu_second'] / 1e6:.2f} M queries per CPU second "
         f"({per_query['gnmax_classic_cpu_ns_per_query']:.0f} ns/query)",
         "no" if per_query["gnmax_classic_queries_per_cpu_second"] < 1e7 else "yes"),
        ("GNMax tight: no fresh PLD when the parameters repeat",
         f"first `account()` {repeated['first_s']:.2f} s wall, second (other votes, same σ, count, δ) "
         f"{repeated['second_s']:.3f} s", "yes (no PLD: GNMax's ε is the Gaussian's closed form)"),
        (f"{largest['entries']:,} distinct mechanisms in a ledger ≤ 5 s",
         f"`Ledger.account()` {largest['account_cpu_s']:.2f} CPU s: its composition and every entry's own row from "
         f"the closed form of the Gaussian's privacy profile (before: {largest['merged_pld_cpu_s']:.2f} s for the "
         f"composition's PLD, {per_row_pld:.3f} s per entry's row)",
         "no" if largest["account_cpu_s"] > 5.0 else "yes"),
    ]
    lines = ["| target | today (this run) | met? |", "|---|---|---|"]
    lines += [f"| {target} | {measured} | {met} |" for target, measured, met in rows]
    return "\n".join(lines)


@table("accounting-distinct-ledgers", raw=[ACCOUNTING])
def accounting_distinct_ledgers(documents: list[Any]) -> str:
    lines = ["| entries | `Ledger.account()`: ε (CPU s) | exact ε (solved apart) | before: one PLD of the exactly "
             "composed Gaussian (CPU s) | before that: the entries' PLDs composed (CPU s) | the entries' own rows "
             "before: one PLD each (CPU s) | RDP alone |",
             "|---|---|---|---|---|---|---|"]
    for row in documents[0]["ledgers"]:
        composed = (f"{row['per_entry_plds_epsilon']:.9f} ({row['per_entry_plds_cpu_s']:.1f} s)"
                    if "per_entry_plds_epsilon" in row else "not run")
        rows = f"{row['rows_pld_cpu_s']:.2f} s" if "rows_pld_cpu_s" in row else "not run"
        lines.append(f"| {row['entries']:,} | {row['epsilon']:.9f} ({row['account_cpu_s']:.3f} s) "
                     f"| {row['exact_epsilon']:.9f} "
                     f"| {row['merged_pld_epsilon']:.9f} ({row['merged_pld_cpu_s']:.2f} s) "
                     f"| {composed} | {rows} | {row['rdp_only_epsilon']:.4f} |")
    return "\n".join(lines)


@table("fedkt-memory", raw=[MEMORY])
def fedkt_memory(documents: list[Any]) -> str:
    names = {"imports": "imports only (numpy, scikit-learn, privfed)", "data": "+ the split loaded",
             "fit-1": "+ `FedKT.fit`, `n_jobs=1` (the library's default)", "fit-2": "+ `FedKT.fit`, `n_jobs=2`",
             "official": "the official code's process (FedKT-L1, then its 50 baseline forests)"}
    records = documents[0]["records"]
    names = {side: name for side, name in names.items() if any(record["side"] == side for record in records)}
    lines = ["| side | process peak (MiB) | process tree peak (MiB) | rows loaded (MiB) | kept by the fitted model, "
             "pickled (MiB) |", "|---|---|---|---|---|"]
    for side, name in names.items():
        mine = [record for record in records if record["side"] == side]
        kept = mine[0].get("kept_mib", {})
        kept_text = ", ".join(f"`{attribute}` {size:.2f}" for attribute, size in kept.items() if size >= 0.05) or "—"
        data = f"{mine[0]['data_mib']:.1f}" if "data_mib" in mine[0] else "—"
        process = ", ".join(f"{record['process_peak_mib']:.1f}" for record in mine)
        tree = ", ".join(f"{record['tree_peak_mib']:.1f}" for record in mine)
        lines.append(f"| {name} | {process} | {tree} | {data} | {kept_text} |")
    official = [record["process_peak_mib"] for record in records if record["side"] == "official"]
    if official:
        privfed = [record["tree_peak_mib"] for record in records if record["side"] == "fit-1"]
        lines.append("\nprivfed's `n_jobs=1` tree peak over the official code's process peak, repeat by repeat: "
                     + ", ".join(f"×{mine / theirs:.2f}" for mine, theirs in zip(privfed, official, strict=False))
                     + " (same run, sides alternating).")
    return "\n".join(lines)
