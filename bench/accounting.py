"""Benchmark: LaplaceNoisyMax accounting throughput, vectorised vs a per-query Python loop.

Prints queries per second for 1,000,000 queries × 10 classes under both
analyses, and the speed-up over a straightforward per-query loop over the same
formulas, timed in the same process on a 10,000-query slice. Both paths must
agree (checked before timing is reported).

Run: ``python bench/accounting.py [--queries N] [--classes C] [--slice S] [--json PATH]``; ``--json`` writes the
measurements with the run's provenance (docs/results.md renders its table from
``bench/results/accounting_throughput.json``: ``python -m bench.tables accounting-throughput``).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

# One core, as the figures are stated: no BLAS threads.
for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(variable, "1")

# This file is named like the package it measures: drop its own folder from the path so
# that ``import accounting`` finds the package, not this script.
# The repository root goes first so that ``bench`` (the raw results' provenance, the table) is importable.
_ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(_ROOT)] + [p for p in sys.path if Path(p or ".").resolve() not in (_ROOT, _ROOT / "bench")]

import numpy as np  # noqa: E402
from privfed.accounting import LaplaceNoisyMax, account  # noqa: E402
from privfed.accounting.orders import default_orders  # noqa: E402

from bench import provenance  # noqa: E402

GAMMA, DELTA, VOTES_PER_UNIT, TEACHERS = 0.05, 1e-5, 1, 250


def simulate_votes(num_queries: int, num_classes: int, seed: int = 0) -> np.ndarray:
    """Votes of TEACHERS teachers: per query a Dirichlet class profile, from confident to contested."""
    rng = np.random.default_rng(seed)
    concentration = rng.choice([0.05, 0.3, 3.0], size=num_queries)
    profiles = rng.gamma(concentration[:, None], size=(num_queries, num_classes))
    profiles /= profiles.sum(axis=1, keepdims=True)
    return rng.multinomial(TEACHERS, profiles)


def loop_rdp(votes: np.ndarray, gamma: float, k: int, orders: np.ndarray, analysis: str) -> np.ndarray:
    """The same per-query formulas, one query and one order at a time, in plain Python."""
    import dp_accounting
    from privfed.accounting._dp_accounting import event_rdp

    epsilon = 2 * k * gamma
    histogram = (
        event_rdp(dp_accounting.LaplaceDpEvent(1 / (k * gamma)), orders, count=2) if analysis == "tight" else None
    )
    total = [0.0] * len(orders)
    for row in votes.tolist():
        top = max(row)
        winner = row.index(top)
        q = sum((2 + gamma * (top - n)) / (4 * math.exp(gamma * (top - n))) for j, n in enumerate(row) if j != winner)
        q = min(q, 1 - 1 / len(row))
        for i, order in enumerate(orders):
            moment = order - 1
            bound = min(0.5 * epsilon * epsilon * order, epsilon)
            if histogram is not None:
                bound = min(bound, histogram[i])
            if q < 1 / (math.exp(epsilon) + 1):
                log_t = math.log(
                    (1 - q) * ((1 - q) / (1 - math.exp(epsilon) * q)) ** moment + q * math.exp(epsilon * moment)
                )
                bound = min(bound, log_t / moment)
            total[i] += bound
    return np.array(total)


def best_of(repeats: int, run):
    """(fastest wall time, result) over ``repeats`` runs: the least disturbed by other load on the machine."""
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        timings.append(time.perf_counter() - start)
    return min(timings), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1_000_000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--slice", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3, help="timings are the best of this many runs")
    parser.add_argument("--json", type=Path, help="write the measurements and the run's provenance here")
    args = parser.parse_args()
    run = provenance.start(command=" ".join(["python", *sys.argv]), seeds=[0],
                           settings={**{key: value for key, value in vars(args).items() if key != "json"},
                                     "gamma": GAMMA, "delta": DELTA, "votes_per_unit": VOTES_PER_UNIT,
                                     "teachers": TEACHERS})

    votes = simulate_votes(args.queries, args.classes)
    rows = []
    for analysis in ("classic", "tight"):
        orders = default_orders(analysis)
        elapsed, report = best_of(
            args.repeats, lambda: account(LaplaceNoisyMax(votes, GAMMA, VOTES_PER_UNIT), delta=DELTA, analysis=analysis)
        )
        part = votes[: args.slice]
        loop_elapsed, looped = best_of(args.repeats, lambda: loop_rdp(part, GAMMA, VOTES_PER_UNIT, orders, analysis))
        vector_elapsed, vectorised = best_of(
            args.repeats, lambda: LaplaceNoisyMax(part, GAMMA, VOTES_PER_UNIT).rdp(orders, analysis=analysis)
        )
        np.testing.assert_allclose(vectorised, looped, rtol=1e-9)  # both paths agree before any timing counts
        rows.append({"analysis": analysis, "orders": len(orders), "seconds": elapsed,
                     "epsilon": report.epsilon, "epsilon_data_independent": report.epsilon_data_independent,
                     "loop_seconds": loop_elapsed, "vectorised_seconds": vector_elapsed})
    document = {"provenance": provenance.finish(run), "rows": rows}
    if args.json:
        provenance.write_json(args.json, document)
    from bench.tables.speed import accounting_markdown  # registers the table, whose raw file now exists

    print(accounting_markdown(document))


if __name__ == "__main__":
    main()
