"""Where a federation's time goes: `privfed federation local` and `simulate` beside the same fit in one process.

The documented example (docs/federation.md, "Run mode 2": scikit-learn's digits, FedKT-L1 with logistic-regression
teachers, γ = 1, query fraction 0.2), with ``--sites`` sites of 400 rows (issue 46 measured 5). Each side runs in a
fresh process, alternating, ``--repeats`` times:

* ``fit``: the estimator the run configuration describes (``estimator_from_config``), fitted in one process;
* ``simulate, in-process``: ``privfed.federation.simulate(..., backend="in-process")``: the ServerApp and one
  ClientApp per party in this one process on an in-process grid (no Ray);
* ``simulate, ray``: ``simulate`` on Flower's Ray simulation engine (the default);
* ``local``: ``privfed federation local --sites N --data ... --run CONFIG``: a SuperLink, N SuperNodes and the run's
  ServerApp and ClientApp processes on 127.0.0.1;
* ``local (before)`` and ``simulate, ray (before)``: the same two from the code at ``--before`` (default: the merge
  base with ``main``), checked out with ``git worktree add --detach`` at a temporary path (removed at the end) and
  put first on ``PYTHONPATH``, which every process of the side inherits.

For each side: wall seconds, CPU seconds of every process it started, at least (the larger of two lower bounds:
the process tree read from /proc every 0.2 s, which counts processes nobody waits for but may miss a process's
last 0.2 s, and the CPU of the descendants that were waited for, from ``getrusage``), the sum of their peak
resident memories, and whether it failed (a side that fails is recorded with its output's tail; the run goes on),
each process named by its command line; the fresh-process sides also
report their own import CPU and the CPU of the fit call (``simulate`` included). Beside them, the *floors*: what a
fresh interpreter pays to import numpy, Flower, scikit-learn's tree and linear models, dp-accounting, the ClientApp
and ServerApp modules, Ray's start (``ray.init`` and ``ray.shutdown``), and the start of each of Flower's
executables (``--help``). CPU seconds do not grow when other
processes share the cores; wall seconds do (the 1-minute load is recorded with every measurement). Usage::

    nice -n 19 python -m bench.federation_overhead --repeats 2 --json bench/results/federation_overhead.json
    python -m bench.federation_overhead --repeats 1 --sides "fit;simulate, in-process"    # the quick sides only
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from bench import provenance

ROOT = provenance.ROOT
#: The documented example's run configuration (docs/federation.md, "6. The run"), paths filled in per run.
CONFIG = {"teacher": "sklearn.linear_model.LogisticRegression", "teacher-params": '{"max_iter": 300}',
          "privacy": "L1", "gamma": 1.0, "query-fraction": 0.2, "random-state": 0,
          "intended-use": "A trial on scikit-learn's digits; not for any clinical decision."}

#: A fresh process that fits the way SIDE says and prints one JSON line (import CPU, the fit's CPU and wall).
_FRESH = r"""
import json, os, sys, time
start_cpu = time.process_time()
import numpy as np
from privfed.federation.task import estimator_from_config, load_party_data, load_public
config, paths, public_path, side = json.loads(sys.argv[1])
estimator = estimator_from_config(config)
public = load_public(public_path)
if side == "fit":
    parties = [load_party_data(path) for path in paths]
else:
    from privfed.federation import simulate
imported = time.process_time() - start_cpu
cpu, wall = time.process_time(), time.perf_counter()
if side == "fit":
    estimator.fit(parties, public)
else:
    estimator = simulate(estimator, paths, public, timeout=300, **({"backend": "in-process"}
                         if side == "simulate, in-process" else {}))
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
print("RESULT " + json.dumps({"import_cpu_s": imported, "fit_cpu_s": cpu, "fit_wall_s": wall,
                              "epsilon": estimator.ledger_.account(delta=1e-5).epsilon}), flush=True)
