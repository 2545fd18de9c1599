"""Reproduce FedKT's Tables 1–2 (Li, He, Song, IJCAI 2021).

Runs FedKT on the real data sets in a folder (default ``../shared/datasets``) at
the paper's settings, prints our accuracy and ε beside the paper's, and writes
a Markdown table (``--markdown FILE``). Not part of the test suite.

Protocols (``--protocol``):

* ``standard`` (default): parties and the public set come from the official
  training file, accuracy is measured on the official test file. The public set
  has the size the reference code's public set has (half of 25 % of the training
  file), so that query counts match the paper's.
* ``reference-code``: FedKT's public code's protocol — 25 % of the training file
  held out, its first half public, its second half for evaluation. Where the
  reference-rows file (``--reference-rows``, default
  ``../shared/peer_splits/fedkt_reference_splits.json.gz``) holds the data set,
  party count and seed, the split is the official code's exact rows (each run
  prints and records ``official_rows``); otherwise the split is drawn by privfed
  with the same sizes (not the same rows), and the run says so.

Students and final models follow the official code's flags: random forests
(100 trees, depth 6) for Adult; for cod-rna XGBoost with 100 trees of depth 6,
``gamma=1, reg_lambda=1`` and learning rate 0.1 (its ``--lr 0.1``; the paper's
Table 5 states 0.05, setting ``codrna-l0-lr0.05``).

The paper states query budgets as a percentage of the reference code's held-out
split, which is twice the public set: "1 %" on Adult is 81 queries, i.e. 2 % of
the public set. This script uses the paper's query *counts*.

Usage::

    python bench/fedkt.py --settings adult-l0,adult-l1 --trials 5 --markdown out/fedkt.md
    python bench/fedkt.py --protocol reference-code --settings adult-l0 --seeds 0 1 2 --json OUT.json

``--public-portion P`` (FedKT's Table 3) trains on the first ⌈P·n⌉ rows of a seeded permutation of the public
set; the parties and the test set stay the seed's, so portions on one seed differ by the public set only.

``--json OUT`` writes one record per (setting, seed) — accuracy, ε classic and tight
(where private), fit seconds, whether the official rows were used — after every
seed, and a rerun with the same OUT skips the records already there (resumable). ``python -m bench.tables
fedkt-summary fedkt-official-rows`` renders docs/results.md's tables from the committed files. (The ``--speed``
mode went in issue 36: its table had no raw results; ``bench/federation.py`` times the same setting.)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field, is_dataclass, replace
from decimal import ROUND_CEILING, Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from privfed.pipelines import federated_split, load_dataset, teacher_subsets  # noqa: E402
from privfed.pipelines.data.datasets import reference_class_order  # noqa: E402
from privfed.pipelines.data.reference_rows import (  # noqa: E402
    REFERENCE_ROWS_DATASETS,
    load_reference_rows,
    reference_rows_split,
)
from privfed.pipelines.fedkt import steps as fedkt_steps  # noqa: E402
from privfed.pipelines.fedkt.estimator import CentralizedPATE, FedKT, Solo  # noqa: E402
from privfed.pipelines.protocol.progress import progress_bar  # noqa: E402
from privfed.pipelines.protocol.voting import consistent_votes  # noqa: E402
from sklearn.base import clone  # noqa: E402

from bench import provenance  # noqa: E402

DELTA = 1e-5


def permutation_teacher_subsets(X, y, *, n_partitions: int, n_teachers: int, random_state=None):
    """Equal shares of a random permutation per partition, with keyed_teacher_subsets' signature."""
    return teacher_subsets(len(X), n_partitions=n_partitions, n_teachers=n_teachers, random_state=random_state)


def use_permutation_teachers() -> None:
    """The ``--teacher-assignment permutation`` ablation, for the parties run in this process (``n_jobs=1``).

    Each party's teachers get equal shares of a random permutation (FedKT Algorithm 1 as written, the
    official code's ``array_split`` of a shuffle) instead of privfed's keyed hash of each example
    (``keyed_teacher_subsets``: stable under adding or removing one example, multinomial subset sizes,
    identical rows in one teacher). A measurement ablation only: it gives up the add/remove guarantee.
    """
    fedkt_steps.keyed_teacher_subsets = permutation_teacher_subsets


