"""``privfed budget``: a silo's privacy budget for its data officer (:mod:`privfed.accounting.silo_budget`).

``privfed budget init PATH --epsilon E --delta D [--unit U] [--max-records-per-person K]`` creates the ledger;
``show PATH [--json]`` prints what was spent, per study and in total, for each observer, and what remains;
``verify PATH [--head SHA]`` checks the hash chain (exit 1 when it fails); ``export PATH --format
dpevents|statement`` writes the charges as dp-accounting events (JSON) or the silo's privacy statement;
``reset PATH --acknowledge --reason TEXT`` archives a ledger that fails verification and starts a new one
carrying its readable spending over. Exit codes: 0 done, 1 the ledger fails verification, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from privfed.cli.arguments import EXIT_CHECK_FAILED, EXIT_OK, integer_at_least, number_in

__all__ = ["add_budget_command", "budget_statement"]


def _open(path: str) -> Any:
    from privfed.accounting.silo_budget import SiloBudget

    return SiloBudget.open(path)


def _refused(args: argparse.Namespace, error: Exception) -> int:
    print(f"privfed budget {args.budget_command}: {' '.join(str(error).split())}")
    print(f"  a person must check the ledger (privfed budget verify {args.path}) and then decide: privfed budget "
          f"reset {args.path} --acknowledge --reason '...'")
    return EXIT_CHECK_FAILED


def _init_command(args: argparse.Namespace) -> int:
    from privfed.accounting.silo_budget import SiloBudget

    if Path(args.path).exists():
        raise ValueError(f"PATH {args.path!r} exists; a silo budget is created once (privfed budget show {args.path})")
    from privfed.accounting.silo_budget import load_key

    signing_key = None if args.signing_key is None else load_key(args.signing_key, private=True)
    budget = SiloBudget(args.path, epsilon=args.epsilon, delta=args.delta, unit=args.unit,
                        max_records_per_person=args.max_records_per_person, signing_key=signing_key)
    person = f", at most {budget.max_records_per_person} rows per person" if budget.unit == "person" else ""
    print(f"created {args.path}: ε = {budget.epsilon:g}, δ = {budget.delta:g} per observer, {budget.unit}-level"
          f"{person}; charges are checked by a Rényi filter at {len(budget.filter.orders)} fixed orders "
          "(docs/budget.md)")
    return EXIT_OK


def _releases(count: int) -> str:
    return f"{count} release" + ("" if count == 1 else "s")


def _summary(budget: Any) -> dict[str, Any]:
    import numpy as np

    from privfed.accounting.observers import OBSERVERS

    check = budget.verify()
    everything = budget.charges
    studies = []
    for study in dict.fromkeys(c.study for c in everything):
        charges = [c for c in everything if c.study == study]
        epsilon = {}
        for observer in OBSERVERS:
            seen = [np.append(c.rdp, c.pure_epsilon) for c in charges if observer in c.observers]
            epsilon[observer] = budget.filter.epsilon_of(np.sum(seen, axis=0)) if seen else 0.0
        studies.append({"study": study, "releases": len(charges), "pipelines": sorted({c.pipeline for c in charges}),
                        "epsilon": epsilon})
    total = {o: budget.spent(observer=o) for o in OBSERVERS}
    return {"path": str(budget.path), "epsilon": budget.epsilon, "delta": budget.delta, "unit": budget.unit,
            "max_records_per_person": budget.max_records_per_person, "releases": check.records,
            "head_sha256": check.head_sha256, "torn_tail_bytes": check.torn_tail_bytes, "studies": studies,
            "spent": total, "remaining": {o: max(0.0, budget.epsilon - e) for o, e in total.items()}}


def _show_command(args: argparse.Namespace) -> int:
    from privfed.accounting.silo_budget import TamperedLedgerError

    budget = _open(args.path)
    try:
        summary = _summary(budget)
    except TamperedLedgerError as error:
        return _refused(args, error)
    if args.json:
        print(json.dumps(summary, indent=2))
        return EXIT_OK
    person = f" (at most {summary['max_records_per_person']} rows per person)" if summary["unit"] == "person" else ""
    print(f"{args.path}: budget ε = {summary['epsilon']:g}, δ = {summary['delta']:g} per observer, "
          f"{summary['unit']}-level{person}; {_releases(summary['releases'])} in {len(summary['studies'])} studies")
    for row in summary["studies"]:
        print(f"  {row['study']}: {_releases(row['releases'])} ({', '.join(row['pipelines'])}), ε = "
              f"{row['epsilon']['coordinator']:.4g} seen by the coordinator, {row['epsilon']['public']:.4g} by "
              "the public")
    for observer, spent in summary["spent"].items():
        print(f"  total for the {observer}: ε = {spent:.4g} spent, {summary['remaining'][observer]:.4g} remaining")
    if summary["torn_tail_bytes"]:
        print(f"  note: an unfinished write of {summary['torn_tail_bytes']} bytes ends the file (a charge that never "
              "returned; counted as nothing, sealed by the next charge)")
    print(f"  head sha256: {summary['head_sha256']} (note it elsewhere: privfed budget verify --head checks it)")
    return EXIT_OK


def _verify_command(args: argparse.Namespace) -> int:
    from privfed.accounting.silo_budget import load_key

    public_key = None if args.public_key is None else load_key(args.public_key, private=False)
    check = _open(args.path).verify(head=args.head, public_key=public_key)
    if not check.intact:
        print(f"FAILED: {check.problem}")
        print(f"  the budget refuses every charge until a person decides: privfed budget reset {args.path} "
              "--acknowledge --reason '...'")
        return EXIT_CHECK_FAILED
    torn = f"; an unfinished write of {check.torn_tail_bytes} bytes ends it" if check.torn_tail_bytes else ""
    print(f"intact: {_releases(check.records)}, head sha256 {check.head_sha256}{torn}")
    return EXIT_OK


def budget_statement(budget: Any) -> str:
    """The silo's privacy statement: its policy, the theorem enforcing it, and what was spent (plain text)."""
    summary = _summary(budget)
    unit = {"example": "one row of the silo's data", "party": "the silo's whole data set",
            "person": f"all rows of one person (at most {summary['max_records_per_person']} each)"}[summary["unit"]]
    lines = [
        f"Privacy statement of the silo budget {summary['path']}",
        f"Policy: every release of this silo's data, in every study, composed in the order the studies were run and "
        f"however each was chosen from earlier results, is ({summary['epsilon']:g}, {summary['delta']:g})-"
        f"differentially private for each observer, protecting {unit}.",
        f"Enforced by: a Rényi privacy filter at {len(budget.filter.orders)} orders fixed in advance (union bound "
        "over the orders, Ville's inequality; Feldman & Zrnic 2021, Whitehouse et al. 2023), each release charged "
        "from its public parameters before the silo's data is touched (docs/budget.md).",
        f"Releases recorded: {summary['releases']} in {len(summary['studies'])} studies.",
    ]
    for row in summary["studies"]:
        lines.append(f"  {row['study']} ({', '.join(row['pipelines'])}): {_releases(row['releases'])}, ε = "
                     f"{row['epsilon']['coordinator']:.4g} for the coordinator, {row['epsilon']['public']:.4g} for "
                     "the public")
    for observer, spent in summary["spent"].items():
        lines.append(f"Total for the {observer}: ε = {spent:.4g} of {summary['epsilon']:g} at δ = "
                     f"{summary['delta']:g}.")
    lines.append(f"Ledger head sha256: {summary['head_sha256']}.")
    return "\n".join(lines)


