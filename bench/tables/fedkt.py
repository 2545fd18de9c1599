"""docs/results.md, "FedKT reproductions (Li, He, Song, IJCAI 2021, Tables 1–2)": every table, from its raw results.

The renderers are the bench scripts' own (``bench/fedkt.py``, ``bench/fedkt_tables.py``, ``bench/fedkt_sweeps.py``);
the tables that combine several scripts' records (both codes' spread on Adult seed 0, the MNIST settings, the
official code beside privfed) are rendered here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from bench.tables import ROOT, table
from bench.tables._stats import mean_sd, t_interval, welch_difference

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the bench scripts import each other by name

import fedkt as bench_fedkt  # noqa: E402  (bench/fedkt.py)
import fedkt_sweeps  # noqa: E402
import fedkt_tables  # noqa: E402

RESULTS = "bench/results/"
#: the trials behind the paper's mean ± sd: Tables 6 and 7 state 5; Table 1's FedKT cells print the same values
#: as Table 6's s = 2 column, so the same 5 trials are assumed there
PAPER_TRIALS = 5


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


#: an accuracy within this many points of the majority-class rate counts as "at the majority rate"
AT_MAJORITY = 0.005


def confusion_rates(accuracy: float, minority_true: float, minority_predicted: float) -> tuple[float, float]:
    """The recall of the minority and of the majority class of a binary classifier, from its accuracy and the
    true and predicted shares of the minority class (all in %): the three fix the confusion matrix, since
    accuracy = 1 − true − predicted + 2 · (minority predicted as minority)."""
    hit = (accuracy - 100 + minority_true + minority_predicted) / 2  # % of rows: minority predicted as minority
    return 100 * hit / minority_true, 100 * (100 - minority_true - minority_predicted + hit) / (100 - minority_true)


@table("fedkt-summary-beyond-accuracy", raw=[SUMMARY[0], SUMMARY[2]])
def summary_beyond_accuracy(documents: list) -> str:
    """The binary rows of the summary table beside the majority-class rate of each run's test split; where a
    record holds the predicted minority share (the reference-code L0 runs), the balanced accuracy it implies."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for document in documents:
        for r in document["records"]:
            if r.get("model_seed", r["seed"]) == r["seed"] and r.get("tie_rule", "privfed") == "privfed":
                groups.setdefault((r["setting"], r["protocol"]), []).append(r)
    lines = ["| setting | protocol | runs | accuracy % | majority-class rate % (its split) | accuracy − majority rate, "
             "per seed | runs at the majority rate (± 0.005) | runs below it | minority class: true / predicted "
             "share % | balanced accuracy % |", "|---|---|---|---|---|---|---|---|---|---|"]
    for (setting, protocol), runs in groups.items():
        runs = sorted((r for r in runs if "failed" not in r), key=lambda r: r["seed"])
        gaps = [r["accuracy"] - r["majority_class_accuracy"] for r in runs]
        shares = balanced = "–"
        if all(r.get("minority_share_test_predicted") is not None for r in runs):
            true = [r["minority_share_test_true"] for r in runs]
            predicted = [r["minority_share_test_predicted"] for r in runs]
            shares = f"{np.mean(true):.1f} / {np.mean(predicted):.1f} ({min(predicted):.1f}–{max(predicted):.1f})"
            balanced = _summary([sum(confusion_rates(r["accuracy"], r["minority_share_test_true"],
                                                     r["minority_share_test_predicted"])) / 2 for r in runs])
        lines.append(f"| {setting} | {protocol}{' (official rows)' if runs[0]['official_rows'] else ''} | {len(runs)} "
                     f"| {_summary([r['accuracy'] for r in runs])} | "
                     f"{np.mean([r['majority_class_accuracy'] for r in runs]):.1f} | "
                     + ", ".join(f"{gap:+.2f}" for gap in gaps)
                     + f" | {sum(abs(gap) < AT_MAJORITY for gap in gaps)} | {sum(gap <= -AT_MAJORITY for gap in gaps)} "
                     f"| {shares} | {balanced} |")
    return "\n".join(lines)


