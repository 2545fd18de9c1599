"""FedKT on Flower against the in-process run: wall-time ratios, bytes sent and peak memory, measured in one run.

Adult L0 at the reference-code protocol (50 parties, s = 2, t = 5, decision-tree teachers,
random-forest students), same seed throughout:

* in-process ``fit`` with ``n_jobs=1``, ``n_jobs=2`` (joblib's default process pool, loky) and
  ``n_jobs=2`` on joblib's thread pool (``joblib.parallel_config(backend="threading")``: scikit-learn's
  tree building and prediction release the GIL), **alternated** for ``--rounds`` rounds so that the
  machine's load hits every side alike; each measurement is printed with the 1-minute load average and
  this process's CPU seconds;
* ``privfed.federation.simulate`` (Flower's Ray engine, one virtual SuperNode per party), in a fresh
  process (the server: ServerApp and Ray's driver), right after an in-process ``n_jobs=2`` run on the
  same cores; that process's peak resident memory is the server's;
* bytes each party sent (``bandwidth_``) against the size of its s students in the bundle's safe
  format (skops), i.e. what sending the models would have cost;
* peak resident memory of one party's step in a fresh process holding only that party's data, its task
  and the party-side code.

Not part of the test suite. Usage::

    python bench/federation.py --rounds 2 --json bench/results/federation_adult_l0.json
    python bench/federation.py --skip-flower     # in-process ratios, bytes and the party's memory only
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import joblib  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fedkt import SETTINGS, fedkt_for, prepare  # noqa: E402  (bench/fedkt.py: the paper's settings)

from bench import provenance  # noqa: E402
from bench.processes import descendants_cpu  # noqa: E402

#: The in-process sides: label → (n_jobs, joblib backend; None: joblib's default, loky processes).
SIDES = {"n_jobs=1": (1, None), "n_jobs=2 processes": (2, None), "n_jobs=2 threads": (2, "threading")}


def _peak_mib() -> float:
    """This process's peak resident memory (MiB): VmHWM, which starts afresh at exec.

    ``getrusage``'s ``ru_maxrss`` would not do: Linux carries it over fork and exec, so a worker
    started from this (large) process would report this process's size.
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def in_process(setting, split, n_jobs: int, backend: str | None) -> tuple[object, dict]:
    """One ``fit``: wall seconds, CPU seconds (this process's threads, plus its worker processes') and the load.

    The CPU seconds do not depend on the machine's load: their excess over ``n_jobs=1`` is the parallel
    side's overhead (workers' start, pickling), which wall time on a loaded machine cannot isolate.
    """
    model = fedkt_for(setting, split, 0, n_jobs)
    before = descendants_cpu()
    start, cpu = time.perf_counter(), time.process_time()
    with joblib.parallel_config(backend=backend) if backend else joblib.parallel_config():
        model.fit(split.parties, split.X_public)
    wall, own = time.perf_counter() - start, time.process_time() - cpu
    workers = sum(seconds - before.get(pid, 0.0) for pid, seconds in descendants_cpu().items())
    return model, {"wall_s": wall, "cpu_s_this_process": own, "cpu_s_with_workers": own + workers,
                   "load_1min": os.getloadavg()[0]}


def _party_process(queue, X, y, task, teacher, student) -> None:
    """Party 0's step alone, as a SuperNode runs it: its own data and its task, nothing else."""
    from privfed.pipelines.fedkt.steps import fedkt_party_step

    fedkt_party_step(task, X, y, teacher=teacher, student=student, party="party 0")
    queue.put(_peak_mib())


def _server_process(queue, setting, split) -> None:
    """The Flower simulation in a fresh process: the ServerApp and Ray's driver run here."""
    from privfed.federation import simulate

    start = time.perf_counter()
    model = simulate(fedkt_for(setting, split, 0, 1), split.parties, split.X_public, timeout=3600)
    queue.put({"wall_s": time.perf_counter() - start, "load_1min": os.getloadavg()[0], "peak_mib": _peak_mib(),
               "predictions": model.predict(split.X_test)})


