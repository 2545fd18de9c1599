"""Reproduction: FedKD, PrivateKT and Selective-FD on MNIST with DP-SGD local models (issue 15).

For each pipeline, a non-private-training run (the seed mechanism alone) and runs whose
local models (FedKT's small CNN, :class:`~privfed.pipelines.models.torch_models.TorchCNN`) train
with DP-SGD through Opacus at example-level ε ≈ 1, 4, 8 (δ = 1e-5). The noise
multiplier of a run is the largest over parties of the σ that
:func:`~privfed.accounting.dpsgd.dpsgd_noise_multiplier` gives for the party's sampling
rate q = 64/n and the steps it would run if it trained in every round, so every
party's ε is at most the target. Printed and saved per run: test accuracy (official
MNIST test set), the example-level guarantee the ledger reports and which bound gave
it (``report.source``), the other bound, and the party-level ε (the seed mechanism's).

Data: ``../shared/datasets/mnist.npz`` (skipped when absent). FedKD and PrivateKT: 20
parties, Dirichlet α = 1, 10,000 public images. Selective-FD: the paper's strong
non-IID split (10 clients, client c holds class c), 10 % of the training images as the
proxy set; hard labels with randomized response at ε = 4 per label (the seed mechanism; the earlier
reproduction's useful setting), KuLSIF selectors.

Results are checkpointed: each finished run is appended to ``--json`` (under a file lock, so
several copies of the script, e.g. one per target, can share one file) and skipped when the
script runs again; each run records its provenance (``bench/provenance.py``: commit, settings, device,
machine, load). One torch thread, run with ``nice -n 10``; ``--device cuda`` (or ``auto``) trains the torch
models on the GPU. The tables of docs/results.md are rendered from ``--json`` by ``python -m bench.tables
dpsgd-reproductions`` (``bench/tables/dpsgd.py``).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(_ROOT)] + [p for p in sys.path if Path(p or ".").resolve() not in (_ROOT, _ROOT / "bench")]
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from privfed.accounting import dpsgd_noise_multiplier  # noqa: E402
from privfed.accounting.report import round_up  # noqa: E402
from privfed.pipelines import DPConfig  # noqa: E402
from privfed.pipelines.data.datasets import federated_split, load_dataset  # noqa: E402
from privfed.pipelines.fedkd.estimator import FedKD  # noqa: E402
from privfed.pipelines.models.torch_models import TorchCNN  # noqa: E402
from privfed.pipelines.privatekt.estimator import PrivateKT  # noqa: E402
from privfed.pipelines.selective_fd.estimator import SelectiveFD  # noqa: E402

from bench import provenance  # noqa: E402

DELTA = 1e-5
BATCH = 64
DEVICES = {"cpu": "cpu", "cuda": "cuda", "auto": None}  # --device -> TorchClassifier(device=...)


def public_rate(sizes: list[int]) -> float:
    """The DP-SGD sampling rate every party uses, fixed in advance: q = BATCH / the smallest party's size. Inside a
    pipeline q reaches the coordinator and the ledger, so it must be public (issue 40); the benchmark's operator
    knows the sizes of the split it built, as a study's organiser knows the sizes the sites declared."""
    return min(1.0, BATCH / min(sizes))


def sigma_for(target: float | None, sizes: list[int], epochs: int) -> float | None:
    """The noise multiplier that keeps every party at ε ≤ target over ``epochs`` DP-SGD epochs at the public rate."""
    if target is None:
        return None
    rate = public_rate(sizes)
    return dpsgd_noise_multiplier(target_epsilon=target, delta=DELTA, sample_rate=rate,
                                  steps=epochs * DPConfig.steps_per_epoch(rate))


def dp_config(sigma: float | None, sizes: list[int]) -> DPConfig | None:
    return None if sigma is None else DPConfig(noise_multiplier=sigma, max_grad_norm=1.0, delta=DELTA,
                                               sample_rate=public_rate(sizes))


def lr(sigma: float | None, plain: float = 1e-3) -> float:
    """Adam's learning rate: the earlier reproductions' for plain training, 5e-3 under DP-SGD (noisy, clipped steps)."""
    return plain if sigma is None else 5e-3


def describe(model, X_test, y_test) -> dict:
    report = model.ledger_.account(delta=DELTA, unit="example")
    other = next(iter(report.alternatives.values()), None)
    party = model.ledger_.account(delta=DELTA, unit="party")
    return {
        "test_accuracy": float(model.score(X_test, y_test)),
        "epsilon_example": report.epsilon,
        "source": report.source,
        "other_bound": None if other is None else {"source": other.source, "epsilon": other.epsilon},
        "epsilon_party": party.epsilon,
        "not_covered_by_dpsgd": [n for n in report.notes if n.startswith("NOT COVERED")],
    }


