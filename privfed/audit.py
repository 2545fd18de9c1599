"""Auditing a federated model and its privacy claims: ``privfed.audit(...)`` and ``privfed audit``.

Someone receives a model and its privacy claims and must decide whether to trust
them. Two kinds of input:

* a **privfed bundle** (:func:`privfed.save_bundle`): the claims are the bundle's
  ledger, optionally with the private ``evidence.npz``;
* a **foreign model** — a scikit-learn (skops), xgboost (UBJSON/JSON) or torch
  (safetensors) file — with a **claims file** (JSON; see ``docs/audit.md``) that
  states the mechanism, its parameters, the unit and the claimed (ε, δ). A claims
  file may also be audited alone, when the model itself is not available.

The audit runs, in order: integrity (the bundle's and the ledger's own
verification: schema, chain of entries, the model file's sha256, the evidence's
hash and commitments), recomputation (every entry's curves and ε rebuilt from its
recorded parameters with privfed's accountants, the totals from the entries; a
relative difference above 1e-9 fails), claim hygiene (:mod:`privfed.audit_hygiene`),
safe loading (only the bundle's safe formats; anything that would need unpickling
is refused, never executed) and, with labelled member and non-member samples, an
empirical lower bound on ε (:mod:`privfed.empirical`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from privfed.accounting._checks import check_delta
from privfed.accounting._dp_accounting import MAX_PLD_COMPOSITIONS
from privfed.accounting.account import account
from privfed.accounting.conversion import rdp_to_epsilon
from privfed.accounting.documents import parse_json, unknown_key_message
from privfed.accounting.fingerprint import commit_evidence, file_sha256, sha256_hex
from privfed.accounting.ledger import SCHEMA_VERSION, Ledger, LedgerFormatError, LedgerIntegrityError, decode_epsilon
from privfed.accounting.ledger_entry import UnitAnalysis, load_json
from privfed.accounting.mechanism import UNITS, Mechanism
from privfed.accounting.observers import OBSERVERS
from privfed.accounting.recompute import recompute_analysis
from privfed.accounting.registry import (
    checked_public_mechanism_from_record,
    defaulted_parameters,
    public_mechanism_from_record,
)
from privfed.accounting.report import PrivacyReport, round_up
from privfed.accounting.sequential import compose_repeated
from privfed.accounting.shuffling import ShuffledRandomizedResponse
from privfed.audit_hygiene import SETTINGS, Release, Statement, hygiene_checks
from privfed.audit_report import AuditInputError, AuditReport, Check
from privfed.bundle import (
    EVIDENCE_FILE,
    LEDGER_FILE,
    MODEL_CARD_FILE,
    SKOPS_TRUSTED_TYPES,
    BundleError,
    open_bundle_files,
    read_evidence,
)
from privfed.empirical import membership_epsilon_lower_bound, true_label_scores
from privfed.manifest import read_bundle_files, verify_manifest
from privfed.model_card import CARD_DATA_FILE, render_model_card

__all__ = ["CLAIMS_TYPE", "RTOL", "audit", "load_claims"]

#: Relative tolerance of every recomputation.
RTOL = 1e-9
_ATOL = 1e-12
CLAIMS_TYPE = "privfed.claims"
_CLAIMS_SCOPES = ("total", "per_round")

#: Model-file suffixes whose standard readers unpickle (and so can run code): always refused.
_PICKLE_SUFFIXES = (".pkl", ".pickle", ".joblib", ".pt", ".pth", ".ckpt", ".bin", ".sav", ".dill")
_FOREIGN_SUFFIXES = (".skops", ".ubj", ".json", ".safetensors")

_INTEGRITY_MEANING = "the file or record was changed after it was written, so its privacy claims cannot be trusted."
_RECOMPUTE_MEANING = ("privfed's own accountants, applied to the recorded or stated mechanism, give a different "
                      "(larger) privacy loss, so the figure is wrong, was edited, or rests on an analysis privfed "
                      "cannot confirm.")
_UNSAFE_MEANING = ("opening this file would require a format that can run arbitrary code (such as pickle); privfed "
                   "refuses to open it.")


# --- rebuilding mechanisms from public parameters ---------------------------------------------------
#: The parameter that counts a mechanism's own repetitions: scaled for a per-round claim instead of copying it.
_REPETITIONS = {"randomized_response": "reports", "dpsgd": "steps", "quantized_laplace_ensemble": "draws_per_example",
                "shuffled_randomized_response": "reports"}


def _over_rounds(record: Mapping[str, Any], rounds: int) -> dict[str, Any]:
    """``record`` repeated ``rounds`` times, as one record when its kind counts its own repetitions."""
    counter = _REPETITIONS.get(record.get("kind"))
    parameters = dict(record.get("parameters", {}))
    if counter is None or rounds == 1:
        return dict(record)
    parameters[counter] = int(parameters.get(counter, 1)) * rounds
    return {**record, "parameters": parameters}


def _close(recorded: float, recomputed: float) -> bool:
    if math.isinf(recorded) or math.isinf(recomputed):
        return recorded == recomputed
    return math.isclose(recorded, recomputed, rel_tol=RTOL, abs_tol=_ATOL)


def _fmt(value: float | None) -> str:
    return "none" if value is None else round_up(value)


# --- inputs -------------------------------------------------------------------------------------------
def _load_npz(path: Path) -> dict[str, np.ndarray]:
    """Arrays of an ``.npz`` read without pickle; ValueError when an array would need unpickling."""
    with np.load(path, allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}


def _samples(value: object, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(X, y) from an ``.npz`` with arrays ``X`` and ``y`` (read with allow_pickle=False) or an (X, y) pair."""
    if isinstance(value, (str, os.PathLike)):
        path = Path(value)
        if not path.is_file():
            raise AuditInputError(f"{name} file {str(path)!r} does not exist")
        if not zipfile.is_zipfile(path):
            raise AuditInputError(f"{name} file {str(path)!r} is not a NumPy .npz file (save X and y with "
                                  "numpy.savez)")
        try:
            arrays = _load_npz(path)
        except ValueError:
            raise AuditInputError(f"{name} file {str(path)!r} holds Python objects (an object array), not numeric "
                                  "arrays; privfed never unpickles: save X and y with numpy.savez") from None
        except (OSError, zipfile.BadZipFile, EOFError) as error:
            raise AuditInputError(f"{name} file {str(path)!r} is not a readable .npz: {error}") from None
        if not {"X", "y"} <= set(arrays):
            raise AuditInputError(f"{name} file {str(path)!r} must hold arrays 'X' and 'y', got {sorted(arrays)}")
        X, y = arrays["X"], arrays["y"]
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        X, y = np.asarray(value[0]), np.asarray(value[1])
    else:
        raise AuditInputError(f"{name} must be an .npz path or an (X, y) pair, got {type(value).__name__}")
    if X.ndim < 2 or y.ndim != 1 or len(X) != len(y):
        raise AuditInputError(
            f"{name} must hold X of shape (n, features...) and y of shape (n,), got {X.shape}, {y.shape}"
        )
    return X, y


