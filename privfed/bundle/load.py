"""Reading a bundle: :func:`load_bundle`, which verifies every byte before it builds the model.

None of a bundle's formats can execute code when read: :func:`load_bundle` never unpickles (no ``pickle``,
``joblib.load`` or ``torch.load``), loads ``.npz`` with ``allow_pickle=False``, reads each file once into memory,
checks it against the manifest (:mod:`privfed.bundle.manifest`) and the ledger's records, and loads the model from
those very bytes (:func:`privfed.bundle.families.read_model`). :func:`open_bundle_files` and
:func:`bundle_ledger` are the same steps on files already read, for the audit and the evidence pack.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from privfed.accounting.documents import check_declared_work, read_npz
from privfed.accounting.fingerprint import sha256_hex
from privfed.accounting.ledger import Ledger
from privfed.accounting.ledger_entry import load_json
from privfed.bundle.families import FAMILY_FILES, read_model
from privfed.bundle.layout import EVIDENCE_FILE, LEDGER_FILE
from privfed.bundle.manifest import MANIFEST_FILE, BundleError, BundleIntegrityError, read_bundle_files, verify_manifest

__all__ = ["LegacyBundleWarning", "bundle_digest", "bundle_ledger", "ledger_document", "load_bundle",
           "open_bundle_files", "read_evidence"]


class LegacyBundleWarning(UserWarning):
    """A bundle without a manifest was loaded with ``allow_legacy=True``: its integrity is unverifiable."""


def bundle_digest(path: str | os.PathLike[str]) -> str:
    """The bundle digest (sha256 of ``MANIFEST.json``) after checking every file against the manifest.

    Publish it through a channel readers trust, or sign it (``privfed sign``).
    """
    return verify_manifest(read_bundle_files(path), where=str(path))


def load_bundle(
    path: str | os.PathLike[str],
    *,
    module: Any = None,
    model_class: type | None = None,
    module_fn: Callable[..., Any] | None = None,
    public_key: Any = None,
    allow_legacy: bool = False,
    signature: str | os.PathLike[str] | None = None,
) -> tuple[Any, Ledger]:
    """Load a bundle written by :func:`save_bundle`, verifying it first.

    Every file is read once into memory. In order: the manifest (every file
    listed, sizes and sha256 match, no extra file, no symbolic link), the
    signature when ``public_key`` is given; the ledger's format, chain of entries
    and recorded totals; the model files and evidence against the ledger's
    records; the evidence against each entry's commitment; every entry's curves
    rebuilt from its public parameters (:meth:`Ledger.verify`, the audit's own
    recomputation: data-independent curves always, data-dependent ones from the
    evidence when shipped); and only then the model, from the verified bytes.

    Parameters
    ----------
    path:
        The bundle folder.
    module:
        For a plain ``torch.nn.Module`` bundle: a module of the same architecture,
        into which the state dict is loaded.
    model_class:
        For a safe-state bundle whose class is outside privfed's packages: the class
        to rebuild it with (its name must match the recorded one).
    module_fn:
        Passed to ``from_safe_state`` for safe-state bundles that need it.
    public_key:
        The publisher's public key: Ed25519 (object, PEM path or bytes; the bundle must
        carry a valid ``SIGNATURE.json`` by that key) or elliptic-curve (PEM path or
        bytes; the bundle must verify against its OpenSSF model-signing signature,
        ``signature``), every key type ``privfed audit --public-key`` accepts. The
        signature is checked over the bytes read once, which are the bytes then
        loaded. Default: no signature required.
    allow_legacy:
        Load a bundle written before bundles carried a manifest, with a
        :class:`LegacyBundleWarning`: its integrity cannot be verified. Default: refuse it.
    signature:
        With an elliptic-curve ``public_key``: the model-signing signature file
        (default ``BUNDLE.sig`` beside the folder; never followed through a symbolic link).

    Returns
    -------
    (model, ledger)
        The ledger holds the evidence when the bundle ships it (``ledger.evidence()``).

    Raises
    ------
    BundleIntegrityError
        A file does not match the manifest or its record, or the signature does not verify.
    BundleError
        The bundle is malformed, unsafe to load, or a legacy bundle without ``allow_legacy``.
    LedgerFormatError, LedgerIntegrityError
        The ledger itself is malformed or inconsistent.
    """
    files = read_bundle_files(path)
    try:
        verify_manifest(files, where=str(path))
    except BundleError:
        if not (allow_legacy and MANIFEST_FILE not in files and LEDGER_FILE in files):
            raise
        warnings.warn(f"{path} is a legacy bundle without {MANIFEST_FILE}: loaded with its integrity unverifiable "
                      "(only the ledger's own records were checked)", LegacyBundleWarning, stacklevel=2)
    if signature is not None and public_key is None:
        raise TypeError("signature is a model-signing signature file: give it with public_key= (the publisher's "
                        "elliptic-curve key)")
    if public_key is not None:
        _verify_publisher(path, files, public_key, signature)
    return open_bundle_files(files, module=module, model_class=model_class, module_fn=module_fn)


def _verify_publisher(path: str | os.PathLike[str], files: Mapping[str, bytes], public_key: Any,
                      signature: str | os.PathLike[str] | None) -> None:
    """Require a valid publisher signature over ``files``: Ed25519 or OpenSSF model signing (EC key)."""
    from privfed.bundle.model_signature_verify import is_elliptic_curve_key, model_signing_verdict
    from privfed.bundle.signing import verify_signature

    if not is_elliptic_curve_key(public_key):
        if signature is not None:
            raise TypeError("signature is a model-signing signature file, which needs an elliptic-curve public_key")
        verify_signature(files, public_key)
        return
    verdict = model_signing_verdict(path, public_key, signature=signature, files=files)
    if verdict.status != "signed":
        raise BundleIntegrityError(f"bundle signature: {verdict.detail}")


def ledger_document(data: bytes) -> dict[str, Any]:
    """``ledger.json`` parsed by the strict JSON reader and refused when it declares more work than the budget.

    The budget (:func:`~privfed.accounting.documents.check_declared_work`) is checked
    before any entry is rebuilt or any total recomputed: a small resealed ledger
    cannot make loading or auditing work for minutes.
    """
    document = load_json(data, LEDGER_FILE)
    check_declared_work(document, LEDGER_FILE, error=BundleError)
    return document


def bundle_ledger(files: Mapping[str, bytes]) -> Ledger:
    """The ledger of verified bundle files, its records checked against the files (no curve recomputed)."""
    if LEDGER_FILE not in files:
        raise BundleError(f"not a privfed bundle: it has no {LEDGER_FILE}")
    ledger = Ledger.from_dict(ledger_document(files[LEDGER_FILE]))
    fingerprint = ledger.model_fingerprint
    if not fingerprint or not isinstance(fingerprint.get("files"), dict) or not fingerprint["files"]:
        raise BundleError(f"{LEDGER_FILE} records no model files (ledger.model.files): not a bundle's ledger")
    if fingerprint.get("family") not in FAMILY_FILES:
        raise BundleError(
            f"the bundle's model family {fingerprint.get('family')!r} is not one privfed loads safely "
            f"({', '.join(FAMILY_FILES)}); refusing — privfed never unpickles a model"
        )
    if not isinstance(fingerprint.get("class"), str):
        raise BundleError(f"{LEDGER_FILE}: ledger.model.class must be a string, got {fingerprint.get('class')!r}")
    if sorted(fingerprint["files"]) != sorted(FAMILY_FILES[fingerprint["family"]]):
        raise BundleError(
            f"{LEDGER_FILE}: a {fingerprint['family']} model must list exactly the files "
            f"{list(FAMILY_FILES[fingerprint['family']])}, got {sorted(fingerprint['files'])}"
        )
    for name, recorded in fingerprint["files"].items():
        _check_file(files, name, recorded, what="model file")
    if ledger.evidence_fingerprint is not None:
        _check_file(files, EVIDENCE_FILE, ledger.evidence_fingerprint.get("sha256"), what="evidence file")
    elif EVIDENCE_FILE in files:
        raise BundleIntegrityError(f"{EVIDENCE_FILE} is present but {LEDGER_FILE} does not reference it: it was added")
    return ledger


def read_evidence(data: bytes, *, what: str = EVIDENCE_FILE) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` held in memory, read without pickle, within a memory budget; BundleError otherwise.

    :func:`privfed.accounting.documents.read_npz`: the budget is checked on the archive's declared sizes before
    anything is decompressed, so a small archive cannot make the reader allocate gigabytes.
    """
    try:
        return read_npz(data, what)
    except ValueError as error:
        raise BundleError(str(error)) from None