def run_fedkd(args, target, data):
    parties, public, X_test, y_test = data
    sizes = [len(y) for _, y in parties]
    sigma = sigma_for(target, sizes, args.fedkd_local_epochs)
    local = TorchCNN(epochs=args.fedkd_local_epochs, batch_size=BATCH, lr=lr(sigma), random_state=args.seed,
                     dp=dp_config(sigma, sizes), device=DEVICES[args.device])
    model = FedKD(local, TorchCNN(batch_size=BATCH, random_state=args.seed, device=DEVICES[args.device]),
                  quantization_scale=200, gamma=1.0,
                  clip=10.0, loss="l2", distill_epochs=args.fedkd_distill_epochs, weighting="uniform",
                  random_state=args.seed).fit(parties, public)
    return {"noise_multiplier": sigma, **describe(model, X_test, y_test)}


def run_privatekt(args, target, data):
    parties, public, X_test, y_test = data
    sizes = [len(y) for _, y in parties]
    sigma = sigma_for(target, sizes, args.privatekt_rounds * args.privatekt_local_epochs)
    rate = lr(sigma) if sigma is None or args.privatekt_dp_lr is None else args.privatekt_dp_lr
    model = TorchCNN(optimizer="adam", lr=rate, batch_size=BATCH, random_state=args.seed,
                     dp=dp_config(sigma, sizes),
                     device=DEVICES[args.device])
    fitted = PrivateKT(model, epsilon_per_round=5.0, queries_per_round=2, buffer_rounds=25, self_training_size=1200,
                       client_fraction=args.privatekt_client_fraction, local_epochs=args.privatekt_local_epochs,
                       fine_tune_epochs=4,
                       self_training_epochs=1, rounds=args.privatekt_rounds, delta=DELTA,
                       progress=True, random_state=args.seed).fit(parties, public, eval_set=(X_test, y_test))
    return {"noise_multiplier": sigma, **describe(fitted, X_test, y_test),
            "accuracy_per_round": [r["accuracy"] for r in fitted.history_],
            "rounds_joined": [int(v) for v in fitted.participation_]}