def teacher_assignment() -> str:
    """``"permutation"`` after :func:`use_permutation_teachers`, else ``"keyed"`` (recorded with each run)."""
    return "permutation" if fedkt_steps.keyed_teacher_subsets is permutation_teacher_subsets else "keyed"


def tree() -> Any:
    from sklearn.tree import DecisionTreeClassifier

    return DecisionTreeClassifier(max_depth=6)


def forest() -> Any:
    from sklearn.ensemble import RandomForestClassifier

    return RandomForestClassifier(n_estimators=100, max_depth=6, n_jobs=1)


def boosted(learning_rate: float = 0.1, min_split_loss: float = 1.0) -> Callable[[], Any]:
    """The official code's XGBoost student/final model (``gamma=1, reg_lambda=1``, its ``--lr``)."""

    def make() -> Any:
        from xgboost import XGBClassifier

        return XGBClassifier(n_estimators=100, max_depth=6, learning_rate=learning_rate, gamma=min_split_loss,
                             reg_lambda=1, n_jobs=1, tree_method="hist")

    return make


#: Where the MNIST MLPs train (``--device``): "cpu", "cuda" or "auto" (CUDA when available). Recorded per run.
DEVICE = {"name": "cpu"}


def torch_device(name: str) -> str | None:
    """The ``TorchClassifier(device=...)`` value for ``--device``: "auto" is None (CUDA when available)."""
    if name not in ("cpu", "cuda", "auto"):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'auto', got {name!r}")
    return None if name == "auto" else name


def resolved_device(name: str) -> str:
    """The device ``--device name`` trains on here (what provenance records)."""
    import torch

    return "cuda" if name == "cuda" or (name == "auto" and torch.cuda.is_available()) else "cpu"


def mlp(epochs: int = 10, batch_size: int = 64, weight_decay: float = 0.0) -> Callable[[], Any]:
    """FedKT's 784-100-100-10 MLP with Adam 1e-3, on :data:`DEVICE` (``--device``).

    The defaults are the bench's earlier MNIST row; the paper's FedKT settings (Appendix B.1 and Table 5:
    "for FedKT, SOLO, and PATE, the number of local epochs is simply set to 100", batch 32, Adam with
    L2 regularisation 1e-6) are ``mlp(100, 32, 1e-6)``.
    """

    def make() -> Any:
        from privfed.pipelines import TorchMLP

        return TorchMLP(hidden=(100, 100), epochs=epochs, batch_size=batch_size, lr=1e-3, weight_decay=weight_decay,
                        device=torch_device(DEVICE["name"]))

    return make


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
    "codrna-l0": Setting("cod_rna", 50, 2, 5, tree, boosted(0.1), (88.3, 0.6), baselines=True),
    "codrna-l0-lr0.05": Setting("cod_rna", 50, 2, 5, tree, boosted(0.05), (88.3, 0.6)),
    # XGBoost's default gamma = 0 (what privfed's bench used before): isolates the effect of the official gamma = 1
    "codrna-l0-gamma0": Setting("cod_rna", 50, 2, 5, tree, boosted(0.1, 0.0), (88.3, 0.6)),
    "mnist-l0": Setting("mnist", 10, 2, 5, mlp(), mlp(), (90.5, 0.3), trials=3),
    # the paper's FedKT settings for MNIST: 100 epochs, batch 32, Adam 1e-3 with L2 1e-6 (Appendix B.1, Table 5)
    "mnist-l0-paper": Setting("mnist", 10, 2, 5, mlp(100, 32, 1e-6), mlp(100, 32, 1e-6), (90.5, 0.3), trials=3),
    "adult-l1": Setting("adult_a9a", 50, 1, 5, tree, forest, (80.2, None), "L1", 0.04, 81, 4.73),
    "adult-l2": Setting("adult_a9a", 20, 1, 25, tree, forest, (78.6, None), "L2", 0.04, 81, 3.72),
    "codrna-l1": Setting("cod_rna", 50, 1, 5, tree, boosted(0.1), (84.7, None), "L1", 0.1, 74, 6.89),
    "codrna-l2": Setting("cod_rna", 20, 1, 25, tree, boosted(0.1), (84.7, None), "L2", 0.05, 297, 9.78),
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