"""
#: The sides, in the order each repeat runs them.
SIDES = ("fit", "simulate, in-process", "simulate, ray", "local", "local (before)", "simulate, ray (before)")
#: name → the command a floor runs: what a fresh interpreter pays for an import, or one of Flower's executables to
#: print its help (the process's start alone: every SuperLink, SuperNode, SuperExec, ServerApp, ClientApp and
#: ``flwr`` process of a run pays at least this much).
FLOORS = {
    "bare interpreter": ["python", "-c", "pass"],
    "numpy": ["python", "-c", "import numpy"],
    "flwr (flwr.app, flwr.clientapp, flwr.serverapp)": ["python", "-c",
                                                        "import flwr.app, flwr.clientapp, flwr.serverapp"],
    "sklearn.tree": ["python", "-c", "import sklearn.tree"],
    "sklearn.linear_model": ["python", "-c", "import sklearn.linear_model"],
    "dp_accounting": ["python", "-c", "import dp_accounting"],
    "privfed ClientApp module": ["python", "-c", "import privfed.federation.client_app"],
    "privfed ServerApp module": ["python", "-c", "import privfed.federation.server_app"],
    "ray.init + ray.shutdown (2 CPUs)": ["python", "-c", "import ray; ray.init(num_cpus=2, include_dashboard=False); "
                                                         "ray.shutdown()"],
    "flwr-clientapp --help": ["flwr-clientapp", "--help"],
    "flower-superexec --help": ["flower-superexec", "--help"],
    "flower-supernode --help": ["flower-supernode", "--help"],
    "flower-superlink --help": ["flower-superlink", "--help"],
    "flwr --help": ["flwr", "--help"],
}


def _process_name(pid: int) -> str:
    """A short name for a process from its command line (``flower-supernode``, ``flwr-clientapp``, ``raylet``...)."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    words = [word.decode(errors="replace") for word in words if word]
    if not words:
        return "?"
    for index, word in enumerate(words[:4]):
        base = Path(word).name
        if base.startswith(("flower-", "flwr")):
            if base == "flwr" and len(words) > index + 1:
                return f"flwr {words[index + 1]}"
            return base
        if base in ("raylet", "gcs_server") or word.startswith("ray::"):
            return base if not word.startswith("ray::") else "ray worker (" + word[5:].split()[0] + ")"
        if word == "-m" and len(words) > index + 1:
            return f"python -m {words[index + 1]}"
        if word == "-c":
            return "python -c (this bench's fresh process)"
    if any("ray" in word and ".py" in word for word in words[:3]):
        return "ray: " + next(Path(word).name for word in words[:3] if "ray" in word and ".py" in word)
    return Path(words[0]).name


class TreeSampler:
    """Every descendant of ``root`` seen while running: its name, last CPU seconds and peak RSS, read from /proc."""

    def __init__(self, root: int, interval: float = 0.2) -> None:
        self.root, self.interval = root, interval
        self.seen: dict[int, dict] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        parents, stats = {}, {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                status = (entry / "status").read_text()
            except OSError:
                continue
            pid = int(entry.name)
            parents[pid] = int(fields[1])
            hwm = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)
            stats[pid] = ((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), hwm / 1024)
        tree, frontier = {self.root}, {self.root}
        while frontier:
            frontier = {pid for pid, parent in parents.items() if parent in frontier} - tree
            tree |= frontier
        for pid in tree & stats.keys():
            record = self.seen.setdefault(pid, {"name": _process_name(pid), "cpu_s": 0.0, "peak_mib": 0.0})
            if record["name"] in ("?", "python"):
                record["name"] = _process_name(pid)
            record["cpu_s"] = max(record["cpu_s"], stats[pid][0])
            record["peak_mib"] = max(record["peak_mib"], stats[pid][1])

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def stop(self) -> list[dict]:
        self._stop.set()
        self._thread.join()
        return sorted(self.seen.values(), key=lambda record: -record["cpu_s"])


def measured(command: list[str], *, cwd: Path, env: dict[str, str]) -> dict:
    """Run ``command``; wall seconds, its process tree (per process: name, CPU s, peak MiB), its stdout."""
    load = os.getloadavg()[0]
    waited = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    sampler = TreeSampler(process.pid)
    output, _ = process.communicate()
    wall = time.perf_counter() - start
    processes = sampler.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaped = after.ru_utime + after.ru_stime - waited.ru_utime - waited.ru_stime
    result = {"failed": process.returncode != 0, "output_tail": output[-1500:]} if process.returncode else {}
    result |= {"wall_s": wall, "load_1min_before": load, "load_1min_after": os.getloadavg()[0],
              "cpu_s_sampled": sum(p["cpu_s"] for p in processes), "cpu_s_reaped": reaped,
              "cpu_s_all_processes": max(reaped, sum(p["cpu_s"] for p in processes)),
              "peak_mib_summed": sum(p["peak_mib"] for p in processes), "processes": processes}
    for line in output.splitlines():
        if line.startswith("RESULT "):
            result.update(json.loads(line[len("RESULT "):]))
    return result


