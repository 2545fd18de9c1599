"""A sweep's results table: its columns, each run's privacy columns from its own ledger, and reading it back.

One row per run; the columns are listed in :data:`BASE_COLUMNS` and ``docs/reports.md``. Every ε comes from the
trained model's own :class:`~accounting.Ledger` (``ledger.account(delta, analysis=..., unit=...)``); a unit the
ledger records no release for has ε = ∞: no guarantee. :func:`load_results` reads ``results.csv`` back,
:func:`previous_rows` keeps the rows of an interrupted sweep that its configuration still holds.
"""

from __future__ import annotations

import importlib.util
import json
import math
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from ..accounting.ledger import Ledger
from ..accounting.mechanism import UNITS

__all__ = ["ANALYSES", "BASE_COLUMNS", "PARQUET_FILE", "RESULTS_FILE", "load_results", "parquet_available",
           "previous_rows", "privacy_columns", "result_columns"]

RESULTS_FILE = "results.csv"
PARQUET_FILE = "results.parquet"
ANALYSES = ("tight", "classic")

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


def privacy_columns(ledger: Ledger, delta: float | None) -> dict[str, Any]:
    """A run's privacy columns from its own ledger: ε per unit and analysis at ``delta`` (ε = ∞ at a unit the
    ledger records no release for), the primary unit's columns, its releases and what is not accounted."""
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


def parquet_available() -> bool:
    """Whether pandas can write Parquet here (pyarrow or fastparquet is installed)."""
    return any(importlib.util.find_spec(engine) is not None for engine in ("pyarrow", "fastparquet"))


def previous_rows(csv_path: Path, keys: set[str], columns: tuple[str, ...]) -> pd.DataFrame:
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
