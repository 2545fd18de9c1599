"""One line of a privacy ledger: a release, analysed under one or more protected units.

A :class:`LedgerEntry` is immutable and self-contained: for every unit it was
analysed under it keeps the mechanism's kind and public parameters, the
neighbouring relation, the number of queries, whether the accounting is
data-dependent, and the RDP curves (orders and values) under both analyses, so
totals can be recomputed without the private data. The private data itself is
represented only by a salted sha256 commitment (:mod:`privfed.accounting.fingerprint`).

Entries are chained: each stores the sha256 of the previous entry, and its own
sha256 covers its whole content, so editing, dropping, inserting or reordering
an entry is detected when the ledger is read back.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

import numpy as np

from .documents import MAX_JSON_DEPTH, parse_json
from .fingerprint import canonical_json, sha256_hex
from .mechanism import ANALYSES, UNITS, Mechanism, relation_for_unit
from .observers import OBSERVERS, check_observers
from .orders import default_orders

__all__ = [
    "ENTRY_KINDS",
    "MAX_JSON_DEPTH",
    "GENESIS_SHA256",
    "Curve",
    "LedgerEntry",
    "LedgerFormatError",
    "LedgerIntegrityError",
    "UnitAnalysis",
    "TRAINING_KINDS",
    "analyse_mechanism",
    "check_assumptions",
    "is_training_record",
    "load_json",
]

#: ``"release"``: covered by a mechanism; ``"unaccounted"``: released with no DP guarantee;
#: ``"training"``: DP training of models that are not released themselves but that releases
#: marked ``derived_from_training`` are computed from (with public data only), e.g. DP-SGD of local models.
ENTRY_KINDS: tuple[str, ...] = ("release", "unaccounted", "training")
#: The ``previous_sha256`` of the first entry.
GENESIS_SHA256 = "0" * 64


class LedgerFormatError(ValueError):
    """A ledger document is malformed: a key is missing or a value has the wrong type or range."""


class LedgerIntegrityError(ValueError):
    """A well-formed ledger (or bundle) is inconsistent with itself, its evidence or its files."""


# --- reading JSON values with exact error messages ----------------------------------------------
def load_json(text: str | bytes, what: str) -> Any:
    """Parse untrusted JSON text; one :class:`LedgerFormatError` line for invalid JSON, a duplicate key or nesting
    deeper than :data:`MAX_JSON_DEPTH` (:func:`~privfed.accounting.documents.parse_json`)."""
    return parse_json(text, what, error=LedgerFormatError)


def require(document: Mapping[str, Any], key: str, path: str) -> Any:
    """``document[key]``, or a :class:`LedgerFormatError` naming the missing key and its place."""
    if not isinstance(document, Mapping):
        raise LedgerFormatError(f"{path} must be a JSON object, got {type(document).__name__}")
    if key not in document:
        raise LedgerFormatError(f"{path} is missing the required key {key!r} (present: {sorted(document)})")
    return document[key]


def require_type(value: Any, types: type | tuple[type, ...], path: str, what: str) -> Any:
    """``value`` if it is an instance of ``types`` (bools are not numbers), else a LedgerFormatError."""
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise LedgerFormatError(f"{path} must be {what}, got {value!r}")
    if not isinstance(value, types):
        raise LedgerFormatError(f"{path} must be {what}, got {value!r} of type {type(value).__name__}")
    return value


@overload
def require_sha256(value: Any, path: str, *, nullable: Literal[False] = False) -> str: ...
@overload
def require_sha256(value: Any, path: str, *, nullable: bool) -> str | None: ...
def require_sha256(value: Any, path: str, *, nullable: bool = False) -> str | None:
    """A 64-character lowercase hex digest (or None when ``nullable``)."""
    if value is None and nullable:
        return None
    if not (isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)):
        raise LedgerFormatError(f"{path} must be a sha256 hex digest (64 lowercase hex characters), got {value!r}")
    return value


def _encode_float(value: float) -> float | str:
    if math.isnan(value):
        raise ValueError("an RDP curve must not contain NaN")
    return "inf" if value == math.inf else value


def _decode_floats(values: Any, path: str) -> tuple[float, ...]:
    require_type(values, list, path, "a list of numbers (or the string 'inf')")
    decoded = []
    for i, value in enumerate(values):
        if value == "inf":
            decoded.append(math.inf)
        elif isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value):
            decoded.append(float(value))
        else:
            raise LedgerFormatError(f"{path}[{i}] must be a finite number or the string 'inf', got {value!r}")
    return tuple(decoded)


def to_json_value(value: Any, path: str) -> Any:
    """``value`` as plain JSON (numpy scalars and small arrays converted); refuses non-finite numbers."""
    if isinstance(value, Mapping):
        return {str(key): to_json_value(item, f"{path}.{key}") for key, item in value.items()}
    if isinstance(value, np.ndarray):
        return to_json_value(value.tolist(), path)
    if isinstance(value, (list, tuple)):
        return [to_json_value(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        if not math.isfinite(value):
            raise ValueError(f"{path} must be finite to be recorded in a ledger, got {value!r}")
        return float(value)
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"{path} must be JSON-serialisable, got {type(value).__name__}")


# --- the data model -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Curve:
    """A release's composed RDP curve at the orders of one analysis.

    ``rdp`` is the analysis' best bound (data-dependent when the mechanism is);
    ``rdp_data_independent`` holds whatever the private data.
    """

    orders: tuple[float, ...]
    rdp: tuple[float, ...]
    rdp_data_independent: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "orders": list(self.orders),
            "rdp": [_encode_float(v) for v in self.rdp],
            "rdp_data_independent": [_encode_float(v) for v in self.rdp_data_independent],
        }

    @classmethod
    def from_dict(cls, document: Mapping[str, Any], path: str) -> "Curve":
        orders = _decode_floats(require(document, "orders", path), f"{path}.orders")
        if not orders or any(a <= 1.0 or math.isinf(a) for a in orders):
            raise LedgerFormatError(f"{path}.orders must be a non-empty list of finite Rényi orders > 1")
        curve = cls(
            orders=orders,
            rdp=_decode_floats(require(document, "rdp", path), f"{path}.rdp"),
            rdp_data_independent=_decode_floats(
                require(document, "rdp_data_independent", path), f"{path}.rdp_data_independent"
            ),
        )
        for name in ("rdp", "rdp_data_independent"):
            if len(getattr(curve, name)) != len(orders):
                raise LedgerFormatError(
                    f"{path}.{name} has {len(getattr(curve, name))} values for {len(orders)} orders"
                )
        return curve


@dataclass(frozen=True)
class UnitAnalysis:
    """One release accounted under one protected unit.

    ``curves`` maps each analysis (``"tight"``, ``"classic"``) to its :class:`Curve`;
    an analysis the mechanism does not support is absent. ``evidence_sha256`` is
    the salted commitment to the mechanism's private evidence (``None`` when the
    mechanism has none).
    """

    kind: str
    unit: str
    relation: str
    parameters: Mapping[str, Any]
    num_queries: int
    data_dependent: bool
    pure_epsilon: float | None
    curves: Mapping[str, Curve]
    evidence_sha256: str | None

    def record(self) -> dict[str, Any]:
        """``{"kind", "unit", "parameters"}``, as :func:`privfed.accounting.registry.mechanism_from_record` expects."""
        return {"kind": self.kind, "unit": self.unit, "parameters": dict(self.parameters)}

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "unit": self.unit,
            "relation": self.relation,
            "parameters": dict(self.parameters),
            "num_queries": self.num_queries,
            "data_dependent": self.data_dependent,
            "pure_epsilon": self.pure_epsilon,
            "curves": {name: curve.to_dict() for name, curve in self.curves.items()},
            "evidence_sha256": self.evidence_sha256,
        }

    @classmethod
    def from_dict(cls, document: Mapping[str, Any], path: str) -> "UnitAnalysis":
        unit = require(document, "unit", path)
        if unit not in UNITS:
            raise LedgerFormatError(f"{path}.unit must be one of {UNITS}, got {unit!r}")
        curves_document = require_type(require(document, "curves", path), dict, f"{path}.curves", "an object")
        unknown = set(curves_document) - set(ANALYSES)
        if unknown or not curves_document:
            raise LedgerFormatError(
                f"{path}.curves must map one or more of {ANALYSES} to curves, got keys {sorted(curves_document)}"
            )
        pure_epsilon = require(document, "pure_epsilon", path)
        if pure_epsilon is not None:
            pure_epsilon = float(require_type(pure_epsilon, numbers.Real, f"{path}.pure_epsilon", "a number or null"))
        num_queries = require_type(require(document, "num_queries", path), int, f"{path}.num_queries", "an integer")
        if num_queries < 0:
            raise LedgerFormatError(f"{path}.num_queries must be >= 0, got {num_queries}")
        return cls(
            kind=require_type(require(document, "kind", path), str, f"{path}.kind", "a string"),
            unit=unit,
            relation=require_type(require(document, "relation", path), str, f"{path}.relation", "a string"),
            parameters=require_type(require(document, "parameters", path), dict, f"{path}.parameters", "an object"),
            num_queries=num_queries,
            data_dependent=require_type(
                require(document, "data_dependent", path), bool, f"{path}.data_dependent", "true or false"
            ),
            pure_epsilon=pure_epsilon,
            curves={
                name: Curve.from_dict(curves_document[name], f"{path}.curves.{name}")
                for name in ANALYSES
                if name in curves_document
            },
            evidence_sha256=require_sha256(
                require(document, "evidence_sha256", path), f"{path}.evidence_sha256", nullable=True
            ),
        )


def analyse_mechanism(mechanism: Mechanism, *, evidence_sha256: str | None) -> UnitAnalysis:
    """Compute what the ledger records about ``mechanism``: curves on each analysis' default grid.

    An analysis whose curve the mechanism cannot compute (``NotImplementedError``)
    is left out; every other error propagates.
    """
    curves = {}
    for analysis in ANALYSES:
        orders = default_orders(analysis)
        try:
            rdp = np.asarray(mechanism.rdp(orders, analysis=analysis), dtype=float)
            independent = np.asarray(mechanism.rdp_data_independent(orders, analysis=analysis), dtype=float)
        except NotImplementedError:
            continue
        for name, values in (("rdp", rdp), ("rdp_data_independent", independent)):
            if values.shape != orders.shape or np.isnan(values).any():
                raise ValueError(
                    f"{type(mechanism).__name__}.{name}() under the {analysis} analysis returned "
                    f"{values.shape[0] if values.ndim else 0} values (NaN: {bool(np.isnan(values).any())}) "
                    f"for {orders.size} orders; a ledger needs one non-NaN value per order"
                )
        curves[analysis] = Curve(
            orders=tuple(float(a) for a in orders),
            rdp=tuple(float(v) for v in rdp),
            rdp_data_independent=tuple(float(v) for v in independent),
        )
    if not curves:
        raise ValueError(f"{type(mechanism).__name__} supports neither the tight nor the classic analysis")
    pure_epsilon = mechanism.pure_epsilon()
    return UnitAnalysis(
        kind=mechanism.kind,
        unit=mechanism.unit,
        relation=relation_for_unit(mechanism.unit, mechanism.relations),
        parameters=to_json_value(mechanism.parameters(), f"{type(mechanism).__name__}.parameters()"),
        num_queries=int(mechanism.num_queries),
        data_dependent=bool(mechanism.data_dependent),
        pure_epsilon=None if pure_epsilon is None else float(pure_epsilon),
        curves=curves,
        evidence_sha256=evidence_sha256,
    )


@dataclass(frozen=True)
class LedgerEntry:
    """One release the model depends on.

    Attributes
    ----------
    index:
        Position in the ledger, from 0.
    kind:
        ``"release"`` (accounted by the mechanisms in ``analyses``),
        ``"unaccounted"`` (released with no DP guarantee; ``description`` says what) or
        ``"training"`` (DP training, e.g. DP-SGD, of models that releases are derived from;
        accounted by ``analyses``, but not itself a release of the model).
    analyses:
        Unit (``"example"``/``"party"``) → :class:`UnitAnalysis`; empty for unaccounted entries.
    derived_from_training:
        True when the release is computed only from the models of the ledger's
        ``"training"`` entries and public data, so that it is post-processing of that
        training and the training's ε covers it. In the JSON only when True (absent: False).
    observers:
        Who sees the release (:data:`~privfed.accounting.observers.OBSERVERS`): ``("public",
        "coordinator")`` for a published output (the coordinator computes it), ``("coordinator",)``
        for a message only the server receives, ``("public",)`` for what the public sees and the
        coordinator never does (a party's own model). In the JSON only when not both (absent: both).
    units:
        For an unaccounted entry, the units it leaves uncovered (``None``: every unit); e.g. a
        caveat on the example-level analysis only. In the JSON only when not ``None``.
    assumptions:
        What the entry's guarantee assumes beyond its analysis, one statement each (e.g. "the
        coordinator colludes with no party", "a trusted shuffler"); reports that compose the entry
        print them (:attr:`~privfed.accounting.report.PrivacyReport.assumptions`). The defaults every
        observer's ε assumes are stated in :mod:`~privfed.accounting.observers`. In the JSON only when
        not empty, so ledgers written before the field keep their content and hashes.
    description, note, recorded:
        What an unaccounted release was; a free-text note; the UTC time of recording (ISO 8601).
    previous_sha256, sha256:
        The chain: the previous entry's sha256 (:data:`GENESIS_SHA256` for the first)
        and the sha256 of this entry's canonical JSON without its own ``sha256``.
    """

    index: int
    kind: str
    analyses: Mapping[str, UnitAnalysis]
    description: str
    note: str
    recorded: str
    previous_sha256: str
    sha256: str
    derived_from_training: bool = False
    observers: tuple[str, ...] = OBSERVERS
    units: tuple[str, ...] | None = None
    assumptions: tuple[str, ...] = ()

    def seen_by(self, observer: str) -> bool:
        """Whether ``observer`` sees this release."""
        return observer in self.observers

    def leaves_uncovered(self, unit: str) -> bool:
        """Whether this unaccounted entry leaves ``unit``'s guarantee uncovered."""
        return self.kind == "unaccounted" and (self.units is None or unit in self.units)

    @classmethod
    def create(
        cls,
        *,
        index: int,
        kind: str,
        analyses: Mapping[str, UnitAnalysis],
        description: str,
        note: str,
        recorded: str,
        previous_sha256: str,
        derived_from_training: bool = False,
        observers: tuple[str, ...] = OBSERVERS,
        units: tuple[str, ...] | None = None,
        assumptions: tuple[str, ...] = (),
    ) -> "LedgerEntry":
        """Build an entry and seal it with its sha256."""
        unsealed = cls(index, kind, dict(analyses), description, note, recorded, previous_sha256, sha256="",
                       derived_from_training=derived_from_training, observers=check_observers(observers),
                       units=None if units is None else _check_units(units),
                       assumptions=check_assumptions(assumptions))
        return cls(**{**unsealed.__dict__, "sha256": unsealed.content_sha256()})

    def content_sha256(self) -> str:
        """sha256 of the canonical JSON of everything but ``sha256`` itself."""
        content = self.to_dict()
        del content["sha256"]
        return sha256_hex(canonical_json(content))

    def to_dict(self) -> dict[str, Any]:
        document = {
            "type": "privfed.ledger.entry",
            "index": self.index,
            "kind": self.kind,
            "description": self.description,
            "note": self.note,
            "recorded": self.recorded,
            "analyses": {unit: analysis.to_dict() for unit, analysis in self.analyses.items()},
            "previous_sha256": self.previous_sha256,
            "sha256": self.sha256,
        }
        if self.derived_from_training:  # absent when False: ledgers written before the key stay valid
            document["derived_from_training"] = True
        if self.observers != OBSERVERS:  # absent when both observers see it: older ledgers stay valid
            document["observers"] = list(self.observers)
        if self.units is not None:
            document["units"] = list(self.units)
        if self.assumptions:  # absent when none: ledgers written before the key stay valid
            document["assumptions"] = list(self.assumptions)
        return document

    @classmethod
    def from_dict(cls, document: Mapping[str, Any], path: str) -> "LedgerEntry":
        if require(document, "type", path) != "privfed.ledger.entry":
            raise LedgerFormatError(f"{path}.type must be 'privfed.ledger.entry', got {document['type']!r}")
        kind = require(document, "kind", path)
        if kind not in ENTRY_KINDS:
            raise LedgerFormatError(f"{path}.kind must be one of {ENTRY_KINDS}, got {kind!r}")
        analyses_document = require_type(require(document, "analyses", path), dict, f"{path}.analyses", "an object")
        analyses = {}
        for unit, analysis_document in analyses_document.items():
            analysis = UnitAnalysis.from_dict(analysis_document, f"{path}.analyses.{unit}")
            if analysis.unit != unit:
                raise LedgerFormatError(f"{path}.analyses.{unit}.unit is {analysis.unit!r}, not {unit!r}")
            analyses[unit] = analysis
        if (kind != "unaccounted") != bool(analyses):
            raise LedgerFormatError(
                f"{path}: a 'release' or 'training' entry needs at least one analysis and an 'unaccounted' entry "
                f"none; got kind {kind!r} with {len(analyses)}"
            )
        if kind == "training":
            for unit, analysis in analyses.items():
                if not is_training_record(analysis.record()):
                    raise LedgerFormatError(
                        f"{path}.analyses.{unit}: a 'training' entry must hold DP training (kind 'dpsgd' or a "
                        f"composition of them), got kind {analysis.kind!r}: a release relabelled as training would "
                        "leave every bound"
                    )
        derived = document.get("derived_from_training", False)
        if derived is not True and derived is not False or (derived and kind == "training"):
            raise LedgerFormatError(f"{path}.derived_from_training must be true (on a release or an unaccounted "
                                    f"entry) or absent, got {derived!r} on a {kind!r} entry")
        observers = document.get("observers", list(OBSERVERS))
        units = document.get("units")
        try:
            observers = check_observers(require_type(observers, list, f"{path}.observers", "a list"))
            if units is not None:
                if kind != "unaccounted":
                    raise ValueError(f"only an unaccounted entry may scope units, got units on a {kind!r} entry")
                units = _check_units(require_type(units, list, f"{path}.units", "a list"))
        except (TypeError, ValueError) as error:
            raise LedgerFormatError(f"{path}: {error}") from None
        if "observers" in document and observers == OBSERVERS:
            raise LedgerFormatError(f"{path}.observers must be absent when every observer sees the entry")
        assumptions = document.get("assumptions", [])
        try:
            assumptions = check_assumptions(require_type(assumptions, list, f"{path}.assumptions", "a list"))
        except (TypeError, ValueError) as error:
            raise LedgerFormatError(f"{path}: {error}") from None
        if "assumptions" in document and not assumptions:
            raise LedgerFormatError(f"{path}.assumptions must be absent when the entry states no assumption")
        return cls(
            index=require_type(require(document, "index", path), int, f"{path}.index", "an integer"),
            kind=kind,
            analyses=analyses,
            description=require_type(require(document, "description", path), str, f"{path}.description", "a string"),
            note=require_type(require(document, "note", path), str, f"{path}.note", "a string"),
            recorded=require_type(require(document, "recorded", path), str, f"{path}.recorded", "a string"),
            previous_sha256=require_sha256(require(document, "previous_sha256", path), f"{path}.previous_sha256"),
            sha256=require_sha256(require(document, "sha256", path), f"{path}.sha256"),
            derived_from_training=derived,
            observers=observers,
            units=units,
            assumptions=assumptions,
        )


def check_assumptions(assumptions: object) -> tuple[str, ...]:
    """``assumptions`` as a tuple of distinct non-empty one-line statements, in the order given."""
    if isinstance(assumptions, str) or not isinstance(assumptions, (list, tuple)):
        raise TypeError(f"assumptions must be a tuple of statements (strings), got {assumptions!r:.80}")
    for statement in assumptions:
        if not isinstance(statement, str) or not statement.strip() or "\n" in statement:
            raise ValueError(f"assumptions must hold non-empty one-line strings, got {statement!r:.80}")
    if len(set(assumptions)) != len(assumptions):
        raise ValueError(f"assumptions must state each assumption once, got {tuple(assumptions)!r:.120}")
    return tuple(assumptions)


def _check_units(units: object) -> tuple[str, ...]:
    """A non-empty, duplicate-free selection of :data:`UNITS`, in their canonical order."""
    if isinstance(units, str) or not isinstance(units, (list, tuple)):
        raise TypeError(f"units must be a tuple of units from {UNITS}, got {units!r}")
    if not units or len(set(units)) != len(units) or any(unit not in UNITS for unit in units):
        raise ValueError(f"units must name each of {UNITS} at most once and at least one, got {tuple(units)!r}")
    return tuple(unit for unit in UNITS if unit in units)


#: Mechanism kinds that are DP training of models (what a ``"training"`` entry may hold).
TRAINING_KINDS: tuple[str, ...] = ("dpsgd",)
_COMPOSITION_KINDS = ("parallel_composition", "sequential_composition")


def is_training_record(record: Mapping[str, Any]) -> bool:
    """Whether a mechanism record is DP training: a :data:`TRAINING_KINDS` kind, or a composition of them only."""
    kind = record.get("kind")
    if kind in TRAINING_KINDS:
        return True
    members = record.get("parameters", {}).get("members") if kind in _COMPOSITION_KINDS else None
    return isinstance(members, list) and bool(members) and all(
        isinstance(member, Mapping) and is_training_record(member) for member in members)


def sequence_of_entries(entries: Sequence[LedgerEntry]) -> tuple[LedgerEntry, ...]:
    """Check the chain of ``entries`` (indices, links, seals) and return them as a tuple.

    Raises
    ------
    LedgerIntegrityError
        With the first inconsistency found: an entry edited after it was sealed,
        or one removed, inserted or reordered.
    """
    previous = GENESIS_SHA256
    for position, entry in enumerate(entries):
        label = f"entry {position} ({entry.kind}{', ' + ', '.join(entry.analyses) if entry.analyses else ''})"
        if entry.content_sha256() != entry.sha256:
            raise LedgerIntegrityError(
                f"{label}: its content does not match its sha256 — the entry was edited after it was recorded"
            )
        if entry.index != position:
            raise LedgerIntegrityError(
                f"{label} carries index {entry.index}: an entry was removed, inserted or reordered before it"
            )
        if entry.previous_sha256 != previous:
            raise LedgerIntegrityError(
                f"{label}: its previous_sha256 does not match the sha256 of the entry before it — "
                "an entry was removed, inserted or reordered"
            )
        previous = entry.sha256
    return tuple(entries)