def _protected_units(value: object) -> dict[str, int]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        items = dict(value)
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        items = {"*": int(value)}
    else:
        raise AuditInputError(f"protected_units must be a positive integer or a mapping unit → count, got {value!r}")
    for unit, count in items.items():
        if unit not in (*UNITS, "*"):
            raise AuditInputError(f"protected_units' unit must be one of {UNITS}, got {unit!r}")
        if not isinstance(count, (int, np.integer)) or isinstance(count, bool) or count < 1:
            raise AuditInputError(f"protected_units[{unit!r}] must be a positive integer, got {count!r}")
    return {unit: int(count) for unit, count in items.items()}


def _resolve_units(
    given: dict[str, int], headline: str, fallback: Mapping[str, int], source: str
) -> tuple[dict[str, int], str]:
    if given:
        counts = {headline: given["*"]} if "*" in given else given
        return counts, "given to the audit"
    return dict(fallback), source


# --- claims files -------------------------------------------------------------------------------------
_CLAIMS_KEYS = ("type", "schema_version", "description", "source", "setting", "protected_units", "claim",
                "mechanisms", "unaccounted", "model")
_CLAIM_KEYS = ("epsilon", "delta", "unit", "scope", "rounds", "data_dependent", "max_moment", "clients_per_round")
_MODEL_KEYS = ("file", "sha256")


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
    """
    path = Path(path)
    if not path.is_file():
        raise AuditInputError(f"claims file {str(path)!r} " + ("is a folder" if path.is_dir() else "does not exist"))
    try:
        text = path.read_bytes()
    except OSError as error:
        raise AuditInputError(f"claims file {str(path)!r} could not be read: {error.strerror or error}") from None
    # Duplicate keys, Infinity/NaN and nesting deeper than the ledger's limit are refused in one line.
    document = parse_json(text, f"claims file {str(path)!r}", error=AuditInputError, finite=True)
    where = f"claims file {path.name}"
    if not isinstance(document, dict) or document.get("type") != CLAIMS_TYPE:
        raise AuditInputError(f"{where}: 'type' must be {CLAIMS_TYPE!r}")
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
    if moment is not None and (isinstance(moment, bool) or not isinstance(moment, int) or moment < 1):
        raise AuditInputError(f"{where}: claim.max_moment must be a positive integer (the largest moment λ of the "
                              f"publication's accountant) or absent, got {moment!r}")
    clients = claim.get("clients_per_round")
    if clients is not None and (isinstance(clients, bool) or not isinstance(clients, int) or clients < 1):
        raise AuditInputError(f"{where}: claim.clients_per_round must be a positive integer or absent, got {clients!r}")
    if model is not None and not isinstance(model, dict):
        raise AuditInputError(f"{where}: 'model' must be an object (file, sha256) or absent")
    _known_keys(model or {}, _MODEL_KEYS, f"{where}: model")
    _protected_units(document.get("protected_units"))
    for index, record in enumerate(document.get("mechanisms", [])):
        try:
            checked_public_mechanism_from_record(record, where=f"mechanisms[{index}]")
        except (ValueError, TypeError) as error:
            raise AuditInputError(f"{where}: {error}") from None
    return document


#: What a claims file may leave out, and the value the audit then uses.
_CLAIMS_DEFAULTS = {"setting": "unknown", "claim.scope": "total", "claim.data_dependent": False}


def _claims_defaults(document: Mapping[str, Any]) -> dict[str, Any]:
    """Every value the audit of ``document`` takes from a default: the claim's and each mechanism's."""
    defaults = {name: value for name, value in _CLAIMS_DEFAULTS.items()
                if name.rpartition(".")[2] not in (document["claim"] if name.startswith("claim.") else document)}
    for index, record in enumerate(document.get("mechanisms", [])):
        defaults.update(defaulted_parameters(record, where=f"mechanisms[{index}]"))
    return defaults


def _shuffling_check(document: Mapping[str, Any], rounds: int | None, composed: PrivacyReport | None) -> list[Check]:
    """PrivateKT's three figures: the per-round LDP claim, a trusted shuffler's central ε, and ε without one.

    Only for a per-round claim of randomized response that states ``clients_per_round``.
    """
    claim = document["claim"]
    clients = claim.get("clients_per_round")  # checked by load_claims
    responses = [r for r in document.get("mechanisms", []) if r.get("kind") == "randomized_response"]
    if clients is None or rounds is None or len(responses) != 1 or composed is None:
        return []
    local, _ = public_mechanism_from_record(responses[0])
    delta = float(claim["delta"])
    one_round = ShuffledRandomizedResponse(local.epsilon_per_report, num_users=int(clients),
                                           num_classes=local.num_classes, unit=local.unit)
    if rounds <= MAX_PLD_COMPOSITIONS:
        shuffled = ShuffledRandomizedResponse(local.epsilon_per_report, num_users=int(clients),
                                              num_classes=local.num_classes, reports=rounds, unit=local.unit)
        over_rounds = f"{_fmt(min(shuffled.central_epsilon(delta), composed.epsilon))} over {rounds} rounds"
    else:  # the rounds' PLD has no closed form: bounded work
        over_rounds = (f"not computed over {rounds} rounds (more than {MAX_PLD_COMPOSITIONS} self-compositions; "
                       f"at most {_fmt(composed.epsilon)}, the unshuffled figure)")
    detail = (f"(1) claim: ε₀ = {_fmt(local.epsilon_per_report)} per round, local DP of each client's report; "
              f"(2) with a trusted shuffler of the {clients} clients' reports per round (Feldman–McMillan–Talwar "
              f"numerical bound; never above the unshuffled figure, of which it is post-processing): central "
              f"ε = {_fmt(min(one_round.central_epsilon(delta), local.pure_epsilon()))} per round, "
              f"{over_rounds}; "
              "(3) without one — neither the authors' "
              f"code nor privfed has a shuffler — ε = {_fmt(composed.epsilon)} over {rounds} rounds")
    return [Check("shuffling", "warn", detail,
                  "the paper's argument that the loss does not accumulate rests on model shuffling; only a trusted "
                  "shuffler gives the central figure, and it still composes over rounds.", "recomputation")]


def _queries_for(record: Mapping[str, Any], epsilon: float, delta: float) -> int | None:
    """The number of queries at which ``record``'s classic data-independent ε reaches ``epsilon`` (bisection)."""
    parameters = record.get("parameters", {})
    if "num_queries" not in parameters:
        return None

    def classic(queries: int) -> float:
        changed = {**record, "parameters": {**parameters, "num_queries": queries}}
        return account(
            public_mechanism_from_record(changed)[0], delta=delta, analysis="classic"
        ).epsilon_data_independent

    low, high = 1, 1
    while classic(high) < epsilon:
        low, high = high, high * 2
        if high > 10**7:
            return None
    while low < high:
        middle = (low + high) // 2
        low, high = (middle + 1, high) if classic(middle) < epsilon else (low, middle)
    return low


