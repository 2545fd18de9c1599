"""Steinke et al.'s ε lower bound beside the f-DP (Gaussian DP) one-run estimate, on the same guesses (issue 41).

For each canary design, ``runs`` audits of correct code (one seed each, ``empirical_audit(..., design=...)`` on
digits as in ``bench/audit_designs.py``, or a simulated Gaussian mechanism of known μ): Steinke, Nasr and
Jagielski's ε at the audit's δ (``epsilon_lower``, assumes nothing), the f-DP estimate of Mahloujifar, Melis and
Chaudhuri (``gdp_mu_lower``; its ε at the audit's δ, NaN for a pure claim audited at δ = 0), and both recomputed
from the same guesses at δ = 10⁻⁵ so that the two can be compared on every design. The Gaussian-DP ε is a lower
bound only where the mechanism's trade-off curve is Gaussian::

    nice -n 19 python -m bench.fdp_audit --runs 5

Writes ``bench/results/fdp_audit.json`` after each design (a rerun replaces that design's record); the
docs/results.md table is ``python -m bench.tables fdp-audit``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from privfed.accounting.auditing import audit_scores, epsilon_lower_bound
from privfed.accounting.fdp_auditing import gdp_epsilon

from bench import provenance
from bench.audit_designs import AUDITS, DELTA, digits
from privfed.audit.empirical_pipelines import empirical_audit

OUT = Path(__file__).resolve().parents[1] / "bench" / "results" / "fdp_audit.json"
#: The simulated Gaussian mechanism: canary i releases μ·b_i + N(0, 1) (exactly μ-GDP in each coin).
GAUSSIAN_MU, GAUSSIAN_CANARIES, GAUSSIAN_GUESSES = 1.0, 1000, 250
DESIGNS = ("gaussian-mu1", "fedkt-l1-laplace", "privatekt-eps5", "dpsgd-gradient")


def _gaussian_result(seed: int):
    rng = np.random.default_rng(seed)
    included = rng.random(GAUSSIAN_CANARIES) < 0.5
    scores = GAUSSIAN_MU * included + rng.standard_normal(GAUSSIAN_CANARIES)
    return audit_scores(scores, included, claimed_epsilon=gdp_epsilon(GAUSSIAN_MU, delta=DELTA), delta=DELTA,
                        num_guesses=GAUSSIAN_GUESSES, random_state=rng)


def _setting(design: str) -> str:
    if design == "gaussian-mu1":
        return (f"simulated Gaussian mechanism, μ = {GAUSSIAN_MU:g} ({GAUSSIAN_CANARIES} canaries, "
                f"{GAUSSIAN_GUESSES} guesses)")
    return AUDITS[design][3]


def run(design: str, runs: int) -> dict:
    records = []
    for seed in range(runs):
        start = time.process_time()
        if design == "gaussian-mu1":
            result = _gaussian_result(seed)
        else:
            factory, kind, canaries, _ = AUDITS[design]
            parties, public = digits()
            result = empirical_audit(factory(), parties, public, num_canaries=canaries, random_state=seed,
                                     design=kind, expected_repeats=0)
        each = 1.0 - (1.0 - result.confidence) / len(result.guess_counts_tried)
        records.append({
            "seed": seed, "claimed_epsilon": result.claimed_epsilon, "delta": result.delta,
            "num_canaries": result.num_canaries, "guess_counts_tried": list(result.guess_counts_tried),
            "steinke_epsilon": result.epsilon_lower, "num_guesses": result.num_guesses,
            "num_correct": result.num_correct, "gdp_mu": result.gdp_mu_lower,
            "gdp_epsilon": None if math.isnan(result.gdp_epsilon_lower) else result.gdp_epsilon_lower,
            "gdp_num_guesses": result.gdp_num_guesses, "gdp_num_correct": result.gdp_num_correct,
            "steinke_epsilon_at_1e-5": epsilon_lower_bound(result.num_correct, result.num_guesses,
                                                           result.num_canaries, delta=DELTA, confidence=each),
            "gdp_epsilon_at_1e-5": gdp_epsilon(result.gdp_mu_lower, delta=DELTA),
            "cpu_seconds": time.process_time() - start,
        })
        print(json.dumps({k: records[-1][k] for k in ("seed", "steinke_epsilon", "gdp_mu", "gdp_epsilon",
                                                      "steinke_epsilon_at_1e-5", "gdp_epsilon_at_1e-5")}),
              flush=True)

    def mean(key: str) -> float | None:
        values = [record[key] for record in records if record[key] is not None]
        return float(np.mean(values)) if values else None

    return {"design": design, "setting": _setting(design), "runs": runs, "delta": records[0]["delta"],
            "claimed_epsilon": records[0]["claimed_epsilon"], "num_canaries": records[0]["num_canaries"],
            **{f"mean_{key}": mean(key) for key in ("steinke_epsilon", "gdp_mu", "gdp_epsilon",
                                                    "steinke_epsilon_at_1e-5", "gdp_epsilon_at_1e-5")},
            "records": records}


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def table(document: dict) -> str:
    """The docs/results.md table: one row per design, means over the runs."""
    lines = ["| canary design | runs | claim (δ) | Steinke ε (audit's δ) | f-DP μ | f-DP ε (audit's δ) "
             "| Steinke ε at δ = 1e-5 | f-DP ε at δ = 1e-5 | CPU s per audit |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in document["records"]:
        lines.append(f"| {row['setting']} | {row['runs']} | {row['claimed_epsilon']:.3f} ({row['delta']:g}) "
                     f"| {_number(row['mean_steinke_epsilon'])} | {_number(row['mean_gdp_mu'])} "
                     f"| {_number(row['mean_gdp_epsilon'])} | {_number(row['mean_steinke_epsilon_at_1e-5'])} "
                     f"| {_number(row['mean_gdp_epsilon_at_1e-5'])} "
                     f"| {np.mean([record['cpu_seconds'] for record in row['records']]):.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--design", choices=DESIGNS, action="append", help="default: every design")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    out = Path(args.out)
    for design in args.design or DESIGNS:
        started = provenance.start(command=" ".join(["python -m bench.fdp_audit", *(argv or sys.argv[1:])]),
                                   seeds=list(range(args.runs)), settings={"design": design, "runs": args.runs})
        record = {**run(design, args.runs), "provenance": provenance.finish(started)}
        document = json.loads(out.read_text()) if out.exists() else {"records": []}
        document["provenance"] = record["provenance"]  # the latest run's; each record keeps its own
        kept = [old for old in document["records"] if old["design"] != design]
        document["records"] = sorted(kept + [record], key=lambda row: DESIGNS.index(row["design"]))
        out.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
        print(json.dumps({k: v for k, v in record.items() if k not in ("records", "provenance")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
