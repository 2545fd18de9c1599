"""Reproduction: Selective-FD vs the unselected baseline (FedMD) vs independent learning.

Shao, Wu, Zhang (Nat. Commun. 2024) on MNIST and Fashion-MNIST: 10 clients, strong
non-IID (client c holds class c only), weak non-IID (client c holds half of
class c and half of class c+1 mod 10) or IID (equal random shares), a proxy set of 10 % of the training images
(unlabeled for the protocol), the authors' small CNN (conv 5×5 ×10 → pool → conv
5×5 ×20 → pool → 50 → 10, without their dropout). Every method runs the same number
of rounds with the same local and distillation steps; accuracies are *final*
(last round), each client's model on the official test set, averaged over clients
as the paper does. Also: Selective-FD with ``privacy="rr"`` at a few ε, and the
client-side selector's AUROC for telling right from wrong local predictions on the
proxy set (the paper's Fig. 5), with independent learning's local models.

``--ablation`` adds the paper's selector ablation: Selective-FD (soft and hard labels) with
the client-side selector only (``tau_server=2``) and with the server-side selector only
(``tau_client=None``); "both" is Selective-FD and "none" FedMD with the same labels. ``--tau-client`` and
``--tau-server`` set the two thresholds (the paper's Fig. 6 sweeps them, one run per value).

Torch and BLAS use one CPU thread; ``--device cuda`` (or ``auto``: CUDA where available) trains the
client models on the GPU, and the device is recorded in the raw results' provenance. ``--json`` is
rewritten after every method's run, with the provenance of the run (``bench/provenance.py``: commit,
seeds, settings, device, machine, load); ``--resume`` keeps the rows it already holds (same protocol
settings) and runs only the missing ones, so an interrupted sweep continues where it stopped.
``--checkpoints DIR`` also saves every method's run after each round (``fit(..., checkpoint=...)``,
with its learning curve beside it), so an interrupted method resumes at its last round instead of its
first (use it for runs beyond 100 rounds); a method's files are deleted once its row is in ``--json``.

Run: ``python bench/selective_fd.py --json docs/results-selective-fd.json --figure
docs/selective-fd-curves.png`` (about 26 minutes on two shared cores with the defaults). The tables and
figures of docs/results.md are rendered from the raw results by ``python -m bench.tables NAME``
(``bench/tables/selective_fd.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

# Run from the checkout this file is in: its folder's bench/accounting.py must not shadow the package.
_ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(_ROOT)] + [p for p in sys.path if Path(p or ".").resolve() not in (_ROOT, _ROOT / "bench")]
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from privfed.pipelines.data.datasets import load_dataset  # noqa: E402
from privfed.pipelines.models.torch_models import TorchCNN  # noqa: E402
from privfed.pipelines.selective_fd.baselines import FedMD, IndependentLearning  # noqa: E402
from privfed.pipelines.selective_fd.estimator import SelectiveFD  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402

from bench import provenance  # noqa: E402
from bench.tables.selective_fd import markdown, plot  # noqa: E402

DATASETS = _ROOT.parent / "shared" / "datasets"
N_CLIENTS = 10


def split(y: np.ndarray, setting: str, rng: np.random.Generator) -> tuple[np.ndarray, list[np.ndarray]]:
    """Proxy indices (10 % of the training set) and each client's indices (strong, weak non-IID or IID)."""
    order = rng.permutation(len(y))
    proxy, rest = np.sort(order[: len(y) // 10]), order[len(y) // 10 :]
    if setting == "iid":
        return proxy, [np.sort(part) for part in np.array_split(rest, N_CLIENTS)]
    by_class = [rest[y[rest] == c] for c in range(N_CLIENTS)]
    if setting == "strong":
        return proxy, [np.sort(members) for members in by_class]
    halves = [np.array_split(members, 2) for members in by_class]
    return proxy, [np.sort(np.concatenate([halves[c][0], halves[(c + 1) % N_CLIENTS][1]])) for c in range(N_CLIENTS)]


DEVICES = {"cpu": "cpu", "cuda": "cuda", "auto": None}  # --device -> TorchClassifier(device=...)


def cnn(seed: int, device: str = "cpu") -> TorchCNN:
    return TorchCNN(conv_channels=(10, 20), hidden=(50,), lr=2e-3, batch_size=64, random_state=seed,
                    device=DEVICES[device])


def methods(args: argparse.Namespace, setting: str) -> dict[str, object]:
    shared = dict(rounds=args.rounds, local_steps=args.local_steps, random_state=args.seed)
    distil = dict(shared, distill_steps=args.distill_steps, proxy_batch=args.proxy_batch)
    selective = dict(distil, kernel_width=args.kernel_width, tau_server=args.tau_server)
    chosen = {
        "Selective-FD soft": SelectiveFD(cnn(args.seed, args.device), labels="soft", tau_client=args.tau_client,
                                         **selective),
        "Selective-FD hard": SelectiveFD(cnn(args.seed, args.device), labels="hard", tau_client=args.tau_client,
                                         **selective),
        "FedMD soft": FedMD(cnn(args.seed, args.device), labels="soft", **distil),
        "FedMD hard": FedMD(cnn(args.seed, args.device), labels="hard", **distil),
        "Independent": IndependentLearning(cnn(args.seed, args.device), **shared),
    }
    for labels in ("soft", "hard") if args.ablation else ():  # the paper's selector ablation: "both" is
        # Selective-FD, "none" FedMD, with the same labels
        chosen[f"Selective-FD {labels}, client selector only"] = SelectiveFD(
            cnn(args.seed, args.device), labels=labels, tau_client=args.tau_client, **dict(selective, tau_server=2.0))
        chosen[f"Selective-FD {labels}, server selector only"] = SelectiveFD(
            cnn(args.seed, args.device), labels=labels, tau_client=None, **selective)
    for per_label in args.rr_epsilon_per_label if setting in args.rr_settings else ():
        chosen[f"Selective-FD hard, RR ε/label={per_label:g}"] = SelectiveFD(
            cnn(args.seed, args.device), labels="hard", privacy="rr", epsilon_per_round=per_label * args.proxy_batch,
            tau_client=args.tau_client, **selective)
    return chosen


def run(dataset: str, setting: str, args: argparse.Namespace, results: list[dict], save) -> None:
    """Run the chosen methods on one data set and split, appending each row to ``results`` and saving it;
    a method already in ``results`` (``--resume``) is not run again."""
    data = load_dataset(dataset, DATASETS)
    X = (data.X_train.astype(np.float32) / 255.0)[:, None]
    X_test = (data.X_test.astype(np.float32) / 255.0)[:, None]
    rng = np.random.default_rng(args.seed)
    proxy, clients = split(data.y_train, setting, rng)
    parties = [(X[idx], data.y_train[idx]) for idx in clients]
    curve_rows = rng.choice(len(X_test), size=args.curve_test_size, replace=False)
    selectors = None
    done = {(row["dataset"], row["setting"], row["method"]) for row in results}
    for label, estimator in methods(args, setting).items():
        if args.methods and not any(m in label for m in args.methods) or (dataset, setting, label) in done:
            continue
        checkpoint = None
        progress = {"curve": [], "round_seconds": []}
        if args.checkpoints:
            name = f"{dataset} {setting} {label} seed {args.seed} rounds {args.rounds}"
            checkpoint = args.checkpoints / f"{re.sub('[^a-z0-9]+', '-', name.lower())}.npz"
            if checkpoint.with_suffix(".curve.json").exists():
                progress = json.loads(checkpoint.with_suffix(".curve.json").read_text())
        last, first_round = [time.perf_counter()], []

        def record(model, round_index, progress=progress, last=last, first_round=first_round, checkpoint=checkpoint):
            now = time.perf_counter()  # a round's time includes the previous round's evaluation, as before
            first_round[:] = first_round or [round_index]
            # a round the checkpoint did not keep (stopped after this callback) runs again: its entries go
            progress["curve"] = [point for point in progress["curve"] if point[0] <= round_index]
            progress["round_seconds"] = progress["round_seconds"][:round_index] + [now - last[0]]
            last[0] = now
            if (round_index + 1) % args.eval_every == 0 or round_index + 1 == args.rounds:
                accuracy = model.client_scores(X_test[curve_rows], data.y_test[curve_rows]).mean()
                progress["curve"].append((round_index + 1, float(accuracy)))
            if checkpoint is not None:
                checkpoint.with_suffix(".curve.json").write_text(json.dumps(progress))

        estimator.set_params(callback=record)
        estimator.fit(parties, X[proxy], checkpoint=checkpoint)
        scores = estimator.client_scores(X_test, data.y_test)
        row = {
            "dataset": dataset, "setting": setting, "method": label, "rounds": args.rounds,
            "accuracy_mean": float(scores.mean()), "accuracy_min": float(scores.min()),
            "accuracy_max": float(scores.max()), "curve": progress["curve"],
            "seconds": float(np.sum(progress["round_seconds"])),
            "seconds_per_round": float(np.mean(progress["round_seconds"])),
        }
        if first_round != [0]:  # resumed from a checkpoint (none left to run: [])
            row["resumed_after_round"] = first_round[0] if first_round else args.rounds
        if hasattr(estimator, "history_") and estimator.history_["shared_fraction"]:
            row["shared_fraction"] = float(np.mean(estimator.history_["shared_fraction"]))
            row["kept_per_round"] = float(np.mean(estimator.history_["kept"]))
        report = estimator.ledger_.account(delta=1e-5)
        row["epsilon"] = report.epsilon if report.mechanisms else None
        row["unaccounted"] = list(estimator.ledger_.unaccounted)
        if label == "Selective-FD soft":
            selectors = estimator.selectors_
        if label == "Independent" and selectors is not None:
            probe = proxy[rng.choice(len(proxy), size=min(len(proxy), args.auroc_proxy_size), replace=False)]
            row["selector_auroc"] = selector_auroc(selectors, estimator.models_, X[probe], data.y_train[probe])
        results.append(row)
        save()
        if checkpoint is not None:
            checkpoint.unlink(missing_ok=True)
            checkpoint.with_suffix(".curve.json").unlink(missing_ok=True)
        print(json.dumps({k: v for k, v in row.items() if k not in ("curve", "unaccounted")}), flush=True)


def selector_auroc(selectors, models, X_proxy: np.ndarray, y_proxy: np.ndarray) -> dict[str, list[float]]:
    """Per client: AUROC of r̂ for 'the local model is right' on the proxy set, and accuracy shared / not shared."""
    aurocs, right_if_shared, right_if_not, shared_fraction = [], [], [], []
    for selector, model in zip(selectors, models):
        scores = selector.score_samples(X_proxy)
        right = model.predict(X_proxy) == y_proxy
        aurocs.append(float(roc_auc_score(right, scores)) if 0 < right.mean() < 1 else float("nan"))
        shared = scores > selector.threshold_
        right_if_shared.append(float(right[shared].mean()) if shared.any() else float("nan"))
        right_if_not.append(float(right[~shared].mean()) if (~shared).any() else float("nan"))
        shared_fraction.append(float(shared.mean()))
    return {"auroc": aurocs, "local_accuracy_on_shared": right_if_shared,
            "local_accuracy_on_withheld": right_if_not, "shared_fraction": shared_fraction}


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``argv``, default ``sys.argv[1:]``), checked before any work: exit 2 on a bad one."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["mnist", "fashion_mnist"])
    parser.add_argument("--settings", nargs="+", choices=("strong", "weak", "iid"), default=["strong", "weak"])
    parser.add_argument("--methods", nargs="*", default=[], help="substrings of method names to run (default all)")
    parser.add_argument("--rounds", type=int, default=14)
    parser.add_argument("--local-steps", type=int, default=5)
    parser.add_argument("--distill-steps", type=int, default=10)
    parser.add_argument("--proxy-batch", type=int, default=256)
    parser.add_argument("--kernel-width", type=float, default=2.0)
    parser.add_argument("--tau-server", type=float, default=1.5)
    parser.add_argument("--tau-client", type=float, default=0.25,
                        help="the client-side selector's quantile (the paper's τ_client; Fig. 6 sweeps it)")
    parser.add_argument("--rr-settings", nargs="+", default=["strong"], help="settings that also run the RR variants")
    parser.add_argument("--rr-epsilon-per-label", type=float, nargs="*", default=[1.0, 4.0])
    parser.add_argument("--eval-every", type=int, default=2)
    parser.add_argument("--curve-test-size", type=int, default=2000)
    parser.add_argument("--auroc-proxy-size", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--figure", type=Path)
    parser.add_argument("--device", choices=tuple(DEVICES), default="cpu",
                        help="where the client models train (auto: CUDA where available); kept in the provenance")
    parser.add_argument("--ablation", action="store_true",
                        help="also run Selective-FD with the client-side selector only and the server-side only")
    parser.add_argument("--checkpoints", type=Path,
                        help="a folder: save each method's run after every round and resume it from there")
    parser.add_argument("--resume", action="store_true",
                        help="keep the rows --json already holds (same settings) and run only the missing ones")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device: 'cuda' but CUDA is not available on this machine; use cpu or auto")
    if args.checkpoints and not args.checkpoints.is_dir():
        parser.error(f"--checkpoints: {str(args.checkpoints)!r} is not a folder")
    return args


def main() -> None:
    args = arguments()
    torch.set_num_threads(1)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    protocol = ("rounds", "local_steps", "distill_steps", "proxy_batch", "kernel_width", "tau_server", "tau_client",
                "seed", "curve_test_size", "eval_every")
    defaults = {"tau_client": 0.25}  # files written before the option hold no value for it
    results: list[dict] = []
    earlier: list[dict] = []
    if args.resume and args.json and args.json.exists():
        saved = json.loads(args.json.read_text())
        if any(saved["settings"].get(key, defaults.get(key)) != settings[key] for key in protocol):
            sys.exit(f"--resume: {args.json} was run with other settings ({', '.join(protocol)} must match)")
        results = provenance.earlier_records(saved["results"])
        earlier = saved.get("earlier_runs", []) + ([saved["provenance"]] if "provenance" in saved else [])
        print(f"--resume: {len(results)} rows kept from {args.json}", flush=True)
    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    run_record = provenance.start(command=" ".join(["python", *sys.argv]), seeds=[args.seed], settings=settings,
                                  device=device)

    def save() -> None:
        if args.json:  # rewritten whole after every method: a partial sweep is a valid file
            provenance.stamp_records(results, run_record)
            document = {"provenance": provenance.finish(run_record), "settings": settings, "results": results}
            if earlier:
                document["earlier_runs"] = earlier  # the runs a --resume continued, oldest first
            provenance.write_json(args.json, document)

    started = time.perf_counter()
    for dataset in args.datasets:
        for setting in args.settings:
            run(dataset, setting, args, results, save)
    print(f"total {time.perf_counter() - started:.0f} s", flush=True)
    if args.figure:
        plot(results, args.figure)
    print(markdown(results))


if __name__ == "__main__":
    sys.exit(main())
