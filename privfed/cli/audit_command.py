"""``privfed audit``: the command-line face of :func:`privfed.audit.audit`.

``privfed audit BUNDLE [--public-key KEY.pub] [--evidence FILE] [--members M --non-members N]
[--protected-units N] [--json]``
``privfed audit [MODEL] --claims CLAIMS.json [--members M --non-members N] [--json]``
``privfed audit --claims A.json B.json FOLDER/ ... [--protected-units N] [--json]`` (one row per claims file)
``privfed audit --empirical CONFIG.toml [--json]`` (one run of a pipeline with canaries: an ε lower bound)

Prints the verdict table (or JSON). Exit codes: 0 when no check fails, 1 when a
check fails (``--empirical``: the lower bound exceeds the claim), 2 on unusable input (one line on stderr, never
a traceback).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from privfed.cli.arguments import EXIT_CHECK_FAILED, EXIT_OK, integer_at_least

__all__ = ["add_audit_command"]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _claims_files(given: list[str]) -> list[Path]:
    """Each given claims file, and every ``*.json`` of each given folder (sorted)."""
    from privfed.audit.report import AuditInputError

    files: list[Path] = []
    for name in given:
        path = Path(name)
        if path.is_dir():
            found = sorted(path.glob("*.json"))
            if not found:
                raise AuditInputError(f"--claims folder {name!r} holds no .json claims file")
            files += found
        else:
            files.append(path)
    return files


def _claims_table(files: list[Path], args: argparse.Namespace) -> int:
    """One row per claims file: the claimed ε, privfed's tight and classic ε, and the verdict."""
    from privfed.accounting.report import round_up
    from privfed.audit import audit

    reports = [audit(None, claims=path, protected_units=args.protected_units) for path in files]
    if args.json:
        print(json.dumps([{"file": str(path), **report.to_dict()} for path, report in zip(files, reports)], indent=2))
        return max(report.exit_code for report in reports)

    def number(value: Any) -> str:
        return "–" if value is None else round_up(float(value))

    rows = [("claims file", "claimed ε", "privfed tight", "classic", "verdict")]
    for path, report in zip(files, reports):
        failed = [check.name for check in report.checks if check.status == "fail"]
        verdict = "FAIL: " + ", ".join(failed) if failed else "PASS"
        if any(check.name == "accountant floor" and check.detail.startswith("FLAG") for check in report.checks):
            verdict += " (FLAG: below the accountant's ln(1/δ)/λ_max)"
        rows.append((path.name, number(report.claim.get("epsilon")), number(report.claim.get("recomputed_epsilon")),
                     number(report.claim.get("recomputed_epsilon_classic")), verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths)) + "  " + row[4])
    print(f"{sum(r.exit_code == 0 for r in reports)} of {len(reports)} claims files pass")
    return max(report.exit_code for report in reports)


def _floor(value: float, digits: int = 3) -> str:
    """A lower bound printed without rounding up."""
    if value == float("inf"):
        return "inf"
    return f"{math.floor(value * 10**digits) / 10**digits:.{digits}f}"


def _gaussian_dp_text(result: Any) -> str:
    """The f-DP (Gaussian DP) estimate of an audit, with the assumption its ε rests on."""
    mu = (f"μ ≥ {_floor(result.gdp_mu_lower)} at {result.confidence:.0%} confidence (Mahloujifar, Melis and "
          f"Chaudhuri: μ-Gaussian DP refuted below it; {result.gdp_num_correct} of {result.gdp_num_guesses} guesses "
          "right)")
    if math.isnan(result.gdp_epsilon_lower):
        return f"{mu}; no ε at δ = 0 (a Gaussian trade-off curve is never pure DP)"
    return (f"{mu}; ε ≥ {_floor(result.gdp_epsilon_lower)} at δ = {result.delta:g} only if the mechanism's "
            "trade-off curve is Gaussian")


