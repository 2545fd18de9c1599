"""A ledger's JSON form (schema: ``docs/ledger.md``): writing the document and reading one back, with every check.

:func:`ledger_document` writes what :meth:`~accounting.ledger.Ledger.to_dict` returns; reading goes through
:meth:`~accounting.ledger.Ledger.from_dict`, which calls, in this order, :func:`check_header` (type, schema
version, required keys), :func:`constructor_arguments`, :func:`read_provenance`, :func:`read_entries` (the
chain of entries, its length and head) and :func:`check_totals` (the recorded totals against the ones the
entries give). A malformed document raises :class:`~accounting.ledger_entry.LedgerFormatError`, an
inconsistent one :class:`~accounting.ledger_entry.LedgerIntegrityError`, each naming the key. Where the ledger
comes from, as the document records it: :func:`software_versions`, :func:`installed_privfed_version`.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any, NamedTuple

from .ledger_entry import (
    GENESIS_SHA256,
    LedgerEntry,
    LedgerFormatError,
    LedgerIntegrityError,
    require,
    require_sha256,
    require_type,
    sequence_of_entries,
)
from .ledger_totals import decode_epsilon, spent_totals
from .observers import OBSERVERS

__all__ = [
    "LEDGER_TYPE",
    "SCHEMA_VERSION",
    "Provenance",
    "check_header",
    "check_totals",
    "constructor_arguments",
    "installed_privfed_version",
    "ledger_document",
    "read_entries",
    "read_provenance",
    "software_versions",
]

LEDGER_TYPE = "privfed.ledger"
#: 2: ε per observer (``spent_by_observer``), entries' ``observers``/``units``, and ε = "inf" for a unit with a
#: release no mechanism covers (version 1 recorded the accounted releases' ε there). 3: ``noise``, where the noise
#: came from (:mod:`~privfed.accounting.noise_source`). Versions 1 and 2 are still read (their noise: not recorded).
SCHEMA_VERSION = 3

#: Distributions whose versions a ledger records (read from package metadata, never by importing them).
_TRACKED_DISTRIBUTIONS = ("numpy", "scipy", "dp-accounting", "torch", "scikit-learn", "xgboost", "skops", "safetensors")


def software_versions() -> dict[str, str | None]:
    """Python's version and the installed versions of the libraries a ledger depends on (None if absent)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in _TRACKED_DISTRIBUTIONS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def installed_privfed_version() -> str | None:
    """The installed privfed's version (None when it is not installed as a distribution)."""
    try:
        return metadata.version("privfed")
    except metadata.PackageNotFoundError:
        return None


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


class Provenance(NamedTuple):
    """Where a ledger read back comes from, as its document records it (the attributes of the same names,
    ``model`` and ``evidence`` being ``model_fingerprint`` and ``evidence_fingerprint``)."""

    created: str
    privfed_version: str | None
    software: dict[str, Any]
    model: dict[str, Any] | None
    evidence: dict[str, Any] | None
    noise: dict[str, Any] | None


def ledger_document(ledger: Any) -> dict[str, Any]:
    """The JSON-ready dictionary of a :class:`~accounting.ledger.Ledger` (typed ``Any``: this module sits below
    the ledger, which imports it); no private data."""
    delta = ledger.delta
    return {
        "type": LEDGER_TYPE,
        "schema_version": SCHEMA_VERSION,
        "privfed_version": ledger.privfed_version,
        "software": dict(ledger.software),
        "created": ledger.created,
        "description": ledger.description,
        "seeds": dict(ledger.seeds),
        "noise": None if ledger.noise is None else dict(ledger.noise),
        "public_data_sha256": ledger.public_data_sha256,
        "model": ledger.model_fingerprint,
        "evidence": ledger.evidence_fingerprint,
        "primary_unit": ledger.primary_unit,
        "analysis": ledger.analysis,
        "delta": delta,
        "budget": {"target_epsilon": dict(ledger.target_epsilon), "basis": ledger.budget_basis},
        "spent": ledger.totals("public"),
        "spent_by_observer": None if delta is None else {observer: ledger.totals(observer) for observer in OBSERVERS},
        "num_entries": len(ledger.entries),
        "head_sha256": _head(ledger.entries),
        "entries": [entry.to_dict() for entry in ledger.entries],
    }


