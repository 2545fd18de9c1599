"""A ledger's accounting: the per-unit, per-observer guarantees recomputed from its entries' recorded curves.

Everything here reads entries only (:class:`~accounting.ledger_entry.LedgerEntry`), never private data:
curves are summed order by order within one protected unit (sequential composition, Mironov 2017, Prop. 1)
and never across units. :func:`unit_report` chooses between the aggregation bound (the releases) and the
DP-training bound (the training, which covers the releases derived from it); :func:`spent_totals` gives
the per-unit totals as the ledger's JSON records them. :class:`~accounting.ledger.Ledger` serves these as
:meth:`~accounting.ledger.Ledger.account` and :meth:`~accounting.ledger.Ledger.totals`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .account import Bound, best_bound, conversion_description, pure_composition
from .ledger_entry import Curve, LedgerEntry, UnitAnalysis
from .mechanism import UNITS, common_relations, relation_for_unit
from .orders import default_orders
from .registry import public_mechanism_from_record
from .report import DeferredEvent, MechanismReport, PrivacyReport, replace_report, round_up

__all__ = [
    "Member",
    "composed_report",
    "decode_epsilon",
    "releases",
    "spent_totals",
    "total_curve",
    "training_composition",
    "unit_report",
    "units_of",
]

#: One entry's analysis at one unit, with its entry: what a bound composes.
Member = tuple[LedgerEntry, UnitAnalysis]


def units_of(entries: Iterable[LedgerEntry]) -> tuple[str, ...]:
    """The units some entry is analysed under, in :data:`UNITS` order."""
    present = {unit for entry in entries for unit in entry.analyses}
    return tuple(unit for unit in UNITS if unit in present)


def releases(entries: Iterable[LedgerEntry], unit: str, observer: str | None = None) -> list[Member]:
    """The unit's releases (those ``observer`` sees; every one for None): what the aggregation bound composes."""
    return [(e, e.analyses[unit]) for e in entries if e.kind == "release" and unit in e.analyses
            and (observer is None or e.seen_by(observer))]


def training_composition(entries: Iterable[LedgerEntry], unit: str, observer: str) -> list[Member]:
    """What the DP-training bound composes: the training, and every release ``observer`` sees that is not
    derived from it."""
    return [(e, e.analyses[unit]) for e in entries if unit in e.analyses
            and (e.kind == "training" or (e.kind == "release" and e.seen_by(observer)
                                          and not e.derived_from_training))]


