"""``privfed audit``: the command-line face of :func:`privfed.audit.audit`.

``privfed audit BUNDLE [--public-key KEY.pub] [--evidence FILE] [--members M --non-members N] [--protected-units N] [--json]``
``privfed audit [MODEL] --claims CLAIMS.json [--members M --non-members N] [--json]``

Prints the verdict table (or JSON). Exit codes: 0 when no check fails, 1 when a
check fails, 2 on unusable input (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_audit_command"]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _audit_command(args: argparse.Namespace) -> int:
    from privfed.audit import audit
    from privfed.audit_report import AuditInputError

    if args.target is None and args.claims is None:
        raise AuditInputError("give a BUNDLE directory, a MODEL file with --claims, or --claims alone")
    report = audit(args.target, claims=args.claims, evidence=args.evidence, members=args.members,
                   non_members=args.non_members, protected_units=args.protected_units, random_state=args.seed,
                   public_key=args.public_key)
    print(report.to_json() if args.json else report.table())
    return report.exit_code


def add_audit_command(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``privfed audit`` on the ``privfed`` parser's subparsers; returns the new parser."""
    parser = subparsers.add_parser(
        "audit",
        help="audit a model's privacy claims (a bundle, or a model file with a claims file)",
        description="Check a model's privacy claims: integrity, recomputation of every ε, claim hygiene, safe loading "
                    "and, with member/non-member samples, an empirical lower bound on ε. Exit 0: no check failed; "
                    "1: a check failed; 2: unusable input. Explanations: docs/audit.md.",
    )
    parser.add_argument("target", nargs="?", help="bundle directory, or a .skops/.ubj/.json/.safetensors model file")
    parser.add_argument("--claims", help="claims file (JSON) for a model that is not a privfed bundle")
    parser.add_argument("--evidence", help="evidence.npz for a bundle (recomputes data-dependent entries from the votes)")
    parser.add_argument("--members", help=".npz with arrays X, y of training members")
    parser.add_argument("--non-members", dest="non_members", help=".npz with arrays X, y of non-members")
    parser.add_argument("--protected-units", dest="protected_units", type=_positive_int,
                        help="number of protected units (parties or examples) for the δ < 1/n check")
    parser.add_argument("--public-key", dest="public_key",
                        help="the publisher's Ed25519 public key (PEM): the bundle must carry a valid signature by it")
    parser.add_argument("--seed", type=int, default=0, help="seed of the empirical check's split (default 0)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(handler=_audit_command)
    return parser