def _accountant_check(document: Mapping[str, Any], headline: PrivacyReport | None) -> list[Check]:
    """What the publication's own moments accountant (moments λ = 1 … max_moment) can print for the stated release.

    Its ε = min_λ (α(λ) + ln(1/δ))/λ is never below ln(1/δ)/max_moment, whatever
    the votes; and its data-independent ε for the stated queries is the figure a
    correct claim should not exceed.
    """
    claim = document["claim"]
    moment, epsilon = claim.get("max_moment"), claim.get("epsilon")
    if moment is None or epsilon is None or headline is None:
        return []
    delta = float(claim["delta"])
    floor = math.log(1.0 / delta) / moment
    records = [r for r in document.get("mechanisms", []) if r.get("unit") == claim["unit"]]
    classic = account([public_mechanism_from_record(r)[0] for r in records], delta=delta, analysis="classic",
                      orders=np.arange(2.0, moment + 2.0)).epsilon_data_independent
    implied = _queries_for(records[0], float(epsilon), delta) if len(records) == 1 else None
    detail = (f"the publication's {moment}-moment accountant gives data-independent ε = {_fmt(classic)} for the stated "
              f"release and privfed's tight analysis {_fmt(headline.epsilon)}")
    if implied is not None:
        detail += f"; ε = {epsilon:g} is what that accountant gives for about {implied} queries"
    if epsilon < floor * (1 - RTOL):
        return [Check("accountant floor", "warn",
                      f"FLAG: ε = {epsilon:g} is below ln(1/δ)/{moment} = {_fmt(floor)}, the smallest ε a "
                      f"{moment}-moment accountant can print at δ = {delta:g}: the stated analysis cannot have "
                      "produced it; " + detail,
                      "the number may still be a valid bound (see 'claimed ε'), but it does not come from the analysis "
                      "the publication names.", "recomputation")]
    status = "pass" if epsilon <= classic * (1 + 1e-2) else "warn"
    meaning = "" if status == "pass" else ("the claim is above the publication's own data-independent bound for the "
                                           "stated release: the release it describes was probably larger.")
    return [Check("accountant floor", status, detail, meaning, "recomputation")]


def _claims_statement(
    document: Mapping[str, Any], given_units: dict[str, int]
) -> tuple[Statement, dict[str, Any], list[Check]]:
    """The claim of a claims file, privfed's recomputation of it, and the recomputation checks."""
    claim = document["claim"]
    unit, delta, epsilon = claim["unit"], float(claim["delta"]), claim.get("epsilon")
    rounds = claim.get("rounds") if claim.get("scope", "total") == "per_round" else None
    mechanisms: dict[str, list[Mechanism]] = {}  # one round (the whole release for a total claim)
    composed: dict[str, list[Mechanism]] = {}  # over every round
    placeholders: set[str] = set()
    releases = []
    for index, record in enumerate(document.get("mechanisms", [])):
        try:
            mechanism, placeholder = public_mechanism_from_record(record)
            repeated = record if rounds is None else _over_rounds(record, rounds)
            over_rounds = [public_mechanism_from_record(repeated)[0]]
            if rounds is not None and repeated is record:  # no count of its own: composed in closed form
                over_rounds = [compose_repeated(over_rounds[0], rounds)]
        except (ValueError, TypeError, KeyError) as error:
            raise AuditInputError(f"claims file: mechanisms[{index}] cannot be rebuilt: {error}") from None
        mechanisms.setdefault(mechanism.unit, []).append(mechanism)
        composed.setdefault(mechanism.unit, []).extend(over_rounds)
        if placeholder:
            placeholders.add(mechanism.unit)
        releases.append(Release(mechanism.kind, mechanism.unit, sum(m.num_queries for m in over_rounds),
                                mechanism.data_dependent and not placeholder, mechanism.parameters()))

    def report_for(members: list[Mechanism], member_unit: str, analysis: str) -> PrivacyReport:
        report = account(members, delta=delta, analysis=analysis)
        if member_unit in placeholders:  # only the data-independent part of a placeholder rebuild means anything
            report = dataclasses.replace(report, epsilon=report.epsilon_data_independent, data_dependent=False)
        pure = [member.pure_epsilon() for member in members]
        if all(value is not None for value in pure) and sum(pure) < report.epsilon:
            # Basic composition of pure ε-DP releases holds at δ = 0, hence at any δ (e.g. one randomized response).
            report = dataclasses.replace(report, epsilon=float(sum(pure)), method="pure")
        return report

    reports = {u: report_for(ms, u, "tight") for u, ms in composed.items()}
    headline = reports.get(unit)
    name, section = "claimed ε", "recomputation"
    if headline is None:
        if epsilon is not None:
            check = Check(name, "fail", f"ε = {epsilon:g} is claimed at {unit} level but no {unit}-level mechanism is "
                          "stated: nothing supports the number", _RECOMPUTE_MEANING, section)
        else:
            check = Check(name, "warn", f"no ε is claimed and no {unit}-level mechanism is stated: no differential-"
                          "privacy guarantee", "nothing bounds what the model reveals about its training data.",
                          section)
    classic = None if headline is None else report_for(composed[unit], unit, "classic")
    if headline is not None:
        recomputed = (f"privfed: ε = {_fmt(headline.epsilon)} (tight, {headline.method.upper()}), "
                      f"{_fmt(classic.epsilon)} (classic) at δ = {delta:g}, {unit} level"
                      + (", data-independent (the private votes are not published)" if unit in placeholders else ""))
        if epsilon is None:
            check = Check(name, "warn", f"no ε is claimed; the stated mechanism gives {recomputed}",
                          "the publication states no overall privacy figure; privfed's number is the one to use.",
                          section)
        elif rounds is not None:
            one_round = report_for(mechanisms[unit], unit, "tight")
            status = "pass" if epsilon >= one_round.epsilon * (1 - RTOL) else "fail"
            check = Check(name, status, f"ε = {epsilon:g} per round; one round of the stated mechanism gives "
                          f"ε = {_fmt(one_round.epsilon)}; over {rounds} rounds {recomputed}",
                          _RECOMPUTE_MEANING if status == "fail" else "", section)
        elif epsilon >= headline.epsilon * (1 - RTOL):
            check = Check(name, "pass", f"ε = {epsilon:g} claimed; {recomputed}")
        else:
            check = Check(name, "fail", f"ε = {epsilon:g} claimed, but the stated mechanism gives {recomputed}: the "
                          "claim is smaller than privfed's bound", _RECOMPUTE_MEANING, section)
    fallback = _protected_units(document.get("protected_units"))
    counts, source = _resolve_units(given_units, unit, fallback, "from the claims file")
    statement = Statement(
        unit=unit, delta=delta, epsilon=None if epsilon is None else float(epsilon), reports=reports,
        releases=tuple(releases), unaccounted=tuple(str(u) for u in document.get("unaccounted", [])),
        setting=document.get("setting", "unknown"), protected_units=counts, protected_units_source=source,
        rounds=rounds, data_dependent_claim=bool(claim.get("data_dependent", False)),
    )
    stated = {"epsilon": epsilon, "delta": delta, "unit": unit, "scope": claim.get("scope", "total"),
              "source": "claims file", "recomputed_epsilon": None if headline is None else headline.epsilon,
              "recomputed_epsilon_classic": None if classic is None else classic.epsilon}
    return statement, stated, [check, *_accountant_check(document, headline),
                               *_shuffling_check(document, rounds, headline)]


