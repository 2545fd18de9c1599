"""Selective-FD on Flower against the in-process run: wall time and bytes sent, measured side by side.

scikit-learn's digits, ten clients holding one class each (the paper's strong non-IID split), 400 proxy
examples, ``TorchMLP(hidden=(32,))`` clients, soft labels, both selectors, five rounds, one seed:

* ``privfed.federation.simulate`` (Flower's Ray engine, one virtual SuperNode per client) against
  ``fit`` (``n_jobs=1``) on the same cores, and whether the published model predicts identically;
* bytes each client sent (``bandwidth_``: its shares over all rounds) against what sending its model
  every round would cost (FedAvg's upload: the model's weights in the bundle's safe format, per round).

Not part of the test suite. Usage: ``python bench/federation_selective_fd.py [--rounds 5]``.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import torch
    from privfed.pipelines.models.torch_models import TorchMLP
    from privfed.pipelines.selective_fd.estimator import SelectiveFD
    from sklearn.datasets import load_digits

    from privfed.federation import simulate
    from privfed.federation.task import model_to_record

    torch.set_num_threads(1)
    X, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    X, y = X[order] / 16.0, y[order]
    parties = [(X[:1000][y[:1000] == c], y[:1000][y[:1000] == c]) for c in range(10)]
    proxy, X_test, y_test = X[1000:1400], X[1400:], y[1400:]

    def estimator() -> SelectiveFD:
        return SelectiveFD(TorchMLP(hidden=(32,), lr=1e-2, batch_size=32), rounds=args.rounds, local_steps=5,
                           distill_steps=20, proxy_batch=200, n_auxiliary=200, max_known=200, tau_server=1.5,
                           random_state=0)

    start = time.perf_counter()
    local = estimator().fit(parties, proxy)
    local_seconds = time.perf_counter() - start
    start = time.perf_counter()
    flower = simulate(estimator(), parties, proxy, timeout=600)
    flower_seconds = time.perf_counter() - start

    print(f"in-process fit: {local_seconds:.1f} s; Flower simulation, 10 SuperNodes: {flower_seconds:.1f} s "
          f"(×{flower_seconds / local_seconds:.2f}, Ray's start included)")
    same = np.array_equal(flower.predict_proba(X_test), local.predict_proba(X_test))
    print(f"published model (client 0): accuracy {local.score(X_test, y_test):.3f} in-process, "
          f"{flower.score(X_test, y_test):.3f} on Flower; identical probabilities: {same}")
    model_bytes = model_to_record(local.models_[0]).nbytes
    shares = flower.bandwidth_["selective-fd-share"]
    print(f"bytes sent per client over {args.rounds} rounds: shares {min(shares):,}–{max(shares):,} "
          f"(mean {np.mean(shares):,.0f}); schema {flower.bandwidth_['party-schema'][0]:,}; "
          f"the published model once: {max(flower.bandwidth_['published-model']):,}")
    print(f"sending the model every round instead (FedAvg upload): {model_bytes * args.rounds:,} per client "
          f"(×{model_bytes * args.rounds / np.mean(shares):.1f} the shares)")


if __name__ == "__main__":
    main()
