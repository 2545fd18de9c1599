"""docs/results.md, "FedKT reproductions (Li, He, Song, IJCAI 2021, Tables 1–2)": every table, from its raw results.

The renderers are the bench scripts' own (``bench/fedkt.py``, ``bench/fedkt_tables.py``, ``bench/fedkt_sweeps.py``);
the tables that combine several scripts' records (both codes' spread on Adult seed 0, the MNIST settings, the
official code beside privfed) are rendered here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from bench.tables import table
from bench.tables._stats import mean_sd, t_interval

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the bench scripts import each other by name

import fedkt as bench_fedkt  # noqa: E402  (bench/fedkt.py)
import fedkt_sweeps  # noqa: E402
import fedkt_tables  # noqa: E402

RESULTS = "bench/results/"


def _summary(values: list[float], digits: int = 1) -> str:
    """mean ± sd [95 % interval] (n), or the one value."""
    if len(values) == 1:
        return f"{values[0]:.{digits}f} (1)"
    mean, sd = mean_sd(values)
    low, high = t_interval(values)
    return f"{mean:.{digits}f} ± {sd:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}] ({len(values)})"


# --- the summary table and the official rows, per seed (today's reruns) -----------------------------------------
SUMMARY = [RESULTS + "fedkt_summary_standard.json", RESULTS + "fedkt_mnist_l0_bench_settings_today.json",
           RESULTS + "fedkt_summary_reference_rows.json"]


@table("fedkt-summary", raw=SUMMARY)
def summary(documents: list) -> str:
    return bench_fedkt.summary_markdown(documents)


@table("fedkt-official-rows", raw=SUMMARY[2:])
def official_rows(documents: list) -> str:
    return bench_fedkt.per_seed_markdown(documents)


# --- Adult seed 0: both codes' own spread on fixed rows ------------------------------------------------------------
SPREAD = [RESULTS + "fedkt_official_code_adult_l0_spread.json", RESULTS + "fedkt_reference_rows_adult_model_seeds.json",
          RESULTS + "fedkt_reference_rows_adult_seed0_official_coding.json",
          RESULTS + "fedkt_official_l0_replica_adult_random_server_ties.json"]


@table("fedkt-adult-l0-spread", raw=SPREAD)
def adult_l0_spread(documents: list) -> str:
    official, privfed, coding, replica = documents

    def spread(values: list[float]) -> str:
        mean, sd = mean_sd(values)
        return f"{mean:.2f} ± {sd:.2f} ({min(values):.2f}–{max(values):.2f})"

    lines = ["| seed (official rows) | official code | privfed | difference of means | privfed, the code's coding "
             "and tie rule | replica, privfed's coding and tie rule |", "|---|---|---|---|---|---|"]
    for seed in sorted({run["seed"] for run in official["runs"]}):
        theirs = [run["accuracy"] for run in official["runs"] if run["seed"] == seed]
        ours = [r["accuracy"] for r in privfed["records"] if r["seed"] == seed]
        error = np.sqrt(mean_sd(theirs)[1] ** 2 / len(theirs) + mean_sd(ours)[1] ** 2 / len(ours))
        coded = [r["accuracy_official_tie_rule"] for r in coding["records"] if r["seed"] == seed]
        replicated = [r["accuracy"] for r in replica["records"] if r["seed"] == seed and r["coding"] == "privfed"]
        lines.append(f"| {seed} | {spread(theirs)} | {spread(ours)} | "
                     f"{np.mean(ours) - np.mean(theirs):+.2f} (standard error {error:.2f}) | ".replace("-", "−")
                     +
                     f"{spread(coded) if coded else '–'} | {spread(replicated) if replicated else '–'} |")
    return "\n".join(lines)


# --- MNIST L0: the bench's and the paper's MLP settings, both protocols (earlier code, not rerun today) -----------
MNIST = [RESULTS + name for name in (
    "fedkt_mnist_l0_bench_settings_rerun.json", "fedkt_mnist_l0_paper_seed0_rerun.json",
    "fedkt_mnist_l0_paper_seeds12.json", "fedkt_mnist_l0_bench_settings_official_protocol.json",
    "fedkt_mnist_l0_paper_official_protocol.json")]


@table("fedkt-mnist-l0", raw=MNIST)
def mnist_l0(documents: list) -> str:
    bench_standard, paper_seed0, paper_seeds12, bench_official, paper_official = (d["records"] for d in documents)
    paper_standard = paper_seed0 + paper_seeds12
    lines = ["| MLP settings | protocol (evaluation set) | seed 0 | seed 1 | seed 2 | mean ± sd [95 % interval] (runs) "
             "| paper |", "|---|---|---|---|---|---|---|"]
    rows = [("bench (10 epochs, batch 64, no L2)", "standard (test file, 10,000)", bench_standard),
            ("paper (100 epochs, batch 32, L2 10⁻⁶)", "standard (test file, 10,000)", paper_standard),
            ("bench", "official image protocol (test file's 2nd half)", bench_official),
            ("paper", "official image protocol (test file's 2nd half)", paper_official)]
    for settings, protocol, records in rows:
        by_seed = {r["seed"]: r["accuracy"] for r in records}
        lines.append(f"| {settings} | {protocol} | " + " | ".join(f"{by_seed[s]:.2f}" if s in by_seed else "–"
                                                                   for s in (0, 1, 2))
                     + f" | {_summary(list(by_seed.values()), 2)} | 90.5 ± 0.3 |")
    for settings, records in (("bench", bench_standard), ("paper", paper_standard)):
        by_seed = {r["seed"]: r for r in records}
        lines.append(f"| {settings}, the standard-protocol models above, scored per half | test file's 1st half / "
                     "2nd half | " + " | ".join(
                         f"{by_seed[s]['accuracy_test_first_half']:.2f} / {by_seed[s]['accuracy_test_second_half']:.2f}"
                         if s in by_seed else "–" for s in (0, 1, 2)) + " | – | – |")
    return "\n".join(lines)


# --- Tables 8 and 9 (final code; Table 9's ε from today's rerun) and the earlier code's --------------------------
TABLE_8 = [RESULTS + "fedkt_table8_final_code.json", RESULTS + "fedkt_tables_8_9_budget_final_code.json",
           RESULTS + "fedkt_tables_8_9_budget_final_code_seed1.json",
           RESULTS + "fedkt_tables_8_9_budget_final_code_seed2.json"]


@table("fedkt-table-8", raw=TABLE_8)
def table_8(documents: list) -> str:
    return fedkt_tables.markdown(fedkt_tables.documents_records(documents, [0, 1, 2]), 8)


@table("fedkt-table-8-earlier", raw=[RESULTS + "fedkt_tables_8_9.json"])
def table_8_earlier(documents: list) -> str:
    return fedkt_tables.markdown(fedkt_tables.documents_records(documents, [0, 1, 2]), 8)


@table("fedkt-table-9-earlier", raw=[RESULTS + "fedkt_tables_8_9.json"])
def table_9_earlier(documents: list) -> str:
    return fedkt_tables.markdown(fedkt_tables.documents_records(documents, [0, 1, 2]), 9)


# --- Tables 6, 7 and Table 1's cod-rna column ---------------------------------------------------------------------
SWEEPS = [RESULTS + "fedkt_tables_6_7.json"]


@table("fedkt-table-6", raw=SWEEPS)
def table_6(documents: list) -> str:
    return fedkt_sweeps.table_6(documents[0]["records"])


@table("fedkt-table-7", raw=SWEEPS)
def table_7(documents: list) -> str:
    return fedkt_sweeps.table_7(documents[0]["records"])


@table("fedkt-table-1-codrna", raw=SWEEPS)
def table_1_codrna(documents: list) -> str:
    return fedkt_sweeps.table_1_codrna(documents[0]["records"])


# --- Table 9: today's ε (a rerun on today's code), the final code's accuracies ------------------------------------
TABLE_9 = [RESULTS + "fedkt_table9_paper_today.json", RESULTS + "fedkt_table9_seed0_final_code.json",
           *TABLE_8[1:]]


@table("fedkt-table-9", raw=TABLE_9)
def table_9(documents: list) -> str:
    today, *final = documents
    records = fedkt_tables.documents_records(final, [0, 1, 2])
    rerun = today["records"]
    rows = len({r["row"] for r in rerun})
    seeds = ", ".join(str(seed) for seed in sorted({r["seed"] for r in rerun}))
    total = len(fedkt_tables.TABLE_9)
    return (fedkt_tables.markdown(records, 9, epsilon_records=rerun)
            + f"\nε columns: today's rerun of the paper's settings (seed {seeds}, {rows} of {total} "
            "rows; FedKT-L2's ε is data-independent since issue 31, so the same on every seed). Accuracies and the "
            "budget columns: the final-code runs, seeds 0–2. Today's rerun repeats the accuracy and query count of "
            f"the final-code run of the same row and seed in {fedkt_tables.rerun_agreement(rerun, records)} runs.")


# --- the official code beside privfed, L1 and L2 on Adult (one run) -----------------------------------------------
SIDE_BY_SIDE = [RESULTS + "fedkt_official_side_by_side_l1_l2.json"]


@table("fedkt-official-side-by-side", raw=SIDE_BY_SIDE)
def official_side_by_side(documents: list) -> str:
    records = documents[0]["records"]
    lines = ["| setting | code | runs | per seed (seed: accuracy %) | accuracy % mean ± sd [95 % interval] | "
             "noiseless vote accuracy % (mean) | labels after the noise % (mean) | paper % |",
             "|---|---|---|---|---|---|---|---|"]
    for key in dict.fromkeys(r["setting"] for r in records):
        for side in ("official", "privfed"):
            runs = [r for r in records if r["setting"] == key and r["side"] == side]
            ok = [r for r in runs if "failed" not in r]
            failed = len(runs) - len(ok)
            per_seed = ", ".join(f"{r['seed']}: " + ("failed" if "failed" in r else f"{r['accuracy']:.2f}")
                                 for r in runs)
            noisy = [r["noisy_label_accuracy"] for r in ok if "noisy_label_accuracy" in r]
            lines.append(
                f"| {bench_fedkt.LABELS[key]} | {side} | {len(runs)}" + (f" ({failed} failed)" if failed else "")
                + f" | {per_seed} | {_summary([r['accuracy'] for r in ok], 2) if ok else '–'} | "
                f"{np.mean([r['noiseless_vote_accuracy'] for r in ok]):.1f} | "
                + (f"{np.mean(noisy):.1f}" if noisy else "–") + f" | {bench_fedkt.SETTINGS[key].paper_accuracy[0]} |")
    return "\n".join(lines)


# --- the official tie rule on the official rows (Adult L0) --------------------------------------------------------
TIE_RULE = [RESULTS + "fedkt_summary_reference_rows.json", RESULTS + "fedkt_reference_rows_official_tie_rule.json"]


@table("fedkt-official-tie-rule", raw=TIE_RULE)
def official_tie_rule(documents: list) -> str:
    default = {r["seed"]: r for r in documents[0]["records"] if r["setting"] == "adult-l0" and "failed" not in r}
    official = {r["seed"]: r for r in documents[1]["records"] if r["setting"] == "adult-l0" and "failed" not in r}
    seeds = sorted(set(default) | set(official))
    columns = [
        ("official code (`--fedkt_seed 0`)", lambda s: bench_fedkt.OFFICIAL_RUNS["adult-l0"].get(s)),
        ("privfed (default: privfed's coding, random server ties)", lambda s: default[s]["accuracy"] if s in default
         else None),
        ("privfed, the code's server tie rule only", lambda s: default[s]["accuracy_official_tie_rule"]
         if s in default else None),
        ("privfed `--tie-rule official` (the code's coding and server tie rule)",
         lambda s: official[s]["accuracy"] if s in official else None),
    ]
    lines = ["| Adult L0, official rows | " + " | ".join(f"seed {s}" for s in seeds) + " | mean ± sd [95 % interval] |",
             "|---|" + "---|" * (len(seeds) + 1)]
    for name, value in columns:
        values = [value(s) for s in seeds]
        present = [v for v in values if v is not None]
        lines.append(f"| {name} | " + " | ".join("–" if v is None else f"{v:.2f}" for v in values)
                     + f" | {_summary(present, 2) if len(present) > 1 else '–'} |")
    lines.append("| tied server votes (of 4,070 queries), `--tie-rule official` | "
                 + " | ".join(str(official[s]["tied_queries"]) if s in official else "–" for s in seeds) + " | – |")
    return "\n".join(lines)