def open_bundle_files(
    files: Mapping[str, bytes], *, module: Any = None, model_class: type | None = None,
    module_fn: Callable[..., Any] | None = None,
) -> tuple[Any, Ledger]:
    """(model, ledger) from bundle files already read and checked against their manifest."""
    ledger = bundle_ledger(files)
    if ledger.evidence_fingerprint is not None:
        ledger = Ledger.from_dict(ledger_document(files[LEDGER_FILE]), evidence=read_evidence(files[EVIDENCE_FILE]))
    ledger.verify()
    model = read_model(ledger.model_fingerprint, files, module=module, model_class=model_class, module_fn=module_fn)
    return model, ledger


def _check_file(files: Mapping[str, bytes], name: str, recorded: object, *, what: str) -> None:
    if not isinstance(name, str) or Path(name).name != name:
        raise BundleError(f"{LEDGER_FILE} names the {what} {name!r}, which is not a plain file name")
    if name not in files:
        raise BundleIntegrityError(f"the {what} {name} recorded in {LEDGER_FILE} is missing from the bundle")
    actual = sha256_hex(files[name])
    if actual != recorded:
        raise BundleIntegrityError(
            f"the {what} {name} has sha256 {actual} but {LEDGER_FILE} records {recorded}: "
            "the file was modified or replaced after the bundle was written"
        )
