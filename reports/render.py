"""Rendering a sweep's results: the ε-versus-accuracy plot, the papers' table, the sources of every ε.

:func:`render_report` turns a results table (:func:`privfed.reports.sweep.run_sweep`'s
DataFrame, or its ``results.csv``) into

* ``epsilon_accuracy.png`` and ``.svg``: accuracy against ε, one panel per protected
  unit (ε of different units are never drawn on one axis), one line per plot line
  (a setting and every grid axis but the last), the mean over seeds with a ±1 standard
  deviation bar, and each setting's non-private reference as a dashed line. ε is the
  largest over the seeds (a bound for every seed's model; the bar to its left reaches the
  smallest when a data-dependent ε differs between seeds). The ε axis is logarithmic
  when the plotted ε span a factor of 10 or more;
* ``report.md`` and ``report.html`` (self-contained: the PNG is embedded in base64):
  the table in the papers' shape, where every ε comes from (mechanism, unit,
  analysis, data dependence), failed runs, the environment and the exact configuration.

Printed ε are rounded up (:func:`privfed.accounting.report.round_up`), never down.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..accounting.documents import parse_json
from ..accounting.mechanism import UNITS
from ..accounting.report import round_up
from .results import load_results
from .sweep import SWEEP_FILE

__all__ = ["PLOT_NAME", "ReportFiles", "plot_epsilon_accuracy", "render_report", "summarize", "varying_along_lines"]

PLOT_NAME = "epsilon_accuracy"
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_LINESTYLES = ("-", "--", "-.", ":")


@dataclass(frozen=True)
class ReportFiles:
    """The files :func:`render_report` wrote."""

    html: Path
    markdown: Path
    png: Path
    svg: Path


# --- summary -------------------------------------------------------------------------------------------------
def _param_columns(frame: pd.DataFrame) -> list[str]:
    return [column for column in frame.columns if column.startswith("param_")]


def _varying(frame: pd.DataFrame, columns: Sequence[str]) -> list[str]:
    return [column for column in columns if frame[column].astype(str).nunique() > 1]


def summarize(results: pd.DataFrame) -> pd.DataFrame:
    """One row per grid point, in the sweep's order, aggregated over the seeds whose run succeeded.

    Columns: ``setting``, ``line``, the ``param_*`` columns, ``seeds`` (successful runs), ``runs``
    (all runs), ``n_queries``, ``n_local_queries``, ``unit``, per unit ``epsilon_<unit>`` (largest over
    seeds, tight), ``epsilon_<unit>_min``, ``epsilon_<unit>_classic``, ``epsilon_<unit>_data_independent``,
    ``data_dependent_<unit>``, ``method_<unit>``; ``accuracy_mean``, ``accuracy_std``, ``auc_mean``,
    ``reference_accuracy_mean``, ``reference_accuracy_std``, ``reference_seeds`` (the non-private runs
    of the point's seeds, failed private runs included), ``keys``. Points whose runs all failed are left out.
    """
    private = results[results["role"] == "private"]
    references = results[(results["role"] == "reference") & (results["status"] == "ok")].set_index("key")
    params = _param_columns(results)
    rows = []
    for _, runs in private.groupby(["setting", "line", *params], dropna=False, sort=False):
        group = runs[runs["status"] == "ok"]
        if group.empty:
            continue
        first = group.iloc[0]
        row: dict[str, Any] = {"setting": first["setting"], "line": first["line"]}
        row.update({column: first[column] for column in params})
        row.update(
            seeds=len(group), runs=len(runs), n_queries=group["n_queries"].mean(),
            n_local_queries=group["n_local_queries"].mean(), unit=", ".join(sorted(set(group["unit"]))),
            accuracy_mean=group["accuracy"].mean(),
            accuracy_std=group["accuracy"].std(ddof=1) if len(group) > 1 else 0.0,
            auc_mean=group["auc"].mean(), keys=list(group["key"]),
        )
        for unit in UNITS:
            row[f"epsilon_{unit}"] = group[f"epsilon_{unit}_tight"].max()
            row[f"epsilon_{unit}_min"] = group[f"epsilon_{unit}_tight"].min()
            row[f"epsilon_{unit}_classic"] = group[f"epsilon_{unit}_classic"].max()
            row[f"epsilon_{unit}_data_independent"] = group[f"epsilon_{unit}_tight_data_independent"].max()
            below = group[f"epsilon_{unit}_tight"] < group[f"epsilon_{unit}_tight_data_independent"]
            # data-dependent where some seed's ε depends on the data: below the data-independent ε
            row[f"data_dependent_{unit}"] = bool((group[f"data_dependent_{unit}"].astype(str).eq("True") & below).any())
            row[f"method_{unit}"] = ", ".join(sorted(set(group[f"method_{unit}"].astype(str))))
        linked = references.loc[references.index.intersection(list(set(runs["reference_key"]) - {""}))]
        row["reference_accuracy_mean"] = linked["accuracy"].mean() if len(linked) else math.nan
        row["reference_accuracy_std"] = linked["accuracy"].std(ddof=1) if len(linked) > 1 else 0.0
        row["reference_seeds"] = len(linked)
        rows.append(row)
    return pd.DataFrame(rows)


def _plotted_units(summary: pd.DataFrame) -> list[str]:
    return [u for u in UNITS if f"epsilon_{u}" in summary and np.isfinite(summary[f"epsilon_{u}"]).any()]


def _references(summary: pd.DataFrame) -> dict[float, list[str]]:
    """Each distinct non-private reference accuracy and the settings it belongs to."""
    owners: dict[float, list[str]] = {}
    for setting, group in summary.groupby("setting", sort=False):
        for value in group["reference_accuracy_mean"].dropna().unique():
            owners.setdefault(float(value), []).append(str(setting))
    return owners


# --- plot ------------------------------------------------------------------------------------------------------
def varying_along_lines(summary: pd.DataFrame) -> list[str]:
    """The varied keys (``param_<key>`` columns, prefix dropped) that take several values within one plot line."""
    columns = [column for column in summary.columns if column.startswith("param_")]
    lines = summary.groupby("line", sort=False)
    return [_short(column) for column in columns if (lines[column].nunique(dropna=False) > 1).any()]


def plot_epsilon_accuracy(summary: pd.DataFrame, *, delta: float | None = None, n_classes: int | None = None) -> Any:
    """The ε-versus-accuracy figure (a matplotlib ``Figure`` on the Agg canvas), one panel per unit.

    Each point is labelled with its value of what varies along its line (its title names it); ``n_classes``
    draws the chance line, random guessing's accuracy 1/C (whatever the classes' frequencies).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    units = _plotted_units(summary) if len(summary) else []
    figure = Figure(figsize=(6.2 * max(len(units), 1), 4.6), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, max(len(units), 1), sharey=True, squeeze=False)[0]
    if not units:
        axes[0].text(0.5, 0.5, "no successful private run with a finite ε", ha="center", va="center")
        axes[0].set_axis_off()
        return figure
    settings = list(dict.fromkeys(summary["setting"]))
    colours = {setting: f"C{index % 10}" for index, setting in enumerate(settings)}
    varying = varying_along_lines(summary)
    if varying:
        figure.suptitle(f"along each line {', '.join(varying)} {'varies' if len(varying) == 1 else 'vary'} "
                        f"(each point labelled with its {varying[0]})", fontsize="medium")
    for axis, unit in zip(axes, units):
        column = f"epsilon_{unit}"
        plotted = summary[np.isfinite(summary[column])]
        for setting in settings:
            in_setting = plotted[plotted["setting"] == setting]
            for index, (line, points) in enumerate(in_setting.groupby("line", sort=False)):
                points = points.sort_values(column)
                x, y = points[column].to_numpy(float), points["accuracy_mean"].to_numpy(float)
                axis.errorbar(
                    x, y, yerr=points["accuracy_std"].to_numpy(float),
                    xerr=[x - points[f"{column}_min"].to_numpy(float), np.zeros_like(x)],
                    color=colours[setting], marker=_MARKERS[index % len(_MARKERS)],
                    linestyle=_LINESTYLES[index % len(_LINESTYLES)], capsize=3, markersize=5, label=line,
                )
                if varying:
                    for x_value, y_value, label in zip(x, y, points[f"param_{varying[0]}"]):
                        axis.annotate(_value(label), (x_value, y_value), textcoords="offset points", xytext=(4, 4),
                                      fontsize="x-small", color=colours[setting])
        for value, owners in _references(summary).items():
            colour = colours[owners[0]] if len(owners) == 1 else "0.35"
            axis.axhline(value, color=colour, linestyle=(0, (5, 3)), linewidth=1.2, alpha=0.8,
                         label=f"non-private (L0), {' / '.join(owners)}: {100 * value:.1f} %")
        if n_classes is not None and n_classes >= 2:
            axis.axhline(1.0 / n_classes, color="0.5", linestyle=":", linewidth=1.2,
                         label=f"random guessing (1/{n_classes}): {100 / n_classes:.1f} %")
        finite = plotted[column][plotted[column] > 0]
        if len(finite) and finite.max() / finite.min() >= 10:
            axis.set_xscale("log")
            axis.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
            axis.xaxis.set_minor_formatter(NullFormatter())
        delta_text = f", δ = {delta:g}" if delta is not None else ""
        axis.set_xlabel(f"ε, {unit} level (tight analysis{delta_text}; largest over seeds)")
        axis.set_title(f"{unit}-level DP")
        axis.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("test accuracy (mean ± sd over seeds)")
    handles, labels = axes[0].get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    if unique:
        figure.legend(unique.values(), unique.keys(), loc="outside lower center", ncols=min(2, len(unique)),
                      fontsize="small", frameon=False)
    return figure


