"""Integrity: are the bundle's files, or the foreign model file, the ones the privacy claims describe?

``bundle manifest``, ``signature``, ``ledger schema``, ``ledger chain``, ``model file`` and ``evidence``
(``docs/audit.md#integrity``): every file against ``MANIFEST.json``, the publisher's signature (Ed25519,
:mod:`privfed.bundle.signing`, or OpenSSF model signing, :mod:`privfed.bundle.model_signature_verify`), the
ledger read by its own verification (schema, then the chain of entries; its recorded totals are left to
:mod:`privfed.audit.recomputation`), the model file's sha256 against the ledger or the claims file, and the
evidence against the ledger's salted commitments.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from privfed.accounting._checks import check_delta
from privfed.accounting.documents import check_declared_work, not_a_file
from privfed.accounting.fingerprint import commit_evidence, file_sha256, sha256_hex
from privfed.accounting.ledger import Ledger, LedgerFormatError, LedgerIntegrityError
from privfed.audit.report import INTEGRITY_MEANING, UNSAFE_MEANING, AuditInputError, Check
from privfed.bundle.layout import EVIDENCE_FILE
from privfed.bundle.load import read_evidence
from privfed.bundle.manifest import BundleError, verify_manifest
from privfed.bundle.model_signature_verify import is_elliptic_curve_key, model_signing_verdict
from privfed.bundle.signing import signature_verdict

__all__ = ["evidence_arrays", "foreign_model_file_check", "manifest_check", "model_file_check", "read_ledger",
           "signature_check"]


def manifest_check(files: Mapping[str, bytes], directory: Path) -> tuple[Check, str | None]:
    """Every file against ``MANIFEST.json``; the check and the bundle digest (None when the manifest fails)."""
    try:
        digest = verify_manifest(files, where=str(directory))
    except BundleError as error:
        return Check("bundle manifest", "fail", str(error), INTEGRITY_MEANING, "integrity"), None
    listed = len(files) - sum(name in files for name in ("MANIFEST.json", "SIGNATURE.json"))
    return Check("bundle manifest", "pass", f"all {listed} files match MANIFEST.json, nothing else in the folder; "
                 f"bundle digest {digest}"), digest


def signature_check(files: Mapping[str, bytes], public_key: Any, directory: Path,
                    signature: str | os.PathLike[str] | None = None) -> Check:
    """The publisher's signature: Ed25519 over the manifest, or OpenSSF model signing with an elliptic-curve key.

    Raises
    ------
    AuditInputError
        The key or the signature file cannot be used (``signature`` without an elliptic-curve key, an unreadable key).
    """
    if signature is not None and (public_key is None or not is_elliptic_curve_key(public_key)):
        raise AuditInputError("signature is the OpenSSF model-signing signature file: give it with the publisher's "
                              "elliptic-curve public key (public_key= / --public-key)")
    try:
        if public_key is not None and is_elliptic_curve_key(public_key):
            verdict = model_signing_verdict(directory, public_key, signature=signature, files=files)
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


def read_ledger(document: object) -> tuple[Ledger | None, list[Check]]:
    """The ledger read by its own verification (schema, then chain).

    The recorded totals are left to :func:`~privfed.audit.recomputation.totals_check`.
    """
    if not isinstance(document, dict) or not isinstance(document.get("budget"), dict):
        return None, [Check("ledger schema", "fail", "ledger.json is not a privfed ledger object (with a budget)",
                            INTEGRITY_MEANING, "integrity")]
    try:  # the work budget, from the declared sizes, before any entry is rebuilt
        check_declared_work(document, "ledger.json")
    except ValueError as error:
        return None, [Check("ledger schema", "fail", str(error), INTEGRITY_MEANING, "integrity")]
    # The recorded totals are checked separately, so that an edited total is reported as such.
    untotalled = {**document, "delta": None, "spent": None, "budget": {**document["budget"], "target_epsilon": {}}}
    if "spent_by_observer" in document:
        untotalled["spent_by_observer"] = None
    try:
        ledger = Ledger.from_dict(untotalled)
        if document.get("delta") is not None:
            ledger.delta = check_delta(document["delta"], "ledger.delta")
    except LedgerFormatError as error:
        return None, [Check("ledger schema", "fail", str(error), INTEGRITY_MEANING, "integrity")]
    except LedgerIntegrityError as error:
        return None, [Check("ledger schema", "pass", f"schema version {document.get('schema_version')}"),
                      Check("ledger chain", "fail", str(error), INTEGRITY_MEANING, "integrity")]
    except (TypeError, ValueError) as error:
        return None, [Check("ledger schema", "fail", f"ledger: {error}", INTEGRITY_MEANING, "integrity")]
    return ledger, [
        Check("ledger schema", "pass", f"privfed ledger, schema version {document['schema_version']}, "
              f"{len(ledger)} entries"),
        Check("ledger chain", "pass",
              "every entry's sha256 and link to the previous entry verified; count and head match"),
    ]


def model_file_check(files: Mapping[str, bytes], ledger: Ledger) -> Check:
    """The bundle's model files against the sha256 the ledger records."""
    fingerprint = ledger.model_fingerprint
    recorded_files = fingerprint.get("files") if isinstance(fingerprint, dict) else None
    if not isinstance(recorded_files, dict) or not recorded_files:
        return Check("model file", "fail", "the ledger records no model file: this is not a bundle's ledger",
                     INTEGRITY_MEANING, "integrity")
    for name, recorded in recorded_files.items():
        if not isinstance(name, str) or Path(name).name != name:
            return Check("model file", "fail", f"the ledger names the model file {name!r}, not a plain file name",
                         INTEGRITY_MEANING, "integrity")
        if name not in files:
            return Check("model file", "fail", f"{name} is recorded in the ledger but missing", INTEGRITY_MEANING,
                         "integrity")
        actual = sha256_hex(files[name])
        if actual != recorded:
            return Check("model file", "fail", f"{name} has sha256 {actual[:16]}… but the ledger records "
                         f"{str(recorded)[:16]}…: the file was modified or replaced", INTEGRITY_MEANING, "integrity")
    return Check("model file", "pass", f"sha256 of {', '.join(recorded_files)} matches the ledger")