@table("fedkt-summary-welch", raw=SUMMARY)
def summary_welch(documents: list) -> str:
    """The summary table's rows whose paper value is a mean ± sd over 5 trials (Table 1's L0 cells): ours minus
    the paper's mean with its Welch 95 % interval and p-value. The L1/L2 rows compare with single numbers and are
    left out (the summary table's 95 % interval is the only comparison they allow)."""
    groups: dict[tuple[str, str], list[float]] = {}
    for document in documents:
        for r in document["records"]:
            if (r.get("model_seed", r["seed"]) == r["seed"] and r.get("tie_rule", "privfed") == "privfed"
                    and "failed" not in r):
                groups.setdefault((r["setting"], r["protocol"]), []).append(r["accuracy"])
    lines = ["| setting | protocol | paper (5 trials) | ours (seeds) | ours − paper | Welch 95 % interval | Welch p |",
             "|---|---|---|---|---|---|---|"]
    for (setting, protocol), values in groups.items():
        paper_mean, paper_sd = bench_fedkt.SETTINGS[setting].paper_accuracy
        if not paper_sd:
            continue
        mean, sd = mean_sd(values)
        difference, (low, high), p_value = welch_difference(values, paper_mean, paper_sd, PAPER_TRIALS)
        lines.append(f"| {setting} | {protocol} | {paper_mean} ± {paper_sd} | {mean:.2f} ± {sd:.2f} ({len(values)}) | "
                     f"{difference:+.2f} | [{low:+.2f}, {high:+.2f}] | {p_value:.3f} |")
    return "\n".join(lines)


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
             "| paper (5 trials) | ours − paper [Welch 95 % interval], p |", "|---|---|---|---|---|---|---|---|"]
    rows = [("bench (10 epochs, batch 64, no L2)", "standard (test file, 10,000)", bench_standard),
            ("paper (100 epochs, batch 32, L2 10⁻⁶)", "standard (test file, 10,000)", paper_standard),
            ("bench", "official image protocol (test file's 2nd half)", bench_official),
            ("paper", "official image protocol (test file's 2nd half)", paper_official)]
    for settings, protocol, records in rows:
        by_seed = {r["seed"]: r["accuracy"] for r in records}
        difference, (low, high), p_value = welch_difference(list(by_seed.values()), 90.5, 0.3, PAPER_TRIALS)
        lines.append(f"| {settings} | {protocol} | " + " | ".join(f"{by_seed[s]:.2f}" if s in by_seed else "–"
                                                                   for s in (0, 1, 2))
                     + f" | {_summary(list(by_seed.values()), 2)} | 90.5 ± 0.3 | {difference:+.2f} [{low:+.2f}, "
                       f"{high:+.2f}], p = {p_value:.3f} |")
    for settings, records in (("bench", bench_standard), ("paper", paper_standard)):
        by_seed = {r["seed"]: r for r in records}
        lines.append(f"| {settings}, the standard-protocol models above, scored per half | test file's 1st half / "
                     "2nd half | " + " | ".join(
                         f"{by_seed[s]['accuracy_test_first_half']:.2f} / {by_seed[s]['accuracy_test_second_half']:.2f}"
                         if s in by_seed else "–" for s in (0, 1, 2)) + " | – | – | – |")
    return "\n".join(lines)


# --- MNIST L0 at the paper's MLP settings on today's code (issue 44; one process per seed) ----------------------
MNIST_TODAY = [RESULTS + name for name in (
    "fedkt_mnist_l0_paper_today.json", "fedkt_mnist_l0_paper_today_official_protocol.json")]
MNIST_TODAY_PROTOCOLS = ("standard (test file, 10,000)", "official image protocol (test file's 2nd half)")


