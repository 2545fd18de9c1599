"""Benchmark: one FedKT fit on digits with n_jobs=1 and n_jobs=2, with the machine's other core free or kept busy.

The sides alternate within one run (n_jobs=1, n_jobs=2, n_jobs="idle cores", repeated) under two conditions:
"as found" (whatever else runs on the machine) and "one more busy core" (this script starts one spinning
process, by its id, and stops it after the condition). Each fit records its wall time, its CPU seconds (this
process and joblib's worker processes) and the load average before it; every side gives the same model.

Run: ``python bench/workers.py [--repeats N] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(variable, "1")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from privfed.pipelines import federated_split  # noqa: E402
from privfed.pipelines.fedkt.estimator import FedKT  # noqa: E402
from privfed.pipelines.protocol.executor import idle_workers  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.ensemble import RandomForestClassifier  # noqa: E402

from bench import provenance  # noqa: E402
from bench.processes import descendants_cpu  # noqa: E402

#: The sides: label → n_jobs (None: the executor's choice from the idle cores).
SIDES = {"n_jobs=1": 1, "n_jobs=2": 2, "n_jobs=None (idle cores)": None}


#: The spinning process of the busy condition: a child of this one, but not part of the fit.
_SPINNERS: set[int] = set()


def _descendants_cpu() -> float:
    """CPU seconds (user + system) of the live descendant processes of this one (joblib's workers); the spinner
    left out."""
    return sum(seconds for pid, seconds in descendants_cpu().items() if pid not in _SPINNERS)


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system + _descendants_cpu()


def fit_once(split, n_jobs: int | None) -> dict:
    """One FedKT-L1 fit as ``privfed demo`` runs it (20 parties, random forests); its wall and CPU seconds."""
    model = FedKT(RandomForestClassifier(n_estimators=20, max_depth=8), RandomForestClassifier(n_estimators=50),
                  n_partitions=1, n_teachers=2, privacy="L1", gamma=0.5, query_fraction=0.2, random_state=0,
                  n_jobs=n_jobs)
    load = [round(value, 2) for value in os.getloadavg()]
    workers = idle_workers() if n_jobs is None else n_jobs
    cpu, start = _cpu_seconds(), time.perf_counter()
    model.fit(split.parties, split.X_public)
    wall, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    return {"wall_s": wall, "cpu_s": cpu, "load_before": load, "workers": workers,
            "predictions": model.predict(split.X_test)}


def _spinner() -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    _SPINNERS.add(process.pid)
    return process


def _ratio_summary(records: list[dict], condition: str, side: str) -> dict:
    """n_jobs=1's wall time over ``side``'s, pair by pair (>1: ``side`` is faster), and CPU seconds likewise."""
    serial = [r for r in records if r["condition"] == condition and r["side"] == "n_jobs=1"]
    other = [r for r in records if r["condition"] == condition and r["side"] == side]
    speed = [a["wall_s"] / b["wall_s"] for a, b in zip(serial, other)]
    cpu = [b["cpu_s"] / a["cpu_s"] for a, b in zip(serial, other)]
    return {"condition": condition, "side": side, "speedup_median": float(np.median(speed)),
            "speedup_min": min(speed), "speedup_max": max(speed), "cpu_ratio_median": float(np.median(cpu)),
            "cpu_ratio_min": min(cpu), "cpu_ratio_max": max(cpu)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the measurements and the run's provenance here")
    args = parser.parse_args()
    run = provenance.start(command=" ".join(["python", *sys.argv]), seeds=[0],
                           settings={"repeats": args.repeats, "sides": list(SIDES), "pipeline": "FedKT-L1 digits, "
                                     "20 parties, RF(20, depth 8) teachers, RF(50) students, s=1, t=2"})
    X, y = load_digits(return_X_y=True)
    split = federated_split(X, y, n_parties=20, beta=1.0, public_size=500, test_size=297, min_size=20,
                            random_state=0)
    fit_once(split, 2)  # warm imports and joblib's pool
    records, reference = [], None
    for condition in ("as found", "one more busy core"):
        spinner = _spinner() if condition == "one more busy core" else None
        try:
            for repeat in range(args.repeats):
                for side, n_jobs in SIDES.items():
                    result = fit_once(split, n_jobs)
                    predictions = result.pop("predictions")
                    reference = predictions if reference is None else reference
                    assert np.array_equal(predictions, reference), "every side must give the same model"
                    records.append({"condition": condition, "repeat": repeat, "side": side, **result})
                    print(records[-1], flush=True)
        finally:
            if spinner is not None:
                spinner.kill()
                spinner.wait()
    summary = [_ratio_summary(records, condition, side) for condition in ("as found", "one more busy core")
               for side in SIDES if side != "n_jobs=1"]
    for row in summary:
        print(row)
    if args.json:
        provenance.write_json(args.json, {"provenance": provenance.finish(run), "records": records,
                                          "summary": summary})


if __name__ == "__main__":
    main()
