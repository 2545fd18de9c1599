"""Mutation testing of privfed's noise code: plant each bug of bench/mutations/, see which check catches it.

Each ``bench/mutations/*.patch`` is a one- or two-line change to the noise a pipeline draws (its first line says
what), none of which touches the accounting: the ledger's ε is unchanged. For the unpatched tree and each patch,
this script copies the tracked files of the checkout into a temporary folder (never the real tree), applies the
patch there with ``git apply``, and runs, in that copy,

* ``privfed.selftest()`` ``--repeats`` times (every conformance check, in one process; the copy's own code is
  imported: the copy is first on the path), for each check's catch rate; ``--correct-repeats`` times on the
  unpatched tree, for the suite's false-alarm rate (with a 95 % Clopper–Pearson upper bound);
* with ``--parameter-check``, ``python -m bench.parameter_fits``: every pipeline's noised configurations fitted
  and their run parameters compared with the ledger (:mod:`privfed.audit.parameters`; deterministic, so once), and
* with ``--audits``, the cheap audits: ``privfed audit`` of a freshly saved FedKT-L1 bundle (integrity and
  arithmetic) and ``privfed audit --empirical examples/audit_fedkt_l1.toml`` (the one-run canary audit).

It records which checks failed for each mutation, and raw JSON with provenance in ``--out`` (written after every
selftest run, so a run cut short keeps what it measured). Runs add up across invocations: the table pools the
selftest runs of every file of :data:`RAW_FILES` per mutation, so the work can be split over several runners and
resumed by a further one with its own ``--out``::

    nice -n 19 python -m bench.mutation_testing --only correct --correct-repeats 30 \\
        --out bench/results/mutation_testing_runs_correct.json
    nice -n 19 python -m bench.mutation_testing --only 01-fedkt-laplace-scale-halved --repeats 10 --out ...
    nice -n 19 python -m bench.mutation_testing --only 19-privatekt-client-keep-probability-plus-uniform-hit \\
        --repeats 0 --parameter-check --out ...
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import provenance

ROOT = Path(__file__).resolve().parents[1]
MUTATIONS = ROOT / "bench" / "mutations"
OUT = ROOT / "bench" / "results" / "mutation_testing.json"
#: The raw results the table renders (repository-relative): the correct code's parameter check and audits, its
#: selftest runs, every planted bug's selftest runs (any number of runners, each its own ``runs_*`` file: a further
#: runner's file joins the table as it is), then the planted bugs' parameter checks and audits (``--repeats 0``).
_RUNS = sorted(f"bench/results/{path.name}" for path in (ROOT / "bench/results").glob("mutation_testing_runs_*.json"))
RAW_FILES = ("bench/results/mutation_testing_correct_parameters.json",
             *[path for path in _RUNS if "_runs_correct" in path],
             *[path for path in _RUNS if "_runs_correct" not in path],
             "bench/results/mutation_testing_parameters.json", "bench/results/mutation_testing_audits.json")


def _copy_tree(destination: Path) -> None:
    """The checkout's tracked and unignored files (what git would commit), copied to ``destination``."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file() and not name.startswith("bench/results/"):
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def _run(command: list[str], cwd: Path, timeout: float) -> tuple[int, str, str, float]:
    env = {**os.environ, "PYTHONPATH": str(cwd), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return 124, "", "timed out", time.perf_counter() - start
    return done.returncode, done.stdout, done.stderr, time.perf_counter() - start


#: One process runs the suite ``repeats`` times (the import is paid once) and prints one JSON report per line, with
#: the CPU seconds the run took (the suite runs in that one process: no workers).
_REPEATED_SELFTEST = ("import json, sys, time\nfrom privfed.audit.selftest import selftest\n"
                      "for _ in range(int(sys.argv[1])):\n    cpu = time.process_time()\n"
                      "    report = selftest().to_dict()\n"
                      "    print(json.dumps({**report, 'cpu_seconds': time.process_time() - cpu}), flush=True)\n")


def _summary(runs: list[dict[str, Any]], seconds: float, code: int | None) -> dict[str, Any]:
    per_check: dict[str, int] = {}
    for run in runs:
        for name in run["failed"]:
            per_check[name] = per_check.get(name, 0) + 1
    return {"exit": code, "runs": runs, "repeats": len(runs), "failing_runs": sum(bool(run["failed"]) for run in runs),
            "per_check": per_check, "failed": sorted(per_check), "seconds": seconds}


def _selftest(tree: Path, repeats: int, progress: Any = None) -> dict[str, Any]:
    """``repeats`` runs of the whole suite in the copy: per run, the checks that failed; per check, how often.

    ``progress(summary)`` is called after every run (the caller writes what was measured so far)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    start, runs = time.perf_counter(), []
    with subprocess.Popen([sys.executable, "-c", _REPEATED_SELFTEST, str(repeats)], cwd=tree, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        for line in process.stdout:
            report = json.loads(line)
            runs.append({"failed": [c["name"] for c in report["checks"] if c["status"] == "fail"],
                         "skipped": [c["name"] for c in report["checks"] if c["status"] == "skipped"],
                         "details": {c["name"]: c["detail"] for c in report["checks"] if c["status"] == "fail"},
                         "seconds": report["seconds"], "cpu_seconds": report["cpu_seconds"]})
            if progress is not None:
                progress(_summary(runs, time.perf_counter() - start, None))
        err = process.stderr.read()
    if len(runs) < repeats:  # a crash of the suite itself counts as a failing run, said as such
        runs += [{"failed": ["(crashed)"], "skipped": [], "details": {"(crashed)": err[-2000:]}, "seconds": None}
                 for _ in range(repeats - len(runs))]
    return _summary(runs, time.perf_counter() - start, process.returncode)


def _parameter_check(tree: Path) -> dict[str, Any]:
    """``python -m bench.parameter_fits`` in the copy: every noised configuration's parameter consistency check."""
    code, out, err, seconds = _run([sys.executable, "-m", "bench.parameter_fits"], tree, 1800)
    try:
        results = json.loads(out.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"exit": code, "failed": ["(crashed)"], "error": err[-2000:], "seconds": seconds}
    return {"exit": code, "failed": sorted(name for name, result in results.items() if result["status"] == "fail"),
            "crashed": sorted(name for name, result in results.items() if result["status"] == "crashed"),
            "results": results, "seconds": seconds}


def _empirical_audit(tree: Path) -> dict[str, Any]:
    code, out, err, seconds = _run([sys.executable, "-m", "privfed", "audit", "--empirical",
                                    "examples/audit_fedkt_l1.toml", "--json"], tree, 900)
    try:
        result = json.loads(out)
    except json.JSONDecodeError:
        return {"exit": code, "violation": None, "error": err[-2000:], "seconds": seconds}
    return {"exit": code, "violation": result["violation"], "epsilon_lower": result["epsilon_lower"],
            "claimed_epsilon": result["claimed_epsilon"], "can_refute": result.get("can_refute"), "seconds": seconds}


def _bundle_audit(tree: Path) -> dict[str, Any]:
    """``privfed demo`` (a FedKT bundle from the mutated code) then ``privfed audit`` of it."""
    code, _, err, seconds = _run([sys.executable, "-m", "privfed", "demo", "--out", "demo-bundle"], tree, 900)
    if code != 0:
        return {"exit": code, "passed": False, "error": err[-2000:], "seconds": seconds}
    code, _, err, more = _run([sys.executable, "-m", "privfed", "audit", "demo-bundle"], tree, 900)
    return {"exit": code, "passed": code == 0, "seconds": seconds + more}


def _caught_by(record: dict[str, Any]) -> list[str]:
    caught = [f"selftest:{name}" for name in record["selftest"]["failed"]] if "selftest" in record else []
    if record.get("parameter_check", {}).get("failed"):
        caught.append("parameter check")
    if record.get("empirical_audit", {}).get("violation"):
        caught.append("audit --empirical")
    if "bundle_audit" in record and not record["bundle_audit"]["passed"]:
        caught.append("audit BUNDLE")
    return caught


def upper_bound(failures: int, runs: int, confidence: float = 0.95) -> float:
    """One-sided Clopper–Pearson upper confidence bound on a rate seen ``failures`` times in ``runs``."""
    from scipy import stats

    return 1.0 if failures >= runs else float(stats.beta.ppf(confidence, failures + 1, runs - failures))


def _pooled(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two selftest summaries of one mutation (separate invocations, e.g. several runners) as one: all their runs."""
    exits = [summary["exit"] for summary in (first, second) if summary["exit"] is not None]
    return _summary(first["runs"] + second["runs"], first["seconds"] + second["seconds"],
                    next((code for code in exits if code), exits[0] if exits else None))


def _merged(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of every raw file, merged by mutation: the selftest runs of every file pooled (so runs add up
    across invocations), the other checks of a later file replacing an earlier one's."""
    merged: dict[str, dict[str, Any]] = {}
    for document in documents:
        for record in document["records"]:
            known = merged.setdefault(record["mutation"], {})
            pooled = _pooled(known["selftest"], record["selftest"]) if "selftest" in known else record["selftest"]
            known.update(record, selftest=pooled)
    for record in merged.values():
        record["caught_by"] = _caught_by(record)
    correct = [merged.pop(CORRECT)] if CORRECT in merged else []
    return correct + [merged[name] for name in sorted(merged)]


def _parameters_cell(parameters: dict[str, Any] | None) -> str:
    if parameters is None:
        return "—"
    if not parameters["failed"]:
        return "pass" + (f" ({', '.join(parameters.get('crashed', []))} crashed)" if parameters.get("crashed") else "")
    return f"FAIL: {', '.join(parameters['failed'])}"


def _empirical_cell(audit: dict[str, Any] | None) -> str:
    if audit is None:
        return "—"
    if audit["violation"] is None:
        return "crashed"
    verdict = "FAIL" if audit["violation"] else "pass"
    return f"{verdict} ({audit['epsilon_lower']:.2f} of claim {audit['claimed_epsilon']:g})"


def _spread(values: list[float], digits: int = 0) -> str:
    """Median and range of ``values``, in seconds."""
    from statistics import median

    return f"median {median(values):.{digits}f} s ({min(values):.{digits}f}–{max(values):.{digits}f} s)"


def table(documents: list[dict[str, Any]]) -> str:
    """The Markdown table of docs/audit.md and docs/results.md: each planted bug, how often each check catches it.

    The selftest runs of every raw file are pooled per mutation; each row says how many runs it has."""
    records = _merged(documents)
    audited = any("bundle_audit" in record or "empirical_audit" in record for record in records)
    header = ["planted bug (bench/mutations/)", "`privfed selftest`: runs failing", "checks that failed (runs)",
              "parameter check",
              *(["`audit BUNDLE`", "`audit --empirical` (FedKT-L1: lower bound)"] if audited else [])]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for record in records:
        selftest = record["selftest"]
        checks = ", ".join(f"{name} ({count})" for name, count in sorted(selftest["per_check"].items())) or "—"
        bundle = record.get("bundle_audit")
        what = record.get("what", "none: privfed's code as committed")
        cells = [f"`{record['mutation']}`: {what}", f"{selftest['failing_runs']}/{selftest['repeats']}", checks,
                 _parameters_cell(record.get("parameter_check"))]
        if audited:
            cells += ["—" if bundle is None else "FAIL" if not bundle["passed"] else "pass",
                      _empirical_cell(record.get("empirical_audit"))]
        lines.append("| " + " | ".join(cells) + " |")
    mutants = [record for record in records if record["mutation"] != CORRECT]
    by_selftest = {record["mutation"] for record in mutants if record["selftest"]["repeats"]
                   and record["selftest"]["failing_runs"] >= 0.9 * record["selftest"]["repeats"]}
    by_parameters = {record["mutation"] for record in mutants if record.get("parameter_check", {}).get("failed")}
    repeats = [record["selftest"]["repeats"] for record in mutants]
    lines.append("")
    if mutants:
        lines.append(f"`privfed selftest` runs per planted bug: {min(repeats)}–{max(repeats)}. Caught in ≥ 90 % of "
                     f"its runs: {len(by_selftest)} of {len(mutants)} planted bugs by `privfed selftest`, "
                     f"{len(by_parameters)} by the parameter check (deterministic: one run), "
                     f"{len(by_selftest | by_parameters)} of {len(mutants)} by one or the other.")
    if records and records[0]["mutation"] == CORRECT:
        selftest = records[0]["selftest"]
        lines.append(f"Correct code: `privfed selftest` failed {selftest['failing_runs']} of {selftest['repeats']} "
                     f"runs, false-alarm rate ≤ {upper_bound(selftest['failing_runs'], selftest['repeats']):.2%} "
                     f"(95 % one-sided Clopper–Pearson upper bound; the suite's design: ≤ 1 %).")
    runs = [run for record in records for run in record["selftest"]["runs"]]
    timed = [run for run in runs if run.get("cpu_seconds") is not None]
    if timed:
        lines.append(f"One `privfed selftest` run ({len(timed)} runs above): "
                     f"CPU {_spread([run['cpu_seconds'] for run in timed], 1)}, "
                     f"wall {_spread([run['seconds'] for run in timed])}.")
    return "\n".join(lines)


CORRECT = "none (correct code)"


def run_one(patch: Path | None, *, audits: bool, repeats: int, parameters: bool,
            progress: Any = None) -> dict[str, Any]:
    """Copy the tree, apply ``patch`` (None: the correct code), run the checks; one record."""
    with tempfile.TemporaryDirectory(prefix="privfed-mutant-") as folder:
        tree = Path(folder)
        _copy_tree(tree)
        record: dict[str, Any] = {"mutation": CORRECT if patch is None else patch.stem}
        if patch is not None:
            record["what"] = patch.read_text(encoding="utf-8").splitlines()[0]
            applied = subprocess.run(["git", "apply", str(patch)], cwd=tree, capture_output=True, text=True)
            if applied.returncode != 0:
                raise RuntimeError(f"{patch.name} does not apply: {applied.stderr.strip()}")
        record["selftest"] = _selftest(tree, repeats, None if progress is None else
                                       lambda summary: progress({**record, "selftest": summary}))
        if parameters:
            record["parameter_check"] = _parameter_check(tree)
        if audits:
            record["empirical_audit"] = _empirical_audit(tree)
            record["bundle_audit"] = _bundle_audit(tree)
        record["caught_by"] = _caught_by(record)
        return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--audits", nargs="*", metavar="PATCH",
                        help="also run the bundle audit and the empirical audit: on the correct code and the patches "
                             "named (stems; none named: every patch)")
    parser.add_argument("--only", nargs="+", help="patch names (stems) to run, 'correct' for the correct code; "
                                                  "default all and the correct code")
    parser.add_argument("--repeats", type=int, default=10, help="selftest runs per planted bug (default 10)")
    parser.add_argument("--correct-repeats", type=int, default=20,
                        help="selftest runs on the correct code, for its false-alarm rate (default 20)")
    parser.add_argument("--parameter-check", action="store_true",
                        help="also fit every pipeline's noised configurations and run the parameter check (once: it "
                             "is deterministic)")
    parser.add_argument("--out", default=str(OUT),
                        help="raw JSON written after every selftest run (the table pools the runs of RAW_FILES)")
    args = parser.parse_args(argv)
    patches = sorted(MUTATIONS.glob("*.patch"))
    if args.only:
        patches = [patch for patch in patches if patch.stem in args.only]
    targets = [*([None] if not args.only or "correct" in args.only else []), *patches]
    run = provenance.start(command=" ".join(["python -m bench.mutation_testing", *(argv or sys.argv[1:])]),
                           seeds=None, settings=vars(args))
    records = []
    audited = None if args.audits is None else set(args.audits or [patch.stem for patch in patches])
    def write(partial: dict[str, Any]) -> None:  # after every selftest run: a run cut short keeps what it measured
        provenance.write_json(args.out, {"provenance": provenance.finish(dict(run)), "records": [*records, partial]})

    for patch in targets:
        record = run_one(patch, audits=audited is not None and (patch is None or patch.stem in audited),
                         repeats=args.correct_repeats if patch is None else args.repeats,
                         parameters=args.parameter_check, progress=write)
        records.append(record)
        print(f"{record['mutation']:45} selftest failing runs {record['selftest']['failing_runs']}/"
              f"{record['selftest']['repeats']}; caught by: {', '.join(record['caught_by']) or 'NOTHING'}", flush=True)
        # Written after every target: a run cut short keeps what it measured.
        provenance.write_json(args.out, {"provenance": provenance.finish(dict(run)), "records": records})
    missed = [r["mutation"] for r in records if r["mutation"] != CORRECT and not r["caught_by"]]
    print(f"{len(records) - len(missed) - (patches != targets)} of {len(patches)} mutations caught; "
          f"{', '.join(missed) or 'none'} missed")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
