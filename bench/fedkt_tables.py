"""Regenerate FedKT's Tables 8 and 9 (Li, He, Song, IJCAI 2021): FedKT-L1 and -L2, ε and accuracy, every row.

Table 8: FedKT-L1 (party-level ε), 50 parties, s = 1, t = 5. Table 9: FedKT-L2
(example-level ε), 20 parties, s = 1, t = 25. Both on Adult (a9a) and cod-rna,
heterogeneous (Dirichlet β = 0.5) and homogeneous partitions, every γ and query
count the paper lists; 3 seeds, the median accuracy (as the paper reports).

Protocol: the official code's (``--protocol reference-code`` of ``bench/fedkt.py``):
a quarter of the training file held out, its first half public, its second half for
evaluation. Heterogeneous rows use the official code's exact rows where
``../shared/peer_splits`` has them (seeds 0–4, 50 and 20 parties); homogeneous rows
are drawn by privfed with the same sizes. The paper's query percentages are of the
held-out split, converted as the official code does (``int(held_out · fraction)``:
Adult 0.1 % = 8 queries, 1 % = 81; cod-rna 0.5 % = 74, 2 % = 297). Students and
final model: random forests (Adult) or the official XGBoost (cod-rna: lr 0.1,
gamma = 1, reg_lambda = 1), depth 6, 100 trees.

For every row and seed two runs:

* ``paper``: the paper's γ and query count; ε from privfed's ledger at δ = 1e-5,
  classic (the paper's moments accountant with privfed's data-dependent bound where
  it applies) and tight (privfed's; plus its data-independent value).
* ``budget``: the same γ with privfed's budget filter at the paper's ε
  (``target_epsilon`` = the paper's ε, tight analysis, data-independent stopping
  point), all of the public set available: the accuracy privfed reaches at the
  paper's ε, and how many queries that buys.

Records go to ``--json`` after every run (with ``bench/provenance.py``'s record); rerunning with the same
file skips the records already there. ``python -m bench.tables fedkt-table-8 fedkt-table-9`` renders the
tables from the committed records (``bench/tables/fedkt.py``): the median over all runs of a row, a failed
run (its fit raised: the server's voted labels hold one class) ranked below every trained run, with the
count of failed runs and the median of the trained runs beside.

``--teacher-assignment permutation`` is a measurement ablation: each party's teachers
get equal shares of a random permutation (FedKT Algorithm 1 as written,
``pipelines.data.partition.teacher_subsets``) instead of privfed's keyed hash of each
example's contents (``keyed_teacher_subsets``, stable under adding or removing one
example, with multinomial subset sizes and identical rows in one teacher). It runs
the parties in this process (``n_jobs=1``) and must be written to its own ``--json``.

Usage::

    python bench/fedkt_tables.py --tables 9 --seeds 0 1 2 --kinds paper --json OUT.json
    python -m bench.tables fedkt-table-9
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fedkt as bench_fedkt  # noqa: E402  (bench/fedkt.py: a script's own folder is on sys.path)
from privfed.pipelines import federated_split, load_dataset  # noqa: E402
from privfed.pipelines.data.reference_rows import load_reference_rows, reference_rows_split  # noqa: E402
from privfed.pipelines.fedkt.estimator import FedKT  # noqa: E402

from bench import provenance  # noqa: E402

DELTA = 1e-5
DATA = {"Adult": "adult_a9a", "cod-rna": "cod_rna"}


@dataclass(frozen=True)
class Row:
    """One row of Table 8 or 9 as printed."""

    table: int
    data: str
    partition: str  # "Heterogeneous" or "Homogeneous"
    gamma: float
    percent: float  # the paper's query percentage of the held-out split
    paper_epsilon: float
    paper_accuracy: float

    @property
    def key(self) -> str:
        return f"T{self.table}/{self.data}/{self.partition}/γ={self.gamma}/{self.percent}%"


def _rows(table: int, data: str, partition: str, entries: list[tuple[float, list[tuple[float, float, float]]]]):
    return [Row(table, data, partition, gamma, percent, eps, acc) for gamma, points in entries
            for percent, eps, acc in points]


TABLE_8 = (
    _rows(8, "Adult", "Heterogeneous", [
        (0.04, [(0.1, 0.64, 71.3), (0.5, 2.56, 76.8), (1, 4.73, 80.2)]),
        (0.06, [(0.1, 0.96, 75.7), (0.5, 3.64, 77.6), (1, 5.78, 80.2)]),
        (0.08, [(0.1, 1.23, 76.0), (0.5, 4.25, 76.3), (1, 7.0, 80.3)])])
    + _rows(8, "Adult", "Homogeneous", [
        (0.02, [(0.1, 0.32, 72.2), (0.5, 1.25, 76.1), (1, 1.79, 80.1)]),
        (0.04, [(0.1, 0.6, 76.0), (0.5, 1.9, 80.4), (1, 3.32, 81.5)]),
        (0.06, [(0.1, 0.75, 76.1), (0.5, 2.03, 81.7), (1, 3.36, 82.1)])])
    + _rows(8, "cod-rna", "Heterogeneous", [
        (0.04, [(0.1, 1.09, 66.8), (0.5, 3.54, 72.5), (1, 5.14, 75.2)]),
        (0.06, [(0.1, 1.52, 69.0), (0.5, 5.48, 82.6), (1, 8.1, 79.5)]),
        (0.1, [(0.1, 2.12, 69.0), (0.5, 6.89, 84.7), (1, 11.2, 85.3)])])
    + _rows(8, "cod-rna", "Homogeneous", [
        (0.02, [(0.2, 0.53, 67.0), (0.5, 1.71, 73.2), (1, 2.45, 75.3)]),
        (0.04, [(0.2, 1.5, 73.0), (0.5, 3.06, 84.1), (1, 5.10, 85.0)]),
        (0.06, [(0.2, 1.63, 80.2), (0.5, 3.10, 84.1)])])
)
TABLE_9 = (
    _rows(9, "Adult", "Heterogeneous", [
        (0.04, [(0.1, 1.13, 76.1), (0.5, 2.56, 76.5), (1, 3.72, 78.5)]),
        (0.05, [(0.1, 1.32, 76.1), (0.5, 3.24, 79.0), (1, 4.76, 79.2)]),
        (0.06, [(0.1, 1.96, 76.2), (0.5, 3.93, 78.5), (1, 5.79, 79.4)])])
    + _rows(9, "Adult", "Homogeneous", [
        (0.04, [(0.3, 2.13, 76.1), (0.5, 2.59, 78.7), (1, 3.72, 81.7)]),
        (0.06, [(0.3, 2.97, 76.3), (0.5, 3.93, 79.9), (1, 5.79, 81.8)]),
        (0.08, [(0.3, 3.77, 76.3), (0.5, 5.04, 80.4), (1, 7.89, 82.0)])])
    + _rows(9, "cod-rna", "Heterogeneous", [
        (0.04, [(0.5, 3.54, 77.7), (1, 5.14, 79.8), (2, 7.63, 82.0)]),
        (0.05, [(0.5, 4.51, 81.4), (1, 6.58, 82.0), (2, 9.78, 84.7)]),
        (0.06, [(0.5, 5.50, 81.2), (1, 8.10, 83.2), (2, 12.2, 85.9)])])
    + _rows(9, "cod-rna", "Homogeneous", [
        (0.03, [(0.5, 2.64, 79.2), (1, 3.78, 80.5), (2, 5.51, 83.1)]),
        (0.04, [(0.5, 3.54, 80.1), (1, 5.14, 83.7), (1.5, 6.45, 84.0)]),
        (0.05, [(0.5, 4.51, 80.8), (1, 6.58, 84.2), (1.5, 8.3, 84.7)])])
)


def split_for(row: Row, seed: int, folder: Path, rows_file: Path):
    """The split and where its rows came from."""
    name = DATA[row.data]
    parties = 50 if row.table == 8 else 20
    data = load_dataset(name, folder)
    if row.partition == "Heterogeneous" and rows_file.is_file():
        try:
            rows = load_reference_rows(rows_file, dataset=name, n_parties=parties, seed=seed)
        except KeyError:
            pass
        else:
            return reference_rows_split(data.X_train, data.y_train, rows), f"official rows {rows.key}"
    beta: Any = 0.5 if row.partition == "Heterogeneous" else "homogeneous"
    split = federated_split(data.X_train, data.y_train, n_parties=parties, beta=beta, protocol="reference-code",
                            random_state=seed)
    return split, f"privfed's draw ({row.partition.lower()}, reference-code sizes)"


def query_count(row: Row, split) -> int:
    """The official code's ``int(len(held_out) · fraction)``."""
    held_out = len(split.X_public) + len(split.X_test)
    return int(held_out * row.percent / 100)


