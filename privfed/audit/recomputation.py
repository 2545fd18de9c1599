"""Recomputation of a bundle's ledger: every entry, the recorded totals and the budget, from the recorded parameters.

``entry N (kind)``, ``recorded totals`` (per observer and unit) and ``budget`` (``docs/audit.md#recomputation``):
every entry's curves and ε are rebuilt with privfed's accountants
(:func:`~privfed.accounting.recompute.recompute_analysis`, the comparison ``load_bundle`` runs through
:meth:`~privfed.accounting.ledger.Ledger.verify`), the totals from the entries; a relative difference above
:data:`RTOL` fails. :func:`ledger_statement` reads the ledger's claim for the hygiene checks.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from privfed.accounting.conversion import rdp_to_epsilon
from privfed.accounting.ledger import SCHEMA_VERSION, Ledger
from privfed.accounting.ledger_entry import UnitAnalysis
from privfed.accounting.ledger_totals import decode_epsilon
from privfed.accounting.observers import OBSERVERS
from privfed.accounting.recompute import recompute_analysis
from privfed.audit.hygiene import Release, Statement, resolve_protected_units
from privfed.audit.report import RECOMPUTE_MEANING, Check, format_epsilon

__all__ = ["RTOL", "budget_check", "entry_checks", "ledger_statement", "totals_check"]


#: Relative tolerance of every recomputation.
RTOL = 1e-9
_ATOL = 1e-12


def _close(recorded: float, recomputed: float) -> bool:
    if math.isinf(recorded) or math.isinf(recomputed):
        return recorded == recomputed
    return math.isclose(recorded, recomputed, rel_tol=RTOL, abs_tol=_ATOL)


def _entry_epsilon(curves: Mapping[str, Any], delta: float, name: str) -> float:
    """ε of one entry's curve ``name`` (tight analysis where recorded), converted at ``delta``."""
    analysis = "tight" if "tight" in curves else next(iter(curves))
    curve = curves[analysis]
    return rdp_to_epsilon(np.asarray(curve.orders), np.asarray(getattr(curve, name)), delta, analysis)[0]


def _recompute_member(
    member: UnitAnalysis, arrays: dict[str, np.ndarray] | None, delta: float | None
) -> tuple[list[str], str]:
    """(problems, summary) of one analysis of an entry rebuilt from its parameters (and evidence).

    The comparison itself is :func:`~privfed.accounting.recompute.recompute_analysis`, the one
    ``load_bundle`` runs through :meth:`Ledger.verify`.
    """
    result = recompute_analysis(member, arrays)
    problems, fresh, checked = list(result.problems), result.fresh, result.checked
    summary = f"{member.unit}: {result.how}"
    if delta is not None and fresh is not None:
        name = "rdp" if "rdp" in checked else "rdp_data_independent"
        recorded_eps = _entry_epsilon(member.curves, delta, name)
        fresh_eps = _entry_epsilon({a: fresh.curves[a] for a in member.curves if a in fresh.curves} or member.curves,
                                   delta, name)
        if not _close(recorded_eps, fresh_eps):
            problems.append(f"ε from the recorded curve {recorded_eps:.10g} ≠ recomputed {fresh_eps:.10g}")
        label = "ε" if name == "rdp" else "data-independent ε"
        summary += f", {label} = {format_epsilon(fresh_eps)} (RDP, δ = {delta:g})"
    return problems, summary


def entry_checks(ledger: Ledger, evidence: Mapping[str, dict[str, np.ndarray]]) -> list[Check]:
    """One check per accounted entry: each analysis rebuilt from its parameters (and ``evidence``, by commitment)."""
    checks = []
    for entry in ledger.entries:
        if entry.kind == "unaccounted":  # releases and DP training entries are recomputed
            continue
        problems, summaries = [], []
        for unit, member in entry.analyses.items():
            arrays = evidence.get(member.evidence_sha256) if member.evidence_sha256 else None
            found, summary = _recompute_member(member, arrays, ledger.delta)
            problems += [f"{unit}: {problem}" for problem in found]
            summaries.append(summary)
        kinds = sorted({member.kind for member in entry.analyses.values()})
        name = f"entry {entry.index} ({', '.join(kinds)})"
        if problems:
            checks.append(Check(name, "fail", "; ".join(problems), RECOMPUTE_MEANING, "recomputation"))
        else:
            checks.append(Check(name, "pass", "; ".join(summaries)))
    return checks


def _recorded_observers(document: dict[str, Any]) -> list[tuple[str, Any]]:
    """(observer, its recorded totals): ``spent`` for the public, ``spent_by_observer`` from schema 2 on."""
    recorded_totals = [("public", document.get("spent"))]
    if document.get("schema_version", SCHEMA_VERSION) >= 2:
        by_observer = document.get("spent_by_observer")
        recorded_totals += (list(by_observer.items()) if isinstance(by_observer, dict)
                            else [("coordinator", by_observer)])
    return recorded_totals


