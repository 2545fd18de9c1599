"""Reproduction: PrivateKT on MNIST with the authors' public demo settings, bounded by wall time.

Settings (Qi et al. 2023, the demo notebook of their code): 20 % of MNIST's
training set (12,000 images) is the unlabeled public set; the other 48,000 go
to 80 clients by a Dirichlet(0.5) label split: by default privfed's ``dirichlet_partition``
(each class dealt out over the clients; sizes vary around 600), with ``--split authors``
the authors' own kind of split, ``label_mixture_partition`` (each client draws its class
mix and holds 600, the last client the rest); ε = 5 per
report of K = 2 labels; a buffer of B = 25 rounds; M = 1,200 self-training
examples; half the clients per round; 5 local epochs (batch 32), 4 fine-tuning
epochs on the buffer (in batches of 32; ``--fine-tune-batch-size 50``: the authors' 4 steps on the
whole buffer), 1 self-training epoch; plain SGD with learning rate 0.05.

The network is FedKT's small CNN (``TorchCNN``) by default; ``--model authors``
uses the authors' larger CNN (32 and 128 5×5 filters, three dense layers of 512,
dropout 0.2), about 10× slower on a CPU; ``--model small-cnn-dropout`` is FedKT's
small CNN with the authors' dropout (0.2 after each pooling and hidden layer), to
tell the dropout's effect from the rest of the network's; ``--model mlp`` is FedKT's MNIST MLP
(784-100-100-10), a network without convolutions (for ``--round-speed``). ``--init keras`` initialises
any of them as Keras does (the authors' code is Keras): Glorot-uniform weights, zero
biases; torch's default initialisation leaves plain SGD at chance for many rounds
(docs/results.md, "Why privfed's PrivateKT curve lay below the authors'"). One round is measured
first; the run then does as many rounds as fit in ``--budget-minutes`` (at most
``--rounds``) and says so. Printed: accuracy after every round (official test
set), the authors' own log at the same rounds (``bench/results/privatekt_authors_log.json``, copied
from their notebook), and each client's composed ε.

``--checkpoint FILE.npz`` runs all ``--rounds`` instead (no time budget, no timing
round), saving the run after every round: stop it at any time and run the same
command again to continue where it stopped. ``--from-checkpoint FILE.npz`` trains
nothing: it writes ``--json`` from the rounds a checkpoint holds (a valid partial result, marked
``"partial": true`` while the checkpoint holds fewer than ``--rounds``), and counts how many
of the buffer's aggregated labels match the public examples' true labels (which the run never sees);
a ``--checkpoint`` run's ``--json`` carries that count too. Every ``--json`` carries the run's provenance
(:mod:`bench.provenance`: command, code commit, seeds, settings, device, machine, load).

``--device cpu``, ``cuda`` or ``auto`` (the default: CUDA where available, as ``TorchClassifier``'s
``device=None``) places every network; the device is recorded in the provenance, and the option is part of
a checkpoint's fingerprint (a run resumes with the ``--device`` it started with).
One torch thread unless ``--threads N`` (a checkpointed run may resume with another
count; float sums then round differently, so the continuation is not bit-identical).
Run: ``python bench/privatekt.py [--data ../shared/datasets] [--budget-minutes 20]``.

``--client-epsilons T [T ...]`` trains nothing: it writes (``--json``) the composed ε of one client that
joined T rounds (basic and tight, δ = 1e-5), computed by today's accountant.

The tables and figures of docs/results.md are rendered from the ``--json`` files by
``python -m bench.tables privatekt-...`` (:mod:`bench.tables.privatekt`).

``--round-speed`` measures instead, side by side in one process, the seconds per round
in each of ``--modes`` (the first is the baseline): the round's 40 clients trained one after
another in this process (``sequential``: ``batch_clients=False``, ``--threads`` torch threads),
in two joblib processes (``sequential-2-processes``: ``n_jobs=2``; joblib gives each worker
one thread on a 2-core machine), or together in one batched computation (``batched``:
``batch_clients=True``). Timed: the clients' step alone (the same fitted global network and the
same tasks in every mode) and whole rounds (``rounds=2`` fits), the modes alternating within
each of ``--repeats``; the reports of the modes are compared. ``--json`` writes the timings.
``--batch-clients`` sets PrivateKT's ``batch_clients`` for the other runs (default ``auto``; the
runs committed before ``auto`` existed used ``true``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

# bench/accounting.py is named like the package: drop this folder from the path.
# The checkout's root goes first, so that this checkout's privfed is imported (not an installed one).
sys.path[:] = [str(Path(__file__).resolve().parents[1])] + [
    p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
import torch  # noqa: E402
from privfed.accounting import RandomizedResponse, account  # noqa: E402
from privfed.accounting.report import round_up  # noqa: E402
from privfed.pipelines.data.datasets import load_dataset  # noqa: E402
from privfed.pipelines.data.partition import dirichlet_partition, label_mixture_partition  # noqa: E402
from privfed.pipelines.models.torch_models import KerasInitialised, TorchClassifier, TorchCNN  # noqa: E402
from privfed.pipelines.privatekt.estimator import PrivateKT  # noqa: E402
from torch import nn  # noqa: E402

from bench import provenance  # noqa: E402

DELTA = 1e-5
#: The authors' run log: test accuracy after each round (Code/main.ipynb of taoqi98/PrivateKT, copied with its source).
AUTHORS_LOG_FILE = Path(__file__).resolve().parent / "results" / "privatekt_authors_log.json"
#: The rounds docs/results.md compares at.
LOGGED_ROUNDS = (1, 5, 10, 15, 20, 25, 30, 40, 50, 60, 70, 80, 90, 100, 500)


def authors_log() -> dict[int, float]:
    """Test accuracy after round r in the authors' published run (rounds 1–500, four of them missing)."""
    document = json.loads(AUTHORS_LOG_FILE.read_text(encoding="utf-8"))
    return {int(r): float(accuracy) for r, accuracy in document["accuracy"].items()}


