"""ε-versus-accuracy sweeps: every grid point trains a pipeline, is evaluated and accounted from its own ledger.

:func:`run_sweep` expands a :class:`~reports.config.SweepConfig` into runs (:mod:`privfed.reports.grid`), runs them
through the pipelines' executor, and appends one row per run to ``OUT/results.csv`` (:mod:`privfed.reports.results`)
as results arrive. A sweep that is interrupted and started again skips the runs its CSV already holds (each run is
keyed by its exact configuration).

Every ε in the table comes from the trained model's own :class:`~accounting.Ledger`; the ledger is saved under
``OUT/runs/<key>/ledger.json`` by the ``save_model`` callback (:func:`save_ledger` by default; ``privfed report``
passes one that writes a full model bundle), so every number can be checked against the saved ledger.
"""

from __future__ import annotations

import functools
import json
import math
import os
import platform
import subprocess
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..accounting.fingerprint import data_fingerprint
from ..accounting.ledger import software_versions
from ..pipelines.data.datasets import federated_split, load_dataset
from ..pipelines.protocol.executor import JoblibExecutor, SerialExecutor
from ..pipelines.protocol.progress import check_progress, progress_bar
from .config import ConfigError, DataSpec, SweepConfig
from .grid import SweepPoint, build_estimator, canonical, check_points, expand_points, varied_keys
from .results import (
    PARQUET_FILE,
    RESULTS_FILE,
    load_results,
    parquet_available,
    previous_rows,
    privacy_columns,
    result_columns,
)

__all__ = ["LEDGER_FILE", "SWEEP_FILE", "SaveModel", "SweepInterrupted", "environment", "run_sweep", "save_ledger"]

SWEEP_FILE = "sweep.json"
CONFIG_FILE = "config.toml"
RUNS_DIR = "runs"
#: The file every ``save_model`` callback must write in a run's folder: the model's ledger as JSON.
LEDGER_FILE = "ledger.json"

#: A callback ``save_model(model, directory)`` that writes the fitted model (at least ``ledger.json``).
SaveModel = Callable[[Any, Path], None]


@dataclass(frozen=True)
class _Context:
    """What every run needs besides its point (shared, read-only, picklable)."""

    estimator: str
    data: DataSpec
    out_dir: Path
    save_model: SaveModel
    delta: float | None
    sweep: str
    columns: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class _Data:
    X: np.ndarray
    y: np.ndarray
    X_test: np.ndarray | None
    y_test: np.ndarray | None
    fingerprint: str = field(default="")


@functools.lru_cache(maxsize=2)
def _load_data(spec: DataSpec) -> _Data:
    """The data set of ``spec`` (cached per process)."""
    if spec.sklearn is not None:
        import sklearn.datasets

        X, y = getattr(sklearn.datasets, spec.sklearn)(return_X_y=True)
        X_test = y_test = None
    else:
        try:
            dataset = load_dataset(spec.name, spec.folder)
        except (FileNotFoundError, ValueError, TypeError) as error:
            raise ConfigError(f"data: {spec.name!r} could not be loaded from {str(spec.folder)!r}: {error}") from None
        X, y, X_test, y_test = dataset.X_train, dataset.y_train, dataset.X_test, dataset.y_test
    arrays = {"X": X, "y": y} if X_test is None else {"X": X, "y": y, "X_test": X_test, "y_test": y_test}
    return _Data(X=X, y=y, X_test=X_test, y_test=y_test, fingerprint=data_fingerprint(arrays))


def _split(data: _Data, split_params: Mapping[str, Any], seed: int) -> Any:
    """The federated split of ``data``: the official test set is used when there is one and no test_size."""
    kwargs = dict(split_params)
    protocol = kwargs.get("protocol", "standard")
    if protocol == "standard" and data.X_test is not None and "test_size" not in kwargs:
        kwargs.update(X_test=data.X_test, y_test=data.y_test)
    return federated_split(data.X, data.y, random_state=seed, **kwargs)


