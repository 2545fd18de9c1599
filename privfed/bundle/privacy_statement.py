"""A standard privacy statement, generated from the ledger, in the model card.

The statement follows the reporting checklist of Ponomareva et al., "How to
DP-fy ML: A Practical Guide to Machine Learning with Differential Privacy",
JAIR 77 (2023), §5.3 ("reporting"), in the vocabulary of NIST SP 800-226
("Guidelines for Evaluating Differential Privacy Guarantees", 2025: privacy
unit, ε and δ, trust model, what the guarantee does not cover). One row per
checklist item: the DP setting (trust model, who is protected against), the
privacy unit and neighbouring relation, where the noise came from, the formal (ε, δ) statement per unit
(data-independent, and data-dependent where it differs), the accounting method,
the data accesses the guarantee covers and those it does not (unaccounted
releases, hyper-parameter tuning), and how to verify it.

Every value comes from :meth:`Ledger.account` and the ledger's entries, so
``privfed audit`` re-renders the section from ``ledger.json`` and compares it
with the card's (check *privacy statement*).
"""

from __future__ import annotations

from typing import Any

from privfed.accounting.ledger import Ledger
from privfed.accounting.mechanism import relation_for_unit
from privfed.accounting.noise_source import noise_provenance_problem
from privfed.accounting.observers import OBSERVERS
from privfed.accounting.report import PrivacyReport, round_up

__all__ = ["STATEMENT_HEADING", "card_statement", "render_privacy_statement", "uncovered_releases"]

#: The card section holding the statement (``privfed audit`` reads it back).
STATEMENT_HEADING = "## Privacy statement"

_CONVENTION = ('Reported following the reporting checklist of Ponomareva et al., "How to DP-fy ML" (JAIR 2023, '
               '§5.3), in the terms of NIST SP 800-226. Generated from `ledger.json`; `privfed audit` checks that it '
               'still matches.')


def uncovered_releases(ledger: Ledger) -> dict[str, dict[str, list[str]]]:
    """Every release some observer sees with no mechanism covering it, once, in ledger order (numbered U1, U2, ...
    by :func:`uncovered_label`): its description → {observer: the units it leaves uncovered for that observer}."""
    found: dict[str, dict[str, list[str]]] = {}
    if ledger.delta is None:
        return found
    for observer in OBSERVERS:
        for unit in ledger.units:
            for text in ledger.account(unit=unit, observer=observer).uncovered:
                found.setdefault(text, {}).setdefault(observer, []).append(unit)
    return found


def uncovered_label(index: int) -> str:
    """The name of the ``index``-th (from 0) of :func:`uncovered_releases`: ``U1``, ``U2``, ..."""
    return f"U{index + 1}"


def uncovered_where(seen: dict[str, list[str]]) -> str:
    """``"the public and the coordinator at example and party level"``: who sees an uncovered release, where."""
    by_units: dict[tuple[str, ...], list[str]] = {}
    for observer, units in seen.items():
        by_units.setdefault(tuple(units), []).append(f"the {observer}")
    return ", ".join(f"{' and '.join(observers)} at {' and '.join(units)} level"
                     for units, observers in by_units.items())


def _unit_rows(ledger: Ledger, unit: str, report: PrivacyReport) -> list[tuple[str, str]]:
    releases = sum(1 for entry in ledger.entries if entry.kind in ("release", "training") and unit in entry.analyses)
    guarantee = (f"({round_up(report.epsilon_data_independent)}, {ledger.delta:g})-DP at {unit} level, whatever the "
                 "data (data-independent ε)")
    if report.epsilon_is_data_dependent:
        guarantee += (f"; data-dependent ε = {round_up(report.epsilon)}, computed from the private votes (an "
                      "estimate for this data set, itself not protected)")
    if report.uncovered:
        guarantee = (f"ε = inf for the model as released: {len(report.uncovered)} release(s) have no {unit}-level "
                     f"guarantee (see \"not covered\"); the accounted releases alone satisfy {guarantee}")
    return [
        (f"privacy unit ({unit})", report.relation or relation_for_unit(unit)),
        (f"formal guarantee ({unit})", guarantee),
        (f"accounting ({unit})", f"{report.analysis} analysis: {report.conversion}; {report.source} bound over "
                                 f"{releases} recorded release(s), composed sequentially"),
    ]