def evidence_arrays(
    files: Mapping[str, bytes], ledger: Ledger, evidence: object
) -> tuple[dict[str, dict[str, np.ndarray]], Check | None]:
    """Verified evidence per commitment, and the evidence check (None when there is nothing to say)."""
    committed = {m.evidence_sha256 for e in ledger.entries for m in e.analyses.values() if m.evidence_sha256}
    if evidence is not None:
        path = Path(evidence)
        if not path.is_file():
            raise AuditInputError(f"evidence file {str(path)!r} {not_a_file(path)}")
        origin, data = f"{path.name} (given)", path.read_bytes()
    elif ledger.evidence_fingerprint is not None:
        origin, data = f"{EVIDENCE_FILE} (in the bundle)", files.get(EVIDENCE_FILE)
        recorded = ledger.evidence_fingerprint.get("sha256")
        if data is None:
            return {}, Check("evidence", "fail", f"the ledger references {EVIDENCE_FILE} but it is missing",
                             INTEGRITY_MEANING, "integrity")
        if sha256_hex(data) != recorded:
            return {}, Check("evidence", "fail", f"{EVIDENCE_FILE} does not match the sha256 the ledger records: "
                             "it was modified or replaced", INTEGRITY_MEANING, "integrity")
    elif EVIDENCE_FILE in files:
        return {}, Check("evidence", "fail", f"{EVIDENCE_FILE} is present but the ledger does not reference it: it was "
                         "added", INTEGRITY_MEANING, "integrity")
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
                         UNSAFE_MEANING if unsafe else INTEGRITY_MEANING, "safe-loading" if unsafe else "integrity")
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
                             "the evidence is missing, edited, or belongs to another ledger", INTEGRITY_MEANING,
                             "integrity")
        verified[commitment] = own
    stray = sorted({key.split("/")[0].split("#")[0] for key in arrays} - committed)
    if stray:
        return {}, Check("evidence", "fail", f"{origin} holds arrays for {len(stray)} commitment(s) no entry "
                         "references: it belongs to another ledger", INTEGRITY_MEANING, "integrity")
    return verified, Check("evidence", "pass", f"{origin} matches the ledger's {len(committed)} salted commitment(s)")


def foreign_model_file_check(path: Path, document: Mapping[str, Any]) -> Check:
    """A foreign model file against the sha256 its claims file pins (a warning when it pins none)."""
    pinned = (document.get("model") or {}).get("sha256")
    actual = file_sha256(path)
    if pinned is None:
        return Check("model file", "warn", f"{path.name}: sha256 {actual[:16]}…; the claims file does not pin it",
                     "nothing ties these claims to this particular model file.", "integrity")
    if actual != pinned:
        return Check("model file", "fail", f"{path.name} has sha256 {actual[:16]}… but the claims file pins "
                     f"{str(pinned)[:16]}…", INTEGRITY_MEANING, "integrity")
    return Check("model file", "pass", f"sha256 of {path.name} matches the claims file")
