"""docs/results.md, "cod-rna L1/L2: the official code beside privfed" (bench/fedkt_official_side_by_side.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from bench.tables import table
from bench.tables._stats import mean_sd, t_interval, welch_difference

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the bench scripts import each other by name

import fedkt as bench_fedkt  # noqa: E402  (bench/fedkt.py)

CODRNA = ["bench/results/fedkt_official_side_by_side_codrna.json"]
SIDES = ("official", "privfed")


def _summary(values: list[float], digits: int = 2) -> str:
    """mean ± sd [95 % interval] (n), or the one value."""
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{digits}f} (1)"
    mean, sd = mean_sd(values)
    low, high = t_interval(values)
    return f"{mean:.{digits}f} ± {sd:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}] ({len(values)})"


def _runs(records: list[dict], key: str, side: str) -> list[dict]:
    return [r for r in records if r["setting"] == key and r["side"] == side]


def _settings(records: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["setting"] for r in records))


def _mean(runs: list[dict], field: str, digits: int = 1) -> str:
    values = [r[field] for r in runs if field in r]
    return f"{np.mean(values):.{digits}f}" if values else "–"


@table("fedkt-official-side-by-side-codrna", raw=CODRNA)
def side_by_side_codrna(documents: list[Any]) -> str:
    """Final accuracy per seed and code, CPU seconds, and privfed − official (Welch) beside the paper's value."""
    records = documents[0]["records"]
    lines = ["| setting | code | runs | per seed (seed: accuracy %) | accuracy % mean ± sd [95 % interval] (runs) "
             "| CPU s per process (mean) | paper % (one number, no spread) |", "|---|---|---|---|---|---|---|"]
    differences = []
    for key in _settings(records):
        trained = {}
        for side in SIDES:
            runs = _runs(records, key, side)
            ok = [r for r in runs if "failed" not in r]
            trained[side] = [r["accuracy"] for r in ok]
            failed = len(runs) - len(ok)
            per_seed = ", ".join(f"{r['seed']}" + (f"/{r['model_seed']}" if r["model_seed"] != 0 else "") + ": "
                                 + ("failed" if "failed" in r else f"{r['accuracy']:.2f}") for r in runs)
            lines.append(f"| {bench_fedkt.LABELS[key]} | {side} | {len(runs)}"
                         + (f" ({failed} failed)" if failed else "")
                         + f" | {per_seed} | {_summary(trained[side])} | {_mean(runs, 'cpu_seconds')} | "
                         f"{bench_fedkt.SETTINGS[key].paper_accuracy[0]} |")
        if len(trained["official"]) > 1 and len(trained["privfed"]) > 1:
            _, official_sd = mean_sd(trained["official"])
            difference, (low, high), p = welch_difference(trained["privfed"], float(np.mean(trained["official"])),
                                                          official_sd, len(trained["official"]))
            differences.append(f"{bench_fedkt.LABELS[key]}: privfed − official {difference:+.2f}, Welch 95 % "
                               f"interval [{low:+.2f}, {high:+.2f}], p = {p:.2f}")
    note = ("\n\nCPU seconds (user + system) of each run's process, not a speed comparison: the official code's "
            "includes its 50 per-party baseline forests, privfed's the measurements of the next tables.")
    return "\n".join(lines) + ("\n\n" + "; ".join(differences) + "." if differences else "") + note


@table("fedkt-official-codrna-stages", raw=CODRNA)
def stages_codrna(documents: list[Any]) -> str:
    """Where the labels lose accuracy, stage by stage, means over the seeds of each code's runs."""
    records = documents[0]["records"]
    lines = ["| setting | code | runs | parties' teacher votes right % | noiseless vote at the noised stage right % "
             "| its vote margin, mean (share ≤ the noise scale b, %) | labels the noise flips, expected % "
             "| labels after the noise right %: expected (logged by the code) | final accuracy % |",
             "|---|---|---|---|---|---|---|---|---|"]
    for key in _settings(records):
        for side in SIDES:
            ok = [r for r in _runs(records, key, side) if "failed" not in r]
            logged = _mean(ok, "noisy_label_accuracy")
            # under L2 the noised stage is the parties' teacher vote itself
            party = "(the next column)" if key.endswith("-l2") else _mean(ok, "party_label_accuracy")
            lines.append(
                f"| {bench_fedkt.LABELS[key]} | {side} | {len(ok)} | {party} "
                f"| {_mean(ok, 'noiseless_vote_accuracy')} | {_mean(ok, 'margin_mean')} "
                f"({_mean(ok, 'margin_at_most_scale')}) | {_mean(ok, 'expected_flipped_share')} "
                f"| {_mean(ok, 'expected_noisy_label_accuracy')}" + (f" ({logged})" if logged != "–" else "")
                + f" | {_mean(ok, 'accuracy')} |")
    return "\n".join(lines)


REFIT_LR = [*CODRNA, "bench/results/fedkt_official_side_by_side_codrna_refit_lr.json"]
#: the refit variants: record suffix, the xgboost parameters it changes
VARIANTS = {"": "as the code runs it (today's xgboost: base score fitted to the labels)",
            "_base0.5": "xgboost 1.x's fixed `base_score=0.5`",
            "_lr0.05": "learning rate 0.05 (the paper's Table 5) instead of the code's 0.1"}