def official_image_split(X: np.ndarray, y: np.ndarray, X_test: np.ndarray, y_test: np.ndarray, parties: int,
                         seed: int) -> SimpleNamespace:
    """The official FedKT code's protocol for image data sets (its ``--auxiliary_data_portion 0.5``).

    The public set is the first half of the official test file and accuracy is measured on its
    second half; the whole training file is shared among the parties (Dirichlet β = 0.5). The
    parties are privfed's draw (``dirichlet_partition``), not the official code's rows.
    """
    from privfed.pipelines.data.partition import dirichlet_partition

    indices = dirichlet_partition(y, parties, 0.5, random_state=seed)
    half = len(X_test) // 2
    return SimpleNamespace(parties=[(X[rows], y[rows]) for rows in indices], X_public=X_test[:half],
                           y_public=y_test[:half], X_test=X_test[half:], y_test=y_test[half:], rows_source=None)


def prepare(name: str, folder: Path, protocol: str, parties: int, seed: int, rows_file: Path | None = None,
            official_labels: bool = False):
    """The split for one seed, and where its rows came from (a description printed and recorded)."""
    data = load_dataset(name, folder)
    X, X_test = data.X_train, data.X_test
    if name in ("mnist", "fashion_mnist"):
        X = X.reshape(len(X), -1).astype(np.float32) / 255.0
        X_test = X_test.reshape(len(X_test), -1).astype(np.float32) / 255.0
    if protocol == "reference-code" and name == "mnist":
        return official_image_split(X, data.y_train, X_test, data.y_test, parties, seed), (
            "the official code's image protocol (public: the test file's first half; evaluation: its second half; "
            "parties: privfed's Dirichlet draw of the training file)")
    if protocol == "reference-code":
        if rows_file is not None and name in REFERENCE_ROWS_DATASETS:
            try:
                rows = load_reference_rows(rows_file, dataset=name, n_parties=parties, seed=seed)
            except (FileNotFoundError, KeyError) as missing:
                print(f"  official rows unavailable ({missing}); falling back to rows drawn by privfed", flush=True)
            else:
                split = reference_rows_split(X, data.y_train, rows, official_labels=official_labels)
                return split, f"official rows {rows.key}" + (", the code's label coding" if official_labels else "")
        split = federated_split(X, data.y_train, n_parties=parties, beta=0.5, protocol="reference-code",
                                random_state=seed)
        return split, "privfed's draw with the reference code's sizes (not the official rows)"
    public = 5000 if name == "mnist" else reference_public_size(len(X))
    # Deal the Dirichlet classes out in the order FedKT's code does (for a9a and cod-rna: the minority first),
    # so the partitions are the paper's kind; see docs/results.md for what the natural order does.
    split = federated_split(
        X, data.y_train, n_parties=parties, beta=0.5, public_size=public, X_test=X_test, y_test=data.y_test,
        class_order=reference_class_order(data.y_train), random_state=seed,
    )
    return split, "standard protocol (privfed's draw, official test file)"


def public_portion(split: Any, portion: float, seed: int) -> Any:
    """``split`` with its public set cut to ``portion`` of its rows (FedKT's Table 3: 20 % to 100 %).

    The kept rows are the first ⌈portion · n⌉ of a permutation drawn from ``seed`` (no guarantee relies on it),
    in public-set order; the parties and the test set are unchanged. On one seed a smaller portion's rows are
    a subset of a larger one's, so portions differ by the public set's size only.

    Parameters
    ----------
    split : FederatedSplit or SimpleNamespace
        One seed's split (from :func:`prepare`).
    portion : float
        The share of the public set kept, in (0, 1]; 1 returns ``split`` itself.
    seed : int
        The split's seed.

    Returns
    -------
    FederatedSplit or SimpleNamespace
        The split with the smaller public set (``public_indices`` cut too where the split has them).
    """
    if not 0 < portion <= 1:
        raise ValueError(f"public_portion must be in (0, 1], got {portion!r}")
    if portion == 1:
        return split
    n = len(split.X_public)
    keep = np.sort(np.random.default_rng(seed).permutation(n)[: math.ceil(portion * n)])
    cut: dict[str, Any] = {"X_public": split.X_public[keep], "y_public": split.y_public[keep]}
    if getattr(split, "public_indices", None) is not None:
        cut["public_indices"] = split.public_indices[keep]
    return replace(split, **cut) if is_dataclass(split) else SimpleNamespace(**{**vars(split), **cut})


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


