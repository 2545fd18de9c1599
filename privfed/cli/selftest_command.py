"""``privfed selftest``: run the noise conformance checks (:mod:`privfed.audit.selftest`) on this installation."""

from __future__ import annotations

import argparse
import json
from typing import Any

from privfed.cli.arguments import EXIT_OK, number_in

#: Exit code when a check failed.
EXIT_FAILED = 1


def add_selftest_command(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``privfed selftest`` on the ``privfed`` parser's subparsers; returns the new parser."""
    parser = subparsers.add_parser(
        "selftest",
        help="test privfed's own noise code against the laws its ledger accounts (docs/audit.md#selftest)",
        description="Statistical conformance tests of the functions the pipelines call to draw their noise: "
                    "scales, Skellam variances, randomized response, every noisy-max branch, independence, DP-SGD "
                    "white box. On correct code the whole suite fails with probability ≤ --family-alpha.",
        epilog="exit codes: 0 every check passed (or was skipped for a missing optional dependency), 1 a check "
               "failed, 2 unusable input",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--family-alpha", type=number_in(0.0, 1.0, high_open=True), default=0.01,
                        help="probability of any false alarm on correct code (default 0.01)")
    parser.add_argument("--only", nargs="+", metavar="CHECK",
                        help="run only these checks (names as in the report, e.g. dp-sgd skellam-share)")
    parser.add_argument("--size-factor", type=number_in(0.0, 100.0), default=1.0,
                        help="multiply every check's sample size (default 1)")
    parser.set_defaults(handler=_run)
    return parser


def _run(args: argparse.Namespace) -> int:
    from privfed.audit.selftest import selftest

    report = selftest(family_alpha=args.family_alpha, only=args.only, size_factor=args.size_factor)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(f"privfed selftest: {len(report.checks)} checks, α = {report.family_alpha:g} for the whole suite "
              f"({report.n_p_values} p-values at {report.family_alpha / report.n_p_values:.2g} each)")
        for check in report.checks:
            power = f"; detects {check.power}" if check.power else ""
            print(f"  {check.status.upper():7} {check.name}: {check.detail}{power}")
        print("PASS" if report.passed else f"FAIL: {', '.join(report.failed)}")
    return EXIT_OK if report.passed else EXIT_FAILED
