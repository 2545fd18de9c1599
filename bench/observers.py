"""The pipeline × observer × unit table of ε, from real runs (issue 43, part A, item 4).

For each pipeline's default configuration and its documented private one (the configuration whose ε is finite
against the coordinator), one small run on scikit-learn's digits (3 Dirichlet parties, 60 public examples, a
few seconds each) and its ledger's ε at δ = 1e-5 for every observer (coordinator, public) and unit (party,
example); for every ∞, the ledger's reasons (the releases no mechanism covers) and the setting that removes each.

Usage::

    python bench/observers.py --json bench/results/observers.json
    python -m bench.tables observers    # the table of docs/results.md, from that file
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from privfed.pipelines import dirichlet_partition  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.tree import DecisionTreeClassifier  # noqa: E402

from bench import provenance  # noqa: E402

DELTA = 1e-5
OBSERVERS = ("coordinator", "public")
UNITS = ("party", "example")
CLASSES = list(range(10))

#: What removes each kind of uncovered release: (a phrase of the ledger's reason, the setting that covers it).
FIXES = (
    ("the schema exchange", "classes= (the public label set: parties withhold their size and labels)"),
    ("reach the coordinator before noise", "FedKD: aggregator='skellam', secure_aggregation=True, sigma=… "
     "(each party adds its Skellam share; the coordinator gets the noisy sum only)"),
    ("class counts", "weighting='uniform' (or classes=, or secure aggregation: no counts are sent)"),
    ("no noise is added at all", "privacy='rr' with labels='hard' (randomized response on the client)"),
    ("client-side selectors", "DP selectors (dp_selector=True, the default with DP-SGD clients)"),
    ("trained on its raw data", "DP-SGD client models (dp=DPConfig(..., sample_rate=...))"),
    ("not at party level", "none: the DP selector's noise is calibrated to one example; at party level its bound is "
     "group privacy over the client's whole data set, whose size classes= withholds (and at hundreds of examples "
     "the bound is vacuous)"),
    ("students' predictions", "FedKT: privacy='L1' with aggregator='skellam', secure_aggregation=True"),
    ("no noise", "a noisy aggregator (FedKT privacy='L1' or 'L2')"),
)


def _fix(reason: str, *, unit: str, dp_trained: bool) -> str:
    if unit == "party" and dp_trained and "trained on its raw data" in reason:
        return ("none: the published model is client 0's own, trained on its data alone; at party level DP-SGD's "
                "bound is group privacy over all of client 0's examples (its size withheld under classes=; vacuous "
                "at hundreds of examples)")
    for phrase, setting in FIXES:
        if phrase in reason:
            return setting
    return "(no setting known)"


def _digits() -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    order = np.random.default_rng(0).permutation(len(y))
    X, y = X[order], y[order]
    parts = dirichlet_partition(y[:1100], 3, 1.0, min_size=40, random_state=0)
    return [(X[:1100][index], y[:1100][index]) for index in parts], X[1100:1160]


def _configurations() -> list[tuple[str, str, Any]]:
    """(pipeline, configuration, unfitted estimator), the default first, then the private one."""
    from privfed.pipelines.fedkd.estimator import FedKD
    from privfed.pipelines.fedkt.estimator import FedKT
    from privfed.pipelines.models.dp_config import DPConfig
    from privfed.pipelines.models.torch_models import TorchMLP
    from privfed.pipelines.privatekt.estimator import PrivateKT
    from privfed.pipelines.selective_fd.estimator import SelectiveFD

    tree = DecisionTreeClassifier(max_depth=5)
    dp = DPConfig(noise_multiplier=1.0, max_grad_norm=1.0, delta=DELTA, sample_rate=0.2)
    mlp = {"hidden": (8,), "epochs": 1, "random_state": 0}
    fd = {"rounds": 1, "local_steps": 1, "distill_steps": 1, "proxy_batch": 20, "random_state": 0}
    return [
        ("FedKT", "privacy='L1', gamma=0.1", FedKT(tree, n_partitions=2, n_teachers=3, privacy="L1", gamma=0.1,
                                                   random_state=0)),
        ("FedKT", "L1, aggregator='skellam', secure_aggregation=True, sigma=20, classes=",
         FedKT(tree, n_partitions=2, n_teachers=3, privacy="L1", aggregator="skellam", secure_aggregation=True,
               sigma=20.0, classes=CLASSES, random_state=0)),
        ("FedKD", "default (gamma=1, class-count weights)",
         FedKD(LogisticRegression(max_iter=200), DecisionTreeClassifier(max_depth=6), random_state=0)),
        ("FedKD", "gamma=None, aggregator='skellam', secure_aggregation=True, sigma=40, S=2, Z=4, classes=",
         FedKD(LogisticRegression(max_iter=200), DecisionTreeClassifier(max_depth=6), gamma=None,
               aggregator="skellam", secure_aggregation=True, sigma=40.0, quantization_scale=2, clip=4.0,
               classes=CLASSES, random_state=0)),
        ("PrivateKT", "default (ε = 5 per report)",
         PrivateKT(tree, rounds=2, queries_per_round=5, self_training_size=40, buffer_rounds=2, random_state=0)),
        ("PrivateKT", "classes=",
         PrivateKT(tree, rounds=2, queries_per_round=5, self_training_size=40, buffer_rounds=2, classes=CLASSES,
                   random_state=0)),
        ("Selective-FD", "default (privacy=None, raw-data selectors)", SelectiveFD(TorchMLP(**mlp), **fd)),
        ("Selective-FD", "DP-SGD clients (sample_rate=0.2), DP selectors, labels='hard', privacy='rr', "
         "epsilon_per_round=8, classes=",
         SelectiveFD(TorchMLP(**mlp, dp=dp), labels="hard", privacy="rr", epsilon_per_round=8.0,
                     dp_selector_frequencies=8, n_auxiliary=40, classes=CLASSES, **fd)),
    ]


def run() -> list[dict[str, Any]]:
    """Fit every configuration and read its ledger per observer and unit."""
    parties, public = _digits()
    rows = []
    for pipeline, configuration, estimator in _configurations():
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            estimator.fit(parties, public)
        seconds = time.perf_counter() - started
        dp_trained = getattr(getattr(estimator, "model", None), "dp", None) is not None
        cells = {}
        for observer in OBSERVERS:
            for unit in UNITS:
                report = estimator.ledger_.account(DELTA, unit=unit, observer=observer)
                reasons = list(report.uncovered) if math.isinf(report.epsilon) else []
                cells[f"{observer}/{unit}"] = {
                    "epsilon": None if math.isinf(report.epsilon) else float(report.epsilon),
                    "reasons": reasons,
                    "fixes": [_fix(reason, unit=unit, dp_trained=dp_trained) for reason in reasons]}
        rows.append({"pipeline": pipeline, "configuration": configuration, "seconds": round(seconds, 2),
                     "cells": cells})
        print(f"{pipeline:13s} {seconds:6.1f} s  " + "  ".join(
            f"{key}={'∞' if cell['epsilon'] is None else format(cell['epsilon'], '.3g')}"
            for key, cell in cells.items()), flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, required=True, help="where to write the raw results")
    arguments = parser.parse_args(argv)
    record = provenance.start(command="python bench/observers.py --json " + str(arguments.json), seeds=[0],
                              settings={"data": "digits, 3 Dirichlet(1) parties over 1,100 rows, 60 public",
                                        "delta": DELTA})
    rows = run()
    provenance.write_json(arguments.json, {"delta": DELTA, "rows": rows, "provenance": provenance.finish(record)})


if __name__ == "__main__":
    main()
