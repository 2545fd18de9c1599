"""A silo's budget: how long a check takes on a ledger of 10,000 releases, how the file grows, what adaptivity costs.

**Timing.** One ledger is filled through ``SiloBudget.charge`` (each charge verified, written and fsynced, as
in use) with a small randomized-response release; at each checkpoint (``--checkpoints``, the last 10,000 by
default) it measures, pinned to at most 2 CPU cores (``os.sched_setaffinity``) where the OS allows:

* ``full_scan_ms``: ``SiloBudget.open(path).fits(release)`` with no checked state beside the ledger (the
  ``.checked`` file removed): read the file, check both hashes of every line, read the totals from the last line —
  how every first check ran before the checked state (median of ``--repeats``);
* ``cold_check_ms``: the same with the checked state the last check left: check that the file's stamp is the
  recorded one and the last line is intact at its place, read its totals (median of ``--repeats``);
* ``new_process``: a new Python process (``sys.executable -c``, pinned like this one) that imports
  ``privfed.accounting.silo_budget`` and checks the release: its wall time from spawn to exit, the import time and
  the check's time measured inside it (medians of ``--repeats``);
* ``warm_check_ms``: ``fits(release)`` again on that object after another process appended a charge —
  re-hash the file's bytes, parse only the new line (median of ``--repeats``);
* ``charge_ms``: one ``charge`` on the warm object, fsync included (median of ``--repeats``);
* the file's size in bytes and per release.

**Cost of adaptivity.** For documented sequences of releases (DP-SGD, Gaussian answers, randomized response,
mixed), the ε the silo's filter certifies for the sequence (:mod:`privfed.accounting.privacy_filter`) against
the ε of the same releases composed with fixed parameters (``non_adaptive_epsilon``: the tight RDP conversion or
basic composition, whichever is smaller), and how many copies of each study fit a budget of ε = ``--budget-epsilon``
under each.

Usage::

    python bench/silo_budget.py [--checkpoints 1000 5000 10000] [--json bench/results/silo_budget/silo_budget.json]
    python bench/silo_budget.py --render bench/results/silo_budget/silo_budget.json   # the tables of docs/budget.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench import provenance  # noqa: E402

DELTA = 1e-5


def _milliseconds(action, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(1000.0 * (time.perf_counter() - start))
    return statistics.median(times)


_NEW_PROCESS = """
import json, sys, time
started = time.perf_counter()
from privfed.accounting import RandomizedResponse
from privfed.accounting.silo_budget import SiloBudget
imported = time.perf_counter()
SiloBudget.open(sys.argv[1]).fits(RandomizedResponse(10, epsilon=1e-4, reports=1, unit="example"))
print(json.dumps({"import_ms": 1000 * (imported - started), "check_ms": 1000 * (time.perf_counter() - imported)}))
"""


def new_process(path: Path, repeats: int) -> dict[str, float]:
    """Medians over ``repeats`` new processes: wall time from spawn to exit, import time, the check's time."""
    import subprocess

    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", _NEW_PROCESS, str(path)], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
        runs.append({**json.loads(out), "wall_ms": 1000.0 * (time.perf_counter() - start)})
    return {key: statistics.median(run[key] for run in runs) for key in ("wall_ms", "import_ms", "check_ms")}


