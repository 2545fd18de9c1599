"""ε-versus-accuracy sweeps: every grid point trains a pipeline, is evaluated and accounted from its own ledger.

:func:`run_sweep` expands a :class:`~reports.config.SweepConfig` into runs (grid
point × setting × seed, plus each setting's non-private reference), runs them
through the pipelines' executor, and appends one row per run to
``OUT/results.csv`` as results arrive. Each run is keyed by the sha256 of its
exact configuration (estimator, parameters, models, split, data fingerprint,
seed, δ), so a sweep that is interrupted and started again skips the runs its
CSV already holds. The columns are listed in :data:`BASE_COLUMNS` and
``docs/reports.md``.

Every ε in the table comes from the trained model's own
:class:`~accounting.Ledger` (``ledger.account(delta, analysis=..., unit=...)``);
the ledger is saved under ``OUT/runs/<key>/ledger.json`` by the ``save_model``
callback (:func:`save_ledger` by default; ``privfed report`` passes one that
writes a full model bundle), so every number can be checked against the saved
ledger. A unit the ledger records no release for has ε = ∞: no guarantee.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import itertools
import json
import math
import os
import platform
import subprocess
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from privfed.pipelines.data.datasets import federated_split, load_dataset
from privfed.pipelines.protocol.executor import JoblibExecutor, SerialExecutor
from privfed.pipelines.protocol.progress import check_progress, progress_bar

from ..accounting.fingerprint import data_fingerprint
from ..accounting.ledger import Ledger, software_versions
from ..accounting.mechanism import UNITS
from .config import (
    SPLIT_KEYS,
    ConfigError,
    DataSpec,
    ModelSpec,
    Setting,
    SweepConfig,
    estimator_class,
    init_parameters,
)

__all__ = [
    "ANALYSES",
    "BASE_COLUMNS",
    "LEDGER_FILE",
    "RESULTS_FILE",
    "SWEEP_FILE",
    "SaveModel",
    "SweepInterrupted",
    "SweepPoint",
    "environment",
    "expand_points",
    "load_results",
    "result_columns",
    "run_sweep",
    "save_ledger",
    "varied_keys",
]

RESULTS_FILE = "results.csv"
PARQUET_FILE = "results.parquet"
SWEEP_FILE = "sweep.json"
CONFIG_FILE = "config.toml"
RUNS_DIR = "runs"
#: The file every ``save_model`` callback must write in a run's folder: the model's ledger as JSON.
LEDGER_FILE = "ledger.json"
ANALYSES = ("tight", "classic")

#: A callback ``save_model(model, directory)`` that writes the fitted model (at least ``ledger.json``).
SaveModel = Callable[[Any, Path], None]

#: Columns of every results table, in order; ``param_<key>`` columns (one per varied key) follow ``line``,
#: and the per-unit ε columns (:func:`result_columns`) follow ``data_dependent``.
BASE_COLUMNS: tuple[str, ...] = (
    "key",  # sha256 (first 16 hex digits) of the run's exact configuration
    "sweep",  # the sweep's name
    "role",  # "private" (a grid point) or "reference" (a setting's non-private run)
    "setting",  # the setting's label
    "line",  # the plot line the run belongs to (setting and every grid axis but the last)
    "seed",  # random_state of the split and of the estimator
    "reference_key",  # key of the reference run with this run's setting and seed ("" if none)
    "status",  # "ok", or "error" when fit refused the run (ValueError); see "error"
    "error",  # the error message ("" when ok)
    "estimator",  # the estimator class
    "params",  # JSON: every estimator parameter, models as {"class", "params"}
    "split",  # JSON: the federated_split parameters
    "n_parties",  # parties in the split
    "n_public",  # public (unlabeled) examples
    "n_test",  # test examples
    "n_classes",  # classes in the data set
    "accuracy",  # model.score on the test set
    "auc",  # ROC AUC on the test set for binary tasks (NaN otherwise)
    "n_queries",  # model.n_queries_answered_ (server queries answered), NaN if the estimator has none
    "n_local_queries",  # mean of model.n_local_queries_answered_ (party-side queries), NaN if none
    "wall_time_s",  # seconds spent in fit
    "delta",  # δ of every ε in the row
    "unit",  # the ledger's primary unit
    "epsilon",  # primary unit, tight analysis (= epsilon_<unit>_tight)
    "epsilon_classic",  # primary unit, classic analysis
    "epsilon_data_independent",  # primary unit, tight analysis, data-independent bound
    "data_dependent",  # whether the primary unit's ε was computed from private statistics
    "sources",  # JSON: per unit, each ledger release (mechanism, queries, parameters, data dependence, note)
    "unaccounted",  # JSON: releases the ledger records as not covered by ε
    "ledger",  # path of the saved ledger, relative to the results file's folder
)


def result_columns(varied_keys: tuple[str, ...] = ()) -> tuple[str, ...]:
    """All columns of a results table whose varied keys are ``varied_keys``, in order."""
    per_unit = []
    for unit in UNITS:
        for analysis in ANALYSES:
            per_unit += [f"epsilon_{unit}_{analysis}", f"epsilon_{unit}_{analysis}_data_independent"]
        per_unit += [f"data_dependent_{unit}", f"method_{unit}"]
    position = BASE_COLUMNS.index("line") + 1
    after = BASE_COLUMNS.index("data_dependent") + 1
    params = tuple(f"param_{key}" for key in varied_keys)
    return (*BASE_COLUMNS[:position], *params, *BASE_COLUMNS[position:after], *per_unit, *BASE_COLUMNS[after:])


@dataclass(frozen=True)
class SweepPoint:
    """One run: a grid point (or a setting's reference) with one seed.

    Attributes
    ----------
    key : str
        sha256 (16 hex digits) of the run's configuration: equal keys mean identical runs.
    role : {"private", "reference"}
    setting, line : str
    seed : int
    values : mapping
        The run's value of every varied key (``param_<key>`` columns).
    estimator_params : mapping
        Every estimator parameter (models as ``{"class", "params"}`` specifications).
    split_params : mapping
        :func:`privfed.pipelines.federated_split` keyword arguments.
    reference_key : str
    """

    key: str
    role: str
    setting: str
    line: str
    seed: int
    values: Mapping[str, Any]
    estimator_params: Mapping[str, Any]
    split_params: Mapping[str, Any]
    reference_key: str = ""


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


# --- data ---------------------------------------------------------------------------------------------------
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


# --- expansion ----------------------------------------------------------------------------------------------
def varied_keys(config: SweepConfig) -> tuple[str, ...]:
    """The keys that differ between runs: grid axes, then the settings' keys and links, in order of appearance."""
    keys = list(config.grid)
    for setting in config.settings:
        for key in (*setting.values, *setting.links):
            if key not in keys:
                keys.append(key)
    return tuple(keys)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)


