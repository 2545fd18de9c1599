"""Issue 33's re-derivation: each printed figure that did not mean what it said, before and after the fix.

Every "before" value is recomputed here from today's building blocks the way the old code combined them
(the conversion of an unclamped noisy RDP; the sum of per-query smooth sensitivities; the unchecked LS walk;
min(RDP, pure) for shuffled reports; σ bisected on the RDP bound alone), in the same process as the "after"
value, which is what privfed prints now. Raw results go to ``bench/results/rederivation_issue33.json``;
``python -m bench.tables rederivation`` renders docs/results.md's table from that file without recomputing.

Run: ``python bench/rederivation.py`` (about 2 minutes on one core).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's privfed

from privfed.accounting.conversion import rdp_to_epsilon  # noqa: E402
from privfed.accounting.dpsgd import _rdp_calibrated  # noqa: E402
from privfed.accounting.gaussian_noisy_max import gaussian_log_failure_bounds  # noqa: E402
from privfed.accounting.release import summed_smooth_sensitivity  # noqa: E402
from privfed.accounting.report import round_up  # noqa: E402
from privfed.accounting.smooth_sensitivity import (  # noqa: E402
    _local_sensitivity,
    _local_sensitivity_bounds,
    gnss_rdp,
)

import privfed  # noqa: E402
from bench import provenance  # noqa: E402

OUTPUT = ROOT / "bench" / "results" / "rederivation_issue33.json"
DELTA = 1e-5


def _release() -> list[dict]:
    mechanism = privfed.GaussianNoisyMax(np.array([[150, 100]] * 100), 20.0)
    order, beta, scale, seed = 10.0, 0.04, 20.0, 4
    noise = np.random.default_rng(seed).standard_normal()
    old_sensitivity = float(mechanism.smooth_sensitivity(order=order, beta=beta).sum())
    old_rdp = (mechanism.rdp(np.array([order]))[0] + old_sensitivity * scale * noise
               + gnss_rdp(beta=beta, noise_scale=scale, order=order))
    old = max(rdp_to_epsilon(np.array([order]), np.array([old_rdp]), DELTA, "tight")[0], 0.0)
    new = privfed.release_epsilon(mechanism, delta=DELTA, order=order, beta=beta, noise_scale=scale,
                                  random_state=seed)
    return [{"item": 1, "figure": "release_epsilon, votes [150, 100] × 100, σ 20, λ 10, β 0.04, noise 20, seed 4",
             "before": old, "before_text": f"ε = {round_up(old)} (printed as a bound)",
             "after": new.epsilon, "after_text": str(new).split(", δ")[0]}]


def _smooth_sensitivity() -> list[dict]:
    ratios = []
    for seed in range(10):
        rng = np.random.default_rng(seed)
        votes = np.array([rng.multinomial(250, p) for p in rng.dirichlet(np.full(10, 0.1), size=200)])
        mechanism = privfed.GaussianNoisyMax(votes, 40.0)
        for order, beta in ((10.0, 0.02), (8.0, 0.04)):
            per_query = float(mechanism.smooth_sensitivity(order=order, beta=beta).sum())
            ratios.append(per_query / summed_smooth_sensitivity([mechanism], order=order, beta=beta))
    return [{"item": 2, "figure": "smooth sensitivity of the release: Σ per-query SS ÷ SS of Σ LS (200 queries, 250 "
             "teachers, 10 classes, Dirichlet(0.1) votes, σ 40; 10 seeds × (λ, β) ∈ {(10, 0.02), (8, 0.04)})",
             "before": 1.0, "before_text": "Σ per-query SS (1×)",
             "after": float(np.median(ratios)),
             "after_text": (f"SS of Σ LS: {min(ratios):.2f}–{max(ratios):.2f}× smaller "
                            f"(median {np.median(ratios):.2f}×)")}]


def _conditions() -> list[dict]:
    sigma, order = 2.0, 5.0
    walked = float(_local_sensitivity_bounds(np.array([[0, 30]]), sigma=sigma, order=order, num_teachers=30)[0, 20])
    there = float(_local_sensitivity(gaussian_log_failure_bounds(np.array([[20, 10]]), sigma), sigma=sigma,
                                     num_classes=2, order=order)[0])
    try:
        privfed.GaussianNoisyMax(np.array([[0, 30]]), sigma).local_sensitivity_bounds(order, num_teachers=30)
        after = "accepted"
    except ValueError as error:
        after = "refused: " + str(error).split(":")[0]
    return [{"item": 3, "figure": "LS(20) of votes [0, 30], σ 2, λ 5, T 30 (fails C6); the LS of [20, 10] is "
             f"{there:.4f}", "before": walked, "before_text": f"{walked:.4f} (too small)", "after": None,
             "after_text": after}]


def _shuffling() -> list[dict]:
    mechanism = privfed.ShuffledRandomizedResponse(1.0, num_users=10_000, num_classes=10)
    report = privfed.account(mechanism, delta=DELTA)
    rdp = rdp_to_epsilon(np.array(report.orders), np.array(report.rdp), DELTA, "tight")[0]
    old = min(rdp, mechanism.pure_epsilon())
    return [{"item": 4, "figure": f"account() of shuffled randomized response, ε₀ 1, n 10 000, δ {DELTA:g} "
             f"(central_epsilon {round_up(mechanism.central_epsilon(DELTA))})", "before": old,
             "before_text": f"{round_up(old)} (min(RDP, pure))", "after": report.epsilon,
             "after_text": f"{round_up(report.epsilon)} ({report.method.upper()})"}]


def _calibration() -> list[dict]:
    rows = []
    for target, rate, steps in ((1.0, 64 / 3000, 1410), (2.0, 0.01, 1000), (0.5, 0.001, 100)):
        old_sigma = _rdp_calibrated(target, DELTA, rate, steps)
        old = privfed.account(privfed.DPSGD(old_sigma, rate, steps), delta=DELTA).epsilon
        sigma = privfed.dpsgd_noise_multiplier(target_epsilon=target, delta=DELTA, sample_rate=rate, steps=steps)
        new = privfed.account(privfed.DPSGD(sigma, rate, steps), delta=DELTA).epsilon
        rows.append({"item": 5, "figure": f"reported ε ÷ target, DP-SGD target {target:g}, q {rate:.4g}, {steps} steps",
                     "before": old / target, "before_text": f"{old / target:.3f} (σ {old_sigma:.4f}, on RDP)",
                     "after": new / target, "after_text": f"{new / target:.3f} (σ {sigma:.4f}, on what account() "
                     "reports)"})
    return rows


def _bounded_work() -> list[dict]:
    start = time.perf_counter()
    report = privfed.account(privfed.RandomizedResponse(10, epsilon=1.0, reports=10**9), delta=DELTA)
    seconds = time.perf_counter() - start
    return [{"item": 9, "figure": "account(RandomizedResponse(10, epsilon=1, reports=10**9))", "before": None,
             "before_text": "did not finish (PLD self-composed 10⁹ times)", "after": report.epsilon,
             "after_text": f"ε = {round_up(report.epsilon)} ({report.method.upper()}) in "
             f"{seconds:.2f} s"}]


def measure() -> dict:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    rows = [*_release(), *_smooth_sensitivity(), *_conditions(), *_shuffling(), *_calibration(), *_bounded_work()]
    return {"command": "python bench/rederivation.py", "commit": commit, "machine": platform.platform(),
            "python": platform.python_version(), "delta": DELTA, "rows": rows}


def render(document: dict) -> str:
    lines = ["| item | figure | before | after |", "| --- | --- | --- | --- |"]
    for row in document["rows"]:
        lines.append(f"| {row['item']} | {row['figure']} | {row['before_text']} | {row['after_text']} |")
    return "\n".join(lines)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    run = provenance.start(command="python bench/rederivation.py", seeds=None, settings={})
    document = {**measure(), "provenance": provenance.finish(run)}
    OUTPUT.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(render(document))


if __name__ == "__main__":
    main()