def timing(checkpoints: list[int], repeats: int) -> list[dict[str, Any]]:
    from privfed.accounting import RandomizedResponse
    from privfed.accounting.silo_budget import SiloBudget

    release = RandomizedResponse(10, epsilon=1e-4, reports=1, unit="example")  # small: 10,000 of them fit
    rows = []
    with tempfile.TemporaryDirectory(prefix="privfed-silo-") as folder:
        path = Path(folder) / "silo.jsonl"
        writer = SiloBudget(path, epsilon=10.0, delta=DELTA)
        count = 0
        for checkpoint in sorted(checkpoints):
            fill_start = time.perf_counter()
            while count < checkpoint:
                writer.charge(release, study=f"study-{count // 100}", pipeline="privatekt")
                count += 1
            fill_seconds = time.perf_counter() - fill_start
            checked_state = path.with_name(path.name + ".checked")

            def full_scan() -> None:
                checked_state.unlink(missing_ok=True)
                SiloBudget.open(path).fits(release)

            full = _milliseconds(full_scan, repeats)  # each leaves the checked state behind
            cold = _milliseconds(lambda: SiloBudget.open(path).fits(release), repeats)
            spawned = new_process(path, repeats)
            reader = SiloBudget.open(path)
            reader.fits(release)

            def warm_check() -> None:
                reader.fits(release)

            warm_times = []
            for _ in range(repeats):  # another process appended one charge since the reader's last look
                writer.charge(release, study="concurrent", pipeline="privatekt")
                count += 1
                warm_times.append(_milliseconds(warm_check, 1))
            charge = _milliseconds(lambda: reader.charge(release, study="timed", pipeline="privatekt"), repeats)
            count += repeats
            size = path.stat().st_size
            rows.append({"releases": checkpoint, "full_scan_ms": full, "cold_check_ms": cold, "new_process": spawned,
                         "warm_check_ms": statistics.median(warm_times), "charge_ms": charge, "file_bytes": size,
                         "bytes_per_release": size / count, "fill_seconds": fill_seconds})
            print(f"{checkpoint:>6} releases: full scan {full:.1f} ms, first check {cold:.1f} ms, new process "
                  f"{spawned['wall_ms']:.0f} ms (imports {spawned['import_ms']:.0f} ms, check "
                  f"{spawned['check_ms']:.1f} ms), warm check {rows[-1]['warm_check_ms']:.1f} ms, charge {charge:.1f} "
                  f"ms, {size / 2**20:.2f} MiB ({size / count:.0f} B per release)", flush=True)
    return rows


def _examples() -> list[tuple[str, list[Any]]]:
    """(name, the releases of one study) for each documented example."""
    import dp_accounting
    from privfed.accounting import DPSGD, DpEventRelease, RandomizedResponse

    gaussian_answers = DpEventRelease(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(40.0), 1000),
                                      unit="example")
    return [
        ("DP-SGD, σ = 1.1, q = 0.01, 1,000 steps", [DPSGD(1.1, 0.01, 1000)]),
        ("Gaussian answers, σ = 40 (sensitivity 1), 1,000 answers", [gaussian_answers]),
        ("randomized response, 10 classes, ε₀ = 1, 10 rounds", [RandomizedResponse(10, epsilon=1.0, reports=10,
                                                                                   unit="example")]),
        ("randomized response, 10 classes, ε₀ = 0.1, 10 rounds", [RandomizedResponse(10, epsilon=0.1, reports=10,
                                                                                     unit="example")]),
        ("mixed: DP-SGD (σ = 1.1, q = 0.01, 1,000 steps) + 1,000 Gaussian answers (σ = 40)",
         [DPSGD(1.1, 0.01, 1000), gaussian_answers]),
    ]


def adaptivity(studies: list[int], budget_epsilon: float) -> list[dict[str, Any]]:
    from privfed.accounting.privacy_filter import RenyiFilter, non_adaptive_epsilon
    from privfed.accounting.silo_budget import release_cost

    rule = RenyiFilter(epsilon=budget_epsilon, delta=DELTA)
    rows = []
    for name, releases in _examples():
        cost = sum(release_cost(r, rule.orders, unit="example")[1] for r in releases)
        row: dict[str, Any] = {"example": name, "epsilon": {}}
        for count in studies:
            filtered = rule.epsilon_of(sum([cost] * count))
            fixed = non_adaptive_epsilon(releases * count, DELTA)
            row["epsilon"][str(count)] = {"filter": filtered, "non_adaptive": fixed, "ratio": filtered / fixed}
        fit_filter, spent = 0, np.zeros_like(cost)
        while rule.admits(spent, cost):
            fit_filter, spent = fit_filter + 1, spent + cost
        fit_fixed = 0
        while non_adaptive_epsilon(releases * (fit_fixed + 1), DELTA) <= budget_epsilon:
            fit_fixed += 1
        row["studies_that_fit"] = {"filter": fit_filter, "non_adaptive": fit_fixed}
        rows.append(row)
        print(f"{name}: " + ", ".join(f"{k} studies ε {v['filter']:.3g} vs {v['non_adaptive']:.3g}"
                                      for k, v in row["epsilon"].items())
              + f"; studies within ε = {budget_epsilon:g}: {fit_filter} vs {fit_fixed}", flush=True)
    return rows