def official_tie_rule(model: FedKT, split, tie_class: int) -> dict:
    """L0 only: how many server votes are tied, and the accuracy with the official code's tie rule.

    privfed breaks tied (and all-inconsistent, all-zero) vote counts at random; the official code takes
    numpy's argmax, i.e. its class 0 (the label other than row 0's). The final model is refitted here on
    the same votes with that rule and the final model's own random_state, so the two accuracies differ
    only by the tie rule (before, an unseeded refit added the forest's own randomness). Also the share of
    the public queries whose voted label (with that rule) is their true label, which the official code
    logs as its final "Labeling acc", and how often the minority class is voted, true and predicted.
    """
    X_final = split.X_public
    predictions = np.stack([[student.predict(X_final) for student in party] for party in model.students_])
    votes = consistent_votes(predictions, len(model.classes_))  # the students predict class codes
    tied = votes.max(axis=1)[:, None] == votes
    is_tie = tied.sum(axis=1) > 1
    labels = np.argmax(votes, axis=1)
    labels[is_tie] = int(np.searchsorted(model.classes_, tie_class))
    # The final model's own parameters, random_state included, so the refit differs from it by the labels only.
    final = clone(model.final_model_).fit(X_final, labels)
    values, counts = np.unique(split.y_public, return_counts=True)
    minority = values[np.argmin(counts)]
    return {
        "tied_queries": int(is_tie.sum()),
        "all_inconsistent_queries": int((votes.sum(axis=1) == 0).sum()),
        "accuracy_official_tie_rule": 100 * float(np.mean(model.classes_[final.predict(split.X_test)] == split.y_test)),
        "server_label_accuracy_official_tie_rule": 100 * float(np.mean(model.classes_[labels] == split.y_public)),
        "minority_share_public_true": 100 * float(np.mean(split.y_public == minority)),
        "minority_share_voted_official_tie_rule": 100 * float(np.mean(model.classes_[labels] == minority)),
        "minority_share_test_true": 100 * float(np.mean(split.y_test == minority)),
        "minority_share_test_predicted": 100 * float(np.mean(model.predict(split.X_test) == minority)),
    }


