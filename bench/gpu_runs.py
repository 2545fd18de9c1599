"""GPU-ready runs: the reproductions a 2-core CPU cannot finish, in chunks of at most ``--chunk-minutes``.

Each plan is a list of steps; a step is one resumable bench command and the raw JSON file it completes:

* ``privatekt-round-500`` (docs/results.md, PrivateKT "authors' demo log, round 500"): ``bench/privatekt.py``
  with the authors' settings (their CNN, Keras initialisation, SGD) for 500 rounds, both client splits
  (privfed's Dirichlet and the authors' label mixture), seeds 0, 1, 2; a checkpoint after every round. Writes
  ``bench/results/privatekt_round500_{split}_seed{seed}.json`` (every round's test accuracy, the ledger's ε,
  the buffer's label quality), compared with the authors' log at rounds 100 and 500.
* ``selective-fd-authors-rounds`` (Selective-FD, Table 1 at the authors' round count): ``bench/selective_fd.py``
  on MNIST, strong non-IID, with the authors' demo protocol (20,000 rounds of 1 local step and 10 distillation
  steps on 512 proxy images; learning curve every 500 rounds), Selective-FD soft, then FedMD soft, then
  independent learning, seed 0 first; a checkpoint after every round. Writes
  ``bench/results/selective_fd_authors_rounds_seed{seed}.json``.
* ``fedkt-mnist-paper`` (FedKT Table 1, MNIST FedKT-L0 at the paper's settings, today's code): ``bench/fedkt.py
  --settings mnist-l0-paper`` for seeds 0–4 in both protocols (standard; the official code's protocol). The unit
  of progress is one seed (about 700–1,000 s on 2 CPU cores, ``--n-jobs`` parallel teachers on the GPU
  machine's cores): a chunk too short for one seed makes no progress (the status file shows every chunk of a
  step stopped at the deadline). Writes
  ``bench/results/fedkt_mnist_l0_paper_today{,_official_protocol}.json``.
* ``fedkt-mnist-tables-6-7`` (FedKT Tables 6 and 7, MNIST): ``bench/fedkt_sweeps.py --datasets MNIST`` — FedKT-L0 at
  the ``mnist-l0-paper`` setting on the official code's image protocol — one step per (cell, seed): Table 6's
  s = 1…5 with t = 5 and Table 7's t = 10, 15, 20 with s = 2 (Table 7's t = 5 is Table 6's s = 2: run once),
  8 cells × seeds 0–4 = 40 steps, seed by seed. Writes ``bench/results/fedkt_tables_6_7_mnist.json``, which
  ``python -m bench.tables fedkt-table-6 fedkt-table-7 fedkt-tables-6-7-welch`` reads beside the Adult and cod-rna
  runs once it exists. Cost, in units of one ``mnist-l0-paper`` seed with s = 2, t = 5 (623–760 s on one quiet
  CPU core, 100 epochs of batch-32 Adam steps): a party's teachers see its rows s times whatever t is, and its
  s students and the final model train on the 5,000 public images, so a run costs about s/2 of it; a larger t
  adds only the smaller teachers' fixed costs (measured on one core, 3 epochs: 2,400 rows in one teacher 0.20 CPU
  s, in 5 teachers of 480 rows ×1.05, in 10 of 240 ×1.2, in 20 of 120 ×1.5; load 2.2). Per seed: s = 1 0.5,
  s = 2 1, s = 3 1.5, s = 4 2, s = 5 2.5, t = 10 1.03, t = 15 1.04, t = 20 1.06, about 10.6 in all; the plan
  ≈ 53 units ≈ 33,000–40,000 CPU core-seconds (9–11 h on one core; scaling with s·t instead would give 16.5
  per seed, 14–17 h: an upper bound). With ``--n-jobs 10`` the 10 parties train in parallel: on the device
  machine's 16 cores about a tenth of that, times about 1.5 for the largest Dirichlet party's rows, plus each
  step's start (loading MNIST): about 1.5–2 h of wall time, 12–15 chunks of 8 minutes (unmeasured there).
  ``--device cuda`` moves the MLPs to the GPU, where a batch-32 step of this small network is bound by kernel
  launches: whether it beats ``--device cpu`` is unmeasured; the status file's seconds per step tell after one
  chunk. The largest step (s = 5, one seed) is about 2.5 units, about 5 minutes with ``--n-jobs 10``: a chunk
  shorter than a step makes no progress.

Every call runs the plan's unfinished steps in order until ``--chunk-minutes`` have passed; a step still running
then is stopped (SIGTERM to its process group). The checkpoints are written atomically after every round (or seed),
so the stopped step loses at most the round it was in; the next call resumes it. After a stopped PrivateKT step the
rounds its checkpoint holds are written to its JSON (``--from-checkpoint``, marked ``"partial": true``), so every
chunk returns a valid partial result. Each raw JSON carries its run's provenance (``bench/provenance.py``: commit,
uncommitted code files, seeds, settings, device, machine with library versions, load); ``--status`` (default
``bench/results/checkpoints/PLAN.status.json``) records, per step, the chunks, their seconds and how each ended.

Exit codes: 0 every step is done; 75 more to do (run the same command again); 1 a step failed (its output is in the
status file's last chunk); 2 bad arguments.

On the device machine (``run`` tool, at most 10 minutes a command)::

    python bench/gpu_runs.py privatekt-round-500 --chunk-minutes 8 --device cuda --copy-to "$OUT"
    python bench/gpu_runs.py fedkt-mnist-tables-6-7 --chunk-minutes 8 --device cuda --n-jobs 10 --copy-to "$OUT"

``--copy-to`` copies the plan's JSON files, the status file and the checkpoint folder there after the chunk: a fresh
machine resumes from them when they are put back (``bench/results/checkpoints/`` is git-ignored; carry it). A
Selective-FD checkpoint is about 130 MB (ten clients' networks and selectors), above a carry's 64 MiB: keep that
plan on one warm machine or accept restarting its current method. ``--dry-run`` prints the commands.
Regenerate the page's tables from the JSON files with ``python -m bench.tables`` once a plan is done.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
CHECKPOINTS = RESULTS / "checkpoints"
MORE_TO_DO = 75  # EX_TEMPFAIL: run the same command again
STOP_GRACE_SECONDS = 30


@dataclass(frozen=True)
class Step:
    """One resumable command and the raw JSON file it completes.

    ``done(json_path)`` says whether the file holds everything the step is for; ``after_stop`` (optional) runs
    when the step was stopped at the deadline, to write what the step's checkpoint already holds.
    """

    name: str
    command: tuple[str, ...]
    json_path: Path
    done: Callable[[Path], bool]
    after_stop: tuple[str, ...] = ()


def read_json(path: Path) -> dict | None:
    """The JSON document at ``path``, or None when there is none yet (or it is being replaced)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def privatekt_done(rounds: int) -> Callable[[Path], bool]:
    def done(path: Path) -> bool:
        document = read_json(path)
        return document is not None and not document.get("partial", False) and document.get("rounds") == rounds
    return done