#: Parties run in this many processes (``--n-jobs``; the permutation ablation forces 1: it lives in this process).
N_JOBS = {"parties": 2}


def model_for(row: Row, queries: int, public: int, seed: int, target_epsilon: float | None) -> FedKT:
    student = bench_fedkt.forest if row.data == "Adult" else bench_fedkt.boosted(0.1)
    kwargs: dict[str, Any] = dict(
        n_partitions=1, n_teachers=5 if row.table == 8 else 25, privacy="L1" if row.table == 8 else "L2",
        gamma=row.gamma, random_state=seed, small_parties="fewer-teachers",
        n_jobs=1 if bench_fedkt.teacher_assignment() == "permutation" else N_JOBS["parties"],
    )
    fraction = 1.0 if target_epsilon is not None else min(1.0, queries / public)
    kwargs["query_fraction" if row.table == 8 else "local_query_fraction"] = fraction
    if target_epsilon is not None:
        kwargs["target_epsilon"] = target_epsilon
    return FedKT(bench_fedkt.tree(), student(), **kwargs)


def run(row: Row, seed: int, kind: str, folder: Path, rows_file: Path) -> dict:
    split, rows_from = split_for(row, seed, folder, rows_file)
    queries = query_count(row, split)
    unit = "party" if row.table == 8 else "example"
    model = model_for(row, queries, len(split.X_public), seed, row.paper_epsilon if kind == "budget" else None)
    record: dict[str, Any] = {"row": row.key, "seed": seed, "kind": kind, "rows": rows_from, "paper_queries": queries,
                              "unit": unit, "delta": DELTA,
                              "teacher_assignment": bench_fedkt.teacher_assignment()}
    record = bench_fedkt.fit_and_score(model, split, record)
    if "failed" in record:
        return record
    record["epsilon_classic"] = model.ledger_.account(delta=DELTA, analysis="classic", unit=unit).epsilon
    tight = model.ledger_.account(delta=DELTA, unit=unit)
    record["epsilon_tight"] = tight.epsilon
    record["epsilon_tight_data_independent"] = tight.epsilon_data_independent
    record["queries_answered"] = (model.n_queries_answered_ if row.table == 8 else min(model.n_local_queries_answered_))
    return record