# --- text --------------------------------------------------------------------------------------------------------
def _value(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float) and value.is_integer():
        return str(int(value)) if abs(value) >= 1 else f"{value:g}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _epsilon(value: float) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "–"
    return "∞ (no guarantee)" if math.isinf(value) else round_up(float(value))


def _percent(mean: float, std: float | None = None) -> str:
    if math.isnan(mean):
        return "–"
    return f"{100 * mean:.2f}" + (f" ± {100 * std:.2f}" if std is not None and not math.isnan(std) else "")


def _queries(value: float) -> str:
    return "–" if math.isnan(value) else (str(int(value)) if float(value).is_integer() else f"{value:.1f}")


def _short(column: str) -> str:
    return column.removeprefix("param_")


def paper_tables(summary: pd.DataFrame) -> list[tuple[str, list[str], list[list[str]]]]:
    """Per setting: (title, headers, rows) of the table in the papers' shape."""
    tables = []
    for setting, group in summary.groupby("setting", sort=False):
        params = _varying(group, _param_columns(group))
        units = [u for u in UNITS if np.isfinite(group[f"epsilon_{u}"]).any()]
        headers = [_short(p) for p in params] + ["queries"]
        headers += [f"ε ({u} level)" for u in units] + ["accuracy (%)", "non-private accuracy (%)"]
        binary = group["auc_mean"].notna().any()
        if binary:
            headers.insert(-1, "AUC")
        incomplete = bool((group["seeds"] < group["runs"]).any())
        if incomplete:
            headers.insert(len(params) + 1, "seeds ok / run")
        rows = []
        for _, row in group.iterrows():
            cells = [_value(row[p]) for p in params] + [_queries(row["n_queries"])]
            if incomplete:
                cells.append(f"{row['seeds']} / {row['runs']}")
            for unit in units:
                marker = " *" if row[f"data_dependent_{unit}"] else ""
                cells.append(_epsilon(row[f"epsilon_{unit}"]) + marker)
            cells.append(_percent(row["accuracy_mean"], row["accuracy_std"]))
            if binary:
                cells.append("–" if math.isnan(row["auc_mean"]) else f"{row['auc_mean']:.3f}")
            cells.append(_percent(row["reference_accuracy_mean"], row["reference_accuracy_std"]))
            rows.append(cells)
        tables.append((str(setting), headers, rows))
    return tables


