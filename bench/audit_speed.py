"""CPU seconds of ``privfed audit BUNDLE`` on a tree bundle, before and after skops stopped importing torch.

One bundle is written by ``privfed demo`` (digits, FedKT with a RandomForest → ``model.skops``); then
``python -m privfed audit BUNDLE`` runs in a fresh interpreter from two trees, alternately (one untimed run of
each first, which warms the file cache):

* before: the code at ``--before`` (default: the merge base with ``main``), checked out with
  ``git worktree add --detach`` at a temporary path and removed at the end;
* after: this tree.

Each run's CPU time is the child's user + system time (``resource.getrusage(RUSAGE_CHILDREN)``, measured around
the one child). Both sides must print the same report (checked). What stands between "after" and 1 CPU s is
measured the same way, in fresh interpreters from this tree, after each repeat: importing what the model itself needs
(``sklearn.ensemble``), ``skops.io`` without torch (which imports every scikit-learn module to list its
estimators), and privfed's audit (the ε accounting it recomputes with). Usage::

    python bench/audit_speed.py [--repeats 5] [--json bench/results/audit_speed.json]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import provenance  # noqa: E402


def _git(*arguments: str) -> str:
    return subprocess.run(["git", *arguments], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


#: Imports an audit of a scikit-learn bundle cannot do without, each timed alone in a fresh interpreter.
FLOOR = {"python": "pass", "sklearn.ensemble": "import sklearn.ensemble",
         "skops.io without torch": "from privfed.bundle.skops_import import import_skops_io; import_skops_io()",
         "privfed.audit": "from privfed import audit"}


def _privfed(tree: Path, *arguments: str) -> tuple[float, float, int, str]:
    """Run ``python -m privfed ARGUMENTS`` with ``tree``'s code; its CPU and wall seconds, exit code and stdout."""
    return _python(tree, "-m", "privfed", *arguments)


def _python(tree: Path, *arguments: str) -> tuple[float, float, int, str]:
    """Run ``python ARGUMENTS`` with ``tree``'s code; its CPU and wall seconds, exit code and stdout."""
    environment = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    result = subprocess.run([sys.executable, *arguments], cwd=tree, env=environment,
                            capture_output=True, text=True, check=False)
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, result.returncode, result.stdout


def _code_file(tree: Path) -> str:
    """Where ``tree``'s interpreter imports privfed from (checks that each side runs its own code)."""
    return subprocess.run([sys.executable, "-c", "import privfed; print(privfed.__file__)"], cwd=tree,
                          env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True,
                          check=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--before", default=None, help="the commit to compare with (default: merge base with main)")
    parser.add_argument("--json", help="write the raw results here")
    args = parser.parse_args()
    before_commit = args.before or _git("merge-base", "HEAD", "main")
    run = provenance.start(command="python " + " ".join(sys.argv), seeds=None,
                           settings={**vars(args), "before": before_commit})

    scratch = Path(tempfile.mkdtemp(prefix="privfed-audit-speed-"))
    old_tree = scratch / "before"
    _git("worktree", "add", "--detach", str(old_tree), before_commit)
    try:
        bundle = scratch / "bundle"
        _, _, code, _ = _privfed(ROOT, "demo", "--out", str(bundle))
        if code != 0:
            raise RuntimeError(f"privfed demo exited with {code}")
        trees = {"before": old_tree, "after": ROOT}
        code_files = {side: _code_file(tree) for side, tree in trees.items()}
        reports = {side: _privfed(tree, "audit", str(bundle))[3] for side, tree in trees.items()}  # untimed
        if reports["before"] != reports["after"]:
            raise RuntimeError("the two trees print different audit reports")
        records = []
        for repeat in range(args.repeats):
            for side in (("before", "after") if repeat % 2 == 0 else ("after", "before")):
                cpu, wall, code, _ = _privfed(trees[side], "audit", str(bundle))
                records.append({"side": side, "repeat": repeat, "cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
                                "exit_code": code, "load": [round(value, 2) for value in os.getloadavg()]})
                print(f"{side:6} repeat {repeat}: {cpu:.2f} CPU s, {wall:.2f} s wall, exit {code}", flush=True)
            for part, code_text in FLOOR.items():
                cpu, wall, code, _ = _python(ROOT, "-c", code_text)
                records.append({"side": "floor", "part": part, "repeat": repeat, "cpu_s": round(cpu, 3),
                                "wall_s": round(wall, 3), "exit_code": code})
    finally:
        _git("worktree", "remove", "--force", str(old_tree))
    summary = {}
    for side in trees:
        cpu = [record["cpu_s"] for record in records if record["side"] == side]
        summary[side] = {"cpu_s_median": round(statistics.median(cpu), 3), "cpu_s_min": min(cpu),
                         "cpu_s_max": max(cpu)}
    for part in FLOOR:
        cpu = [record["cpu_s"] for record in records if record.get("part") == part]
        summary[f"floor: {part}"] = {"cpu_s_median": round(statistics.median(cpu), 3)}
        print(f"floor: {part}: median {summary[f'floor: {part}']['cpu_s_median']} CPU s")
    summary["ratio_median"] = round(summary["before"]["cpu_s_median"] / summary["after"]["cpu_s_median"], 2)
    print(f"median CPU s: before {summary['before']['cpu_s_median']}, after {summary['after']['cpu_s_median']} "
          f"(×{summary['ratio_median']} less)")
    if args.json:
        provenance.write_json(args.json, {"provenance": provenance.finish(run), "before_commit": before_commit,
                                          "code_files": code_files, "bundle": "privfed demo (RandomForest, skops)",
                                          "same_report": True, "summary": summary, "records": records})


if __name__ == "__main__":
    main()