def total_curve(members: Sequence[Member], unit: str, analysis: str,
                extra: UnitAnalysis | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(orders, summed rdp, summed data-independent rdp) over ``members`` (the unit's releases) and ``extra``."""
    labelled = [(f"entry {entry.index}", member) for entry, member in members]
    if extra is not None:
        labelled.append(("the new release", extra))
    curves: list[Curve] = []
    for label, member in labelled:
        curve = member.curves.get(analysis)
        if curve is None:
            raise ValueError(f"{label} ({member.kind}, {unit}) has no {analysis}-analysis curve; account it "
                             f"with analysis={next(iter(member.curves))!r}")
        if curves and curve.orders != curves[0].orders:
            raise ValueError(f"{label} ({member.kind}, {unit}) records its {analysis} curve on other orders than "
                             "the entries before it; curves on different grids cannot be summed")
        curves.append(curve)
    orders = np.asarray(curves[0].orders if curves else default_orders(analysis), dtype=float)
    rdp = np.sum([curve.rdp for curve in curves], axis=0) if curves else np.zeros_like(orders)
    independent = np.sum([c.rdp_data_independent for c in curves], axis=0) if curves else np.zeros_like(orders)
    return orders, rdp, independent


def unit_report(entries: Sequence[LedgerEntry], unit: str, delta: float, analysis: str, observer: str = "public",
                uncovered_is_infinite: bool = True) -> PrivacyReport:
    """The unit's guarantee against ``observer``: the aggregation bound, or the DP-training bound where it is
    valid and smaller; ε = inf when neither covers every release the observer sees.

    Two valid bounds can hold for the same releases. The *aggregation* bound
    composes the released mechanisms. When the ledger records DP training of the
    models the releases are computed from, every release marked
    ``derived_from_training`` is post-processing of that training, so the
    *DP-training* bound composes the training with the accounted releases that
    are not derived from it. It is a guarantee only when no unaccounted release
    lies outside the training; the aggregation bound only when no release is
    unaccounted at all. The reported bound is the valid one with the smaller
    data-independent ε (a choice made on public values only); the other is kept in
    ``alternatives``. (``uncovered_is_infinite=False`` keeps the accounted releases'
    ε where nothing covers a release: how schema-1 ledgers recorded their totals.)

    The public's ε is never larger than the coordinator's where every release the public sees
    is one the coordinator sees too (it computes them): a composition over fewer releases is
    never larger (``docs/accounting.md``: adding a release never lowers ε).
    """
    seen = [entry for entry in entries if entry.kind != "training" and entry.seen_by(observer)]
    other_unit = {entry.index: _other_unit_only(entry, unit) for entry in seen
                  if entry.kind == "release" and unit not in entry.analyses}
    unaccounted = [entry.description for entry in seen if entry.leaves_uncovered(unit)]
    aggregation = composed_report(unit, delta, analysis, releases(entries, unit, observer))
    notes = [f"UNACCOUNTED release seen by the {observer}, not covered by this ε: {text}" for text in unaccounted]
    notes += [f"NOT COVERED by this {unit}-level ε: {text}" for text in other_unit.values()]
    uncovering = [entry for entry in seen if entry.leaves_uncovered(unit)]
    aggregation = replace_report(aggregation, notes=aggregation.notes + tuple(notes), observer=observer,
                                 uncovered=(*unaccounted, *other_unit.values()),
                                 assumptions=_assumptions_of(aggregation.assumptions, uncovering))
    training_members = training_composition(entries, unit, observer)
    if not any(entry.kind == "training" for entry, _ in training_members):
        return _infinite_if_uncovered(aggregation, uncovered_is_infinite)
    training = composed_report(unit, delta, analysis, training_members)
    outside = [entry for entry in seen if not entry.derived_from_training]
    uncovered = [entry.description for entry in outside if entry.leaves_uncovered(unit)]
    uncovered += [other_unit[entry.index] for entry in outside if entry.index in other_unit]
    composed = [f"entry {entry.index} ({'/'.join(entry.analyses)}; {entry.note or 'no note'})"
                for entry in outside if entry.kind == "release" and entry.index not in other_unit]
    coverage = [f"NOT COVERED by the DP-SGD bound (touches private data outside the DP-trained models, no "
                f"{unit}-level mechanism): {description}" for description in uncovered]
    coverage += [f"not derived from the DP-trained models, so composed into the DP-SGD bound with its own "
                 f"mechanism: {text}" for text in composed]
    training = replace_report(training, source="dpsgd", uncovered=tuple(uncovered), observer=observer,
                              assumptions=_assumptions_of(training.assumptions, uncovering),
                              notes=training.notes + (
        "DP-SGD bound: the DP training of the models (training entries) composed with the accounted releases not "
        "derived from them; every release derived from the models is post-processing of their training",
        *coverage,
    ))
    aggregation = replace_report(aggregation, notes=aggregation.notes + tuple(coverage))
    training_valid, aggregation_valid = not uncovered, not aggregation.uncovered
    if training_valid and (not aggregation_valid
                           or training.epsilon_data_independent <= aggregation.epsilon_data_independent):
        chosen, other = training, aggregation
    elif not training_valid and not aggregation_valid and len(uncovered) < len(aggregation.uncovered):
        chosen, other = training, aggregation  # neither holds: name the fewer releases left uncovered
    else:
        chosen, other = aggregation, training
    why = (f"reported bound: {chosen.source} (ε = {round_up(chosen.epsilon, 6)}); the {other.source} bound "
           f"gives ε = {round_up(other.epsilon, 6)}"
           + ("" if (training_valid if other is training else aggregation_valid)
              else " but leaves releases uncovered"))
    chosen = replace_report(chosen, notes=(why, *chosen.notes), alternatives={other.source: other})
    return _infinite_if_uncovered(chosen, uncovered_is_infinite)


def _tradeoff_event(mechanisms: list) -> Any:
    """:func:`~accounting.interop.tradeoff_event` of ``mechanisms``, imported when a report's event is first read
    (its events are dp-accounting's)."""
    from .interop import tradeoff_event

    return tradeoff_event(mechanisms)


def composed_report(unit: str, delta: float, analysis: str, members: Sequence[Member]) -> PrivacyReport:
    """The sequential composition of ``members`` at ``unit`` level: the best of the RDP, PLD and pure bounds."""
    orders, total, total_independent = total_curve(members, unit, analysis)
    # Mechanisms are rebuilt from their public parameters (placeholder votes for noisy-max releases,
    # whose dp-accounting events and pure ε do not depend on the votes), so the ledger gives the same
    # bound as account() on the mechanisms themselves.
    rebuilt = [public_mechanism_from_record(member.record())[0] for _, member in members]
    rows = []
    for (_, member), mechanism in zip(members, rebuilt):
        curve = member.curves[analysis]
        alone = best_bound(
            [mechanism], np.asarray(curve.orders, dtype=float), np.asarray(curve.rdp, dtype=float),
            np.asarray(curve.rdp_data_independent, dtype=float), delta, analysis, pure_epsilon=member.pure_epsilon,
        )
        rows.append(MechanismReport(
            kind=member.kind, unit=unit, parameters=member.parameters, num_queries=member.num_queries,
            data_dependent=member.data_dependent, epsilon=alone.epsilon, order=alone.order,
            epsilon_data_independent=alone.epsilon_data_independent, pure_epsilon=member.pure_epsilon,
            method=alone.method, relations=tuple(sorted(mechanism.relations)),
        ))
    if members:
        bound = best_bound(rebuilt, orders, total, total_independent, delta, analysis,
                           pure_epsilon=pure_composition(member.pure_epsilon for _, member in members))
    else:
        bound = Bound(0.0, float(orders[0]), 0.0, "rdp", "rdp")
    notes = [f"recomputed from the RDP curves of {len(members)} {unit}-level ledger entr"
             f"{'y' if len(members) == 1 else 'ies'}, summed order by order (sequential composition)"]
    if bound.method == "pld":
        notes.append("ε from the privacy loss distribution of the entries' mechanisms, rebuilt from their "
                     "recorded parameters (tighter than the summed RDP curves here)")
    elif bound.method == "pure":
        notes.append("ε from basic composition of the entries' pure ε-DP guarantees (tighter than the summed "
                     "RDP curves here)")
    notes += bound.notes()
    relations = common_relations(rebuilt)
    return PrivacyReport(
        epsilon=bound.epsilon,
        delta=delta,
        order=bound.order,
        orders=tuple(float(a) for a in orders),
        rdp=tuple(float(r) for r in total),
        log_moments=tuple(float(r) for r in total * (orders - 1.0)),
        data_dependent=any(member.data_dependent for _, member in members),
        epsilon_data_independent=bound.epsilon_data_independent,
        analysis=analysis,
        conversion=conversion_description(analysis, bound.method),
        unit=unit,
        relation=relation_for_unit(unit, relations),
        relations=tuple(sorted(relations)),
        mechanisms=tuple(rows),
        notes=tuple(notes),
        method=bound.method,
        assumptions=_assumptions_of(entry for entry, _ in members),
        dp_event=DeferredEvent(_tradeoff_event, (rebuilt,)),
        rdp_data_independent=tuple(float(r) for r in total_independent),
    )


def spent_totals(entries: Sequence[LedgerEntry], delta: float, analysis: str, observer: str,
                 uncovered_is_infinite: bool = True) -> dict[str, dict[str, Any]]:
    """Unit → the totals ``observer``'s report gives at ``delta`` under ``analysis``, as the JSON records them
    (``spent``, ``spent_by_observer``): ε as a number or ``"inf"``."""
    spent = {}
    for unit in units_of(entries):
        report = unit_report(entries, unit, delta, analysis, observer, uncovered_is_infinite)
        spent[unit] = {
            "epsilon": _encode_epsilon(report.epsilon),
            "epsilon_data_independent": _encode_epsilon(report.epsilon_data_independent),
            "data_dependent": report.data_dependent,
            "delta": delta,
            "analysis": analysis,
            "order": report.order,
        }
    return spent


def decode_epsilon(value: Any) -> float | None:
    """A recorded ε (a number or ``"inf"``) as a float; None when it is neither."""
    if value == "inf":
        return math.inf
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return None


def _encode_epsilon(value: float) -> float | str:
    """ε for strict JSON: ``"inf"`` for an infinite ε."""
    return "inf" if value == math.inf else value


def _other_unit_only(entry: LedgerEntry, unit: str) -> str:
    """What a release analysed under other units only is, for the notes of ``unit``'s report: its guarantee
    for an example does not bound a whole party's influence (nor the reverse without group privacy)."""
    return (f"entry {entry.index} is analysed at {'/'.join(entry.analyses)} level only, not at {unit} level "
            f"({entry.note or 'no note'})")


def _assumptions_of(*sources: Iterable[Any]) -> tuple[str, ...]:
    """The assumptions of ledger entries (or of statements already collected), each once, in order."""
    statements: dict[str, None] = {}
    for source in sources:
        for item in source:
            for statement in (item.assumptions if isinstance(item, LedgerEntry) else (item,)):
                statements[statement] = None
    return tuple(statements)


def _infinite_if_uncovered(report: PrivacyReport, uncovered_is_infinite: bool) -> PrivacyReport:
    """ε = inf when a release the observer sees is covered by no mechanism (never a finite number, never 0)."""
    if not report.uncovered or not uncovered_is_infinite:
        return report
    return replace_report(report, epsilon=math.inf, epsilon_data_independent=math.inf, notes=(
        f"ε = inf against the {report.observer}: {len(report.uncovered)} release(s) it sees are covered by no "
        f"mechanism (listed below and in report.uncovered); the accounted releases alone give ε = "
        f"{round_up(report.epsilon, 6)}, which is not a guarantee for what was released",
        *report.notes))