def _export_command(args: argparse.Namespace) -> int:
    from privfed.accounting.silo_budget import TamperedLedgerError

    budget = _open(args.path)
    try:
        if args.format == "dpevents":
            print(json.dumps({"budget": {"epsilon": budget.epsilon, "delta": budget.delta, "unit": budget.unit,
                                         "max_records_per_person": budget.max_records_per_person},
                              "releases": budget.to_dp_events()}, indent=2))
        else:
            print(budget_statement(budget))
    except TamperedLedgerError as error:
        return _refused(args, error)
    return EXIT_OK


def _reset_command(args: argparse.Namespace) -> int:
    if not args.acknowledge:
        raise ValueError("--acknowledge is required: resetting a ledger that fails verification is a person's "
                         "decision")
    budget = _open(args.path)
    archive = budget.reset(acknowledge=True, reason=args.reason)
    print(f"archived {args.path} as {archive}; the new ledger carries its readable spending over: ε = "
          f"{budget.spent():.4g} spent for the coordinator")
    return EXIT_OK


def add_budget_command(commands: Any) -> None:
    """Register ``privfed budget init|show|verify|export|reset``."""
    budget = commands.add_parser(
        "budget", help="a silo's privacy budget across studies: init, show, verify, export, reset",
        description="A silo's own privacy budget: one ledger file on the silo's machine that every release of its "
                    "data is charged to before it happens, across studies and pipelines (docs/budget.md).",
        epilog="examples:\n"
               "  privfed budget init silo.jsonl --epsilon 4 --delta 1e-6\n"
               "  privfed budget show silo.jsonl\n"
               "  privfed budget verify silo.jsonl\n"
               "  privfed budget export silo.jsonl --format statement\n\n"
               "exit codes: 0 ok, 1 the ledger fails verification, 2 bad input, 130 interrupted",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = budget.add_subparsers(dest="budget_command", required=True, metavar="COMMAND")
    init = sub.add_parser("init", help="create a budget ledger",
                          description="Create the ledger file PATH with the silo's policy: (ε, δ) per observer, "
                                      "for one unit. PATH must not exist.")
    init.add_argument("path", metavar="PATH", help="the ledger file to create (JSON Lines)")
    init.add_argument("--epsilon", type=number_in(0, float("inf"), high_open=True), required=True,
                      help="the policy's ε > 0")
    init.add_argument("--delta", type=number_in(0, 1, high_open=True), required=True, help="the policy's δ in (0, 1)")
    init.add_argument("--unit", choices=("example", "party", "person"), default="example",
                      help="what the policy protects: one row (example, default), the silo's whole data (party) or "
                           "all rows of one person (person; needs --max-records-per-person)")
    init.add_argument("--signing-key", metavar="PEM", help="the silo's Ed25519 private key (unencrypted PEM): every "
                      "line is signed, and charges need the key (node config budget-signing-key)")
    init.add_argument("--max-records-per-person", type=integer_at_least(1),
                      help="with --unit person: the most rows any one person has")
    init.set_defaults(handler=_init_command)
    show = sub.add_parser("show", help="what was spent, per study and in total, and what remains",
                          description="Print the policy, each study's releases and ε, the total per observer and "
                                      "what remains; exit 1 when the ledger fails verification.")
    show.add_argument("path", metavar="PATH", help="the ledger file")
    show.add_argument("--json", action="store_true", help="print the summary as JSON")
    show.set_defaults(handler=_show_command)
    verify = sub.add_parser("verify", help="check the ledger's hash chain (exit 1 on tampering)",
                            description="Check every line's sha256 and its link to the line before; with --head, "
                                        "that the last line is the one noted elsewhere (dropping the last lines is "
                                        "invisible to the chain alone).")
    verify.add_argument("path", metavar="PATH", help="the ledger file")
    verify.add_argument("--head", help="the head sha256 noted from an earlier privfed budget show or verify")
    verify.add_argument("--public-key", metavar="PEM", help="the silo's Ed25519 public key: the ledger must be signed "
                        "with it, every line's signature verified")
    verify.set_defaults(handler=_verify_command)
    export = sub.add_parser("export", help="the charges as dp-accounting events, or the privacy statement",
                            description="Write the ledger's releases as dp-accounting DpEvents (JSON), or the silo's "
                                        "privacy statement (text), on stdout.")
    export.add_argument("path", metavar="PATH", help="the ledger file")
    export.add_argument("--format", choices=("dpevents", "statement"), required=True, help="dpevents or statement")
    export.set_defaults(handler=_export_command)
    reset = sub.add_parser("reset", help="archive a ledger that fails verification and start over",
                           description="A person's decision after privfed budget verify failed: keep the old file "
                                       "as PATH.tampered-TIME and start a new ledger carrying every readable charge "
                                       "of it over (lines deleted from it cannot be recovered).")
    reset.add_argument("path", metavar="PATH", help="the ledger file")
    reset.add_argument("--acknowledge", action="store_true", help="required: you checked the ledger")
    reset.add_argument("--reason", required=True, help="what was checked and decided (recorded in the new header)")
    reset.set_defaults(handler=_reset_command)