# --- bundles: integrity -------------------------------------------------------------------------------
def _read_ledger(document: object) -> tuple[Ledger | None, list[Check]]:
    """The ledger read by its own verification (schema, then chain), with the totals left to :func:`_totals_check`."""
    if not isinstance(document, dict) or not isinstance(document.get("budget"), dict):
        return None, [Check("ledger schema", "fail", "ledger.json is not a privfed ledger object (with a budget)",
                            _INTEGRITY_MEANING, "integrity")]
    # The recorded totals are checked separately, so that an edited total is reported as such.
    untotalled = {**document, "delta": None, "spent": None, "budget": {**document["budget"], "target_epsilon": {}}}
    if "spent_by_observer" in document:
        untotalled["spent_by_observer"] = None
    try:
        ledger = Ledger.from_dict(untotalled)
        if document.get("delta") is not None:
            ledger.delta = check_delta(document["delta"], "ledger.delta")
    except LedgerFormatError as error:
        return None, [Check("ledger schema", "fail", str(error), _INTEGRITY_MEANING, "integrity")]
    except LedgerIntegrityError as error:
        return None, [Check("ledger schema", "pass", f"schema version {document.get('schema_version')}"),
                      Check("ledger chain", "fail", str(error), _INTEGRITY_MEANING, "integrity")]
    except (TypeError, ValueError) as error:
        return None, [Check("ledger schema", "fail", f"ledger: {error}", _INTEGRITY_MEANING, "integrity")]
    return ledger, [
        Check("ledger schema", "pass", f"privfed ledger, schema version {document['schema_version']}, "
              f"{len(ledger)} entries"),
        Check("ledger chain", "pass",
              "every entry's sha256 and link to the previous entry verified; count and head match"),
    ]


def _model_file_check(files: Mapping[str, bytes], ledger: Ledger) -> Check:
    fingerprint = ledger.model_fingerprint
    recorded_files = fingerprint.get("files") if isinstance(fingerprint, dict) else None
    if not isinstance(recorded_files, dict) or not recorded_files:
        return Check("model file", "fail", "the ledger records no model file: this is not a bundle's ledger",
                     _INTEGRITY_MEANING, "integrity")
    for name, recorded in recorded_files.items():
        if not isinstance(name, str) or Path(name).name != name:
            return Check("model file", "fail", f"the ledger names the model file {name!r}, not a plain file name",
                         _INTEGRITY_MEANING, "integrity")
        if name not in files:
            return Check("model file", "fail", f"{name} is recorded in the ledger but missing", _INTEGRITY_MEANING,
                         "integrity")
        actual = sha256_hex(files[name])
        if actual != recorded:
            return Check("model file", "fail", f"{name} has sha256 {actual[:16]}… but the ledger records "
                         f"{str(recorded)[:16]}…: the file was modified or replaced", _INTEGRITY_MEANING, "integrity")
    return Check("model file", "pass", f"sha256 of {', '.join(recorded_files)} matches the ledger")


def _evidence_arrays(
    files: Mapping[str, bytes], ledger: Ledger, evidence: object
) -> tuple[dict[str, dict[str, np.ndarray]], Check | None]:
    """Verified evidence per commitment, and the evidence check (None when there is nothing to say)."""
    committed = {m.evidence_sha256 for e in ledger.entries for m in e.analyses.values() if m.evidence_sha256}
    if evidence is not None:
        path = Path(evidence)
        if not path.is_file():
            raise AuditInputError(f"evidence file {str(path)!r} does not exist")
        origin, data = f"{path.name} (given)", path.read_bytes()
    elif ledger.evidence_fingerprint is not None:
        origin, data = f"{EVIDENCE_FILE} (in the bundle)", files.get(EVIDENCE_FILE)
        recorded = ledger.evidence_fingerprint.get("sha256")
        if data is None:
            return {}, Check("evidence", "fail", f"the ledger references {EVIDENCE_FILE} but it is missing",
                             _INTEGRITY_MEANING, "integrity")
        if sha256_hex(data) != recorded:
            return {}, Check("evidence", "fail", f"{EVIDENCE_FILE} does not match the sha256 the ledger records: "
                             "it was modified or replaced", _INTEGRITY_MEANING, "integrity")
    elif EVIDENCE_FILE in files:
        return {}, Check("evidence", "fail", f"{EVIDENCE_FILE} is present but the ledger does not reference it: it was "
                         "added", _INTEGRITY_MEANING, "integrity")
    elif committed:
        return {}, Check("evidence", "warn", f"not provided: the data-dependent curves of {len(committed)} analyses "
                         "could not be recomputed; their data-independent curves were",
                         "the smaller, data-dependent ε is taken on trust; the data-independent ε was checked and "
                         "holds whatever the training data.", "evidence")
    else:
        return {}, None
    try:
        arrays = read_evidence(data, what=origin)
    except BundleError as error:
        unsafe = "unpickling" in str(error)
        return {}, Check("evidence", "fail", f"{error}" + ("; not read" if unsafe else ""),
                         _UNSAFE_MEANING if unsafe else _INTEGRITY_MEANING, "safe-loading" if unsafe else "integrity")
    verified: dict[str, dict[str, np.ndarray]] = {}
    for commitment in sorted(committed):
        prefix = f"{commitment}/"
        own = {key[len(prefix):]: value for key, value in arrays.items() if key.startswith(prefix)}
        salt = arrays.get(f"{commitment}#salt")
        try:
            matches = salt is not None and commit_evidence(own, salt) == commitment
        except ValueError:
            matches = False
        if not matches:
            return {}, Check("evidence", "fail", f"{origin} does not match the ledger's commitment {commitment[:16]}…: "
                             "the evidence is missing, edited, or belongs to another ledger", _INTEGRITY_MEANING,
                             "integrity")
        verified[commitment] = own
    stray = sorted({key.split("/")[0].split("#")[0] for key in arrays} - committed)
    if stray:
        return {}, Check("evidence", "fail", f"{origin} holds arrays for {len(stray)} commitment(s) no entry "
                         "references: it belongs to another ledger", _INTEGRITY_MEANING, "integrity")
    return verified, Check("evidence", "pass", f"{origin} matches the ledger's {len(committed)} salted commitment(s)")


