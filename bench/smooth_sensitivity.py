"""Benchmark: GNMax local-sensitivity bounds LS(d), vectorised vs a per-query walk.

Times :func:`privfed.accounting.smooth_sensitivity.gnmax_local_sensitivity_bounds`
on 10,000 queries × 10 classes × 250 teachers (PATE 2018's MNIST shape), and a
straightforward per-query loop (Algorithms 4–5 one vote at a time, in Python)
on a slice of the same votes, in the same process. Both must agree on the slice.
Reports CPU time of this process (one core: BLAS threads off) and wall time.

Run: ``python bench/smooth_sensitivity.py [--queries N] [--slice S]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(variable, "1")

import numpy as np  # noqa: E402
from scipy import special  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's privfed

from privfed.accounting.gaussian_noisy_max import gaussian_log_failure_bounds  # noqa: E402
from privfed.accounting.smooth_sensitivity import (  # noqa: E402
    gnmax_local_sensitivity,
    gnmax_local_sensitivity_bounds,
    gnmax_logq0,
)

SIGMA, ORDER, TEACHERS, CLASSES = 40.0, 10.0, 250, 10


def simulate_votes(num_queries: int, seed: int = 0) -> np.ndarray:
    """Per query a Dirichlet class profile (confident to contested), TEACHERS votes drawn from it."""
    rng = np.random.default_rng(seed)
    concentration = rng.choice([0.05, 0.3, 3.0], size=num_queries)
    profiles = rng.gamma(concentration[:, None], size=(num_queries, CLASSES))
    profiles /= profiles.sum(axis=1, keepdims=True)
    return np.array([rng.multinomial(TEACHERS, p) for p in profiles])


def per_query_walk(votes: np.ndarray) -> np.ndarray:
    """The baseline: one query at a time, one vote per step, q recomputed from the histogram."""
    log_q0 = gnmax_logq0(SIGMA, ORDER)
    log_q1 = float(np.log(
        (CLASSES - 1) / 2 * special.erfc(1 / SIGMA + special.erfcinv(2 * np.exp(log_q0) / (CLASSES - 1)))
    ))

    def local(log_q: float) -> float:
        return float(gnmax_local_sensitivity(np.array([log_q]), sigma=SIGMA, num_classes=CLASSES, order=ORDER)[0])

    plateau = local(log_q1)
    result = np.full((len(votes), TEACHERS), plateau)
    for row, histogram in enumerate(votes):
        current = sorted(histogram.tolist(), reverse=True)
        log_q = float(gaussian_log_failure_bounds(np.array([current]), SIGMA)[0])
        if log_q1 <= log_q <= log_q0:
            continue
        result[row, 0] = local(log_q)
        going_left, distance = log_q > log_q0, 0
        while (going_left and log_q > log_q0 and current[1] > 0) or (not going_left and log_q < log_q1):
            distance += 1
            if going_left:
                current[0] += 1
                current[1] -= 1
                current[1:] = sorted(current[1:], reverse=True)
            else:
                current[0] -= 1
                current[1] += 1
            log_q = float(gaussian_log_failure_bounds(np.array([current]), SIGMA)[0])
            result[row, distance] = local(log_q)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--slice", type=int, default=200)
    args = parser.parse_args()
    votes = simulate_votes(args.queries)
    gnmax_logq0(SIGMA, ORDER)  # q₀ is cached per (σ, λ): solve it outside the timings

    cpu, wall = time.process_time(), time.perf_counter()
    bounds = gnmax_local_sensitivity_bounds(votes, sigma=SIGMA, order=ORDER, num_teachers=TEACHERS)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall

    part = votes[: args.slice]
    base_cpu = time.process_time()
    baseline = per_query_walk(part)
    base_cpu = time.process_time() - base_cpu
    np.testing.assert_allclose(bounds[: args.slice], baseline, rtol=1e-9, atol=1e-300)

    per_query_vectorised = cpu / len(votes)
    per_query_loop = base_cpu / len(part)
    print(f"LS(d) for {len(votes):,} queries × {CLASSES} classes × {TEACHERS} teachers (σ = {SIGMA:g}, λ = {ORDER:g})")
    print(f"  vectorised: {cpu:.3f} s CPU ({wall:.3f} s wall)")
    print(f"  per-query walk on {len(part)} queries: {base_cpu:.3f} s CPU → {per_query_loop * len(votes):.1f} s "
          f"for all; vectorised is {per_query_loop / per_query_vectorised:.0f}× faster "
          "(same process, agree on the slice)")


if __name__ == "__main__":
    main()
