"""Tightness, false alarms and cost of the mechanism-level and gradient canary audits (issue 41, item 3).

On digits (scikit-learn's ``load_digits``, 4 parties × 300 rows, the other 597 rows public), for each audit:
``runs`` audits of correct code, one seed each (``empirical_audit(..., design=...)``): the ε lower bound, the
claim (one canary's ε), lower/claim, the bound expected from the stated mechanism on the same design (mean ± sd
of 5 simulated runs, for the first 5 seeds), violations (false alarms: the claim holds, so every violation is
one) with the 95 % Clopper–Pearson upper bound on their rate, the audit's seconds and, in the same process,
the seconds of one ordinary fit of the same estimator (the pipeline on the 4 parties; the DP-SGD model on the
first party)::

    nice -n 10 python -m bench.audit_designs --audit fedkt-l1-laplace --runs 60
    nice -n 10 python -m bench.audit_designs --audit privatekt-eps5 --runs 150 --confidence 0.99
    nice -n 10 python -m bench.audit_designs --audit dpsgd-gradient --runs 5 --label "planted bug 13"  # patched tree

Each call adds its record (keyed by audit, label and confidence) to ``bench/results/audit_designs.json``; the
docs/results.md table is ``python -m bench.tables audit-designs``.
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
from sklearn.datasets import load_digits
from sklearn.tree import DecisionTreeClassifier

from bench import provenance
from privfed import DPConfig, FedKT, PrivateKT, TorchMLP
from privfed.audit.empirical import clopper_pearson
from privfed.audit.empirical_pipelines import empirical_audit

OUT = Path(__file__).resolve().parents[1] / "bench" / "results" / "audit_designs.json"
DELTA = 1e-5
EXPECTED_SEEDS = 5


def digits() -> tuple[list, np.ndarray]:
    X, y = load_digits(return_X_y=True)
    return [(X[i:1200:4], y[i:1200:4]) for i in range(4)], X[1200:]


AUDITS = {
    # name: (estimator factory, design, canaries, setting)
    "fedkt-l1-laplace": (lambda: FedKT(DecisionTreeClassifier(), n_partitions=2, n_teachers=3, privacy="L1",
                                       gamma=0.25, delta=DELTA, random_state=0),
                         "mechanism", 20000, "FedKT-L1, Laplace γ = 0.25, s = 2 (2sγ = 1 per answer)"),
    "privatekt-eps5": (lambda: PrivateKT(DecisionTreeClassifier(), epsilon_per_round=5.0, queries_per_round=2,
                                         rounds=5, self_training_size=400, delta=DELTA, random_state=0),
                       "mechanism", 20000, "PrivateKT, ε = 5 per report, K = 2"),
    "privatekt-eps1": (lambda: PrivateKT(DecisionTreeClassifier(), epsilon_per_round=1.0, queries_per_round=2,
                                         rounds=5, self_training_size=400, delta=DELTA, random_state=0),
                       "mechanism", 20000, "PrivateKT, ε = 1 per report, K = 2"),
    "dpsgd-gradient": (lambda: TorchMLP(hidden=(32,), epochs=2, batch_size=32, lr=0.1, optimizer="sgd",
                                        random_state=0, dp=DPConfig(target_epsilon=4.0, max_grad_norm=1.0,
                                                                    delta=DELTA, sample_rate=0.07)),
                       "gradient", 1000, "DP-SGD MLP(32), target ε = 4, q = 0.07, 2 epochs (28 steps), C = 1"),
}


def one_fit_seconds(factory, parties, public) -> float:
    model, start = factory(), time.perf_counter()
    if isinstance(model, (FedKT, PrivateKT)):
        model.fit(parties, public)
    else:
        model.fit(*parties[0])
    return time.perf_counter() - start


def run(audit: str, runs: int, confidence: float) -> dict:
    factory, design, canaries, setting = AUDITS[audit]
    parties, public = digits()
    records = []
    for seed in range(runs):
        result = empirical_audit(factory(), parties, public, num_canaries=canaries, random_state=seed, design=design,
                                 confidence=confidence,
                                 expected_repeats=EXPECTED_SEEDS if seed < EXPECTED_SEEDS else 0)
        fit_seconds = one_fit_seconds(factory, parties, public) if seed < 3 else None
        records.append({"seed": seed, "epsilon_lower": result.epsilon_lower, "claimed_epsilon": result.claimed_epsilon,
                        "delta": result.delta, "violation": result.violation, "num_guesses": result.num_guesses,
                        "num_correct": result.num_correct, "max_lower_bound": result.max_lower_bound,
                        "expected_lower_bound": result.expected_lower_bound,
                        "expected_lower_bound_sd": result.expected_lower_bound_sd,
                        "audit_seconds": result.details["seconds"], "fit_seconds": fit_seconds,
                        "details": {k: v for k, v in result.details.items() if k not in ("seconds",)}})
        print(json.dumps({k: records[-1][k] for k in ("seed", "epsilon_lower", "claimed_epsilon", "violation",
                                                      "expected_lower_bound", "audit_seconds", "fit_seconds")}),
              flush=True)
    violations = sum(record["violation"] for record in records)
    lower = np.array([record["epsilon_lower"] for record in records])
    claim = records[0]["claimed_epsilon"]
    fits = [record["fit_seconds"] for record in records if record["fit_seconds"] is not None]
    expected = [record["expected_lower_bound"] for record in records if not math.isnan(record["expected_lower_bound"])]
    return {
        "audit": audit, "design": design, "confidence": confidence, "setting": setting, "canaries": canaries,
        "runs": runs,
        "claimed_epsilon": claim, "delta": records[0]["delta"], "mean_lower": float(lower.mean()),
        "sd_lower": float(lower.std(ddof=1)) if runs > 1 else None, "tightness": float(lower.mean() / claim),
        "expected_lower_mean": float(np.mean(expected)) if expected else None,
        "max_lower_bound": records[0]["max_lower_bound"], "violations": int(violations),
        "violation_rate_upper_95": clopper_pearson(int(violations), runs, confidence=0.90)[1],
        "median_audit_seconds": float(np.median([record["audit_seconds"] for record in records])),
        "median_fit_seconds": float(np.median(fits)) if fits else None, "records": records,
    }


def _number(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def table(documents: list[dict]) -> str:
    """The docs/results.md table: one row per record of every raw file (correct code first, then planted bugs)."""
    lines = ["| audit | tree under test | canaries | confidence | runs | claim (δ) | mean lower ± sd | lower/claim "
             "| expected (stated mechanism) | max bound | violations (95 % upper) | audit s / one fit s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for document in documents:
        for row in document["records"]:
            fit = row["median_fit_seconds"]
            lines.append(
                f"| {row['setting']} ({row['design']}) | {row['label']} | {row['canaries']} | {row['confidence']:g} "
                f"| {row['runs']} | {row['claimed_epsilon']:.2f} ({row['delta']:g}) | {_number(row['mean_lower'])} ± "
                f"{_number(row['sd_lower'])} | {_number(row['tightness'])} | {_number(row['expected_lower_mean'])} "
                f"| {_number(row['max_lower_bound'])} | {row['violations']} ({row['violation_rate_upper_95']:.1%}) "
                f"| {row['median_audit_seconds']:.1f} / {_number(fit, 1)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--audit", choices=sorted(AUDITS), required=True)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--label", default="correct code", help="what the tree under test is (e.g. a planted bug)")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    started = provenance.start(command=" ".join(["python -m bench.audit_designs", *(argv or sys.argv[1:])]),
                               seeds=list(range(args.runs)), settings=vars(args))
    record = {**run(args.audit, args.runs, args.confidence), "label": args.label,
              "provenance": provenance.finish(started)}
    out = Path(args.out)
    document = json.loads(out.read_text()) if out.exists() else {"records": []}
    document["provenance"] = record["provenance"]  # the latest run's; each record keeps its own
    key = (args.audit, args.label, args.confidence)
    document["records"] = [old for old in document["records"]
                           if (old["audit"], old["label"], old["confidence"]) != key] + [record]
    out.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps({k: v for k, v in record.items() if k not in ("records", "provenance")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