def _git(*arguments: str) -> str:
    return subprocess.run(["git", *arguments], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def write_example(folder: Path, sites: int) -> tuple[list[str], Path, Path]:
    """The documented example's files: ``sites`` sites of 400 digits rows, the public and the test set."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    order = np.random.default_rng(0).permutation(len(y))
    X, y = X[order], y[order]
    rows = min(400, (len(y) - 600) // sites)
    paths = []
    for index in range(sites):
        path = folder / f"site-{index}.npz"
        np.savez(path, X=X[rows * index: rows * (index + 1)], y=y[rows * index: rows * (index + 1)])
        paths.append(str(path))
    public, test = folder / "public.npz", folder / "test.npz"
    np.savez(public, X=X[rows * sites: rows * sites + 300])
    np.savez(test, X=X[rows * sites + 300:], y=y[rows * sites + 300:])
    return paths, public, test


def floors(env: dict[str, str], cwd: Path, commands: dict[str, list[str]]) -> dict:
    """Each floor in a fresh process: CPU s of it and its children, and its peak memory."""
    out = {}
    for name, command in commands.items():
        result = measured([sys.executable if word == "python" else word for word in command], cwd=cwd, env=env)
        out[name] = {"cpu_s": result["cpu_s_all_processes"], "wall_s": result["wall_s"],
                     "peak_mib_summed": result["peak_mib_summed"], "load_1min": result["load_1min_after"]}
        print(f"floor {name}: {out[name]['cpu_s']:.2f} CPU s, {out[name]['peak_mib_summed']:.0f} MiB", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--sides", default=";".join(SIDES), help=f"';'-separated, among {SIDES}")
    parser.add_argument("--before", default=None, help="commit of the before sides (default: merge base with main)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    sides = [side for side in SIDES if side in args.sides.split(";")]
    run = provenance.start(command="python -m bench.federation_overhead " + " ".join(sys.argv[1:]), seeds=[0],
                           settings=vars(args))
    report: dict = {"sites": args.sites, "config": CONFIG, "sides": {side: [] for side in sides}}
    with tempfile.TemporaryDirectory(prefix="privfed-overhead-") as name, contextlib.ExitStack() as cleanup:
        folder = Path(name)
        roots = {False: ROOT}
        if any(side.endswith("(before)") for side in sides):
            before = args.before or _git("merge-base", "HEAD", "main")
            roots[True] = folder / "before"
            _git("worktree", "add", "--detach", str(roots[True]), before)
            cleanup.callback(_git, "worktree", "remove", "--force", str(roots[True]))
            report["before"] = _git("rev-parse", before)
        envs = {old: {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
            filter(None, [str(root), os.environ.get("PYTHONPATH")]))} for old, root in roots.items()}
        env = envs[False]
        paths, public, test = write_example(folder, args.sites)
        config = {**CONFIG, "num-supernodes": args.sites, "public-path": str(public), "test-path": str(test)}
        report["floors"] = floors(env, folder, FLOORS)
        if True in envs:
            report["floors_before"] = floors(envs[True], folder, {name: command for name, command in FLOORS.items()
                                                                  if name.startswith("privfed")})
        for repeat in range(args.repeats):
            for side in sides:
                if side.startswith("local"):
                    tag = f"{repeat}{'-before' if side.endswith('(before)') else ''}"
                    bundle = folder / f"bundle-{tag}"
                    toml = folder / f"run-{tag}.toml"
                    toml.write_text("\n".join(f"{key} = {json.dumps(value)}" for key, value in
                                              {**config, "output-bundle": str(bundle)}.items()) + "\n")
                    command = [sys.executable, "-m", "privfed", "federation", "local", "--sites", str(args.sites),
                               "--data", *paths, "--run", str(toml), "--workdir", str(folder / f"local-{tag}"),
                               "--log", str(folder / f"local-{tag}.log")]
                else:
                    command = [sys.executable, "-c", _FRESH,
                               json.dumps([config, paths, str(public), side.removesuffix(" (before)")])]
                result = measured(command, cwd=folder, env=envs[side.endswith("(before)")])
                report["sides"][side].append(result)
                if args.json:  # after every side: a run cut short keeps what it measured
                    provenance.write_json(args.json, {**report, "provenance": provenance.finish(run)})
                extra = (f", import {result['import_cpu_s']:.2f} CPU s, fit call {result['fit_cpu_s']:.2f} CPU s / "
                         f"{result['fit_wall_s']:.2f} s" if "fit_cpu_s" in result else "")
                failed = "FAILED, " if result.get("failed") else ""
                print(f"repeat {repeat} {side}: {failed}{result['wall_s']:.1f} s wall, "
                      f"{result['cpu_s_all_processes']:.1f} CPU s in {len(result['processes'])} processes, "
                      f"{result['peak_mib_summed']:.0f} MiB summed"
                      f"{extra}; load {result['load_1min_after']:.1f}", flush=True)
    if args.json:
        provenance.write_json(args.json, {**report, "provenance": provenance.finish(run)})


if __name__ == "__main__":
    main()
