"""Epsilon-versus-accuracy sweeps and reports (needs the ``reports`` extra: pandas, matplotlib).

* :func:`load_config` / :func:`parse_config` — TOML sweep configurations (:mod:`privfed.reports.config`);
* :func:`run_sweep` — run or resume a sweep, one row per run in ``results.csv`` (:mod:`privfed.reports.sweep`; its
  runs: :mod:`privfed.reports.grid`; the table: :mod:`privfed.reports.results`);
* :func:`render_report` — the ε-versus-accuracy plot, Markdown and self-contained HTML (:mod:`privfed.reports.render`).

See ``docs/reports.md``. pandas and matplotlib load on first use of the sweep or the renderer. Imports
``privfed.accounting`` and ``privfed.pipelines`` only, never the face above it (``privfed``'s CLI, bundles, audits).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .config import ConfigError, SweepConfig, load_config, parse_config

_LAZY = {
    "BASE_COLUMNS": "results",
    "load_results": "results",
    "result_columns": "results",
    "run_sweep": "sweep",
    "save_ledger": "sweep",
    "ReportFiles": "render",
    "render_report": "render",
    "summarize": "render",
}

__all__ = ["ConfigError", "SweepConfig", "load_config", "parse_config", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'reports' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