def rows_done(expected: Sequence[tuple[str, ...]], *, records: str, keys: Sequence[str]) -> Callable[[Path], bool]:
    """Done when the file's ``records`` list holds a row for every key tuple of ``expected``."""
    def done(path: Path) -> bool:
        document = read_json(path)
        held = {tuple(str(row[key]) for key in keys) for row in (document or {}).get(records, [])}
        return set(expected) <= held
    return done


def python(script: str, *arguments: object) -> tuple[str, ...]:
    return (sys.executable, str(ROOT / "bench" / script), *(str(a) for a in arguments))


def privatekt_plan(args: argparse.Namespace) -> list[Step]:
    steps = []
    for seed in args.seeds or (0, 1, 2):
        for split in ("dirichlet", "authors"):
            stem = f"privatekt_round500_{split}_seed{seed}"
            json_path, checkpoint = RESULTS / f"{stem}.json", CHECKPOINTS / f"{stem}.npz"
            shared = ("--model", "authors", "--init", "keras", "--optimizer", "sgd", "--split", split,
                      "--seed", seed, "--rounds", args.rounds or 500, "--device", args.device, "--json", json_path)
            steps.append(Step(stem, python("privatekt.py", *shared, "--checkpoint", checkpoint), json_path,
                              privatekt_done(args.rounds or 500),
                              after_stop=python("privatekt.py", *shared, "--from-checkpoint", checkpoint)))
    return steps