@table("fedkt-mnist-l0-today", raw=MNIST_TODAY)
def mnist_l0_today(documents: list) -> str:
    """The paper's MLP settings (100 epochs, batch 32, L2 10⁻⁶) on today's code under both protocols, each seed in
    its own process; the commit each record ran on is in its raw record."""
    lines = ["| protocol (evaluation set) | seed | accuracy % | test file's 1st half / 2nd half % (standard protocol) "
             "| majority class % | code commit | fit s (wall, shared machine) |", "|---|---|---|---|---|---|---|"]
    summaries = []
    for protocol, document in zip(MNIST_TODAY_PROTOCOLS, documents):
        by_seed = {r["seed"]: r for r in document["records"]}
        for seed in sorted(by_seed):
            record = by_seed[seed]
            halves = (f"{record['accuracy_test_first_half']:.2f} / {record['accuracy_test_second_half']:.2f}"
                      if record.get("accuracy_test_first_half") is not None else "–")
            lines.append(f"| {protocol} | {seed} | {record['accuracy']:.2f} | {halves} | "
                         f"{record['majority_class_accuracy']:.2f} | {record['commit'][:10]} | "
                         f"{record['fit_seconds']:.0f} |")
        accuracies = [r["accuracy"] for r in by_seed.values()]
        seeds = ", ".join(str(s) for s in sorted(by_seed))
        if len(accuracies) >= 2:
            difference, (low, high), p_value = welch_difference(accuracies, 90.5, 0.3, PAPER_TRIALS)
            summaries.append(f"{protocol}, seeds {seeds}: {_summary(accuracies, 2)}; ours − paper {difference:+.2f}, "
                             f"Welch 95 % interval [{low:+.2f}, {high:+.2f}], p = {p_value:.3f}.")
        else:
            summaries.append(f"{protocol}, seed {seeds}: one run, no spread and no interval.")
    return "\n".join(lines + ["", "Paper: 90.5 ± 0.3 (5 trials). " + " ".join(summaries)])


# --- MNIST SOLO and centralized PATE at the paper's MLP settings (bench/fedkt_baselines.py; issue 44) -----------
MNIST_BASELINES = RESULTS + "fedkt_mnist_l0_paper_baselines.json"
#: Table 1's MNIST baselines: single numbers, no spread printed
PAPER_MNIST_BASELINES = {"solo_accuracy": ("SOLO", 69.0),
                         "centralized_pate_accuracy": ("PATE (one party, 10 teachers)", 92.7)}


@table("fedkt-mnist-baselines", raw=[MNIST_BASELINES, MNIST_TODAY[0]])
def mnist_baselines(documents: list) -> str:
    """SOLO and centralized PATE per seed on the standard protocol's splits, beside FedKT-L0 on the same seeds
    (``fedkt-mnist-l0-today``) and the paper's single numbers; the interval is the one-sample t-interval of ours
    minus the paper's value, which has no spread."""
    baselines, fedkt = ({r["seed"]: r for r in document["records"]} for document in documents)
    seeds = sorted(baselines)
    lines = ["| method | paper | " + " | ".join(f"seed {seed}" for seed in seeds)
             + " | ours, mean ± sd [95 % interval] (seeds) | ours − paper [95 % interval] | fit s per seed (wall) |",
             "|---|---|" + "---|" * len(seeds) + "---|---|---|"]
    for field, (name, paper) in PAPER_MNIST_BASELINES.items():
        values = [baselines[seed][field] for seed in seeds]
        seconds = [baselines[seed][field.replace("accuracy", "seconds")] for seed in seeds]
        difference = "–"
        if len(values) >= 2:
            low, high = t_interval(values)
            difference = f"{np.mean(values) - paper:+.2f} [{low - paper:+.2f}, {high - paper:+.2f}]"
        lines.append(f"| {name} | {paper:.1f} (no spread printed) | "
                     + " | ".join(f"{value:.2f}" for value in values)
                     + f" | {_summary(values, 2)} | {difference} | {min(seconds):.0f}–{max(seconds):.0f} |")
    ours = [fedkt[seed]["accuracy"] for seed in seeds if seed in fedkt]
    lines.append("| FedKT-L0 (`fedkt-mnist-l0-today`, same splits) | 90.5 ± 0.3 | "
                 + " | ".join(f"{fedkt[seed]['accuracy']:.2f}" if seed in fedkt else "–" for seed in seeds)
                 + f" | {_summary(ours, 2)} | – | – |")
    commits = sorted({baselines[seed]["commit"][:10] for seed in seeds})
    teachers = sorted({(baselines[seed]["pate_partitions"], baselines[seed]["pate_teachers"]) for seed in seeds})
    pate = " / ".join(f"{s} partition(s) of {t} teachers" for s, t in teachers)
    return "\n".join(lines + ["", f"Standard protocol (test file, 10,000 images); PATE: the parties' data pooled in "
                               f"one party, {pate}, no noise; code commit {', '.join(commits)}."])


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


