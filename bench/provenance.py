"""What a raw-results file records about the run that made it: code commit, seeds, settings, machine and load.

Every benchmark that writes raw results for docs/results.md calls :func:`start` before its first run and
:func:`finish` when it writes the file::

    run = provenance.start(command=" ".join(sys.argv), seeds=args.seeds, settings=vars(args))
    ...
    provenance.write_json(path, {"provenance": provenance.finish(run), "records": records})

A script that resumes a file (adds records to the ones an earlier run wrote) calls :func:`earlier_records` on the
records it read and :func:`stamp_records` before each write, so that every record says which code commit made it
(``None``: a record from before per-record commits, not recorded).

:func:`describe` turns a file's record back into the one line docs/results.md prints under each table. Files
made before this module existed carry no such record; :func:`describe` says "not recorded" for what they lack,
never guesses it.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: the libraries whose versions decide what a run computes, each with the distributions that install it (the
#: first installed one is recorded; None in a record: none installed)
LIBRARIES = {"numpy": ("numpy",), "scipy": ("scipy",), "scikit-learn": ("scikit-learn",),
             "xgboost": ("xgboost", "xgboost-cpu"), "dp-accounting": ("dp-accounting",), "opacus": ("opacus",),
             "torch": ("torch",), "randomgen": ("randomgen",)}


def _git(*arguments: str, strip: bool = True) -> str:
    result = subprocess.run(["git", *arguments], cwd=ROOT, capture_output=True, text=True, check=False)
    return result.stdout.strip() if strip else result.stdout


def _uncommitted_code() -> list[str]:
    """Tracked files changed since the commit, leaving out what a run writes or cites (docs/, bench/results/)."""
    # unstripped: each line is two status columns and a space before the path, the first one included
    status = _git("status", "--porcelain", "--untracked-files=no", strip=False)
    changed = [line[3:] for line in status.split("\n") if line]
    return [path for path in changed if not path.startswith(("docs/", "bench/results/"))]


def library_versions() -> dict[str, str | None]:
    """The installed version of each of :data:`LIBRARIES`, read from the package metadata (None: not installed);
    a library installed by another distribution than its own name says which (``"3.2.0 (xgboost-cpu)"``)."""
    versions: dict[str, str | None] = {}
    for library, distributions in LIBRARIES.items():
        versions[library] = None
        for distribution in distributions:
            try:
                version = importlib.metadata.version(distribution)
            except importlib.metadata.PackageNotFoundError:
                continue
            versions[library] = version if distribution == library else f"{version} ({distribution})"
            break
    return versions


def _machine() -> dict[str, Any]:
    memory_gib = None
    if hasattr(os, "sysconf") and "SC_PHYS_PAGES" in os.sysconf_names:
        memory_gib = round(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30, 1)
    machine: dict[str, Any] = {"platform": platform.platform(), "processor": platform.machine(),
                               "cpus": os.cpu_count(), "memory_gib": memory_gib,
                               "python": platform.python_version(), "libraries": library_versions()}
    try:  # the accelerator, where the run used one
        import torch

        machine["torch"] = torch.__version__
        if torch.cuda.is_available():
            machine["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return machine


def start(*, command: str, seeds: list[int] | tuple[int, ...] | None, settings: dict[str, Any],
          device: str = "cpu") -> dict[str, Any]:
    """The provenance record of a run that starts now (pass it to :func:`finish` at the end); ``settings`` values
    that JSON cannot hold (paths) are recorded as their text."""
    settings = json.loads(json.dumps(settings, default=str))
    return {"command": command, "commit": _git("rev-parse", "HEAD"),
            "uncommitted_code": _uncommitted_code(),
            "seeds": None if seeds is None else [int(seed) for seed in seeds],
            "settings": settings, "device": device, "machine": _machine(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "load_start": [round(value, 2) for value in os.getloadavg()]}


def finish(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with the end time and the load average at the end added."""
    return {**record, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "load_end": [round(value, 2) for value in os.getloadavg()]}