def selective_fd_plan(args: argparse.Namespace) -> list[Step]:
    methods = ("Selective-FD soft", "FedMD soft", "Independent")
    steps = []
    for seed in args.seeds or (0, 1, 2):
        json_path = RESULTS / f"selective_fd_authors_rounds_seed{seed}.json"
        for method in methods:
            rows = [("mnist", "strong", method)]
            steps.append(Step(
                f"selective-fd {method} seed {seed}",
                python("selective_fd.py", "--datasets", "mnist", "--settings", "strong", "--methods", method,
                       "--rr-settings", "none", "--rounds", args.rounds or 20_000, "--local-steps", 1,
                       "--distill-steps", 10, "--proxy-batch", 512, "--eval-every", 500, "--seed", seed,
                       "--device", args.device, "--json", json_path, "--resume", "--checkpoints", CHECKPOINTS),
                json_path, rows_done(rows, records="results", keys=("dataset", "setting", "method"))))
    return steps


def fedkt_plan(args: argparse.Namespace) -> list[Step]:
    seeds = args.seeds or (0, 1, 2, 3, 4)
    steps = []
    for protocol, suffix in (("standard", ""), ("reference-code", "_official_protocol")):
        json_path = RESULTS / f"fedkt_mnist_l0_paper_today{suffix}.json"
        for seed in seeds:
            steps.append(Step(
                f"fedkt mnist-l0-paper {protocol} seed {seed}",
                python("fedkt.py", "--protocol", protocol, "--settings", "mnist-l0-paper", "--seeds", seed,
                       "--n-jobs", args.n_jobs, "--no-baselines", "--device", args.device, "--json", json_path),
                json_path, rows_done([("mnist-l0-paper", str(seed))], records="records", keys=("setting", "seed"))))
    return steps


def fedkt_tables_6_7_plan(args: argparse.Namespace) -> list[Step]:
    sys.path.insert(0, str(ROOT / "bench"))  # bench/fedkt_sweeps.py imports bench/fedkt.py by name, as a script
    import fedkt_sweeps

    json_path = RESULTS / "fedkt_tables_6_7_mnist.json"
    steps = []
    for seed in args.seeds or (0, 1, 2, 3, 4):
        for cell in fedkt_sweeps.selected_cells([6, 7], ["MNIST"], None):
            steps.append(Step(
                f"fedkt tables 6-7 MNIST s={cell.partitions} t={cell.teachers} seed {seed}",
                python("fedkt_sweeps.py", "--datasets", "MNIST", "--tables", 6, 7, "--cells",
                       f"{cell.partitions},{cell.teachers}", "--seeds", seed, "--n-jobs", args.n_jobs,
                       "--device", args.device, "--json", json_path),
                json_path, rows_done([(cell.key, str(seed))], records="records", keys=("cell", "seed"))))
    return steps


PLANS: dict[str, Callable[[argparse.Namespace], list[Step]]] = {
    "privatekt-round-500": privatekt_plan,
    "selective-fd-authors-rounds": selective_fd_plan,
    "fedkt-mnist-paper": fedkt_plan,
    "fedkt-mnist-tables-6-7": fedkt_tables_6_7_plan,
}


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to the step's process group, SIGKILL if it is still there after the grace period."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass


