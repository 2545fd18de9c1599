"""Benchmark: one-run canary audits of each pipeline at two ε, beside the loss-threshold membership bound.

For FedKT-L1 (canary parties), FedKT-L2 (canary examples), PrivateKT (canary clients) and a DP-SGD local
model (canary examples), at two noise levels each: the audit's cost (pipeline runs, wall seconds), its ε
lower bound, the claim it is judged against (the ledger's ε for what one canary can change), the audited
run's whole ledger ε, and the ε the same pipeline's own ledger reports after an ordinary fit. Beside it, in
the same process on the same data, the loss-threshold membership-inference bound privfed reported before
(``privfed.membership_epsilon_lower_bound`` on the pipeline's final model, party examples against held-out
ones): its ε lower bound and seconds.

Data: scikit-learn's ``make_classification`` (2 classes, 8 features), 4 parties × 200 rows, 800 public
rows, 400 held-out rows. Every run seeded.

Run: ``python bench/empirical_audit.py --json bench/results/empirical_audit.json``; the docs/results.md table is
rendered from that file by :func:`table` (``python -m bench.tables audit-empirical-one-run``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import time
import warnings
from pathlib import Path

for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(variable, "1")

import numpy as np  # noqa: E402
from sklearn.datasets import make_classification  # noqa: E402
from sklearn.tree import DecisionTreeClassifier  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's privfed

from bench import provenance  # noqa: E402
from privfed import (  # noqa: E402
    DPConfig,
    FedKT,
    PrivateKT,
    TorchMLP,
    account,
    audit_release,
    empirical_audit,
    membership_epsilon_lower_bound,
    true_label_scores,
)

DELTA = 1e-5


def data(seed: int = 0):
    X, y = make_classification(n_samples=2400, n_features=8, n_informative=5, n_classes=2, random_state=seed)
    parties = [(X[i * 200:(i + 1) * 200], y[i * 200:(i + 1) * 200]) for i in range(4)]
    return parties, X[800:1600], (X[1600:2000], y[1600:2000])


def settings():
    """(pipeline, setting, estimator factory, canaries, fit for the membership baseline)."""
    tree = DecisionTreeClassifier(max_depth=4)
    for gamma in (0.25, 1.0):
        yield ("FedKT-L1", f"γ = {gamma:g}", lambda g=gamma: FedKT(tree, n_partitions=2, n_teachers=3, privacy="L1",
                                                                    gamma=g, delta=DELTA, random_state=0), 800)
    for gamma in (0.5, 2.0):
        yield ("FedKT-L2", f"γ = {gamma:g}", lambda g=gamma: FedKT(DecisionTreeClassifier(), n_partitions=2,
                                                                    n_teachers=3, privacy="L2", gamma=g,
                                                                    local_query_fraction=0.4, delta=DELTA,
                                                                    random_state=0), 200)
    for epsilon in (1.0, 5.0):
        yield ("PrivateKT", f"ε = {epsilon:g} per report (K = 2)",
               lambda e=epsilon: PrivateKT(tree, epsilon_per_round=e, queries_per_round=2, rounds=5,
                                           self_training_size=400, delta=DELTA, random_state=0), 1000)
    for sigma in (1.0, 0.5):
        yield ("DP-SGD local model", f"σ = {sigma:g}, C = 1, 3 epochs",
               lambda s=sigma: TorchMLP(hidden=(16,), epochs=3, batch_size=32, lr=0.05, random_state=0,
                                        dp=DPConfig(noise_multiplier=s, max_grad_norm=1.0, delta=DELTA)), 100)


def membership_baseline(factory, parties, public, held_out, unit):
    """The loss-threshold bound on the pipeline's final model (party examples vs held-out), its seconds, and the
    ε that the fitted pipeline's own ledger reports for ``unit`` (the whole run, data-independent)."""
    start = time.perf_counter()
    model = factory()
    if isinstance(model, (FedKT, PrivateKT)):
        model.fit(parties, public)
        members = np.concatenate([X for X, _ in parties]), np.concatenate([y for _, y in parties])
    else:
        model.fit(*parties[0])
        members = parties[0]
    pick = np.random.default_rng(0).choice(len(members[1]), size=min(400, len(members[1])), replace=False)
    bound = membership_epsilon_lower_bound(true_label_scores(model, members[0][pick], members[1][pick]),
                                           true_label_scores(model, *held_out), delta=DELTA)
    seconds = time.perf_counter() - start
    report = (model.ledger_.account(unit=unit) if hasattr(model, "ledger_")
              else account(model.dp_mechanism_, delta=DELTA))
    return bound.epsilon_lower, seconds, report.epsilon_data_independent if report.data_dependent else report.epsilon


def fmt(value: float) -> float | str:
    return "inf" if value == float("inf") else round(float(value), 4)


