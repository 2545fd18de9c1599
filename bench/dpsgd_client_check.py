"""Check: how good are one PrivateKT client's votes under DP-SGD? (issue 15, docs/results.md)

Party 0 of the reproduction's split (MNIST, 20 parties, Dirichlet α = 1, 10,000 public images), FedKT's small
CNN trained for the reproduction's 2 local epochs from a fresh initialisation (seed 0): plain (Adam 1e-3) and
DP-SGD at the σ that the PrivateKT runs of ``bench/dpsgd_pipelines.py`` used for 30 rounds × 2 epochs at ε ≤ 8,
4, 1 (read from their raw results, ``--runs``; Adam 5e-3, the reproduction's rate, and 2e-2). Prints test accuracy
on MNIST's test set, the quality of the client's votes; ``--json`` writes it with the run's provenance.
One torch thread; run with ``nice -n 10``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dpsgd_pipelines as bench  # noqa: E402  (sets the import path and the one-thread environment)
import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench import provenance  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "datasets"))
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--local-epochs", type=int, default=2)
    parser.add_argument("--runs", type=Path, default=bench._ROOT / "docs" / "results-dpsgd.json",
                        help="the reproduction's raw results: σ of its PrivateKT runs at each target")
    parser.add_argument("--json", type=Path, help="write the accuracies and the run's provenance here")
    args = parser.parse_args()
    if not (Path(args.data) / "mnist.npz").is_file():
        print(f"skipped: {Path(args.data) / 'mnist.npz'} is absent")
        return
    torch.set_num_threads(1)
    run = provenance.start(command=" ".join(["python", *sys.argv]), seeds=[0],
                           settings={k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()})
    used = {r["target_epsilon"]: r["noise_multiplier"] for r in json.loads(args.runs.read_text())["runs"]
            if r["pipeline"] == "privatekt" and r["settings"]["privatekt_rounds"] == args.rounds
            and r["settings"]["privatekt_local_epochs"] == args.local_epochs
            and r["settings"].get("privatekt_dp_lr") is None
            and r["settings"].get("privatekt_client_fraction", 0.5) == 0.5}
    logging.getLogger("absl").setLevel(logging.ERROR)
    mnist = bench.load_dataset("mnist", args.data)
    X, y = mnist.X_train.astype(np.float32) / 255.0, mnist.y_train
    X_test, y_test = mnist.X_test.astype(np.float32) / 255.0, mnist.y_test
    split = bench.federated_split(X, y, n_parties=20, beta=1.0, public_size=10_000, X_test=X_test, y_test=y_test,
                                  random_state=0)
    X0, y0 = split.parties[0]
    print(f"party 0: {len(y0)} images, labels per class {np.bincount(y0, minlength=10).tolist()}")
    rows = []
    for target, lr in [(None, 1e-3), (8.0, 5e-3), (4.0, 5e-3), (4.0, 2e-2), (1.0, 5e-3), (1.0, 2e-2)]:
        sigma = used[target]
        start = time.perf_counter()
        model = bench.TorchCNN(optimizer="adam", lr=lr, batch_size=bench.BATCH, epochs=args.local_epochs,
                               random_state=0, dp=bench.dp_config(sigma)).fit(X0, y0)
        accuracy = float(np.mean(model.predict(X_test) == y_test))
        rows.append({"target_epsilon": target, "noise_multiplier": sigma, "lr": lr, "test_accuracy": accuracy,
                     "seconds": time.perf_counter() - start})
        print(f"target ε = {target}, σ = {sigma}, Adam lr {lr:g}: test accuracy {accuracy:.4f} "
              f"({rows[-1]['seconds']:.0f} s)", flush=True)
    if args.json:
        provenance.write_json(args.json, {"provenance": provenance.finish(run), "party_size": len(y0), "rows": rows})


if __name__ == "__main__":
    main()
