"""Issue 46's accounting targets, each against what privfed does today, in one run.

* **Laplace classic** ≤ 5× the estimated ideal per query (≈ 7 ns: issue 46's estimate; one read of the votes is
  measured beside it);
* **GNMax classic** ≥ 10 M queries per second (its failure bounds gather tabulated tail ratios; the per-vote
  computation they replaced is timed beside them, alternated);
* the **stages** of both classic curves (``bench/accounting_speed.py``'s ``stages``): what stands in the way;
* **GNMax tight** on repeated parameters: a second ``account()`` with other votes and the same σ, count and δ
  (the PLD memo);
* **1,000 distinct mechanisms** in a ledger accounted in ≤ 5 s: a ledger of E GNMax releases, each with its own σ
  and query count, accounted by ``Ledger.account()``. Each entry is a plain Gaussian mechanism, and so is their
  composition (``gaussian_mu`` in ``accounting/_dp_accounting.py``): the composition's ε and each entry's own row
  come from the exact privacy profile of the Gaussian mechanism (``accounting/gaussian_profile.py``, a certified
  upper bound). Beside it, timed alone, the paths it replaced and two references:

  - ``merged_pld``: one pessimistic PLD of the exactly composed Gaussian on the ledger's former grid (the
    composition's path before the closed form);
  - ``rows_pld``: one PLD per entry for the entries' own rows (their path before; not run for large E);
  - ``per_entry_plds``: dp-accounting's composition of the entries' own PLDs (the composition's path before the
    exact composition; not run for large E);
  - ``rdp_only``: the ledger's RDP bound alone (no PLD), never below the reported ε;
  - ``exact``: the exact ε of the composed Gaussian solved independently of privfed (``brentq`` on δ(ε) in
    ``tests/test_merged_gaussian_pld.py``).

Usage::

    python bench/accounting_targets.py --json bench/results/accounting_targets.json
"""

from __future__ import annotations

import argparse
import math
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
from privfed.accounting._dp_accounting import event_pld, pld_interval  # noqa: E402
from privfed.accounting.account import composed_dp_event  # noqa: E402
from privfed.accounting.conversion import rdp_to_epsilon  # noqa: E402
from privfed.accounting.gaussian_noisy_max import gaussian_log_failure_bounds  # noqa: E402
from privfed.accounting.orders import default_orders  # noqa: E402

from bench import provenance  # noqa: E402
from bench.accounting import GAMMA, simulate_votes  # noqa: E402
from bench.accounting_speed import SIGMA, cpu_timed, repeated_parameters, stages  # noqa: E402
from tests.test_gnmax_paired_tail_table import reference_log_failure_bounds  # noqa: E402
from tests.test_merged_gaussian_pld import exact_gaussian_epsilon  # noqa: E402

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
    # GNMax's failure bounds from the table of tail ratios against the per-vote computation it replaced, alternated.
    previous, table = [], []
    for _ in range(repeats):
        previous.append(cpu_timed(lambda: reference_log_failure_bounds(votes, SIGMA))[1])
        table.append(cpu_timed(lambda: gaussian_log_failure_bounds(votes, SIGMA))[1])
    row["gnmax_log_q_previous_cpu_ns_per_query"] = 1e9 * min(previous) / len(votes)
    row["gnmax_log_q_cpu_ns_per_query"] = 1e9 * min(table) / len(votes)
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


def per_entry_plds_epsilon(members: list, interval: float) -> float:
    """dp-accounting's composition of the members' own pessimistic PLDs on the grid ``interval`` (each entry's
    self-composed Gaussian, then composed one entry at a time): what the ledger computed before the exact
    composition."""
    pld = privacy_loss_distribution.identity(value_discretization_interval=interval)
    for member in members:
        pld = pld.compose(event_pld(member.dp_event(), value_discretization_interval=interval))
    return float(pld.get_epsilon_for_delta(DELTA))


def exact_epsilon(members: list) -> float:
    """The exact ε of the members' events composed: one Gaussian of shift μ = (Σ countᵢ / zᵢ²)^(1/2)."""
    events = [member.dp_event() for member in members]
    return exact_gaussian_epsilon(math.fsum(event.count / event.event.noise_multiplier ** 2 for event in events)
                                  ** 0.5, DELTA)


def rows_pld_cpu_s(members: list) -> float:
    """CPU seconds of the entries' own rows as they were computed before the closed form: one PLD per entry on the
    fine 10⁻⁴ grid (coarsened as ``pld_interval`` says), its ε at δ."""
    cpu = time.process_time()
    for member in members:
        event = member.dp_event()
        event_pld(event, value_discretization_interval=pld_interval(event)).get_epsilon_for_delta(DELTA)
    return time.process_time() - cpu


def ledger_row(entries: int, *, compared: bool) -> dict:
    ledger, members = distinct_ledger(entries)
    row: dict = {"entries": entries}
    wall, cpu = time.perf_counter(), time.process_time()
    report = ledger.account()
    row.update(account_s=time.perf_counter() - wall, account_cpu_s=time.process_time() - cpu,
               epsilon=report.epsilon, method=report.method,
               rows_largest_epsilon=max(entry.epsilon for entry in report.mechanisms))
    event = composed_dp_event(members)
    interval = pld_interval(event, epsilon_hint=report.epsilon_data_independent)
    row["interval"] = interval
    cpu = time.process_time()
    row["merged_pld_epsilon"] = float(event_pld(event, value_discretization_interval=interval)
                                      .get_epsilon_for_delta(DELTA))
    row["merged_pld_cpu_s"] = time.process_time() - cpu
    computations = {"rdp_only": rdp_only_epsilon, "exact": exact_epsilon}
    if compared:
        computations["per_entry_plds"] = lambda chosen: per_entry_plds_epsilon(chosen, interval)
        row["rows_pld_cpu_s"] = rows_pld_cpu_s(members)
    for name, compute in computations.items():
        cpu = time.process_time()
        row[name + "_epsilon"] = compute(members)
        row[name + "_cpu_s"] = time.process_time() - cpu
    print(row, flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--entries-compared", type=int, nargs="*", default=[10, 30, 100],
                        help="ledger sizes also accounted as before (the entries' PLDs composed, one PLD per row)")
    parser.add_argument("--entries", type=int, nargs="*", default=[1000])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    run = provenance.start(command=" ".join(["python", *sys.argv]), seeds=[0, 1, 2],
                           settings={k: v for k, v in vars(args).items() if k != "json"})
    votes = simulate_votes(args.queries, 10)
    account(LaplaceNoisyMax(votes[:1000], GAMMA), delta=DELTA)  # imports and tables, untimed
    rows = {"per_query": per_query(votes, args.repeats)}
    print(rows["per_query"], flush=True)
    rows["stages"] = stages(votes, args.repeats)
    rows["gnmax_tight_repeated_parameters"] = repeated_parameters(100_000)
    print(rows["gnmax_tight_repeated_parameters"], flush=True)
    rows["ledgers"] = [ledger_row(e, compared=True) for e in args.entries_compared]
    rows["ledgers"] += [ledger_row(e, compared=False) for e in args.entries]
    if args.json:
        provenance.write_json(args.json, {"provenance": provenance.finish(run), **rows})


if __name__ == "__main__":
    main()