def _describe_release(source: Mapping[str, Any]) -> str:
    parameters = dict(source.get("parameters", {}))
    members = parameters.pop("members", None)
    shown = {k: v for k, v in parameters.items() if k in ("gamma", "sigma", "votes_per_unit", "noise_multiplier",
                                                           "epsilon", "sample_rate", "steps")}
    text = f"{source['mechanism']} ({source['queries']} queries"
    text += "".join(f", {k} = {_value(v)}" for k, v in shown.items()) + ")"
    if members:
        details = {k: v for k, v in members.items() if k in ("gamma", "votes_per_unit", "sigma")}
        text += f" over {members['count']} × {'/'.join(members['kinds'])}"
        text += "".join(f", {k} ∈ {{{', '.join(_value(x) for x in v)}}}" for k, v in details.items())
    return text


def sources_table(results: pd.DataFrame, summary: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Where each grid point's ε comes from: per unit, the ledger's releases and the three ε."""
    headers = ["setting", "point", "unit", "releases (mechanism, queries, parameters)", "data-dependent",
               "ε tight (accountant)", "ε classic", "data-independent ε (tight)"]
    by_key = results.set_index("key")
    rows = []
    for _, row in summary.iterrows():
        params = [p for p in _varying(summary[summary["setting"] == row["setting"]], _param_columns(summary))]
        point = ", ".join(f"{_short(p)} = {_value(row[p])}" for p in params) or "–"
        sources = parse_json(by_key.loc[row["keys"][0], "sources"] or "{}", "sources")
        for unit in UNITS:
            if unit not in sources:
                continue
            releases = "; ".join(_describe_release(source) for source in sources[unit])
            rows.append([
                str(row["setting"]), point, unit, releases, "yes" if row[f"data_dependent_{unit}"] else "no",
                f"{_epsilon(row[f'epsilon_{unit}'])} ({row[f'method_{unit}'].upper()})",
                _epsilon(row[f"epsilon_{unit}_classic"]), _epsilon(row[f"epsilon_{unit}_data_independent"]),
            ])
    return headers, rows


def _notes(results: pd.DataFrame) -> dict[str, list[str]]:
    """Per setting: the ledger notes of its first grid point's releases, and every unaccounted release."""
    notes: dict[str, list[str]] = {}
    ok = results[(results["status"] == "ok") & (results["role"] == "private")]
    for setting, group in ok.groupby("setting", sort=False):
        texts: dict[str, None] = {}
        for unit_sources in parse_json(group.iloc[0]["sources"] or "{}", "sources").values():
            for source in unit_sources:
                if source.get("note"):
                    texts.setdefault(f"Release (first grid point, {group.iloc[0]['line']}): {source['note']}")
        for value in group["unaccounted"]:
            for description in parse_json(value or "[]", "unaccounted"):
                texts.setdefault("UNACCOUNTED, not covered by ε: " + description)
        notes[str(setting)] = list(texts)
    return notes


# --- output --------------------------------------------------------------------------------------------------------
def _markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def cell(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _sweep_description(results_path: Path | None) -> dict[str, Any]:
    if results_path is None:
        return {}
    path = results_path.parent / SWEEP_FILE
    if not path.is_file():
        return {}
    try:
        return parse_json(path.read_text(encoding="utf-8"), SWEEP_FILE)
    except (OSError, ValueError):
        return {}


def _environment_rows(environment: Mapping[str, Any]) -> list[list[str]]:
    rows = [[key, str(environment[key])] for key in ("created", "platform", "machine", "cpu_count", "git_commit")
            if key in environment]
    rows += [[name, "not installed" if version is None else str(version)]
             for name, version in environment.get("software", {}).items()]
    return rows


def render_report(
    results: pd.DataFrame | str | Path,
    out_dir: str | Path,
    *,
    title: str | None = None,
    config_text: str | None = None,
    environment: Mapping[str, Any] | None = None,
) -> ReportFiles:
    """Write the plot (PNG, SVG), ``report.md`` and a self-contained ``report.html`` into ``out_dir``.

    Parameters
    ----------
    results : DataFrame or path
        A results table of :func:`privfed.reports.sweep.run_sweep`, or the path of its CSV (whose
        ``sweep.json`` beside it supplies the configuration and environment when present).
    out_dir : str or Path
    title : str, optional
        Default: the sweep's name.
    config_text, environment : optional
        The configuration (TOML text) and environment to print; default: from ``sweep.json``.
    """
    results_path = None
    if isinstance(results, (str, Path)):
        results_path = Path(results)
        if not results_path.is_file():
            raise FileNotFoundError(f"results file {str(results_path)!r} does not exist")
        results = load_results(results_path)
    if not isinstance(results, pd.DataFrame):
        raise TypeError(f"results must be a DataFrame or the path of a results CSV, got {type(results).__name__}")
    missing = {"key", "status", "role", "setting", "line", "accuracy", "sources"} - set(results.columns)
    if missing:
        raise ValueError(f"results lacks the column(s) {sorted(missing)}: not a results table of reports.sweep")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    described = _sweep_description(results_path)
    config_text = described.get("config_toml", "") if config_text is None else config_text
    environment = described.get("environment", {}) if environment is None else environment
    name = str(results["sweep"].iloc[0]) if "sweep" in results and len(results) else "sweep"
    title = title or f"ε versus accuracy: {name}"
    deltas = sorted(set(results.loc[results["status"] == "ok", "delta"].dropna()))

    summary = summarize(results)
    classes = sorted(set(results.loc[results["status"] == "ok", "n_classes"].dropna())) if "n_classes" in results \
        else []
    figure = plot_epsilon_accuracy(summary, delta=deltas[0] if len(deltas) == 1 else None,
                                   n_classes=int(classes[0]) if len(classes) == 1 else None)
    png, svg = out_dir / f"{PLOT_NAME}.png", out_dir / f"{PLOT_NAME}.svg"
    figure.savefig(png, dpi=100)
    figure.savefig(svg)

    tables = paper_tables(summary) if len(summary) else []
    source_headers, source_rows = sources_table(results, summary) if len(summary) else ([], [])
    notes = _notes(results)
    errors = results[results["status"] != "ok"]
    error_rows = [[str(r["setting"]), str(r["role"]), str(r["seed"]), str(r["error"])] for _, r in errors.iterrows()]
    environment_rows = _environment_rows(environment)
    counts = (f"{len(results)} runs ({int((results['role'] == 'private').sum())} private, "
              f"{int((results['role'] == 'reference').sum())} non-private references), "
              f"{len(errors)} failed; seeds: {sorted({int(s) for s in results['seed']})}")
    reading = (
        "ε is an upper bound at δ = " + ", ".join(f"{d:g}" for d in deltas) + ", the largest over the seeds, rounded "
        "up, from each model's own ledger (ledger.account()); tight analysis (RDP, or PLD where the accountant "
        "says so). A star (*) marks a data-dependent ε: computed from private vote counts, it is itself private and "
        "must not be published as is — the data-independent ε is in the section below. ∞ means no guarantee."
    )

    markdown = [f"# {title}", "", counts, "", f"![ε versus accuracy]({png.name})", "",
                f"Plot: [{png.name}]({png.name}), [{svg.name}]({svg.name}).", "", reading, ""]
    for setting, headers, rows in tables:
        markdown += [f"## {setting}", "", _markdown_table(headers, rows), ""]
    markdown += ["## Where each ε comes from", "", _markdown_table(source_headers, source_rows), ""]
    for setting, texts in notes.items():
        markdown += [f"**{setting}** — what the ledgers record:", ""] + [f"- {text}" for text in texts] + [""]
    if error_rows:
        markdown += ["## Failed runs", "", _markdown_table(["setting", "role", "seed", "error"], error_rows), ""]
    markdown += ["## Environment", "", _markdown_table(["", "value"], environment_rows), ""]
    if config_text:
        markdown += ["## Configuration", "", "Rerun with `privfed report config.toml --out DIR` (same seeds, same "
                     "numbers; wall times differ).", "", "```toml", config_text.rstrip(), "```", ""]
    markdown_path = out_dir / "report.md"
    markdown_path.write_text("\n".join(markdown), encoding="utf-8")

    encoded = base64.b64encode(png.read_bytes()).decode("ascii")
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:system-ui,sans-serif;max-width:1300px;margin:1.5em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;margin:0.6em 0 1.4em;font-size:0.9em}"
        "th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:left;vertical-align:top}"
        "th{background:#f2f2f2}pre{background:#f7f7f7;padding:0.8em;overflow-x:auto}"
        "img{max-width:100%}.note{color:#555}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>", f"<p>{html.escape(counts)}</p>",
        f'<img id="plot" alt="ε versus accuracy" src="data:image/png;base64,{encoded}">',
        f'<p>Plot files: <a href="{png.name}">{png.name}</a>, <a href="{svg.name}">{svg.name}</a>.</p>',
        f'<p class="note">{html.escape(reading)}</p>',
    ]
    for setting, headers, rows in tables:
        parts += [f"<h2>{html.escape(setting)}</h2>", _html_table(headers, rows)]
    parts += ["<h2>Where each ε comes from</h2>", _html_table(source_headers, source_rows)]
    for setting, texts in notes.items():
        parts += [f"<p><strong>{html.escape(setting)}</strong> — what the ledgers record:</p><ul>"]
        parts += [f"<li>{html.escape(text)}</li>" for text in texts] + ["</ul>"]
    if error_rows:
        parts += ["<h2>Failed runs</h2>", _html_table(["setting", "role", "seed", "error"], error_rows)]
    parts += ["<h2>Environment</h2>", _html_table(["", "value"], environment_rows)]
    if config_text:
        parts += ["<h2>Configuration</h2>", "<p>Rerun with <code>privfed report config.toml --out DIR</code>.</p>",
                  f"<pre>{html.escape(config_text)}</pre>"]
    parts += ["</body></html>"]
    html_path = out_dir / "report.html"
    html_path.write_text("\n".join(parts), encoding="utf-8")
    return ReportFiles(html=html_path, markdown=markdown_path, png=png, svg=svg)
