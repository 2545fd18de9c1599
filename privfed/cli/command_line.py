"""The ``privfed`` command line.

``privfed account VOTES.npy --gamma G [--votes-per-unit K] [--unit U] --delta D [--analysis A] [--json]``
accounts a Laplace noisy-max release from a vote matrix saved with ``numpy.save``;
``privfed account PIPELINE.toml --delta D`` (or ``.json``) accounts the mechanisms a
file lists, composed in order (see :mod:`privfed.accounting.spec`).
``privfed examples DIR`` writes the example files shipped in the package;
``privfed demo``, ``privfed report``, ``privfed audit`` and ``privfed budget`` are described in their modules.

The parser is built from the standard library alone; each subcommand imports what it
needs when it runs, so that ``privfed --help`` and ``privfed --version`` are instant.
Exit codes (:mod:`privfed.cli.arguments`, ``docs/cli.md``): 0 success, 1 a check failed,
2 bad input (one line on stderr, never a traceback), 3 finished with failed runs,
130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from privfed import __version__
from privfed.cli.arguments import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    Parser,
    check_gamma,
    integer_at_least,
    number_in,
)
from privfed.cli.audit_command import add_audit_command
from privfed.cli.budget_command import add_budget_command
from privfed.cli.demo_command import add_demo_command
from privfed.cli.evidence_command import add_evidence_command
from privfed.cli.examples_command import add_examples_command
from privfed.cli.federation_command import add_federation_command
from privfed.cli.report_command import add_report_command
from privfed.cli.selftest_command import add_selftest_command
from privfed.cli.sign_command import add_sign_commands

__all__ = ["main"]


def _mechanisms(args: argparse.Namespace) -> list:
    from privfed import accounting
    from privfed.accounting.documents import load_npy

    path = Path(args.source)
    if path.is_dir():
        raise ValueError(f"SOURCE {str(path)!r} is a folder; give a vote matrix (.npy) or a mechanism file (.toml or "
                         ".json) — a bundle folder is checked with privfed audit")
    if path.suffix.lower() in (".json", ".toml"):
        given = [flag for flag, value in (("--gamma", args.gamma), ("--votes-per-unit", args.votes_per_unit),
                                          ("--unit", args.unit)) if value is not None]
        if given:
            raise ValueError(f"{given[0]} applies to a .npy vote file; a mechanism file states each mechanism's "
                             "parameters")
        if not path.is_file():
            from privfed.accounting.documents import not_a_file
            raise ValueError(f"mechanism file {str(path)!r} {not_a_file(path)}")
        import json
        import tomllib

        try:
            return accounting.load_mechanisms(path)
        except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"mechanism file {str(path)!r} is not valid {path.suffix[1:].upper()}: {error}") from None
        except OSError as error:
            raise ValueError(f"mechanism file {str(path)!r} could not be read: {error.strerror or error}") from None
    if not path.is_file():
        from privfed.accounting.documents import not_a_file
        raise ValueError(f"VOTES file {str(path)!r} {not_a_file(path)}")
    if args.gamma is None:
        raise ValueError("--gamma is required with a .npy vote file")
    votes_per_unit = 1 if args.votes_per_unit is None else args.votes_per_unit
    check_gamma(args.gamma, votes_per_unit)
    votes = load_npy(path, "VOTES file")
    return [accounting.LaplaceNoisyMax(votes, args.gamma, votes_per_unit, unit=args.unit or "example")]


def _account_command(args: argparse.Namespace) -> int:
    from privfed import accounting
    from privfed.accounting.report import round_up

    mechanisms = _mechanisms(args)
    report = accounting.account(mechanisms, delta=args.delta, analysis=args.analysis)
    if args.json:
        import json

        print(json.dumps(report.to_dict(), indent=2))
        return EXIT_OK
    print(report.summary())
    for row in report.mechanisms:
        where = {"pld": "by PLD", "pure": "by pure composition"}.get(row.method, f"at α = {row.order:g}")
        print(
            f"  {row.kind}: {row.num_queries} queries, ε = {round_up(row.epsilon)} {where}, "
            f"data-independent ε = {round_up(row.epsilon_data_independent)}"
            + (f", pure composition ε = {round_up(row.pure_epsilon)}" if row.pure_epsilon else "")
        )
    for note in report.notes:
        print(f"  note: {note}")
    return EXIT_OK


def _add_account_command(commands: argparse._SubParsersAction) -> None:
    account = commands.add_parser(
        "account", help="account a noisy-max release or a file of mechanisms",
        description="Account the privacy of a release: a Laplace noisy-max release from its vote matrix (.npy), or "
                    "every mechanism a .toml/.json file lists, composed in order. Prints ε at δ with its unit, "
                    "analysis and data-dependence (docs/accounting.md).",
        epilog="examples:\n"
               "  privfed examples ex\n"
               "  privfed account ex/votes.npy --gamma 0.04 --votes-per-unit 2 --unit party --delta 1e-5\n"
               "  privfed account ex/pipeline.toml --delta 1e-5 --json\n\n"
               "exit codes: 0 ok, 2 bad input, 130 interrupted",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    account.add_argument(
        "source",
        help="a vote matrix (.npy, queries × classes, non-negative integers) or a mechanism file (.toml or .json)",
    )
    account.add_argument("--gamma", type=number_in(0, float("inf"), high_open=True),
                         help="Laplace noise parameter γ > 0 (noise scale 1/γ; 2·k·γ ≤ 709), for a .npy file")
    account.add_argument("--votes-per-unit", type=integer_at_least(1),
                         help="votes one protected unit can move (k ≥ 1, default 1), for a .npy file")
    account.add_argument("--unit", choices=("example", "party"),
                         help="protected unit (default example), for a .npy file")
    account.add_argument("--delta", type=number_in(0, 1, high_open=True), required=True, help="target δ in (0, 1)")
    account.add_argument("--analysis", default="tight", choices=("tight", "classic"),
                         help="tight (privfed's best valid bound, default) or classic (the papers' analysis)")
    account.add_argument("--json", action="store_true", help="print the report as JSON")
    account.set_defaults(handler=_account_command)


def _parser() -> Parser:
    parser = Parser(
        prog="privfed",
        description="Differential-privacy accounting for federated knowledge transfer (FedKT, FedKD, PrivateKT, "
                    "Selective-FD).",
        epilog="start here:\n"
               "  privfed examples ex                 # write the example files into ex/\n"
               "  privfed account ex/votes.npy --gamma 0.04 --delta 1e-5\n"
               "  privfed demo --out my-bundle        # FedKT on digits, written as an audited bundle\n"
               "  privfed audit my-bundle\n\n"
               "exit codes: 0 ok, 1 a check failed, 2 bad input, 3 finished with failed runs, 130 interrupted\n"
               "(docs/cli.md)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"privfed {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_account_command(commands)
    add_examples_command(commands)
    add_demo_command(commands)
    add_audit_command(commands)
    add_report_command(commands)
    add_sign_commands(commands)
    add_federation_command(commands)
    add_budget_command(commands)
    add_evidence_command(commands)
    add_selftest_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``privfed`` command; returns the exit code."""
    try:
        parser = _parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exit_:  # --help, --version, or a usage error already printed on one line
            return exit_.code if isinstance(exit_.code, int) else EXIT_BAD_INPUT
        try:
            return args.handler(args)
        except (ValueError, TypeError, OverflowError, OSError) as error:
            print(f"privfed {args.command}: error: {_one_line(error)}", file=sys.stderr)
            return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        command = f"privfed {args.command}" if "args" in locals() else "privfed"
        print(f"{command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _one_line(error: BaseException) -> str:
    """The error's message on one line; an overflow or an OS error says what it is."""
    if isinstance(error, OSError) and error.strerror:
        text = f"{error.filename!r}: {error.strerror}" if error.filename else error.strerror
    elif isinstance(error, OverflowError):
        text = f"a value is too large for the accounting to represent ({error}); lower the noise parameter's ε"
    else:
        text = str(error)
    return " ".join(text.split())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