def in_fresh_process(target, *args):
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=target, args=(queue, *args))
    process.start()
    result = queue.get()
    process.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the in-process sides")
    parser.add_argument("--skip-flower", action="store_true", help="only the in-process ratios, bytes and memory")
    parser.add_argument("--json", default=None, help="write every measurement here")
    args = parser.parse_args()
    run = provenance.start(command="python " + " ".join(sys.argv), seeds=[0], settings=vars(args))
    setting = SETTINGS["adult-l0"]
    split, rows = prepare(setting.data, Path(args.data), "reference-code", setting.parties, seed=0)
    report: dict = {"command": "python " + " ".join(sys.argv), "cpus": os.cpu_count(), "rows": rows,
                    "setting": f"Adult L0, {setting.parties} parties, s = {setting.partitions}, t = "
                               f"{setting.teachers}, |public| = {len(split.X_public)}"}
    print(report["setting"] + f", {os.cpu_count()} CPUs ({rows})", flush=True)

    runs: dict[str, list[dict]] = {side: [] for side in SIDES}
    reference = None
    for round_ in range(args.rounds):
        for side, (n_jobs, backend) in SIDES.items():
            model, measured = in_process(setting, split, n_jobs, backend)
            predictions = model.predict(split.X_test)
            reference = predictions if reference is None else reference
            assert (predictions == reference).all(), "the sides must give the same model"
            runs[side].append(measured)
            print(f"round {round_}: {side}: {measured['wall_s']:.1f} s wall, {measured['cpu_s_with_workers']:.1f} s "
                  f"CPU ({measured['cpu_s_this_process']:.1f} s in this process), load {measured['load_1min']:.1f}",
                  flush=True)
    report["in_process"] = runs
    ratios = {}
    for side in list(SIDES)[1:]:
        per_round = [s["wall_s"] / p["wall_s"] for s, p in zip(runs["n_jobs=1"], runs[side])]
        ratios[side] = {"per_round": per_round, "median": statistics.median(per_round)}
        print(f"speed-up of {side} over n_jobs=1, per round: {', '.join(f'×{r:.2f}' for r in per_round)}")
    report["speedup_over_n_jobs_1"] = ratios

    import skops.io

    sent = np.sum([sizes for sizes in model.bandwidth_.values()], axis=0)
    models = [sum(len(skops.io.dumps(s.estimator)) for s in students if s.estimator is not None)
              for students in model.students_]
    report["bytes_per_party"] = {
        "median_sent": int(np.median(sent)),
        "median_by_message": {kind: int(np.median(v)) for kind, v in model.bandwidth_.items()},
        "median_students_in_skops": int(np.median(models)),
    }
    print(f"bytes sent per party: median {int(np.median(sent)):,} (by message: "
          f"{report['bytes_per_party']['median_by_message']}); its students in skops: median "
          f"{int(np.median(models)):,} (×{np.median(models) / np.median(sent):.0f})", flush=True)

    from privfed.pipelines.data.party_schema import describe_party
    from privfed.pipelines.fedkt.steps import fedkt_tasks

    X, y = split.parties[0]
    classes = np.unique(np.concatenate([party[1] for party in split.parties]))
    prototype = fedkt_for(setting, split, 0, 1)
    task = fedkt_tasks(prototype, [describe_party(X, y)], classes, split.X_public, np.random.SeedSequence(0),
                       ["party 0"])[0]
    report["party_peak_mib"] = in_fresh_process(_party_process, X, y, task, prototype.teacher, prototype.student)
    print(f"peak memory of one party's step in its own process: {report['party_peak_mib']:.0f} MiB", flush=True)

    if not args.skip_flower:
        _, beside = in_process(setting, split, 2, None)
        flower = in_fresh_process(_server_process, setting, split)
        predictions = flower.pop("predictions")
        assert reference is None or (predictions == reference).all(), "Flower must give the in-process model"
        report["flower"] = {"simulation": flower, "in_process_n_jobs_2_just_before": beside,
                            "ratio": flower["wall_s"] / beside["wall_s"]}
        print(f"Flower simulation, {setting.parties} SuperNodes: {flower['wall_s']:.1f} s (load "
              f"{flower['load_1min']:.1f}) vs in-process n_jobs=2 {beside['wall_s']:.1f} s (load "
              f"{beside['load_1min']:.1f}): ×{report['flower']['ratio']:.2f}, same predictions; server process "
              f"peak memory {flower['peak_mib']:.0f} MiB (Ray's driver included)", flush=True)
    if args.json:
        report["provenance"] = provenance.finish(run)
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
