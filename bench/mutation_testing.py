"""Mutation testing of privfed's noise code: plant each bug of bench/mutations/, see which check catches it.

Each ``bench/mutations/*.patch`` is a one- or two-line change to the noise a pipeline draws (its first line says
what), none of which touches the accounting: the ledger's ε is unchanged. For the unpatched tree and each patch,
this script copies the tracked files of the checkout into a temporary folder (never the real tree), applies the
patch there with ``git apply``, and runs, in that copy,

* ``privfed selftest --json`` (every conformance check; the copy's own code is imported: privfed adds the checkout
  it is run from to its path), and
* with ``--audits``, the cheap audits: ``privfed audit`` of a freshly saved FedKT-L1 bundle (integrity and
  arithmetic) and ``privfed audit --empirical examples/audit_fedkt_l1.toml`` (the one-run canary audit).

It records which checks failed for each mutation, and raw JSON with provenance in
bench/results/mutation_testing.json::

    nice -n 10 python -m bench.mutation_testing --audits 01-fedkt-laplace-scale-halved
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


def _selftest(tree: Path) -> dict[str, Any]:
    code, out, err, seconds = _run([sys.executable, "-m", "privfed", "selftest", "--json"], tree, 900)
    try:
        report = json.loads(out)
    except json.JSONDecodeError:
        return {"exit": code, "failed": ["(crashed)"], "error": err[-2000:], "seconds": seconds}
    return {"exit": code, "failed": [c["name"] for c in report["checks"] if c["status"] == "fail"],
            "skipped": [c["name"] for c in report["checks"] if c["status"] == "skipped"],
            "details": {c["name"]: c["detail"] for c in report["checks"] if c["status"] == "fail"},
            "seconds": seconds}


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
    caught = [f"selftest:{name}" for name in record["selftest"]["failed"]]
    if record.get("empirical_audit", {}).get("violation"):
        caught.append("audit --empirical")
    if "bundle_audit" in record and not record["bundle_audit"]["passed"]:
        caught.append("audit BUNDLE")
    return caught


def table(records: list[dict[str, Any]]) -> str:
    """The Markdown table of docs/audit.md and docs/results.md: each mutation, what catches it."""
    lines = ["| planted bug (bench/mutations/) | `privfed selftest` fails | `audit BUNDLE` | "
             "`audit --empirical` (FedKT-L1) |",
             "|---|---|---|---|"]
    for record in records:
        failed = record["selftest"]["failed"]
        bundle = record.get("bundle_audit")
        empirical = record.get("empirical_audit")
        what = record.get("what", "none: privfed's code as committed")
        lines.append(f"| `{record['mutation']}`: {what} | {', '.join(failed) or '—'} | "
                     f"{'—' if bundle is None else 'FAIL' if not bundle['passed'] else 'pass'} | "
                     f"{'—' if empirical is None else 'FAIL' if empirical['violation'] else 'pass'} |")
    caught = sum(bool(record["caught_by"]) for record in records[1:])
    lines.append("")
    lines.append(f"{caught} of {len(records) - 1} planted bugs caught, "
                 f"{sum(bool(r['selftest']['failed']) for r in records[1:])} by `privfed selftest`; "
                 f"correct code: {'flagged' if records[0]['caught_by'] else 'no check fails'}.")
    return "\n".join(lines)


def run_one(patch: Path | None, audits: bool) -> dict[str, Any]:
    """Copy the tree, apply ``patch`` (None: the correct code), run the checks; one record."""
    with tempfile.TemporaryDirectory(prefix="privfed-mutant-") as folder:
        tree = Path(folder)
        _copy_tree(tree)
        record: dict[str, Any] = {"mutation": "none (correct code)" if patch is None else patch.stem}
        if patch is not None:
            record["what"] = patch.read_text(encoding="utf-8").splitlines()[0]
            applied = subprocess.run(["git", "apply", str(patch)], cwd=tree, capture_output=True, text=True)
            if applied.returncode != 0:
                raise RuntimeError(f"{patch.name} does not apply: {applied.stderr.strip()}")
        record["selftest"] = _selftest(tree)
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
    parser.add_argument("--only", nargs="+", help="patch names (stems) to run; default all")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    patches = sorted(MUTATIONS.glob("*.patch"))
    if args.only:
        patches = [patch for patch in patches if patch.stem in args.only]
    run = provenance.start(command=" ".join(["python -m bench.mutation_testing", *(argv or sys.argv[1:])]),
                           seeds=None, settings=vars(args))
    records = []
    audited = None if args.audits is None else set(args.audits or [patch.stem for patch in patches])
    for patch in [None, *patches]:
        record = run_one(patch, audited is not None and (patch is None or patch.stem in audited))
        records.append(record)
        print(f"{record['mutation']:45} caught by: {', '.join(record['caught_by']) or 'NOTHING'}", flush=True)
    provenance.write_json(args.out, {"provenance": provenance.finish(run), "records": records})
    missed = [r["mutation"] for r in records[1:] if not r["caught_by"]]
    false_alarm = bool(records[0]["caught_by"])
    print(f"{len(patches) - len(missed)} of {len(patches)} mutations caught; correct code "
          f"{'FLAGGED' if false_alarm else 'passes'}")
    return 1 if missed or false_alarm else 0


if __name__ == "__main__":
    sys.exit(main())
