"""What a fresh process pays before it does anything: CPU seconds, wall seconds and peak RSS of privfed's entry points.

Each entry point runs in a fresh interpreter (``/usr/bin/time`` reports the child's user + system CPU seconds, wall
seconds and peak resident memory) from two trees, alternately:

* before: the code at ``--before`` (default: the merge base with ``main``), checked out with
  ``git worktree add --detach`` at a temporary path and removed at the end;
* after: this tree.

Entry points: ``import privfed``, ``privfed --help``, ``privfed audit --help``, ``import privfed.accounting``,
``privfed audit BUNDLE`` on a small scikit-learn tree bundle (written by this tree's ``save_bundle``) and
``privfed audit --no-model-load BUNDLE`` (every check but opening the model), ``privfed budget show SILO`` on a
silo budget of three charges (written by this tree's ``SiloBudget``), a new process's check of a release against
it (as ``bench/silo_budget.py``'s), the modules of the Flower ClientApp and ServerApp, and a black-box empirical
audit of one DP-SGD fit (60 canaries: one fit, and its ε as the claim). What stands below them is measured the
same way, from this tree only (the *floor*): the bare interpreter, numpy, ``scipy.stats``, dp-accounting, ``sklearn.ensemble``, skops
(through privfed's torch-free import) and model-signing's verifier. CPU seconds do not grow when other
processes share the cores; wall seconds do (the load is recorded). Usage::

    python -m bench.import_costs [--repeats 3] [--json bench/results/import_costs.json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import provenance

ROOT = provenance.ROOT
RESULTS = ROOT / "bench" / "results" / "import_costs.json"

#: A new process checks one randomized-response release against SILO, as ``bench/silo_budget.py``'s new process.
_CHECK_SILO = """
import sys
from privfed.accounting import RandomizedResponse
from privfed.accounting.silo_budget import SiloBudget
SiloBudget.open(sys.argv[1]).fits(RandomizedResponse(10, epsilon=1e-4, reports=1, unit="example"))
"""
#: A black-box empirical audit of one DP-SGD fit (issue 46: "94 % of it in ε accounting"): its claim is the run's ε.
_DPSGD_AUDIT = """
import numpy as np
from privfed import DPConfig, TorchMLP, empirical_audit
rng = np.random.default_rng(0)
X = rng.normal(size=(400, 8))
y = (X[:, 0] + X[:, 1] > 0).astype(int)
model = TorchMLP(hidden=(16,), epochs=2, batch_size=32, lr=0.05, random_state=0,
                 dp=DPConfig(noise_multiplier=1.0, max_grad_norm=1.0, delta=1e-5, sample_rate=0.1))
empirical_audit(model, [(X[:200], y[:200])], X[200:], num_canaries=60, random_state=0)
"""
#: name → arguments after ``python`` (``{bundle}``: the bundle's path), run from each tree.
ENTRY_POINTS = {
    "import privfed": ["-c", "import privfed"],
    "privfed --help": ["-m", "privfed", "--help"],
    "privfed audit --help": ["-m", "privfed", "audit", "--help"],
    "import privfed.accounting": ["-c", "import privfed.accounting"],
    "privfed audit BUNDLE (trees)": ["-m", "privfed", "audit", "{bundle}"],
    "privfed audit --no-model-load BUNDLE (trees)": ["-m", "privfed", "audit", "--no-model-load", "{bundle}"],
    "privfed budget show SILO": ["-m", "privfed", "budget", "show", "{silo}"],
    "silo budget check of a release (bench/silo_budget.py's new process)": ["-c", _CHECK_SILO, "{silo}"],
    "Flower ClientApp module": ["-c", "import privfed.federation.client_app"],
    "Flower ServerApp module": ["-c", "import privfed.federation.server_app"],
    "empirical audit of a DP-SGD fit (black-box, 60 canaries)": ["-c", _DPSGD_AUDIT],
}
#: What the entry points stand on, each imported alone from this tree.
FLOOR = {
    "bare interpreter": "pass",
    "numpy": "import numpy",
    "scipy.stats": "import scipy.stats",
    "dp_accounting": "import dp_accounting",
    "sklearn.ensemble": "import sklearn.ensemble",
    "sklearn.ensemble + skops.io (torch-free)": "import sklearn.ensemble\n"
                                                "from privfed.bundle.skops_import import import_skops_io; import_skops_io()",
    "model_signing.verifying": "import model_signing.verifying",
}
#: Writes the audited bundle: a 2-tree forest and a Laplace noisy-max ledger (the adversarial probes' bundle).
_WRITE_BUNDLE = """
import sys
import numpy as np
from sklearn.ensemble import RandomForestClassifier
from privfed import LaplaceNoisyMax, Ledger, NoiseSource, save_bundle
votes = np.random.default_rng(1).integers(0, 10, size=(20, 2))
ledger = Ledger(delta=1e-5, description="import costs")
ledger.record({"party": LaplaceNoisyMax(votes, 0.05, 1, unit="party"),
               "example": LaplaceNoisyMax(votes, 0.05, 2, unit="example")})
