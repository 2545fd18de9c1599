"""Bundles signed in the ML ecosystem's format: OpenSSF model signing (the ``model-signing`` package).

``privfed sign BUNDLE --key KEY.pem --format model-signing`` writes ``BUNDLE.sig``
beside the bundle folder: a Sigstore bundle holding a DSSE envelope around an
in-toto statement whose predicate (``https://model_signing/signature/v1.0``)
lists the sha256 of **every file** of the folder, signed with an elliptic-curve
key (P-256/P-384/P-521). Anyone can then verify it with model-signing alone::

    model_signing.verifying.Config().use_elliptic_key_verifier(public_key="KEY.pem.pub").verify("BUNDLE",
                                                                                              "BUNDLE.sig")

which fails after any byte of the bundle changes (or a file is added or removed).

**privfed's fields in the predicate.** The predicate also carries
``"privfed": {"bundle_digest", "ledger_digest", "audit": {...}}``: the bundle
digest (sha256 of ``MANIFEST.json``), the ledger's digest
(:meth:`~privfed.accounting.ledger.Ledger.digest`) and the verdict of
``privfed audit`` on the bundle at signing time (pass/fail, the failed and
warned checks, the audited ε, δ and unit). model-signing 1.1's public API
(``signing.Config.sign``) builds the predicate itself and offers no way to add a
field; its v1.0 predicate specification says verifiers ignore fields other than
``serialization`` and ``resources``. privfed therefore builds the same statement
with model-signing's own ``Payload`` (from its public ``hashing.Config``), adds
its field, and signs it with model-signing's elliptic-key ``Signer`` — both from
``model_signing._signing``, internal modules, hence the pinned version range of
the ``sign`` extra. Verification (:mod:`privfed.bundle.model_signature_verify`, its names re-exported here)
uses only the public API above.
"""

from __future__ import annotations

import os
import pathlib
import tempfile
from pathlib import Path
from typing import Any

# Verification is a module of its own: the audit uses it, and signing here uses the audit.
from privfed.bundle.model_signature_verify import (
    default_signature_path,
    is_elliptic_curve_key,
    load_model_signing,
    model_signing_verdict,
    signed_statement,
)

__all__ = ["MODEL_SIGNING_FORMAT", "default_signature_path", "is_elliptic_curve_key", "model_signing_verdict",
           "sign_bundle_model_signing", "signed_statement"]

#: The ``--format`` name of this signature format.
MODEL_SIGNING_FORMAT = "model-signing"


def _privfed_predicate(directory: Path, files: dict[str, bytes]) -> dict[str, Any]:
    """Bundle digest, ledger digest and the audit verdict of ``files`` (held in ``directory``), for the statement."""
    from privfed.audit import audit
    from privfed.bundle.load import bundle_ledger
    from privfed.bundle.manifest import verify_manifest

    digest = verify_manifest(files, where=str(directory))
    report = audit(directory)
    claim = report.claim
    return {
        "bundle_digest": digest,
        "ledger_digest": bundle_ledger(files).digest(),
        "audit": {
            "verdict": "pass" if report.passed else "fail",
            "failed": [check.name for check in report.failed],
            "warnings": [check.name for check in report.warnings],
            "epsilon": claim.get("epsilon"),
            "delta": claim.get("delta"),
            "unit": claim.get("unit"),
        },
    }


def sign_bundle_model_signing(bundle: str | os.PathLike[str], key: str | os.PathLike[str], *,
                              out: str | os.PathLike[str] | None = None) -> tuple[Path, dict[str, Any]]:
    """Sign every file of ``bundle`` with the elliptic-curve private key file ``key`` (PEM) in OpenSSF's format.

    The manifest is verified and the bundle audited first; the signature goes to
    ``out`` (default :func:`default_signature_path`), written beside it and renamed
    into place. Returns (signature path, privfed's predicate fields).
    """
    hashing, _, payloads, sign_ec_key = load_model_signing()
    directory = Path(bundle)
    key_path = Path(key)
    if not key_path.is_file():
        raise ValueError(f"key file {str(key_path)!r} does not exist")
    target = default_signature_path(directory) if out is None else Path(out)
    if target.resolve().parent == directory.resolve() or directory.resolve() in target.resolve().parents:
        raise ValueError(f"out must be outside the bundle folder (its manifest lists every file there), got {target}")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from privfed.bundle.signing import _key_bytes

    wanted = f"key must be an unencrypted PEM elliptic-curve (P-256/384/521) private key for --format " \
             f"{MODEL_SIGNING_FORMAT} (privfed keygen --type ec)"
    try:
        loaded = serialization.load_pem_private_key(_key_bytes(key_path, "key"), password=None)
    except (ValueError, TypeError) as error:
        raise ValueError(f"{wanted}: {error}") from None
    if not isinstance(loaded, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{wanted}, got {type(loaded).__name__.lstrip('_')}")
    try:
        signer = sign_ec_key.Signer(key_path)
    except ValueError as error:
        raise ValueError(f"{wanted}: {error}") from None
    from privfed.bundle.manifest import read_bundle_files

    files = read_bundle_files(directory)
    staging = target.with_name(f".{target.name}.{os.getpid()}")
    # The bytes read once are audited and hashed from a private copy: what is signed is what was audited.
    with tempfile.TemporaryDirectory(prefix="privfed-sign-") as private:
        copy = Path(private) / "bundle"
        copy.mkdir(mode=0o700)
        for name, data in files.items():
            (copy / name).write_bytes(data)
        fields = _privfed_predicate(copy, files)
        payload = payloads.Payload(hashing.Config().hash(pathlib.Path(copy)))
    payload.statement.pb.predicate.update({"privfed": fields})
    signer.sign(payload).write(staging)
    os.replace(staging, target)
    return target, fields