def fit_and_score(model: FedKT, split, record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with the fit's seconds and the test accuracy (%) of ``model`` fitted on ``split``.

    A fit that raises ``ValueError`` (e.g. every voted label in one class: no final model can be trained) is a
    failed run: the record gets ``failed`` (the message) and ``seconds`` instead of an accuracy.
    """
    start = time.perf_counter()
    try:
        model.fit(split.parties, split.X_public)
    except ValueError as error:
        return {**record, "failed": str(error), "seconds": time.perf_counter() - start}
    return {**record, "seconds": time.perf_counter() - start,
            "accuracy": 100 * float(model.score(split.X_test, split.y_test))}


def run_setting(key: str, setting: Setting, folder: Path, protocol: str, seeds: list[int], n_jobs: int,
                rows_file: Path | None = None, baselines: bool = True, done: dict | None = None,
                record: Callable[[dict], None] | None = None, model_seeds: list[int] | None = None,
                official_labels: bool = False, tie_rule: str = "privfed", portion: float = 1.0) -> list[dict]:
    """Every (seed, model seed) run of one setting: the records (failed runs included), new or from ``done``.

    ``portion``: the share of the public set trained on (:func:`public_portion`)."""
    unit = "example" if setting.privacy == "L2" else "party"
    results = []
    runs = [(trial, model_seed) for trial in seeds for model_seed in (model_seeds or [trial])]
    for trial, model_seed in progress_bar(runs, progress=None, desc=key, unit="trial"):
        if done is not None and (key, trial, model_seed) in done:
            result = done[(key, trial, model_seed)]
            print(f"  {key} seed {trial} (model seed {model_seed}): already in the JSON file, skipped", flush=True)
        else:
            result = run_seed(key, setting, folder, protocol, trial, n_jobs, rows_file, baselines, unit, model_seed,
                              official_labels, tie_rule, portion)
            if record is not None:
                record(result)
        results.append(result)
    return results


def run_seed(key: str, setting: Setting, folder: Path, protocol: str, trial: int, n_jobs: int,
             rows_file: Path | None, baselines: bool, unit: str, model_seed: int,
             official_labels: bool = False, tie_rule: str = "privfed", portion: float = 1.0) -> dict:
    """One run; ``tie_rule="official"`` (official rows only): the official code's label coding, and for L0 the
    accuracy of the final model fitted on the server votes with the code's tie rule (see :func:`official_tie_rule`);
    ``portion``: the share of the public set trained on (:func:`public_portion`)."""
    official_labels = official_labels or tie_rule == "official"
    split, rows_from = prepare(setting.data, folder, protocol, setting.parties, seed=trial, rows_file=rows_file,
                               official_labels=official_labels)
    full_public = len(split.X_public)
    split = public_portion(split, portion, seed=trial)
    print(f"  {key} seed {trial}: {rows_from}"
          + (f"; public set {len(split.X_public)} of {full_public} rows" if portion < 1 else ""), flush=True)
    model = fedkt_for(setting, split, model_seed, n_jobs)
    result: dict[str, Any] = {
        "setting": key, "seed": trial, "model_seed": model_seed, "protocol": protocol,
        "official_rows": split.rows_source is not None,
        "label_coding": "official" if official_labels and split.rows_source is not None else "privfed",
        "tie_rule": tie_rule,
        "teacher_assignment": teacher_assignment(),
        "rows": rows_from, "rows_source": split.rows_source,
        "majority_class_accuracy": 100 * float(np.mean(split.y_test == np.bincount(split.y_test).argmax())),
        "public_portion": portion, "public_size": len(split.X_public),
        "delta": DELTA, "epsilon_unit": None if setting.privacy == "L0" else unit,
    }
    start = time.perf_counter()
    try:
        model.fit(split.parties, split.X_public)
    except ValueError as error:  # e.g. every voted label in one class: no final model can be trained
        print(f"  {key} seed {trial}: FAILED: {error}", flush=True)
        return {**result, "failed": str(error)}
    result["fit_seconds"] = time.perf_counter() - start
    result["accuracy"] = 100 * float(model.score(split.X_test, split.y_test))
    if setting.data == "mnist" and protocol == "standard":
        # MNIST's test file: the first 5,000 images come from NIST's training writers, the last 5,000 from its test
        # writers; the official code's image protocol evaluates on the second half only.
        half = len(split.y_test) // 2
        for name, rows in (("first", slice(None, half)), ("second", slice(half, None))):
            result[f"accuracy_test_{name}_half"] = 100 * float(model.score(split.X_test[rows], split.y_test[rows]))
    if setting.privacy != "L0":
        result["epsilon_classic"] = model.ledger_.account(delta=DELTA, analysis="classic", unit=unit).epsilon
        tight = model.ledger_.account(delta=DELTA, unit=unit)
        result["epsilon_tight"] = tight.epsilon
        result["epsilon_tight_data_independent"] = tight.epsilon_data_independent
        result["queries_answered"] = (
            model.n_queries_answered_ if setting.privacy == "L1" else min(model.n_local_queries_answered_)
        )
    elif setting.data in REFERENCE_ROWS_DATASETS and protocol == "reference-code":
        y_train = load_dataset(setting.data, folder).y_train
        tie_class = 0 if split.rows_source is not None and official_labels else int(1 - y_train[0])
        result.update(official_tie_rule(model, split, tie_class=tie_class))
        if tie_rule == "official":  # the reported accuracy is the official rule's; privfed's random ties kept beside
            result["accuracy_privfed_server_ties"] = result["accuracy"]
            result["accuracy"] = result["accuracy_official_tie_rule"]
    if setting.baselines and baselines:
        result["solo_accuracy"] = 100 * Solo(setting.student(), random_state=model_seed).fit(split.parties).score(
            split.X_test, split.y_test)
        central = CentralizedPATE(setting.teacher(), setting.student(), n_partitions=setting.partitions,
                                  n_teachers=setting.teachers, random_state=model_seed,
                                  ).fit(split.parties, split.X_public)
        result["centralized_pate_accuracy"] = 100 * central.score(split.X_test, split.y_test)
    print(f"  {key} seed {trial} (model seed {model_seed}): accuracy {result['accuracy']:.2f}%, "
          f"fit {result['fit_seconds']:.1f} s"
          + (f", ε classic {up(result['epsilon_classic'], 3)}, tight {up(result['epsilon_tight'], 3)}"
             if "epsilon_classic" in result else "")
          + (f"; {result['tied_queries']} tied votes, official tie rule {result['accuracy_official_tie_rule']:.2f}%"
             if "tied_queries" in result else ""),
          flush=True)
    return result


def mean_std(values: list[float]) -> str:
    """mean ± sd (n − 1) and the 95 % t-interval of the mean, or the one value."""
    from bench.tables._stats import mean_sd, t_interval

    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.1f}"
    mean, sd = mean_sd(values)
    low, high = t_interval(values)
    return f"{mean:.1f} ± {sd:.1f} [{low:.1f}, {high:.1f}]"


def up(value: float, digits: int = 2) -> str:
    """ε rounded up (never down) to ``digits`` decimals, from the float's exact shortest decimal form."""
    if not math.isfinite(value):
        return str(value)
    return str(Decimal(repr(float(value))).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_CEILING))


