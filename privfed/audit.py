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
import json
import math
import os
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from privfed.accounting._checks import check_delta
from privfed.accounting.account import account
from privfed.accounting.conversion import rdp_to_epsilon
from privfed.accounting.fingerprint import commit_evidence, file_sha256
from privfed.accounting.ledger import Ledger, LedgerFormatError, LedgerIntegrityError
from privfed.accounting.ledger_entry import UnitAnalysis, analyse_mechanism
from privfed.accounting.mechanism import UNITS, Mechanism
from privfed.accounting.registry import mechanism_from_record, public_mechanism_from_record
from privfed.accounting.report import PrivacyReport, round_up
from privfed.audit_hygiene import SETTINGS, Release, Statement, hygiene_checks
from privfed.audit_report import AuditInputError, AuditReport, Check
from privfed.bundle import EVIDENCE_FILE, LEDGER_FILE, SKOPS_TRUSTED_TYPES, BundleError, load_bundle
from privfed.empirical import membership_epsilon_lower_bound, true_label_scores

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
_REPETITIONS = {"randomized_response": "reports", "dpsgd": "steps", "quantized_laplace_ensemble": "draws_per_example"}


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
        try:
            arrays = _load_npz(path)
        except ValueError as error:
            raise AuditInputError(f"{name} file {str(path)!r} needs unpickling to read ({error}); refused") from None
        except (OSError, zipfile.BadZipFile) as error:
            raise AuditInputError(f"{name} file {str(path)!r} is not a readable .npz: {error}") from None
        if not {"X", "y"} <= set(arrays):
            raise AuditInputError(f"{name} file {str(path)!r} must hold arrays 'X' and 'y', got {sorted(arrays)}")
        X, y = arrays["X"], arrays["y"]
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        X, y = np.asarray(value[0]), np.asarray(value[1])
    else:
        raise AuditInputError(f"{name} must be an .npz path or an (X, y) pair, got {type(value).__name__}")
    if X.ndim < 2 or y.ndim != 1 or len(X) != len(y):
        raise AuditInputError(f"{name} must hold X of shape (n, features...) and y of shape (n,), got {X.shape}, {y.shape}")
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


def _resolve_units(given: dict[str, int], headline: str, fallback: Mapping[str, int], source: str) -> tuple[dict[str, int], str]:
    if given:
        counts = {headline: given["*"]} if "*" in given else given
        return counts, "given to the audit"
    return dict(fallback), source


# --- claims files -------------------------------------------------------------------------------------
def load_claims(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate a claims file (JSON; schema in ``docs/audit.md``)."""
    path = Path(path)
    if not path.is_file():
        raise AuditInputError(f"claims file {str(path)!r} does not exist")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise AuditInputError(f"claims file {str(path)!r} is not valid JSON: {error}") from None
    where = f"claims file {path.name}"
    if not isinstance(document, dict) or document.get("type") != CLAIMS_TYPE:
        raise AuditInputError(f"{where}: 'type' must be {CLAIMS_TYPE!r}")
    if document.get("schema_version") != 1:
        raise AuditInputError(f"{where}: 'schema_version' must be 1, got {document.get('schema_version')!r}")
    claim = document.get("claim")
    if not isinstance(claim, dict):
        raise AuditInputError(f"{where}: 'claim' must be an object with epsilon, delta, unit")
    if claim.get("unit") not in UNITS:
        raise AuditInputError(f"{where}: claim.unit must be one of {UNITS}, got {claim.get('unit')!r}")
    epsilon = claim.get("epsilon")
    if epsilon is not None and (isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or epsilon <= 0):
        raise AuditInputError(f"{where}: claim.epsilon must be a positive number or null, got {epsilon!r}")
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
    if not isinstance(document.get("mechanisms", []), list) or not isinstance(document.get("unaccounted", []), list):
        raise AuditInputError(f"{where}: 'mechanisms' and 'unaccounted' must be lists")
    if document.get("setting", "unknown") not in SETTINGS:
        raise AuditInputError(f"{where}: 'setting' must be one of {SETTINGS}, got {document.get('setting')!r}")
    model = document.get("model")
    if model is not None and not isinstance(model, dict):
        raise AuditInputError(f"{where}: 'model' must be an object (file, sha256) or absent")
    _protected_units(document.get("protected_units"))
    return document


def _claims_statement(document: Mapping[str, Any], given_units: dict[str, int]) -> tuple[Statement, dict[str, Any], Check]:
    """The claim of a claims file, privfed's recomputation of it, and the recomputation check."""
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
            if rounds is not None and repeated is record:
                over_rounds *= rounds
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
                          "privacy guarantee", "nothing bounds what the model reveals about its training data.", section)
    else:
        classic = report_for(composed[unit], unit, "classic")
        recomputed = (f"privfed: ε = {_fmt(headline.epsilon)} (tight, {headline.method.upper()}), "
                      f"{_fmt(classic.epsilon)} (classic) at δ = {delta:g}, {unit} level"
                      + (", data-independent (the private votes are not published)" if unit in placeholders else ""))
        if epsilon is None:
            check = Check(name, "warn", f"no ε is claimed; the stated mechanism gives {recomputed}",
                          "the publication states no overall privacy figure; privfed's number is the one to use.", section)
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
              "source": "claims file", "recomputed_epsilon": None if headline is None else headline.epsilon}
    return statement, stated, check