@table("fedkt-official-codrna-refits", raw=REFIT_LR)
def refits_codrna(documents: list[Any]) -> str:
    """L1: the final model refitted on the server's queries with true, noiseless and simulated noisy labels."""
    records = [r for document in documents for r in document["records"] if "refit" in r]
    columns = [("true labels", "true"), ("the noiseless vote", "noiseless"),
               ("the vote + simulated noise (mean over draws)", "noisy_mean")]
    lines = ["| setting | code | final model | runs | " + " | ".join(name for name, _ in columns)
             + " | simulated noise: sd over draws (mean), range over all draws |",
             "|---|---|---|---|" + "---|" * len(columns) + "---|"]
    for key in _settings(records):
        for side in SIDES:
            for suffix, name in VARIANTS.items():
                # each (seed, model seed 0) once: the first file that refitted this variant
                runs = list({(r["seed"], r["model_seed"]): r for r in reversed(_runs(records, key, side))
                             if r["model_seed"] == 0 and "true" + suffix in r["refit"]}.values())
                if not runs:
                    continue
                cells = [_summary([r["refit"][field + suffix] for r in runs], 1) for _, field in columns]
                spread = (f"{np.mean([r['refit']['noisy_sd' + suffix] for r in runs]):.1f}, "
                          f"{min(r['refit']['noisy_min' + suffix] for r in runs):.1f}–"
                          f"{max(r['refit']['noisy_max' + suffix] for r in runs):.1f}")
                lines.append(f"| {bench_fedkt.LABELS[key]} | {side} | {name} | {len(runs)} | " + " | ".join(cells)
                             + f" | {spread} |")
    draws = sorted({r["refit"]["draws"] for r in records})
    queries = sorted({r["refit"]["queries"] for r in records})
    return "\n".join(lines) + (
        f"\n\nEach cell: the official code's final model (XGBoost, 100 trees of depth 6, learning rate 0.1, gamma "
        f"1, reg_lambda 1, hist, unless the row says otherwise) fitted on the run's {'/'.join(map(str, queries))} "
        "server queries, accuracy on its evaluation rows; mean ± sd [95 % interval] (runs) over seeds 0–4 (model "
        f"seed 0). Simulated noise: {'/'.join(map(str, draws))} seeded draws of Laplace noise of the run's scale on "
        "the noiseless counts, the same draws for both codes. The learning-rate row comes from a second privfed "
        "pass over the same seeds (`fedkt_official_side_by_side_codrna_refit_lr.json`), whose noiseless votes are "
        "the first pass's (checked: the same noiseless-vote and refit accuracies to the digit on every seed); its "
        "own runs, with fresh noise, reached " + ", ".join(f"{r['accuracy']:.2f}" for r in documents[-1]["records"])
        + " (seeds " + ", ".join(str(r["seed"]) for r in documents[-1]["records"]) + ").")


MODEL_SEEDS = [*CODRNA, "bench/results/fedkt_official_side_by_side_codrna_model_seeds.json"]


@table("fedkt-official-codrna-model-seeds", raw=MODEL_SEEDS)
def model_seeds_codrna(documents: list[Any]) -> str:
    """cod-rna L1 on seed 0's rows over model seeds (the official ``--fedkt_seed``, privfed's ``random_state``)."""
    records = [r for document in documents for r in document["records"]
               if r["setting"] == "codrna-l1" and r["seed"] == 0 and "failed" not in r]
    lines = ["| cod-rna L1, seed 0's rows | runs | per model seed (model seed: accuracy %) "
             "| accuracy % mean ± sd [95 % interval] (runs) | labels after the noise right %, per run: expected "
             "(logged by the code) "
             "| paper % (one number, no spread) |", "|---|---|---|---|---|---|"]
    accuracies = {}
    for side in SIDES:
        runs = sorted((r for r in records if r["side"] == side), key=lambda r: r["model_seed"])
        accuracies[side] = [r["accuracy"] for r in runs]
        lines.append(f"| {side} | {len(runs)} | " + ", ".join(f"{r['model_seed']}: {r['accuracy']:.2f}" for r in runs)
                     + f" | {_summary(accuracies[side])} | "
                     + ", ".join(f"{r['expected_noisy_label_accuracy']:.1f}"
                                 + (f" ({r['noisy_label_accuracy']:.1f})" if "noisy_label_accuracy" in r else "")
                                 for r in runs)
                     + f" | {bench_fedkt.SETTINGS['codrna-l1'].paper_accuracy[0]} |")
    if all(len(values) > 1 for values in accuracies.values()):
        _, official_sd = mean_sd(accuracies["official"])
        difference, (low, high), p = welch_difference(accuracies["privfed"], float(np.mean(accuracies["official"])),
                                                      official_sd, len(accuracies["official"]))
        lines.append(f"\nprivfed − official {difference:+.2f}, Welch 95 % interval [{low:+.2f}, {high:+.2f}], "
                     f"p = {p:.2f}. A model seed changes the teachers' row assignment, the models' seeds and (the "
                     "official code's, seeded by `--fedkt_seed`) the noise; privfed's noise is secret and fresh in "
                     "every run.")
    logged = [(r["noisy_label_accuracy"], r["accuracy"]) for document in documents for r in document["records"]
              if r["setting"] == "codrna-l1" and r["side"] == "official" and "noisy_label_accuracy" in r]
    if len(logged) > 2:
        rho = stats.spearmanr(*zip(*logged)).statistic
        lines.append(f"\nEvery official cod-rna L1 run here ({len(logged)}: seeds 0–4, and seed 0 with model seeds "
                     f"1–4), labels after the noise right % (logged) → final accuracy %: "
                     + ", ".join(f"{label:.1f} → {accuracy:.2f}" for label, accuracy in sorted(logged))
                     + f"; Spearman ρ = {rho:.2f}.")
    return "\n".join(lines)
