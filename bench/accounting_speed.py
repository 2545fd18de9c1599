"""Benchmark: the noisy-max accounting fast paths against the previous computation, side by side in one run.

Sides (each timed alternately with the previous computation, ``--repeats`` times, on 1,000,000 queries × 10
classes of ``bench/accounting.py``'s simulated votes, one core):

* ``laplace_q`` — PATE 2017's q per query (``laplace_failure_bounds``);
* ``laplace_classic`` / ``laplace_tight`` — a fresh ``LaplaceNoisyMax``'s composed RDP curve (q, the distinct q,
  the per-order bound);
* ``gnmax_log_q`` and ``gnmax_classic`` — the same for ``GaussianNoisyMax`` (σ = 40);
* ``read_votes`` — one pass that reads every vote (``votes.sum()``): the floor any per-query computation pays;
* ``stages`` — where the new classic curves spend their time: the failure bounds, selecting and sorting the
  distinct ones where the data-dependent bound applies, and the per-order bound on those.

The previous computation is ``tests/accounting_reference.py`` (what commit 9d6f49b ran); every pair is checked
equal (1e-12 relative) before its timings count. Then, new code only: ``account()`` of GNMax under the tight
analysis twice with other votes and the same public parameters (the PLD memo), and a ledger of ``--entries``
distinct GNMax releases accounted (one PLD per entry for the entries' own rows, and one PLD of their exactly composed
Gaussian for the composition).

Run: ``python bench/accounting_speed.py [--queries N] [--repeats R] [--entries E ...] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(variable, "1")
_ROOT = Path(__file__).resolve().parents[1]
# ``bench/accounting.py`` is named like the package it measures: keep this folder off the path.
sys.path[:] = [str(_ROOT)] + [p for p in sys.path if Path(p or ".").resolve() not in (_ROOT, _ROOT / "bench")]

import numpy as np  # noqa: E402
from privfed.accounting import GaussianNoisyMax, LaplaceNoisyMax, Ledger, NoiseSource, account  # noqa: E402
from privfed.accounting._dp_accounting import event_pld, pld_interval  # noqa: E402
from privfed.accounting.gaussian_noisy_max import gaussian_log_failure_bounds, gaussian_noisy_max_rdp  # noqa: E402
from privfed.accounting.laplace_noisy_max import _data_dependent_rdp, laplace_failure_bounds  # noqa: E402
from privfed.accounting.orders import default_orders  # noqa: E402

from bench import provenance  # noqa: E402
from bench.accounting import GAMMA, simulate_votes  # noqa: E402
from tests import accounting_reference as reference  # noqa: E402

SIGMA, DELTA = 40.0, 1e-5


def sides(votes: np.ndarray) -> dict[str, tuple]:
    """name → (previous computation, new computation), each a function of nothing."""
    classic, tight = default_orders("classic"), default_orders("tight")
    return {
        "laplace_q": (lambda: reference.laplace_failure_bounds(votes, GAMMA),
                      lambda: laplace_failure_bounds(votes, GAMMA)),
        "laplace_classic": (lambda: reference.laplace_rdp(LaplaceNoisyMax(votes, GAMMA), classic, "classic"),
                            lambda: LaplaceNoisyMax(votes, GAMMA).rdp(classic, analysis="classic")),
        "laplace_tight": (lambda: reference.laplace_rdp(LaplaceNoisyMax(votes, GAMMA), tight, "tight"),
                          lambda: LaplaceNoisyMax(votes, GAMMA).rdp(tight, analysis="tight")),
        "gnmax_log_q": (lambda: reference.gaussian_log_failure_bounds(votes, SIGMA),
                        lambda: gaussian_log_failure_bounds(votes, SIGMA)),
        "gnmax_classic": (lambda: reference.gaussian_rdp(GaussianNoisyMax(votes, SIGMA), classic),
                          lambda: GaussianNoisyMax(votes, SIGMA).rdp(classic, analysis="classic")),
    }


def timed(run) -> tuple[float, object]:
    start = time.perf_counter()
    result = run()
    return time.perf_counter() - start, result


def cpu_timed(run) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process): on a machine shared with other work the CPU time is what the
    computation itself costs, the wall time also what it waited for a core."""
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def side_by_side(name: str, previous, new, queries: int, repeats: int) -> dict:
    """Alternate previous and new ``repeats`` times; ns per query of each (wall and CPU), and previous/new per pair."""
    np.testing.assert_allclose(new(), previous(), rtol=1e-12, atol=0)  # the same numbers before timings count
    old_times, new_times = [], []
    for _ in range(repeats):
        old_times.append(cpu_timed(previous))
        new_times.append(cpu_timed(new))
    ratios = [a[0] / b[0] for a, b in zip(old_times, new_times)]
    cpu_ratios = [a[1] / b[1] for a, b in zip(old_times, new_times)]
    row = {"side": name, "previous_ns_per_query": [1e9 * t / queries for t, _ in old_times],
           "new_ns_per_query": [1e9 * t / queries for t, _ in new_times],
           "previous_cpu_ns_per_query": [1e9 * c / queries for _, c in old_times],
           "new_cpu_ns_per_query": [1e9 * c / queries for _, c in new_times], "speedup": ratios,
           "speedup_median": float(np.median(ratios)), "speedup_min": min(ratios), "speedup_max": max(ratios),
           "cpu_speedup_median": float(np.median(cpu_ratios)), "cpu_speedup_min": min(cpu_ratios),
           "cpu_speedup_max": max(cpu_ratios),
           "new_queries_per_second_best": queries / min(t for t, _ in new_times),
           "new_queries_per_cpu_second_best": queries / min(c for _, c in new_times),
           "load": [round(x, 2) for x in os.getloadavg()]}
    print(f"{name:16s} previous {1e9 * min(old_times)[0] / queries:8.1f} ns/q  new {1e9 * min(new_times)[0] / queries:8.1f}"
          f" ns/q  speed-up ×{row['speedup_median']:.2f} (×{row['speedup_min']:.2f}–×{row['speedup_max']:.2f}); CPU "
          f"{1e9 * min(c for _, c in old_times) / queries:.1f} → {1e9 * min(c for _, c in new_times) / queries:.1f} "
          f"ns/q ×{row['cpu_speedup_median']:.2f}", flush=True)
    return row


