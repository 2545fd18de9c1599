"""Reproduction: FedKD on MNIST, 20 parties, in-domain and cross-domain (Fashion-MNIST) public data.

Gong et al. (AAAI 2022) claim that accuracy is insensitive to the quantization
scale S and degrades gracefully with the Laplace noise (their Fig. 2). Each
Dirichlet split (α ∈ {1, 0.1}) trains the 20 local models once (FedKT's small
CNN) and computes their logits on both public sets once; every (S, γ) point then
runs FedKD's server side (:meth:`pipelines.fedkd.estimator.FedKD.fit_logits`: clip,
quantize, class-count weights, noise drawn once, L2 distillation of a fresh
small CNN) from those logits. Printed per point: test accuracy, the accuracy of
the noisy ensemble's argmax on the in-domain public labels, and the honest
party-level ε (tight, δ = 1e-5; pure composition beside it), plus the bytes each
party sends against FedAvg's.

One torch thread; ``--device cuda`` puts every network on the GPU (``auto``, the default: CUDA where available).
Run: ``python bench/fedkd.py [--data ../shared/datasets] [--json out.json]`` (about 18 minutes on a quiet
2-core machine with the defaults). ``--json`` is rewritten after every point with the run's provenance
(:mod:`bench.provenance`), so an interrupted run keeps what it finished. The tables of docs/results.md are
rendered from the ``--json`` files by ``python -m bench.tables fedkd-...`` (:mod:`bench.tables.fedkd`).

``--grid s-sweep --quantizers public paper`` re-runs the S sweep (γ = 1, S ∈ {2, 10, 50, 200, 400})
under privfed's quantizer (step Z/S on the public range) and the paper's Eq. 4 (step 2·z_max/S,
rounded up, z_max from the logits; ``FedKD(quantizer="paper")``), on the same logits and noise seed.

``--grid noise --alphas 1 --publics in-domain --public-size N`` is one column of the paper's Fig. 2 (left):
the noise axis (noiseless, then S = 200 with γ ∈ {0.1, 1, 10}) at one public-set size.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

# bench/accounting.py is named like the package: drop this folder from the path so that
# ``import accounting`` finds the package.
# The checkout's root goes first, so that this checkout's privfed is imported (not an installed one).
sys.path[:] = [str(Path(__file__).resolve().parents[1])] + [
    p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
import torch  # noqa: E402
from privfed.accounting import QuantizedLaplaceEnsemble  # noqa: E402
from privfed.accounting.report import round_up  # noqa: E402
from privfed.pipelines.data.datasets import federated_split, load_dataset  # noqa: E402
from privfed.pipelines.fedkd.estimator import FedKD, party_logits  # noqa: E402
from privfed.pipelines.fedkd.steps import parameter_count  # noqa: E402
from privfed.pipelines.models.fitting import fit_classifier  # noqa: E402
from privfed.pipelines.models.torch_models import TorchCNN  # noqa: E402
from privfed.pipelines.protocol.progress import progress_bar  # noqa: E402

from bench import provenance  # noqa: E402

DELTA = 1e-5
GRIDS = {
    "default": [(None, None)] + [(s, 1.0) for s in (10, 50, 200)] + [(200, g) for g in (0.1, 10.0)],
    "s-sweep": [(None, None)] + [(s, 1.0) for s in (2, 10, 50, 200, 400)],
    "noise": [(None, None)] + [(200, g) for g in (0.1, 1.0, 10.0)],
}
PUBLICS = ("in-domain", "cross-domain")


def images(X: np.ndarray) -> np.ndarray:
    return (np.asarray(X, dtype=np.float32) / 255.0)


def write_json(path: str, run: dict, settings: dict, rows: list[dict]) -> None:
    """The rows so far, with the run's provenance, written whole (a temporary file renamed over ``path``)."""
    provenance.write_json(path, {"provenance": provenance.finish(run), "command": run["command"],
                                 "settings": settings, "rows": rows})


def device_of(choice: str) -> str | None:
    """``--device``'s value as ``TorchClassifier(device=...)`` takes it: ``auto`` is None (CUDA where available)."""
    return None if choice == "auto" else choice


