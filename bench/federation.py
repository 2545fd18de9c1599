"""FedKT on Flower against the in-process run: wall-time ratios and bytes sent, measured side by side.

Adult L0 at the reference-code protocol (50 parties, s = 2, t = 5, decision-tree teachers,
random-forest students), same seed throughout:

* in-process ``fit`` with ``n_jobs=2`` against ``n_jobs=1`` (party-side predictions: the server no
  longer predicts with 100 students);
* ``privfed.federation.simulate`` (Flower's Ray engine, one virtual SuperNode per party) against the
  in-process ``fit`` with ``n_jobs=2``, on the same cores;
* bytes each party sent (``bandwidth_``) against the size of its s students in the bundle's safe
  format (skops), i.e. what sending the models would have cost;
* peak resident memory of one party's step in a fresh process, and of the server (this process,
  Ray's driver included) after the Flower run.

Not part of the test suite. Usage::

    python bench/federation.py                   # all three
    python bench/federation.py --skip-flower     # in-process ratios and bytes only
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fedkt import SETTINGS, fedkt_for, prepare  # noqa: E402  (bench/fedkt.py: the paper's settings)


def timed(fit) -> tuple[object, float]:
    start = time.perf_counter()
    model = fit()
    return model, time.perf_counter() - start


def _party_peak(queue, split, setting) -> None:
    """Run party 0's step alone and report this process's peak resident memory (MiB)."""
    from privfed.pipelines.fedkt_steps import fedkt_party_step, fedkt_tasks
    from privfed.pipelines.party_schema import describe_party

    model = fedkt_for(setting, split, 0, 1)
    X, y = split.parties[0]
    schemas = [describe_party(X, y)]
    task = fedkt_tasks(model, schemas, np.unique(np.concatenate([p[1] for p in split.parties])), split.X_public,
                       np.random.SeedSequence(0), ["party 0"])[0]
    fedkt_party_step(task, X, y, teacher=model.teacher, student=model.student, party="party 0")
    queue.put(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    parser.add_argument("--skip-flower", action="store_true", help="only the in-process ratios and the bytes")
    args = parser.parse_args()
    setting = SETTINGS["adult-l0"]
    split = prepare(setting.data, Path(args.data), "reference-code", setting.parties, seed=0)
    print(f"Adult L0, reference-code protocol: {setting.parties} parties, s = {setting.partitions}, "
          f"t = {setting.teachers}, |public| = {len(split.X_public)}, {os.cpu_count()} CPUs")

    serial, t1 = timed(lambda: fedkt_for(setting, split, 0, 1).fit(split.parties, split.X_public))
    parallel, t2 = timed(lambda: fedkt_for(setting, split, 0, 2).fit(split.parties, split.X_public))
    assert (serial.predict(split.X_test) == parallel.predict(split.X_test)).all()
    print(f"in-process n_jobs=1: {t1:.1f} s; n_jobs=2: {t2:.1f} s; speed-up ×{t1 / t2:.2f}")

    import skops.io

    sent = np.sum([sizes for sizes in serial.bandwidth_.values()], axis=0)
    models = [sum(len(skops.io.dumps(s.estimator)) for s in students if s.estimator is not None)
              for students in serial.students_]
    print(f"bytes sent per party: median {int(np.median(sent)):,} (by message: "
          f"{ {kind: int(np.median(v)) for kind, v in serial.bandwidth_.items()} }); "
          f"its students in skops: median {int(np.median(models)):,} (×{np.median(models) / np.median(sent):.0f})")

    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_party_peak, args=(queue, split, setting))
    process.start()
    print(f"peak memory of one party's step in its own process: {queue.get():.0f} MiB")
    process.join()

    if args.skip_flower:
        return
    from privfed.federation import simulate

    flower, tf = timed(lambda: simulate(fedkt_for(setting, split, 0, 1), split.parties, split.X_public, timeout=3600))
    assert (flower.predict(split.X_test) == serial.predict(split.X_test)).all()
    print(f"Flower simulation, {setting.parties} SuperNodes: {tf:.1f} s; ratio to in-process n_jobs=2 ×{tf / t2:.2f} "
          f"(same predictions: yes); server process peak memory "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
