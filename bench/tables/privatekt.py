"""docs/results.md, "PrivateKT on MNIST (Qi et al., Nat. Commun. 2023)", its controlled runs and its round speed.

Raw results: ``bench/privatekt.py --json`` runs (``history``: accuracy after every round), the authors' published
run log (``bench/results/privatekt_authors_log.json``, copied from their notebook with its source), the buffer
check and vote-quality probes' files, ``--client-epsilons`` and ``--round-speed`` files.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from bench.tables import figure, table
from bench.tables._stats import mean_sd, t_interval

AUTHORS_LOG = "bench/results/privatekt_authors_log.json"
ADAM_100 = "docs/results-privatekt-100-rounds.json"
AUTHORS_SETTINGS = {  # the authors' settings (their CNN, Keras's initialisation, SGD 0.05): (split, seed) -> run
    ("dirichlet", 0): "docs/results-privatekt-authors-keras-sgd.json",
    ("dirichlet", 1): "docs/results-privatekt-authors-keras-sgd-seed1.json",
    ("authors", 0): "docs/results-privatekt-authors-keras-sgd-authors-split.json",
    ("authors", 1): "docs/results-privatekt-authors-keras-sgd-authors-split-seed1.json",
}
SPLIT_NAMES = {"dirichlet": "privfed's split (`dirichlet_partition`)", "authors": "authors' split "
               "(`label_mixture_partition`)"}
#: The rounds at which the tables compare with the authors' log.
ROUNDS = (1, 5, 10, 15, 20, 25, 30, 40, 50, 60, 70, 80, 90, 100)


def _log(document: dict[str, Any]) -> dict[int, float]:
    return {int(r): float(accuracy) for r, accuracy in document["accuracy"].items()}


def _history(run: dict[str, Any]) -> dict[int, float]:
    return {int(record["round"]): float(record["accuracy"]) for record in run["history"]}


def curves_markdown(curves: list[tuple[str, dict[int, float]]], rounds: tuple[int, ...] = ROUNDS) -> str:
    """Accuracy after each of ``rounds``, one row per (label, accuracy by round); blank where a curve has none."""
    lines = ["| round | " + " | ".join(map(str, rounds)) + " |", "|---" * (len(rounds) + 1) + "|"]
    for label, accuracy in curves:
        lines.append(f"| {label} | " + " | ".join(f"{accuracy[r]:.3f}" if r in accuracy else "" for r in rounds)
                     + " |")
    return "\n".join(lines)


@table("privatekt-100-rounds", raw=[ADAM_100, AUTHORS_LOG])
def hundred_rounds(documents: list[Any]) -> str:
    run, log = documents
    return curves_markdown([("privfed (small CNN, Adam)", _history(run)), ("authors' log (their CNN, SGD)", _log(log))])


@figure("privatekt-100-rounds-curve", raw=[ADAM_100, *AUTHORS_SETTINGS.values(), AUTHORS_LOG],
        image="docs/privatekt-mnist-100-rounds.png", alt="PrivateKT on MNIST, 100 rounds")
def hundred_rounds_curve(documents: list[Any], path: Path) -> None:
    """Accuracy per round of privfed's runs beside the authors' published log, rounds 1–100."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    adam, *settings, log = documents
    figure_, axes = plt.subplots(figsize=(6.4, 4.0))
    accuracy = _log(log)
    shown = [r for r in sorted(accuracy) if r <= 100]
    axes.plot(shown, [accuracy[r] for r in shown], "k--", linewidth=1.5, label="authors' log (their CNN, Keras, SGD)")
    colours = {"dirichlet": "tab:blue", "authors": "tab:orange"}
    for (split, seed), run in zip(AUTHORS_SETTINGS, settings, strict=True):
        history = _history(run)
        axes.plot(list(history), list(history.values()), color=colours[split], alpha=1.0 if seed == 0 else 0.55,
                  label=f"privfed, authors' settings, {SPLIT_NAMES[split].split(' (')[0]}, seed {seed}")
    history = _history(adam)
    axes.plot(list(history), list(history.values()), color="tab:grey", label="privfed, small CNN, Adam (seed 0)")
    axes.set_xlabel("round")
    axes.set_ylabel("MNIST test accuracy")
    axes.set_ylim(0, 1)
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right", fontsize=7)
    axes.set_title("PrivateKT on MNIST: ε = 5 per round, K = 2, B = 25, M = 1,200", fontsize=9)
    figure_.tight_layout()
    figure_.savefig(path, dpi=120, metadata={"Software": None})
    plt.close(figure_)


BUFFER_ROWS = [  # (network, init, fine-tuning) in the order the table shows them, and the row's label
    (("authors' CNN", "torch", "4 epochs, batches of 32"), "torch's default, 4 epochs of batches of 32"),
    (("authors' CNN", "torch", "four steps on the whole buffer"),
     "torch's default, four steps on the whole buffer (the authors')"),
    (("authors' CNN", "keras", "4 epochs, batches of 32"), "Keras's (Glorot, zero biases), 4 epochs of batches of 32"),
    (("authors' CNN", "keras", "four steps on the whole buffer"),
     "Keras's, four steps on the whole buffer (the authors' code exactly)"),
    (("small CNN", "torch", "4 epochs, batches of 32"),
     "FedKT's small CNN, torch's default, 4 epochs of batches of 32"),
    (("small CNN", "keras", "4 epochs, batches of 32"), "FedKT's small CNN, Keras's, 4 epochs of batches of 32"),
]


