"""Batched training of network copies vs one after another, side by side, per architecture.

Trains ``--copies`` copies of a fitted network (each on its own ``--examples`` random
MNIST-sized inputs, ``--epochs`` epochs, batch 32, SGD) one after another with
``fit_soft(warm_start=True)`` and together with ``train_copies``, alternating, best of
``--repeats``; for FedKT's small CNN (the PrivateKT bench's default), an MLP 784-100-100-10,
and the same CNN at one copy (the per-copy cost without batching overhead). Prints the
seconds and the speed-up, and the largest parameter difference between the two results.

Run: ``python bench/batched_training.py [--threads 1] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

sys.path[:] = [str(Path(__file__).resolve().parents[1])] + [
    p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
import torch  # noqa: E402
from privfed.pipelines.models.batched_training import train_copies  # noqa: E402
from privfed.pipelines.models.torch_models import TorchCNN, TorchMLP  # noqa: E402

from bench import provenance  # noqa: E402


def measure(name: str, network, copies: int, examples: int, epochs: int, repeats: int) -> dict:
    rng = np.random.default_rng(0)
    classes = np.arange(10)
    X0 = rng.random((256, 784), dtype=np.float32)
    network.set_params(epochs=1).fit(X0, rng.integers(0, 10, 256))
    network.set_params(epochs=epochs)
    data = [(rng.random((examples, 784), dtype=np.float32), np.eye(10, dtype=np.float32)[rng.integers(0, 10, examples)])
            for _ in range(copies)]
    states = list(range(copies))
    seconds: dict[str, list[float]] = {"sequential": [], "batched": []}
    for _ in range(repeats):
        tick = time.perf_counter()
        sequential = [copy.deepcopy(network).set_params(random_state=s).fit_soft(X, T, classes=classes, warm_start=True)
                      for (X, T), s in zip(data, states)]
        seconds["sequential"].append(time.perf_counter() - tick)
        tick = time.perf_counter()
        stacked = train_copies(network, data, random_states=states, classes=classes)
        seconds["batched"].append(time.perf_counter() - tick)
    difference = max(float((stacked.parameters[n][i] - p.detach()).abs().max())
                     for i, model in enumerate(sequential) for n, p in model.module_.named_parameters())
    best = {mode: min(values) for mode, values in seconds.items()}
    print(f"{name}, {copies} copies × {examples} examples × {epochs} epochs: sequential {best['sequential']:.2f} s, "
          f"batched {best['batched']:.2f} s, speed-up ×{best['sequential'] / best['batched']:.2f} "
          f"(best of {repeats}); largest parameter difference {difference:.1e}", flush=True)
    return {"network": name, "copies": copies, "examples": examples, "epochs": epochs, "seconds": seconds,
            "speedup_best": best["sequential"] / best["batched"], "max_parameter_difference": difference}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=40)
    parser.add_argument("--examples", type=int, default=160)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    run = provenance.start(command="python " + " ".join(sys.argv), seeds=[0], settings=vars(args))
    torch.set_num_threads(args.threads)
    sgd = dict(optimizer="sgd", lr=0.05, momentum=0.0, batch_size=32, random_state=0)
    rows = [
        measure("small CNN (6/16 filters, 120-84)", TorchCNN(**sgd), args.copies, args.examples, args.epochs,
                args.repeats),
        measure("MLP 784-100-100-10", TorchMLP(hidden=(100, 100), **sgd), args.copies, args.examples, args.epochs,
                args.repeats),
        measure("small CNN, one copy", TorchCNN(**sgd), 1, args.examples, args.epochs, args.repeats),
        # Selective-FD's clients (bench/selective_fd.py): the authors' 10/20-filter CNN with a 50-unit layer
        measure("Selective-FD CNN (10/20 filters, 50)", TorchCNN(conv_channels=(10, 20), hidden=(50,), **sgd),
                args.copies, args.examples, args.epochs, args.repeats),
    ]
    if args.json:
        Path(args.json).write_text(json.dumps({"command": "python " + " ".join(sys.argv), "threads": args.threads,
                                               "provenance": provenance.finish(run), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
