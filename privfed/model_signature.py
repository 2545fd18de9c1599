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
the ``sign`` extra. Verification uses only the public API above.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
from pathlib import Path
from typing import Any

from privfed.manifest import BundleError
from privfed.signing import SignatureVerdict

__all__ = ["MODEL_SIGNING_FORMAT", "default_signature_path", "is_elliptic_curve_key", "model_signing_verdict",
           "sign_bundle_model_signing", "signed_statement"]

#: The ``--format`` name of this signature format.
MODEL_SIGNING_FORMAT = "model-signing"
#: Largest signature file read (a Sigstore bundle listing every file's digest).
_MAX_SIGNATURE_BYTES = 16 << 20


def _model_signing() -> Any:
    try:
        import model_signing  # noqa: F401
        from model_signing import hashing, verifying
        from model_signing._signing import sign_ec_key
        from model_signing._signing import signing as payloads
    except ImportError as error:
        raise BundleError(f"OpenSSF model signing needs the 'model-signing' package ({error}): "
                          "pip install 'privfed[sign]'") from None
    return hashing, verifying, payloads, sign_ec_key


def is_elliptic_curve_key(public_key: Any) -> bool:
    """Whether ``public_key`` (a PEM path or PEM bytes) is an elliptic-curve public key (else: privfed's Ed25519)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from privfed.signing import _key_bytes

    if not isinstance(public_key, (str, os.PathLike, bytes)):
        return False
    try:
        return isinstance(serialization.load_pem_public_key(_key_bytes(public_key, "public_key")),
                          ec.EllipticCurvePublicKey)
    except (ValueError, TypeError):
        return False


def default_signature_path(bundle: str | os.PathLike[str]) -> Path:
    """``BUNDLE.sig`` beside the bundle folder (never inside it: the manifest lists every file there)."""
    directory = Path(bundle)
    return directory.with_name(directory.name + ".sig")


def _privfed_predicate(directory: Path) -> dict[str, Any]:
    """Bundle digest, ledger digest and the audit verdict, for the signed statement."""
    from privfed.audit import audit
    from privfed.bundle import bundle_ledger
    from privfed.manifest import read_bundle_files, verify_manifest

    files = read_bundle_files(directory)
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
    hashing, _, payloads, sign_ec_key = _model_signing()
    directory = Path(bundle)
    key_path = Path(key)
    if not key_path.is_file():
        raise ValueError(f"key file {str(key_path)!r} does not exist")
    target = default_signature_path(directory) if out is None else Path(out)
    if target.resolve().parent == directory.resolve() or directory.resolve() in target.resolve().parents:
        raise ValueError(f"out must be outside the bundle folder (its manifest lists every file there), got {target}")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from privfed.signing import _key_bytes

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
    fields = _privfed_predicate(directory)
    payload = payloads.Payload(hashing.Config().hash(pathlib.Path(directory)))
    payload.statement.pb.predicate.update({"privfed": fields})
    staging = target.with_name(f".{target.name}.{os.getpid()}")
    signer.sign(payload).write(staging)
    os.replace(staging, target)
    return target, fields


def signed_statement(signature: str | os.PathLike[str]) -> dict[str, Any]:
    """The in-toto statement inside a model-signing signature file (unverified: verify it first)."""
    path = Path(signature)
    if not path.is_file():
        raise ValueError(f"signature file {str(path)!r} does not exist")
    if path.stat().st_size > _MAX_SIGNATURE_BYTES:
        raise ValueError(f"signature file {str(path)!r} is larger than {_MAX_SIGNATURE_BYTES} bytes")
    try:
        envelope = json.loads(path.read_bytes())["dsseEnvelope"]
        statement = json.loads(base64.b64decode(envelope["payload"], validate=True))
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path} is not a model-signing signature: {error}") from None
    if not isinstance(statement, dict):
        raise ValueError(f"{path} is not a model-signing signature: its payload is not a statement")
    return statement


def model_signing_verdict(bundle: str | os.PathLike[str], public_key: str | os.PathLike[str], *,
                          signature: str | os.PathLike[str] | None = None,
                          manifest: bytes | None = None) -> SignatureVerdict:
    """Verify ``bundle`` against its model-signing signature with the elliptic-curve ``public_key`` (PEM path).

    ``"signed"`` when model-signing verifies every file and privfed's predicate
    names this bundle's digest (``manifest``: the ``MANIFEST.json`` bytes read by the
    caller, checked against the signed bundle digest); ``"invalid"`` otherwise.
    """
    import hashlib

    _, verifying, _, _ = _model_signing()
    directory = Path(bundle)
    path = default_signature_path(directory) if signature is None else Path(signature)
    if not path.is_file():
        return SignatureVerdict("invalid", None, f"a model-signing signature by {public_key} was required, but "
                                f"{path} does not exist")
    try:
        verifying.Config().use_elliptic_key_verifier(public_key=pathlib.Path(public_key)).verify(directory, path)
    except Exception as error:  # noqa: BLE001 - model-signing raises ValueError and library-specific errors alike
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        return SignatureVerdict("invalid", None, f"{path} does not verify (OpenSSF model signing, key {public_key}): "
                                f"{message[:300]}")
    fields = signed_statement(path).get("predicate", {}).get("privfed")
    if not isinstance(fields, dict):
        return SignatureVerdict("invalid", None, f"{path} verifies but carries no privfed statement")
    digest = None if manifest is None else hashlib.sha256(manifest).hexdigest()
    if digest is not None and fields.get("bundle_digest") != digest:
        return SignatureVerdict("invalid", None, f"{path} verifies but names bundle digest "
                                f"{fields.get('bundle_digest')!r}, not this bundle's {digest}")
    verdict = fields.get("audit", {}).get("verdict") if isinstance(fields.get("audit"), dict) else None
    from cryptography.hazmat.primitives import serialization

    from privfed.signing import _key_bytes

    key = serialization.load_pem_public_key(_key_bytes(public_key, "public_key"))
    fingerprint = hashlib.sha256(key.public_bytes(serialization.Encoding.DER,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo)).hexdigest()
    return SignatureVerdict("signed", fingerprint, f"signed by {os.fspath(public_key)} (fingerprint {fingerprint}; "
                            f"OpenSSF model signing, {path.name}: every file verified; audit verdict at signing: "
                            f"{verdict})")