def run_chunk(steps: Sequence[Step], *, seconds: float, status_path: Path, log=print) -> int:
    """Run the unfinished ``steps`` in order for at most ``seconds``; 0 all done, 75 more to do, 1 a step failed."""
    status = read_json(status_path) or {"steps": {}}
    deadline = time.monotonic() + seconds
    for step in steps:
        if step.done(step.json_path):
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            break
        log(f"[{step.name}] running for at most {left:.0f} s: {' '.join(step.command)}")
        started = time.monotonic()
        with subprocess.Popen(step.command, cwd=ROOT, start_new_session=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) as process:
            try:
                output, _ = process.communicate(timeout=left)
                ended = "exited" if process.returncode == 0 else f"failed (exit {process.returncode})"
            except subprocess.TimeoutExpired:
                stop(process)
                output, ended = process.communicate()[0], "stopped at the deadline"
        record = {"seconds": round(time.monotonic() - started, 1), "ended": ended,
                  "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "output_tail": (output or "")[-2000:]}
        entry = status["steps"].setdefault(step.name, {"chunks": []})
        entry["chunks"].append(record)
        entry["done"] = step.done(step.json_path)
        write_status(status_path, status)
        log(f"[{step.name}] {ended} after {record['seconds']} s; done: {entry['done']}")
        if ended.startswith("failed") or (ended == "exited" and not entry["done"]):
            return 1
        if ended == "stopped at the deadline":
            if step.after_stop:
                subprocess.run(step.after_stop, cwd=ROOT, check=False, capture_output=True)
            break
    return 0 if all(step.done(step.json_path) for step in steps) else MORE_TO_DO


def write_status(path: Path, status: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(status, indent=1), encoding="utf-8")
    temporary.replace(path)


def copy_outputs(steps: Sequence[Step], status_path: Path, target: Path) -> None:
    """Copy the plan's JSON files, the status file and the checkpoint folder under ``target``."""
    for path in {step.json_path for step in steps} | {status_path}:
        if path.is_file():
            destination = target / path.relative_to(ROOT)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, destination)
    if CHECKPOINTS.is_dir():
        shutil.copytree(CHECKPOINTS, target / CHECKPOINTS.relative_to(ROOT), dirs_exist_ok=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", choices=tuple(PLANS))
    parser.add_argument("--chunk-minutes", type=float, default=8.0, help="stop the plan's steps after this long")
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="instead of the plan's seeds")
    parser.add_argument("--rounds", type=int, default=None, help="instead of the plan's rounds (PrivateKT, "
                        "Selective-FD): a shorter trial of the same commands")
    parser.add_argument("--n-jobs", type=int, default=8, help="FedKT's parallel teachers (default 8)")
    parser.add_argument("--status", type=Path, default=None)
    parser.add_argument("--copy-to", type=Path, default=None)
    parser.add_argument("--dry-run", action="store_true", help="print the unfinished steps' commands and stop")
    args = parser.parse_args(argv)
    if not 0 < args.chunk_minutes <= 10:
        parser.error(f"--chunk-minutes must be in (0, 10] (a device command runs at most 10 minutes); "
                     f"got {args.chunk_minutes}")
    steps = PLANS[args.plan](args)
    status_path = args.status or CHECKPOINTS / f"{args.plan}.status.json"
    if args.dry_run:
        for step in steps:
            print(("done  " if step.done(step.json_path) else "to do ") + " ".join(step.command))
        return 0
    CHECKPOINTS.mkdir(parents=True, exist_ok=True)
    code = run_chunk(steps, seconds=args.chunk_minutes * 60, status_path=status_path)
    if args.copy_to is not None:
        copy_outputs(steps, status_path, args.copy_to)
    print({0: "every step is done", MORE_TO_DO: "more to do: run the same command again",
           1: "a step failed: see " + str(status_path)}[code])
    return code


if __name__ == "__main__":
    sys.exit(main())