# --- bundles: integrity -------------------------------------------------------------------------------
def _read_ledger(document: object) -> tuple[Ledger | None, list[Check]]:
    """The ledger read by its own verification (schema, then chain), with the totals left to :func:`_totals_check`."""
    if not isinstance(document, dict) or not isinstance(document.get("budget"), dict):
        return None, [Check("ledger schema", "fail", "ledger.json is not a privfed ledger object (with a budget)",
                            _INTEGRITY_MEANING, "integrity")]
    # The recorded totals are checked separately, so that an edited total is reported as such.
    untotalled = {**document, "delta": None, "spent": None, "budget": {**document["budget"], "target_epsilon": {}}}
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
        Check("ledger chain", "pass", "every entry's sha256 and link to the previous entry verified; count and head match"),
    ]


def _model_file_check(directory: Path, ledger: Ledger) -> Check:
    fingerprint = ledger.model_fingerprint
    files = fingerprint.get("files") if isinstance(fingerprint, dict) else None
    if not isinstance(files, dict) or not files:
        return Check("model file", "fail", "the ledger records no model file: this is not a bundle's ledger",
                     _INTEGRITY_MEANING, "integrity")
    for name, recorded in files.items():
        if not isinstance(name, str) or Path(name).name != name:
            return Check("model file", "fail", f"the ledger names the model file {name!r}, not a plain file name",
                         _INTEGRITY_MEANING, "integrity")
        path = directory / name
        if not path.is_file():
            return Check("model file", "fail", f"{name} is recorded in the ledger but missing", _INTEGRITY_MEANING,
                         "integrity")
        actual = file_sha256(path)
        if actual != recorded:
            return Check("model file", "fail", f"{name} has sha256 {actual[:16]}… but the ledger records "
                         f"{str(recorded)[:16]}…: the file was modified or replaced", _INTEGRITY_MEANING, "integrity")
    return Check("model file", "pass", f"sha256 of {', '.join(files)} matches the ledger")