MAJORITY_RATES = RESULTS + "fedkt_official_rows_majority_rates.json"


@table("fedkt-official-rows-majority", raw=[MAJORITY_RATES, *TABLE_8, RESULTS + "fedkt_table9_seed0_final_code.json"])
def official_rows_majority(documents: list) -> str:
    """The majority-class rate of each seed's official evaluation (and public) rows, and how many runs of Tables 8
    and 9 on those rows (heterogeneous partition, seeds 0–2, both kinds of run) score at or below their split's
    rate: what a model predicting one class everywhere scores there."""
    rates, table_8_documents, table_9_document = documents[0], documents[1:-1], documents[-1]
    by_split = {record["split"]: record for record in rates["records"]}
    lines = ["| data set (official rows) | evaluation rows: majority-class rate %, seeds 0 / 1 / 2 / 3 / 4 | "
             "public rows: majority-class rate %, seeds 0–4 | Table 8 runs at or below their split's rate (50 parties; "
             "heterogeneous rows, seeds 0–2, paper's settings and budget runs) | Table 9 runs at or below it (20 "
             "parties; the same) |", "|---|---|---|---|---|"]
    runs = {8: fedkt_tables.documents_records(table_8_documents, [0, 1, 2]),
            9: fedkt_tables.documents_records([table_9_document, *table_8_documents[1:]], [0, 1, 2])}
    for dataset, label in (("a9a", "Adult (a9a)"), ("cod-rna", "cod-rna")):
        records = [by_split[f"{dataset}/parties=50/seed={seed}"] for seed in range(5)]
        if any(by_split[f"{dataset}/parties=20/seed={seed}"]["test_majority_rate"] != record["test_majority_rate"]
               for seed, record in enumerate(records)):
            raise ValueError(f"{MAJORITY_RATES}: the 20- and 50-party splits of {dataset} differ in their evaluation "
                             "rows; the table prints one rate per seed")
        counts = []
        for number, parties in ((8, 50), (9, 20)):
            official = [r for r in runs[number] if r["rows"].startswith(f"official rows {dataset}/parties={parties}/")]
            trained = [r for r in official if "failed" not in r]
            floor = [r for r in trained
                     if r["accuracy"] <= by_split[r["rows"].removeprefix("official rows ")]["test_majority_rate"]
                     + AT_MAJORITY]
            failed = len(official) - len(trained)
            counts.append(f"{len(floor)} of {len(trained)}" + (f" ({failed} failed)" if failed else ""))
        lines.append(f"| {label} | " + " / ".join(f"{r['test_majority_rate']:.2f}" for r in records) + " | "
                     + " / ".join(f"{r['public_majority_rate']:.2f}" for r in records) + f" | {counts[0]} | "
                     f"{counts[1]} |")
    return "\n".join(lines)


# --- Tables 6, 7 and Table 1's cod-rna column ---------------------------------------------------------------------
#: MNIST's cells (``bench/gpu_runs.py fedkt-mnist-tables-6-7``): read once the plan has written its file
MNIST_SWEEPS = RESULTS + "fedkt_tables_6_7_mnist.json"
SWEEPS = [RESULTS + "fedkt_tables_6_7.json"] + ([MNIST_SWEEPS] if (ROOT / MNIST_SWEEPS).is_file() else [])