def authors_cnn(input_size: tuple[int, ...], n_classes: int) -> nn.Module:
    """The authors' MNIST network, in torch (their code is Keras): linear 5×5 convolutions with pooling and dropout."""
    return nn.Sequential(
        # a channel axis: (n, 28, 28) images → (n, 1, 28, 28); flat (n, 784) rows → (n, 1, 28, 28)
        nn.Unflatten(1, (1, *input_size[:1])) if len(input_size) == 2 else nn.Unflatten(1, (1, 28, 28)),
        nn.Conv2d(1, 32, 5), nn.MaxPool2d(2), nn.Dropout(0.2),
        nn.Conv2d(32, 128, 5), nn.MaxPool2d(2), nn.Dropout(0.2), nn.Flatten(),
        nn.Linear(128 * 4 * 4, 512), nn.ReLU(), nn.Dropout(0.2),
        nn.Linear(512, 512), nn.ReLU(), nn.Dropout(0.2),
        nn.Linear(512, 512), nn.ReLU(), nn.Dropout(0.2),
        nn.Linear(512, n_classes),
    )


def small_cnn(input_size: tuple[int, ...], n_classes: int) -> nn.Module:
    """FedKT's small CNN (``TorchCNN``'s defaults: 6 and 16 5×5 filters, 120-84 dense) as a module function."""
    return nn.Sequential(
        nn.Unflatten(1, (1, *input_size[:1])) if len(input_size) == 2 else nn.Unflatten(1, (1, 28, 28)),
        nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(16 * 4 * 4, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, n_classes),
    )


def small_cnn_with_dropout(input_size: tuple[int, ...], n_classes: int) -> nn.Module:
    """FedKT's small CNN (``TorchCNN``'s defaults: 6 and 16 5×5 filters, 120-84 dense) with the authors' dropout."""
    return nn.Sequential(
        nn.Unflatten(1, (1, *input_size[:1])) if len(input_size) == 2 else nn.Unflatten(1, (1, 28, 28)),
        nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.2), nn.Flatten(),
        nn.Linear(16 * 4 * 4, 120), nn.ReLU(), nn.Dropout(0.2),
        nn.Linear(120, 84), nn.ReLU(), nn.Dropout(0.2),
        nn.Linear(84, n_classes),
    )


