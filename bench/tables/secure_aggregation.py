"""docs/results.md, "Secure aggregation with distributed Skellam noise (issue 31)": the tables of
``bench/secure_aggregation.py``'s raw results."""

from __future__ import annotations

import math

import numpy as np

from bench.tables import table
from bench.tables._stats import mean_sd


def _epsilon(value: float) -> str:
    return "∞" if math.isinf(value) else f"{math.ceil(value * 100) / 100:.2f}"


def markdown(document: dict) -> str:
    """The results' tables: accuracy and ε per data set and side; the Flower timing and bytes."""
    cal = document["calibration"]
    lines = [f"Target: party-level data-independent ε ≤ {cal['skellam_epsilon']:.2f} at δ = {document['delta']:g} "
             f"(Skellam σ = {cal['skellam_sigma']:.2f}, Laplace γ = {cal['laplace_gamma']:.4f}, Gaussian σ = "
             f"{cal['gaussian_sigma']:.2f}); s = {document['s']}, t = {document['t']}.", "",
             "| data set | aggregator | accuracy (mean ± sd over seeds, n − 1) | public ε reported (per seed) | "
             "coordinator ε | bytes per party (in process) |", "|---|---|---|---|---|---|"]
    for name, sides in document["datasets"].items():
        for side, r in sides.items():
            epsilons = ", ".join(_epsilon(e) for e in r["public_epsilon"])
            coordinator = ", ".join(sorted({_epsilon(e) for e in r["coordinator_epsilon"]}))
            mean, sd = mean_sd(r["accuracy"])
            lines.append(f"| {name} | {side} | {mean:.4f} ± {sd:.4f} | {epsilons} | "
                         f"{coordinator} | {int(np.median(r['bytes_per_party']))} |")
    f = document.get("flower")
    if f:
        lines += ["", f"Flower simulation ({f['dataset']}, {f['parties']} SuperNodes, {f['train_rows']} rows), "
                  "alternating runs:", "",
                  "| side | wall seconds per run | same predictions as fit | bytes per party on the wire |",
                  "|---|---|---|---|",
                  "| without SecAgg+ (central Laplace) | "
                  f"{', '.join(f'{x:.1f}' for x in f['without_secaggplus_seconds'])} "
                  f"| {all(f['central-laplace_same_predictions_as_fit'])} | "
                  f"{int(np.median(f['central-laplace_wire_bytes_per_party']))} |",
                  "| with SecAgg+ (distributed Skellam) | "
                  f"{', '.join(f'{x:.1f}' for x in f['with_secaggplus_seconds'])} "
                  f"| {all(f['distributed-skellam_same_predictions_as_fit'])} | "
                  f"{int(np.median(f['distributed-skellam_wire_bytes_per_party']))} |",
                  "", f"Median ratio with / without: ×{f['ratio_with_over_without']:.2f} (Ray simulation)"]
        if "in_process_grid_ratio_with_over_without" in f:
            seconds = {side: ", ".join(f"{x:.2f}" for x in f[f"{side}_in_process_grid_seconds"])
                       for side in ("central-laplace", "distributed-skellam")}
            lines[-1] += (f"; the same apps over an in-process grid (no Ray): without {seconds['central-laplace']} s, "
                          f"with {seconds['distributed-skellam']} s, "
                          f"×{f['in_process_grid_ratio_with_over_without']:.2f}.")
        else:
            lines[-1] += "."
    return "\n".join(lines)


table("secure-aggregation", raw=["bench/results/secure_aggregation.json"])(lambda documents: markdown(documents[0]))