def _sweep_records(documents: list) -> list[dict]:
    """The records of every ``SWEEPS`` document (each cell's runs lie in one of them)."""
    return [record for document in documents for record in document["records"]]


@table("fedkt-table-6", raw=SWEEPS)
def table_6(documents: list) -> str:
    return fedkt_sweeps.table_6(_sweep_records(documents))


@table("fedkt-table-7", raw=SWEEPS)
def table_7(documents: list) -> str:
    return fedkt_sweeps.table_7(_sweep_records(documents))


@table("fedkt-tables-6-7-welch", raw=[*SWEEPS, SUMMARY[2]])
def tables_6_7_welch(documents: list) -> str:
    """Every run cell of Tables 6 and 7: ours minus the paper's mean, its Welch 95 % interval and p-value (the
    paper's sd over its 5 trials against ours over the seeds), on how many seeds a run lies below the paper, and
    the majority-class rate of the seeds' evaluation rows (the record's own, else the reference-code L0 records':
    same rows). Only the data sets with records; a cell with fewer than two runs gets no interval."""
    records, reference = _sweep_records(documents[:-1]), documents[-1]["records"]
    majority = {record["rows"]: record["majority_class_accuracy"] for record in reference
                if record["setting"] in ("adult-l0", "codrna-l0")}
    run = fedkt_sweeps.datasets_run(records)
    t5 = {cell.data: cell for cell in fedkt_sweeps.TABLE_6 if cell.partitions == 2 and cell.data in run}
    cells = [(f"Table 6, s = {cell.partitions}", cell.key, cell.data, cell.paper_mean, cell.paper_sd)
             for cell in fedkt_sweeps.TABLE_6 if cell.data in run]
    cells += [("Table 7, t = 5", t5[data].key, data, *fedkt_sweeps.TABLE_7_PAPER_T5[data]) for data in t5]
    cells += [(f"Table 7, t = {cell.teachers}", cell.key, cell.data, cell.paper_mean, cell.paper_sd)
              for cell in fedkt_sweeps.TABLE_7 if cell.data in run]
    lines = ["| cell | data | paper (5 trials) | ours (seeds) | ours − paper | Welch 95 % interval | Welch p "
             "| seeds below the paper's mean | majority-class rate % (same rows) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, key, data, paper_mean, paper_sd in cells:
        values, failed = fedkt_sweeps.accuracies(records, key)
        rates = [record["majority_class_accuracy"] if "majority_class_accuracy" in record else majority[record["rows"]]
                 for record in records if record["cell"] == key and "failed" not in record]
        if len(values) < 2:
            lines.append(f"| {name} | {data} | {paper_mean} ± {paper_sd} | {fedkt_sweeps.mean_sd(values)}"
                         + (f"; {failed} failed" if failed else "") + " | – | – | – | – | – |")
            continue
        mean, sd = mean_sd(values)
        difference, (low, high), p_value = welch_difference(values, paper_mean, paper_sd, PAPER_TRIALS)
        below = sum(value < paper_mean for value in values)
        lines.append(f"| {name} | {data} | {paper_mean} ± {paper_sd} | {mean:.2f} ± {sd:.2f} ({len(values)}"
                     + (f"; {failed} failed" if failed else "") + f") | {difference:+.2f} | [{low:+.2f}, {high:+.2f}] "
                     f"| {p_value:.3f} | {below} of {len(values)} | {np.mean(rates):.1f} |")
    return "\n".join(lines)


@table("fedkt-table-1-codrna", raw=SWEEPS[:1])
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


# --- Table 3: the size of the public set (bench/fedkt.py --public-portion) --------------------------------------
#: the paper's Table 3 (single numbers, no spread or trial count given) and the public rows its text names at 20 %
PAPER_TABLE_3 = {"adult-l0": ("Adult", {0.2: 82.1, 0.4: 82.1, 0.6: 82.1, 0.8: 82.3, 1.0: 82.2}, None),
                 "codrna-l0": ("cod-rna", {0.2: 87.3, 0.4: 87.6, 0.6: 87.8, 0.8: 87.8, 1.0: 88.3}, 1807)}
TABLE_3 = [RESULTS + f"fedkt_table3_portion{portion}.json" for portion in ("0.2", "0.4", "0.6", "0.8", "1.0")]


def _paired(values: dict[int, float], baseline: dict[int, float]) -> str:
    """mean ± sd [95 % interval] of ``values − baseline`` over the seeds both hold."""
    seeds = sorted(set(values) & set(baseline))
    return _summary([values[seed] - baseline[seed] for seed in seeds], digits=2) if len(seeds) > 1 else "–"


@table("fedkt-table-3", raw=TABLE_3)
def table_3(documents: list) -> str:
    """Per data set and public-set portion: the paper's accuracy, ours over seeds, ours minus ours at 100 % on the
    same seeds (same parties and test rows), balanced accuracy and the share of test rows predicted minority."""
    records = [r for document in documents for r in document["records"] if "failed" not in r]
    portions = sorted({r["public_portion"] for r in records})
    header = "| data set | row | " + " | ".join(f"{100 * p:.0f} %" for p in portions) + " |"
    lines = [header, "|---|---|" + "---|" * len(portions)]
    for key, (name, paper, paper_rows) in PAPER_TABLE_3.items():
        at = {p: {r["seed"]: r for r in records if r["setting"] == key and r["public_portion"] == p} for p in portions}
        if not any(at.values()):
            continue
        full = {seed: r["accuracy"] for seed, r in at.get(1.0, {}).items()}

        def cells(make) -> str:
            return " | ".join(make(p, at[p]) if at[p] else "not run" for p in portions)

        def balanced(runs: dict) -> list[float]:
            rates = [confusion_rates(r["accuracy"], r["minority_share_test_true"], r["minority_share_test_predicted"])
                     for r in runs.values()]
            return [(minority + majority) / 2 for minority, majority in rates]

        lines += [
            f"| {name} | public rows, ours" + (f" (paper at 20 %: {paper_rows:,})" if paper_rows else "") + " | "
            + cells(lambda p, runs: "/".join(f"{size:,}" for size in sorted({r['public_size'] for r in runs.values()})))
            + " |",
            f"| {name} | paper % (Table 3: one number, no spread) | " + cells(lambda p, runs: f"{paper[p]}") + " |",
            f"| {name} | ours % | " + cells(lambda p, runs: _summary([r["accuracy"] for r in runs.values()])) + " |",
            f"| {name} | ours − paper | "
            + cells(lambda p, runs: f"{np.mean([r['accuracy'] for r in runs.values()]) - paper[p]:+.1f}") + " |",
            f"| {name} | ours − ours at 100 %, same seeds | "
            + cells(lambda p, runs: _paired({s: r["accuracy"] for s, r in runs.items()}, full) if p != 1.0 else "–")
            + " |",
            f"| {name} | balanced accuracy % | " + cells(lambda p, runs: _summary(balanced(runs))) + " |",
            f"| {name} | test rows predicted minority %, mean (true share) | "
            + cells(lambda p, runs: f"{np.mean([r['minority_share_test_predicted'] for r in runs.values()]):.1f} "
                                    f"({np.mean([r['minority_share_test_true'] for r in runs.values()]):.1f})")
            + " |",
        ]
    seeds = sorted({r["seed"] for r in records})
    lines += ["", f"FedKT-L0 on the official code's rows (seeds {', '.join(map(str, seeds))}, the reference-code "
              "protocol, privfed's random server ties); a portion keeps the first rows of a seeded permutation of the "
              "public set, the parties and test rows staying the seed's. Cells: mean ± sd [95 % t-interval] (runs)."]
    return "\n".join(lines)