def _empirical_command(args: argparse.Namespace) -> int:
    """``--empirical CONFIG.toml``: the one-run audit of the configured pipeline, then the verdict."""
    from privfed.accounting.report import round_up
    from privfed.audit.config import load_audit_config
    from privfed.audit.empirical_pipelines import empirical_audit
    from privfed.audit.report import AuditInputError

    if any(getattr(args, name) is not None for name in ("target", "claims", "evidence", "members", "non_members",
                                                         "public_key", "protected_units")):
        raise AuditInputError("--empirical CONFIG.toml audits a pipeline run on its own: give no BUNDLE, --claims, "
                              "--evidence, --members, --non-members, --public-key or --protected-units with it")
    config = load_audit_config(args.empirical)
    estimator = config.estimator()
    parties, public = config.data()
    result = empirical_audit(estimator, parties, public, num_canaries=config.num_canaries,
                             confidence=config.confidence, random_state=config.seed, design=config.design)
    if args.json:
        print(json.dumps({"config": str(args.empirical), **result.to_dict()}, indent=2, default=str))
        return EXIT_CHECK_FAILED if result.violation else EXIT_OK
    verdict = ("FAIL: the lower bound exceeds the claim — the pipeline leaks more than its ledger accounts"
               if result.violation else
               "PASS: no violation found (a lower bound only: it does not show that the claim holds)"
               if result.can_refute else
               f"PASS, but this audit CANNOT refute the claim: even every guess right bounds ε by "
               f"{_floor(result.max_lower_bound)} ≤ the claim; use more canaries or a tighter design")
    rows = [
        ("pipeline", f"{config.run.estimator} ({result.details['design']}), {result.unit} level, "
                     f"{config.run.data.label}"),
        ("canaries", f"{result.num_canaries}, one run, {result.details['seconds']:.1f} s"),
        ("claimed ε", f"{round_up(result.claimed_epsilon)} at δ = {result.delta:g} (the ledger's ε for what one "
                      f"canary can change; the whole run: {round_up(result.details['ledger_epsilon'])})"),
        ("lower bound", f"{_floor(result.epsilon_lower)} at {result.confidence:.0%} confidence "
                        f"(Steinke, Nasr and Jagielski: any mechanism; {result.num_correct} of {result.num_guesses} "
                        f"guesses right; at most {_floor(result.max_lower_bound)} with every guess right)"),
        ("f-DP bound", _gaussian_dp_text(result)),
        ("expected", "no simulator for this design (design = \"mechanism\" or \"gradient\" has one)"
                     if math.isnan(result.expected_lower_bound) else
                     f"{_floor(result.expected_lower_bound)} ± {_floor(result.expected_lower_bound_sd)} from the "
                     "stated mechanism on the same canaries (simulated); an observed bound far from it means the code "
                     "does not run the stated mechanism, even below the claim"),
        ("threat model", result.threat_model),
        ("verdict", verdict),
    ]
    print(f"privfed audit --empirical: {args.empirical}")
    for name, text in rows:
        print(f"{name:<13} {text}")
    return EXIT_CHECK_FAILED if result.violation else EXIT_OK


def _audit_command(args: argparse.Namespace) -> int:
    from privfed.audit import audit
    from privfed.audit.report import AuditInputError

    if args.empirical is not None:
        return _empirical_command(args)
    if args.target is None and args.claims is None:
        raise AuditInputError("give a BUNDLE directory, a MODEL file with --claims, or --claims alone")
    claims = None if args.claims is None else _claims_files(args.claims)
    if claims is not None and len(claims) > 1:
        if args.target is not None or args.members is not None or args.non_members is not None:
            raise AuditInputError("several claims files are audited on their own: give no MODEL, --members or "
                                  "--non-members with them")
        return _claims_table(claims, args)
    report = audit(args.target, claims=None if claims is None else claims[0], evidence=args.evidence,
                   members=args.members, non_members=args.non_members, protected_units=args.protected_units,
                   random_state=args.seed, public_key=args.public_key, signature=args.signature,
                   load_model=not args.no_model_load)
    print(report.to_json() if args.json else report.table())
    return report.exit_code


def add_audit_command(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``privfed audit`` on the ``privfed`` parser's subparsers; returns the new parser."""
    parser = subparsers.add_parser(
        "audit",
        help="audit a model's privacy claims (a bundle, or a model file with a claims file)",
        description="Check a model's privacy claims: integrity, recomputation of every ε, claim hygiene, safe loading "
                    "and, with member/non-member samples, an empirical lower bound on ε. Explanations: docs/audit.md.",
        epilog="examples:\n"
               "  privfed demo --out my-bundle && privfed audit my-bundle\n"
               "  privfed examples ex && privfed audit --claims ex/claims/fedkt_l1_adult.json\n"
               "  privfed audit model.skops --claims claims.json --members m.npz --non-members n.npz\n"
               "  privfed audit --empirical ex/audit_fedkt_l1.toml\n\n"
               "exit codes: 0 no check failed, 1 a check failed, 2 unusable input (one line, no traceback), "
               "130 interrupted",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("target", nargs="?", help="bundle directory, or a .skops/.ubj/.json/.safetensors model file")
    parser.add_argument("--claims", nargs="+",
                        help="claims file (JSON) for a model that is not a privfed bundle; several files or folders "
                             "of them print one row each (e.g. examples/claims/fedkt_tables)")
    parser.add_argument("--empirical", metavar="CONFIG.toml",
                        help="run the configured pipeline once with canaries and compare its empirical ε lower "
                             "bound with the claim (docs/audit.md#empirical-audits)")
    parser.add_argument("--evidence",
                        help="evidence.npz for a bundle (recomputes data-dependent entries from the votes)")
    parser.add_argument("--members", help=".npz with arrays X, y of training members")
    parser.add_argument("--non-members", dest="non_members", help=".npz with arrays X, y of non-members")
    parser.add_argument("--protected-units", dest="protected_units", type=_positive_int,
                        help="number of protected units (parties or examples) for the δ < 1/n check")
    parser.add_argument("--public-key", dest="public_key",
                        help="the publisher's public key (PEM): Ed25519 checks BUNDLE/SIGNATURE.json, elliptic-curve "
                             "the OpenSSF model signature BUNDLE.sig; the bundle must carry a valid signature by it")
    parser.add_argument("--signature",
                        help="with an elliptic-curve --public-key: the model-signing signature file (default: "
                             "BUNDLE.sig beside the bundle folder)")
    parser.add_argument("--no-model-load", dest="no_model_load", action="store_true",
                        help="run every check but safe loading: the model is not opened (nor scikit-learn, skops or "
                             "xgboost imported), and safe loading warns so; not with --members")
    parser.add_argument("--seed", type=integer_at_least(0), default=0,
                        help="seed of the empirical check's split, >= 0 (default 0)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(handler=_audit_command)
    return parser
