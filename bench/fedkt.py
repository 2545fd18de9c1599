"""Reproduce FedKT's Tables 1–2 (Li, He, Song, IJCAI 2021) and time the pipeline.

Runs FedKT on the real data sets in a folder (default ``../shared/datasets``) at
the paper's settings, prints our accuracy and ε beside the paper's, and writes
a Markdown table (``--markdown FILE``). Not part of the test suite.

Protocols (``--protocol``):

* ``standard`` (default): parties and the public set come from the official
  training file, accuracy is measured on the official test file. The public set
  has the size the reference code's public set has (half of 25 % of the training
  file), so that query counts match the paper's.
* ``reference-code``: FedKT's public code's protocol — 25 % of the training file
  held out at random, its first half public, its second half for evaluation.

The paper states query budgets as a percentage of the reference code's held-out
split, which is twice the public set: "1 %" on Adult is 81 queries, i.e. 2 % of
the public set. This script uses the paper's query *counts*.

Usage::

    python bench/fedkt.py --settings adult-l0,adult-l1 --trials 5 --markdown out/fedkt.md
    python bench/fedkt.py --speed            # Adult L0 with n_jobs=1 and 2
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from privfed.pipelines import federated_split, load_dataset  # noqa: E402
from privfed.pipelines.datasets import reference_class_order  # noqa: E402
from privfed.pipelines.fedkt import CentralizedPATE, FedKT, Solo  # noqa: E402
from privfed.pipelines.progress import progress_bar  # noqa: E402

DELTA = 1e-5


def tree() -> Any:
    from sklearn.tree import DecisionTreeClassifier

    return DecisionTreeClassifier(max_depth=6)


def forest() -> Any:
    from sklearn.ensemble import RandomForestClassifier

    return RandomForestClassifier(n_estimators=100, max_depth=6, n_jobs=1)


def boosted() -> Any:
    from xgboost import XGBClassifier

    return XGBClassifier(n_estimators=100, max_depth=6, learning_rate=0.05, n_jobs=1, tree_method="hist")


def mlp() -> Any:
    from privfed.pipelines import TorchMLP

    return TorchMLP(hidden=(100, 100), epochs=10, batch_size=64, lr=1e-3)


@dataclass(frozen=True)
class Setting:
    """One row of the paper's tables."""

    data: str
    parties: int
    partitions: int
    teachers: int
    teacher: Callable[[], Any]
    student: Callable[[], Any]
    paper_accuracy: tuple[float, float | None]
    privacy: str = "L0"
    gamma: float | None = None
    queries: int | None = None  # the paper's query count (server for L1, each party's local queries for L2)
    paper_epsilon: float | None = None
    trials: int = 5
    baselines: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


SETTINGS = {
    "adult-l0": Setting("adult_a9a", 50, 2, 5, tree, forest, (82.2, 0.6), baselines=True),
    "codrna-l0": Setting("cod_rna", 50, 2, 5, tree, boosted, (88.3, 0.6), baselines=True),
    "mnist-l0": Setting("mnist", 10, 2, 5, mlp, mlp, (90.5, 0.3), trials=3),
    "adult-l1": Setting("adult_a9a", 50, 1, 5, tree, forest, (80.2, None), "L1", 0.04, 81, 4.73),
    "adult-l2": Setting("adult_a9a", 20, 1, 25, tree, forest, (78.6, None), "L2", 0.04, 81, 3.72),
    "codrna-l1": Setting("cod_rna", 50, 1, 5, tree, boosted, (84.7, None), "L1", 0.1, 74, 6.89),
    "codrna-l2": Setting("cod_rna", 20, 1, 25, tree, boosted, (84.7, None), "L2", 0.05, 297, 9.78),
    # privfed's tight analysis spends the paper's ε on more queries: the budget filter answers queries while the
    # tight, data-independent ε stays within the paper's ε (the stopping point is public).
    "adult-l1-tight": Setting("adult_a9a", 50, 1, 5, tree, forest, (80.2, None), "L1", 0.04, 4070, 4.73,
                              extra={"target_epsilon": 4.73}),
    "adult-l2-tight": Setting("adult_a9a", 20, 1, 25, tree, forest, (78.6, None), "L2", 0.04, 4070, 3.72,
                              extra={"target_epsilon": 3.72}),
}


