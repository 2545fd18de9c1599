"""docs/results.md, "Selective-FD reproduction (MNIST, Fashion-MNIST)": the renderers of bench/selective_fd.py's
raw results (the script prints the same tables after a run) and the tables and figure registered from them."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from privfed.accounting.report import round_up

from bench.tables import ROOT, figure, table
from bench.tables._stats import mean_sd, t_interval

FOURTEEN_ROUNDS = "docs/results-selective-fd.json"
HUNDRED_ROUNDS = ["docs/results-selective-fd-100-rounds.json", "docs/results-selective-fd-100-rounds-weak-iid.json"]
SEED_1 = [f"docs/results-selective-fd-100-rounds{part}-seed1-{dataset}.json"
          for part in ("", "-weak-iid") for dataset in ("mnist", "fashion_mnist")]

def _committed(paths) -> list[str]:
    """The raw-result files among ``paths`` that are in the repository, in order (runs still to come are left out)."""
    return [path for path in paths if (ROOT / path).is_file()]


#: the seeds of issue 44's later sessions per data set, one file per seed and data set
LATER_SEEDS = (("mnist", (3, 4)), ("fashion_mnist", (2, 3, 4)))


def _later_seeds(kind: str) -> list[str]:
    """The files of one kind of 100-round run (``weak_iid``, ``rr``) for :data:`LATER_SEEDS`."""
    return _committed(f"bench/results/selective_fd_100_rounds_{kind}_seed{seed}_{dataset}.json"
                      for dataset, seeds in LATER_SEEDS for seed in seeds)


# strong non-IID, seeds 2-4 on the code of issue 36 (bench/selective_fd.py --seed S --json ...): soft labels, then
# the hard-label runs of issue 44 (a file of their own per seed)
NEW_SEEDS = _committed(f"bench/results/selective_fd_100_rounds_strong{labels}_seed{seed}.json"
                       for labels in ("", "_hard") for seed in (2, 3, 4))
# issue 44, second session: independent learning in strong non-IID data and the weak non-IID / IID runs (every
# method but the hard-label and RR ones), seeds 2-4, one file per seed (and data set for weak/IID) as each finished
MORE_SEEDS = [*(f"bench/results/selective_fd_100_rounds_strong_independent_seed{seed}.json" for seed in (2, 3, 4)),
              "bench/results/selective_fd_100_rounds_weak_iid_seed2_mnist.json"]
# issue 44, later sessions: weak non-IID / IID on MNIST seeds 3-4 and Fashion-MNIST seeds 2-4
WEAK_IID_SEEDS = _later_seeds("weak_iid")
# issue 44, second session: MNIST seed 2 on today's code (its ε is the ledger's: ∞, see docs/results.md); later
# sessions: MNIST seeds 3-4, Fashion-MNIST seeds 2-4
RR_SEED_2 = "bench/results/selective_fd_100_rounds_rr_seed2_mnist.json"
RR_MORE_SEEDS = _later_seeds("rr")
RR = ["docs/results-selective-fd-100-rounds-rr.json", "docs/results-selective-fd-100-rounds-rr-seed1.json"]
# the selector ablation (strong non-IID): seed 0 is in HUNDRED_ROUNDS[0], seed 1 in its own files, seeds 2-4 of
# issue 44's later sessions one file per seed and data set
ABLATION = [*(f"docs/results-selective-fd-100-rounds-ablation-seed1-{dataset}.json"
              for dataset in ("mnist", "fashion_mnist")),
            *_committed(f"bench/results/selective_fd_100_rounds_ablation_seed{seed}_{dataset}.json"
                        for seed in (2, 3, 4) for dataset in ("mnist", "fashion_mnist"))]
# the paper's Fig. 6: Selective-FD soft in strong non-IID data, τ_client swept with τ_server = 2 (no server-side
# selection) and τ_server swept with τ_client = 0.25; seed 0, one run (and file) per point
THRESHOLD_GRID = [*((tau_client, 2.0) for tau_client in (0.05, 0.25, 0.5, 0.75, 0.95)),
                  *((0.25, tau_server) for tau_server in (0.5, 1.0, 1.5))]
THRESHOLDS = _committed(f"bench/results/selective_fd_thresholds_{dataset}_seed0_tc{tau_client:g}_ts{tau_server:g}.json"
                        for dataset in ("mnist", "fashion_mnist") for tau_client, tau_server in THRESHOLD_GRID)

def accuracy_markdown(results: list[dict]) -> str:
    """Every run: final mean client accuracy (client spread), ε, shared pairs, kept examples, seconds per round."""
    lines = [("| data set | non-IID | method | final mean client accuracy (min–max) | ε (δ = 1e-5, party level) "
              "| shared pairs | kept / round | s / round |"), "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in results:
        epsilon = "no guarantee" if row["epsilon"] is None else round_up(row["epsilon"])
        if row["method"] == "Independent":
            epsilon = "nothing shared"
        shared = f"{row['shared_fraction']:.3f}" if "shared_fraction" in row else "–"
        kept = f"{row['kept_per_round']:.0f}" if "kept_per_round" in row else "–"
        lines.append(f"| {row['dataset']} | {row['setting']} | {row['method']} | {100 * row['accuracy_mean']:.2f} % "
                     f"({100 * row['accuracy_min']:.1f}–{100 * row['accuracy_max']:.1f}) | {epsilon} | {shared} | "
                     f"{kept} | {row['seconds_per_round']:.1f} |")
    return "\n".join(lines)


def selector_markdown(results: list[dict]) -> str:
    """The client-side selector's AUROC for right/wrong local predictions (the rows that carry it)."""
    lines = [("| data set | non-IID | selector AUROC, mean (min–max) over clients | local accuracy on shared / "
              "withheld proxy examples | share of proxy examples shared |"), "| --- | --- | --- | --- | --- |"]
    for row in results:
        if "selector_auroc" in row:
            diagnostics = row["selector_auroc"]
            auroc = np.asarray(diagnostics["auroc"])
            lines.append(
                f"| {row['dataset']} | {row['setting']} | {np.nanmean(auroc):.3f} ({np.nanmin(auroc):.3f}–"
                f"{np.nanmax(auroc):.3f}) | {np.nanmean(diagnostics['local_accuracy_on_shared']):.3f} / "
                f"{np.nanmean(diagnostics['local_accuracy_on_withheld']):.3f} | "
                f"{np.mean(diagnostics['shared_fraction']):.3f} |"
            )
    return "\n".join(lines)