def check_header(document: object) -> int:
    """The document's schema version, after checking its type, its version and that no required key is missing."""
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
    return version


def constructor_arguments(document: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``Ledger(...)`` the document records (the constructor checks their values)."""
    budget = require_type(document["budget"], dict, "ledger.budget", "an object")
    return {
        "target_epsilon": require_type(require(budget, "target_epsilon", "ledger.budget"), dict,
                                       "ledger.budget.target_epsilon", "an object") or None,
        "delta": document["delta"],
        "primary_unit": document["primary_unit"],
        "analysis": document["analysis"],
        "budget_basis": require(budget, "basis", "ledger.budget"),
        "seeds": require_type(document["seeds"], dict, "ledger.seeds", "an object"),
        "public_data_sha256": document["public_data_sha256"],
        "description": document["description"],
    }


def read_provenance(document: Mapping[str, Any], version: int) -> Provenance:
    """What the document records of where the ledger comes from; its noise is None before schema 3."""
    created = require_type(document["created"], str, "ledger.created", "a string")
    privfed_version = require_type(document["privfed_version"], (str, type(None)), "ledger.privfed_version",
                                   "a string or null")
    software = require_type(document["software"], dict, "ledger.software", "an object")
    model = require_type(document["model"], (dict, type(None)), "ledger.model", "an object or null")
    evidence = require_type(document["evidence"], (dict, type(None)), "ledger.evidence", "an object or null")
    noise = None
    if version >= 3:
        noise = require_type(require(document, "noise", "ledger"), (dict, type(None)), "ledger.noise",
                             "an object or null")
    return Provenance(created, privfed_version, software, model, evidence, noise)


def read_entries(document: Mapping[str, Any]) -> list[LedgerEntry]:
    """The document's entries, each checked, chained, and matching ``num_entries`` and ``head_sha256``."""
    entries = require_type(document["entries"], list, "ledger.entries", "a list")
    chain = list(sequence_of_entries(
        [LedgerEntry.from_dict(entry, f"ledger.entries[{i}]") for i, entry in enumerate(entries)]
    ))
    num_entries = require_type(document["num_entries"], int, "ledger.num_entries", "an integer")
    head = require_sha256(document["head_sha256"], "ledger.head_sha256")
    if num_entries != len(chain) or head != _head(chain):
        raise LedgerIntegrityError(
            f"ledger.num_entries is {num_entries} and ledger.head_sha256 names the last entry, "
            f"but the ledger holds {len(chain)} entries whose last does not match: "
            "entries were removed from or added at the end"
        )
    return chain


def check_totals(document: Mapping[str, Any], version: int, entries: Sequence[LedgerEntry], *,
                 delta: float | None, analysis: str) -> None:
    """Check the recorded ``spent`` (and, from schema 2, ``spent_by_observer``) against the totals ``entries``
    give at ``delta`` under ``analysis``."""
    recomputed: Mapping[str, dict[str, dict[str, Any]] | None] | None
    try:
        if delta is None:
            recomputed = {"public": None} if version == 1 else None
        elif version == 1:  # schema 1 recorded the accounted releases' ε where a release was uncovered
            recomputed = {"public": spent_totals(entries, delta, analysis, "public", uncovered_is_infinite=False)}
        else:
            recomputed = {observer: spent_totals(entries, delta, analysis, observer) for observer in OBSERVERS}
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


def _head(entries: Sequence[LedgerEntry]) -> str:
    """The sha256 the next entry chains to: the last entry's, or the genesis hash for no entry."""
    return entries[-1].sha256 if entries else GENESIS_SHA256


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