def _resolve(config: SweepConfig, setting: Setting, combo: Mapping[str, Any], *, reference: bool) -> dict[str, Any]:
    """Every key's value for one run: split, fixed parameters, setting, grid, then reference changes and links."""
    values = {**config.split, **config.params, **setting.values, **combo}
    if reference and config.reference is not None:
        for key in config.reference.reset:
            values.pop(key, None)
        values.update(config.reference.set)
    for target, source in setting.links.items():
        if source in values:
            values[target] = values[source]
        else:
            values.pop(target, None)
    return values


def _point(
    config: SweepConfig, values: Mapping[str, Any], *, role: str, setting: str, line: str, seed: int,
    fingerprint: str, varied: tuple[str, ...], defaults: Mapping[str, Any],
) -> SweepPoint:
    split = {key: values[key] for key in SPLIT_KEYS if key in values}
    models = {name: {"class": spec.class_path, "params": dict(spec.params)} for name, spec in config.models.items()}
    estimator_params = {key: value for key, value in defaults.items() if key not in ("random_state", "progress")}
    for key, value in values.items():
        model, dot, parameter = key.partition(".")
        if dot:
            models[model]["params"][parameter] = value
        elif key not in SPLIT_KEYS:
            estimator_params[key] = value
    estimator_params.update(models)
    identity = {
        "estimator": config.estimator,
        "params": {key: value for key, value in estimator_params.items() if key != "n_jobs"},
        "split": split,
        "data": fingerprint,
        "seed": seed,
        "delta": config.delta,
    }
    key = hashlib.sha256(_canonical(identity).encode()).hexdigest()[:16]
    shown = {name: values.get(name, defaults.get(name)) for name in varied}
    return SweepPoint(key=key, role=role, setting=setting, line=line, seed=seed, values=shown,
                      estimator_params=estimator_params, split_params=split)


