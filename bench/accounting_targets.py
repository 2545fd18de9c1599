"""Issue 46's accounting targets, each against what privfed does today, in one run.

* **Laplace classic** ≤ 5× the estimated ideal per query (≈ 7 ns: issue 46's estimate; one read of the votes is
  measured beside it);
* **GNMax classic** ≥ 10 M queries per second (its failure bounds use a per-gap table already);
* **GNMax tight** on repeated parameters: a second ``account()`` with other votes and the same σ, count and δ
  (the PLD memo);
* **1,000 distinct mechanisms** in a ledger accounted in ≤ 5 s: a ledger of E GNMax releases, each with its own σ
  and query count, accounted by ``Ledger.account()`` (today: one PLD per entry, composed); beside it two
  alternatives computed here and nowhere in privfed, with their ε, so that the choice between them can be made:

  - ``rdp_only``: the ledger's RDP bound alone (no PLD). ε never below today's (today takes the minimum of RDP and
    PLD), so it is a valid, never-lower bound, but a looser one;
  - ``merged_gaussian``: every entry is a Gaussian mechanism self-composed, and Gaussians compose exactly into one
    Gaussian of noise multiplier (Σ count_i / z_i²)^(−1/2); one pessimistic PLD of that Gaussian on today's grid.
    A valid upper bound (pessimistic discretization of the exact composition), but **lower** than today's ε (today
    rounds every entry's losses up before composing), so not the never-lower choice.

Usage::

    python bench/accounting_targets.py --json bench/results/accounting_targets.json
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
sys.path[:] = [str(_ROOT)] + [p for p in sys.path if Path(p or ".").resolve() not in (_ROOT, _ROOT / "bench")]

import numpy as np  # noqa: E402
from dp_accounting.pld import privacy_loss_distribution  # noqa: E402
from privfed.accounting import GaussianNoisyMax, LaplaceNoisyMax, Ledger, NoiseSource, account  # noqa: E402
from privfed.accounting._dp_accounting import pld_interval  # noqa: E402
from privfed.accounting.account import composed_dp_event, pld_event  # noqa: E402
from privfed.accounting.conversion import rdp_to_epsilon  # noqa: E402
from privfed.accounting.orders import default_orders  # noqa: E402

from bench import provenance  # noqa: E402
from bench.accounting import GAMMA, simulate_votes  # noqa: E402
from bench.accounting_speed import SIGMA, cpu_timed, repeated_parameters  # noqa: E402

DELTA = 1e-5
IDEAL_NS = 7.0  # issue 46's estimate of the ideal classic Laplace cost per query


def per_query(votes: np.ndarray, repeats: int) -> dict:
    classic = default_orders("classic")
    runs = {"read_votes": votes.sum,
            "laplace_classic": lambda: LaplaceNoisyMax(votes, GAMMA).rdp(classic, analysis="classic"),
            "gnmax_classic": lambda: GaussianNoisyMax(votes, SIGMA).rdp(classic, analysis="classic")}
    row = {}
    for name, run in runs.items():
        cpu = min(cpu_timed(run)[1] for _ in range(repeats))
        row[name + "_cpu_ns_per_query"] = 1e9 * cpu / len(votes)
    row["laplace_classic_over_ideal"] = row["laplace_classic_cpu_ns_per_query"] / IDEAL_NS
    row["gnmax_classic_queries_per_cpu_second"] = 1e9 / row["gnmax_classic_cpu_ns_per_query"]
    return row


def distinct_ledger(entries: int) -> tuple[Ledger, list]:
    """A ledger of ``entries`` GNMax releases, each with its own σ and number of queries (as
    ``bench/accounting_speed.py``'s), and its mechanisms."""
    rng = np.random.default_rng(2)
    ledger = Ledger(delta=DELTA)
    ledger.record_noise_source(NoiseSource.secret())
    members = [GaussianNoisyMax(rng.multinomial(50, [0.7, 0.2, 0.1], size=20 + i), 40.0 + 0.01 * i, unit="party")
               for i in range(entries)]
    for member in members:
        ledger.record(member)
    return ledger, members


def rdp_only_epsilon(members: list) -> float:
    """The RDP bound of the composition alone (tight orders and conversion): today's ε is min(this, PLD)."""
    orders = default_orders("tight")
    curve = np.sum([member.rdp(orders, analysis="tight") for member in members], axis=0)
    return rdp_to_epsilon(orders, curve, DELTA, "tight")[0]


def merged_gaussian_epsilon(members: list) -> float:
    """One pessimistic PLD of the exact composition of the members' self-composed Gaussians, on today's grid."""
    events = [member.dp_event() for member in members]
    inverse_variance = sum(event.count / event.event.noise_multiplier ** 2 for event in events)
    independent = rdp_only_epsilon(members)
    _, hint = pld_event(members, DELTA, epsilon_hint=independent)
    interval = pld_interval(composed_dp_event(members), epsilon_hint=hint)
    pld = privacy_loss_distribution.from_gaussian_mechanism(standard_deviation=inverse_variance ** -0.5,
                                                           value_discretization_interval=interval)
    return float(pld.get_epsilon_for_delta(DELTA))


def ledger_row(entries: int, *, today: bool) -> dict:
    ledger, members = distinct_ledger(entries)
    row = {"entries": entries}
    if today:
        start = time.perf_counter()
        report = ledger.account()
        row.update(today_s=time.perf_counter() - start, today_epsilon=report.epsilon, today_method=report.method)
    for name, compute in (("rdp_only", rdp_only_epsilon), ("merged_gaussian", merged_gaussian_epsilon)):
        start = time.perf_counter()
        row[name + "_epsilon"] = compute(members)
        row[name + "_s"] = time.perf_counter() - start
    print(row, flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--entries-today", type=int, nargs="*", default=[10, 30, 100])
    parser.add_argument("--entries", type=int, nargs="*", default=[1000])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    run = provenance.start(command=" ".join(["python", *sys.argv]), seeds=[0, 1, 2],
                           settings={k: v for k, v in vars(args).items() if k != "json"})
    votes = simulate_votes(args.queries, 10)
    account(LaplaceNoisyMax(votes[:1000], GAMMA), delta=DELTA)  # imports and tables, untimed
    rows = {"per_query": per_query(votes, args.repeats)}
    print(rows["per_query"], flush=True)
    rows["gnmax_tight_repeated_parameters"] = repeated_parameters(100_000)
    print(rows["gnmax_tight_repeated_parameters"], flush=True)
    rows["ledgers"] = [ledger_row(e, today=True) for e in args.entries_today]
    rows["ledgers"] += [ledger_row(e, today=False) for e in args.entries]
    if args.json:
        provenance.write_json(args.json, {"provenance": provenance.finish(run), **rows})


if __name__ == "__main__":
    main()