def reference_public_size(n_train: int) -> int:
    """The reference code's public set: the first half of a ⌈25 %⌉ held-out split."""
    return math.ceil(0.25 * n_train) // 2


def prepare(name: str, folder: Path, protocol: str, parties: int, seed: int):
    data = load_dataset(name, folder)
    X, X_test = data.X_train, data.X_test
    if name in ("mnist", "fashion_mnist"):
        X = X.reshape(len(X), -1).astype(np.float32) / 255.0
        X_test = X_test.reshape(len(X_test), -1).astype(np.float32) / 255.0
    if protocol == "reference-code":
        return federated_split(X, data.y_train, n_parties=parties, beta=0.5, protocol="reference-code", random_state=seed)
    public = 5000 if name == "mnist" else reference_public_size(len(X))
    # Deal the Dirichlet classes out in the order FedKT's code does (for a9a and cod-rna: the minority first),
    # so the partitions are the paper's kind; see docs/results.md for what the natural order does.
    return federated_split(
        X, data.y_train, n_parties=parties, beta=0.5, public_size=public, X_test=X_test, y_test=data.y_test,
        class_order=reference_class_order(data.y_train), random_state=seed,
    )


def fedkt_for(setting: Setting, split, seed: int, n_jobs: int) -> FedKT:
    public = len(split.X_public)
    kwargs: dict[str, Any] = dict(
        n_partitions=setting.partitions, n_teachers=setting.teachers, privacy=setting.privacy, gamma=setting.gamma,
        random_state=seed, n_jobs=n_jobs, small_parties="fewer-teachers",
    )
    if setting.privacy == "L2":
        kwargs["local_query_fraction"] = min(1.0, setting.queries / public)
    if setting.privacy == "L1":
        kwargs["query_fraction"] = min(1.0, setting.queries / public)
    return FedKT(setting.teacher(), setting.student(), **kwargs, **setting.extra)


def run_setting(key: str, setting: Setting, folder: Path, protocol: str, trials: int | None, n_jobs: int) -> dict:
    rows: dict[str, list] = {"accuracy": [], "seconds": [], "classic": [], "tight": [], "tight_independent": [],
                             "queries": [], "solo": [], "centralized": [], "failed": [], "majority": []}
    unit = "example" if setting.privacy == "L2" else "party"
    for trial in progress_bar(range(trials or setting.trials), progress=None, desc=key, unit="trial"):
        split = prepare(setting.data, folder, protocol, setting.parties, seed=trial)
        model = fedkt_for(setting, split, trial, n_jobs)
        rows["majority"].append(100 * np.mean(split.y_test == np.bincount(split.y_test).argmax()))
        start = time.perf_counter()
        try:
            model.fit(split.parties, split.X_public)
        except ValueError as error:  # e.g. every voted label in one class: no final model can be trained
            rows["failed"].append(trial)
            print(f"  {key} trial {trial}: FAILED: {error}", flush=True)
            continue
        rows["seconds"].append(time.perf_counter() - start)
        rows["accuracy"].append(100 * model.score(split.X_test, split.y_test))
        if setting.privacy != "L0":
            rows["classic"].append(model.ledger_.account(delta=DELTA, analysis="classic", unit=unit).epsilon)
            tight = model.ledger_.account(delta=DELTA, unit=unit)
            rows["tight"].append(tight.epsilon)
            rows["tight_independent"].append(tight.epsilon_data_independent)
            rows["queries"].append(
                model.n_queries_answered_ if setting.privacy == "L1" else min(model.n_local_queries_answered_)
            )
        if setting.baselines:
            rows["solo"].append(100 * Solo(setting.student(), random_state=trial).fit(split.parties).score(split.X_test, split.y_test))
            central = CentralizedPATE(setting.teacher(), setting.student(), n_partitions=setting.partitions,
                                      n_teachers=setting.teachers, random_state=trial).fit(split.parties, split.X_public)
            rows["centralized"].append(100 * central.score(split.X_test, split.y_test))
        print(f"  {key} trial {trial}: accuracy {rows['accuracy'][-1]:.2f}%, {rows['seconds'][-1]:.1f} s"
              + (f", ε classic {rows['classic'][-1]:.3f}, tight {rows['tight'][-1]:.3f}" if rows["classic"] else ""),
              flush=True)
    return rows