# --- bundles: recomputation -------------------------------------------------------------------------
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
        summary += f", {label} = {_fmt(fresh_eps)} (RDP, δ = {delta:g})"
    return problems, summary


def _entry_checks(ledger: Ledger, evidence: Mapping[str, dict[str, np.ndarray]]) -> list[Check]:
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
            checks.append(Check(name, "fail", "; ".join(problems), _RECOMPUTE_MEANING, "recomputation"))
        else:
            checks.append(Check(name, "pass", "; ".join(summaries)))
    return checks


def _totals_check(ledger: Ledger, document: dict[str, Any]) -> Check:
    """The recorded totals (``spent``, and ``spent_by_observer`` from schema 2 on) against the entries."""
    name = "recorded totals"
    version = document.get("schema_version", SCHEMA_VERSION)
    recorded_totals = [("public", document.get("spent"))]  # (observer, its recorded totals)
    if version >= 2:
        by_observer = document.get("spent_by_observer")
        recorded_totals += (list(by_observer.items()) if isinstance(by_observer, dict)
                            else [("coordinator", by_observer)])
    if ledger.delta is None:
        if any(value is not None for _, value in recorded_totals):
            return Check(name, "fail", "totals are recorded but the ledger states no δ", _RECOMPUTE_MEANING,
                         "recomputation")
        return Check(name, "pass", "no δ, so no totals are recorded")
    summaries = []
    for index, (observer, recorded) in enumerate(recorded_totals):
        if observer not in OBSERVERS:
            return Check(name, "fail", f"the ledger records totals for an unknown observer {observer!r}",
                         _RECOMPUTE_MEANING, "recomputation")
        if not isinstance(recorded, dict) or sorted(recorded) != sorted(ledger.units):
            listed = sorted(recorded) if isinstance(recorded, dict) else recorded
            return Check(name, "fail", f"the ledger records {observer} totals for {listed} but its entries cover "
                         f"{list(ledger.units)}", _RECOMPUTE_MEANING, "recomputation")
        fresh_totals = ledger.totals(observer, schema_version=version)
        for unit in ledger.units:
            for key in ("epsilon", "epsilon_data_independent"):
                value = decode_epsilon(recorded[unit].get(key)) if isinstance(recorded[unit], dict) else None
                fresh = decode_epsilon(fresh_totals[unit][key])
                if value is None or not (value == fresh or _close(value, fresh)):
                    shown = recorded[unit].get(key) if isinstance(recorded[unit], dict) else None
                    return Check(name, "fail", f"{unit}-level {key.replace('_', ' ')} against the {observer} is "
                                 f"recorded as {shown!r} but the entries give {fresh!r} ({ledger.analysis} analysis, "
                                 f"δ = {ledger.delta:g})", _RECOMPUTE_MEANING, "recomputation")
            epsilon = decode_epsilon(fresh_totals[unit]["epsilon"])
            if index > 0 or version < 2:  # the observer × unit table (schema 2: spent repeats the public)
                summaries.append(f"{observer}, {unit}: ε = {_fmt(epsilon)}"
                                 + (" (data-dependent)" if fresh_totals[unit]["data_dependent"] else ""))
    return Check(name, "pass", f"recomputed from the entries ({ledger.analysis} analysis, δ = {ledger.delta:g}): "
                 + "; ".join(summaries))


def _ledger_statement(
    ledger: Ledger, recorded: object, given_units: dict[str, int]
) -> tuple[Statement, dict[str, Any]]:
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
    counts, source = _resolve_units(given_units, unit, fallback, "from the ledger's description")
    federated = "party" in units or parties is not None or "federat" in ledger.description.lower()
    statement = Statement(
        unit=unit, delta=ledger.delta, epsilon=stated, reports=reports, releases=releases,
        unaccounted=ledger.unaccounted, setting="federated" if federated else "unknown",
        protected_units=counts, protected_units_source=source,
    )
    claim = {"epsilon": stated, "delta": ledger.delta, "unit": unit, "analysis": ledger.analysis,
             "source": "ledger.json (spent)", "other_units": {u: r.epsilon for u, r in reports.items() if u != unit}}
    return statement, claim


# --- safe loading -------------------------------------------------------------------------------------
def _load_bundle_model(files: Mapping[str, bytes], ledger: Ledger, *, module: Any,
                       model_class: type | None) -> tuple[Any, Check]:
    family = (ledger.model_fingerprint or {}).get("family")
    if family == "torch-module" and module is None:
        import safetensors.numpy

        try:
            tensors = safetensors.numpy.load(files["model.safetensors"])
        except Exception as error:  # safetensors' own error for a truncated or foreign file
            return None, Check("safe loading", "fail", f"model.safetensors is not a readable safetensors file: "
                               f"{type(error).__name__}", _INTEGRITY_MEANING, "safe-loading")
        return None, Check("safe loading", "warn", f"model.safetensors read safely ({len(tensors)} tensors), but the "
                           "model is a plain torch module: its architecture is needed to run it (Python: "
                           "privfed.audit(..., module=...))", "the tensors are safe, but the empirical check needs the "
                           "model's code, which a bundle never ships.", "safe-loading")
    try:
        model, _ = open_bundle_files(files, module=module, model_class=model_class)
    except BundleError as error:
        return None, Check("safe loading", "fail", f"refused: {error}", _UNSAFE_MEANING, "safe-loading")
    except (LedgerFormatError, LedgerIntegrityError) as error:
        return None, Check("safe loading", "fail", f"load_bundle refused the bundle: {error}", _INTEGRITY_MEANING,
                           "integrity")
    return model, Check("safe loading", "pass", f"{type(model).__name__} loaded from {family} files without unpickling")


def _load_foreign_model(path: Path, *, module: Any) -> tuple[Any, Check]:
    """The foreign model read by its suffix's safe reader; a failed check (never a traceback) when unreadable."""
    try:
        return _read_foreign_model(path, module=module)
    except Exception as error:  # each reader's own error for a corrupt, truncated or mislabelled file
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return None, Check("safe loading", "fail", f"{path.name} is not a readable {path.suffix} model: "
                           f"{type(error).__name__}{': ' + message if message else ''}", _INTEGRITY_MEANING,
                           "safe-loading")


