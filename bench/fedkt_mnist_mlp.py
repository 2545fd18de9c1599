"""How far the MNIST MLP's training settings move FedKT's building blocks: one MLP, old bench vs the paper.

FedKT-L0 on MNIST (10 parties, s = 2, t = 5) trains 100 teachers on about 1,100
images each (a fifth of a party) and 20 students and the final model on the 5,000
public images. This script fits one 784-100-100-10 MLP (``bench/fedkt.py``'s ``mlp``)
on ``--sizes`` random, truly labelled MNIST training images under the bench's earlier
settings (10 epochs, batch 64, no L2) and under the paper's FedKT settings (100
epochs, batch 32, Adam L2 1e-6; Appendix B.1, Table 5), and reports the accuracy on
MNIST's official test file, per seed. It isolates the training settings from the
voting: a teacher or student that is undertrained under the old settings caps
FedKT's accuracy whatever the votes do.

Run: ``python bench/fedkt_mnist_mlp.py --json bench/results/fedkt_mnist_mlp_settings.json`` (``--device cuda``
trains on a GPU; the device is recorded in the file's provenance).
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

import fedkt as bench_fedkt  # noqa: E402  (bench/fedkt.py: a script's own folder is on sys.path)
from privfed.pipelines import load_dataset  # noqa: E402

from bench import provenance  # noqa: E402

SETTINGS = {"bench (10 epochs, batch 64)": bench_fedkt.mlp(), "paper (100 epochs, batch 32, L2 1e-6)":
            bench_fedkt.mlp(100, 32, 1e-6)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    parser.add_argument("--sizes", type=int, nargs="+", default=[1100, 5000])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--json", default=None)
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu",
                        help="where the MLPs train (auto: CUDA when available); recorded in the provenance")
    args = parser.parse_args()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.exit(2, "bench/fedkt_mnist_mlp.py: error: --device cuda but CUDA is not available on this machine\n")
    bench_fedkt.DEVICE["name"] = args.device  # SETTINGS' factories build their MLPs there
    run = provenance.start(command="python " + " ".join(sys.argv), seeds=args.seeds, settings=vars(args),
                           device=bench_fedkt.resolved_device(args.device))
    torch.set_num_threads(1)
    data = load_dataset("mnist", args.data)
    X = data.X_train.reshape(len(data.X_train), -1).astype(np.float32) / 255.0
    X_test = data.X_test.reshape(len(data.X_test), -1).astype(np.float32) / 255.0
    records = []
    for seed in args.seeds:
        for size in args.sizes:
            rows = np.random.default_rng(seed).choice(len(X), size=size, replace=False)
            for name, make in SETTINGS.items():
                start = time.perf_counter()
                model = make().set_params(random_state=seed).fit(X[rows], data.y_train[rows])
                accuracy = 100 * float(model.score(X_test, data.y_test))
                records.append({"seed": seed, "size": size, "settings": name, "test_accuracy": accuracy,
                                "seconds": time.perf_counter() - start})
                print(f"seed {seed}, {size} images, {name}: {accuracy:.2f}% ({records[-1]['seconds']:.0f} s)",
                      flush=True)
                if args.json:
                    provenance.write_json(args.json, {"command": "python " + " ".join(sys.argv),
                                                      "provenance": provenance.finish(run), "records": records})
    for size in args.sizes:
        for name in SETTINGS:
            values = [r["test_accuracy"] for r in records if r["size"] == size and r["settings"] == name]
            spread = np.std(values, ddof=1) if len(values) > 1 else 0.0
            print(f"{size} images, {name}: {np.mean(values):.2f} ± {spread:.2f}"
                  f" ({len(values)} seeds)")


if __name__ == "__main__":
    main()