def resolved_device(choice: str) -> str:
    """The device ``--device`` gives on this machine (recorded in the raw results)."""
    return "cuda" if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()) else "cpu"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    parser.add_argument("--parties", type=int, default=20)
    parser.add_argument("--alphas", type=float, nargs="+", default=[1.0, 0.1])
    parser.add_argument("--public-size", type=int, default=10_000)
    parser.add_argument("--local-epochs", type=int, default=5)
    parser.add_argument("--distill-epochs", type=int, default=5)
    parser.add_argument("--clip", type=float, default=10.0)
    parser.add_argument("--fedavg-rounds", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--server-seeds", type=int, nargs="+", default=None,
                        help="FedKD random_state per point (the noise draw and the distilled model's seed), each "
                             "on the same split and local models: the run-to-run spread at a fixed S "
                             "(default: --seed only)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--grid", choices=tuple(GRIDS), default="default")
    parser.add_argument("--quantizers", nargs="+", choices=("public", "paper"), default=["public"])
    parser.add_argument("--publics", nargs="+", choices=PUBLICS, default=list(PUBLICS))
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto",
                        help="where the networks train: cpu, cuda, or auto (default: CUDA where available, "
                             "TorchClassifier's device=None)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available on this machine; use --device cpu or auto")
    torch.set_num_threads(1)
    run = provenance.start(command="python " + " ".join(sys.argv), seeds=[args.seed, *(args.server_seeds or [])],
                           settings=vars(args), device=resolved_device(args.device))
    device = device_of(args.device)

    mnist = load_dataset("mnist", args.data)
    fashion = load_dataset("fashion_mnist", args.data)
    fashion_public = images(fashion.X_train[np.random.default_rng(args.seed).permutation(len(fashion.X_train))[
        : args.public_size]])
    rows = []
    for alpha in args.alphas:
        start = time.perf_counter()
        split = federated_split(mnist.X_train, mnist.y_train, n_parties=args.parties, beta=alpha,
                                public_size=args.public_size, X_test=mnist.X_test, y_test=mnist.y_test,
                                random_state=args.seed)
        publics = {name: data for name, data in (("in-domain (MNIST)", images(split.X_public)),
                                                 ("cross-domain (Fashion-MNIST)", fashion_public))
                   if name.split(" ")[0] in args.publics}
        X_test = images(split.X_test)
        logits = {name: [] for name in publics}
        counts, sizes, local_accuracy = [], [], []
        for index, (X, y) in enumerate(progress_bar(split.parties, progress=None, desc=f"α = {alpha}: local CNNs",
                                                    unit="party")):
            local = TorchCNN(epochs=args.local_epochs, batch_size=64, random_state=0, device=device)
            fitted = fit_classifier(local, images(X), y, n_classes=10, seed=args.seed * 1000 + index)
            for name, public in publics.items():
                logits[name].append(party_logits(fitted, public, clip=args.clip))
            counts.append(np.bincount(y, minlength=10))
            sizes.append(parameter_count(fitted.estimator))  # None: one class held, no network trained
            local_accuracy.append(float(np.mean(fitted.predict(X_test) == split.y_test)))
        counts = np.stack(counts)
        party_sizes = [len(y) for _, y in split.parties]
        print(f"\nα = {alpha}: parties hold {min(party_sizes)}–{max(party_sizes)} images; local CNNs' test accuracy "
              f"mean {np.mean(local_accuracy):.4f} (min {min(local_accuracy):.4f}, max {max(local_accuracy):.4f}); "
              f"local phase {time.perf_counter() - start:.0f} s", flush=True)
        for name, public in publics.items():
            stacked = np.stack(logits[name])
            clipped = float(np.mean(np.abs(stacked) > args.clip))
            print(f"  public {name}: {clipped:.2%} of the logits lie outside [−Z, Z] = [−{args.clip:g}, {args.clip:g}]")
            points = [(scale, gamma, quantizer, server_seed) for scale, gamma in GRIDS[args.grid]
                      for quantizer in (args.quantizers if scale is not None else ["public"])
                      for server_seed in (args.server_seeds or [args.seed])]
            for scale, gamma, quantizer, server_seed in progress_bar(points, progress=None, desc=f"{name}: FedKD grid",
                                                                     unit="run"):
                tick = time.perf_counter()
                model = FedKD(None, TorchCNN(batch_size=64, random_state=0, device=device), quantization_scale=scale,
                              gamma=gamma, clip=args.clip if gamma is not None else None, loss="l2",
                              quantizer=quantizer, distill_epochs=args.distill_epochs, random_state=server_seed)
                model.fit_logits(logits[name], counts, public, parameter_counts=sizes)
                accuracy = float(model.score(X_test, split.y_test))
                label_accuracy = (float(np.mean(model.noisy_ensemble_.argmax(axis=1) == split.y_public))
                                  if name.startswith("in-domain") else None)
                pure = (QuantizedLaplaceEnsemble(10, args.clip, gamma, len(public), quantization_scale=scale)
                        .pure_epsilon() if gamma is not None else math.inf)
                row = {
                    "alpha": alpha, "public": name, "S": scale, "gamma": gamma, "clip": args.clip if gamma else None,
                    "quantizer": quantizer, "server_seed": server_seed, "z_max": model.z_max_,
                    "test_accuracy": accuracy, "public_label_accuracy": label_accuracy,
                    "epsilon_party_tight": model.epsilon_, "epsilon_party_pure": pure,
                    "bytes_per_party": model.bandwidth_.bytes_per_party,
                    "fedavg_bytes_per_party": next(b for b in model.bandwidth_.fedavg_bytes(args.fedavg_rounds)
                                                   if b is not None),  # the first party with a network
                    "seconds": time.perf_counter() - tick,
                    "local_accuracy_mean": float(np.mean(local_accuracy)),
                    "local_accuracy_min": float(min(local_accuracy)), "local_accuracy_max": float(max(local_accuracy)),
                    "logits_outside_clip": clipped,
                }
                rows.append(row)
                if args.json:  # rewritten after every point, so an interrupted run keeps what it finished
                    write_json(args.json, run, vars(args), rows)
                label = ("noiseless, unquantized" if gamma is None
                         else f"S = {scale:>3}, γ = {gamma:>4g}, {quantizer} quantizer")
                label += f", server seed {server_seed}" if args.server_seeds else ""
                extra = f", ensemble labels {label_accuracy:.4f}" if label_accuracy is not None else ""
                print(f"    {label}: test accuracy {accuracy:.4f}{extra}; ε = {round_up(model.epsilon_)} "
                      f"(pure {pure:.4g}); {row['bytes_per_party']:,} B/party vs FedAvg "
                      f"{row['fedavg_bytes_per_party']:,} B over {args.fedavg_rounds} rounds; {row['seconds']:.0f} s",
                      flush=True)


if __name__ == "__main__":
    main()