def markdown(results: list[dict]) -> str:
    """The results as markdown tables: accuracies, then the selector diagnostics."""
    return accuracy_markdown(results) + "\n\n" + selector_markdown(results)


def _accuracy(results: list[dict], dataset: str, setting: str, method: str, at_round: int | None = None):
    """The final mean client accuracy (or the curve's at ``at_round``) of a run, None where it was not run."""
    for row in results:
        if (row["dataset"], row["setting"], row["method"]) == (dataset, setting, method):
            if at_round is None:
                return row["accuracy_mean"]
            return dict((r, a) for r, a in row["curve"]).get(at_round)
    return None


def summary_markdown(results: list[dict], early_round: int = 20) -> str:
    """Two pivots: Selective-FD against FedMD and independent learning (final accuracy, the gain, and the
    accuracy at ``early_round``), and the selector ablation (both, client-side only, server-side only, none)."""
    def cell(value):
        return "–" if value is None else f"{100 * value:.2f}"

    def gain(a, b):
        return "–" if a is None or b is None else f"{100 * (a - b):+.2f}"

    lines = [f"| data set | non-IID | labels | Selective-FD | FedMD | gain | Selective-FD at round {early_round} "
             f"| FedMD at round {early_round} | independent |", "|---|---|---|---|---|---|---|---|---|"]
    panels = list(dict.fromkeys((r["dataset"], r["setting"]) for r in results))
    for dataset, setting in panels:
        for labels in ("soft", "hard"):
            ours = _accuracy(results, dataset, setting, f"Selective-FD {labels}")
            fedmd = _accuracy(results, dataset, setting, f"FedMD {labels}")
            if ours is None and fedmd is None:
                continue
            lines.append(
                f"| {dataset} | {setting} | {labels} | {cell(ours)} | {cell(fedmd)} | {gain(ours, fedmd)} | "
                f"{cell(_accuracy(results, dataset, setting, f'Selective-FD {labels}', early_round))} | "
                f"{cell(_accuracy(results, dataset, setting, f'FedMD {labels}', early_round))} | "
                f"{cell(_accuracy(results, dataset, setting, 'Independent'))} |")
    lines += ["", "| data set | non-IID | labels | both selectors (Selective-FD) | client-side only (τ_server = 2) "
              "| server-side only (τ_client = None) | none (FedMD) |", "|---|---|---|---|---|---|---|"]
    for dataset, setting in panels:
        for labels in ("soft", "hard"):
            ablation = [_accuracy(results, dataset, setting, f"Selective-FD {labels}, {side} selector only")
                        for side in ("client", "server")]
            if all(value is None for value in ablation):
                continue
            lines.append(f"| {dataset} | {setting} | {labels} | "
                         f"{cell(_accuracy(results, dataset, setting, f'Selective-FD {labels}'))} | "
                         f"{cell(ablation[0])} | {cell(ablation[1])} | "
                         f"{cell(_accuracy(results, dataset, setting, f'FedMD {labels}'))} |")
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    """Learning curves (mean client accuracy on the curve's test rows), one panel per data set and split."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys((r["dataset"], r["setting"]) for r in results))
    methods = list(dict.fromkeys(r["method"] for r in results))
    colours = {method: f"C{index}" for index, method in enumerate(methods)}
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    figure_, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.6 * rows + 0.6), squeeze=False)
    for axis in axes.flat[len(panels):]:
        axis.set_visible(False)
    for axis, (dataset, setting) in zip(axes.flat, panels):
        for row in results:
            if (row["dataset"], row["setting"]) == (dataset, setting) and row["curve"]:
                rounds, accuracy = zip(*row["curve"])
                axis.plot(rounds, accuracy, marker=".", color=colours[row["method"]], label=row["method"])
        axis.set_title(f"{dataset}, {'IID' if setting == 'iid' else f'{setting} non-IID'}")
        axis.set_xlabel("round")
        axis.set_ylabel("mean client test accuracy")
        axis.set_ylim(0, 1)
        axis.grid(alpha=0.3)
    handles = [plt.Line2D([], [], color=colours[method], marker=".") for method in methods]
    figure_.legend(handles, methods, loc="lower center", ncol=min(len(methods), 3), fontsize=8)
    figure_.tight_layout(rect=(0, 0.6 / (3.6 * rows + 0.6) + 0.06, 1, 1))
    figure_.savefig(path, dpi=110)
    plt.close(figure_)


def _rows(documents: list[Any]) -> list[dict]:
    return [row for document in documents for row in document["results"]]


def _by_seed(documents: list[Any], rounds: int) -> dict[tuple[str, str, str], dict[int, float]]:
    """(data set, split, method) -> {seed: final mean client accuracy} over the runs of ``rounds`` rounds."""
    accuracies: dict[tuple[str, str, str], dict[int, float]] = {}
    for document in documents:
        seed = int(document["settings"]["seed"])
        for row in document["results"]:
            if row["rounds"] == rounds:
                key = (row["dataset"], row["setting"], row["method"])
                accuracies.setdefault(key, {})[seed] = row["accuracy_mean"]
    return accuracies


def _summary(values: list[float]) -> str:
    """``mean ± sd [95 % t-interval]`` of percentages; the single value where there is one seed."""
    values = [100 * value for value in values]
    if len(values) == 1:
        return f"{values[0]:.2f} (one seed)"
    mean, sd = mean_sd(values)
    low, high = t_interval(values)
    return f"{mean:.2f} ± {sd:.2f} [{low:.2f}, {high:.2f}]"


def _seeds(seeds: list[int]) -> str:
    return ", ".join(str(seed) for seed in sorted(seeds))


def seeds_markdown(documents: list[Any]) -> str:
    """Final accuracy at round 100 over seeds: mean ± sd and the 95 % t-interval of Selective-FD, FedMD, the gain
    (per seed, over the seeds that ran both) and independent learning; then every seed's value."""
    accuracies = _by_seed(documents, rounds=100)
    panels = list(dict.fromkeys((dataset, setting) for dataset, setting, _ in accuracies))
    lines = ["| data set | non-IID | labels | seeds | Selective-FD | FedMD | gain (seeds with both) | independent |",
             "|---|---|---|---|---|---|---|---|"]
    for dataset, setting in panels:
        for labels in ("soft", "hard"):
            ours = accuracies.get((dataset, setting, f"Selective-FD {labels}"), {})
            fedmd = accuracies.get((dataset, setting, f"FedMD {labels}"), {})
            if not ours:
                continue
            both = sorted(set(ours) & set(fedmd))
            gains = _summary([ours[seed] - fedmd[seed] for seed in both]) if both else "–"
            independent = accuracies.get((dataset, setting, "Independent"), {})
            baseline = f"{_summary([fedmd[s] for s in sorted(fedmd)])} (seeds {_seeds(list(fedmd))})" if fedmd else "–"
            alone = _summary([independent[s] for s in sorted(independent)]) if independent else "–"
            lines.append(f"| {dataset} | {setting} | {labels} | {_seeds(list(ours))} | "
                         f"{_summary([ours[s] for s in sorted(ours)])} | {baseline} | {gains} | {alone} |")
    seeds = sorted({seed for values in accuracies.values() for seed in values})
    lines += ["", "| data set | non-IID | method | " + " | ".join(f"seed {seed}" for seed in seeds) + " |",
              "|---|---|---|" + "---|" * len(seeds)]
    for dataset, setting in panels:
        for labels in ("soft", "hard"):
            ours = accuracies.get((dataset, setting, f"Selective-FD {labels}"), {})
            fedmd = accuracies.get((dataset, setting, f"FedMD {labels}"), {})
            gain = {seed: ours[seed] - fedmd[seed] for seed in set(ours) & set(fedmd)}
            for method, values, sign in ((f"Selective-FD {labels}", ours, ""), (f"FedMD {labels}", fedmd, ""),
                                         (f"gain, {labels} labels", gain, "+")):
                if values:
                    lines.append(f"| {dataset} | {setting} | {method} | " + " | ".join(
                        f"{100 * values[seed]:{sign}.2f}" if seed in values else "–" for seed in seeds) + " |")
        independent = accuracies.get((dataset, setting, "Independent"), {})
        if independent:
            lines.append(f"| {dataset} | {setting} | Independent | " + " | ".join(
                f"{100 * independent[seed]:.2f}" if seed in independent else "–" for seed in seeds) + " |")
    return "\n".join(lines)