def _evidence_arrays(directory: Path, ledger: Ledger, evidence: object) -> tuple[dict[str, dict[str, np.ndarray]], Check | None]:
    """Verified evidence per commitment, and the evidence check (None when there is nothing to say)."""
    committed = {m.evidence_sha256 for e in ledger.entries for m in e.analyses.values() if m.evidence_sha256}
    bundled = directory / EVIDENCE_FILE
    if evidence is not None:
        path = Path(evidence)
        if not path.is_file():
            raise AuditInputError(f"evidence file {str(path)!r} does not exist")
        origin = f"{path.name} (given)"
    elif ledger.evidence_fingerprint is not None:
        path, origin = bundled, f"{EVIDENCE_FILE} (in the bundle)"
        recorded = ledger.evidence_fingerprint.get("sha256")
        if not path.is_file():
            return {}, Check("evidence", "fail", f"the ledger references {EVIDENCE_FILE} but it is missing",
                             _INTEGRITY_MEANING, "integrity")
        if file_sha256(path) != recorded:
            return {}, Check("evidence", "fail", f"{EVIDENCE_FILE} does not match the sha256 the ledger records: it was "
                             "modified or replaced", _INTEGRITY_MEANING, "integrity")
    elif bundled.exists():
        return {}, Check("evidence", "fail", f"{EVIDENCE_FILE} is present but the ledger does not reference it: it was "
                         "added", _INTEGRITY_MEANING, "integrity")
    elif committed:
        return {}, Check("evidence", "warn", f"not provided: the data-dependent curves of {len(committed)} analyses "
                         "could not be recomputed; their data-independent curves were",
                         "the smaller, data-dependent ε is taken on trust; the data-independent ε was checked and holds "
                         "whatever the training data.", "evidence")
    else:
        return {}, None
    try:
        arrays = _load_npz(path)
    except ValueError as error:
        return {}, Check("evidence", "fail", f"{origin} holds arrays that need unpickling ({error}); refused, not read",
                         _UNSAFE_MEANING, "safe-loading")
    except (OSError, zipfile.BadZipFile) as error:
        return {}, Check("evidence", "fail", f"{origin} is not a readable .npz: {error}", _INTEGRITY_MEANING, "integrity")
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
                             "the evidence is missing, edited, or belongs to another ledger", _INTEGRITY_MEANING, "integrity")
        verified[commitment] = own
    stray = sorted({key.split("/")[0].split("#")[0] for key in arrays} - committed)
    if stray:
        return {}, Check("evidence", "fail", f"{origin} holds arrays for {len(stray)} commitment(s) no entry references: "
                         "it belongs to another ledger", _INTEGRITY_MEANING, "integrity")
    return verified, Check("evidence", "pass", f"{origin} matches the ledger's {len(committed)} salted commitment(s)")


# --- bundles: recomputation -------------------------------------------------------------------------
def _entry_epsilon(curves: Mapping[str, Any], delta: float, name: str) -> float:
    """ε of one entry's curve ``name`` (tight analysis where recorded), converted at ``delta``."""
    analysis = "tight" if "tight" in curves else next(iter(curves))
    curve = curves[analysis]
    return rdp_to_epsilon(np.asarray(curve.orders), np.asarray(getattr(curve, name)), delta, analysis)[0]


def _recompute_member(member: UnitAnalysis, arrays: dict[str, np.ndarray] | None, delta: float | None) -> tuple[list[str], str]:
    """(problems, summary) of one analysis of an entry rebuilt from its parameters (and evidence)."""
    if not member.data_dependent:
        mechanism, checked = mechanism_from_record(member.record()), ("rdp", "rdp_data_independent")
        how = "rebuilt from its parameters"
    elif arrays is not None:
        mechanism, checked = mechanism_from_record(member.record(), evidence=arrays), ("rdp", "rdp_data_independent")
        how = "recomputed from the raw votes"
    else:
        mechanism, _ = public_mechanism_from_record(member.record())
        checked, how = ("rdp_data_independent",), "data-independent curve rebuilt from its parameters"
    fresh = analyse_mechanism(mechanism, evidence_sha256=member.evidence_sha256)
    problems = []
    if fresh.num_queries != member.num_queries or fresh.data_dependent != member.data_dependent:
        problems.append(f"records {member.num_queries} queries (data-dependent: {member.data_dependent}) but its "
                        f"parameters give {fresh.num_queries} ({fresh.data_dependent})")
    if (fresh.pure_epsilon is None) != (member.pure_epsilon is None) or (
            fresh.pure_epsilon is not None and not _close(member.pure_epsilon, fresh.pure_epsilon)):
        problems.append(f"records pure ε {member.pure_epsilon} but its parameters give {fresh.pure_epsilon}")
    for analysis, curve in member.curves.items():
        new = fresh.curves.get(analysis)
        if new is None or new.orders != curve.orders:
            problems.append(f"its {analysis} curve cannot be recomputed on its recorded orders")
            continue
        for name in checked:
            recorded, recomputed = np.asarray(getattr(curve, name)), np.asarray(getattr(new, name))
            if not np.allclose(recorded, recomputed, rtol=RTOL, atol=_ATOL):
                worst = int(np.argmax(np.abs(recorded - recomputed)))
                problems.append(f"recorded {analysis} {name} differs from the recomputed one (order {curve.orders[worst]:g}: "
                                f"{recorded[worst]:.6g} recorded vs {recomputed[worst]:.6g})")
    summary = f"{member.unit}: {how}"
    if delta is not None:
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
            try:
                found, summary = _recompute_member(member, arrays, ledger.delta)
            except (ValueError, TypeError, KeyError) as error:
                found, summary = [f"cannot be rebuilt from its recorded parameters: {error}"], f"{unit}: not rebuilt"
            problems += [f"{unit}: {problem}" for problem in found]
            summaries.append(summary)
        kinds = sorted({member.kind for member in entry.analyses.values()})
        name = f"entry {entry.index} ({', '.join(kinds)})"
        if problems:
            checks.append(Check(name, "fail", "; ".join(problems), _RECOMPUTE_MEANING, "recomputation"))
        else:
            checks.append(Check(name, "pass", "; ".join(summaries)))
    return checks