def _read_foreign_model(path: Path, *, module: Any) -> tuple[Any, Check]:
    suffix = path.suffix.lower()
    if suffix in _PICKLE_SUFFIXES:
        return None, Check("safe loading", "fail", f"refused: {path.name} is a {suffix} file, which is read by "
                           "unpickling (it can run code when opened); not opened", _UNSAFE_MEANING, "safe-loading")
    if suffix not in _FOREIGN_SUFFIXES:
        return None, Check("safe loading", "fail", f"refused: {path.name} is not in a format privfed reads safely "
                           f"({', '.join(_FOREIGN_SUFFIXES)})", _UNSAFE_MEANING, "safe-loading")
    if suffix == ".skops":
        import skops.io

        untrusted = skops.io.get_untrusted_types(file=path)
        refused = sorted(set(untrusted) - set(SKOPS_TRUSTED_TYPES))
        if refused:
            return None, Check("safe loading", "fail", f"refused: {path.name} needs types outside privfed's trusted "
                               f"list: {refused}", _UNSAFE_MEANING, "safe-loading")
        model = skops.io.load(path, trusted=list(untrusted))
        return model, Check("safe loading", "pass", f"{type(model).__name__} loaded with skops and a trusted-type list")
    if suffix in (".ubj", ".json"):
        import xgboost

        model = xgboost.XGBClassifier()
        try:
            model.load_model(os.fspath(path))
        except (xgboost.core.XGBoostError, ValueError) as error:
            return None, Check("safe loading", "fail", f"{path.name} is not a readable xgboost model: "
                               f"{str(error).splitlines()[0]}", _INTEGRITY_MEANING, "safe-loading")
        return model, Check("safe loading", "pass", "XGBClassifier loaded from xgboost's own model format")
    import safetensors.numpy

    tensors = safetensors.numpy.load_file(os.fspath(path))
    if module is None:
        return None, Check("safe loading", "warn", f"{path.name} read safely ({len(tensors)} tensors); the module's "
                           "architecture is needed to run it (Python: privfed.audit(..., module=...))",
                           "the tensors are safe, but the empirical check needs the model's code.", "safe-loading")
    import safetensors.torch

    safetensors.torch.load_model(module, os.fspath(path), strict=True)
    return module, Check("safe loading", "pass", f"{type(module).__name__} filled from safetensors")


def _foreign_model_file_check(path: Path, document: Mapping[str, Any]) -> Check:
    pinned = (document.get("model") or {}).get("sha256")
    actual = file_sha256(path)
    if pinned is None:
        return Check("model file", "warn", f"{path.name}: sha256 {actual[:16]}…; the claims file does not pin it",
                     "nothing ties these claims to this particular model file.", "integrity")
    if actual != pinned:
        return Check("model file", "fail", f"{path.name} has sha256 {actual[:16]}… but the claims file pins "
                     f"{str(pinned)[:16]}…", _INTEGRITY_MEANING, "integrity")
    return Check("model file", "pass", f"sha256 of {path.name} matches the claims file")


# --- the empirical check ----------------------------------------------------------------------------
def _empirical_check(model: Any, samples: tuple[tuple[np.ndarray, np.ndarray], ...], *, claimed: float | None,
                     delta: float | None, confidence: float,
                     random_state: int | None) -> tuple[Check, dict[str, Any] | None]:
    name = "membership inference"
    if model is None:
        return Check(name, "warn", "not run: the model could not be loaded safely",
                     "no empirical evidence either way.", "empirical"), None
    (X_in, y_in), (X_out, y_out) = samples
    bound = membership_epsilon_lower_bound(
        true_label_scores(model, X_in, y_in), true_label_scores(model, X_out, y_out),
        delta=0.0 if delta is None else delta, confidence=confidence, random_state=random_state,
    )
    lo_t, hi_t = bound.tpr_interval
    lo_f, hi_f = bound.fpr_interval
    detail = (f"loss-threshold attack: TPR = {bound.tpr:.3f} [{lo_t:.3f}, {hi_t:.3f}], FPR = {bound.fpr:.3f} "
              f"[{lo_f:.3f}, {hi_f:.3f}] on {bound.members_evaluated} + {bound.non_members_evaluated} "
              "held-out samples; "
              f"ε ≥ {math.floor(bound.epsilon_lower * 1000) / 1000:.3f} (rounded down: a lower bound) with "
              f"{confidence:.0%} confidence; claimed ε = {_fmt(claimed)}")
    result = {**bound.to_dict(), "claimed_epsilon": claimed}
    if claimed is None:
        return Check(name, "warn", detail, "there is no claimed ε to compare the measured leakage with.",
                     "empirical"), result
    if bound.epsilon_lower > claimed:
        return Check(name, "fail", detail + ": the measured leakage exceeds the claim",
                     "an attack on the model itself shows more leakage than the claimed ε allows, so the claim is "
                     "false (or the samples are not from one distribution).", "empirical"), result
    return Check(name, "pass", detail), result


