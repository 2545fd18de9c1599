"""Benchmark: seconds per epoch of FedKT's small CNN with and without Opacus (DP-SGD) on one party's MNIST share.

MNIST from ``../shared/datasets`` (skipped with a message when absent) is split
as the reproductions split it (20 parties, Dirichlet α = 1, 10,000 public
examples); party 0's share trains a :class:`~privfed.pipelines.models.torch_models.TorchCNN`
(2 × 5×5 conv, 120-84 MLP) for ``--epochs`` epochs, batch size 64, once without
DP and once with ``dp=DPConfig(noise_multiplier=1.0, max_grad_norm=1.0)`` (Poisson
sampling at q = 64/n, per-example clipping, noise), alternating the two
``--repeats`` times in the same process, one torch thread. Printed: the median
seconds per epoch of each, their ratio, and the test accuracy of each model.

Run: ``nice -n 10 python bench/dpsgd.py [--data ../shared/datasets] [--json out.json]``; ``--json`` writes the
timings with the run's provenance (docs/results.md renders its table from ``bench/results/dpsgd_speed.json``:
``python -m bench.tables dpsgd-speed``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

# Run from the checkout this file is in: its folder's bench/accounting.py must not shadow the package.
_ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(_ROOT)] + [p for p in sys.path if Path(p or ".").resolve() not in (_ROOT, _ROOT / "bench")]

import numpy as np  # noqa: E402
import torch  # noqa: E402
from privfed.pipelines import DPConfig  # noqa: E402
from privfed.pipelines.data.datasets import federated_split, load_dataset  # noqa: E402
from privfed.pipelines.models.torch_models import TorchCNN  # noqa: E402

from bench import provenance  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    parser.add_argument("--parties", type=int, default=20)
    parser.add_argument("--party", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if not (Path(args.data) / "mnist.npz").is_file():
        print(f"skipped: {Path(args.data) / 'mnist.npz'} is absent")
        return
    torch.set_num_threads(1)
    run = provenance.start(command=" ".join(["python", *sys.argv]), seeds=[args.seed],
                           settings={key: value for key, value in vars(args).items() if key != "json"})
    mnist = load_dataset("mnist", args.data)
    split = federated_split(mnist.X_train, mnist.y_train, n_parties=args.parties, beta=1.0, public_size=10_000,
                            X_test=mnist.X_test, y_test=mnist.y_test, random_state=args.seed)
    X, y = split.parties[args.party]
    X = np.asarray(X, dtype=np.float32) / 255.0
    X_test = np.asarray(split.X_test, dtype=np.float32) / 255.0
    dp = DPConfig(noise_multiplier=1.0, max_grad_norm=1.0, delta=1e-5)
    seconds: dict[str, list[float]] = {"plain": [], "opacus": []}
    accuracy = {}
    for repeat in range(args.repeats):
        for name, config in (("plain", None), ("opacus", dp)):
            model = TorchCNN(epochs=args.epochs, batch_size=64, lr=1e-3, random_state=repeat, dp=config)
            start = time.perf_counter()
            model.fit(X, y)
            seconds[name].append((time.perf_counter() - start) / args.epochs)
            accuracy[name] = float(model.score(X_test, split.y_test))
    median = {name: statistics.median(values) for name, values in seconds.items()}
    print(f"party {args.party}: {len(y)} images, {args.epochs} epochs × {args.repeats} repeats, one torch thread")
    for name in seconds:
        print(f"  {name:>6}: {median[name]:.2f} s/epoch (runs {', '.join(f'{s:.2f}' for s in seconds[name])}); "
              f"test accuracy {accuracy[name]:.4f}")
    print(f"  Opacus / plain: {median['opacus'] / median['plain']:.2f}×")
    if args.json:
        provenance.write_json(args.json, {"provenance": provenance.finish(run), "settings": vars(args),
                                          "n_examples": len(y), "seconds": seconds, "median": median,
                                          "accuracy": accuracy})


if __name__ == "__main__":
    main()