def save_ledger(model: Any, directory: Path) -> None:
    """Default ``save_model``: write only the model's ledger (``ledger.json``), no model and no private evidence."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / LEDGER_FILE).write_text(model.ledger_.to_json(), encoding="utf-8")


def _auc(model: Any, X: np.ndarray, y: np.ndarray, n_classes: int) -> float:
    if n_classes != 2 or len(np.unique(y)) != 2:
        return math.nan
    from sklearn.metrics import roc_auc_score

    if hasattr(model, "predict_proba"):
        try:
            scores = np.asarray(model.predict_proba(X))[:, 1]
        except AttributeError:  # the final model has no predict_proba
            scores = None
        if scores is not None:
            return float(roc_auc_score(y, scores))
    if hasattr(model, "decision_function"):
        return float(roc_auc_score(y, np.asarray(model.decision_function(X))))
    return math.nan


#: A computed row's key (not a results column) holding the (category, message) of each warning its fit raised.
_WARNINGS = "warnings"


@dataclass(frozen=True)
class _Task:
    point: SweepPoint
    context: _Context


def _run_point(task: _Task) -> dict[str, Any]:
    """Split, fit, evaluate, account and save one run; a ValueError from fit becomes an error row."""
    point, context = task.point, task.context
    data = _load_data(context.data)
    split = _split(data, point.split_params, point.seed)
    n_classes = len(np.unique(data.y))
    row: dict[str, Any] = {column: math.nan for column in context.columns}
    row.update(
        key=point.key, sweep=context.sweep, role=point.role, setting=point.setting, line=point.line, seed=point.seed,
        reference_key=point.reference_key, estimator=context.estimator, status="ok", error="",
        params=canonical(point.estimator_params), split=canonical(point.split_params),
        n_parties=len(split.parties), n_public=len(split.X_public), n_test=len(split.y_test), n_classes=n_classes,
        sources="{}", unaccounted="[]", ledger="", unit="", method_party="", method_example="",
        **{f"param_{name}": value for name, value in point.values.items()},
    )
    model = build_estimator(context.estimator, point.estimator_params, point.seed)
    start = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:  # said once per sweep, after its progress bar
            warnings.simplefilter("always")
            model.fit(list(split.parties), split.X_public)
    except ValueError as error:
        row.update(status="error", error=f"{type(error).__name__}: {error}", wall_time_s=time.perf_counter() - start)
        return row
    row["wall_time_s"] = time.perf_counter() - start
    row[_WARNINGS] = tuple((warning.category, str(warning.message)) for warning in caught)
    row["accuracy"] = float(model.score(split.X_test, split.y_test))
    row["auc"] = _auc(model, split.X_test, split.y_test, n_classes)
    row["n_queries"] = float(getattr(model, "n_queries_answered_", math.nan))
    local = getattr(model, "n_local_queries_answered_", None)
    row["n_local_queries"] = float(np.mean(local)) if local else math.nan
    row.update(privacy_columns(model.ledger_, context.delta))
    directory = context.out_dir / RUNS_DIR / point.key
    context.save_model(model, directory)
    if not (directory / LEDGER_FILE).is_file():
        raise RuntimeError(f"save_model did not write {LEDGER_FILE} in {directory}; it must save the model's ledger")
    row["ledger"] = f"{RUNS_DIR}/{point.key}/{LEDGER_FILE}"
    return row


def environment() -> dict[str, Any]:
    """Where the sweep ran: Python, platform, CPUs, library versions and the source's git commit (if any)."""
    versions = software_versions()
    for name in ("privfed", "pandas", "matplotlib", "joblib", "tqdm"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    try:
        commit = subprocess.run(
            ["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=10, check=False,
        ).stdout.strip() or None
    except OSError:
        commit = None
    return {
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "git_commit": commit,
        "software": versions,
    }


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run_sweep`: ``done`` of ``total`` runs are saved; rerunning resumes from them."""

    def __init__(self, done: int, total: int) -> None:
        super().__init__(f"interrupted after {done} of {total} runs; rerun the same command to resume")
        self.done, self.total = done, total


def run_sweep(
    config: SweepConfig,
    out_dir: str | Path,
    *,
    save_model: SaveModel = save_ledger,
    n_jobs: int | None = None,
    progress: bool | None = None,
    log: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """Run (or resume) a sweep and return its results, one row per run, in expansion order.

    Parameters
    ----------
    config : SweepConfig
    out_dir : str or Path
        Receives ``results.csv`` (appended as runs finish), ``results.parquet`` (at the end, when
        pyarrow or fastparquet is installed), ``config.toml``, ``sweep.json`` (resolved config and
        environment) and ``runs/<key>/`` (what ``save_model`` writes).
    save_model : callable, default=save_ledger
        ``save_model(model, directory)``, called in the worker after each successful run; it must
        write the model's ledger as ``directory / "ledger.json"``. Must be picklable (a module-level
        function) when ``n_jobs`` != 1.
    n_jobs : int, optional
        Runs in parallel (default: ``config.n_jobs``), through :class:`privfed.pipelines.JoblibExecutor`.
    progress : bool or None, default=None
        A progress bar over the runs: ``None`` on a terminal only, ``True`` always, ``False`` never.
    log : callable, optional
        Called with one line when runs of an earlier (interrupted) call are reused.

    Returns
    -------
    pandas.DataFrame
        The results of every run of ``config`` (those computed now and those found in the CSV).

    Raises
    ------
    SweepInterrupted
        On Ctrl-C (a ``KeyboardInterrupt``), saying how many runs are saved.
    """
    if not callable(save_model):
        raise TypeError(f"save_model must be callable as save_model(model, directory), got {save_model!r}")
    check_progress(progress)
    n_jobs = config.n_jobs if n_jobs is None else n_jobs
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs == 0:
        raise ValueError(f"n_jobs must be a non-zero integer (joblib convention), got {n_jobs!r}")
    out_dir = Path(out_dir)
    data = _load_data(config.data)
    points = expand_points(config, data_fingerprint=data.fingerprint)
    check_points(config.estimator, points)
    columns = result_columns(varied_keys(config))

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / CONFIG_FILE).write_text(config.source_text, encoding="utf-8")
    description = {"name": config.name, "config_toml": config.source_text, "data": config.data.label,
                   "n_runs": len(points), "environment": environment()}
    (out_dir / SWEEP_FILE).write_text(json.dumps(description, indent=2, default=str), encoding="utf-8")

    csv_path = out_dir / RESULTS_FILE
    keys = {point.key for point in points}
    done = previous_rows(csv_path, keys, columns)
    pending = [point for point in points if point.key not in set(done["key"])]
    if len(done) and log is not None:
        log(f"resuming: reusing {len(done)} of {len(points)} runs already in {csv_path}")
    context = _Context(estimator=config.estimator, data=config.data, out_dir=out_dir, save_model=save_model,
                       delta=config.delta, sweep=config.name, columns=columns)
    import joblib

    workers = joblib.effective_n_jobs(n_jobs)
    executor = SerialExecutor() if workers == 1 else JoblibExecutor(n_jobs=n_jobs, progress=False)
    bar = progress_bar(total=len(points), progress=progress, desc=f"sweep {config.name}", unit="run", leave=True)
    bar.update(len(points) - len(pending))
    finished = len(points) - len(pending)
    raised: dict[tuple[type[Warning], str], list[SweepPoint]] = {}
    try:
        for start in range(0, len(pending), workers):
            chunk = pending[start:start + workers]
            rows = executor.map(_run_point, [_Task(point, context) for point in chunk])
            pd.DataFrame(rows, columns=list(columns)).to_csv(csv_path, mode="a", header=False, index=False)
            for point, row in zip(chunk, rows):
                for warning in dict.fromkeys(row.get(_WARNINGS, ())):
                    raised.setdefault(warning, []).append(point)
            finished += len(chunk)
            bar.update(len(chunk))
    except KeyboardInterrupt:
        raise SweepInterrupted(finished, len(points)) from None
    finally:
        bar.close()
    for (category, message), raised_by in raised.items():
        warnings.warn(f"{message} [{_runs_named(raised_by, len(pending))}]", category, stacklevel=2)
    results = load_results(csv_path)
    order = {point.key: index for index, point in enumerate(points)}
    results = results.sort_values("key", key=lambda keys: keys.map(order)).reset_index(drop=True)
    if parquet_available():
        results.to_parquet(out_dir / PARQUET_FILE, index=False)
    return results


def _runs_named(points: list[SweepPoint], n_runs: int) -> str:
    """``"2 of 26 runs: FedKT-L1 gamma=0.1 query_fraction=0.1 seed=0, ..."``, naming at most three."""
    named = [" ".join([point.setting, *(f"{key}={value}" for key, value in point.values.items()),
                       f"seed={point.seed}"]) for point in points[:3]]
    more = ", ..." if len(points) > 3 else ""
    return f"{len(points)} of {n_runs} runs: {', '.join(named)}{more}"