def _totals_check(ledger: Ledger, recorded: object) -> Check:
    name = "recorded totals"
    if ledger.delta is None:
        if recorded is not None:
            return Check(name, "fail", "totals are recorded but the ledger states no δ", _RECOMPUTE_MEANING, "recomputation")
        return Check(name, "pass", "no δ, so no totals are recorded")
    if not isinstance(recorded, dict) or sorted(recorded) != sorted(ledger.units):
        listed = sorted(recorded) if isinstance(recorded, dict) else recorded
        return Check(name, "fail", f"the ledger records totals for {listed} but its entries cover {list(ledger.units)}",
                     _RECOMPUTE_MEANING, "recomputation")
    summaries = []
    for unit in ledger.units:
        report = ledger.account(unit=unit, analysis=ledger.analysis)
        for key, fresh in (("epsilon", report.epsilon), ("epsilon_data_independent", report.epsilon_data_independent)):
            value = recorded[unit].get(key) if isinstance(recorded[unit], dict) else None
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not _close(float(value), fresh):
                return Check(name, "fail", f"{unit}-level {key.replace('_', ' ')} is recorded as {value!r} but the "
                             f"entries give {fresh!r} ({ledger.analysis} analysis, δ = {ledger.delta:g})",
                             _RECOMPUTE_MEANING, "recomputation")
        summaries.append(f"{unit}: ε = {_fmt(report.epsilon)}" + (" (data-dependent)" if report.data_dependent else ""))
    return Check(name, "pass", f"recomputed from the entries ({ledger.analysis} analysis, δ = {ledger.delta:g}): "
                 + "; ".join(summaries))


def _ledger_statement(ledger: Ledger, recorded: object, given_units: dict[str, int]) -> tuple[Statement, dict[str, Any]]:
    units = ledger.units
    unit = ledger.primary_unit if ledger.primary_unit in units or not units else units[0]
    reports = {u: ledger.account(unit=u, analysis=ledger.analysis) for u in units} if ledger.delta is not None else {}
    stated = recorded.get(unit, {}).get("epsilon") if isinstance(recorded, dict) and isinstance(recorded.get(unit), dict) else None
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
def _load_bundle_model(directory: Path, ledger: Ledger, *, module: Any, model_class: type | None) -> tuple[Any, Check]:
    family = (ledger.model_fingerprint or {}).get("family")
    if family == "torch-module" and module is None:
        import safetensors.numpy

        tensors = safetensors.numpy.load_file(os.fspath(directory / "model.safetensors"))
        return None, Check("safe loading", "warn", f"model.safetensors read safely ({len(tensors)} tensors), but the "
                           "model is a plain torch module: its architecture is needed to run it (Python: "
                           "privfed.audit(..., module=...))", "the tensors are safe, but the empirical check needs the "
                           "model's code, which a bundle never ships.", "safe-loading")
    try:
        model, _ = load_bundle(directory, module=module, model_class=model_class)
    except BundleError as error:
        return None, Check("safe loading", "fail", f"refused: {error}", _UNSAFE_MEANING, "safe-loading")
    except (LedgerFormatError, LedgerIntegrityError) as error:
        return None, Check("safe loading", "fail", f"load_bundle refused the bundle: {error}", _INTEGRITY_MEANING,
                           "integrity")
    return model, Check("safe loading", "pass", f"{type(model).__name__} loaded from {family} files without unpickling")