def render(document: dict[str, Any]) -> str:
    """The two tables docs/budget.md shows, from a raw-results file."""
    settings = document["provenance"]["settings"]
    lines = [f"Budget checks, pinned to {document['cores']} CPU cores ({provenance.describe(document)}):", "",
             "| releases in the ledger | file size | bytes per release | first check, whole file scanned | "
             "first check, from the checked state | new process: check / imports / wall | "
             "check after another process charged | charge (fsync included) |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in document["timing"]:
        spawned = row["new_process"]
        lines.append(f"| {row['releases']:,} | {row['file_bytes'] / 2**20:.2f} MiB | {row['bytes_per_release']:.0f} | "
                     f"{row['full_scan_ms']:.1f} ms | {row['cold_check_ms']:.1f} ms | {spawned['check_ms']:.1f} ms / "
                     f"{spawned['import_ms']:,.0f} ms / {spawned['wall_ms']:,.0f} ms | {row['warm_check_ms']:.1f} ms | "
                     f"{row['charge_ms']:.1f} ms |")
    counts = [str(c) for c in settings["studies"]]
    lines += ["", f"ε at δ = {DELTA:g} of n copies of one study: the silo's filter (valid under adaptive choices) / "
                  "fixed-parameter composition (tight RDP conversion or basic composition), and how many copies fit a "
                  "budget of "
                  f"ε = {settings['budget_epsilon']:g}:", "",
              "| one study | " + " | ".join(f"n = {c}" for c in counts) + " | studies that fit (filter / fixed) |",
              "| --- | " + " | ".join("---:" for _ in counts) + " | ---: |"]
    for row in document["adaptivity"]:
        cells = [f"{row['epsilon'][c]['filter']:.3g} / {row['epsilon'][c]['non_adaptive']:.3g} "
                 f"(×{row['epsilon'][c]['ratio']:.2f})" for c in counts]
        fit = row["studies_that_fit"]
        lines.append(f"| {row['example']} | " + " | ".join(cells) + f" | {fit['filter']} / {fit['non_adaptive']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=int, nargs="+", default=[1000, 5000, 10000],
                        help="ledger sizes (releases) at which to measure")
    parser.add_argument("--repeats", type=int, default=7, help="measurements per figure (their median is kept)")
    parser.add_argument("--studies", type=int, nargs="+", default=[1, 3, 10], help="copies of each example study")
    parser.add_argument("--budget-epsilon", type=float, default=8.0, help="the budget of the 'studies that fit'")
    parser.add_argument("--json", help="write the raw results here")
    parser.add_argument("--render", metavar="JSON", help="print the tables of a raw-results file and stop")
    args = parser.parse_args()
    if args.render:
        print(render(json.loads(Path(args.render).read_text())))
        return
    settings = {k: v for k, v in vars(args).items() if k not in ("json", "render")}
    run = provenance.start(command=" ".join(sys.argv), seeds=None, settings=settings)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if hasattr(os, "sched_setaffinity") and cores and cores > 2:
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:2]))
        cores = 2
    document = {"cores": cores, "adaptivity": adaptivity(args.studies, args.budget_epsilon),
                "timing": timing(args.checkpoints, args.repeats)}
    document = {"provenance": provenance.finish(run), **document}
    if args.json:
        provenance.write_json(args.json, document)
    print(render(document))


if __name__ == "__main__":
    main()