def eps_range(values: list[float]) -> str:
    if not values:
        return "–"
    low, high = min(values), max(values)
    return up(high) if math.isclose(low, high, rel_tol=1e-3) else f"{up(low)}–{up(high)}"


#: How the summary table names each setting.
LABELS = {
    "adult-l0": "Adult L0", "codrna-l0": "cod-rna L0", "mnist-l0": "MNIST L0 (MLP, bench settings)",
    "mnist-l0-paper": "MNIST L0 (MLP, the paper's settings)",
    "adult-l1": "Adult L1, γ = 0.04, 81 queries", "adult-l2": "Adult L2, γ = 0.04, 81 local queries",
    "codrna-l1": "cod-rna L1, γ = 0.1, 74 queries", "codrna-l2": "cod-rna L2, γ = 0.05, 297 local queries",
    "adult-l1-tight": "**Adult L1, budget = paper's ε (tight)**",
    "adult-l2-tight": "**Adult L2, budget = paper's ε (tight)**",
}

HEADER = (
    "| setting | protocol | runs | paper accuracy % | ours % (mean ± sd [95 % interval]) | majority class % | "
    "paper ε | ours ε classic | ours ε tight (data-independent) | queries answered | SOLO % | centralized PATE % | "
    "fit s / run |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def markdown_row(key: str, results: list[dict]) -> str:
    """One setting's row of the summary table from its records (failed runs counted, not averaged)."""
    setting = SETTINGS[key]
    ok = [r for r in results if "failed" not in r]
    paper_accuracy, paper_std = setting.paper_accuracy
    paper = f"{paper_accuracy}" + (f" ± {paper_std}" if paper_std else "")
    failed = len(results) - len(ok)
    runs = f"{len(results)}" + (f" ({failed} failed)" if failed else "")
    protocol = results[0]["protocol"] + (" (official rows)" if all(r["official_rows"] for r in results) else "")

    def field(name: str) -> list[float]:
        return [r[name] for r in ok if r.get(name) is not None]

    queries = sorted(set(field("queries_answered")))
    seconds = field("fit_seconds")
    return (
        f"| {LABELS.get(key, key)} | {protocol} | {runs} | {paper} | {mean_std(field('accuracy'))} | "
        f"{np.mean(field('majority_class_accuracy')):.1f} | {setting.paper_epsilon or '–'} | "
        f"{eps_range(field('epsilon_classic'))} | {eps_range(field('epsilon_tight'))} "
        f"({eps_range(field('epsilon_tight_data_independent'))}) | {'/'.join(map(str, queries)) or '–'} | "
        f"{mean_std(field('solo_accuracy'))} | {mean_std(field('centralized_pate_accuracy'))} | "
        f"{np.mean(seconds) if seconds else float('nan'):.1f} |"
    ).replace(" (–) |", " |")


def summary_markdown(documents: list[dict]) -> str:
    """The summary table over ``--json`` documents: one row per (setting, protocol), in the order run."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for document in documents:
        for r in document["records"]:
            if r.get("model_seed", r["seed"]) == r["seed"] and r.get("tie_rule", "privfed") == "privfed":
                groups.setdefault((r["setting"], r["protocol"]), []).append(r)
    return HEADER + "\n" + "\n".join(markdown_row(key, results) for (key, _), results in groups.items())


#: The official code's accuracy per seed on the same rows (``../shared/paper_tables/fedkt_official_runs.md``:
#: github QinbinLi/FedKT @ 0bb9a89 run on this kind of machine; None: the run crashed).
OFFICIAL_RUNS = {
    "adult-l0": {0: 82.14, 1: 82.24, 2: 80.77},
    "codrna-l0": {0: 88.56, 1: 88.75, 2: 89.49},
    "adult-l1": {0: 80.15, 1: 74.38, 2: 73.84},
    "adult-l2": {0: 77.03, 1: None, 2: 75.66, 3: 74.70, 4: 80.40},
}
OFFICIAL_EPSILON = {"adult-l1": 3.7183, "adult-l2": 3.7183}


def per_seed_markdown(documents: list[dict]) -> str:
    """Ours beside the official code's runs, per seed, from ``--json`` documents (reference-code runs)."""
    records = [r for document in documents for r in document["records"]
               if r["protocol"] == "reference-code" and r.get("model_seed", r["seed"]) == r["seed"]
               and r.get("tie_rule", "privfed") == "privfed"]
    order = {key: index for index, key in enumerate(dict.fromkeys(r["setting"] for r in records))}
    records.sort(key=lambda r: (order[r["setting"]], r["seed"]))  # a resumed run appends later seeds at the end
    lines = ["| setting | seed | official rows | official code % | ours % | ours − official | ε classic (ours) | "
             "ε tight (ours) | official ε (its script) | fit s (ours) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        official = OFFICIAL_RUNS.get(r["setting"], {}).get(r["seed"], "–")
        ours = "failed" if "failed" in r else f"{r['accuracy']:.2f}"
        difference = (f"{r['accuracy'] - official:+.2f}" if isinstance(official, float) and "failed" not in r else "–")
        lines.append(
            f"| {r['setting']} | {r['seed']} | {'yes' if r['official_rows'] else 'no'} | "
            f"{'crashed' if official is None else official} | {ours} | {difference} | "
            f"{up(r['epsilon_classic'], 3)} | {up(r['epsilon_tight'], 3)} | "
            f"{OFFICIAL_EPSILON.get(r['setting'], '–')} | "
            f"{r['fit_seconds']:.1f} |" if "epsilon_classic" in r else
            f"| {r['setting']} | {r['seed']} | {'yes' if r['official_rows'] else 'no'} | "
            f"{'crashed' if official is None else official} | {ours} | {difference} | – | – | – | "
            f"{r.get('fit_seconds', float('nan')):.1f} |")
    return "\n".join(lines)


class JsonRecords:
    """Per-seed records in a JSON file, rewritten after every seed (resumable: done seeds are skipped).

    The file carries the provenance of the run (``bench/provenance.py``: commit, seeds, settings, machine,
    load at the start and at the last checkpoint); a resumed run appends its own record to ``resumed``.
    """

    def __init__(self, path: Path, protocol: str, run: dict[str, Any] | None = None, portion: float = 1.0) -> None:
        self.path = path
        command = "python " + " ".join(sys.argv)
        self.document: dict[str, Any] = {"command": command, "records": []}
        self.run = run
        if path.is_file():
            self.document = json.loads(path.read_text(encoding="utf-8"))
            self.document.setdefault("resumed_with", []).append(command)
            provenance.earlier_records(self.document["records"])
        self.done = {(r["setting"], r["seed"], r.get("model_seed", r["seed"])): r
                     for r in self.document["records"]
                     if r["protocol"] == protocol and r.get("public_portion", 1.0) == portion}

    def add(self, record: dict) -> None:
        self.document["records"].append(record)
        if self.run is not None:
            provenance.stamp_records(self.document["records"], self.run)
            finished = provenance.finish(self.run)
            if "provenance" not in self.document or self.document["provenance"].get("started") == self.run["started"]:
                self.document["provenance"] = finished
            else:  # a resumed run: the first run's record stays, this one is added
                resumed = self.document.setdefault("resumed", [])
                resumed[:] = [entry for entry in resumed if entry.get("started") != self.run["started"]] + [finished]
            # the seeds the file holds (a stopped or resumed run holds other seeds than its command asked for)
            self.document["provenance"]["seeds"] = sorted({r["seed"] for r in self.document["records"]})
        provenance.write_json(self.path, self.document)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parents[2] / "shared"
    parser.add_argument("--data", default=str(root / "datasets"))
    parser.add_argument("--reference-rows", default=str(root / "peer_splits" / "fedkt_reference_splits.json.gz"),
                        help="the official code's rows (used with --protocol reference-code where present)")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--protocol", default="standard", choices=("standard", "reference-code"))
    parser.add_argument("--trials", type=int, default=None, help="seeds 0..TRIALS-1 (default: each setting's own)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="exactly these seeds (overrides --trials)")
    parser.add_argument("--model-seeds", type=int, nargs="+", default=None,
                        help="FedKT random_state values to run on each seed's split (default: the seed itself); "
                             "measures the spread due to the models' randomness on fixed rows")
    parser.add_argument("--n-jobs", type=int, default=1,
                        help="party workers (default 1, as FedKT's own; 2 pays only on a free second core and "
                             "triples the peak memory: docs/results.md, *FedKT's memory and workers*)")
    parser.add_argument("--no-baselines", action="store_true", help="skip SOLO and centralized PATE")
    parser.add_argument("--official-labels", action="store_true",
                        help="on the official rows, code labels as the official code does (row 0's label = 1)")
    parser.add_argument("--tie-rule", choices=("privfed", "official"), default="privfed",
                        help="official (with --protocol reference-code on the official rows): the official code's "
                             "label coding (as --official-labels) and, for L0, its server tie rule (a tied vote goes "
                             "to its class 0); the reported accuracy is that rule's, privfed's random ties kept beside")
    parser.add_argument("--teacher-assignment", choices=("keyed", "permutation"), default="keyed",
                        help="privfed's keyed hash (default), or equal shares of a permutation as the official code "
                             "(an ablation: runs the parties in this process; write it to its own --json)")
    parser.add_argument("--public-portion", type=float, default=1.0,
                        help="the share of the public set trained on, in (0, 1] (FedKT's Table 3: 0.2 to 1); the "
                             "first rows of a seeded permutation, the parties and test set unchanged (default 1)")
    parser.add_argument("--json", default=None, help="per-seed records, written after every seed; resumable")
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu",
                        help="where the MNIST MLPs train (auto: CUDA when available); recorded in the provenance")
    parser.add_argument("--markdown", default=None, help="append the table to this Markdown file")
    args = parser.parse_args()
    folder = Path(args.data)
    keys = [key.strip() for key in args.settings.split(",") if key.strip()]
    unknown = [key for key in keys if key not in SETTINGS]
    if unknown:
        parser.exit(2, f"bench/fedkt.py: error: unknown setting(s) {unknown}; choose from {sorted(SETTINGS)}\n")
    if args.tie_rule == "official" and args.protocol != "reference-code":
        parser.exit(2, "bench/fedkt.py: error: --tie-rule official needs --protocol reference-code "
                       "(the official rows)\n")
    if args.teacher_assignment == "permutation":
        use_permutation_teachers()
        args.n_jobs = 1  # the replacement lives in this process only
    if not 0 < args.public_portion <= 1:
        parser.exit(2, f"bench/fedkt.py: error: --public-portion must be in (0, 1], got {args.public_portion}\n")
    DEVICE["name"] = args.device
    if args.device == "cuda" and resolved_device("auto") != "cuda":
        parser.exit(2, "bench/fedkt.py: error: --device cuda but CUDA is not available on this machine\n")
    run = provenance.start(command="python " + " ".join(sys.argv), seeds=args.seeds,
                           settings={key: value for key, value in vars(args).items() if key not in ("from_json",)},
                           device=resolved_device(args.device))
    records = JsonRecords(Path(args.json), args.protocol, run, portion=args.public_portion) if args.json else None
    rows_file = Path(args.reference_rows) if args.protocol == "reference-code" else None
    lines = []
    for key in keys:
        setting = SETTINGS[key]
        seeds = args.seeds if args.seeds is not None else list(range(args.trials or setting.trials))
        results = run_setting(key, setting, folder, args.protocol, seeds, args.n_jobs, rows_file,
                              baselines=not args.no_baselines, done=records.done if records else None,
                              record=records.add if records else None, model_seeds=args.model_seeds,
                              official_labels=args.official_labels, tie_rule=args.tie_rule,
                              portion=args.public_portion)
        lines.append(markdown_row(key, results))
        print(HEADER.splitlines()[0])
        print(lines[-1], flush=True)
    table = HEADER + "\n" + "\n".join(lines) + "\n"
    print(table)
    if args.markdown:
        with open(args.markdown, "a", encoding="utf-8") as handle:
            handle.write(table + "\n")


if __name__ == "__main__":
    main()
