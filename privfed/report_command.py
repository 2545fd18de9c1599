"""``privfed report``: from a TOML sweep configuration to an HTML report in one command.

``privfed report CONFIG.toml --out DIR [--n-jobs N] [--data-folder DIR] [--save bundle|ledger] [--no-progress]``
runs (or resumes) the sweep described in ``CONFIG.toml`` and renders it into ``DIR``;
``privfed report --render RESULTS.csv --out DIR`` only re-renders a results file.
Every trained model is saved as a privfed bundle (``--save bundle``, default: the
final model with its ledger, no private evidence) or as its ledger alone
(``--save ledger``) under ``DIR/runs/<key>/``. See ``docs/reports.md``.

pandas, matplotlib and scikit-learn are imported only when the command runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["add_report_command", "save_final_model_bundle"]


def save_final_model_bundle(model: Any, directory: Path) -> None:
    """``save_model`` callback of the sweep: the model's final model and ledger as a privfed bundle.

    The model itself is saved when it has no ``final_model_`` (a pipeline that is its own
    final model). Private evidence is not written. ``overwrite=True``: a run interrupted
    after saving is recomputed identically and saved again.
    """
    from privfed.bundle import save_bundle

    save_bundle(getattr(model, "final_model_", model), directory, model.ledger_, overwrite=True)


def add_report_command(subparsers: Any) -> None:
    """Register ``privfed report`` on the ``privfed`` command's subparsers."""
    parser = subparsers.add_parser(
        "report", help="run an ε-versus-accuracy sweep from a TOML file and render it (or re-render results)",
        description="Run the sweep of CONFIG.toml and render report.html, report.md and the ε-versus-accuracy plot "
                    "into --out; with --render RESULTS.csv, only re-render.",
    )
    parser.add_argument("config", nargs="?", help="sweep configuration (TOML; see docs/reports.md)")
    parser.add_argument("--render", metavar="RESULTS.csv", help="re-render a results file instead of running a sweep")
    parser.add_argument("--out", required=True, help="output folder (results.csv, runs/, report.html, ...)")
    parser.add_argument("--n-jobs", type=int, help="grid points run in parallel (default: the config's n_jobs)")
    parser.add_argument("--data-folder", help="folder of the data set named in [data] (overrides data.folder)")
    parser.add_argument("--save", choices=("bundle", "ledger"), default="bundle",
                        help="save each trained model as a bundle (default) or only its ledger")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (by default a bar is shown on a terminal only)")
    parser.set_defaults(handler=_report_command)


def _report_command(args: argparse.Namespace) -> int:
    if (args.config is None) == (args.render is None):
        raise ValueError("give either CONFIG.toml (run a sweep) or --render RESULTS.csv (re-render), not both or neither")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {str(out)!r} is a file; it must be a folder")
    if args.render is not None:
        if args.n_jobs is not None or args.data_folder is not None:
            raise ValueError("--n-jobs and --data-folder apply to a sweep, not to --render")
        results = Path(args.render)
        if not results.is_file():
            raise ValueError(f"--render: results file {str(results)!r} does not exist")
        from privfed.reports.render import render_report

        files = render_report(results, out)
    else:
        from privfed.reports.config import load_config
        from privfed.reports.render import render_report
        from privfed.reports.sweep import RESULTS_FILE, run_sweep, save_ledger

        config = load_config(args.config, data_folder=args.data_folder)
        save = save_final_model_bundle if args.save == "bundle" else save_ledger
        run_sweep(config, out, save_model=save, n_jobs=args.n_jobs, progress=False if args.no_progress else None)
        files = render_report(out / RESULTS_FILE, out)
    print(f"wrote {files.html}, {files.markdown}, {files.png} and {files.svg}")
    return 0