def rr_markdown(documents: list[Any]) -> str:
    """Randomized response at round 100 (strong non-IID, hard labels) per seed, with the 14-round value and the
    noise-free runs of the same seed. ``documents``: the 14-round file, then the RR files, then the noise-free."""
    fourteen, *rest = documents
    rr_documents = [document for document in rest if any("RR" in row["method"] for row in document["results"])]
    plain = _by_seed([document for document in rest if document not in rr_documents], rounds=100)
    early = _by_seed([fourteen], rounds=14)
    by_method: dict[tuple[str, int, str], dict] = {}
    for document in rr_documents:
        seed = int(document["settings"]["seed"])
        for row in document["results"]:
            by_method[(row["dataset"], seed, row["method"])] = row
    lines = ["| data set | seed | no noise (round 100) | RR ε/label = 4: round 14 → 100 "
             "| RR ε/label = 1: round 14 → 100 | FedMD hard (round 100) | ε of the run, ε/label = 4 / 1 |",
             "|---|---|---|---|---|---|---|"]
    order = list(dict.fromkeys(dataset for dataset, _, _ in by_method))
    for dataset, seed in sorted(dict.fromkeys((dataset, seed) for dataset, seed, _ in by_method),
                                key=lambda key: (order.index(key[0]), key[1])):
        cells, epsilons = [], []
        for per_label in (4, 1):
            method = f"Selective-FD hard, RR ε/label={per_label}"
            row = by_method[(dataset, seed, method)]
            start = early.get((dataset, "strong", method), {}).get(seed)
            cells.append(("" if start is None else f"{100 * start:.2f} → ")
                         + f"**{100 * row['accuracy_mean']:.2f}** ({100 * row['accuracy_min']:.1f}–"
                         f"{100 * row['accuracy_max']:.1f})")
            epsilons.append(f"{math.ceil(row['epsilon']):,}" if math.isfinite(row["epsilon"]) else "∞")
        lines.append(f"| {dataset} | {seed} | {100 * plain[(dataset, 'strong', 'Selective-FD hard')][seed]:.2f} | "
                     f"{cells[0]} | {cells[1]} | {100 * plain[(dataset, 'strong', 'FedMD hard')][seed]:.2f} | "
                     f"{' / '.join(epsilons)} |")
    lines += ["", "| data set | seeds | no noise | RR ε/label = 4 | RR ε/label = 1 | ε/label = 4 − no noise, per seed "
              "| ε/label = 1 − no noise, per seed |", "|---|---|---|---|---|---|---|"]
    for dataset in order:
        seeds = sorted(seed for name, seed, method in by_method if name == dataset and method.endswith("=4"))
        plain_runs = [plain[(dataset, "strong", "Selective-FD hard")][seed] for seed in seeds]
        noisy = {per_label: [by_method[(dataset, seed, f"Selective-FD hard, RR ε/label={per_label}")]["accuracy_mean"]
                             for seed in seeds] for per_label in (4, 1)}
        lines.append(f"| {dataset} | {_seeds(seeds)} | {_summary(plain_runs)} | {_summary(noisy[4])} | "
                     f"{_summary(noisy[1])} | {_summary([a - b for a, b in zip(noisy[4], plain_runs)])} | "
                     f"{_summary([a - b for a, b in zip(noisy[1], plain_runs)])} |")
    return "\n".join(lines)