def read_floor(votes: np.ndarray, repeats: int) -> dict:
    times = [cpu_timed(votes.sum) for _ in range(repeats)]
    return {"side": "read_votes", "ns_per_query": [1e9 * t / len(votes) for t, _ in times],
            "cpu_ns_per_query": [1e9 * c / len(votes) for _, c in times]}


def stages(votes: np.ndarray, repeats: int) -> dict:
    """ns per query of each stage of the new classic curves (best of ``repeats``)."""
    orders = default_orders("classic")
    laplace, gaussian = LaplaceNoisyMax(votes, GAMMA), GaussianNoisyMax(votes, SIGMA)
    laplace_values = laplace._applicable_failure_bounds()[0]
    gaussian_values = gaussian._applicable_log_failure_bounds()[0]
    runs = {
        "laplace_q": lambda: laplace_failure_bounds(votes, GAMMA),
        "laplace_select_and_sort": lambda: LaplaceNoisyMax(votes, GAMMA)._applicable_failure_bounds(),
        "laplace_per_order_bound": lambda: _data_dependent_rdp(laplace_values, laplace.epsilon_per_query, orders),
        "gnmax_log_q": lambda: gaussian_log_failure_bounds(votes, SIGMA),
        "gnmax_select_and_sort": lambda: GaussianNoisyMax(votes, SIGMA)._applicable_log_failure_bounds(),
        "gnmax_per_order_bound": lambda: gaussian_noisy_max_rdp(gaussian_values, SIGMA, orders),
    }
    row = {"side": "stages", "distinct_applicable": {"laplace": len(laplace_values), "gnmax": len(gaussian_values)}}
    for name, run in runs.items():
        times = [cpu_timed(run) for _ in range(repeats)]
        row[name + "_ns_per_query"] = 1e9 * min(t for t, _ in times) / len(votes)
        row[name + "_cpu_ns_per_query"] = 1e9 * min(c for _, c in times) / len(votes)
    row["note"] = "select_and_sort includes computing the failure bounds again"
    print(row, flush=True)
    return row