def expand_points(config: SweepConfig, *, data_fingerprint: str) -> list[SweepPoint]:
    """Every run of the sweep, seeds outermost; each setting's reference run precedes its grid points.

    Runs with equal configurations (equal keys) appear once.
    """
    defaults = config.estimator_defaults()
    varied = varied_keys(config)
    axes = list(config.grid)
    line_axes = axes[:-1]
    points: dict[str, SweepPoint] = {}
    for seed in config.seeds:
        for setting in config.settings:
            common = dict(config=config, setting=setting.label, seed=seed, fingerprint=data_fingerprint,
                          varied=varied, defaults=defaults)
            reference_key = ""
            if config.reference is not None:
                reference = _point(values=_resolve(config, setting, {}, reference=True), role="reference",
                                   line=setting.label, **common)
                points.setdefault(reference.key, reference)
                reference_key = reference.key
            for combo_values in itertools.product(*config.grid.values()):
                combo = dict(zip(axes, combo_values))
                line = ", ".join([setting.label, *(f"{axis} = {combo[axis]}" for axis in line_axes)])
                point = _point(values=_resolve(config, setting, combo, reference=False), role="private",
                               line=line, **common)
                points.setdefault(point.key, dataclasses.replace(point, reference_key=reference_key))
    return list(points.values())


# --- one run --------------------------------------------------------------------------------------------------
def save_ledger(model: Any, directory: Path) -> None:
    """Default ``save_model``: write only the model's ledger (``ledger.json``), no model and no private evidence."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / LEDGER_FILE).write_text(model.ledger_.to_json(), encoding="utf-8")


def _build_estimator(estimator: str, params: Mapping[str, Any], seed: int) -> Any:
    kwargs = {}
    for key, value in params.items():
        is_model = isinstance(value, Mapping) and set(value) == {"class", "params"}
        kwargs[key] = ModelSpec(value["class"], value["params"]).build() if is_model else value
    cls = estimator_class(estimator)
    if "progress" in init_parameters(cls):
        kwargs["progress"] = False
    return cls(**kwargs, random_state=seed)


def check_points(estimator: str, points: Sequence[SweepPoint]) -> None:
    """Every run's parameters, before the first run: each distinct parameter set is built and checked by the
    estimator's own validation (``_validate``), so that a bad grid or setting value stops the sweep at once —
    a ``ValueError`` naming the run's varied values — instead of failing run after run."""
    seen = set()
    for point in points:
        params = _canonical(point.estimator_params)
        if params in seen:
            continue
        seen.add(params)
        try:
            model = _build_estimator(estimator, point.estimator_params, point.seed)
            validate = getattr(model, "_validate", None)
            if validate is not None:
                validate()
        except (ValueError, TypeError) as error:
            values = ", ".join(f"{key} = {value!r}" for key, value in point.values.items())
            raise ValueError(f"the {point.setting or point.role} run with {values or 'its settings'} is invalid, "
                             f"checked before any run: {error}") from None


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