def ablation_seeds_markdown(documents: list[Any]) -> str:
    """The selector ablation at round 100 over seeds (strong non-IID): both selectors (Selective-FD), the client
    side only, the server side only and none (FedMD), each mean ± sd [95 % t-interval] with its seeds."""
    accuracies = _by_seed(documents, rounds=100)
    lines = ["| data set | labels | both (Selective-FD) | client side only | server side only | none (FedMD) |",
             "|---|---|---|---|---|---|"]
    for dataset in dict.fromkeys(dataset for dataset, _, _ in accuracies):
        for labels in ("soft", "hard"):
            cells = []
            for method in (f"Selective-FD {labels}", f"Selective-FD {labels}, client selector only",
                           f"Selective-FD {labels}, server selector only", f"FedMD {labels}"):
                values = accuracies.get((dataset, "strong", method), {})
                cells.append(f"{_summary([values[s] for s in sorted(values)])} (seeds {_seeds(list(values))})"
                             if values else "–")
            lines.append(f"| {dataset} | {labels} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def thresholds_markdown(documents: list[Any]) -> str:
    """The threshold sweep (the paper's Fig. 6): per point, the final mean client accuracy (client min–max) and
    p_proxy, the share of each round's proxy batch the server kept for distillation, averaged over the rounds."""
    runs = {}
    for document in documents:
        settings = document["settings"]
        for row in document["results"]:
            runs[(row["dataset"], settings["tau_client"], settings["tau_server"])] = (row, settings)
    lines = ["| data set | swept | τ_client | τ_server | final mean client accuracy % (min–max) | p_proxy % "
             "| shared (client, example) pairs | seed | s / round |", "|---|---|---|---|---|---|---|---|---|"]
    for dataset in dict.fromkeys(dataset for dataset, _, _ in runs):
        for tau_client, tau_server in THRESHOLD_GRID:
            swept = "τ_server (τ_client = 0.25)" if tau_server < 2 else "τ_client (τ_server = 2)"
            if (dataset, tau_client, tau_server) not in runs:
                lines.append(f"| {dataset} | {swept} | {tau_client:g} | {tau_server:g} | not run | – | – | – | – |")
                continue
            row, settings = runs[(dataset, tau_client, tau_server)]
            lines.append(f"| {dataset} | {swept} | {tau_client:g} | {tau_server:g} | {100 * row['accuracy_mean']:.2f} "
                         f"({100 * row['accuracy_min']:.1f}–{100 * row['accuracy_max']:.1f}) | "
                         f"{100 * row['kept_per_round'] / settings['proxy_batch']:.1f} | "
                         f"{row['shared_fraction']:.3f} | {settings['seed']} | {row['seconds_per_round']:.1f} |")
    return "\n".join(lines)


def dp_selectors_markdown(rows: list[dict]) -> str:
    """One table: each method's mean over the seeds, with each seed's accuracy beside it."""
    lines = ["| client-side selector | mean client accuracy, mean of seeds (per seed) | example-level ε (δ = 1e-5) "
             "| selector AUROC | shared pairs | kept / round |", "| --- | --- | --- | --- | --- | --- |"]
    for method in dict.fromkeys(row["method"] for row in rows):
        runs = [row for row in rows if row["method"] == method]
        accuracy = [row["accuracy_mean"] for row in runs]
        per_seed = ", ".join(f"seed {row['seed']}: {100 * row['accuracy_mean']:.1f} %" for row in runs)
        epsilons = [row["epsilon_example"] for row in runs]
        if any(row["uncovered"] for row in runs):
            epsilon = "no guarantee (releases uncovered)"
        else:
            epsilon = " / ".join(str(round_up(value, 3)) for value in epsilons)
        auroc = (f"{np.mean([np.mean(row['selector_auroc']) for row in runs]):.3f}"
                 if all("selector_auroc" in row for row in runs) else "–")
        lines.append(f"| {method} | {100 * np.mean(accuracy):.1f} % ({per_seed}) | {epsilon} | {auroc} | "
                     f"{np.mean([row['shared_fraction'] for row in runs]):.3f} | "
                     f"{np.mean([row['kept_per_round'] for row in runs]):.0f} |")
    return "\n".join(lines)


table("selective-fd-14-rounds", raw=[FOURTEEN_ROUNDS])(lambda documents: accuracy_markdown(_rows(documents)))
table("selective-fd-14-rounds-selector", raw=[FOURTEEN_ROUNDS])(
    lambda documents: selector_markdown(_rows(documents)))
table("selective-fd-100-rounds", raw=HUNDRED_ROUNDS)(
    lambda documents: summary_markdown(_rows(documents)) + "\n\n" + markdown(_rows(documents)))
figure("selective-fd-100-rounds-curves", raw=HUNDRED_ROUNDS, image="docs/selective-fd-100-rounds-curves.png",
       alt="Selective-FD, 100 rounds")(lambda documents, path: plot(_rows(documents), path))
table("selective-fd-100-rounds-seeds", raw=[*HUNDRED_ROUNDS, *SEED_1, *NEW_SEEDS, *MORE_SEEDS, *WEAK_IID_SEEDS])(
    seeds_markdown)
HARD_SEEDS = [f"bench/results/selective_fd_100_rounds_strong_hard_seed{seed}.json" for seed in (2, 3, 4)]
table("selective-fd-100-rounds-rr", raw=[FOURTEEN_ROUNDS, *RR, RR_SEED_2, *RR_MORE_SEEDS, HUNDRED_ROUNDS[0],
                                        *SEED_1[:2], *HARD_SEEDS])(rr_markdown)
table("selective-fd-ablation-seeds", raw=[HUNDRED_ROUNDS[0], *SEED_1[:2], *ABLATION, *NEW_SEEDS])(
    ablation_seeds_markdown)
table("selective-fd-thresholds", raw=THRESHOLDS)(thresholds_markdown)
table("selective-fd-dp-selectors", raw=["bench/results/selective_fd_dp_selectors.json"])(
    lambda documents: dp_selectors_markdown(documents[0]["rows"]))
