"""Publisher signatures on bundles: Ed25519 over ``MANIFEST.json`` (OpenSSF model signing: :mod:`.model_signature`).

The manifest pins every byte of a bundle (:mod:`privfed.bundle.manifest`), so one
signature over it says who published the whole bundle. ``SIGNATURE.json``::

    {"type": "privfed.bundle-signature", "schema_version": 1, "algorithm": "ed25519",
     "public_key": "<base64 raw 32 bytes>", "public_key_fingerprint": "<sha256 hex of the raw key>",
     "signature": "<base64 64 bytes>"}

The signed message is ``b"privfed-bundle-manifest-v1\\0" + MANIFEST.json bytes``
(the prefix keeps the signature from meaning anything in another protocol).
Ed25519 (RFC 8032) through the ``cryptography`` package: deterministic
signatures, 32-byte keys, verification in well under a millisecond, and PEM
key files that OpenSSL and other tools read. A signature proves who signed only
to a reader who obtained the public key (or its fingerprint) from the publisher
through a channel they trust: the key embedded in ``SIGNATURE.json`` is
informative, never trusted by itself.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privfed.accounting.documents import not_a_file, parse_json
from privfed.bundle.manifest import MANIFEST_FILE, SIGNATURE_FILE, BundleError, BundleIntegrityError

__all__ = [
    "KEY_TYPES",
    "SIGNATURE_TYPE",
    "SignatureVerdict",
    "generate_signing_key",
    "key_fingerprint",
    "load_private_key",
    "load_public_key",
    "sign_bundle",
    "signature_document",
    "signature_verdict",
    "verify_signature",
]

SIGNATURE_TYPE = "privfed.bundle-signature"
_CONTEXT = b"privfed-bundle-manifest-v1\0"


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:  # pragma: no cover - the "sign" extra is not installed
        raise BundleError("signing and verifying bundles needs the 'cryptography' package: "
                          "pip install 'privfed[sign]'") from None
    return serialization, ed25519


def _raw_public(public_key: Any) -> bytes:
    serialization, _ = _crypto()
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_fingerprint(public_key: Any) -> str:
    """sha256 (hex) of the raw 32-byte Ed25519 public key: what a publisher announces."""
    return hashlib.sha256(_raw_public(load_public_key(public_key))).hexdigest()


#: Key types :func:`generate_signing_key` creates: Ed25519 (privfed's ``SIGNATURE.json``) or elliptic-curve P-256
#: (OpenSSF model signing, :mod:`privfed.bundle.model_signature`).
KEY_TYPES: tuple[str, ...] = ("ed25519", "ec")


def generate_signing_key(path: str | os.PathLike[str], *, key_type: str = "ed25519") -> tuple[Path, Path, str]:
    """Write a new key pair: ``path`` (private, PEM PKCS#8, mode 0600) and ``path.pub`` (public, PEM).

    ``key_type``: ``"ed25519"`` (default; privfed's own signature format) or ``"ec"``
    (NIST P-256, for ``--format model-signing``). Refuses to overwrite either file.
    Returns (private path, public path, fingerprint): for Ed25519 the sha256 of the
    raw 32-byte key, for EC the sha256 of the DER SubjectPublicKeyInfo.
    """
    import hashlib

    if key_type not in KEY_TYPES:
        raise ValueError(f"key_type must be one of {', '.join(KEY_TYPES)}, got {key_type!r}")
    serialization, ed25519 = _crypto()
    private_path = Path(path)
    public_path = private_path.with_name(private_path.name + ".pub")
    for target in (private_path, public_path):
        if target.exists() or target.is_symlink():
            raise FileExistsError(f"key file {target} already exists; refusing to overwrite a key")
    if key_type == "ec":
        from cryptography.hazmat.primitives.asymmetric import ec

        key = ec.generate_private_key(ec.SECP256R1())
        fingerprint = hashlib.sha256(key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)).hexdigest()
    else:
        key = ed25519.Ed25519PrivateKey.generate()
        fingerprint = key_fingerprint(key.public_key())
    private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
    descriptor = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as stream:
        stream.write(private_pem)
    with open(public_path, "xb") as stream:
        stream.write(public_pem)
    return private_path, public_path, fingerprint


def load_private_key(key: Any) -> Any:
    """An ``Ed25519PrivateKey`` from itself, a PEM file path or PEM bytes; ValueError/TypeError otherwise."""
    serialization, ed25519 = _crypto()
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key
    data = _key_bytes(key, "signing_key")
    try:
        loaded = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as error:
        raise ValueError(f"signing_key is not an unencrypted PEM private key: {error}") from None
    if not isinstance(loaded, ed25519.Ed25519PrivateKey):
        raise ValueError(f"signing_key must be an Ed25519 key, got {type(loaded).__name__}")
    return loaded


def load_public_key(key: Any) -> Any:
    """An ``Ed25519PublicKey`` from itself, a private key, a PEM file path or PEM bytes."""
    serialization, ed25519 = _crypto()
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.public_key()
    data = _key_bytes(key, "public_key")
    try:
        loaded = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as error:
        raise ValueError(f"public_key is not a PEM public key: {error}") from None
    if not isinstance(loaded, ed25519.Ed25519PublicKey):
        raise ValueError(f"public_key must be an Ed25519 key, got {type(loaded).__name__}")
    return loaded


def _key_bytes(key: Any, name: str) -> bytes:
    if isinstance(key, bytes):
        return key
    if isinstance(key, (str, os.PathLike)):
        path = Path(key)
        if not path.is_file():
            raise ValueError(f"{name} file {str(path)!r} {not_a_file(path)}")
        if path.stat().st_size > 64 << 10:
            raise ValueError(f"{name} file {str(path)!r} is too large to be a key")
        return path.read_bytes()
    raise TypeError(f"{name} must be an Ed25519 key, a PEM file path or PEM bytes, got {type(key).__name__}")


def signature_document(private_key: Any, manifest: bytes) -> bytes:
    """``SIGNATURE.json``'s bytes: ``private_key``'s signature of ``manifest``."""
    key = load_private_key(private_key)
    raw = _raw_public(key.public_key())
    document = {"type": SIGNATURE_TYPE, "schema_version": 1, "algorithm": "ed25519",
                "public_key": base64.b64encode(raw).decode(), "public_key_fingerprint": hashlib.sha256(raw).hexdigest(),
                "signature": base64.b64encode(key.sign(_CONTEXT + manifest)).decode()}
    return (json.dumps(document, indent=2) + "\n").encode()


@dataclass(frozen=True)
class SignatureVerdict:
    """What a bundle's signature establishes.

    ``status``: ``"signed"`` (valid, by the expected key), ``"unverified"`` (a
    valid signature, but no expected key was given: anyone could have made it),
    ``"unsigned"`` or ``"invalid"``. ``fingerprint`` is the signing key's, when known.
    """

    status: str
    fingerprint: str | None
    detail: str


def _signature_fields(files: Mapping[str, bytes]) -> tuple[bytes, bytes]:
    try:
        document = parse_json(files[SIGNATURE_FILE], SIGNATURE_FILE)
        if not isinstance(document, dict) or document.get("type") != SIGNATURE_TYPE \
                or document.get("algorithm") != "ed25519":
            raise ValueError("not a privfed Ed25519 signature document")
        raw = base64.b64decode(document["public_key"], validate=True)
        signature = base64.b64decode(document["signature"], validate=True)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as error:
        raise BundleIntegrityError(f"{SIGNATURE_FILE} is malformed: {error}") from None
    if len(raw) != 32 or len(signature) != 64:
        raise BundleIntegrityError(f"{SIGNATURE_FILE} is malformed: wrong key or signature length")
    return raw, signature


def signature_verdict(files: Mapping[str, bytes], public_key: Any = None) -> SignatureVerdict:
    """Check the signature of bundle ``files`` (read by :func:`privfed.bundle.manifest.read_bundle_files`).

    With ``public_key`` the bundle must be signed by that key; without it a valid
    signature is reported as unverified (its embedded key proves nothing alone).
    """
    if SIGNATURE_FILE not in files and public_key is None:  # no cryptography needed to say so
        return SignatureVerdict("unsigned", None, "unsigned: integrity only against accidents (anyone able to edit "
                                "the folder could rewrite it)")
    _, ed25519 = _crypto()
    from cryptography.exceptions import InvalidSignature

    expected = None if public_key is None else load_public_key(public_key)
    expected_fingerprint = None if expected is None else hashlib.sha256(_raw_public(expected)).hexdigest()
    if SIGNATURE_FILE not in files:
        return SignatureVerdict("invalid", None, f"unsigned, but a signature by {expected_fingerprint[:16]}… was "
                                "required")
    try:
        raw, signature = _signature_fields(files)
    except BundleIntegrityError as error:
        return SignatureVerdict("invalid", None, str(error))
    fingerprint = hashlib.sha256(raw).hexdigest()
    key = expected if expected is not None else ed25519.Ed25519PublicKey.from_public_bytes(raw)
    if expected is not None and fingerprint != expected_fingerprint:
        return SignatureVerdict("invalid", fingerprint, f"signed by key {fingerprint[:16]}…, not by the expected key "
                                f"{expected_fingerprint[:16]}…")
    try:
        key.verify(signature, _CONTEXT + files[MANIFEST_FILE])
    except (InvalidSignature, KeyError):
        return SignatureVerdict("invalid", fingerprint, f"{SIGNATURE_FILE} does not verify against {MANIFEST_FILE}: "
                                "the manifest or the signature was altered")
    if expected is None:
        return SignatureVerdict("unverified", fingerprint, f"signature valid, by key {fingerprint} — but no "
                                "public key was given to check whose it is (pass --public-key / public_key=)")
    label = os.fspath(public_key) if isinstance(public_key, (str, os.PathLike)) else "the key given"
    return SignatureVerdict("signed", fingerprint, f"signed by {label} (fingerprint {fingerprint})")


def verify_signature(files: Mapping[str, bytes], public_key: Any) -> str:
    """Require a valid signature by ``public_key``; return its fingerprint, else BundleIntegrityError."""
    verdict = signature_verdict(files, public_key)
    if verdict.status != "signed":
        raise BundleIntegrityError(f"bundle signature: {verdict.detail}")
    return verdict.fingerprint  # type: ignore[return-value]


def sign_bundle(path: str | os.PathLike[str], key: Any) -> str:
    """Sign an existing bundle's manifest with ``key`` (after verifying the manifest); return the bundle digest.

    ``SIGNATURE.json`` is written beside the bundle, then renamed into it, so a
    reader never sees half a signature.
    """
    from privfed.bundle.manifest import read_bundle_files, verify_manifest

    private_key = load_private_key(key)
    directory = Path(path)
    files = read_bundle_files(directory)
    digest = verify_manifest(files, where=str(directory))
    staging = directory.with_name(f".{directory.name}.{SIGNATURE_FILE}.{os.getpid()}")
    with open(staging, "xb") as stream:
        stream.write(signature_document(private_key, files[MANIFEST_FILE]))
        stream.flush()
        os.fsync(stream.fileno())
    os.replace(staging, directory / SIGNATURE_FILE)
    return digest