def totals_check(ledger: Ledger, document: dict[str, Any]) -> Check:
    """The recorded totals (``spent``, and ``spent_by_observer`` from schema 2 on) against the entries.

    The ε themselves are :func:`epsilon_table`'s, printed once below the verdict table.
    """
    name = "recorded totals"
    version = document.get("schema_version", SCHEMA_VERSION)
    recorded_totals = _recorded_observers(document)
    if ledger.delta is None:
        if any(value is not None for _, value in recorded_totals):
            return Check(name, "fail", "totals are recorded but the ledger states no δ", RECOMPUTE_MEANING,
                         "recomputation")
        return Check(name, "pass", "no δ, so no totals are recorded")
    for observer, recorded in recorded_totals:
        if observer not in OBSERVERS:
            return Check(name, "fail", f"the ledger records totals for an unknown observer {observer!r}",
                         RECOMPUTE_MEANING, "recomputation")
        if not isinstance(recorded, dict) or sorted(recorded) != sorted(ledger.units):
            listed = sorted(recorded) if isinstance(recorded, dict) else recorded
            return Check(name, "fail", f"the ledger records {observer} totals for {listed} but its entries cover "
                         f"{list(ledger.units)}", RECOMPUTE_MEANING, "recomputation")
        fresh_totals = ledger.totals(observer, schema_version=version)
        for unit in ledger.units:
            for key in ("epsilon", "epsilon_data_independent"):
                value = decode_epsilon(recorded[unit].get(key)) if isinstance(recorded[unit], dict) else None
                fresh = decode_epsilon(fresh_totals[unit][key])
                if value is None or not (value == fresh or _close(value, fresh)):
                    shown = recorded[unit].get(key) if isinstance(recorded[unit], dict) else None
                    return Check(name, "fail", f"{unit}-level {key.replace('_', ' ')} against the {observer} is "
                                 f"recorded as {shown!r} but the entries give {fresh!r} ({ledger.analysis} analysis, "
                                 f"δ = {ledger.delta:g})", RECOMPUTE_MEANING, "recomputation")
    observers = " and ".join(dict.fromkeys(observer for observer, _ in recorded_totals))
    return Check(name, "pass", f"the totals recorded for {observers} equal those recomputed from the entries "
                 f"({ledger.analysis} analysis, δ = {ledger.delta:g}); the ε per observer table is below")


def epsilon_table(ledger: Ledger, document: dict[str, Any]) -> dict[str, Any]:
    """ε per observer and unit, recomputed from the entries (after :func:`totals_check` passed), as printed below
    the verdict table: ``{"analysis", "delta", "units", "observers": {observer: {unit: text}}}``; {} without δ.

    A figure is labelled data-dependent only where it depends on the private data: below the data-independent ε.
    """
    if ledger.delta is None:
        return {}
    version = document.get("schema_version", SCHEMA_VERSION)
    observers: dict[str, dict[str, str]] = {}
    for observer, _ in _recorded_observers(document):
        fresh_totals = ledger.totals(observer, schema_version=version)
        row = observers.setdefault(observer, {})
        for unit in ledger.units:
            epsilon = decode_epsilon(fresh_totals[unit]["epsilon"])
            independent = decode_epsilon(fresh_totals[unit]["epsilon_data_independent"])
            dependent = fresh_totals[unit]["data_dependent"] and epsilon < independent * (1 - 1e-12)
            row[unit] = format_epsilon(epsilon) + (
                f" (data-dependent; data-independent {format_epsilon(independent)})" if dependent else "")
    return {"analysis": ledger.analysis, "delta": ledger.delta, "units": list(ledger.units), "observers": observers}


def budget_check(ledger: Ledger, document: Mapping[str, Any]) -> Check | None:
    """Spent ε against the target the ledger records (the filter's basis); a bundle over its own budget fails."""
    targets = (document.get("budget") or {}).get("target_epsilon") if isinstance(document.get("budget"), dict) else None
    if not targets or ledger.delta is None:
        return None
    basis = document["budget"].get("basis", "data_independent")
    lines, over = [], []
    for unit, target in targets.items():
        if unit not in ledger.units or not isinstance(target, (int, float)) or isinstance(target, bool):
            continue
        report = ledger.account(unit=unit, analysis=ledger.analysis)
        spent = report.epsilon_data_independent if basis == "data_independent" else report.epsilon
        lines.append(f"{unit}: ε = {format_epsilon(spent)} ({basis.replace('_', '-')}) of a target {target:g}")
        if spent > target * (1 + RTOL):
            over.append(unit)
    if not lines:
        return None
    if over:
        return Check("budget", "fail", "over its own budget: " + "; ".join(lines),
                     "the model spent more privacy than the budget it records, so the budget was not enforced.",
                     "recomputation")
    return Check("budget", "pass", "within the recorded budget: " + "; ".join(lines))


def ledger_statement(
    ledger: Ledger, recorded: object, given_units: dict[str, int]
) -> tuple[Statement, dict[str, Any]]:
    """The ledger's claim (``recorded``: its ``spent``) for the hygiene checks, and the report's ``claim``."""
    units = ledger.units
    unit = ledger.primary_unit if ledger.primary_unit in units or not units else units[0]
    reports = {u: ledger.account(unit=u, analysis=ledger.analysis) for u in units} if ledger.delta is not None else {}
    stated = (
        recorded.get(unit, {}).get("epsilon")
        if isinstance(recorded, dict) and isinstance(recorded.get(unit), dict) else None
    )
    releases = tuple(Release(m.kind, m.unit, m.num_queries, m.data_dependent, m.parameters)
                     for entry in ledger.entries for m in entry.analyses.values())
    parties = re.search(r"(\d+)\s+parties", ledger.description)
    fallback = {"party": int(parties.group(1))} if parties else {}
    counts, source = resolve_protected_units(given_units, unit, fallback, "from the ledger's description")
    federated = "party" in units or parties is not None or "federat" in ledger.description.lower()
    statement = Statement(
        unit=unit, delta=ledger.delta, epsilon=stated, reports=reports, releases=releases,
        unaccounted=ledger.unaccounted, setting="federated" if federated else "unknown",
        protected_units=counts, protected_units_source=source,
    )
    claim = {"epsilon": stated, "delta": ledger.delta, "unit": unit, "analysis": ledger.analysis,
             "source": "ledger.json (spent)", "other_units": {u: r.epsilon for u, r in reports.items() if u != unit}}
    return statement, claim
