"""PrivateKT on Flower against the in-process run: bytes per client and wall time, measured side by side.

scikit-learn's digits (bundled; 10 clients, Dirichlet(1)), a TorchMLP global model, the paper's K = 2
labels per report, same seed throughout:

* bytes per client per round it joins, by message kind (``bandwidth_``), against FedAvg's exchange of
  the same network (its float32 weights down and up);
* ``privfed.federation.simulate`` (Flower's Ray engine, one virtual SuperNode per client) against
  ``fit`` with ``batch_clients=False`` (the same sequential party step), on the same cores, with the
  ledger ε of both.

Not part of the test suite. Usage::

    python bench/federation_privatekt.py               # both
    python bench/federation_privatekt.py --skip-flower # bytes only
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def estimator(rounds: int):
    from privfed.pipelines.models.torch_models import TorchMLP
    from privfed.pipelines.privatekt.estimator import PrivateKT

    return PrivateKT(TorchMLP(hidden=(64,), lr=1e-2, batch_size=32, random_state=0), epsilon_per_round=5.0,
                     queries_per_round=2, buffer_rounds=25, self_training_size=200, rounds=rounds, client_fraction=0.5,
                     local_epochs=2, random_state=0, batch_clients=False)


def main() -> None:
    import torch

    torch.set_num_threads(1)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--skip-flower", action="store_true", help="only the bytes")
    args = parser.parse_args()
    from privfed.accounting.report import round_up
    from privfed.pipelines import dirichlet_partition
    from privfed.pipelines.privatekt.steps import network_parameters
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    order = np.random.default_rng(0).permutation(len(y))
    X, y = X[order], y[order]
    parts = dirichlet_partition(y[:1100], 10, 1.0, min_size=40, random_state=0)
    parties = [(X[:1100][idx], y[:1100][idx]) for idx in parts]
    public, X_test, y_test = X[1100:1500], X[1500:], y[1500:]

    start = time.perf_counter()
    local = estimator(args.rounds).fit(parties, public)
    t_local = time.perf_counter() - start
    joined = local.participation_
    weights = network_parameters(local.global_model_).nbytes
    per_round = {kind: int(np.sum(sizes)) / max(1, int(joined.sum())) for kind, sizes in local.bandwidth_.items()}
    print(f"digits, 10 clients, TorchMLP 64-64-10 ({weights:,} bytes of float32 weights), K = 2, "
          f"{args.rounds} rounds, {int(joined.sum())} client-rounds")
    print("bytes per client per round it joins: "
          + ", ".join(f"{kind} {size:,.0f}" for kind, size in per_round.items() if kind != "party-schema")
          + f"; FedAvg would move {2 * weights:,} (weights down and up): up-link ×"
          f"{weights / per_round['privatekt-report']:.0f} less, down-link about the same")
    print(f"in-process fit (batch_clients=False): {t_local:.1f} s, accuracy {local.score(X_test, y_test):.3f}, "
          f"ε {round_up(local.ledger_.account(delta=1e-5).epsilon, 6)}")
    if args.skip_flower:
        return
    from privfed.federation import simulate

    start = time.perf_counter()
    flower = simulate(estimator(args.rounds), parties, public, timeout=600)
    t_flower = time.perf_counter() - start
    print(f"Flower simulation, 10 SuperNodes: {t_flower:.1f} s (×{t_flower / t_local:.2f} the in-process fit), "
          f"accuracy {flower.score(X_test, y_test):.3f}, ε {round_up(flower.ledger_.account(delta=1e-5).epsilon, 6)}, "
          f"same participation: {bool((flower.participation_ == local.participation_).all())}, "
          f"same predictions: {bool((flower.predict(X_test) == local.predict(X_test)).all())}")


if __name__ == "__main__":
    main()
