"""The ``privfed`` command line.

``privfed account VOTES.npy --gamma G [--votes-per-unit K] [--unit U] --delta D [--analysis A] [--json]``
accounts a Laplace noisy-max release from a vote matrix saved with ``numpy.save``.
``privfed report CONFIG.toml --out DIR`` runs an ε-versus-accuracy sweep and renders it
(:mod:`privfed.report_command`).

Exit codes: 0 on success, 2 on unusable input (a one-line message, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import accounting
import accounting.report
from privfed.report_command import add_report_command

__all__ = ["main"]


class _UsageError(Exception):
    """Bad input: reported as one line with exit code 2."""


def _load_votes(path: Path) -> np.ndarray:
    if not path.is_file():
        raise _UsageError(f"VOTES file {str(path)!r} does not exist")
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as error:
        raise _UsageError(f"VOTES file {str(path)!r} is not a plain .npy array: {error}") from None
    except OSError as error:
        raise _UsageError(f"VOTES file {str(path)!r} could not be read: {error}") from None


def _account_command(args: argparse.Namespace) -> int:
    if args.gamma is None:
        raise _UsageError("--gamma is required with a .npy vote file")
    votes = _load_votes(Path(args.votes))
    mechanism = accounting.LaplaceNoisyMax(votes, args.gamma, args.votes_per_unit, unit=args.unit)
    report = accounting.account(mechanism, delta=args.delta, analysis=args.analysis)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.summary())
        for row in report.mechanisms:
            print(
                f"  {row.kind}: {row.num_queries} queries, "
                f"ε = {accounting.report.round_up(row.epsilon)} at α = {row.order:g}, "
                f"data-independent ε = {accounting.report.round_up(row.epsilon_data_independent)}"
                + (f", pure composition ε = {accounting.report.round_up(row.pure_epsilon)}" if row.pure_epsilon else "")
            )
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="privfed", description="Differential-privacy accounting for federated learning.")
    commands = parser.add_subparsers(dest="command", required=True)
    account = commands.add_parser("account", help="account a noisy-max release (or a mechanism file)")
    account.add_argument("votes", help="vote matrix (.npy, shape queries × classes, non-negative integers)")
    account.add_argument("--gamma", type=float, help="Laplace noise parameter γ (noise scale 1/γ)")
    account.add_argument("--votes-per-unit", type=int, default=1, help="votes one protected unit can move (k)")
    account.add_argument("--unit", default="example", choices=("example", "party"), help="protected unit")
    account.add_argument("--delta", type=float, required=True, help="target δ in (0, 1)")
    account.add_argument("--analysis", default="tight", choices=("tight", "classic"))
    account.add_argument("--json", action="store_true", help="print the report as JSON")
    account.set_defaults(handler=_account_command)
    add_report_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``privfed`` command; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (_UsageError, ValueError, TypeError) as error:
        print(f"privfed {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
