"""Verifying bundles signed with OpenSSF model signing (the ``model-signing`` package).

The format, and how privfed signs a bundle in it, are :mod:`privfed.bundle.model_signature`. Verification lives apart
from signing because signing runs the audit (its verdict goes into the signed statement) while the audit runs this
verification: :mod:`privfed.audit` imports this module, :mod:`privfed.bundle.model_signature` imports both, and nothing
imports back. Verification uses only model-signing's public API.
"""

from __future__ import annotations

import base64
import os
import pathlib
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from privfed.accounting.documents import not_a_file, parse_json
from privfed.bundle.manifest import BundleError
from privfed.bundle.signing import SignatureVerdict

__all__ = ["default_signature_path", "is_elliptic_curve_key", "load_model_signing", "model_signing_verdict",
           "read_signature_file", "signed_statement", "statement_of"]

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

    from privfed.bundle.signing import _key_bytes

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


def read_signature_file(signature: str | os.PathLike[str]) -> bytes:
    """The bytes of a model-signing signature file, read once, never through a symbolic link.

    Raises ``ValueError`` (one line) for a missing file, a symbolic link, something that is not a regular
    file, or a file larger than :data:`_MAX_SIGNATURE_BYTES`.
    """
    path = Path(signature)
    if path.is_symlink():
        raise ValueError(f"signature file {str(path)!r} is a symbolic link; refusing to follow it")
    try:
        # O_NONBLOCK: opening a named pipe put in the file's place returns at once instead of waiting for a writer.
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise ValueError(f"signature file {str(path)!r} {not_a_file(path)}") from None
    except OSError as error:
        raise ValueError(f"signature file {str(path)!r} could not be opened: {error.strerror or error}") from None
    with os.fdopen(descriptor, "rb") as stream:
        info = os.fstat(stream.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"signature file {str(path)!r} {not_a_file(path)}")
        if info.st_size > _MAX_SIGNATURE_BYTES:
            raise ValueError(f"signature file {str(path)!r} is larger than {_MAX_SIGNATURE_BYTES} bytes")
        data = stream.read(info.st_size + 1)
    if len(data) > _MAX_SIGNATURE_BYTES:
        raise ValueError(f"signature file {str(path)!r} grew past {_MAX_SIGNATURE_BYTES} bytes while read")
    return data


def statement_of(data: bytes, what: str = "signature") -> dict[str, Any]:
    """The in-toto statement inside model-signing signature bytes (unverified: verify them first)."""
    try:
        envelope = parse_json(data, what)["dsseEnvelope"]
        statement = parse_json(base64.b64decode(envelope["payload"], validate=True), f"{what} payload")
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{what} is not a model-signing signature: {str(error).splitlines()[0]}") from None
    if not isinstance(statement, dict):
        raise ValueError(f"{what} is not a model-signing signature: its payload is not a statement")
    return statement


def signed_statement(signature: str | os.PathLike[str]) -> dict[str, Any]:
    """The in-toto statement inside a model-signing signature file (unverified: verify it first)."""
    return statement_of(read_signature_file(signature), str(Path(signature)))


def _verify_copy(verifying: Any, files: Mapping[str, bytes], signature: bytes, public_key: Any) -> None:
    """model-signing's verification of exactly ``files`` and ``signature``, written to a private folder.

    model-signing verifies a folder on disk. Verifying the caller's folder and then using bytes read from
    it earlier (or later) leaves a window in which the folder can be swapped; a private copy of the bytes
    the caller checks and uses closes it: what is verified is what is used.
    """
    with tempfile.TemporaryDirectory(prefix="privfed-verify-") as private:
        folder = Path(private) / "bundle"
        folder.mkdir(mode=0o700)
        for name, data in files.items():
            (folder / name).write_bytes(data)
        copy = Path(private) / "bundle.sig"
        copy.write_bytes(signature)
        verifying.Config().use_elliptic_key_verifier(public_key=pathlib.Path(public_key)).verify(folder, copy)


def model_signing_verdict(bundle: str | os.PathLike[str], public_key: str | os.PathLike[str], *,
                          signature: str | os.PathLike[str] | None = None,
                          manifest: bytes | None = None,
                          files: Mapping[str, bytes] | None = None) -> SignatureVerdict:
    """Verify ``bundle`` against its model-signing signature with the elliptic-curve ``public_key`` (PEM path).

    ``"signed"`` when model-signing verifies every file and privfed's predicate
    names this bundle's digest; ``"invalid"`` otherwise. ``files`` are the bundle's
    bytes as the caller read them (:func:`privfed.bundle.manifest.read_bundle_files`; read
    here when not given): the signature file is read once, never through a symbolic
    link, and both are verified as private copies, so the verdict is about exactly
    the bytes the caller goes on to use. ``manifest`` (the ``MANIFEST.json`` bytes)
    is kept for callers that pass it; ``files`` supersedes it.
    """
    import hashlib

    from privfed.bundle.manifest import MANIFEST_FILE, read_bundle_files

    _, verifying, _, _ = load_model_signing()
    directory = Path(bundle)
    path = default_signature_path(directory) if signature is None else Path(signature)
    if not path.exists() and not path.is_symlink():
        return SignatureVerdict("invalid", None, f"a model-signing signature by {public_key} was required, but "
                                f"{path} does not exist")
    try:
        data = read_signature_file(path)
    except ValueError as error:
        return SignatureVerdict("invalid", None, str(error))
    if files is None:
        files = read_bundle_files(directory)
    try:
        _verify_copy(verifying, files, data, public_key)
    except Exception as error:  # noqa: BLE001 - model-signing raises ValueError and library-specific errors alike
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        return SignatureVerdict("invalid", None, f"{path} does not verify (OpenSSF model signing, key {public_key}): "
                                f"{message[:300]}")
    fields = statement_of(data, str(path)).get("predicate", {}).get("privfed")
    if not isinstance(fields, dict):
        return SignatureVerdict("invalid", None, f"{path} verifies but carries no privfed statement")
    signed_manifest = files.get(MANIFEST_FILE, manifest)
    digest = None if signed_manifest is None else hashlib.sha256(signed_manifest).hexdigest()
    if digest is None or fields.get("bundle_digest") != digest:
        return SignatureVerdict("invalid", None, f"{path} verifies but names bundle digest "
                                f"{fields.get('bundle_digest')!r}, not this bundle's {digest}")
    verdict = fields.get("audit", {}).get("verdict") if isinstance(fields.get("audit"), dict) else None
    from cryptography.hazmat.primitives import serialization

    from privfed.bundle.signing import _key_bytes

    key = serialization.load_pem_public_key(_key_bytes(public_key, "public_key"))
    fingerprint = hashlib.sha256(key.public_bytes(serialization.Encoding.DER,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo)).hexdigest()
    return SignatureVerdict("signed", fingerprint, f"signed by {os.fspath(public_key)} (fingerprint {fingerprint}; "
                            f"OpenSSF model signing, {path.name}: every file verified; audit verdict at signing: "
                            f"{verdict})")
