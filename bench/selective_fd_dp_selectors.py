"""Selective-FD with DP-SGD clients: the accuracy cost of differentially private client-side selectors (issue 33).

scikit-learn's digits (8×8, scaled to [0, 1]), shuffled by the seed: 400 proxy images (unlabeled for the
protocol), 400 test images, the other 997 split over 5 clients by class pairs (client c holds the digits 2c and
2c + 1: strong non-IID). Every client model is ``TorchMLP(hidden=(64,))`` trained with DP-SGD,
``DPConfig(target_epsilon=4, max_grad_norm=1, delta=1e-5)`` per round (one Poisson epoch), soft labels,
``privacy=None`` (the shared predictions are post-processing of the DP-SGD training). Methods, same seed and
rounds:

* ``raw-data KuLSIF selector``: ``dp_selector=False``, privfed's selector before issue 33 (its decisions are an
  unaccounted release, so the example-level ε covers nothing);
* ``DP selector, ε_sel = e``: ``dp_selector_epsilon=e`` (the default since issue 33 is ε_sel = 1; ε_sel = 10⁴,
  σ ≈ 0.01 against a sum of ~200 unit vectors, is the DP selector's estimator nearly without noise, which separates
  the cost of the noise from that of the estimator itself);
* ``no client-side selector``: ``tau_client=None`` (every client shares every proxy example; the server-side
  selector still acts).

Reported per run: the mean (min, max) client test accuracy after the last round, the example-level ε that
``ledger_.account(unit="example")`` reports and whether it leaves releases uncovered, the fraction of
(client, example) pairs shared, and the selectors' AUROC for "the proxy example is of one of the client's two
classes" (the selector's job in strong non-IID).

Run (about 2.5 minutes per seed on one thread of this machine's 2 shared cores; the first run of a seed
includes calibrating DP-SGD's σ):
``python bench/selective_fd_dp_selectors.py --seeds 0 1 --json bench/results/selective_fd_dp_selectors.json``;
docs/results.md renders the table from that file (``python -m bench.tables selective-fd-dp-selectors``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(_ROOT)] + [p for p in sys.path if Path(p or ".").resolve() not in (_ROOT, _ROOT / "bench")]
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import logging  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from privfed.pipelines.models.dp_config import DPConfig  # noqa: E402
from privfed.pipelines.models.torch_models import TorchMLP  # noqa: E402
from privfed.pipelines.selective_fd.estimator import SelectiveFD  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402

from bench import provenance  # noqa: E402
from bench.tables.selective_fd import dp_selectors_markdown  # noqa: E402

N_CLIENTS = 5
DELTA = 1e-5


def data(seed: int):
    """(parties, proxy, proxy labels (for the AUROC only), X_test, y_test) for one seed."""
    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    order = np.random.default_rng(seed).permutation(len(y))
    X, y = X[order], y[order]
    proxy, test, rest = slice(0, 400), slice(400, 800), slice(800, None)
    parties = [(X[rest][y[rest] // 2 == c], y[rest][y[rest] // 2 == c]) for c in range(N_CLIENTS)]
    return parties, X[proxy], y[proxy], X[test], y[test]


def methods(args: argparse.Namespace, seed: int) -> dict[str, SelectiveFD]:
    model = TorchMLP(hidden=(64,), lr=args.lr, optimizer="sgd", batch_size=args.batch_size, random_state=seed,
                     dp=DPConfig(target_epsilon=args.dpsgd_epsilon, max_grad_norm=1.0, delta=DELTA,
                                 sample_rate=args.sample_rate))
    common = dict(rounds=args.rounds, distill_steps=args.distill_steps, proxy_batch=args.proxy_batch,
                  tau_server=args.tau_server, n_auxiliary=400, max_known=400, delta=DELTA, random_state=seed)
    chosen = {"raw-data KuLSIF selector": SelectiveFD(model, dp_selector=False, **common)}
    for epsilon in args.selector_epsilons:
        chosen[f"DP selector, ε_sel = {epsilon:g}"] = SelectiveFD(model, dp_selector_epsilon=epsilon, **common)
    chosen["no client-side selector"] = SelectiveFD(model, tau_client=None, **common)
    return chosen


def run(args: argparse.Namespace, seed: int) -> list[dict]:
    parties, proxy, proxy_labels, X_test, y_test = data(seed)
    rows = []
    for label, estimator in methods(args, seed).items():
        start = time.perf_counter()
        estimator.fit(parties, proxy)
        seconds = time.perf_counter() - start
        scores = estimator.client_scores(X_test, y_test)
        report = estimator.ledger_.account(unit="example")
        row = {"seed": seed, "method": label, "accuracy_mean": float(scores.mean()),
               "accuracy_min": float(scores.min()), "accuracy_max": float(scores.max()),
               "epsilon_example": float(report.epsilon), "epsilon_source": report.source,
               "uncovered": list(report.uncovered),
               "shared_fraction": float(np.mean(estimator.history_["shared_fraction"])),
               "kept_per_round": float(np.mean(estimator.history_["kept"])), "seconds": seconds}
        if estimator.selectors_[0] is not None:
            row["selector_auroc"] = [
                float(roc_auc_score(np.isin(proxy_labels, np.unique(y)), selector.score_samples(proxy)))
                for selector, (_, y) in zip(estimator.selectors_, parties)]
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "uncovered"}), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--distill-steps", type=int, default=10)
    parser.add_argument("--proxy-batch", type=int, default=200)
    parser.add_argument("--tau-server", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=16, help="the model's batch size (without DP-SGD)")
    parser.add_argument("--sample-rate", type=float, default=0.08,
                        help="DP-SGD's public sampling rate, fixed in advance (about 16 of a client's ~200 rows); "
                             "inside a pipeline q reaches the coordinator, so it cannot be batch / n (issue 40)")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--dpsgd-epsilon", type=float, default=4.0, help="DPConfig.target_epsilon (per round)")
    parser.add_argument("--selector-epsilons", type=float, nargs="+", default=[10000.0, 4.0, 1.0, 0.25])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    logging.getLogger("absl").setLevel(logging.ERROR)  # dp-accounting's per-order convergence warnings
    torch.set_num_threads(1)
    record = provenance.start(command=" ".join(["python", *sys.argv]), seeds=args.seeds,
                              settings={k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()})
    rows = [row for seed in args.seeds for row in run(args, seed)]
    if args.json:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=_ROOT, capture_output=True, text=True).stdout.strip()
        document = {"command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
                    "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                    "commit": commit, "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch "
                    f"{torch.__version__}, 1 thread", "rows": rows, "provenance": provenance.finish(record)}
        provenance.write_json(args.json, document)
    print(dp_selectors_markdown(rows))


if __name__ == "__main__":
    main()