def _load_foreign_model(path: Path, *, module: Any) -> tuple[Any, Check]:
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
def _empirical_check(model: Any, samples: tuple[tuple[np.ndarray, np.ndarray], ...], *, claimed: float | None, delta: float | None,
                     confidence: float, random_state: int | None) -> tuple[Check, dict[str, Any] | None]:
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
              f"[{lo_f:.3f}, {hi_f:.3f}] on {bound.members_evaluated} + {bound.non_members_evaluated} held-out samples; "
              f"ε ≥ {bound.epsilon_lower:.3f} with {confidence:.0%} confidence; claimed ε = {_fmt(claimed)}")
    result = {**bound.to_dict(), "claimed_epsilon": claimed}
    if claimed is None:
        return Check(name, "warn", detail, "there is no claimed ε to compare the measured leakage with.", "empirical"), result
    if bound.epsilon_lower > claimed:
        return Check(name, "fail", detail + ": the measured leakage exceeds the claim",
                     "an attack on the model itself shows more leakage than the claimed ε allows, so the claim is false "
                     "(or the samples are not from one distribution).", "empirical"), result
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
                             confidence=confidence, random_state=random_state)
    if path is not None and not path.is_file():
        raise AuditInputError(f"{str(path)!r} is neither a bundle directory nor a model file")
    if claims is None:
        raise AuditInputError(f"{path.name} is not a privfed bundle; a foreign model needs a claims file (--claims)")
    if evidence is not None:
        raise AuditInputError("evidence applies to privfed bundles, not to a foreign model with a claims file")
    return _audit_claims(path, Path(claims), samples=samples, given_units=given_units,
                         module=module, confidence=confidence, random_state=random_state)


def _audit_bundle(directory: Path, *, evidence, samples, given_units, module, model_class,
                  confidence, random_state) -> AuditReport:
    ledger_path = directory / LEDGER_FILE
    if not ledger_path.is_file():
        raise AuditInputError(f"{directory} is not a privfed bundle: it has no {LEDGER_FILE}")
    try:
        document = json.loads(ledger_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        document = None
        checks = [Check("ledger schema", "fail", f"{LEDGER_FILE} is not valid JSON: {error}", _INTEGRITY_MEANING,
                        "integrity")]
    ledger, checks = _read_ledger(document) if document is not None else (None, checks)
    if ledger is None:
        return AuditReport(str(directory), tuple(checks))
    checks.append(_model_file_check(directory, ledger))
    verified, evidence_check = _evidence_arrays(directory, ledger, evidence)
    if evidence_check is not None:
        checks.append(evidence_check)
    checks += _entry_checks(ledger, verified)
    checks.append(_totals_check(ledger, document.get("spent")))
    statement, claim = _ledger_statement(ledger, document.get("spent"), given_units)
    checks += hygiene_checks(statement)
    if any(check.status == "fail" for check in checks):
        model = None
        checks.append(Check("safe loading", "warn", "not attempted: the bundle failed the checks above, and a bundle "
                            "that fails them is never loaded", "the model was not opened.", "safe-loading"))
    else:
        model, loading = _load_bundle_model(directory, ledger, module=module, model_class=model_class)
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
    checks = [Check("claims file", "pass", f"{claims_path.name}: {document.get('description', '')}".rstrip(": "))]
    model = None
    if model_path is None:
        checks.append(Check("model file", "warn", "no model file given: only the claims were audited",
                            "the numbers were checked, not the model they are said to describe.", "foreign-models"))
    else:
        checks.append(_foreign_model_file_check(model_path, document))
    checks.append(recomputation)
    checks += hygiene_checks(statement)
    if model_path is not None:
        model, loading = _load_foreign_model(model_path, module=module)
        checks.append(loading)
    empirical = None
    if samples is not None:
        compared = statement.epsilon if statement.rounds is None and statement.epsilon is not None else statement.total_epsilon
        check, empirical = _empirical_check(model, samples, claimed=compared, delta=statement.delta,
                                            confidence=confidence, random_state=random_state)
        checks.append(check)
    target = " + ".join(str(p) for p in (model_path, claims_path) if p is not None)
    return AuditReport(target, tuple(checks), claim, empirical)