def one_gaussian_pld() -> dict:
    """Seconds dp-accounting takes to build one GNMax release's PLD (what every distinct ledger entry costs)."""
    event = GaussianNoisyMax(np.ones((30, 3), dtype=np.int64), 40.0).dp_event()
    interval = pld_interval(event)
    seconds = min(timed(lambda: event_pld(event, value_discretization_interval=interval))[0] for _ in range(3))
    return {"side": "one_gaussian_pld", "event": repr(event), "interval": interval, "seconds": seconds}


def repeated_parameters(queries: int) -> dict:
    """account() of GNMax (tight) on two vote matrices with the same public parameters: the second reuses the PLD."""
    rng = np.random.default_rng(1)
    first_votes = rng.multinomial(250, [0.6, 0.2, 0.1, 0.1], size=queries)
    second_votes = rng.multinomial(250, [0.4, 0.3, 0.2, 0.1], size=queries)
    first, _ = timed(lambda: account(GaussianNoisyMax(first_votes, SIGMA), delta=DELTA))
    second, _ = timed(lambda: account(GaussianNoisyMax(second_votes, SIGMA), delta=DELTA))
    return {"side": "gnmax_tight_repeated_parameters", "queries": queries, "first_s": first, "second_s": second}


def ledger_of_distinct(entries: int) -> dict:
    """A ledger of ``entries`` GNMax releases, each with its own σ and number of queries, accounted (tight)."""
    rng = np.random.default_rng(2)
    ledger = Ledger(delta=DELTA)
    ledger.record_noise_source(NoiseSource.secret())
    recording, _ = timed(lambda: [ledger.record(GaussianNoisyMax(rng.multinomial(50, [0.7, 0.2, 0.1], size=20 + i),
                                                                 40.0 + 0.01 * i, unit="party"))
                                 for i in range(entries)])
    accounting, report = timed(ledger.account)
    return {"side": "ledger_distinct_gnmax", "entries": entries, "record_s": recording, "account_s": accounting,
            "epsilon": report.epsilon, "method": report.method}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1_000_000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--entries", type=int, nargs="*", default=[10, 30])
    parser.add_argument("--json", type=Path, help="write the measurements and the run's provenance here")
    args = parser.parse_args()
    run = provenance.start(command=" ".join(["python", *sys.argv]), seeds=[0, 1, 2],
                           settings={**{k: v for k, v in vars(args).items() if k != "json"},
                                     "gamma": GAMMA, "sigma": SIGMA, "delta": DELTA})
    votes = simulate_votes(args.queries, args.classes)
    account(LaplaceNoisyMax(votes[:1000], GAMMA), delta=DELTA)  # imports and dp-accounting's tables, untimed
    rows = [read_floor(votes, args.repeats)]
    rows += [side_by_side(name, *pair, args.queries, args.repeats) for name, pair in sides(votes).items()]
    rows.append(stages(votes, args.repeats))
    rows.append(repeated_parameters(100_000))
    print(rows[-1], flush=True)
    rows.append(one_gaussian_pld())
    print(rows[-1], flush=True)
    for entries in args.entries:
        rows.append(ledger_of_distinct(entries))
        print(rows[-1], flush=True)
    if args.json:
        provenance.write_json(args.json, {"provenance": provenance.finish(run), "rows": rows})


if __name__ == "__main__":
    main()