# --- the audit ----------------------------------------------------------------------------------------
def audit(
    target: str | os.PathLike[str] | None = None,
    *,
    claims: str | os.PathLike[str] | None = None,
    evidence: str | os.PathLike[str] | None = None,
    members: object = None,
    non_members: object = None,
    protected_units: int | Mapping[str, int] | None = None,
    module: Any = None,
    model_class: type | None = None,
    confidence: float = 0.95,
    random_state: int | None = 0,
    public_key: Any = None,
    signature: str | os.PathLike[str] | None = None,
) -> AuditReport:
    """Audit a model's privacy claims; returns the verdict table.

    Parameters
    ----------
    target:
        A privfed bundle directory, or a foreign model file (``.skops``, xgboost
        ``.ubj``/``.json``, ``.safetensors``) audited against ``claims``. May be
        omitted with ``claims`` to audit the claims alone.
    claims:
        A claims file (JSON, ``docs/audit.md``) for a foreign model.
    evidence:
        An ``evidence.npz`` for a bundle (default: the bundle's own, if it ships one):
        data-dependent entries are then recomputed from the raw votes.
    members, non_members:
        Labelled samples that were and were not in the training data (``.npz`` with
        ``X`` and ``y``, read without pickle, or ``(X, y)`` pairs): runs the
        membership-inference lower bound. Give both or neither.
    protected_units:
        How many protected units the data holds, for the δ < 1/n check: an integer
        (for the claim's unit) or a mapping unit → count. Default: the claims file's
        ``protected_units``, or for a ledger the number of parties its description
        states.
    module, model_class:
        For torch models: the module to load a state dict into, or the safe-state class.
    confidence:
        Confidence of the empirical bound (default 0.95).
    random_state:
        Seed of the empirical check's split.
    public_key:
        For a bundle: the publisher's Ed25519 public key (PEM path, bytes or key
        object). The bundle must then carry a valid signature by it ("signed by
        …"); without it the verdict is "unsigned: integrity only against accidents".
        An elliptic-curve public key (PEM path) checks the OpenSSF model-signing
        signature instead (:mod:`privfed.model_signature`): every file of the bundle
        against ``signature`` (default: ``BUNDLE.sig`` beside the folder).
    signature:
        The model-signing signature file, with an elliptic-curve ``public_key``.

    Returns
    -------
    AuditReport
        ``report.exit_code`` is 0 when nothing failed, 1 otherwise.

    Raises
    ------
    AuditInputError
        The input cannot be audited at all (missing files, not a bundle, a malformed claims file).
    """
    if target is None and claims is None:
        raise AuditInputError("give a bundle, a model file with claims, or a claims file")
    if (members is None) != (non_members is None):
        raise AuditInputError("members and non_members go together: give both sample files or neither")
    if not 0.0 < confidence < 1.0:
        raise AuditInputError(f"confidence must be in (0, 1), got {confidence!r}")
    given_units = _protected_units(protected_units)
    samples = None if members is None else (_samples(members, "members"), _samples(non_members, "non-members"))
    path = None if target is None else Path(target)
    if path is not None and path.is_dir():
        if claims is not None:
            raise AuditInputError("a bundle carries its own claims (its ledger); --claims is for foreign models")
        return _audit_bundle(path, evidence=evidence, samples=samples,
                             given_units=given_units, module=module, model_class=model_class,
                             confidence=confidence, random_state=random_state, public_key=public_key,
                             signature=signature)
    if path is not None and not path.exists():
        raise AuditInputError(f"{str(path)!r} does not exist (give a bundle folder or a model file)")
    if path is not None and not path.is_file():
        raise AuditInputError(f"{str(path)!r} is neither a bundle directory nor a model file")
    if claims is None:
        raise AuditInputError(f"{path.name} is not a privfed bundle; a foreign model needs a claims file (--claims)")
    if evidence is not None:
        raise AuditInputError("evidence applies to privfed bundles, not to a foreign model with a claims file")
    return _audit_claims(path, Path(claims), samples=samples, given_units=given_units,
                         module=module, confidence=confidence, random_state=random_state)


def _manifest_check(files: Mapping[str, bytes], directory: Path) -> tuple[Check, str | None]:
    try:
        digest = verify_manifest(files, where=str(directory))
    except BundleError as error:
        return Check("bundle manifest", "fail", str(error), _INTEGRITY_MEANING, "integrity"), None
    listed = len(files) - sum(name in files for name in ("MANIFEST.json", "SIGNATURE.json"))
    return Check("bundle manifest", "pass", f"all {listed} files match MANIFEST.json, nothing else in the folder; "
                 f"bundle digest {digest}"), digest


def _signature_check(files: Mapping[str, bytes], public_key: Any, directory: Path,
                     signature: str | os.PathLike[str] | None = None) -> Check:
    from privfed.model_signature_verify import is_elliptic_curve_key, model_signing_verdict
    from privfed.signing import signature_verdict

    if signature is not None and (public_key is None or not is_elliptic_curve_key(public_key)):
        raise AuditInputError("signature is the OpenSSF model-signing signature file: give it with the publisher's "
                              "elliptic-curve public key (public_key= / --public-key)")
    try:
        if public_key is not None and is_elliptic_curve_key(public_key):
            verdict = model_signing_verdict(directory, public_key, signature=signature,
                                            manifest=files.get("MANIFEST.json"))
        else:
            verdict = signature_verdict(files, public_key)
    except (ValueError, TypeError, BundleError) as error:
        raise AuditInputError(str(error)) from None
    if verdict.status == "signed":
        return Check("signature", "pass", verdict.detail)
    if verdict.status == "invalid":
        return Check("signature", "fail", verdict.detail, "the bundle is not what the key holder signed.", "integrity")
    return Check("signature", "warn", verdict.detail,
                 "hashes catch accidents; without a signature checked against the publisher's key (or a digest "
                 "published through a trusted channel) anyone who can edit the folder can rewrite every file.",
                 "integrity")


def _budget_check(ledger: Ledger, document: Mapping[str, Any]) -> Check | None:
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
        lines.append(f"{unit}: ε = {_fmt(spent)} ({basis.replace('_', '-')}) of a target {target:g}")
        if spent > target * (1 + RTOL):
            over.append(unit)
    if not lines:
        return None
    if over:
        return Check("budget", "fail", "over its own budget: " + "; ".join(lines),
                     "the model spent more privacy than the budget it records, so the budget was not enforced.",
                     "recomputation")
    return Check("budget", "pass", "within the recorded budget: " + "; ".join(lines))


def _card_check(files: Mapping[str, bytes]) -> Check:
    name = "model card"
    if MODEL_CARD_FILE not in files or CARD_DATA_FILE not in files:
        missing = [f for f in (MODEL_CARD_FILE, CARD_DATA_FILE) if f not in files]
        return Check(name, "warn", f"{', '.join(missing)} absent: the card cannot be compared with the ledger",
                     "readers have no human-readable statement of the guarantee, or one privfed cannot check.", "card")
    try:
        ledger = Ledger.from_json(files[LEDGER_FILE])
        card = load_json(files[CARD_DATA_FILE], CARD_DATA_FILE)
        expected = render_model_card(ledger, card=card)
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        return Check(name, "warn",
                     f"not compared: {str(error).splitlines()[0] if str(error) else type(error).__name__}",
                     "the ledger or card data failed their own checks above.", "card")
    if files[MODEL_CARD_FILE] == expected.encode():
        return Check(name, "pass", f"{MODEL_CARD_FILE} is exactly the rendering of the ledger and {CARD_DATA_FILE}")
    from privfed.accounting.ledger import _privfed_version

    if ledger.privfed_version != _privfed_version():
        return Check(name, "warn", f"{MODEL_CARD_FILE} differs from this privfed's rendering of the ledger (written by "
                     f"privfed {ledger.privfed_version})", "the card may have been edited, or rendered by another "
                     "version: trust the ledger's numbers, not the card's.", "card")
    return Check(name, "fail", f"{MODEL_CARD_FILE} differs from the rendering of the ledger and {CARD_DATA_FILE}: the "
                 "card says something the ledger does not", "the human-readable card was edited after the bundle was "
                 "written: its numbers cannot be trusted.", "card")