def mlp(input_size: tuple[int, ...], n_classes: int) -> nn.Module:
    """FedKT's MNIST MLP (``TorchMLP(hidden=(100, 100))``) as a module function."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_size), 100), nn.ReLU(), nn.Linear(100, 100), nn.ReLU(),
                         nn.Linear(100, n_classes))


def public_and_private_rows(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """MNIST training rows of the public set (12,000, drawn by ``seed``) and of the clients (the other 48,000)."""
    order = np.random.default_rng(seed).permutation(60_000)
    return order[:12_000], order[12_000:]


def checkpoint_summary(path: str) -> dict:
    """The rounds a ``--checkpoint`` file holds: history and participation (JSON header and arrays, no pickle)."""
    with np.load(path, allow_pickle=False) as stored:
        header = json.loads(str(stored["__header__"][()]))
        participation = stored["participation"]
        buffer = {part: np.concatenate([stored[f"buffer.{slot}.{part}"]
                                        for slot in range(header["state"]["buffer_rounds"])]).tolist()
                  for part in ("indices", "labels")}
    busiest = int(participation.max())
    release = RandomizedResponse(10, epsilon=5.0, labels_per_report=2, reports=busiest)
    return {"rounds": header["state"]["rounds_done"], "history": header["state"]["history"],
            "participation": participation.tolist(), "buffer": buffer,
            "busiest_client": {"rounds": busiest, "basic": release.pure_epsilon(),
                               "tight": account(release, delta=DELTA).epsilon}}


def buffer_labels_correct(summary: dict, data: str, seed: int) -> dict:
    """How many of a checkpoint's buffer labels (``checkpoint_summary``) match the public examples' true labels."""
    public_labels = load_dataset("mnist", data).y_train[public_and_private_rows(seed)[0]]
    buffer = summary["buffer"]
    correct = int(np.sum(public_labels[buffer["indices"]] == np.asarray(buffer["labels"])))
    return {"correct": correct, "of": len(buffer["labels"])}


def client_epsilons(joined: list[int]) -> list[dict]:
    """The composed ε of one client that joined T rounds, for each T in ``joined`` (basic and tight, δ = DELTA)."""
    rows = []
    for reports in joined:
        release = RandomizedResponse(10, epsilon=5.0, labels_per_report=2, reports=reports)
        rows.append({"reports": reports, "basic": release.pure_epsilon(),
                     "tight": account(release, delta=DELTA).epsilon})
    return rows


def device_of(choice: str) -> str | None:
    """``--device``'s value as ``TorchClassifier(device=...)`` takes it: ``auto`` is None (CUDA where available)."""
    return None if choice == "auto" else choice


def resolved_device(choice: str) -> str:
    """The device ``--device`` gives on this machine (recorded in the raw results)."""
    return "cuda" if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()) else "cpu"


ROUND_MODES = {
    # mode: (PrivateKT's batch_clients, its n_jobs)
    "sequential": (False, 1),
    "sequential-2-processes": (False, 2),
    "batched": (True, 1),
}


def clients_step(mode: str, data, tasks, model) -> np.ndarray:
    """The labels the round's clients report, computed as ``PrivateKT.fit`` does in ``mode`` (one row per client)."""
    from privfed.pipelines.privatekt.estimator import _party_step
    from privfed.pipelines.privatekt.steps import batched_party_steps
    from privfed.pipelines.protocol.executor import run_party_tasks

    batched, n_jobs = ROUND_MODES[mode]
    if batched:
        return np.stack([report.labels for report in batched_party_steps(tasks, data, model=model)])
    sent = run_party_tasks(_party_step, [(X, y, task, f"client {index}") for index, ((X, y), task)
                                         in enumerate(zip(data, tasks))], config=model, n_jobs=n_jobs, progress=False)
    return np.stack([messages[0].labels for messages in sent])