def generic_statistics(repeats: int = 400) -> dict:
    """``privfed.audit_release`` on exact mechanisms: false alarms at the stated level, a planted bug, tightness."""
    def laplace(epsilon, seed):
        return lambda included: included + np.random.default_rng(seed).laplace(0.0, 1 / epsilon, len(included))

    def randomized_response(epsilon, seed):
        keep = 1 / (1 + np.exp(-epsilon))
        return lambda included: np.where(np.random.default_rng(seed).random(len(included)) < keep, included,
                                         ~included).astype(float)

    start = time.perf_counter()
    out = {}
    for name, mechanism in (("laplace", laplace), ("randomized_response", randomized_response)):
        alarms = [audit_release(mechanism(1.0, 10**6 + seed), 1000, claimed_epsilon=1.0, random_state=seed).violation
                  for seed in range(repeats)]
        out[f"false_alarm_rate_{name}_eps1_m1000"] = {"audits": repeats, "violations": int(sum(alarms))}
    caught = [audit_release(laplace(3.0, 10**6 + seed), 1000, claimed_epsilon=1.0, random_state=seed).violation
              for seed in range(repeats)]
    out["planted_bug_laplace_true3_claimed1_m1000"] = {"audits": repeats, "caught": int(sum(caught))}
    for epsilon in (1.0, 2.0, 4.0):
        lower = [audit_release(laplace(epsilon, 10**6 + seed), 5000, claimed_epsilon=epsilon,
                               random_state=seed).epsilon_lower for seed in range(20)]
        out[f"tightness_laplace_eps{epsilon:g}_m5000"] = {"audits": 20, "mean_lower": round(float(np.mean(lower)), 4),
                                                          "min_lower": round(float(np.min(lower)), 4)}
    out["seconds"] = round(time.perf_counter() - start, 1)
    return out


def fedkt_l1_exceedances(parties, public, audits: int = 60) -> dict:
    """How often the FedKT-L1 audit's bound exceeds the exact ε of what it scores (one binary noisy label at a tie
    moved by k = s = 2 votes each way, γ = 0.25: ε = log((1 − p)/p), p = ½e^(−2γ)(1 + γ)): at most 5% allowed."""
    gamma = 0.25
    p = 0.5 * np.exp(-2 * gamma) * (1 + gamma)
    exact = float(np.log((1 - p) / p))
    start = time.perf_counter()
    bounds = [empirical_audit(FedKT(DecisionTreeClassifier(max_depth=4), n_partitions=2, n_teachers=3, privacy="L1",
                                    gamma=gamma, delta=DELTA, random_state=0), parties, public, num_canaries=800,
                              random_state=seed).epsilon_lower for seed in range(audits)]
    return {"gamma": gamma, "exact_one_label_epsilon": round(exact, 4), "audits": audits,
            "exceedances": int(sum(bound > exact for bound in bounds)), "mean_lower": round(float(np.mean(bounds)), 4),
            "seconds": round(time.perf_counter() - start, 1)}


def table(rows: list[dict]) -> str:
    """The docs/results.md (and docs/audit.md) table of the raw rows."""
    lines = [
        "| pipeline | setting | unit | canaries | audit s | ε lower (95%) | claimed, one canary | lower/claimed "
        "| audited run's ledger ε | lower/ledger | fitted pipeline's ε | membership bound (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['pipeline']} | {row['setting']} | {row['unit']} | {row['canaries']} | {row['audit_seconds']} "
            f"| {row['epsilon_lower']} | {row['claimed_epsilon']} | {row['lower_over_claimed']} "
            f"| {row['ledger_epsilon']} | {row['lower_over_ledger']} | {row['fitted_pipeline_epsilon']} "
            f"| {row['membership_epsilon_lower']} ({row['membership_seconds']}) |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None, help="write the raw rows here")
    args = parser.parse_args()
    run = provenance.start(command="python " + " ".join(sys.argv), seeds=[0], settings=vars(args))
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)  # dp-accounting's convergence chatter
    statistics = generic_statistics()
    print(json.dumps(statistics, indent=1), flush=True)
    parties, public, held_out = data()
    statistics["fedkt_l1_exact_label"] = fedkt_l1_exceedances(parties, public)
    print(json.dumps(statistics["fedkt_l1_exact_label"]), flush=True)
    rows = []
    for pipeline, setting, factory, canaries in settings():
        result = empirical_audit(factory(), parties, public, num_canaries=canaries, random_state=0)
        mia, mia_seconds, fitted_epsilon = membership_baseline(factory, parties, public, held_out, result.unit)
        ledger = result.details["ledger_epsilon"]
        row = {
            "pipeline": pipeline, "setting": setting, "unit": result.unit, "design": result.details["design"],
            "canaries": result.num_canaries, "runs": result.runs, "audit_seconds": round(result.details["seconds"], 2),
            "epsilon_lower": fmt(result.epsilon_lower), "claimed_epsilon": fmt(result.claimed_epsilon),
            "ledger_epsilon": fmt(ledger), "lower_over_claimed": fmt(result.epsilon_lower / result.claimed_epsilon),
            "lower_over_ledger": fmt(result.epsilon_lower / ledger), "violation": result.violation,
            "guesses": result.num_guesses, "correct": result.num_correct,
            "fitted_pipeline_epsilon": fmt(fitted_epsilon),
            "membership_epsilon_lower": fmt(mia), "membership_seconds": round(mia_seconds, 2),
        }
        rows.append(row)
        print(f"{pipeline:20s} {setting:28s} audit {row['epsilon_lower']:>8} / claim {row['claimed_epsilon']:>8} "
              f"(ledger {row['ledger_epsilon']}) in {row['audit_seconds']} s; membership bound "
              f"{row['membership_epsilon_lower']} in {row['membership_seconds']} s", flush=True)
    if args.json is not None:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
        args.json.write_text(json.dumps({
            "command": "python bench/empirical_audit.py --json " + str(args.json),
            "commit": commit, "cpus": os.cpu_count(), "python": platform.python_version(), "delta": DELTA,
            "confidence": 0.95, "data": "make_classification(2400, 8 features, 5 informative, 2 classes, seed 0): "
                                        "4 parties x 200, 800 public, 400 held out",
            "audit_release_statistics": statistics, "rows": rows, "provenance": provenance.finish(run),
        }, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