def _statement_check(files: Mapping[str, bytes]) -> Check | None:
    """The card's privacy statement against the one the ledger gives now (None when there is no card)."""
    from privfed.privacy_statement import card_statement, render_privacy_statement

    if MODEL_CARD_FILE not in files:
        return None
    name, meaning = "privacy statement", "readers of the card would be told a guarantee the ledger does not give."
    try:
        stated = card_statement(files[MODEL_CARD_FILE].decode("utf-8"))
        ledger = Ledger.from_json(files[LEDGER_FILE])
        expected = render_privacy_statement(ledger)
    except (ValueError, TypeError, KeyError, AttributeError, UnicodeDecodeError) as error:
        return Check(name, "warn", f"not compared: {str(error).splitlines()[0] if str(error) else type(error)}",
                     "the ledger or card failed their own checks above.", "card")
    if stated is None:
        return Check(name, "warn", f"{MODEL_CARD_FILE} has no privacy statement (written by privfed "
                     f"{ledger.privfed_version})", "readers have no standard statement of the guarantee.", "card")
    if stated.rstrip() == expected.rstrip():
        return Check(name, "pass", "the card's privacy statement (How to DP-fy ML checklist) matches the ledger: "
                     "unit, relation, ε and δ, accounting, what is not covered")
    from privfed.accounting.ledger import _privfed_version

    if ledger.privfed_version != _privfed_version():
        return Check(name, "warn", f"the privacy statement in {MODEL_CARD_FILE} differs from this privfed's (the "
                     f"ledger was written by privfed {ledger.privfed_version})", meaning, "card")
    return Check(name, "fail", f"the privacy statement in {MODEL_CARD_FILE} differs from the one the ledger gives",
                 meaning, "card")


def _audit_bundle(directory: Path, *, evidence, samples, given_units, module, model_class,
                  confidence, random_state, public_key=None, signature=None) -> AuditReport:
    try:
        files = read_bundle_files(directory)
    except BundleError as error:
        raise AuditInputError(str(error)) from None
    if LEDGER_FILE not in files:
        raise AuditInputError(f"{directory} is not a privfed bundle: it has no {LEDGER_FILE}")
    manifest, digest = _manifest_check(files, directory)
    signature_check = _signature_check(files, public_key, directory, signature)
    checks = [manifest, signature_check]
    if public_key is not None and signature_check.status == "fail":
        # The publisher's key says the bundle is not what was signed: nothing in it is recomputed (a forged ledger
        # could ask for any amount of work), and nothing is loaded.
        return AuditReport(str(directory), (*checks, Check(
            "recomputation", "warn", "not attempted: the signature does not verify, so the ledger was not read",
            "nothing in an unsigned or forged bundle is worth recomputing; use the publisher's signed bundle.",
            "integrity")))
    try:
        document = load_json(files[LEDGER_FILE], LEDGER_FILE)
    except LedgerFormatError as error:
        return AuditReport(str(directory), (*checks, Check("ledger schema", "fail", str(error), _INTEGRITY_MEANING,
                                                           "integrity")))
    ledger, ledger_checks = _read_ledger(document)
    checks += ledger_checks
    if ledger is None:
        return AuditReport(str(directory), tuple(checks))
    checks.append(_model_file_check(files, ledger))
    verified, evidence_check = _evidence_arrays(files, ledger, evidence)
    if evidence_check is not None:
        checks.append(evidence_check)
    checks += _entry_checks(ledger, verified)
    try:  # totals are recomputed from untrusted parameters: a malformed entry fails here, never as a traceback
        totals = _totals_check(ledger, document)
        budget = _budget_check(ledger, document)
        statement, claim = _ledger_statement(ledger, document.get("spent"), given_units)
    except (ValueError, TypeError, KeyError, ArithmeticError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        checks.append(Check("recorded totals", "fail", f"the totals cannot be recomputed from the entries: {message}",
                            _RECOMPUTE_MEANING, "recomputation"))
        return AuditReport(str(directory), tuple(checks))
    checks += [totals] if budget is None else [totals, budget]
    checks.append(_card_check(files))
    statement_check = _statement_check(files)
    if statement_check is not None:
        checks.append(statement_check)
    if digest is not None:
        claim = {**claim, "bundle_digest": digest}
    checks += hygiene_checks(statement)
    if any(check.status == "fail" for check in checks):
        model = None
        checks.append(Check("safe loading", "warn", "not attempted: the bundle failed the checks above, and a bundle "
                            "that fails them is never loaded", "the model was not opened.", "safe-loading"))
    else:
        model, loading = _load_bundle_model(files, ledger, module=module, model_class=model_class)
        checks.append(loading)
    empirical = None
    if samples is not None:
        compared = _empirical_claim(statement)
        check, empirical = _empirical_check(model, samples, claimed=compared, delta=statement.delta,
                                            confidence=confidence, random_state=random_state)
        checks.append(check)
    return AuditReport(str(directory), tuple(checks), claim, empirical)


def _empirical_claim(statement: Statement) -> float | None:
    """The ε a membership attack on single examples is held to: example level if recorded, else party level.

    A party-level guarantee covers any change to one party's data, so it bounds
    the influence of one of its examples as well.
    """
    for unit in ("example", "party"):
        if unit in statement.reports:
            return statement.reports[unit].epsilon
    return statement.epsilon


def _audit_claims(model_path: Path | None, claims_path: Path, *, samples, given_units, module,
                  confidence, random_state) -> AuditReport:
    document = load_claims(claims_path)
    statement, claim, recomputation = _claims_statement(document, given_units)
    described = f"{claims_path.name}: {document.get('description', '')}".rstrip(": ")
    defaults = _claims_defaults(document)
    if defaults:
        described += "; defaults used (not stated in the file): " + ", ".join(
            f"{name} = {value!r}" for name, value in defaults.items())
    checks = [Check("claims file", "pass", described)]
    model = None
    if model_path is None:
        checks.append(Check("model file", "warn", "no model file given: only the claims were audited",
                            "the numbers were checked, not the model they are said to describe.", "foreign-models"))
    else:
        checks.append(_foreign_model_file_check(model_path, document))
    checks += recomputation
    checks += hygiene_checks(statement)
    if model_path is not None:
        model, loading = _load_foreign_model(model_path, module=module)
        checks.append(loading)
    empirical = None
    if samples is not None:
        compared = (
            statement.epsilon if statement.rounds is None and statement.epsilon is not None
            else statement.total_epsilon
        )
        check, empirical = _empirical_check(model, samples, claimed=compared, delta=statement.delta,
                                            confidence=confidence, random_state=random_state)
        checks.append(check)
    target = " + ".join(str(p) for p in (model_path, claims_path) if p is not None)
    return AuditReport(target, tuple(checks), claim, empirical)
