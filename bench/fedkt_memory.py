"""Where FedKT's memory goes on Adult (``bench/fedkt.py``'s ``adult-l1``, reference-code rows), one run.

Each side runs in a fresh process (``python bench/fedkt_memory.py --side …``) and reports its peak resident memory
(VmHWM: Linux resets it at exec) and, with workers, the sum over the process tree sampled every 20 ms (the
workers' own peaks added to the parent's):

* ``imports``: Python, numpy, scikit-learn and privfed imported, nothing else: the floor every side pays;
* ``data``: plus the split loaded (the 50 parties' rows, the public and test rows);
* ``fit-1``: plus ``FedKT.fit`` with ``n_jobs=1`` (the default), and what the fitted model keeps (pickled bytes
  of each fitted attribute);
* ``fit-2``: the same fit with ``n_jobs=2``: the tree (parent + worker processes).

* ``official`` (with ``--official-code``, a checkout of github QinbinLi/FedKT @ 0bb9a89): the official code's
  process on the same setting and rows (``bench/fedkt_official_side_by_side.py``'s ``adult-l1`` command, seed 0,
  ``--fedkt_seed`` = ``--seed``), started from a small process that reads the child's peak resident memory
  (``ru_maxrss`` of its waited-for children: the child's VmHWM); the code imports torch and, after FedKT, trains
  one 100-tree forest per party as its baseline, all in that peak. Its tree peak is its process peak (no workers).

Sides alternate ``--repeats`` times, so that both codes' peaks come from one run on one machine.

Usage::

    python bench/fedkt_memory.py --official-code /tmp/FedKT --json bench/results/fedkt_memory.json
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
SIDES = ("imports", "data", "fit-1", "fit-2")


def _status_kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except FileNotFoundError:
            continue
    return found + [grandchild for child in found for grandchild in _children(child)]


class TreePeak:
    """The largest sum of resident memory over this process and its descendants, sampled every 20 ms."""

    def __init__(self) -> None:
        self.peak_kib, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            pids = [os.getpid()] + _children(os.getpid())
            self.peak_kib = max(self.peak_kib, sum(_status_kib(pid, "VmRSS") for pid in pids))
            time.sleep(0.02)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_kib / 1024


def run_side(side: str, data: Path, seed: int) -> dict:
    """One side, in this (fresh) process."""
    sys.path.insert(0, str(ROOT / "bench"))
    sys.path.insert(0, str(ROOT))
    import fedkt as bench_fedkt  # bench/fedkt.py

    tree = TreePeak()
    record: dict = {"side": side}
    if side != "imports":
        setting = bench_fedkt.SETTINGS["adult-l1"]
        split, _ = bench_fedkt.prepare(setting.data, data, "reference-code", setting.parties, seed=seed)
        record["data_mib"] = (sum(X.nbytes + y.nbytes for X, y in split.parties)
                              + split.X_public.nbytes + split.X_test.nbytes) / 2**20
        if side.startswith("fit"):
            model = bench_fedkt.fedkt_for(setting, split, seed, n_jobs=int(side.split("-")[1]))
            start = time.perf_counter()
            model.fit(split.parties, split.X_public)
            record["fit_s"] = time.perf_counter() - start
            record["kept_mib"] = {name: len(pickle.dumps(value)) / 2**20 for name, value in vars(model).items()
                                  if name.endswith("_") and not name.startswith("_")}
    record["process_peak_mib"] = _status_kib(os.getpid(), "VmHWM") / 1024
    record["tree_peak_mib"] = max(tree.stop(), record["process_peak_mib"])
    return record


def run_official(code: Path, data: Path, seed: int) -> dict:
    """The official code's FedKT-L1 on Adult in a child process; its peak resident memory (this process: none)."""
    sys.path.insert(0, str(ROOT / "bench"))
    sys.path.insert(0, str(ROOT))
    import fedkt_official_side_by_side as side_by_side  # bench/fedkt_official_side_by_side.py

    with tempfile.TemporaryDirectory(prefix="fedkt-memory-official-") as scratch:
        copy = Path(scratch) / "FedKT"
        shutil.copytree(code, copy, ignore=shutil.ignore_patterns(".git"))
        side_by_side.write_libsvm(Path(scratch), data, "adult_a9a")
        command = [sys.executable, "-c", side_by_side.LAUNCHER, "--dataset", "a9a", "--datadir", scratch + "/",
                   "--logdir", scratch, "--log_file_name", "run", *side_by_side.COMMON,
                   *side_by_side.MODEL["adult_a9a"], *side_by_side.OFFICIAL_FLAGS["adult-l1"], "--init_seed",
                   str(seed), "--fedkt_seed", str(seed)]
        start = time.perf_counter()
        subprocess.run(command, cwd=copy, capture_output=True, text=True, check=True,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
        seconds = time.perf_counter() - start
        log = (Path(scratch) / "run.log").read_text(encoding="utf-8")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
    accuracy = [float(value) for value in re.findall(r"global test acc ([0-9.]+)", log)]
    return {"side": "official", "process_peak_mib": peak, "tree_peak_mib": peak, "process_s": seconds,
            "accuracy": 100 * accuracy[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "datasets"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--official-code", default=None, help="a checkout of QinbinLi/FedKT @ 0bb9a89: adds its side")
    parser.add_argument("--side", choices=(*SIDES, "official"), help="one side in this process; prints its record")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.side == "official":
        print(json.dumps(run_official(Path(args.official_code), Path(args.data), args.seed)))
        return
    if args.side:
        print(json.dumps(run_side(args.side, Path(args.data), args.seed)))
        return
    sys.path.insert(0, str(ROOT))
    from bench import provenance

    run = provenance.start(command="python " + " ".join(sys.argv), seeds=[args.seed], settings=vars(args))
    records = []
    for _ in range(args.repeats):
        for side in SIDES + (("official",) if args.official_code else ()):
            output = subprocess.run([sys.executable, __file__, "--side", side, "--data", args.data, "--seed",
                                     str(args.seed)] + (["--official-code", args.official_code] if side == "official"
                                                        else []),
                                    capture_output=True, text=True, check=True, cwd=ROOT).stdout
            records.append(json.loads(output.strip().splitlines()[-1]))
            print({k: (round(v, 1) if isinstance(v, float) else v) for k, v in records[-1].items()
                   if k != "kept_mib"}, flush=True)
    if args.json:
        provenance.write_json(args.json, {"provenance": provenance.finish(run), "records": records})


if __name__ == "__main__":
    main()
