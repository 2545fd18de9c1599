"""``privfed evidence BUNDLE --out DIR [--audit-json AUDIT.json] [--key KEY.pem] [--overwrite]``: the evidence pack.

Writes the folder :func:`privfed.evidence.pack.write_evidence_pack` describes (docs/evidence.md) and prints what it
holds and how to check it. Exit codes: 0 written, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from privfed.cli.arguments import EXIT_OK

__all__ = ["add_evidence_command"]


def _evidence_command(args: argparse.Namespace) -> int:
    from privfed.accounting.report import round_up
    from privfed.evidence.pack import write_evidence_pack

    pack = write_evidence_pack(args.bundle, args.out, audit_json=args.audit_json, key=args.key,
                               overwrite=args.overwrite)
    events = json.loads((pack / "events.json").read_text(encoding="utf-8"))
    print(f"privfed evidence: wrote {pack}")
    for row in events["reports"]:
        mu = "—" if row["gdp_mu"] is None else f"{row['gdp_mu']:.4g}"
        tprs = ", ".join(f"TPR {value:.3g} at FPR {rate}" for rate, value in row["true_positive_rates"].items())
        epsilon = "inf" if row["epsilon"] == "inf" else round_up(row["epsilon"])
        print(f"  {row['observer']:<11} {row['unit']:<7} ε = {epsilon}, δ = {row['delta']:g}, μ = {mu}; "
              f"{tprs} ({row['tradeoff_basis']})")
    facts = json.loads((pack / "deployment_facts.json").read_text(encoding="utf-8"))
    two_sided = facts["tier3"]["empirical_audit"]
    if two_sided is not None:
        print(f"  empirical audit ({two_sided['design']}): ε ∈ [{two_sided['lower']:.4g}, {two_sided['upper']:.4g}] "
              f"for the {two_sided['unit']} against the public")
    print(f"  signature: {'pack.sig (OpenSSF model signing)' if (pack / 'pack.sig').exists() else 'unsigned'}")
    print(f"check it without privfed: cd {pack} && python verify.py")
    return EXIT_OK


def add_evidence_command(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``privfed evidence``."""
    parser = subparsers.add_parser(
        "evidence", help="write a bundle's evidence pack for a regulator (checkable without privfed)",
        description="Write one folder with the bundle's guarantee per observer and unit (ε(δ), the best attack's "
                    "true-positive rate at given false-positive rates, Gaussian-DP μ), a DP Deployment Facts "
                    "statement, the dp-accounting events, the audit results and verify.py (docs/evidence.md).",
        epilog="examples:\n"
               "  privfed demo --out my-bundle\n"
               "  privfed evidence my-bundle --out my-evidence\n"
               "  cd my-evidence && python verify.py\n\n"
               "exit codes: 0 ok, 2 bad input",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("bundle", help="bundle folder written by privfed.save_bundle")
    parser.add_argument("--out", required=True, help="the evidence pack folder to write")
    parser.add_argument("--audit-json", help="output of privfed audit --empirical CONFIG.toml --json (default: the "
                                             "empirical audit the bundle's card records, if any)")
    parser.add_argument("--key", help="elliptic-curve private key (PEM, privfed keygen --type ec): sign the pack "
                                      "with OpenSSF model signing")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing evidence pack at --out")
    parser.set_defaults(handler=_evidence_command)
    return parser
