"""The privacy ledger: an append-only record of every release a model depends on.

A :class:`Ledger` holds one :class:`~accounting.ledger_entry.LedgerEntry` per
release (vote aggregation, DP-SGD training of a teacher, a round of randomized
response, …) and recomputes the total privacy cost from the recorded RDP curves
alone: curves are summed order by order within one protected unit (sequential
composition, Mironov 2017, Prop. 1) and never across units. Releases no
mechanism covers are recorded as ``unaccounted`` entries and reported beside ε.

Private evidence (vote matrices) never enters the ledger's JSON: it is kept in
memory, written to a separate ``evidence.npz`` (:meth:`Ledger.evidence`) and
referenced by a salted sha256 commitment per entry. See ``docs/ledger.md`` for
the JSON schema and the threat model.

**Budget filter.** ``Ledger(target_epsilon=..., delta=...)`` refuses (raises
:class:`BudgetExceededError` before appending) any release that would take a
unit's spent ε past its target. By default the filter compares the
*data-independent* ε (``budget_basis="data_independent"``) under the ledger's
analysis (``"tight"`` by default): the point where a pipeline stops then
depends only on public parameters, so the number of answered queries can be
published. With ``budget_basis="data_dependent"`` the stopping point depends on
the private votes and is itself private.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import platform
import warnings
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from importlib import metadata
from typing import Any

import dp_accounting
import numpy as np

from ._checks import check_choice, check_delta, check_positive_finite
from .account import Bound, best_bound, conversion_description, pure_composition
from .conversion import rdp_to_epsilon
from .dp_event_release import DpEventRelease
from .fingerprint import canonical_json, commit_evidence, new_salt, sha256_hex
from .interop import flower_mechanism, ledger_dp_event, opacus_mechanism, tradeoff_event
from .ledger_entry import (
    GENESIS_SHA256,
    Curve,
    LedgerEntry,
    LedgerFormatError,
    LedgerIntegrityError,
    UnitAnalysis,
    analyse_mechanism,
    check_assumptions,
    is_training_record,
    load_json,
    require,
    require_sha256,
    require_type,
    sequence_of_entries,
)
from .mechanism import ANALYSES, UNITS, Mechanism, common_relations, relation_for_unit
from .noise_source import NoiseSource, noise_provenance_problem
from .observers import OBSERVERS, check_observer, check_observers
from .orders import default_orders
from .recompute import recompute_analysis
from .registry import mechanism_from_record, public_mechanism_from_record
from .report import MechanismReport, PrivacyReport, round_up

__all__ = [
    "BUDGET_BASES",
    "LEDGER_TYPE",
    "SCHEMA_VERSION",
    "BudgetExceededError",
    "Ledger",
    "LedgerFormatError",
    "LedgerIntegrityError",
    "software_versions",
]

LEDGER_TYPE = "privfed.ledger"
#: 2: ε per observer (``spent_by_observer``), entries' ``observers``/``units``, and ε = "inf" for a unit with a
#: release no mechanism covers (version 1 recorded the accounted releases' ε there). 3: ``noise``, where the noise
#: came from (:mod:`~privfed.accounting.noise_source`). Versions 1 and 2 are still read (their noise: not recorded).
SCHEMA_VERSION = 3
#: What the budget filter compares with the target: the data-independent ε (default) or the data-dependent one.
BUDGET_BASES: tuple[str, ...] = ("data_independent", "data_dependent")

#: Distributions whose versions a ledger records (read from package metadata, never by importing them).
_TRACKED_DISTRIBUTIONS = ("numpy", "scipy", "dp-accounting", "torch", "scikit-learn", "xgboost", "skops", "safetensors")
#: Relative tolerance when a recorded total or curve is compared with its recomputation.
_RTOL = 1e-9

_REQUIRED_KEYS = (
    "type",
    "schema_version",
    "privfed_version",
    "software",
    "created",
    "description",
    "seeds",
    "public_data_sha256",
    "model",
    "evidence",
    "primary_unit",
    "analysis",
    "delta",
    "budget",
    "spent",
    "num_entries",
    "head_sha256",
    "entries",
)


class BudgetExceededError(RuntimeError):
    """A release was refused because it would take a unit's spent ε past the ledger's target.

    Nothing was recorded. Attributes: ``unit``, ``epsilon`` (what would have been
    spent), ``target_epsilon``, ``delta``, ``analysis``, ``basis``.
    """

    def __init__(self, *, unit: str, epsilon: float, target_epsilon: float, delta: float, analysis: str, basis: str):
        self.unit, self.epsilon, self.target_epsilon = unit, epsilon, target_epsilon
        self.delta, self.analysis, self.basis = delta, analysis, basis
        super().__init__(
            f"recording this release would spend ε = {epsilon!r} > target {target_epsilon!r} at {unit} level "
            f"({analysis} analysis, δ = {delta:g}, {basis.replace('_', '-')} ε); "
            "it was refused and nothing was recorded"
        )


def software_versions() -> dict[str, str | None]:
    """Python's version and the installed versions of the libraries a ledger depends on (None if absent)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in _TRACKED_DISTRIBUTIONS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _privfed_version() -> str | None:
    try:
        return metadata.version("privfed")
    except metadata.PackageNotFoundError:
        return None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _target_per_unit(target_epsilon: object) -> dict[str, float]:
    if target_epsilon is None:
        return {}
    if isinstance(target_epsilon, Mapping):
        for unit in target_epsilon:
            check_choice("target_epsilon's unit", unit, UNITS)
        return {
            unit: check_positive_finite(f"target_epsilon[{unit!r}]", value) for unit, value in target_epsilon.items()
        }
    value = check_positive_finite("target_epsilon", target_epsilon)
    return {unit: value for unit in UNITS}