ledger.record_noise_source(NoiseSource.secret())
features = np.random.default_rng(0).normal(size=(40, 3)).astype(np.float32)
forest = RandomForestClassifier(n_estimators=2, max_depth=2, random_state=0).fit(features, features[:, 0] > 0)
save_bundle(forest, sys.argv[1], ledger)
"""
#: Writes the silo budget that ``privfed budget show`` reads: three randomized-response charges.
_WRITE_SILO = """
import sys
from privfed.accounting import RandomizedResponse
from privfed.accounting.silo_budget import SiloBudget
budget = SiloBudget(sys.argv[1], epsilon=10.0, delta=1e-5)
for study in ("a", "b", "c"):
    budget.charge(RandomizedResponse(10, epsilon=0.5, reports=1, unit="example"), study=study, pipeline="fedkt")
"""


def _git(*arguments: str) -> str:
    return subprocess.run(["git", *arguments], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def _timed(tree: Path, arguments: list[str]) -> dict:
    """Run ``python ARGUMENTS`` with ``tree``'s code in a fresh interpreter; its CPU, wall, peak RSS and exit code."""
    environment = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        done = subprocess.run(["/usr/bin/time", "-f", "%e %U %S %M", "-o", report.name, sys.executable, *arguments],
                              cwd=tree, env=environment, capture_output=True, text=True, check=False)
        wall, user, system, peak_kb = report.read().split()[-4:]
    return {"cpu_s": round(float(user) + float(system), 3), "wall_s": float(wall),
            "peak_rss_mb": round(int(peak_kb) / 1024, 1), "exit_code": done.returncode,
            "load": [round(value, 2) for value in os.getloadavg()]}


def _median(records: list[dict], key: str) -> float:
    return round(statistics.median(record[key] for record in records), 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.import_costs", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", default=None, help="the commit to compare with (default: merge base with main)")
    parser.add_argument("--json", type=Path, default=RESULTS, help="where the raw results go")
    arguments = parser.parse_args(argv)
    before_commit = arguments.before or _git("merge-base", "HEAD", "main")
    run = provenance.start(command="python -m bench.import_costs " + " ".join(argv or sys.argv[1:]), seeds=None,
                           settings={"repeats": arguments.repeats, "before": before_commit})
    scratch = Path(tempfile.mkdtemp(prefix="privfed-import-costs-"))
    old_tree = scratch / "before"
    _git("worktree", "add", "--detach", str(old_tree), before_commit)
    records = []
    try:
        bundle = scratch / "BUNDLE"
        subprocess.run([sys.executable, "-c", _WRITE_BUNDLE, str(bundle)], cwd=ROOT, check=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
        silo = scratch / "silo.jsonl"
        subprocess.run([sys.executable, "-c", _WRITE_SILO, str(silo)], cwd=ROOT, check=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
        trees = {"before": old_tree, "after": ROOT}
        for repeat in range(arguments.repeats):
            for name, command in ENTRY_POINTS.items():
                command = [part.format(bundle=bundle, silo=silo) for part in command]
                for side in (("before", "after") if repeat % 2 == 0 else ("after", "before")):
                    record = {"side": side, "entry": name, "repeat": repeat, **_timed(trees[side], command)}
                    print(record, flush=True)
                    records.append(record)
            for name, code in FLOOR.items():
                record = {"side": "floor", "entry": name, "repeat": repeat, **_timed(ROOT, ["-c", code])}
                print(record, flush=True)
                records.append(record)
    finally:
        _git("worktree", "remove", "--force", str(old_tree))
        shutil.rmtree(scratch, ignore_errors=True)
    summary = {}
    for side, names in (("before", ENTRY_POINTS), ("after", ENTRY_POINTS), ("floor", FLOOR)):
        for name in names:
            rows = [r for r in records if r["side"] == side and r["entry"] == name]
            summary.setdefault(name, {})[side] = {"cpu_s_median": _median(rows, "cpu_s"),
                                                  "wall_s_median": _median(rows, "wall_s"),
                                                  "peak_rss_mb_median": _median(rows, "peak_rss_mb"),
                                                  "exit_codes": sorted({r["exit_code"] for r in rows})}
    provenance.write_json(arguments.json, {"provenance": provenance.finish(run), "before_commit": before_commit,
                                           "summary": summary, "records": records})
    print(f"wrote {arguments.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