def _noise_text(noise: dict[str, Any] | None) -> str:
    """Where the noise came from, as the statement's ``noise`` row says it."""
    problem = noise_provenance_problem(noise)
    if problem is None:
        return ("secret: drawn by whoever adds it (each party its own, the server its own) from a cryptographically "
                "secure generator keyed from that machine's OS entropy; never derived from random_state, sent or "
                "recorded")
    if noise is None:
        return ("not recorded: a ledger saved before privfed drew noise secretly (schema ≤ 2) derived it from the "
                "recorded random_state, and every ε is then ∞ for whoever holds the ledger")
    return f"NOT SECRET: {problem}"


def render_privacy_statement(ledger: Ledger) -> str:
    """The card's privacy-statement section (Markdown), from the ledger alone."""
    lines = [STATEMENT_HEADING, "", _CONVENTION, ""]
    if not ledger.units or ledger.delta is None:
        why = "no release of private data is recorded" if not ledger.units else "no δ is recorded"
        return "\n".join([*lines, f"No differential-privacy guarantee is stated: {why}.", ""])
    rows = [("DP setting", "central differential privacy; stated against two observers: the public (whoever sees "
                           "the released model and the recorded releases) and the coordinator (the server, which "
                           "receives every message the parties send in the protocol)")]
    rows.append(("noise", _noise_text(ledger.noise)))
    primary = ledger.account()
    reports = {primary.unit: primary, **primary.other_units}
    for unit in ledger.units:
        rows += _unit_rows(ledger, unit, reports[unit])
    uncovered = uncovered_releases(ledger)
    labels = {text: uncovered_label(index) for index, text in enumerate(uncovered)}
    for unit in ledger.units:
        coordinator = ledger.account(unit=unit, observer="coordinator")
        rows.append((f"against the coordinator ({unit})", (
            f"ε = inf: it receives {len(coordinator.uncovered)} release(s) no mechanism covers "
            f"({', '.join(labels[text] for text in coordinator.uncovered)}, under \"not covered\")")
            if coordinator.uncovered else (
            f"(ε = {round_up(coordinator.epsilon)}, δ = {coordinator.delta:g})-DP, "
            f"{'data-dependent' if coordinator.epsilon_is_data_dependent else 'data-independent'}")))
    rows += [
        ("data accesses covered", "the releases recorded in the ledger (listed above), and everything computed from "
                                  "them (post-processing)"),
        ("not covered", "; ".join(f"{labels[text]}, seen by {uncovered_where(seen)}: {text}"
                                  for text, seen in uncovered.items()) or "none recorded"),
        ("hyper-parameter tuning", "not accounted: no tuning run on private data is recorded; if hyper-parameters "
                                   "were tuned on the private data, that cost is not in ε"),
        ("budget", ", ".join(f"{unit}: ε ≤ {value:g} enforced ({ledger.budget_basis.replace('_', '-')} ε)"
                             for unit, value in ledger.target_epsilon.items()) or "none enforced"),
        ("verification", f"`privfed audit` recomputes every ε from the recorded parameters (privfed "
                         f"{ledger.privfed_version}, dp-accounting {ledger.software.get('dp-accounting')})"),
    ]
    lines += ["| checklist item | this model |", "|---|---|"]
    lines += [f"| {item} | {' '.join(text.replace('|', '/').split())} |" for item, text in rows]
    return "\n".join([*lines, ""])


def card_statement(card: str) -> str | None:
    """The privacy-statement section of a rendered card (up to the next ``## `` heading), or None."""
    start = card.find(f"\n{STATEMENT_HEADING}\n")
    if start < 0:
        return None
    start += 1
    end = card.find("\n## ", start + len(STATEMENT_HEADING))
    return card[start:] if end < 0 else card[start:end + 1]
