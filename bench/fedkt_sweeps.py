"""Regenerate FedKT's Tables 6 and 7 (s and t sweeps, FedKT-L0) and Table 1's cod-rna baselines (PATE, XGBoost).

Li, He, Song (IJCAI 2021). Table 6 varies the number of partitions per party
s ∈ {1, …, 5} with t = 5 subsets; Table 7 the number of subsets t ∈ {5, 10, 15, 20}
with s = 2. Both FedKT-L0 (no noise), 50 parties, Dirichlet β = 0.5; the paper reports
the mean ± standard deviation of 5 trials, and so does this script (seeds 0–4; sd with
n − 1). Where the paper prints "—" (a party has fewer rows than t: Adult t ≥ 15,
cod-rna t = 20) the run is not made. Teachers: decision trees of depth 6; students and
final model as the official code's flags (``bench/fedkt.py``): random forests (100
trees, depth 6) for Adult, XGBoost (100 trees, depth 6, lr 0.1, gamma = 1,
reg_lambda = 1) for cod-rna.

MNIST (``--datasets MNIST``; not in the default ``Adult cod-rna``): FedKT-L0 at ``bench/fedkt.py``'s
``mnist-l0-paper`` setting with the cell's s and t — 10 parties, the paper's 784-100-100-10 MLP as teachers,
students and final model (100 epochs, batch 32, Adam 1e-3 with L2 1e-6), ``--device`` where they train — on the
official code's image protocol (the test file's first half public, its second half for evaluation, privfed's
Dirichlet draw of the parties). Its eight distinct cells (Table 7's t = 5 is Table 6's s = 2) cost about
10.6 times one ``mnist-l0-paper`` seed (623–760 s on one quiet core) per seed: ``bench/gpu_runs.py
fedkt-mnist-tables-6-7`` runs them one cell and seed at a time (``--cells S,T``).

Protocol: the official code's (``--protocol reference-code``): a quarter of the
training file held out, its first half public, its second half for evaluation; the
official code's exact rows for each seed where ``../shared/peer_splits`` has them
(each record says ``official_rows``), privfed's draw with the same sizes otherwise.

Table 1's cod-rna baselines on the same rows (``--table 1``): XGBoost on all the
parties' rows pooled (the official student settings), and PATE as the paper defines
it — one party holding all the data, as many teachers as FedKT has parties (50),
no noise: ``CentralizedPATE(n_partitions=1, n_teachers=50)``. privfed's FedKT with
one party keeps its two tiers, so the PATE student's labels pass through one more
student (the party's) before the final model.

``--xgboost-variants``: only the centralized cod-rna models per seed, to find which one the
paper's XGBoost figure (91.2) is: the official learning rate 0.1, Table 5's 0.05, the
official script's default ``--lr`` 0.001 (with xgboost 1.x's ``base_score=0.5`` and with
today's fitted base score), and the ``all_in`` forest.

Records go to ``--json`` after every run; rerunning with the same file skips the
records already there. ``python -m bench.tables fedkt-table-6 fedkt-table-7 fedkt-table-1-codrna`` renders them.

Usage::

    python bench/fedkt_sweeps.py --json bench/results/fedkt_tables_6_7.json --seeds 0 1 2 3 4
    python bench/fedkt_sweeps.py --datasets MNIST --cells 2,5 2,10 --seeds 0 --device cuda \
        --json bench/results/fedkt_tables_6_7_mnist.json
    python -m bench.tables fedkt-table-6 fedkt-table-7 fedkt-table-1-codrna
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fedkt as bench_fedkt  # noqa: E402  (bench/fedkt.py: a script's own folder is on sys.path)
from privfed.pipelines.fedkt.estimator import CentralizedPATE, FedKT  # noqa: E402

from bench import provenance  # noqa: E402

DATA = {"Adult": "adult_a9a", "cod-rna": "cod_rna", "MNIST": "mnist"}
#: the data sets run when ``--datasets`` is not given (MNIST's cells take hours on a CPU)
DEFAULT_DATASETS = ("Adult", "cod-rna")
PARTIES = 50
#: MNIST's cells: this ``bench/fedkt.py`` setting (its parties, MLPs and epochs) with the cell's s and t
MNIST_SETTING = "mnist-l0-paper"


@dataclass(frozen=True)
class Cell:
    """One cell of Table 6 or 7 as printed: FedKT-L0 with s partitions of t subsets per party."""

    table: int
    data: str
    partitions: int
    teachers: int
    paper_mean: float
    paper_sd: float

    @property
    def key(self) -> str:
        return f"T{self.table}/{self.data}/s={self.partitions}/t={self.teachers}"


TABLE_6 = [Cell(6, "Adult", s, 5, m, sd) for s, (m, sd) in
           zip(range(1, 6), [(80.8, 1.4), (82.2, 0.6), (81.5, 0.6), (81.2, 0.5), (81.1, 0.1)])] + \
          [Cell(6, "cod-rna", s, 5, m, sd) for s, (m, sd) in
           zip(range(1, 6), [(87.7, 0.6), (88.3, 0.6), (88.3, 0.5), (88.1, 0.5), (88.2, 0.5)])] + \
          [Cell(6, "MNIST", s, 5, m, sd) for s, (m, sd) in
           zip(range(1, 6), [(89.2, 0.4), (90.5, 0.3), (89.9, 0.2), (90.1, 0.2), (90.2, 0.2)])]
# t = 5 is Table 6's s = 2 cell (the same runs); the paper prints Adult 82.0 ± 0.6 there and 82.2 ± 0.6 in Table 6.
TABLE_7 = [Cell(7, "Adult", 2, 10, 81.1, 0.7), Cell(7, "cod-rna", 2, 10, 87.4, 0.6),
           Cell(7, "cod-rna", 2, 15, 83.1, 0.6), Cell(7, "MNIST", 2, 10, 89.4, 0.2), Cell(7, "MNIST", 2, 15, 89.0, 0.4),
           Cell(7, "MNIST", 2, 20, 88.4, 0.3)]
TABLE_7_PAPER_T5 = {"Adult": (82.0, 0.6), "cod-rna": (88.3, 0.6), "MNIST": (90.5, 0.3)}
#: Table 1's cod-rna row as printed: FedKT, PATE, XGBoost.
TABLE_1_CODRNA = {"FedKT": (88.3, 0.6), "PATE": (91.1, None), "XGBoost": (91.2, None)}


def student_for(data: str):
    return bench_fedkt.forest if data == "Adult" else bench_fedkt.boosted(0.1)


def split_for(data: str, seed: int, folder: Path, rows_file: Path):
    parties = bench_fedkt.SETTINGS[MNIST_SETTING].parties if data == "MNIST" else PARTIES
    return bench_fedkt.prepare(DATA[data], folder, "reference-code", parties, seed, rows_file=rows_file)


def model_for(cell: Cell, split, seed: int, n_jobs: int) -> FedKT:
    """FedKT-L0 for one cell: on MNIST ``bench/fedkt.py``'s :data:`MNIST_SETTING` with the cell's s and t (its
    ``fedkt_for``, as that setting's own runs), else decision-tree teachers and the data set's student."""
    if cell.data == "MNIST":
        setting = replace(bench_fedkt.SETTINGS[MNIST_SETTING], partitions=cell.partitions, teachers=cell.teachers)
        return bench_fedkt.fedkt_for(setting, split, seed, n_jobs)
    return FedKT(bench_fedkt.tree(), student_for(cell.data)(), n_partitions=cell.partitions,
                 n_teachers=cell.teachers, privacy="L0", random_state=seed, n_jobs=n_jobs)


def majority_rate(y: np.ndarray) -> float:
    """The accuracy (%) of always predicting the most frequent class of ``y``."""
    return 100 * float(np.max(np.unique(y, return_counts=True)[1]) / len(y))


def run_cell(cell: Cell, seed: int, folder: Path, rows_file: Path, n_jobs: int) -> dict:
    split, rows_from = split_for(cell.data, seed, folder, rows_file)
    record: dict[str, Any] = {"cell": cell.key, "seed": seed, "partitions": cell.partitions,
                              "teachers": cell.teachers, "rows": rows_from,
                              "official_rows": split.rows_source is not None,
                              "majority_class_accuracy": majority_rate(split.y_test)}
    return bench_fedkt.fit_and_score(model_for(cell, split, seed, n_jobs), split, record)


def run_baselines(seed: int, folder: Path, rows_file: Path, n_jobs: int) -> dict:
    """Table 1's cod-rna XGBoost and PATE columns on the seed's rows."""
    split, rows_from = split_for("cod-rna", seed, folder, rows_file)
    record: dict[str, Any] = {"cell": "T1/cod-rna/baselines", "seed": seed, "rows": rows_from,
                              "official_rows": split.rows_source is not None}
    start = time.perf_counter()
    X = np.concatenate([X for X, _ in split.parties])
    y = np.concatenate([y for _, y in split.parties])
    classes, codes = np.unique(y, return_inverse=True)
    xgboost = bench_fedkt.boosted(0.1)().fit(X, codes)
    record["xgboost_accuracy"] = 100 * float(np.mean(classes[xgboost.predict(split.X_test)] == split.y_test))
    pate = CentralizedPATE(bench_fedkt.tree(), bench_fedkt.boosted(0.1)(), n_partitions=1, n_teachers=PARTIES,
                           random_state=seed, n_jobs=n_jobs).fit(split.parties, split.X_public)
    record["pate_accuracy"] = 100 * float(pate.score(split.X_test, split.y_test))
    record["seconds"] = time.perf_counter() - start
    return record


def xgboost_variants(seed: int, folder: Path, rows_file: Path) -> dict:
    """Centralized models on the pooled parties' rows: XGBoost at the official lr 0.1 and Table 5's 0.05; XGBoost
    at the official script's *default* ``--lr`` 0.001 with xgboost 1.x's fixed ``base_score=0.5`` (its
    ``requirements.txt`` asks for xgboost ≥ 1.0.2; from 2.0 the base score is fitted to the labels), once as
    1.x had it and once with today's fitted base score; and the official code's ``all_in`` forest (100 trees,
    depth 6): which of them lands at the paper's 91.2 %."""
    split, rows_from = split_for("cod-rna", seed, folder, rows_file)
    X = np.concatenate([X for X, _ in split.parties])
    y = np.concatenate([y for _, y in split.parties])
    classes, codes = np.unique(y, return_inverse=True)
    record: dict[str, Any] = {"cell": "T1/cod-rna/xgboost-variants", "seed": seed, "rows": rows_from,
                              "official_rows": split.rows_source is not None}
    for name, make, fixed in (("xgboost_lr0.1_accuracy", bench_fedkt.boosted(0.1), {}),
                              ("xgboost_lr0.05_accuracy", bench_fedkt.boosted(0.05), {}),
                              ("xgboost_lr0.001_base_score0.5_accuracy", bench_fedkt.boosted(0.001),
                               {"base_score": 0.5}),
                              ("xgboost_lr0.001_fitted_base_score_accuracy", bench_fedkt.boosted(0.001), {}),
                              ("forest_accuracy", bench_fedkt.forest, {})):
        model = make().set_params(random_state=seed, **fixed).fit(X, codes)
        record[name] = 100 * float(np.mean(classes[model.predict(split.X_test)] == split.y_test))
    return record


def mean_sd(values: list[float]) -> str:
    """mean ± sd (n − 1) [95 % t-interval] (runs), or the one value."""
    from bench.tables import _stats

    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.1f} (1)"
    mean, sd = _stats.mean_sd(values)
    low, high = _stats.t_interval(values)
    return f"{mean:.1f} ± {sd:.1f} [{low:.1f}, {high:.1f}] ({len(values)})"