def earlier_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mark the records a resumed file already holds: one without a ``commit`` gets ``None`` (not recorded), so
    that :func:`stamp_records` never credits an earlier run's record to the code of the run that resumes it."""
    for record in records:
        record.setdefault("commit", None)
    return records


def stamp_records(records: list[dict[str, Any]], run: dict[str, Any]) -> list[dict[str, Any]]:
    """Give every record without a ``commit`` the commit of ``run`` (the records this run made)."""
    for record in records:
        record.setdefault("commit", run["commit"])
    return records


def write_json(path: str | Path, document: dict[str, Any]) -> None:
    """Write ``document`` to ``path`` whole or not at all (a temporary file renamed over the target)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(temporary, path)


def _seeds_text(seeds: list[int]) -> str:
    ordered = sorted(set(seeds))
    if len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"seeds {ordered[0]}–{ordered[-1]}"
    return ("seed " if len(ordered) == 1 else "seeds ") + ", ".join(str(seed) for seed in ordered)


def describe(document: dict[str, Any]) -> str:
    """One line on the run behind a raw-results file: commit, seeds, machine and load, or what is missing."""
    record = document.get("provenance")
    source = document.get("source")
    if isinstance(source, dict) and "repository" in source:  # a published input, copied from its source
        commit = f" @ {str(source['commit'])[:7]}" if "commit" in source else ""
        path = f", {source['path']}" if "path" in source else ""
        return f"published input from {source['repository']}{commit}{path}"
    curated = document.get("curated")
    if isinstance(curated, dict) and "issue" in curated:  # a list written by hand, not by a run
        checked = f", checked against {', '.join(curated['checked_against'])}" if curated.get("checked_against") else ""
        return f"curated by hand in issue {curated['issue']}{checked}"
    if not isinstance(record, dict):  # a file from before this module: say what it has and what it lacks
        commit, machine = document.get("commit"), document.get("machine") or document.get("cpus")
        return "; ".join([f"code commit {str(commit)[:10]}" if commit else "code commit not recorded",
                          f"machine {machine}" if machine else "machine not recorded", "load not recorded",
                          *_later_runs(document)])
    if "uncommitted_code" in record:
        changes = record["uncommitted_code"]
        dirty = f" (with uncommitted changes to {', '.join(changes)})" if changes else ""
    else:  # records before the check left docs/ and bench/results/ out
        dirty = " (with uncommitted changes)" if record.get("dirty") else ""
    parts = [f"code commit {record['commit'][:10]}{dirty}"]
    if record.get("seeds"):
        parts.append(_seeds_text(record["seeds"]))
    machine = record.get("machine", {})
    where = f"{machine.get('cpus')} CPUs" + (f", {machine['gpu']}" if machine.get("gpu") else "")
    parts.append(f"{where}, device {record.get('device', 'cpu')}")
    parts.append(f"load {record['load_start'][0]:.1f} at the start, {record['load_end'][0]:.1f} at the end"
                 if "load_end" in record else "load at the end not recorded")
    return "; ".join([*parts, *_later_runs(document)])


def _later_runs(document: dict[str, Any]) -> list[str]:
    """What a resumed file adds to its first run's line: how many records each code commit made (files resumed
    since per-record commits) and the runs that resumed it, with their seeds, commits and load."""
    parts = []
    records = document.get("records")
    commits = [entry.get("commit") for entry in records if isinstance(entry, dict)] if isinstance(
        records, list) else []
    if any(commits):
        counted: dict[str, int] = {}
        for commit in commits:
            key = str(commit)[:10] if commit else "not recorded"
            counted[key] = counted.get(key, 0) + 1
        parts.append("records per code commit: " + ", ".join(f"{key} ×{count}" for key, count in counted.items()))
    resumed = [later for later in document.get("resumed", []) if isinstance(later, dict) and "commit" in later]
    if resumed:
        parts.append("then resumed by " + ", ".join(
            f"{_seeds_text(later['seeds']) if later.get('seeds') else 'a run'} at code commit {later['commit'][:10]}"
            + (f" (load {later['load_start'][0]:.1f}–{later['load_end'][0]:.1f})" if "load_end" in later else "")
            for later in resumed))
    return parts