def round_speed(clients, public, model, settings, repeats: int, modes: list[str], json_path: str | None,
                run: dict) -> None:
    """Seconds per round in each of ``modes``, side by side in this process, alternating.

    The clients' step alone: the round's 40 clients from one fitted global network, with the same
    tasks (seeds, queries) in every mode; whole rounds: ``PrivateKT(rounds=2)`` fits, per round.
    """
    from privfed.pipelines.privatekt.steps import network_parameters, privatekt_tasks

    warm = PrivateKT(model, rounds=1, **settings).fit(clients, public)  # a fitted global network, as from round 2 on
    rng = np.random.default_rng(1)
    chosen = np.sort(rng.choice(len(clients), size=len(clients) // 2, replace=False))
    data = [clients[i] for i in chosen]
    step: dict[str, list[float]] = {mode: [] for mode in modes}
    whole: dict[str, list[float]] = {mode: [] for mode in modes}
    agreement = []
    for repeat in range(repeats):
        tasks = privatekt_tasks(queries=public[:2], classes=np.arange(10),
                                parameters=network_parameters(warm.global_model_),
                                keep_probability=warm.keep_probability_, local_epochs=settings["local_epochs"],
                                init_seed=0, round_seed=np.random.SeedSequence(100 + repeat), n_clients=len(data))
        reports = {}
        for mode in modes:
            tick = time.perf_counter()
            reports[mode] = clients_step(mode, data, tasks, model)
            step[mode].append(time.perf_counter() - tick)
            print(f"repeat {repeat + 1}, clients' step, {len(data)} clients, {mode}: {step[mode][-1]:.1f} s",
                  flush=True)
        agreement.append({mode: float(np.mean(reports[mode] == reports[modes[0]])) for mode in modes[1:]})
        print(f"  reports equal to {modes[0]}'s: {agreement[-1]}", flush=True)
        for mode in modes:
            batch_clients, n_jobs = ROUND_MODES[mode]
            tick = time.perf_counter()
            PrivateKT(model, rounds=2, batch_clients=batch_clients, n_jobs=n_jobs, **settings).fit(clients, public)
            whole[mode].append((time.perf_counter() - tick) / 2)
            print(f"repeat {repeat + 1}, whole round, {mode}: {whole[mode][-1]:.1f} s per round (rounds 1–2)",
                  flush=True)
    best_step = {mode: min(values) for mode, values in step.items()}
    best_whole = {mode: min(values) for mode, values in whole.items()}
    for mode in modes[1:]:
        print(f"{mode} against {modes[0]} (best of {repeats}): "
              f"clients' step ×{best_step[modes[0]] / best_step[mode]:.2f}, "
              f"whole round ×{best_whole[modes[0]] / best_whole[mode]:.2f}")
    if json_path:
        provenance.write_json(json_path, {
            "provenance": provenance.finish(run), "command": run["command"], "clients_per_round": len(data),
            "torch_threads_in_process": torch.get_num_threads(), "cpu_cores": os.cpu_count(),
            "modes": {mode: {"batch_clients": ROUND_MODES[mode][0], "n_jobs": ROUND_MODES[mode][1]} for mode in modes},
            "clients_step_seconds": step, "whole_round_seconds": whole,
            "speedup_against_first_mode_best": {
                mode: {"clients_step": best_step[modes[0]] / best_step[mode],
                       "whole_round": best_whole[modes[0]] / best_whole[mode]} for mode in modes[1:]},
            "reports_equal_to_first_mode": agreement, "settings": settings,
        })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    parser.add_argument("--model", choices=("small-cnn", "small-cnn-dropout", "authors", "mlp"), default="small-cnn")
    parser.add_argument("--init", choices=("torch", "keras"), default="torch",
                        help="the networks' initialisation: torch's default, or Keras's (Glorot-uniform, zero biases) "
                             "as in the authors' code")
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd",
                        help="sgd: the authors' plain SGD, lr 0.05; "
                             "adam: Adam, lr 1e-3 (learns faster from a tiny buffer)")
    parser.add_argument("--split", choices=("dirichlet", "authors"), default="dirichlet",
                        help="clients' label skew: privfed's dirichlet_partition, "
                             "or the authors' label_mixture_partition")
    parser.add_argument("--fine-tune-batch-size", type=int, default=None,
                        help="the buffer fine-tuning's batch size (default: the model's 32); 50 = the whole buffer, "
                             "as the authors' code")
    parser.add_argument("--batch-clients", choices=("auto", "true", "false"), default="auto",
                        help="PrivateKT's batch_clients (the runs committed before it was 'auto' used true)")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--budget-minutes", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto",
                        help="where the networks train: cpu, cuda, or auto (default: CUDA where available, "
                             "TorchClassifier's device=None)")
    parser.add_argument("--round-speed", action="store_true",
                        help="time a round's clients one after another vs batched, side by side, and stop")
    parser.add_argument("--repeats", type=int, default=2, help="alternations of --round-speed")
    parser.add_argument("--modes", nargs="+", choices=tuple(ROUND_MODES), default=["sequential", "batched"],
                        help="--round-speed's modes, the first one the baseline")
    parser.add_argument("--checkpoint", default=None,
                        help="an .npz file: run all --rounds, saved after each; rerun the command to resume")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--from-checkpoint", default=None,
                        help="write --json from the rounds this checkpoint holds, and stop")
    parser.add_argument("--client-epsilons", type=int, nargs="+", default=None, metavar="T",
                        help="write (--json) the composed ε of a client that joined T rounds, for each T, and stop")
    args = parser.parse_args()
    if args.fine_tune_batch_size is not None and args.fine_tune_batch_size < 1:
        parser.error(f"--fine-tune-batch-size must be a positive integer; got {args.fine_tune_batch_size}")
    if args.threads < 1:
        parser.error(f"--threads must be a positive integer; got {args.threads}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available on this machine; use --device cpu or auto")
    if args.client_epsilons is not None and min(args.client_epsilons) < 1:
        parser.error(f"--client-epsilons must be positive integers; got {args.client_epsilons}")
    command = "python " + " ".join(sys.argv)
    run = provenance.start(command=command, seeds=[args.seed], settings=vars(args),
                           device=resolved_device(args.device))
    log = authors_log()
    if args.client_epsilons is not None:
        rows = client_epsilons(args.client_epsilons)
        for row in rows:
            print(f"a client joining {row['reports']} rounds: basic ε = {row['basic']:g}, "
                  f"tight ε = {round_up(row['tight'])} (δ = {DELTA:g})")
        if args.json:
            provenance.write_json(args.json, {"provenance": provenance.finish({**run, "seeds": None}),
                                              "command": command, "delta": DELTA, "epsilon_per_round": 5.0,
                                              "labels_per_report": 2, "classes": 10, "rows": rows})
        return
    if args.from_checkpoint:
        summary = checkpoint_summary(args.from_checkpoint)
        for record in summary["history"]:
            r = record["round"]
            reference = f"   (authors' log {log[r]:.4f})" if r in log else ""
            print(f"round {r:4d}: accuracy {record['accuracy']:.4f}{reference}")
        # The buffer's aggregated labels against the public examples' true labels (the run never sees them).
        summary["buffer_labels_correct"] = buffer_labels_correct(summary, args.data, args.seed)
        print(f"the buffer after round {summary['rounds']}: {summary['buffer_labels_correct']['correct']} of "
              f"{summary['buffer_labels_correct']['of']} labels correct")
        if args.json:
            provenance.write_json(args.json, {"provenance": provenance.finish(run), "command": command,
                                              "settings": vars(args), **summary,
                                              "partial": summary["rounds"] < args.rounds})
        return
    torch.set_num_threads(args.threads)

    mnist = load_dataset("mnist", args.data)
    public_rows, private_rows = public_and_private_rows(args.seed)
    X = mnist.X_train.astype(np.float32) / 255.0
    y = mnist.y_train
    if args.split == "authors":
        parts = label_mixture_partition(y[private_rows], 80, 0.5, party_size=600, random_state=args.seed)
    else:
        parts = dirichlet_partition(y[private_rows], 80, 0.5, min_size=10, random_state=args.seed)
    clients = [(X[private_rows][rows], y[private_rows][rows]) for rows in parts]
    X_test, y_test = mnist.X_test.astype(np.float32) / 255.0, mnist.y_test
    sizes = [len(c[1]) for c in clients]
    print(f"80 clients hold {min(sizes)}–{max(sizes)} images (median {int(np.median(sizes))}); 12,000 public images")

    optimizer = (dict(optimizer="sgd", lr=0.05, momentum=0.0) if args.optimizer == "sgd"
                 else dict(optimizer="adam", lr=1e-3))
    network = dict(**optimizer, batch_size=32, random_state=args.seed, device=device_of(args.device))
    builders = {"authors": authors_cnn, "small-cnn-dropout": small_cnn_with_dropout, "small-cnn": small_cnn,
                "mlp": mlp}
    if args.init == "keras":
        model = TorchClassifier(KerasInitialised(builders[args.model]), **network)
    else:  # TorchCNN is the small CNN with torch's initialisation
        model = TorchCNN(**network) if args.model == "small-cnn" else TorchClassifier(builders[args.model], **network)
    settings = dict(epsilon_per_round=5.0, queries_per_round=2, buffer_rounds=25, self_training_size=1200,
                    client_fraction=0.5, local_epochs=5, fine_tune_epochs=4,
                    fine_tune_batch_size=args.fine_tune_batch_size, self_training_epochs=1,
                    delta=DELTA, random_state=args.seed)
    batch_clients = {"auto": "auto", "true": True, "false": False}[args.batch_clients]

    if args.round_speed:
        round_speed(clients, X[public_rows], model, settings, args.repeats, args.modes, args.json, run)
        return
    per_round, rounds = None, args.rounds
    if args.checkpoint is None:
        tick = time.perf_counter()
        PrivateKT(model, rounds=1, batch_clients=batch_clients, **settings).fit(
            clients, X[public_rows], eval_set=(X_test, y_test))
        per_round = time.perf_counter() - tick
        rounds = max(1, min(args.rounds, int(args.budget_minutes * 60 // per_round)))
        print(f"one round takes {per_round:.0f} s: running {rounds} rounds "
              f"({'all requested' if rounds == args.rounds else f'the {args.rounds} requested do not fit the budget'})",
              flush=True)

    tick = time.perf_counter()
    fitted = PrivateKT(model, rounds=rounds, batch_clients=batch_clients, progress=True, **settings).fit(
        clients, X[public_rows], eval_set=(X_test, y_test), checkpoint=args.checkpoint)
    elapsed = time.perf_counter() - tick
    for record in fitted.history_:
        r = record["round"]
        reference = f"   (authors' log {log[r]:.4f})" if r in log else ""
        print(f"round {r:4d}: accuracy {record['accuracy']:.4f}{reference}")

    report = fitted.ledger_.account(delta=DELTA)
    busiest = int(fitted.participation_.max())
    print(f"\n{rounds} rounds in {elapsed:.0f} s; β = {fitted.keep_probability_:.4f}; clients joined "
          f"{int(fitted.participation_.min())}–{busiest} rounds")
    print(f"ledger: {report}")
    print(f"busiest client: basic ε = {fitted.client_epsilons_['basic'].max():g}, "
          f"tight ε = {round_up(fitted.client_epsilons_['tight'].max())} (δ = {DELTA:g})")
    projections = {}
    for total, row in zip((100, 100, 500, 500), client_epsilons([50, 100, 250, 500])):
        projections[f"{row['reports']} of {total} rounds"] = {"basic": row["basic"], "tight": row["tight"]}
        print(f"a client joining {row['reports']} of {total} rounds: basic ε = {row['basic']:g}, "
              f"tight ε = {round_up(row['tight'])}")
    if args.json:
        provenance.write_json(args.json, {
            "provenance": provenance.finish(run), "command": command,
            "settings": {**vars(args), **settings}, "seconds_per_round_measured": per_round, "rounds": rounds,
            "seconds": elapsed, "history": fitted.history_,
            "ledger_epsilon": report.epsilon, "ledger_report": str(report),
            "participation": fitted.participation_.tolist(),
            "busiest_client": {"rounds": busiest, "basic": float(fitted.client_epsilons_["basic"].max()),
                               "tight": float(fitted.client_epsilons_["tight"].max())},
            "projections": projections, "client_sizes": sizes,
            **({"buffer_labels_correct": buffer_labels_correct(checkpoint_summary(args.checkpoint), args.data,
                                                               args.seed)} if args.checkpoint else {}),
        })


if __name__ == "__main__":
    main()