#: What the tables count as a failed run (FedKT's fit raised, so no model was trained and nothing was scored).
FAILED_RUN = ("a run whose fit raised instead of training a final model (every failure in these tables: the "
              "server's voted labels hold a single class, so no classifier can be trained on them)")


def median(values: list[float], failed: int = 0) -> str:
    """The median over all runs with the failed ones ranked below every trained run ("failed" when the middle
    run failed), and ``n`` runs with ``k failed`` and the median of the trained runs beside where any failed."""
    n = len(values) + failed
    if not n:
        return "–"
    ranked = [-math.inf] * failed + sorted(values)
    middle = (ranked[(n - 1) // 2] + ranked[n // 2]) / 2
    overall = "failed" if math.isinf(middle) else f"{middle:.1f}"
    if not failed:
        return f"{overall} ({n})"
    trained = f"; trained runs {float(np.median(values)):.1f}" if values else ""
    return f"{overall} ({failed} of {n} failed{trained})"


def epsilon_range(values: list[float]) -> str:
    """Smallest–largest over the seeds, each rounded up (never down)."""
    if not values:
        return "–"
    low, high = min(values), max(values)
    up = bench_fedkt.up
    return up(high) if math.isclose(low, high, rel_tol=1e-3) else f"{up(low)}–{up(high)}"


def documents_records(documents: list[dict], seeds: list[int]) -> list[dict]:
    """The records of ``seeds`` in these documents; a (row, seed, kind) in two of them is an error, not a choice."""
    records, origin = [], {}
    for index, document in enumerate(documents):
        for record in document["records"]:
            if record["seed"] not in seeds:
                continue
            key = (record["row"], record["seed"], record["kind"])
            if key in origin:
                raise ValueError(f"{key} is in both document {origin[key]} and document {index}")
            origin[key] = index
            records.append(record)
    return records


def markdown(records: list[dict], table: int, epsilon_records: list[dict] | None = None) -> str:
    """Table 8 or 9 from the runs' records: medians over all runs (failed runs ranked lowest, counted per row).

    ``epsilon_records``: where given, the ε columns come from these runs of the paper's settings (a rerun on
    later code that only changed the accounting) instead of ``records``'; the accuracies stay ``records``'.
    """
    rows = TABLE_8 if table == 8 else TABLE_9
    lines = [
        "| data | partition | γ | queries (paper %) | paper ε | ours ε classic | ours ε tight (data-indep.) | "
        "paper acc. % | ours acc. %: median (runs) | at the paper's ε, tight: queries | acc. %: median (runs) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        paper = [r for r in records if r["row"] == row.key and r["kind"] == "paper"]
        budget = [r for r in records if r["row"] == row.key and r["kind"] == "budget"]
        if not paper and not budget:
            continue
        ok = [r for r in paper if "failed" not in r]
        ok_budget = [r for r in budget if "failed" not in r]
        accounted = ok if epsilon_records is None else [
            r for r in epsilon_records if r["row"] == row.key and r["kind"] == "paper" and "failed" not in r]
        budget_queries = sorted({r["queries_answered"] for r in ok_budget})  # data-independent: one count
        queries = paper[0]["paper_queries"] if paper else budget[0]["paper_queries"]
        lines.append(
            f"| {row.data} | {row.partition} | {row.gamma} | {queries} ({row.percent} %) | {row.paper_epsilon} | "
            f"{epsilon_range([r['epsilon_classic'] for r in accounted])} | "
            f"{epsilon_range([r['epsilon_tight'] for r in accounted])} "
            f"({epsilon_range([r['epsilon_tight_data_independent'] for r in accounted])}) | {row.paper_accuracy} | "
            f"{median([r['accuracy'] for r in ok], len(paper) - len(ok))} | "
            f"{'/'.join(map(str, budget_queries)) or '–'} | "
            f"{median([r['accuracy'] for r in ok_budget], len(budget) - len(ok_budget))} |"
        )
    return "\n".join(lines) + "\n"


def rerun_agreement(rerun: list[dict], records: list[dict]) -> str:
    """How many of a rerun's records repeat the accuracy and query count of the same (row, seed, kind) run."""
    earlier = {(r["row"], r["seed"], r["kind"]): r for r in records}
    pairs = [(r, earlier[(r["row"], r["seed"], r["kind"])]) for r in rerun
             if (r["row"], r["seed"], r["kind"]) in earlier]
    same = sum(("failed" in a and "failed" in b) or (a.get("accuracy") == b.get("accuracy")
                                                      and a.get("queries_answered") == b.get("queries_answered"))
               for a, b in pairs)
    return f"{same} of {len(pairs)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parents[2] / "shared"
    parser.add_argument("--data", default=str(root / "datasets"))
    parser.add_argument("--reference-rows", default=str(root / "peer_splits" / "fedkt_reference_splits.json.gz"))
    parser.add_argument("--tables", type=int, nargs="+", default=[9, 8], choices=(8, 9),
                        help="which tables, in this order (Table 9's L2 runs are the cheaper ones)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--kinds", nargs="+", default=["paper", "budget"], choices=("paper", "budget"))
    parser.add_argument("--rows", nargs="+", default=None,
                        help="only rows whose key contains one of these strings (e.g. 'T9/Adult/Heterogeneous')")
    parser.add_argument("--json", required=True, help="records, written after every run; resumable")
    parser.add_argument("--teacher-assignment", choices=("keyed", "permutation"), default="keyed",
                        help="privfed's keyed hash (default), or equal shares of a permutation (an ablation)")
    parser.add_argument("--n-jobs", type=int, default=2, help="processes for the parties (results do not depend on it)")
    args = parser.parse_args()
    N_JOBS["parties"] = args.n_jobs
    if args.teacher_assignment == "permutation":
        bench_fedkt.use_permutation_teachers()
    path = Path(args.json)
    command = "python " + " ".join(sys.argv)
    run_record = provenance.start(command=command, seeds=args.seeds, settings=vars(args))
    document: dict[str, Any] = {"command": command, "records": []}
    if path.is_file():
        document = json.loads(path.read_text(encoding="utf-8"))
    document.setdefault("resumed_with", []).append(command)
    provenance.earlier_records(document["records"])
    first = "provenance" not in document and not document["records"]
    done = {(r["row"], r["seed"], r["kind"]) for r in document["records"]}
    plan = [(row, seed, kind) for table in args.tables for kind in args.kinds
            for row in (TABLE_8 if table == 8 else TABLE_9) for seed in args.seeds
            if args.rows is None or any(part in row.key for part in args.rows)]
    for row, seed, kind in plan:
        if (row.key, seed, kind) in done:
            continue
        record = run(row, seed, kind, Path(args.data), Path(args.reference_rows))
        document["records"].append(record)
        provenance.stamp_records(document["records"], run_record)
        if first:  # the run that made the file; a resumed run's record goes to "resumed"
            document["provenance"] = provenance.finish(run_record)
        else:
            resumed = document.setdefault("resumed", [])
            resumed[:] = [r for r in resumed if r["started"] != run_record["started"]] + [
                provenance.finish(run_record)]
        if "provenance" in document:  # the seeds the file holds
            document["provenance"]["seeds"] = sorted({r["seed"] for r in document["records"]})
        provenance.write_json(path, document)
        print(f"{row.key} seed {seed} {kind}: "
              + (f"FAILED ({record['failed']})" if "failed" in record else
                 f"{record['accuracy']:.2f}%, ε classic {bench_fedkt.up(record['epsilon_classic'], 3)}, tight "
                 f"{bench_fedkt.up(record['epsilon_tight'], 3)}, {record['queries_answered']} queries, "
                 f"{record['seconds']:.1f} s"), flush=True)
    for table in args.tables:
        print(markdown(document["records"], table))


if __name__ == "__main__":
    main()
