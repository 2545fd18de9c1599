"""The privacy ledger: an append-only record of every release a model depends on.

A :class:`Ledger` holds one :class:`~accounting.ledger_entry.LedgerEntry` per
release (vote aggregation, DP-SGD training of a teacher, a round of randomized
response, …) and recomputes the total privacy cost from the recorded RDP curves
alone (:mod:`~accounting.ledger_totals`): curves are summed order by order within
one protected unit (sequential composition, Mironov 2017, Prop. 1) and never across
units. Releases no mechanism covers are recorded as ``unaccounted`` entries and
reported beside ε.

Private evidence (vote matrices) never enters the ledger's JSON
(:mod:`~accounting.ledger_json`): it is kept in memory
(:mod:`~accounting.ledger_evidence`), written to a separate ``evidence.npz``
(:meth:`Ledger.evidence`) and referenced by a salted sha256 commitment per entry.
See ``docs/ledger.md`` for the JSON schema and the threat model.

**Budget filter** (:mod:`~accounting.ledger_budget`). ``Ledger(target_epsilon=...,
delta=...)`` refuses (raises :class:`BudgetExceededError` before appending) any
release that would take a unit's spent ε past its target, by default comparing
the *data-independent* ε, so that where a pipeline stops can be published.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import numpy as np

from ._checks import check_choice, check_delta
from .fingerprint import canonical_json, sha256_hex
from .ledger_arguments import check_bool, check_description, check_seeds, check_str, mechanisms_per_unit
from .ledger_budget import BUDGET_BASES, BudgetExceededError, check_budget, target_per_unit
from .ledger_entry import (
    GENESIS_SHA256,
    LedgerEntry,
    LedgerFormatError,
    LedgerIntegrityError,
    UnitAnalysis,
    analyse_mechanism,
    check_assumptions,
    is_training_record,
    load_json,
    require_sha256,
)
from .ledger_evidence import CommittedEvidence
from .ledger_json import (
    LEDGER_TYPE,
    SCHEMA_VERSION,
    check_header,
    check_totals,
    constructor_arguments,
    installed_privfed_version,
    ledger_document,
    read_entries,
    read_provenance,
    software_versions,
)
from .ledger_totals import releases, spent_totals, training_composition, unit_report, units_of
from .mechanism import ANALYSES, UNITS, Mechanism, common_relations
from .noise_source import NoiseSource, noise_provenance_problem
from .observers import OBSERVERS, check_observer, check_observers
from .recompute import recompute_analysis
from .registry import mechanism_from_record, public_mechanism_from_record
from .report import PrivacyReport, replace_report

if TYPE_CHECKING:
    import dp_accounting

#: The ledger's names, as users import them; all but Ledger are defined beside it (ledger_budget, ledger_entry,
#: ledger_json) and kept importable from here.
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


def _now() -> str:
    """The current UTC time, to the second, as a ledger records it."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


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
        self.target_epsilon = target_per_unit(target_epsilon)
        self.delta = None if delta is None else check_delta(delta)
        if self.target_epsilon and self.delta is None:
            raise ValueError("delta is required with target_epsilon: the budget is an (ε, δ) guarantee; pass delta=")
        self.primary_unit = check_choice("primary_unit", primary_unit, UNITS)
        self.analysis = check_choice("analysis", analysis, ANALYSES)
        self.budget_basis = check_choice("budget_basis", budget_basis, BUDGET_BASES)
        self.seeds = check_seeds(seeds or {})
        self.public_data_sha256 = require_sha256(public_data_sha256, "public_data_sha256", nullable=True)
        self.description = check_str("description", description)
        self.created = _now()
        self.privfed_version = installed_privfed_version()
        self.software = software_versions()
        self.model_fingerprint: dict[str, Any] | None = None
        self.evidence_fingerprint: dict[str, Any] | None = None
        self.noise: dict[str, Any] | None = None
        self._entries: list[LedgerEntry] = []
        self._evidence = CommittedEvidence()

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
        return units_of(self._entries)

    def relations(self, unit: str | None = None, *, observer: str = "public") -> tuple[str, ...]:
        """The neighbouring relations (sorted names) that every release ``observer`` sees at ``unit`` level
        (default: the primary unit) and every DP training entry is analysed for, needing no δ: covered by both
        of :meth:`account`'s bounds, so by whichever it reports (its ``relations`` may name more).
        """
        unit = self.primary_unit if unit is None else check_choice("unit", unit, UNITS)
        observer = check_observer(observer)
        members = {entry.index: member for entry, member in
                   releases(self._entries, unit, observer) + training_composition(self._entries, unit, observer)}
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
        mechanisms = mechanisms_per_unit(mechanism, unit)
        note = check_str("note", note)
        derived_from_training = check_bool("derived_from_training", derived_from_training)
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
            arrays = member.evidence()
            if arrays:
                analyses[u] = dataclasses.replace(analyses[u], evidence_sha256=self._evidence.commit(arrays))
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
        description = check_str("description", description)
        if not description.strip():
            raise ValueError("description must say what was released without a guarantee, got an empty string")
        return self._append(kind="unaccounted", analyses={}, description=description, note=check_str("note", note),
                            derived_from_training=check_bool("derived_from_training", derived_from_training),
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
        mechanisms = mechanisms_per_unit(mechanism, None)
        analyses = {u: analyse_mechanism(m, evidence_sha256=None) for u, m in mechanisms.items()}
        for unit, analysis in analyses.items():
            if not is_training_record(analysis.record()):
                raise ValueError(f"mechanism must be DP training (DPSGD, or a composition of DPSGD runs) to be "
                                 f"recorded as training, got a {analysis.kind!r} mechanism at {unit} level; record a "
                                 "release with record()")
        return self._append(kind="training", analyses=analyses, description="", note=check_str("note", note),
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
            u: analyse_mechanism(m, evidence_sha256=None) for u, m in mechanisms_per_unit(mechanism, unit).items()
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
        check_budget(self._entries, analyses, target_epsilon=self.target_epsilon, delta=self.delta,
                     analysis=self.analysis, basis=self.budget_basis)

    # --- accounting (ledger_totals.py) -------------------------------------------------------------


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
        others = {other: unit_report(self._entries, other, delta, analysis, observer)
                  for other in self.units if other != unit}
        return replace_report(unit_report(self._entries, unit, delta, analysis, observer), other_units=others)

    def observer_table(self, delta: float | None = None, *, analysis: str = "tight") -> list[PrivacyReport]:
        """One report per observer and unit (observers, then units, in their canonical order).

        The rows of the "ε per observer" table of the model card and the audit.
        """
        return [self.account(delta, analysis=analysis, unit=unit, observer=observer)
                for observer in OBSERVERS for unit in (self.units or (self.primary_unit,))]

    # --- evidence ------------------------------------------------------------------------------
    def evidence(self) -> dict[str, np.ndarray]:
        """The private evidence of every entry, ready for ``np.savez``: keys ``"<sha256>/<name>"`` and
        ``"<sha256>#salt"``.

        Keep it away from the public ledger: give it only to auditors.
        """
        return self._evidence.export(self._entries)

    def mechanisms(self, unit: str | None = None) -> list[Mechanism]:
        """The mechanisms of every entry for ``unit`` (default: the primary unit), rebuilt with their evidence.

        Raises ``ValueError`` when a data-dependent entry's evidence is not attached
        (a ledger read from JSON without its evidence file).
        """
        unit = self.primary_unit if unit is None else check_choice("unit", unit, UNITS)
        rebuilt = []
        for entry, member in releases(self._entries, unit):
            arrays = None
            if member.evidence_sha256 is not None:
                arrays = self._evidence.arrays(member.evidence_sha256)
                if arrays is None:
                    raise ValueError(f"this ledger holds no evidence for entry {entry.index} ({unit}); pass evidence= "
                                     "to Ledger.from_json to rebuild its mechanism")
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
                arrays = None if member.evidence_sha256 is None else self._evidence.arrays(member.evidence_sha256)
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

    # --- JSON form (ledger_json.py) -----------------------------------------------------------------
    def totals(self, observer: str = "public", *,
               schema_version: int = SCHEMA_VERSION) -> dict[str, dict[str, Any]] | None:
        """The per-unit totals as the JSON records them (``spent``, or ``spent_by_observer[observer]``), for δ = the
        ledger's ``delta`` and its analysis; None without a δ. ``schema_version=1`` gives schema 1's totals (the
        accounted releases' ε where a release is uncovered)."""
        observer = check_observer(observer)
        if self.delta is None:
            return None
        return spent_totals(self._entries, self.delta, self.analysis, observer,
                            uncovered_is_infinite=schema_version >= 2)

    def to_dict(self) -> dict[str, Any]:
        """The ledger as a JSON-ready dictionary (schema: ``docs/ledger.md``); no private data."""
        return ledger_document(self)

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
        version = check_header(document)
        try:
            ledger = cls(**constructor_arguments(document))
        except LedgerFormatError:
            raise
        except (TypeError, ValueError) as error:
            raise LedgerFormatError(f"ledger: {error}") from None
        (ledger.created, ledger.privfed_version, ledger.software, ledger.model_fingerprint,
         ledger.evidence_fingerprint, ledger.noise) = read_provenance(document, version)
        ledger._entries = read_entries(document)
        check_totals(document, version, ledger._entries, delta=ledger.delta, analysis=ledger.analysis)
        if evidence is not None:
            ledger._evidence.attach(ledger._entries, evidence)
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
        from .interop import ledger_dp_event  # dp-accounting: only where its events are asked for

        return ledger_dp_event(self, unit=self.primary_unit if unit is None else unit, bound=bound, observer=observer)

    def record_dp_event(self, event: dp_accounting.DpEvent, *, description: str, unit: str = "example",
                        relation: str | None = None, observers: tuple[str, ...] = OBSERVERS) -> LedgerEntry:
        """Record a release described by a dp-accounting ``DpEvent`` (:class:`DpEventRelease`) as accounted."""
        from .dp_event_release import DpEventRelease

        return self.record(DpEventRelease(event, relation=relation, unit=unit), note=check_description(description),
                           observers=observers)

    def record_opacus(self, accountant: Any, *, description: str, unit: str = "example",
                      observers: tuple[str, ...] = OBSERVERS) -> LedgerEntry:
        """Record an Opacus accountant's history (σ, q, steps) as DP-SGD (:func:`~.interop.opacus_mechanism`)."""
        from .interop import opacus_mechanism

        return self.record(opacus_mechanism(accountant, unit=unit), note=check_description(description),
                           observers=observers)

    def record_flower(self, state_or_accountant: Any, *, description: str, unit: str = "party",
                      observers: tuple[str, ...] = OBSERVERS) -> LedgerEntry:
        """Record Flower's DP-FedAvg ``RdpAccountant`` (or its ``state_dict()``) at client level
        (:func:`~accounting.interop.flower_mechanism`)."""
        from .interop import flower_mechanism

        return self.record(flower_mechanism(state_or_accountant, unit=unit), note=check_description(description),
                           observers=observers)