def run_selective_fd(args, target, data):
    clients, proxy, X_test, y_test = data
    sizes = [len(y) for _, y in clients]
    sigma = sigma_for(target, sizes, args.sfd_rounds)
    model = TorchCNN(conv_channels=(10, 20), hidden=(50,), lr=lr(sigma, plain=2e-3), batch_size=BATCH,
                     random_state=args.seed, dp=dp_config(sigma, sizes), device=DEVICES[args.device])
    # Plain training: 5 local and 10 distillation mini-batches per round. Under DP-SGD the local step is one
    # Poisson-sampled epoch (⌊n/64⌋ ≈ 85 steps on one class), which would drown 10 distillation steps; unless
    # --sfd-dp-distill-steps says otherwise, distillation keeps the plain protocol's 2:1 ratio to local steps.
    local_steps = 5 if sigma is None else round(np.mean([len(y) // BATCH for _, y in clients]))
    distill_steps = 10 if sigma is None else args.sfd_dp_distill_steps or 2 * local_steps
    fitted = SelectiveFD(model, labels="hard", privacy="rr",
                         epsilon_per_round=args.sfd_rr_epsilon_per_label * args.sfd_proxy_batch,
                         rounds=args.sfd_rounds, local_steps=5, distill_steps=distill_steps,
                         proxy_batch=args.sfd_proxy_batch,
                         kernel_width=2.0, tau_server=1.5, delta=DELTA, random_state=args.seed).fit(clients, proxy)
    # Accuracy as the paper reports it: each client's model on the test set, averaged over clients.
    accuracies = [float(np.mean(np.asarray(m.predict(X_test)) == y_test)) for m in fitted.models_]
    return {"noise_multiplier": sigma, **describe(fitted, X_test, y_test), "test_accuracy": float(np.mean(accuracies)),
            "distill_steps": distill_steps}


def relevant(settings: dict, pipeline: str, defaults: dict) -> dict:
    """The settings a pipeline's run depends on (its own options, the data and the seed): the resume key.

    An option missing from ``settings`` (a run saved before the option existed) counts as its default.
    """
    prefix = {"fedkd": "fedkd_", "privatekt": "privatekt_", "selective_fd": "sfd_"}[pipeline]
    return {k: settings.get(k, v) for k, v in defaults.items()
            if k.startswith(prefix) or k in ("train_fraction", "seed")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(_ROOT.parent / "shared" / "datasets"))
    parser.add_argument("--pipelines", nargs="+", default=["fedkd", "selective_fd", "privatekt"])
    parser.add_argument("--targets", nargs="+", default=["none", "8", "4", "1"])
    parser.add_argument("--fedkd-local-epochs", type=int, default=5)
    parser.add_argument("--fedkd-distill-epochs", type=int, default=5)
    parser.add_argument("--privatekt-rounds", type=int, default=30)
    parser.add_argument("--privatekt-local-epochs", type=int, default=5)
    parser.add_argument("--privatekt-client-fraction", type=float, default=0.5,
                        help="share of the clients sampled per round (the authors' demo: 0.5)")
    parser.add_argument("--privatekt-dp-lr", type=float, default=None,
                        help="the clients' Adam learning rate under DP-SGD (default 5e-3)")
    parser.add_argument("--sfd-rounds", type=int, default=14)
    parser.add_argument("--sfd-proxy-batch", type=int, default=256)
    parser.add_argument("--sfd-rr-epsilon-per-label", type=float, default=4.0)
    parser.add_argument("--sfd-dp-distill-steps", type=int, default=None,
                        help="distillation mini-batches per round under DP-SGD (default: twice the DP epoch's steps)")
    parser.add_argument("--train-fraction", type=float, default=1.0, help="share of MNIST's training images used")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=Path("docs/results-dpsgd.json"))
    parser.add_argument("--device", choices=tuple(DEVICES), default="cpu",
                        help="where the torch models train (auto: CUDA where available); kept in the provenance")
    args = parser.parse_args()
    defaults = vars(parser.parse_args([]))
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device: 'cuda' but CUDA is not available on this machine; use cpu or auto")
    if not (Path(args.data) / "mnist.npz").is_file():
        print(f"skipped: {Path(args.data) / 'mnist.npz'} is absent")
        return
    torch.set_num_threads(1)
    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    record = provenance.start(command=" ".join(["python", *sys.argv]), seeds=[args.seed],
                              settings={k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                              device=device)
    logging.getLogger("absl").setLevel(logging.ERROR)  # dp-accounting drops non-converging orders (still valid)
    done = json.loads(args.json.read_text()) if args.json.is_file() else {"runs": []}
    mnist = load_dataset("mnist", args.data)
    rng = np.random.default_rng(args.seed)
    keep = np.sort(rng.permutation(len(mnist.y_train))[: int(args.train_fraction * len(mnist.y_train))])
    X, y = mnist.X_train[keep].astype(np.float32) / 255.0, mnist.y_train[keep]
    X_test, y_test = mnist.X_test.astype(np.float32) / 255.0, mnist.y_test
    split = federated_split(X, y, n_parties=20, beta=1.0, public_size=min(10_000, len(y) // 6), X_test=X_test,
                            y_test=y_test, random_state=args.seed)
    dirichlet = (split.parties, split.X_public, X_test, y_test)
    order = rng.permutation(len(y))
    proxy, rest = np.sort(order[: len(y) // 10]), order[len(y) // 10:]
    strong = ([(X[rest[y[rest] == c]], y[rest[y[rest] == c]]) for c in range(10)], X[proxy], X_test, y_test)
    runners = {"fedkd": (run_fedkd, dirichlet), "privatekt": (run_privatekt, dirichlet),
               "selective_fd": (run_selective_fd, strong)}
    for name in args.pipelines:
        run, data = runners[name]
        for text in args.targets:
            target = None if text == "none" else float(text)
            key = {"pipeline": name, "target_epsilon": target, "settings": {k: v for k, v in vars(args).items()
                                                                             if k not in ("json", "data", "targets",
                                                                                          "pipelines", "device")}}
            if any(r["pipeline"] == name and r["target_epsilon"] == target
                   and relevant(r["settings"], name, defaults) == relevant(key["settings"], name, defaults)
                   for r in done["runs"]):
                continue
            start = time.perf_counter()
            row = {**key, **run(args, target, data), "seconds": time.perf_counter() - start,
                   "load_average": os.getloadavg(), "provenance": provenance.finish(record)}
            # Re-read under a lock: other copies of the script may have appended runs meanwhile.
            with open(Path(tempfile.gettempdir()) / f"{args.json.name}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                done = json.loads(args.json.read_text()) if args.json.is_file() else {"runs": []}
                done["runs"].append(row)
                args.json.write_text(json.dumps(done, indent=2))
            print(f"{name} target ε = {target}: accuracy {row['test_accuracy']:.4f}, example ε = "
                  f"{round_up(row['epsilon_example'])} ({row['source']}; other bound {row['other_bound']}), "
                  f"party ε = {round_up(row['epsilon_party'])}, σ = {row['noise_multiplier']}, "
                  f"{row['seconds']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
