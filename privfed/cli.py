"""The ``privfed`` command line.

``privfed account VOTES.npy --gamma G [--votes-per-unit K] [--unit U] --delta D [--analysis A] [--json]``
accounts a Laplace noisy-max release from a vote matrix saved with ``numpy.save``;
``privfed account PIPELINE.toml --delta D`` (or ``.json``) accounts the mechanisms a
file lists, composed in order (see :mod:`privfed.accounting.spec`).
accounts a Laplace noisy-max release from a vote matrix saved with ``numpy.save``.
``privfed report CONFIG.toml --out DIR`` runs an ε-versus-accuracy sweep and renders it
(:mod:`privfed.report_command`).

Exit codes: 0 on success, 2 on unusable input (a one-line message, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from privfed import accounting
from privfed.audit_command import add_audit_command
from privfed.demo import add_demo_command
from privfed.report_command import add_report_command
from privfed.sign_command import add_sign_commands

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


def _mechanisms(args: argparse.Namespace) -> list[accounting.Mechanism]:
    path = Path(args.source)
    if path.suffix.lower() in (".json", ".toml"):
        if args.gamma is not None:
            raise _UsageError("--gamma applies to a .npy vote file; a mechanism file states each mechanism's parameters")
        if not path.is_file():
            raise _UsageError(f"mechanism file {str(path)!r} does not exist")
        try:
            return accounting.load_mechanisms(path)
        except (OSError, tomllib.TOMLDecodeError, json.JSONDecodeError) as error:
            raise _UsageError(f"mechanism file {str(path)!r} could not be read: {error}") from None
    if args.gamma is None:
        raise _UsageError("--gamma is required with a .npy vote file")
    votes = _load_votes(path)
    return [accounting.LaplaceNoisyMax(votes, args.gamma, args.votes_per_unit, unit=args.unit)]


def _account_command(args: argparse.Namespace) -> int:
    report = accounting.account(_mechanisms(args), delta=args.delta, analysis=args.analysis)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.summary())
        for row in report.mechanisms:
            where = "by PLD" if row.method == "pld" else f"at α = {row.order:g}"
            print(
                f"  {row.kind}: {row.num_queries} queries, "
                f"ε = {accounting.report.round_up(row.epsilon)} {where}, "
                f"data-independent ε = {accounting.report.round_up(row.epsilon_data_independent)}"
                + (f", pure composition ε = {accounting.report.round_up(row.pure_epsilon)}" if row.pure_epsilon else "")
            )
        for note in report.notes:
            print(f"  note: {note}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="privfed", description="Differential-privacy accounting for federated learning.")
    commands = parser.add_subparsers(dest="command", required=True)
    account = commands.add_parser("account", help="account a noisy-max release or a file of mechanisms")
    account.add_argument(
        "source",
        help="a vote matrix (.npy, queries × classes, non-negative integers) or a mechanism file (.toml or .json)",
    )
    account.add_argument("--gamma", type=float, help="Laplace noise parameter γ (noise scale 1/γ), for a .npy file")
    account.add_argument("--votes-per-unit", type=int, default=1, help="votes one protected unit can move (k), for a .npy file")
    account.add_argument("--unit", default="example", choices=("example", "party"), help="protected unit, for a .npy file")
    account.add_argument("--delta", type=float, required=True, help="target δ in (0, 1)")
    account.add_argument("--analysis", default="tight", choices=("tight", "classic"))
    account.add_argument("--json", action="store_true", help="print the report as JSON")
    account.set_defaults(handler=_account_command)
    add_demo_command(commands)
    add_audit_command(commands)
    add_report_command(commands)
    add_sign_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``privfed`` command; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (_UsageError, ValueError, TypeError, FileExistsError) as error:
        print(f"privfed {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