def accuracies(records: list[dict], key: str, field: str = "accuracy") -> tuple[list[float], int]:
    runs = [r for r in records if r["cell"] == key]
    return [r[field] for r in runs if field in r], sum("failed" in r for r in runs)


def datasets_run(records: list[dict]) -> list[str]:
    """The data sets of :data:`DATA` with a record of a Table 6 or 7 cell (the tables show only those)."""
    keys = {r["cell"] for r in records}
    return [data for data in DATA if any(c.data == data and c.key in keys for c in TABLE_6 + TABLE_7)]


def table_6(records: list[dict]) -> str:
    """Table 6 (partitions s, t = 5): the paper's mean ± sd beside ours, per data set with records."""
    lines = ["| data | " + " | ".join(f"s = {s}: paper | ours" for s in range(1, 6)) + " |", "|---|" + "---|---|" * 5]
    for data in datasets_run(records):
        cells = []
        for cell in (c for c in TABLE_6 if c.data == data):
            values, failed = accuracies(records, cell.key)
            cells.append(f"{cell.paper_mean} ± {cell.paper_sd} | {mean_sd(values)}"
                         + (f", {failed} failed" if failed else ""))
        lines.append(f"| {data} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def table_7(records: list[dict]) -> str:
    """Table 7 (subsets t, s = 2): the paper's mean ± sd beside ours, per data set with records; "—" cells are
    not run."""
    lines = ["| data | " + " | ".join(f"t = {t}: paper | ours" for t in (5, 10, 15, 20)) + " |",
             "|---|" + "---|---|" * 4]
    for data in datasets_run(records):
        t5 = next(c for c in TABLE_6 if c.data == data and c.partitions == 2)
        paper_mean, paper_sd = TABLE_7_PAPER_T5[data]
        cells = [f"{paper_mean} ± {paper_sd} | {mean_sd(accuracies(records, t5.key)[0])}"]
        for t in (10, 15, 20):
            cell = next((c for c in TABLE_7 if c.data == data and c.teachers == t), None)
            if cell is None:
                cells.append("— | not run (a party has fewer than t rows)")
                continue
            values, failed = accuracies(records, cell.key)
            cells.append(f"{cell.paper_mean} ± {cell.paper_sd} | {mean_sd(values)}"
                         + (f", {failed} failed" if failed else ""))
        lines.append(f"| {data} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def table_1_codrna(records: list[dict]) -> str:
    """Table 1's cod-rna column: FedKT-L0 and the centralized upper bounds."""
    lines = ["| method | paper | ours |", "|---|---|---|"]
    fedkt = accuracies(records, next(c for c in TABLE_6 if c.data == "cod-rna" and c.partitions == 2).key)[0]
    pate = accuracies(records, "T1/cod-rna/baselines", "pate_accuracy")[0]
    xgboost = accuracies(records, "T1/cod-rna/baselines", "xgboost_accuracy")[0]
    for name, values in (("FedKT (s = 2, t = 5)", fedkt), ("PATE (one party, 50 teachers, no noise)", pate),
                         ("XGBoost (all parties' rows pooled)", xgboost)):
        mean, sd = TABLE_1_CODRNA[name.split(" ")[0]]
        lines.append(f"| {name} | {mean}" + (f" ± {sd}" if sd else "") + f" | {mean_sd(values)} |")
    return "\n".join(lines) + "\n"


def cell_choice(text: str) -> tuple[int, int]:
    """``--cells`` value ``S,T``: partitions per party and subsets per partition."""
    try:
        partitions, teachers = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a cell is S,T (two integers: partitions, subsets), got {text!r}") from None
    return partitions, teachers


def selected_cells(tables: list[int], datasets: list[str], wanted: list[tuple[int, int]] | None) -> list[Cell]:
    """The Table 6 and 7 cells of ``datasets``, only the (s, t) pairs ``wanted`` where given. Table 7's t = 5 is
    Table 6's s = 2 cell (the same runs), so Table 7 alone does not run it."""
    cells = [c for table in tables if table != 1 for c in (TABLE_6 if table == 6 else TABLE_7) if c.data in datasets]
    if wanted is None:
        return cells
    unknown = sorted(set(wanted) - {(c.partitions, c.teachers) for c in cells})
    if unknown:
        pairs = " ".join(dict.fromkeys(f"{c.partitions},{c.teachers}" for c in cells))
        raise ValueError(f"--cells: no cell {' '.join(f'{s},{t}' for s, t in unknown)} in tables {tables} of "
                         f"{datasets}; choose from: {pairs}")
    return [c for c in cells if (c.partitions, c.teachers) in wanted]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parents[2] / "shared"
    parser.add_argument("--data", default=str(root / "datasets"))
    parser.add_argument("--reference-rows", default=str(root / "peer_splits" / "fedkt_reference_splits.json.gz"))
    parser.add_argument("--tables", type=int, nargs="+", default=[6, 7, 1], choices=(1, 6, 7))
    parser.add_argument("--datasets", nargs="+", default=list(DEFAULT_DATASETS), choices=tuple(DATA),
                        help="default: Adult cod-rna (MNIST's cells take hours on a CPU: bench/gpu_runs.py)")
    parser.add_argument("--cells", type=cell_choice, nargs="+", default=None, metavar="S,T",
                        help="only these cells (partitions s, subsets t) of the chosen tables and data sets "
                             "(Table 1's baselines are then not run)")
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu",
                        help="where MNIST's MLPs train (auto: CUDA when available); recorded in the provenance")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--n-jobs", type=int, default=1)
    parser.add_argument("--json", required=True, help="records, written after every run; resumable")
    parser.add_argument("--xgboost-variants", action="store_true",
                        help="only the centralized cod-rna models (XGBoost lr 0.1, 0.05 and 0.001, forest) per seed")
    args = parser.parse_args()
    try:
        cells = selected_cells(args.tables, args.datasets, args.cells)
    except ValueError as error:
        parser.error(str(error))
    bench_fedkt.DEVICE["name"] = args.device
    device = bench_fedkt.resolved_device(args.device) if "MNIST" in args.datasets else "cpu"
    if args.device == "cuda" and device != "cuda":
        parser.error("--device cuda but CUDA is not available on this machine")
    path = Path(args.json)
    command = "python " + " ".join(sys.argv)
    run = provenance.start(command=command, seeds=args.seeds, settings=vars(args), device=device)
    if args.xgboost_variants:
        records = [xgboost_variants(seed, Path(args.data), Path(args.reference_rows)) for seed in args.seeds]
        provenance.write_json(path, {"command": command, "provenance": provenance.finish(run),
                                     "records": provenance.stamp_records(records, run)})
        for name in ("xgboost_lr0.1_accuracy", "xgboost_lr0.05_accuracy", "xgboost_lr0.001_base_score0.5_accuracy",
                     "xgboost_lr0.001_fitted_base_score_accuracy", "forest_accuracy"):
            print(f"{name}: {mean_sd([r[name] for r in records])}")
        return
    document: dict[str, Any] = {"command": command, "records": []}
    if path.is_file():
        document = json.loads(path.read_text(encoding="utf-8"))
    document.setdefault("resumed_with", []).append(command)
    provenance.earlier_records(document["records"])
    first = "provenance" not in document and not document["records"]
    done = {(r["cell"], r["seed"]) for r in document["records"]}
    # Table 1's baselines are cod-rna's; seed by seed, so that an interrupted run leaves whole seeds
    baselines = ["baselines"] if 1 in args.tables and "cod-rna" in args.datasets and args.cells is None else []
    plan = [(cell, seed) for seed in args.seeds for cell in cells + baselines]
    folder, rows_file = Path(args.data), Path(args.reference_rows)
    for cell, seed in plan:
        key = "T1/cod-rna/baselines" if cell == "baselines" else cell.key
        if (key, seed) in done:
            continue
        record = (run_baselines(seed, folder, rows_file, args.n_jobs) if cell == "baselines"
                  else run_cell(cell, seed, folder, rows_file, args.n_jobs))
        document["records"].append(record)
        provenance.stamp_records(document["records"], run)
        if first:  # the run that made the file; a resumed run's record goes to "resumed"
            document["provenance"] = provenance.finish(run)
        else:
            resumed = document.setdefault("resumed", [])
            resumed[:] = [entry for entry in resumed if entry["started"] != run["started"]] + [provenance.finish(run)]
        provenance.write_json(path, document)
        print(f"{key} seed {seed}: " + (f"FAILED ({record['failed']})" if "failed" in record else
                                        ", ".join(f"{k} {v:.2f}" for k, v in record.items() if k.endswith("accuracy"))
                                        + f"; {record['seconds']:.1f} s; {record['rows']}"), flush=True)
    for render in (table_6, table_7, table_1_codrna):
        print(render(document["records"]))


if __name__ == "__main__":
    main()
