"""``privfed report``: from a TOML sweep configuration to an HTML report in one command.

``privfed report CONFIG.toml --out DIR [--n-jobs N] [--data-folder DIR] [--save bundle|ledger] [--no-progress]``
runs (or resumes) the sweep described in ``CONFIG.toml`` and renders it into ``DIR``;
``privfed report --render RESULTS.csv --out DIR`` only re-renders a results file.
Every trained model is saved as a privfed bundle (``--save bundle``, default: the
final model with its ledger, no private evidence) or as its ledger alone
(``--save ledger``) under ``DIR/runs/<key>/``. See ``docs/reports.md``.

pandas, matplotlib and scikit-learn are imported only when the command runs. Exit codes:
0 every run succeeded, 2 bad input (checked before any run), 3 the sweep finished but
some runs failed (one line per distinct failure on stderr), 130 interrupted (the
message says how many runs are saved; rerunning resumes and says how many it reused).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Any

from privfed.cli.arguments import EXIT_INTERRUPTED, EXIT_OK, EXIT_RUNS_FAILED
from privfed.output_folder import check_output_folder

__all__ = ["add_report_command", "failure_lines", "save_final_model_bundle"]


def save_final_model_bundle(model: Any, directory: Path) -> None:
    """``save_model`` callback of the sweep: the model's final model and ledger as a privfed bundle.

    The model itself is saved when it has no ``final_model_`` (a pipeline that is its own
    final model). Private evidence is not written. ``overwrite=True``: a run interrupted
    after saving is recomputed identically and saved again.
    """
    from privfed.bundle.save import save_bundle

    save_bundle(getattr(model, "final_model_", model), directory, model.ledger_, overwrite=True)


def add_report_command(subparsers: Any) -> None:
    """Register ``privfed report`` on the ``privfed`` command's subparsers."""
    parser = subparsers.add_parser(
        "report", help="run an ε-versus-accuracy sweep from a TOML file and render it (or re-render results)",
        description="Run the sweep of CONFIG.toml and render report.html, report.md and the ε-versus-accuracy plot "
                    "into --out; with --render RESULTS.csv, only re-render. An interrupted sweep resumes when the "
                    "same command is rerun (the runs already in --out/results.csv are reused). docs/reports.md.",
        epilog="examples:\n"
               "  privfed examples ex && privfed report ex/report_digits.toml --out digits-report\n"
               "  privfed report --render digits-report/results.csv --out digits-report-again\n\n"
               "exit codes: 0 ok, 2 bad input, 3 finished but some runs failed (one line per distinct failure on "
               "stderr), 130 interrupted (rerun to resume)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", nargs="?", help="sweep configuration (TOML; see docs/reports.md)")
    parser.add_argument("--render", metavar="RESULTS.csv", help="re-render a results file instead of running a sweep")
    parser.add_argument("--out", required=True, help="output folder (results.csv, runs/, report.html, ...)")
    parser.add_argument("--n-jobs", type=_nonzero_int,
                        help="grid points run in parallel, joblib convention (default: the config's n_jobs)")
    parser.add_argument("--data-folder", help="folder of the data set named in [data] (overrides data.folder)")
    parser.add_argument("--save", choices=("bundle", "ledger"), default="bundle",
                        help="save each trained model as a bundle (default) or only its ledger")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar (by default a bar is shown on a terminal only)")
    parser.set_defaults(handler=_report_command)


def _nonzero_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a non-zero integer, got {text!r}") from None
    if value == 0:
        raise argparse.ArgumentTypeError("must be a non-zero integer (>= 1, or negative as in joblib), got 0")
    return value


def failure_lines(results: Any) -> list[str]:
    """One line per distinct error among a sweep's failed runs, most frequent first."""
    failed = results[results["status"] != "ok"]
    counts = failed["error"].fillna("").replace("", "unknown error").value_counts()
    return [f"{count} of {len(results)} runs failed: {' '.join(str(error).split())}" for error, count in counts.items()]


def _report_command(args: argparse.Namespace) -> int:
    if (args.config is None) == (args.render is None):
        raise ValueError(
            "give either CONFIG.toml (run a sweep) or --render RESULTS.csv (re-render), not both or neither"
        )
    out = check_output_folder(args.out, "--out")
    if args.render is not None:
        if args.n_jobs is not None or args.data_folder is not None:
            raise ValueError("--n-jobs and --data-folder apply to a sweep, not to --render")
        results = Path(args.render)
        if not results.is_file():
            from privfed.accounting.documents import not_a_file
            raise ValueError(f"--render: results file {str(results)!r} {not_a_file(results)}")
        from privfed.reports.render import render_report

        files = render_report(results, out)
        print(f"wrote {files.html}, {files.markdown}, {files.png} and {files.svg}")
        return EXIT_OK
    from privfed.reports.config import load_config
    from privfed.reports.render import render_report
    from privfed.reports.results import RESULTS_FILE
    from privfed.reports.sweep import SweepInterrupted, run_sweep, save_ledger

    config = load_config(args.config, data_folder=args.data_folder)
    save = save_final_model_bundle if args.save == "bundle" else save_ledger
    try:
        with warnings.catch_warnings(record=True) as caught:  # the runs' warnings, each once, after the bar
            warnings.simplefilter("always")
            results = run_sweep(config, out, save_model=save, n_jobs=args.n_jobs,
                                progress=False if args.no_progress else None,
                                log=lambda line: print(f"privfed report: {line}", file=sys.stderr))
    except SweepInterrupted as interrupted:
        print(f"privfed report: {interrupted}", file=sys.stderr)
        return EXIT_INTERRUPTED
    for warning in caught:
        print(f"privfed report: warning: {warning.message}", file=sys.stderr)
    files = render_report(out / RESULTS_FILE, out)
    print(f"wrote {files.html}, {files.markdown}, {files.png} and {files.svg}")
    failures = failure_lines(results)
    for line in failures:
        print(f"privfed report: {line}", file=sys.stderr)
    return EXIT_RUNS_FAILED if failures else EXIT_OK
