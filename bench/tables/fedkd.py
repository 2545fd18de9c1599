"""docs/results.md, "FedKD on MNIST (Gong et al., AAAI 2022)": the α = 1 and α = 0.1 grids and the S sweep.

Raw results: ``bench/fedkd.py --json`` files (one per seed; ``rows`` of one (α, public set, S, γ, quantizer,
server seed) point each).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bench.tables import table

S_SWEEP = ["bench/results/fedkd_s_sweep_seed0.json", "bench/results/fedkd_s_sweep_seed1.json",
           "bench/results/fedkd_s_sweep_seed2.json"]
GRID = "bench/results/fedkd_grid_seed0.json"


def grid_markdown(document: dict[str, Any], *, alpha: float) -> str:
    """One α of ``bench/fedkd.py``'s default grid (one seed): per (S, γ), both public sets side by side."""
    rows = [row for row in document["rows"] if row["alpha"] == alpha]
    points = sorted({(row["S"], row["gamma"]) for row in rows},
                    key=lambda point: (point[0] is not None, point[1] != 1.0, point[0] or 0, point[1] or 0))
    lines = ["| setting | test acc., in-domain public | ensemble-label acc. (in-domain) | test acc., cross-domain "
             "public | ε, party level, tight | ε, pure composition | bytes sent per party |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for scale, gamma in points:
        at = {row["public"].split(" ")[0]: row for row in rows if (row["S"], row["gamma"]) == (scale, gamma)}
        inside, cross = at.get("in-domain"), at.get("cross-domain")
        first = inside or cross
        if gamma is None:
            setting, tight, pure = "noiseless, unquantized, unclipped", "no guarantee", "—"
        else:
            note = {0.1: " (most noise)", 10.0: " (least noise)"}.get(gamma, "") if scale == 200 else ""
            setting = f"S = {scale}, γ = {gamma:g}{note}"
            tight = f"{math.ceil(max(r['epsilon_party_tight'] for r in at.values())):,}"
            pure = f"{math.ceil(max(r['epsilon_party_pure'] for r in at.values())):,}"
        cells = [setting,
                 f"{inside['test_accuracy']:.4f}" if inside else "not run",
                 f"{inside['public_label_accuracy']:.4f}" if inside else "not run",
                 f"{cross['test_accuracy']:.4f}" if cross else "not run",
                 tight, pure, f"{first['bytes_per_party']:,}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def s_sweep_markdown(documents: list[dict[str, Any]]) -> str:
    """The S sweep: per α, privfed's quantizer beside the paper's, per S and public set (mean over the files)."""
    rows = [row for document in documents for row in document["rows"]]
    seeds = sorted({document["settings"]["seed"] for document in documents})
    lines = []
    for alpha in sorted({row["alpha"] for row in rows}, reverse=True):
        at = [row for row in rows if row["alpha"] == alpha]
        lines += [f"**α = {alpha:g} (seeds {', '.join(map(str, seeds))}; test accuracy, mean over seeds)**", "",
                  "| S | public | privfed quantizer: step Z/S | test acc. | ensemble-label acc. | paper quantizer: "
                  "step 2·z_max/S | test acc. | ensemble-label acc. | bytes/party (privfed / paper) | "
                  "ε party level, tight (both) |", "|---|---|---|---|---|---|---|---|---|---|"]
        for name in sorted({row["public"] for row in at}, reverse=True):
            base = [row for row in at if row["public"] == name and row["S"] is None]
            if base:
                labels = [r["public_label_accuracy"] for r in base if r["public_label_accuracy"] is not None]
                accuracy = np.mean([r["test_accuracy"] for r in base])
                lines.append(f"| none (noiseless, unquantized) | {name} | – | {accuracy:.4f} | "
                             f"{f'{np.mean(labels):.4f}' if labels else '–'} | – | – | – | "
                             f"{base[0]['bytes_per_party']:,} | no guarantee |")
            for scale in sorted({row["S"] for row in at if row["S"] is not None}):
                cells = []
                for quantizer in ("public", "paper"):
                    runs = [r for r in at if r["public"] == name and r["S"] == scale and r["quantizer"] == quantizer]
                    if not runs:
                        cells.append(("–", "–", "–", None, None))
                        continue
                    step = (runs[0]["clip"] / scale if quantizer == "public"
                            else 2 * np.mean([r["z_max"] for r in runs]) / scale)
                    labels = [r["public_label_accuracy"] for r in runs if r["public_label_accuracy"] is not None]
                    cells.append((f"{step:.3g}", f"{np.mean([r['test_accuracy'] for r in runs]):.4f}",
                                  f"{np.mean(labels):.4f}" if labels else "–", runs[0]["bytes_per_party"],
                                  max(r["epsilon_party_tight"] for r in runs)))
                eps = max(c[4] for c in cells if c[4] is not None)
                lines.append(f"| {scale} | {name} | " + " | ".join(" | ".join(c[:3]) for c in cells)
                             + " | " + " / ".join(f"{c[3]:,}" if c[3] else "–" for c in cells)
                             + f" | {math.ceil(eps):,} |")
        lines.append("")
    return "\n".join(lines)


table("fedkd-s-sweep", raw=S_SWEEP)(s_sweep_markdown)
table("fedkd-grid-alpha-1", raw=[GRID])(lambda documents: grid_markdown(documents[0], alpha=1.0))
table("fedkd-grid-alpha-0.1", raw=[GRID])(lambda documents: grid_markdown(documents[0], alpha=0.1))
