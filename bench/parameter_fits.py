"""Small fits of every pipeline's noised configurations, each audited for parameter consistency.

``privfed.audit_parameters`` compares what each step passed to its noise function with the ledger
(:mod:`privfed.audit.parameters`). This script fits FedKT (L1 Laplace, L1 Confident GNMax, L2, L1 under secure
aggregation, DP-SGD teachers), FedKD (Laplace, secure aggregation), PrivateKT and Selective-FD (GNMax,
randomized response) on a few hundred digits, in process, and prints one JSON line: configuration → the check's
status and detail. bench/mutation_testing.py runs it in each mutated copy::

    python -m bench.parameter_fits
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np


def _digits() -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    return [(X[i:800:3], y[i:800:3]) for i in range(3)], X[800:1000]


def configurations() -> dict[str, Callable[[], Any]]:
    """Name → an unfitted estimator, one per noised configuration (small: each fits in seconds)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.tree import DecisionTreeClassifier

    from privfed import DPConfig, FedKD, FedKT, PrivateKT, SelectiveFD, TorchMLP

    tree = DecisionTreeClassifier(max_depth=4)

    def fedkt(**settings: Any) -> FedKT:
        return FedKT(tree, n_teachers=2, query_fraction=0.5, random_state=0, **settings)

    dp_mlp = TorchMLP(hidden=(8,), epochs=1, batch_size=32, random_state=0,
                      dp=DPConfig(noise_multiplier=1.1, max_grad_norm=1.0, sample_rate=0.1, delta=1e-5))
    return {
        "FedKT-L1 Laplace": lambda: fedkt(privacy="L1", gamma=0.5),
        "FedKT-L1 Confident GNMax": lambda: fedkt(privacy="L1", aggregator="confident-gnmax", sigma=1.0,
                                                  threshold=2.0, sigma_threshold=1.0),
        "FedKT-L2 Laplace": lambda: fedkt(privacy="L2", gamma=0.5),
        "FedKT-L1 Skellam (secure)": lambda: fedkt(privacy="L1", aggregator="skellam", sigma=2.0,
                                                   secure_aggregation=True),
        "FedKT DP-SGD teachers": lambda: FedKT(dp_mlp, n_teachers=1, query_fraction=0.5, random_state=0,
                                               privacy="L1", gamma=0.5),
        "FedKD Laplace": lambda: FedKD(LogisticRegression(max_iter=100), tree, gamma=0.5, clip=4.0,
                                       quantization_scale=20, random_state=0),
        "FedKD Skellam (secure)": lambda: FedKD(LogisticRegression(max_iter=100), tree, aggregator="skellam",
                                                secure_aggregation=True, sigma=4.0, gamma=None, clip=4.0,
                                                quantization_scale=20, random_state=0),
        "PrivateKT": lambda: PrivateKT(tree, epsilon_per_round=2.0, rounds=2, self_training_size=60,
                                       random_state=0),
        "Selective-FD GNMax": lambda: SelectiveFD(LogisticRegression(max_iter=100), rounds=1, proxy_batch=40,
                                                  labels="hard", privacy="gnmax", sigma=2.0, random_state=0),
        "Selective-FD randomized response": lambda: SelectiveFD(
            LogisticRegression(max_iter=100), rounds=1, proxy_batch=40, labels="hard",
            privacy="rr", epsilon_per_round=2.0, random_state=0),
    }


def run() -> dict[str, dict[str, Any]]:
    """Fit every configuration and audit its parameters: name → status, detail and the laws recorded."""
    from privfed import audit_parameters

    parties, public = _digits()
    results = {}
    for name, build in configurations().items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = build().fit(parties, public)
            check = audit_parameters(model)
            results[name] = {"status": check.status, "detail": check.detail,
                             "laws": sorted({draw["law"] for draw in model.run_parameters_})}
        except Exception as error:  # noqa: BLE001  (a crash under a mutation is a finding, recorded as such)
            results[name] = {"status": "crashed", "detail": f"{type(error).__name__}: {error}", "laws": []}
    return results


if __name__ == "__main__":
    print(json.dumps(run()))
