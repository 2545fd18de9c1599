"""Claims files: a publication's privacy claim, written down for the audit (schema in ``docs/audit.md``).

:func:`load_claims` reads and validates one before anything is computed; :func:`claims_defaults` lists what the
file left to a default, which the ``claims file`` check prints. privfed's recomputation of the claim is
:mod:`privfed.audit.claims_recomputation`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from privfed.accounting._checks import check_delta
from privfed.accounting.documents import check_declared_work, not_a_file, parse_json, unknown_key_message
from privfed.accounting.mechanism import UNITS
from privfed.accounting.registry import checked_public_mechanism_from_record, defaulted_parameters
from privfed.audit.hygiene import SETTINGS, parse_protected_units
from privfed.audit.report import AuditInputError

__all__ = ["CLAIMS_TYPE", "claims_defaults", "load_claims"]

#: The ``type`` of every claims file.
CLAIMS_TYPE = "privfed.claims"
_CLAIMS_SCOPES = ("total", "per_round")
_CLAIMS_KEYS = ("type", "schema_version", "description", "source", "setting", "protected_units", "claim",
                "mechanisms", "unaccounted", "model")
_CLAIM_KEYS = ("epsilon", "delta", "unit", "scope", "rounds", "data_dependent", "max_moment", "clients_per_round")
_MODEL_KEYS = ("file", "sha256")
#: Largest claims file read: a claim and the few mechanisms of one publication.
MAX_CLAIMS_BYTES = 1 << 20
#: Most mechanisms a claims file may list: each is accounted alone and composed (a privacy-loss distribution each).
MAX_CLAIMS_MECHANISMS = 16
#: Largest ``claim.max_moment``: the publication's accountant is re-run on moments 1 … max_moment (papers use ≤ 256).
MAX_MOMENT = 1024


def _known_keys(table: Mapping[str, Any], valid: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in valid:
            raise AuditInputError(unknown_key_message(key, valid, where))


def load_claims(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate a claims file (JSON; schema in ``docs/audit.md``).

    Unknown keys (at the top level, in ``claim``, ``model``, and in each mechanism's
    record and parameters) are refused with the closest valid key: a misspelled
    optional parameter never falls back to its default. Each mechanism is rebuilt
    here, so that a claims file that loads is one the audit can recompute.

    Parameters
    ----------
    path:
        The claims file.

    Returns
    -------
    dict
        The claims document, as written (defaults are applied by the audit, not here).

    Raises
    ------
    AuditInputError
        The file is missing, unreadable, not JSON, or breaks the schema; the message names the key and its valid
        values.
    """
    path = Path(path)
    if not path.is_file():
        raise AuditInputError(f"claims file {str(path)!r} {not_a_file(path)}")
    try:
        size = path.stat().st_size
        if size > MAX_CLAIMS_BYTES:
            raise AuditInputError(f"claims file {str(path)!r} has {size} bytes; a claims file may have at most "
                                  f"{MAX_CLAIMS_BYTES}")
        text = path.read_bytes()
    except OSError as error:
        raise AuditInputError(f"claims file {str(path)!r} could not be read: {error.strerror or error}") from None
    # Duplicate keys, Infinity/NaN and nesting deeper than the ledger's limit are refused in one line.
    document = parse_json(text, f"claims file {str(path)!r}", error=AuditInputError, finite=True)
    where = f"claims file {path.name}"
    if not isinstance(document, dict) or document.get("type") != CLAIMS_TYPE:
        raise AuditInputError(f"{where}: 'type' must be {CLAIMS_TYPE!r}")
    # The work budget, from the declared sizes, before any mechanism is rebuilt or accounted.
    check_declared_work(document, where, error=AuditInputError)
    listed = document.get("mechanisms", [])
    if isinstance(listed, list) and len(listed) > MAX_CLAIMS_MECHANISMS:
        raise AuditInputError(f"{where}: 'mechanisms' lists {len(listed)} mechanisms; a claims file may list at most "
                              f"{MAX_CLAIMS_MECHANISMS} (state a repeated release once, with its count)")
    _known_keys(document, _CLAIMS_KEYS, where)
    if document.get("schema_version") != 1:
        raise AuditInputError(f"{where}: 'schema_version' must be 1, got {document.get('schema_version')!r}")
    claim = document.get("claim")
    if not isinstance(claim, dict):
        raise AuditInputError(f"{where}: 'claim' must be an object with epsilon, delta, unit")
    _known_keys(claim, _CLAIM_KEYS, f"{where}: claim")
    if claim.get("unit") not in UNITS:
        raise AuditInputError(f"{where}: claim.unit must be one of {UNITS}, got {claim.get('unit')!r}")
    epsilon = claim.get("epsilon")
    if epsilon is not None and (isinstance(epsilon, bool) or not isinstance(epsilon, (int, float))
                                or not math.isfinite(epsilon) or epsilon <= 0):
        raise AuditInputError(f"{where}: claim.epsilon must be a finite positive number or null, got {epsilon!r}")
    try:
        check_delta(claim.get("delta"), "claim.delta")
    except (TypeError, ValueError) as error:
        raise AuditInputError(f"{where}: {error}") from None
    scope = claim.get("scope", "total")
    if scope not in _CLAIMS_SCOPES:
        raise AuditInputError(f"{where}: claim.scope must be one of {_CLAIMS_SCOPES}, got {scope!r}")
    rounds = claim.get("rounds")
    if scope == "per_round" and (not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1):
        raise AuditInputError(f"{where}: a per_round claim needs claim.rounds, a positive integer; got {rounds!r}")
    if scope != "per_round" and rounds is not None:
        raise AuditInputError(f"{where}: claim.rounds applies to scope 'per_round' only, got scope {scope!r}")
    if not isinstance(claim.get("data_dependent", False), bool):
        raise AuditInputError(f"{where}: claim.data_dependent must be true or false, got {claim['data_dependent']!r}")
    if not isinstance(document.get("mechanisms", []), list) or not isinstance(document.get("unaccounted", []), list):
        raise AuditInputError(f"{where}: 'mechanisms' and 'unaccounted' must be lists")
    if document.get("setting", "unknown") not in SETTINGS:
        raise AuditInputError(f"{where}: 'setting' must be one of {SETTINGS}, got {document.get('setting')!r}")
    model = document.get("model")
    moment = claim.get("max_moment")
    if moment is not None and (isinstance(moment, bool) or not isinstance(moment, int)
                               or not 1 <= moment <= MAX_MOMENT):
        raise AuditInputError(f"{where}: claim.max_moment must be an integer in [1, {MAX_MOMENT}] (the largest moment "
                              f"λ of the publication's accountant) or absent, got {moment!r}")
    clients = claim.get("clients_per_round")
    if clients is not None and (isinstance(clients, bool) or not isinstance(clients, int) or clients < 1):
        raise AuditInputError(f"{where}: claim.clients_per_round must be a positive integer or absent, got {clients!r}")
    if model is not None and not isinstance(model, dict):
        raise AuditInputError(f"{where}: 'model' must be an object (file, sha256) or absent")
    _known_keys(model or {}, _MODEL_KEYS, f"{where}: model")
    parse_protected_units(document.get("protected_units"))
    for index, record in enumerate(document.get("mechanisms", [])):
        try:
            checked_public_mechanism_from_record(record, where=f"mechanisms[{index}]")
        except (ValueError, TypeError) as error:
            raise AuditInputError(f"{where}: {error}") from None
    return document


#: What a claims file may leave out, and the value the audit then uses.
_CLAIMS_DEFAULTS = {"setting": "unknown", "claim.scope": "total", "claim.data_dependent": False}


def claims_defaults(document: Mapping[str, Any]) -> dict[str, Any]:
    """Every value the audit of ``document`` takes from a default: the claim's and each mechanism's."""
    defaults = {name: value for name, value in _CLAIMS_DEFAULTS.items()
                if name.rpartition(".")[2] not in (document["claim"] if name.startswith("claim.") else document)}
    for index, record in enumerate(document.get("mechanisms", [])):
        defaults.update(defaulted_parameters(record, where=f"mechanisms[{index}]"))
    return defaults