def _describe(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The scalar parameters of a release; a composition's members summarised by kind and value sets."""
    scalars = {k: v for k, v in parameters.items() if isinstance(v, (int, float, str, bool)) or v is None}
    members = parameters.get("members")
    if isinstance(members, list) and members:
        kinds = sorted({member.get("kind", "?") for member in members})
        summary: dict[str, set] = {}
        for member in members:
            for name, value in member.get("parameters", {}).items():
                if isinstance(value, (int, float, str, bool)):
                    summary.setdefault(name, set()).add(value)
        scalars["members"] = {"count": len(members), "kinds": kinds,
                              **{name: sorted(values) for name, values in summary.items()}}
    return scalars


def _sources(ledger: Ledger) -> dict[str, list[dict[str, Any]]]:
    sources: dict[str, list[dict[str, Any]]] = {}
    for entry in ledger.entries:
        for unit, analysis in entry.analyses.items():
            sources.setdefault(unit, []).append({
                "entry": entry.index,
                "mechanism": analysis.kind,
                "queries": analysis.num_queries,
                "data_dependent": analysis.data_dependent,
                "parameters": _describe(analysis.parameters),
                "note": entry.note,
            })
    return sources


def _privacy_columns(ledger: Ledger, delta: float | None) -> dict[str, Any]:
    row: dict[str, Any] = {}
    delta = ledger.delta if delta is None else delta
    if delta is None:
        raise ValueError("the model's ledger has no δ; set delta = ... in the sweep configuration")
    for unit in UNITS:
        if unit not in ledger.units:  # no release recorded at this unit: no guarantee
            for analysis in ANALYSES:
                row[f"epsilon_{unit}_{analysis}"] = row[f"epsilon_{unit}_{analysis}_data_independent"] = math.inf
            row[f"data_dependent_{unit}"], row[f"method_{unit}"] = False, "none"
            continue
        for analysis in ANALYSES:
            report = ledger.account(delta, analysis=analysis, unit=unit)
            row[f"epsilon_{unit}_{analysis}"] = report.epsilon
            row[f"epsilon_{unit}_{analysis}_data_independent"] = report.epsilon_data_independent
            if analysis == "tight":
                row[f"data_dependent_{unit}"], row[f"method_{unit}"] = report.data_dependent, report.method
    unit = ledger.primary_unit
    row.update(
        delta=delta, unit=unit, epsilon=row[f"epsilon_{unit}_tight"], epsilon_classic=row[f"epsilon_{unit}_classic"],
        epsilon_data_independent=row[f"epsilon_{unit}_tight_data_independent"],
        data_dependent=row[f"data_dependent_{unit}"],
        sources=json.dumps(_sources(ledger), ensure_ascii=False),
        unaccounted=json.dumps(list(ledger.unaccounted), ensure_ascii=False),
    )
    return row


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
        params=_canonical(point.estimator_params), split=_canonical(point.split_params),
        n_parties=len(split.parties), n_public=len(split.X_public), n_test=len(split.y_test), n_classes=n_classes,
        sources="{}", unaccounted="[]", ledger="", unit="", method_party="", method_example="",
        **{f"param_{name}": value for name, value in point.values.items()},
    )
    model = _build_estimator(context.estimator, point.estimator_params, point.seed)
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
    row.update(_privacy_columns(model.ledger_, context.delta))
    directory = context.out_dir / RUNS_DIR / point.key
    context.save_model(model, directory)
    if not (directory / LEDGER_FILE).is_file():
        raise RuntimeError(f"save_model did not write {LEDGER_FILE} in {directory}; it must save the model's ledger")
    row["ledger"] = f"{RUNS_DIR}/{point.key}/{LEDGER_FILE}"
    return row


# --- the sweep ------------------------------------------------------------------------------------------------
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


_TEXT_COLUMNS = ("key", "sweep", "role", "setting", "line", "reference_key", "status", "error", "estimator", "params",
                 "split", "unit", "method_party", "method_example", "sources", "unaccounted", "ledger")


def load_results(path: str | Path) -> pd.DataFrame:
    """Read a results CSV written by :func:`run_sweep` (``inf`` ε kept as infinity, text columns as strings)."""
    header = pd.read_csv(path, nrows=0).columns
    text = {column: str for column in _TEXT_COLUMNS if column in header}
    frame = pd.read_csv(path, keep_default_na=False, na_values=["", "nan", "NaN"], dtype=text)
    for column in text:
        frame[column] = frame[column].fillna("")
    return frame


def _parquet_available() -> bool:
    return any(importlib.util.find_spec(engine) is not None for engine in ("pyarrow", "fastparquet"))


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
    done = _previous_rows(csv_path, keys, columns)
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
    if _parquet_available():
        results.to_parquet(out_dir / PARQUET_FILE, index=False)
    return results


def _runs_named(points: list[SweepPoint], n_runs: int) -> str:
    """``"2 of 26 runs: FedKT-L1 gamma=0.1 query_fraction=0.1 seed=0, ..."``, naming at most three."""
    named = [" ".join([point.setting, *(f"{key}={value}" for key, value in point.values.items()),
                       f"seed={point.seed}"]) for point in points[:3]]
    more = ", ..." if len(points) > 3 else ""
    return f"{len(points)} of {n_runs} runs: {', '.join(named)}{more}"


def _previous_rows(csv_path: Path, keys: set[str], columns: tuple[str, ...]) -> pd.DataFrame:
    """Rows of an earlier (interrupted) run of this sweep; the CSV is rewritten with exactly those rows."""
    if csv_path.is_file():
        previous = load_results(csv_path)
        if "key" not in previous:
            raise ValueError(f"{csv_path} has no 'key' column: it is not a results file of a sweep")
        stale = ~previous["key"].isin(keys)
        if stale.any():
            warnings.warn(
                f"{csv_path}: dropping {int(stale.sum())} row(s) of runs that are not in this configuration",
                UserWarning, stacklevel=3,
            )
        previous = previous[~stale].drop_duplicates("key", keep="last").reindex(columns=list(columns))
    else:
        previous = pd.DataFrame(columns=list(columns))
    previous.to_csv(csv_path, index=False)
    return previous
