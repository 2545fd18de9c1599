"""``privfed.account`` on a large vote matrix: the extra memory it takes, before and after, side by side.

Each side runs in its own Python process, alternating, on the same int64 vote matrix (``--queries`` × 10
classes, counts drawn with a fixed seed): ``before`` imports privfed from ``git archive BASE`` (a commit given
with ``--base``; the default is the commit before the no-copy change), ``after`` from this checkout. After a
warm-up on 100 rows (imports, which allocate too), ``tracemalloc`` measures the peak memory allocated while
constructing ``LaplaceNoisyMax(votes, gamma=0.04, votes_per_unit=2, unit="party")`` (or ``GaussianNoisyMax(votes,
20.0)``) and running ``privfed.account(mechanism, delta=1e-5)``, as a multiple of the votes' own bytes; both
sides must print the same ε. Usage::

    python bench/account_memory.py [--queries 10000000] [--gaussian-queries 1000000] [--base cdb409f] \
        [--json bench/results/account_memory.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import provenance  # noqa: E402

MEASURE = """
import json, sys, time, tracemalloc
import numpy as np
queries, kind = int(sys.argv[1]), sys.argv[2]
votes = np.random.default_rng(0).integers(0, 5, size=(queries, 10), dtype=np.int64)
votes[:, 0] += 20
import privfed
make = {"laplace": lambda v: privfed.LaplaceNoisyMax(v, gamma=0.04, votes_per_unit=2, unit="party"),
        "gaussian": lambda v: privfed.GaussianNoisyMax(v, 20.0)}[kind]
privfed.account(make(votes[:100]), delta=1e-5)  # imports and their allocations, outside the measurement
tracemalloc.start()
start = time.perf_counter()
report = privfed.account(make(votes), delta=1e-5)
seconds = time.perf_counter() - start
print(json.dumps({"peak_over_votes": tracemalloc.get_traced_memory()[1] / votes.nbytes, "seconds": seconds,
                  "epsilon": report.epsilon, "votes_bytes": votes.nbytes, "privfed": privfed.__file__}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=10_000_000, help="queries of the Laplace release")
    parser.add_argument("--gaussian-queries", type=int, default=1_000_000,
                        help="queries of the Gaussian release (its per-query bound costs ~25 µs a query)")
    parser.add_argument("--base", default="cdb409f", help="the commit of the 'before' side")
    parser.add_argument("--json", help="write the raw results here")
    args = parser.parse_args()
    run = provenance.start(command="python " + " ".join(sys.argv), seeds=None, settings=vars(args))
    with tempfile.TemporaryDirectory(prefix="privfed-base-") as base:
        archive = subprocess.run(["git", "archive", args.base], cwd=ROOT, capture_output=True, check=True).stdout
        with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
            tar.extractall(base, filter="data")
        rows = []
        for kind in ("laplace", "gaussian"):
            for side, root in (("before", base), ("after", str(ROOT))):
                env = {**os.environ, "PYTHONPATH": root, "OMP_NUM_THREADS": "1"}
                queries = args.queries if kind == "laplace" else args.gaussian_queries
                done = subprocess.run([sys.executable, "-c", MEASURE, str(queries), kind], env=env, cwd=root,
                                      capture_output=True, text=True, check=True)
                measured = json.loads(done.stdout.strip().splitlines()[-1])
                row = {"mechanism": kind, "side": side, "queries": queries, **measured}
                assert row["privfed"].startswith(root), row["privfed"]
                rows.append(row)
                print(f"{kind:8s} {side:6s} peak extra memory {row['peak_over_votes']:.3f}x the votes "
                      f"({row['votes_bytes'] / 1e6:.0f} MB), {row['seconds']:.1f} s, epsilon {row['epsilon']!r}",
                      flush=True)
            before, after = rows[-2], rows[-1]
            assert before["epsilon"] == after["epsilon"], (before, after)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": "python bench/account_memory.py " + " ".join(sys.argv[1:]), "provenance": provenance.finish(run),
            "what": "tracemalloc peak while constructing the mechanism and running privfed.account, over the "
                    "votes' bytes; before = privfed at --base, after = this checkout; separate processes, alternating",
            "machine": platform.platform(), "cpus": os.cpu_count(), "queries": {"laplace": args.queries,
                                                                  "gaussian": args.gaussian_queries}, "rows": rows,
        }, indent=2) + "\n")


if __name__ == "__main__":
    main()