@table("privatekt-buffer-check", raw=["bench/results/privatekt_buffer_check.json", AUTHORS_LOG])
def buffer_check(documents: list[Any]) -> str:
    check, log = documents
    rows = {(row["network"], row["init"], row["fine_tune"]): row["accuracy"] for row in check["rows"]}
    curves = [(label, {r + 1: accuracy for r, accuracy in enumerate(rows[key])}) for key, label in BUFFER_ROWS]
    curves.append(("authors' log (full PrivateKT: noisy labels, Keras)", _log(log)))
    return curves_markdown(curves, (5, 10, 15, 20)).replace("| round |", "| initialisation, fine-tuning |", 1)


@table("privatekt-authors-keras", raw=[AUTHORS_SETTINGS[("dirichlet", 0)], AUTHORS_LOG, ADAM_100])
def authors_keras(documents: list[Any]) -> str:
    run, log, adam = documents
    return curves_markdown([("privfed (authors' CNN, Keras init, SGD 0.05)", _history(run)),
                            ("authors' log (their CNN, SGD)", _log(log)),
                            ("privfed (small CNN, torch init, Adam; above)", _history(adam))])


def runs_markdown(runs: list[tuple[str, dict[str, Any]]], log: dict[int, float]) -> str:
    """Runs at the authors' logged rounds beside their log, with each run's buffer, participation and busiest ε."""
    head = ["run (split, seed)", *map(str, ROUNDS), "buffer labels right", "rounds joined",
            "busiest client's ε, tight (basic)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, run in runs:
        split = run["settings"].get("split") or "dirichlet"  # runs before --split existed used dirichlet_partition
        accuracy = _history(run)
        buffer = run.get("buffer_labels_correct")
        busiest = run["busiest_client"]
        cells = [f"{SPLIT_NAMES[split].split(' (')[0]}, seed {run['settings']['seed']} ({name})",
                 *(f"{accuracy[r]:.3f}" if r in accuracy else "" for r in ROUNDS),
                 f"{buffer['correct']} of {buffer['of']}" if buffer else "not recorded",
                 f"{min(run['participation'])}–{max(run['participation'])}",
                 f"{math.ceil(busiest['tight'] * 10) / 10:.1f} ({busiest['basic']:g})"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("| " + " | ".join(["authors' log", *(f"{log[r]:.3f}" for r in ROUNDS), "", "", ""]) + " |")
    lines += ["", "ε: party level (one client's data set), δ = 10⁻⁵, data-independent, tight rounded up to 0.1; "
              "basic = pure composition of the client's reports."]
    return "\n".join(lines)


@table("privatekt-authors-settings", raw=[*AUTHORS_SETTINGS.values(), AUTHORS_LOG])
def authors_settings(documents: list[Any]) -> str:
    *runs, log = documents
    return runs_markdown([(Path(path).name, run) for path, run in zip(AUTHORS_SETTINGS.values(), runs, strict=True)],
                         _log(log))


@table("privatekt-round-100", raw=[*AUTHORS_SETTINGS.values(), AUTHORS_LOG])
def round_100(documents: list[Any]) -> str:
    """Round 100 over the seeds of each split: mean ± sd and the 95 % t-interval, beside the authors' one run."""
    *runs, log = documents
    authors = _log(log)[100]
    lines = ["| split | seeds run (of 5) | round 100, per seed | mean ± sd | 95 % t-interval for the mean | "
             "authors' 0.8935 in the interval |", "|---|---|---|---|---|---|"]
    for split in ("dirichlet", "authors"):
        chosen = [(seed, run) for (kind, seed), run in zip(AUTHORS_SETTINGS, runs, strict=True) if kind == split]
        values = [_history(run)[100] for _, run in chosen]
        mean, sd = mean_sd(values)
        low, high = t_interval(values)
        lines.append(f"| {SPLIT_NAMES[split]} | {len(values)} ({', '.join(str(seed) for seed, _ in chosen)}) | "
                     + ", ".join(f"{value:.4f}" for value in values)
                     + f" | {mean:.4f} ± {sd:.4f} | [{low:.4f}, {high:.4f}] | "
                     + ("yes" if low <= authors <= high else "no") + " |")
    lines += ["", f"The authors' round 100: {authors:.4f}, one run (their log). t-interval: mean ± "
              "t₀.₉₇₅,ₙ₋₁ · sd / √n; with n = 2 seeds t₀.₉₇₅,₁ = 12.71, so the intervals are wide."]
    return "\n".join(lines)


def vote_quality_markdown(document: dict[str, Any], *, trained: bool) -> str:
    """``bench/privatekt_vote_quality.py``'s records: per seed and split, how often the round's aggregate is right."""
    head = ["seed, split", "clients' local accuracy (mean; 10th percentile)", "plurality right",
            "noisy aggregate right", *(["on the least sure tenth"] if trained else []), "aggregate right, worst class",
            *([] if trained else ["round's clients holding ≥ 10 % of a class (min–max over classes)"])]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for record in document["records"]:
        split = "privfed's (`dirichlet_partition`)" if record["split"] == "dirichlet" else \
            "authors' (`label_mixture_partition`)"
        per_class = record["per_class_noisy_aggregate_right"]
        worst = int(np.argmin(per_class))
        holders = record["clients_holding_10pct_of_class"]
        cells = [f"{record['seed']}, {split}",
                 f"{record['local_accuracy']['mean']:.3f}; "
                 f"{np.percentile(record['local_accuracy']['per_client'], 10):.3f}",
                 f"{record['plurality_right']:.3f}", f"{record['noisy_aggregate_right']:.3f}",
                 *([f"{record['unsure_tenth']['noisy_aggregate_right']:.3f}"] if trained else []),
                 f"{per_class[worst]:.2f} (class {worst})",
                 *([] if trained else [f"{min(holders)}–{max(holders)}"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


table("privatekt-vote-quality-start", raw=["bench/results/privatekt_vote_quality_start.json"])(
    lambda documents: vote_quality_markdown(documents[0], trained=False))
table("privatekt-vote-quality-round100", raw=["bench/results/privatekt_vote_quality_round100.json"])(
    lambda documents: vote_quality_markdown(documents[0], trained=True))

EPSILON_LABELS = {67: "67 (busiest client of the 100-round Adam run; clients joined 37–67 rounds)",
                  50: "50 of 100 (the expected share)", 100: "100 of 100", 250: "250 of 500",
                  500: "500 of 500 (the authors' 95.10 % run, a client in every round)"}


@table("privatekt-client-epsilon", raw=["bench/results/privatekt_client_epsilons.json"])
def client_epsilon(documents: list[Any]) -> str:
    """A client's composed ε after the rounds it joined (randomized response, ε = 5 per report of K = 2 labels)."""
    from privfed.accounting.report import round_up

    lines = ["| rounds a client joined | basic ε | tight ε |", "| --- | --- | --- |"]
    for row in documents[0]["rows"]:
        tight = round_up(row["tight"])  # a string: the value rounded up to 4 significant digits
        tight = f"{int(tight):,}" if tight.isdigit() else tight
        lines.append(f"| {EPSILON_LABELS.get(row['reports'], row['reports'])} | {row['basic']:,.0f} | {tight} |")
    return "\n".join(lines)


SPEED = {"FedKT's small CNN": "bench/results/privatekt_round_speed_small_cnn_2cores.json",
         "the authors' CNN": "bench/results/privatekt_round_speed_authors_cnn_2cores.json",
         "MLP 784-100-100-10": "bench/results/privatekt_round_speed_mlp_2cores.json"}


@table("privatekt-round-speed", raw=list(SPEED.values()))
def round_speed(documents: list[Any]) -> str:
    """Seconds per repeat in each mode; each mode's best against the first mode's best (one client after another)."""
    modes = list(documents[0]["modes"])
    titles = {"sequential": "one after another, 2 threads", "sequential-2-processes":
              "two processes (`n_jobs=2`), 1 thread each", "batched": "batched, 2 threads"}
    lines = ["| network (40 clients) | " + " | ".join(titles[mode] for mode in modes) + " |",
             "|---" * (len(modes) + 1) + "|"]
    for network, document in zip(SPEED, documents, strict=True):
        for key, part in (("clients_step_seconds", "clients' step"), ("whole_round_seconds", "whole round")):
            seconds = document[key]
            base = min(seconds[modes[0]])
            cells = [", ".join(f"{value:.1f}" for value in seconds[mode]) + " s"
                     + ("" if mode == modes[0] else f" (×{base / min(seconds[mode]):.2f})") for mode in modes]
            lines.append(f"| {network}, {part} | " + " | ".join(cells) + " |")
    return "\n".join(lines)

BATCHED = ["bench/results/batched_training_speed_2threads.json", "bench/results/batched_training_selective_fd.json",
           "bench/results/batched_training_selective_fd_2threads.json"]


@table("privatekt-batched-training-speed", raw=BATCHED)
def batched_training_speed(documents: list[Any]) -> str:
    """``bench/batched_training.py``'s micro-benchmark: copies trained one after another or batched, best of repeats."""
    lines = ["| network | copies × examples (1 epoch, batch 32) | torch threads | one after another, best | "
             "batched, best | speed-up | largest parameter difference |", "|---|---|---|---|---|---|---|"]
    for document in documents:
        for row in document["rows"]:
            sequential, batched = min(row["seconds"]["sequential"]), min(row["seconds"]["batched"])
            lines.append(f"| {row['network']} | {row['copies']} × {row['examples']} | {document['threads']} | "
                         f"{sequential:.3f} s | {batched:.3f} s | ×{sequential / batched:.2f} | "
                         f"{row['max_parameter_difference']:.1e} |")
    return "\n".join(lines)
