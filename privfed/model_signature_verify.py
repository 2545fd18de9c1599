"""Verifying bundles signed with OpenSSF model signing (the ``model-signing`` package).

The format, and how privfed signs a bundle in it, are :mod:`privfed.model_signature`. Verification lives apart
from signing because signing runs the audit (its verdict goes into the signed statement) while the audit runs this
verification: :mod:`privfed.audit` imports this module, :mod:`privfed.model_signature` imports both, and nothing
imports back. Verification uses only model-signing's public API.
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

__all__ = ["default_signature_path", "is_elliptic_curve_key", "load_model_signing", "model_signing_verdict",
           "signed_statement"]

#: Largest signature file read (a Sigstore bundle listing every file's digest).
_MAX_SIGNATURE_BYTES = 16 << 20


def load_model_signing() -> Any:
    """model-signing's modules (hashing, verifying, payloads, sign_ec_key); BundleError when it is not installed."""
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

    _, verifying, _, _ = load_model_signing()
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