def mean_std(values: list[float]) -> str:
    if not values:
        return "–"
    return f"{np.mean(values):.1f} ± {np.std(values):.1f}" if len(values) > 1 else f"{values[0]:.1f}"


def eps_range(values: list[float]) -> str:
    if not values:
        return "–"
    low, high = min(values), max(values)
    return f"{high:.2f}" if math.isclose(low, high, rel_tol=1e-3) else f"{low:.2f}–{high:.2f}"


def markdown_row(key: str, setting: Setting, rows: dict, protocol: str) -> str:
    paper_accuracy, paper_std = setting.paper_accuracy
    paper = f"{paper_accuracy}" + (f" ± {paper_std}" if paper_std else "")
    paper_eps = f"{setting.paper_epsilon}" if setting.paper_epsilon else "–"
    failed = f" ({len(rows['failed'])} failed)" if rows["failed"] else ""
    return (
        f"| {key} | {protocol} | {len(rows['accuracy'])}{failed} | {paper} | {mean_std(rows['accuracy'])} | "
        f"{np.mean(rows['majority']):.1f} | {paper_eps} | "
        f"{eps_range(rows['classic'])} | {eps_range(rows['tight'])} | {eps_range(rows['tight_independent'])} | "
        f"{mean_std(rows['solo'])} | {mean_std(rows['centralized'])} | "
        f"{np.mean(rows['seconds']) if rows['seconds'] else float('nan'):.1f} |"
    )


HEADER = (
    "| setting | protocol | trials | paper accuracy % | ours % | majority class % | paper ε | ours ε classic | "
    "ours ε tight | tight data-independent | SOLO % | centralized PATE % | wall s / run |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def speed(folder: Path, protocol: str) -> None:
    """Adult L0 (50 parties, 500 teachers, 100 students) with n_jobs = 1 and 2, same seed."""
    setting = SETTINGS["adult-l0"]
    split = prepare(setting.data, folder, protocol, setting.parties, seed=0)
    timings = {}
    for n_jobs in (1, 2):
        model = fedkt_for(setting, split, 0, n_jobs)
        start = time.perf_counter()
        model.fit(split.parties, split.X_public)
        timings[n_jobs] = time.perf_counter() - start
        print(f"Adult L0, n_jobs={n_jobs}: {timings[n_jobs]:.1f} s, accuracy {100 * model.score(split.X_test, split.y_test):.2f}%")
    print(f"speed-up n_jobs=2 over n_jobs=1: ×{timings[1] / timings[2]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--protocol", default="standard", choices=("standard", "reference-code"))
    parser.add_argument("--trials", type=int, default=None, help="override each setting's number of trials")
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--markdown", default=None, help="append the table to this Markdown file")
    parser.add_argument("--speed", action="store_true", help="time Adult L0 with n_jobs=1 and 2 and stop")
    args = parser.parse_args()
    folder = Path(args.data)
    if args.speed:
        speed(folder, args.protocol)
        return
    lines = []
    for key in args.settings.split(","):
        setting = SETTINGS[key]
        rows = run_setting(key, setting, folder, args.protocol, args.trials, args.n_jobs)
        lines.append(markdown_row(key, setting, rows, args.protocol))
        print(HEADER.splitlines()[0])
        print(lines[-1], flush=True)
    table = HEADER + "\n" + "\n".join(lines) + "\n"
    print(table)
    if args.markdown:
        with open(args.markdown, "a", encoding="utf-8") as handle:
            handle.write(table + "\n")


if __name__ == "__main__":
    main()