class Ledger:
    """Append-only record of a model's releases, with their RDP curves and committed evidence.

    Parameters
    ----------
    target_epsilon:
        Budget: a float (the same target for every unit) or a mapping unit → ε.
        ``None`` (default): no budget, nothing is refused.
    delta:
        The δ at which spent ε is computed and the budget enforced; needed for a
        target and for the ``spent`` totals in the JSON.
    primary_unit:
        The unit :meth:`account` reports by default: ``"party"`` (default, federated
        pipelines) or ``"example"``.
    analysis:
        The analysis of the ``spent`` totals and of the budget filter: ``"tight"``
        (default) or ``"classic"``.
    budget_basis:
        ``"data_independent"`` (default; the stopping point is public) or
        ``"data_dependent"`` (the stopping point depends on private votes).
    seeds:
        Random seeds used by the pipeline, name → integer: ``random_state``, which
        controls what no guarantee relies on (splits, initialisation, query order).
        Noise never derives from them; see :meth:`record_noise_source`.
    public_data_sha256:
        Fingerprint of the public data set (see :func:`privfed.accounting.fingerprint.data_fingerprint`).
    description:
        What the ledger's model is, in a sentence.

    Attributes
    ----------
    created, software, privfed_version:
        UTC creation time and the library versions in use (recorded at creation).
    model_fingerprint, evidence_fingerprint:
        Set by :func:`privfed.save_bundle`: the model files' sha256 and the evidence file's sha256.
    noise:
        Where the noise of the recorded releases came from (:meth:`record_noise_source`):
        ``{"source": "secret", ...}``, ``{"source": "seeded", "noise_seed": ...}``, or None
        when nobody recorded it (a ledger written by hand or before schema 3).

    Examples
    --------
    >>> import numpy as np
    >>> from accounting import LaplaceNoisyMax, Ledger
    >>> ledger = Ledger(delta=1e-5, primary_unit="party")
    >>> votes = np.array([[9, 1], [7, 3]])
    >>> entry = ledger.record({"party": LaplaceNoisyMax(votes, 0.05, 1, unit="party"),
    ...                        "example": LaplaceNoisyMax(votes, 0.05, 2, unit="example")})
    >>> entry = ledger.record_unaccounted("class counts of every party, sent in clear", observers=("coordinator",))
    >>> report = ledger.account()
    >>> report.unit, sorted(report.other_units)
    ('party', ['example'])
    """

    def __init__(
        self,
        *,
        target_epsilon: float | Mapping[str, float] | None = None,
        delta: float | None = None,
        primary_unit: str = "party",
        analysis: str = "tight",
        budget_basis: str = "data_independent",
        seeds: Mapping[str, int] | None = None,
        public_data_sha256: str | None = None,
        description: str = "",
    ) -> None:
        self.target_epsilon = _target_per_unit(target_epsilon)
        self.delta = None if delta is None else check_delta(delta)
        if self.target_epsilon and self.delta is None:
            raise ValueError("delta is required with target_epsilon: the budget is an (ε, δ) guarantee; pass delta=")
        self.primary_unit = check_choice("primary_unit", primary_unit, UNITS)
        self.analysis = check_choice("analysis", analysis, ANALYSES)
        self.budget_basis = check_choice("budget_basis", budget_basis, BUDGET_BASES)
        self.seeds = _check_seeds(seeds or {})
        self.public_data_sha256 = require_sha256(public_data_sha256, "public_data_sha256", nullable=True)
        self.description = _check_str("description", description)
        self.created = _now()
        self.privfed_version = _privfed_version()
        self.software = software_versions()
        self.model_fingerprint: dict[str, Any] | None = None
        self.evidence_fingerprint: dict[str, Any] | None = None
        self.noise: dict[str, Any] | None = None
        self._entries: list[LedgerEntry] = []
        self._evidence: dict[str, dict[str, np.ndarray]] = {}

    # --- reading -------------------------------------------------------------------------------
    @property
    def entries(self) -> tuple[LedgerEntry, ...]:
        """The entries, oldest first."""
        return tuple(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Ledger(<{len(self)} entries>, units={list(self.units)}, primary_unit={self.primary_unit!r})"

    @property
    def units(self) -> tuple[str, ...]:
        """The units some entry is analysed under, in :data:`UNITS` order."""
        present = {unit for entry in self._entries for unit in entry.analyses}
        return tuple(unit for unit in UNITS if unit in present)

    def relations(self, unit: str | None = None, *, observer: str = "public") -> tuple[str, ...]:
        """The neighbouring relations (sorted names) that every release ``observer`` sees at ``unit`` level
        (default: the primary unit) and every DP training entry is analysed for, needing no δ: covered by both
        of :meth:`account`'s bounds, so by whichever it reports (its ``relations`` may name more).
        """
        unit = self.primary_unit if unit is None else check_choice("unit", unit, UNITS)
        observer = check_observer(observer)
        members = {entry.index: member for entry, member in
                   self._members(unit, observer) + self._training_members(unit, observer)}
        return tuple(sorted(common_relations(public_mechanism_from_record(member.record())[0]
                                             for member in members.values())))

    @property
    def unaccounted(self) -> tuple[str, ...]:
        """Descriptions of the releases no mechanism covers."""
        return tuple(entry.description for entry in self._entries if entry.kind == "unaccounted")

    # --- recording -----------------------------------------------------------------------------
    def record(
        self,
        mechanism: Mechanism | Mapping[str, Mechanism],
        *,
        unit: str | None = None,
        note: str = "",
        derived_from_training: bool = False,
        observers: tuple[str, ...] = OBSERVERS,
        assumptions: tuple[str, ...] = (),
    ) -> LedgerEntry:
        """Append the entry of one release, analysed under one unit or several.

        Parameters
        ----------
        mechanism:
            A privfed :class:`Mechanism`, or a mapping unit → mechanism for one release
            analysed under several units (FedKT-L1 votes: ``{"party": k = s, "example": k = z}``).
        unit:
            ``"example"`` or ``"party"``; must match ``mechanism.unit`` (default: that unit).
            Not allowed with a mapping, whose keys are the units.
        note:
            Free text kept with the entry (what the release was).
        derived_from_training:
            True when the release is computed only from models whose DP training is
            recorded with :meth:`record_training` and from public data (post-processing
            of that training); see :meth:`account`.
        observers:
            Who sees the release (:data:`~privfed.accounting.observers.OBSERVERS`): both
            (default: a published output, which the coordinator computes), ``("coordinator",)``
            (a message only the server receives) or ``("public",)``.
        assumptions:
            What the release's guarantee assumes beyond its analysis and beyond every observer's
            defaults (:mod:`~privfed.accounting.observers`), one statement each, e.g. ``("the
            coordinator colludes with no party",)`` for noise shared out under secure aggregation.
            Printed with every report whose ε composes the entry (:attr:`PrivacyReport.assumptions`).

        Raises
        ------
        BudgetExceededError
            If the release would take a unit past its target; nothing is recorded.
        """
        mechanisms = _mechanisms_per_unit(mechanism, unit)
        note = _check_str("note", note)
        derived_from_training = _check_bool("derived_from_training", derived_from_training)
        observers = check_observers(observers)
        assumptions = check_assumptions(assumptions)
        if any(m.data_dependent and m.num_queries == 1 for m in mechanisms.values()):
            warnings.warn(
                "recording a data-dependent release of a single query: its data-dependent RDP curve in the public "
                "ledger is a per-query statistic of the private votes; size the batch with fits() and record the "
                "answered queries as one entry",
                UserWarning,
                stacklevel=2,
            )
        analyses = {u: analyse_mechanism(m, evidence_sha256=None) for u, m in mechanisms.items()}
        self._check_budget(analyses)
        for u, member in mechanisms.items():
            arrays = {name: np.array(array) for name, array in member.evidence().items()}
            if arrays:
                salt = new_salt()
                commitment = commit_evidence(arrays, salt)
                self._evidence[commitment] = {**arrays, "#salt": salt}
                analyses[u] = dataclasses.replace(analyses[u], evidence_sha256=commitment)
        return self._append(kind="release", analyses=analyses, description="", note=note,
                            derived_from_training=derived_from_training, observers=observers,
                            assumptions=assumptions)

    def record_unaccounted(
        self, description: str, *, note: str = "", derived_from_training: bool = False,
        observers: tuple[str, ...] = OBSERVERS, units: tuple[str, ...] | None = None,
        assumptions: tuple[str, ...] = (),
    ) -> LedgerEntry:
        """Append a release that no mechanism covers (class counts in clear, selector decisions, …).

        Every observer that sees it (``observers``, default both) gets ε = ``math.inf`` for
        every unit it leaves uncovered (``units``, default all), with a note naming it —
        unless it is post-processing of the recorded DP training (``derived_from_training=True``,
        see :meth:`record`), which covers it in the DP-training bound of :meth:`account`.
        ``assumptions`` as in :meth:`record`.
        """
        description = _check_str("description", description)
        if not description.strip():
            raise ValueError("description must say what was released without a guarantee, got an empty string")
        return self._append(kind="unaccounted", analyses={}, description=description, note=_check_str("note", note),
                            derived_from_training=_check_bool("derived_from_training", derived_from_training),
                            observers=check_observers(observers), units=units,
                            assumptions=check_assumptions(assumptions))

    def record_training(self, mechanism: Mechanism, *, note: str = "",
                        assumptions: tuple[str, ...] = ()) -> LedgerEntry:
        """Append the DP training (e.g. DP-SGD) of models that later releases are derived from.

        The models themselves are not released; releases recorded with
        ``derived_from_training=True`` are computed from them and public data only, so
        by post-processing the training's ε bounds them too. Compose the training first
        as it happened: each party's trainings sequentially, then in parallel over
        parties with disjoint data (:func:`~privfed.accounting.parallel.compose_parallel`).
        Training entries never enter the aggregation bound, the ``spent`` totals or the
        budget filter; :meth:`account` reports them as the alternative ``"dpsgd"`` bound.
        ``assumptions`` as in :meth:`record` (e.g. "the sample rate is public").
        """
        mechanisms = _mechanisms_per_unit(mechanism, None)
        analyses = {u: analyse_mechanism(m, evidence_sha256=None) for u, m in mechanisms.items()}
        for unit, analysis in analyses.items():
            if not is_training_record(analysis.record()):
                raise ValueError(f"mechanism must be DP training (DPSGD, or a composition of DPSGD runs) to be "
                                 f"recorded as training, got a {analysis.kind!r} mechanism at {unit} level; record a "
                                 "release with record()")
        return self._append(kind="training", analyses=analyses, description="", note=_check_str("note", note),
                            assumptions=check_assumptions(assumptions))

    def record_noise_source(self, source: NoiseSource) -> None:
        """Record where the noise of this ledger's releases came from (:attr:`noise`).

        A secret source is recorded by kind only. A seeded one (``noise_seed=``) is recorded with its seed and
        as an unaccounted release seen by every observer, for every unit: whoever holds the ledger regenerates
        the noise, so every ε of the ledger is ∞ for them, and :meth:`account` says why.
        """
        if not isinstance(source, NoiseSource):
            raise TypeError(f"source must be a NoiseSource, got {type(source).__name__}")
        if self.noise is not None:
            raise ValueError(f"the ledger's noise source is recorded already ({self.noise['source']}); a ledger "
                             "records one")
        self.noise = source.provenance()
        problem = noise_provenance_problem(self.noise)
        if problem is not None:
            self.record_unaccounted(f"NOISE NOT SECRET: {problem}")

    def fits(self, mechanism: Mechanism | Mapping[str, Mechanism], *, unit: str | None = None) -> bool:
        """Whether :meth:`record` would accept this release under the budget (nothing is recorded).

        Pipelines use it to find how many queries they can answer, e.g. by bisection
        on the number of queries, then record the answered ones as one entry.
        """
        analyses = {
            u: analyse_mechanism(m, evidence_sha256=None) for u, m in _mechanisms_per_unit(mechanism, unit).items()
        }
        try:
            self._check_budget(analyses)
        except BudgetExceededError:
            return False
        return True

    def _append(self, *, kind: str, analyses: Mapping[str, UnitAnalysis], description: str, note: str,
                derived_from_training: bool = False, observers: tuple[str, ...] = OBSERVERS,
                units: tuple[str, ...] | None = None, assumptions: tuple[str, ...] = ()) -> LedgerEntry:
        entry = LedgerEntry.create(
            index=len(self._entries),
            kind=kind,
            analyses=analyses,
            description=description,
            note=note,
            recorded=_now(),
            previous_sha256=self._entries[-1].sha256 if self._entries else GENESIS_SHA256,
            derived_from_training=derived_from_training,
            observers=observers,
            units=units,
            assumptions=assumptions,
        )
        self._entries.append(entry)
        return entry

    def _check_budget(self, analyses: Mapping[str, UnitAnalysis]) -> None:
        for unit, analysis in analyses.items():
            target, delta = self.target_epsilon.get(unit), self.delta
            if target is None:
                continue
            if delta is None:  # set with the target in __init__; the attribute may have been cleared since
                raise ValueError("delta is required with target_epsilon: the budget is an (ε, δ) guarantee; set delta")
            orders, rdp, independent = self._total_curve(unit, self.analysis, extra=analysis)
            curve = independent if self.budget_basis == "data_independent" else rdp
            epsilon, _ = rdp_to_epsilon(orders, curve, delta, self.analysis)
            if epsilon > target:
                raise BudgetExceededError(
                    unit=unit, epsilon=epsilon, target_epsilon=target, delta=delta,
                    analysis=self.analysis, basis=self.budget_basis,
                )

    # --- accounting ----------------------------------------------------------------------------
    @staticmethod
    def _other_unit_only(entry: LedgerEntry, unit: str) -> str:
        """What a release analysed under other units only is, for the notes of ``unit``'s report: its guarantee
        for an example does not bound a whole party's influence (nor the reverse without group privacy)."""
        return (f"entry {entry.index} is analysed at {'/'.join(entry.analyses)} level only, not at {unit} level "
                f"({entry.note or 'no note'})")

    def _members(self, unit: str, observer: str | None = None) -> list[tuple[LedgerEntry, UnitAnalysis]]:
        """The unit's releases (those ``observer`` sees; every one for None): what the aggregation bound composes."""
        return [(e, e.analyses[unit]) for e in self._entries if e.kind == "release" and unit in e.analyses
                and (observer is None or e.seen_by(observer))]

    def _training_members(self, unit: str, observer: str) -> list[tuple[LedgerEntry, UnitAnalysis]]:
        """What the DP-training bound composes: the training, and every release ``observer`` sees that is not
        derived from it."""
        return [(e, e.analyses[unit]) for e in self._entries if unit in e.analyses
                and (e.kind == "training" or (e.kind == "release" and e.seen_by(observer)
                                              and not e.derived_from_training))]

    def _total_curve(
        self, unit: str, analysis: str, extra: UnitAnalysis | None = None,
        members: list[tuple[LedgerEntry, UnitAnalysis]] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(orders, summed rdp, summed data-independent rdp) over ``members`` (the unit's releases) and ``extra``."""
        labelled = [(f"entry {entry.index}", member)
                    for entry, member in (self._members(unit) if members is None else members)]
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

    def account(self, delta: float | None = None, *, analysis: str = "tight", unit: str | None = None,
                observer: str = "public") -> PrivacyReport:
        """Recompute the total privacy cost from the recorded curves (no private data needed).

        Parameters
        ----------
        delta:
            Target δ in (0, 1); default: the ledger's ``delta``.
        analysis:
            ``"tight"`` (default) or ``"classic"``.
        unit:
            The unit to report (default: the ledger's ``primary_unit``). The other
            units' totals are in the report's ``other_units``; units are never summed together.
        observer:
            Who the guarantee is against (:data:`~privfed.accounting.observers.OBSERVERS`):
            ``"public"`` (default: the released model and published outputs) or
            ``"coordinator"`` (every message the server receives, as recorded). The
            public's ε is never larger than the coordinator's when the public sees only
            what the coordinator computes.

        Returns
        -------
        PrivacyReport
            ``epsilon`` is ``math.inf`` when the observer sees a release that no
            mechanism covers for the unit; the notes name it.
        """
        if delta is None and self.delta is None:
            raise ValueError("delta is required: pass account(delta=...) or create the ledger with Ledger(delta=...)")
        delta = check_delta(self.delta if delta is None else delta)
        analysis = check_choice("analysis", analysis, ANALYSES)
        unit = self.primary_unit if unit is None else check_choice("unit", unit, UNITS)
        observer = check_observer(observer)
        others = {other: self._unit_report(other, delta, analysis, observer) for other in self.units if other != unit}
        return dataclasses.replace(self._unit_report(unit, delta, analysis, observer), other_units=others)

    def observer_table(self, delta: float | None = None, *, analysis: str = "tight") -> list[PrivacyReport]:
        """One report per observer and unit (observers, then units, in their canonical order).

        The rows of the "ε per observer" table of the model card and the audit.
        """
        return [self.account(delta, analysis=analysis, unit=unit, observer=observer)
                for observer in OBSERVERS for unit in (self.units or (self.primary_unit,))]

    def _unit_report(self, unit: str, delta: float, analysis: str, observer: str = "public",
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
        seen = [entry for entry in self._entries if entry.kind != "training" and entry.seen_by(observer)]
        other_unit = {entry.index: self._other_unit_only(entry, unit) for entry in seen
                      if entry.kind == "release" and unit not in entry.analyses}
        unaccounted = [entry.description for entry in seen if entry.leaves_uncovered(unit)]
        aggregation = self._composed_report(unit, delta, analysis, self._members(unit, observer))
        notes = [f"UNACCOUNTED release seen by the {observer}, not covered by this ε: {text}" for text in unaccounted]
        notes += [f"NOT COVERED by this {unit}-level ε: {text}" for text in other_unit.values()]
        uncovering = [entry for entry in seen if entry.leaves_uncovered(unit)]
        aggregation = dataclasses.replace(aggregation, notes=aggregation.notes + tuple(notes), observer=observer,
                                          uncovered=(*unaccounted, *other_unit.values()),
                                          assumptions=_assumptions_of(aggregation.assumptions, uncovering))
        training_members = self._training_members(unit, observer)
        if not any(entry.kind == "training" for entry, _ in training_members):
            return _infinite_if_uncovered(aggregation, uncovered_is_infinite)
        training = self._composed_report(unit, delta, analysis, training_members)
        outside = [entry for entry in seen if not entry.derived_from_training]
        uncovered = [entry.description for entry in outside if entry.leaves_uncovered(unit)]
        uncovered += [other_unit[entry.index] for entry in outside if entry.index in other_unit]
        composed = [f"entry {entry.index} ({'/'.join(entry.analyses)}; {entry.note or 'no note'})"
                    for entry in outside if entry.kind == "release" and entry.index not in other_unit]
        coverage = [f"NOT COVERED by the DP-SGD bound (touches private data outside the DP-trained models, no "
                    f"{unit}-level mechanism): {description}" for description in uncovered]
        coverage += [f"not derived from the DP-trained models, so composed into the DP-SGD bound with its own "
                     f"mechanism: {text}" for text in composed]
        training = dataclasses.replace(training, source="dpsgd", uncovered=tuple(uncovered), observer=observer,
                                       assumptions=_assumptions_of(training.assumptions, uncovering),
                                       notes=training.notes + (
            "DP-SGD bound: the DP training of the models (training entries) composed with the accounted releases not "
            "derived from them; every release derived from the models is post-processing of their training",
            *coverage,
        ))
        aggregation = dataclasses.replace(aggregation, notes=aggregation.notes + tuple(coverage))
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
        chosen = dataclasses.replace(chosen, notes=(why, *chosen.notes), alternatives={other.source: other})
        return _infinite_if_uncovered(chosen, uncovered_is_infinite)

    def _composed_report(self, unit: str, delta: float, analysis: str,
                         members: list[tuple[LedgerEntry, UnitAnalysis]]) -> PrivacyReport:
        orders, total, total_independent = self._total_curve(unit, analysis, members=members)
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
            dp_event=tradeoff_event(rebuilt),
            rdp_data_independent=tuple(float(r) for r in total_independent),
        )

    # --- evidence ------------------------------------------------------------------------------
    def evidence(self) -> dict[str, np.ndarray]:
        """The private evidence of every entry, ready for ``np.savez``: keys ``"<sha256>/<name>"`` and
        ``"<sha256>#salt"``.

        Keep it away from the public ledger: give it only to auditors.
        """
        arrays: dict[str, np.ndarray] = {}
        for entry in self._entries:
            for unit, member in entry.analyses.items():
                commitment = member.evidence_sha256
                if commitment is None:
                    continue
                if commitment not in self._evidence:
                    raise ValueError(
                        f"this ledger holds no evidence for entry {entry.index} ({unit}): it was read from JSON "
                        "without its evidence file; pass evidence= to Ledger.from_json"
                    )
                for name, array in self._evidence[commitment].items():
                    key = f"{commitment}{name}" if name == "#salt" else f"{commitment}/{name}"
                    arrays[key] = array
        return arrays

    def _attach_evidence(self, evidence: Mapping[str, np.ndarray]) -> None:
        referenced = set()
        for entry in self._entries:
            for unit, member in entry.analyses.items():
                commitment = member.evidence_sha256
                if commitment is None:
                    continue
                referenced.add(commitment)
                label = f"entry {entry.index} ({member.kind}, {unit})"
                if f"{commitment}#salt" not in evidence:
                    raise LedgerIntegrityError(
                        f"evidence for {label} is missing: no arrays are committed as {commitment[:16]}…; "
                        "the evidence belongs to another ledger or was edited"
                    )
                prefix = f"{commitment}/"
                arrays = {
                    key[len(prefix):]: np.asarray(value) for key, value in evidence.items() if key.startswith(prefix)
                }
                salt = np.asarray(evidence[f"{commitment}#salt"])
                if commit_evidence(arrays, salt) != commitment:
                    raise LedgerIntegrityError(
                        f"evidence for {label} does not match its sha256 commitment: the evidence was swapped or edited"
                    )
                self._evidence[commitment] = {**arrays, "#salt": salt}
        stray = sorted({key.split("/")[0].split("#")[0] for key in evidence} - referenced)
        if stray:
            raise LedgerIntegrityError(
                f"evidence holds arrays for {len(stray)} commitment(s) no entry references "
                f"({', '.join(s[:16] + '…' for s in stray)}): it belongs to another ledger"
            )

    def mechanisms(self, unit: str | None = None) -> list[Mechanism]:
        """The mechanisms of every entry for ``unit`` (default: the primary unit), rebuilt with their evidence.

        Raises ``ValueError`` when a data-dependent entry's evidence is not attached
        (a ledger read from JSON without its evidence file).
        """
        unit = self.primary_unit if unit is None else check_choice("unit", unit, UNITS)
        rebuilt = []
        for entry, member in self._members(unit):
            arrays = None
            if member.evidence_sha256 is not None:
                if member.evidence_sha256 not in self._evidence:
                    raise ValueError(f"this ledger holds no evidence for entry {entry.index} ({unit}); pass evidence= "
                                     "to Ledger.from_json to rebuild its mechanism")
                arrays = {k: v for k, v in self._evidence[member.evidence_sha256].items() if k != "#salt"}
            rebuilt.append(mechanism_from_record(member.record(), evidence=arrays))
        return rebuilt

    def verify(self) -> int:
        """Rebuild every entry's mechanism from its recorded parameters and check what was recorded.

        Exactly what ``privfed audit`` recomputes (:func:`~privfed.accounting.recompute.recompute_analysis`):
        data-independent mechanisms are rebuilt from their parameters alone; a
        data-dependent one from its evidence when the ledger holds it, and otherwise
        through its public view, whose data-independent curve (the ε that holds
        whatever the data) is checked. Number of queries, data-dependence and pure ε
        are checked in every case. Memory never grows with a recorded count. Returns
        the number of (entry, unit) analyses checked.

        Raises
        ------
        LedgerFormatError
            When an entry's parameters cannot be rebuilt into a mechanism at all.
        LedgerIntegrityError
            When a recorded value differs from the recomputed one.
        """
        checked = 0
        for entry in self._entries:
            for unit, member in entry.analyses.items():
                arrays = None
                if member.evidence_sha256 is not None and member.evidence_sha256 in self._evidence:
                    arrays = {k: v for k, v in self._evidence[member.evidence_sha256].items() if k != "#salt"}
                result = recompute_analysis(member, arrays)
                label = f"entry {entry.index} ({member.kind}, {unit})"
                if result.fresh is None:
                    raise LedgerFormatError(f"{label}: {result.problems[0]}")
                if result.problems:
                    raise LedgerIntegrityError(
                        f"{label}: {'; '.join(result.problems)} — it does not match the mechanism rebuilt from its "
                        "parameters (and evidence): the entry or its evidence was altered"
                    )
                checked += 1
        return checked

    # --- serialisation -------------------------------------------------------------------------
    def _spent(self, observer: str = "public", *,
               uncovered_is_infinite: bool = True) -> dict[str, dict[str, Any]] | None:
        return None if self.delta is None else self._spent_at(self.delta, observer, uncovered_is_infinite)

    def _spent_at(self, delta: float, observer: str, uncovered_is_infinite: bool) -> dict[str, dict[str, Any]]:
        spent = {}
        for unit in self.units:
            report = self._unit_report(unit, delta, self.analysis, observer, uncovered_is_infinite)
            spent[unit] = {
                "epsilon": _encode_epsilon(report.epsilon),
                "epsilon_data_independent": _encode_epsilon(report.epsilon_data_independent),
                "data_dependent": report.data_dependent,
                "delta": delta,
                "analysis": self.analysis,
                "order": report.order,
            }
        return spent

    def totals(self, observer: str = "public", *,
               schema_version: int = SCHEMA_VERSION) -> dict[str, dict[str, Any]] | None:
        """The per-unit totals as the JSON records them (``spent``, or ``spent_by_observer[observer]``), for δ = the
        ledger's ``delta`` and its analysis; None without a δ. ``schema_version=1`` gives schema 1's totals (the
        accounted releases' ε where a release is uncovered)."""
        return self._spent(check_observer(observer), uncovered_is_infinite=schema_version >= 2)

    def _spent_by_observer(self) -> dict[str, dict[str, dict[str, Any]]] | None:
        delta = self.delta
        if delta is None:
            return None
        return {observer: self._spent_at(delta, observer, True) for observer in OBSERVERS}

    def to_dict(self) -> dict[str, Any]:
        """The ledger as a JSON-ready dictionary (schema: ``docs/ledger.md``); no private data."""
        return {
            "type": LEDGER_TYPE,
            "schema_version": SCHEMA_VERSION,
            "privfed_version": self.privfed_version,
            "software": dict(self.software),
            "created": self.created,
            "description": self.description,
            "seeds": dict(self.seeds),
            "noise": None if self.noise is None else dict(self.noise),
            "public_data_sha256": self.public_data_sha256,
            "model": self.model_fingerprint,
            "evidence": self.evidence_fingerprint,
            "primary_unit": self.primary_unit,
            "analysis": self.analysis,
            "delta": self.delta,
            "budget": {"target_epsilon": dict(self.target_epsilon), "basis": self.budget_basis},
            "spent": self._spent(),
            "spent_by_observer": self._spent_by_observer(),
            "num_entries": len(self._entries),
            "head_sha256": self._entries[-1].sha256 if self._entries else GENESIS_SHA256,
            "entries": [entry.to_dict() for entry in self._entries],
        }

    def to_json(self, *, indent: int | None = 2) -> str:
        """The ledger as strict JSON text (see :meth:`to_dict`)."""
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, allow_nan=False)

    def digest(self) -> str:
        """sha256 of the ledger's canonical JSON: pins a ledger kept on its own.

        A ledger inside a bundle is pinned by the bundle digest instead
        (``privfed.bundle_digest``: the sha256 of ``MANIFEST.json``, which covers
        ``ledger.json`` with every other file); that is the digest to publish or sign.
        """
        return sha256_hex(canonical_json(self.to_dict()))

    @classmethod
    def from_json(cls, text: str | bytes, *, evidence: Mapping[str, np.ndarray] | None = None) -> "Ledger":
        """Read a ledger written by :meth:`to_json`, checking it as :meth:`from_dict` does."""
        return cls.from_dict(load_json(text, "ledger"), evidence=evidence)

    @classmethod
    def from_dict(cls, document: Mapping[str, Any], *, evidence: Mapping[str, np.ndarray] | None = None) -> "Ledger":
        """Rebuild a ledger, checking its format, its chain of entries and its recorded totals.

        Parameters
        ----------
        document:
            A dictionary from :meth:`to_dict`.
        evidence:
            Optional private evidence (from :meth:`evidence` / ``evidence.npz``); each
            entry's arrays are checked against its commitment and the curves recomputed.

        Raises
        ------
        LedgerFormatError
            A key is missing or a value malformed; the message names it.
        LedgerIntegrityError
            An entry was edited, dropped, inserted or reordered, a recorded total does
            not match the entries, or the evidence does not match its commitments.
        """
        if not isinstance(document, Mapping):
            raise LedgerFormatError(f"ledger must be a JSON object, got {type(document).__name__}")
        if document.get("type") != LEDGER_TYPE:
            raise LedgerFormatError(f"ledger.type must be {LEDGER_TYPE!r}, got {document.get('type')!r}")
        version = document.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise LedgerFormatError(f"ledger.schema_version must be a positive integer, got {version!r}")
        if version > SCHEMA_VERSION:
            raise LedgerFormatError(
                f"ledger.schema_version is {version}: written by a newer privfed; this one reads up to {SCHEMA_VERSION}"
            )
        missing = [key for key in _REQUIRED_KEYS if key not in document]
        if missing:
            raise LedgerFormatError(f"ledger is missing required keys: {', '.join(missing)}")

        budget = require_type(document["budget"], dict, "ledger.budget", "an object")
        try:
            ledger = cls(
                target_epsilon=require_type(require(budget, "target_epsilon", "ledger.budget"), dict,
                                            "ledger.budget.target_epsilon", "an object") or None,
                delta=document["delta"],
                primary_unit=document["primary_unit"],
                analysis=document["analysis"],
                budget_basis=require(budget, "basis", "ledger.budget"),
                seeds=require_type(document["seeds"], dict, "ledger.seeds", "an object"),
                public_data_sha256=document["public_data_sha256"],
                description=document["description"],
            )
        except LedgerFormatError:
            raise
        except (TypeError, ValueError) as error:
            raise LedgerFormatError(f"ledger: {error}") from None
        ledger.created = require_type(document["created"], str, "ledger.created", "a string")
        ledger.privfed_version = require_type(document["privfed_version"], (str, type(None)), "ledger.privfed_version",
                                              "a string or null")
        ledger.software = require_type(document["software"], dict, "ledger.software", "an object")
        ledger.model_fingerprint = require_type(document["model"], (dict, type(None)), "ledger.model",
                                                "an object or null")
        ledger.evidence_fingerprint = require_type(document["evidence"], (dict, type(None)), "ledger.evidence",
                                                   "an object or null")
        if version >= 3:
            ledger.noise = require_type(require(document, "noise", "ledger"), (dict, type(None)), "ledger.noise",
                                        "an object or null")
        entries = require_type(document["entries"], list, "ledger.entries", "a list")
        ledger._entries = list(sequence_of_entries(
            [LedgerEntry.from_dict(entry, f"ledger.entries[{i}]") for i, entry in enumerate(entries)]
        ))
        num_entries = require_type(document["num_entries"], int, "ledger.num_entries", "an integer")
        head = require_sha256(document["head_sha256"], "ledger.head_sha256")
        if num_entries != len(ledger._entries) or head != (
            ledger._entries[-1].sha256 if ledger._entries else GENESIS_SHA256
        ):
            raise LedgerIntegrityError(
                f"ledger.num_entries is {num_entries} and ledger.head_sha256 names the last entry, "
                f"but the ledger holds {len(ledger._entries)} entries whose last does not match: "
                "entries were removed from or added at the end"
            )
        recomputed: Mapping[str, dict[str, dict[str, Any]] | None] | None
        try:
            if version == 1:  # schema 1 recorded the accounted releases' ε where a release was uncovered
                recomputed = {"public": ledger._spent(uncovered_is_infinite=False)}
            else:
                recomputed = ledger._spent_by_observer()
        except (ValueError, TypeError, KeyError, ArithmeticError) as error:
            message = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise LedgerFormatError(f"ledger: the totals cannot be recomputed from the entries: {message}") from None
        _check_spent(document["spent"], None if recomputed is None else recomputed["public"])
        if version >= 2:
            by_observer = require(document, "spent_by_observer", "ledger")
            if recomputed is None or by_observer is None:
                if by_observer is not None or recomputed is not None:
                    raise LedgerIntegrityError("ledger.spent_by_observer does not match ledger.delta: the ledger was "
                                               "edited")
            else:
                by_observer = require_type(by_observer, dict, "ledger.spent_by_observer", "an object")
                if sorted(by_observer) != sorted(OBSERVERS):
                    raise LedgerIntegrityError(f"ledger.spent_by_observer lists {sorted(by_observer)}, expected "
                                               f"{sorted(OBSERVERS)}: the totals were edited")
                for observer in OBSERVERS:
                    _check_spent(by_observer[observer], recomputed[observer], f"ledger.spent_by_observer.{observer}")
        if evidence is not None:
            ledger._attach_evidence(evidence)
            ledger.verify()
        return ledger

    # --- interoperability: dp-accounting, Opacus, Flower (logic in interop.py) ------------------
    def to_dp_event(self, *, unit: str | None = None, bound: str = "aggregation",
                    observer: str = "public") -> dp_accounting.DpEvent:
        """The ledger's releases for ``unit`` (default: the primary unit) that ``observer`` sees (default: the
        public) as one dp-accounting ``DpEvent``.

        ``bound="aggregation"`` (default) exports the releases the aggregation bound
        composes, ``"dpsgd"`` the DP-training bound's (training entries and releases not
        derived from them). Each release becomes its data-independent event
        (:func:`~accounting.interop.data_independent_event`); an unaccounted release, a
        release not analysed at ``unit`` level and a mechanism dp-accounting has no
        event for become ``NonPrivateDpEvent`` (ε = ∞). An empty ledger is ``NoOpDpEvent``.
        """
        return ledger_dp_event(self, unit=self.primary_unit if unit is None else unit, bound=bound, observer=observer)

    def record_dp_event(self, event: dp_accounting.DpEvent, *, description: str, unit: str = "example",
                        relation: str | None = None, observers: tuple[str, ...] = OBSERVERS) -> LedgerEntry:
        """Record a release described by a dp-accounting ``DpEvent`` (:class:`DpEventRelease`) as accounted."""
        return self.record(DpEventRelease(event, relation=relation, unit=unit), note=_check_description(description),
                           observers=observers)

    def record_opacus(self, accountant: Any, *, description: str, unit: str = "example",
                      observers: tuple[str, ...] = OBSERVERS) -> LedgerEntry:
        """Record an Opacus accountant's history (σ, q, steps) as DP-SGD (:func:`~.interop.opacus_mechanism`)."""
        return self.record(opacus_mechanism(accountant, unit=unit), note=_check_description(description),
                           observers=observers)

    def record_flower(self, state_or_accountant: Any, *, description: str, unit: str = "party",
                      observers: tuple[str, ...] = OBSERVERS) -> LedgerEntry:
        """Record Flower's DP-FedAvg ``RdpAccountant`` (or its ``state_dict()``) at client level
        (:func:`~accounting.interop.flower_mechanism`)."""
        return self.record(flower_mechanism(state_or_accountant, unit=unit), note=_check_description(description),
                           observers=observers)


def _encode_epsilon(value: float) -> float | str:
    """ε for strict JSON: ``"inf"`` for an infinite ε."""
    return "inf" if value == math.inf else value


def decode_epsilon(value: Any) -> float | None:
    """A recorded ε (a number or ``"inf"``) as a float; None when it is neither."""
    if value == "inf":
        return math.inf
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return None


def _check_spent(recorded: Any, recomputed: dict[str, dict[str, Any]] | None, path: str = "ledger.spent") -> None:
    if recomputed is None:
        if recorded is not None:
            raise LedgerIntegrityError(f"{path} is recorded but ledger.delta is null: the ledger was edited")
        return
    recorded = require_type(recorded, dict, path, "an object")
    if sorted(recorded) != sorted(recomputed):
        raise LedgerIntegrityError(
            f"{path} lists units {sorted(recorded)} but the entries are analysed under {sorted(recomputed)}: "
            "the totals or the entries were edited"
        )
    for unit, fresh in recomputed.items():
        for key in ("epsilon", "epsilon_data_independent"):
            value = decode_epsilon(require(recorded[unit], key, f"{path}.{unit}"))
            expected = float(fresh[key])  # this ledger's own encoding: a number or "inf"
            if value is None or not (value == expected or math.isclose(value, expected, rel_tol=_RTOL, abs_tol=1e-12)):
                raise LedgerIntegrityError(
                    f"{path}.{unit}.{key} is {recorded[unit][key]!r} but the recorded RDP curves give {fresh[key]!r} "
                    f"({fresh['analysis']} analysis, δ = {fresh['delta']:g}): the spent ε was edited"
                )


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
    return dataclasses.replace(report, epsilon=math.inf, epsilon_data_independent=math.inf, notes=(
        f"ε = inf against the {report.observer}: {len(report.uncovered)} release(s) it sees are covered by no "
        f"mechanism (listed below and in report.uncovered); the accounted releases alone give ε = "
        f"{round_up(report.epsilon, 6)}, which is not a guarantee for what was released",
        *report.notes))


def _mechanisms_per_unit(mechanism: Mechanism | Mapping[str, Mechanism], unit: str | None) -> dict[str, Mechanism]:
    if isinstance(mechanism, Mapping):
        if unit is not None:
            raise ValueError(f"unit must be None when mechanism is a mapping unit → mechanism, got unit={unit!r}")
        if not mechanism:
            raise ValueError("mechanism must map at least one unit to a mechanism, got an empty mapping")
        for key, member in mechanism.items():
            check_choice("mechanism's unit key", key, UNITS)
            if not isinstance(member, Mechanism):
                raise TypeError(f"mechanism[{key!r}] must be a privfed Mechanism, got {type(member).__name__}")
            if member.unit != key:
                raise ValueError(f"mechanism[{key!r}] protects unit {member.unit!r}, not {key!r}")
        return {key: mechanism[key] for key in UNITS if key in mechanism}
    if not isinstance(mechanism, Mechanism):
        raise TypeError(
            f"mechanism must be a privfed Mechanism or a mapping unit → Mechanism, got {type(mechanism).__name__}"
        )
    if unit is not None and check_choice("unit", unit, UNITS) != mechanism.unit:
        raise ValueError(f"unit is {unit!r} but the mechanism protects unit {mechanism.unit!r}")
    return {mechanism.unit: mechanism}


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def _check_description(description: object) -> str:
    if not _check_str("description", description).strip():
        raise ValueError("description must say what the release was, got an empty string")
    return description  # type: ignore[return-value]


def _check_str(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__}")
    return value


def _check_seeds(seeds: Mapping[str, int]) -> dict[str, int]:
    if not isinstance(seeds, Mapping):
        raise TypeError(f"seeds must be a mapping name → integer, got {type(seeds).__name__}")
    for name, value in seeds.items():
        if not isinstance(name, str) or isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"seeds must map names to integers, got {name!r}: {value!r}")
    return {name: int(value) for name, value in seeds.items()}
