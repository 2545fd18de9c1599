"""``MANIFEST.json``: the integrity root of a bundle, and reading a bundle folder once, safely.

The manifest lists **every** file of a bundle folder (ledger, model files,
evidence, card, card data: everything but the manifest itself and an optional
``SIGNATURE.json``) with its size and sha256::

    {"type": "privfed.bundle-manifest", "schema_version": 1,
     "files": {"MODEL_CARD.md": {"sha256": "…", "size": 2817}, "ledger.json": {…}, …}}

The **bundle digest** is the sha256 of ``MANIFEST.json``'s bytes. It pins every
byte of the bundle (the ledger's header, δ, budget and entries, the model, the
evidence, the card) and the manifest's schema version: it is the one value to
publish, to compare, and to sign (:mod:`privfed.bundle.signing`). A folder with a file
the manifest does not list, a listed file missing, a symbolic link, a
sub-folder or any other non-regular entry is refused.

Hashes alone protect against accidents (truncation, bit flips, a partial
copy), not against whoever can write to the folder: such a person can rewrite
any file and the manifest with it. Only a signature checked against a key
obtained out of band, or a digest compared with one published through a
trusted channel, ties a bundle to its publisher (``docs/ledger.md``, threat model).

:func:`read_bundle_files` reads each file once into memory through a
descriptor of the folder, refusing symbolic links without following them;
everything privfed checks and loads afterwards is those bytes (no second open,
so no time-of-check/time-of-use gap).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from privfed.accounting.fingerprint import canonical_json
from privfed.accounting.ledger import LedgerFormatError, LedgerIntegrityError
from privfed.accounting.ledger_entry import load_json

__all__ = [
    "MANIFEST_FILE",
    "MANIFEST_TYPE",
    "MAX_BUNDLE_FILES",
    "MAX_FILE_BYTES",
    "SIGNATURE_FILE",
    "BundleError",
    "BundleIntegrityError",
    "build_manifest",
    "read_bundle_files",
    "verify_manifest",
]

MANIFEST_FILE = "MANIFEST.json"
SIGNATURE_FILE = "SIGNATURE.json"
MANIFEST_TYPE = "privfed.bundle-manifest"
MANIFEST_SCHEMA_VERSION = 1
#: At most this many entries in a bundle folder.
MAX_BUNDLE_FILES = 32
#: Largest model or evidence file read into memory (4 GiB).
MAX_FILE_BYTES = 4 << 30
#: Smaller limits for the files privfed parses as JSON or text.
_LIMITS = {MANIFEST_FILE: 1 << 20, SIGNATURE_FILE: 64 << 10, "ledger.json": 64 << 20, "MODEL_CARD.md": 8 << 20,
           "card.json": 8 << 20, "architecture.json": 8 << 20}
_LEDGER_FILE = "ledger.json"


class BundleError(ValueError):
    """A bundle is malformed, or would need an unsafe step (unpickling, untrusted types) to load."""


class BundleIntegrityError(BundleError, LedgerIntegrityError):
    """A bundle's files do not match its manifest (or its ledger's records)."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _limit(name: str) -> int:
    return _LIMITS.get(name, MAX_FILE_BYTES)


# --- reading a folder once ----------------------------------------------------------------------------
def read_bundle_files(path: str | os.PathLike[str]) -> dict[str, bytes]:
    """Every entry of the bundle folder ``path``, read once: name → bytes.

    Raises :class:`BundleError` (one line) for a folder that is missing, is a
    symbolic link, holds a symbolic link, a sub-folder or a special file, holds
    more than :data:`MAX_BUNDLE_FILES` entries, or a file over its size limit.
    """
    directory = Path(path)
    if directory.is_symlink():
        raise BundleError(f"{directory} is a symbolic link; a bundle must be a real folder (refusing to follow it)")
    if not directory.is_dir():
        raise BundleError(f"{directory} is not a bundle folder (no such directory)")
    try:
        return _read_folder(directory)
    except OSError as error:  # a folder swapped for a link mid-read, a permission problem: one line
        raise BundleError(f"{directory} could not be read: {error.strerror or error}") from None


def _read_folder(directory: Path) -> dict[str, bytes]:
    # O_NONBLOCK: an entry swapped for a named pipe after its stat opens at once (and is refused) instead of waiting.
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    use_fd = os.open in os.supports_dir_fd and os.stat in os.supports_dir_fd
    dir_fd = os.open(directory, flags | getattr(os, "O_DIRECTORY", 0)) if use_fd else None
    try:
        names = sorted(os.listdir(dir_fd if dir_fd is not None else directory))
        if len(names) > MAX_BUNDLE_FILES:
            raise BundleError(f"{directory} holds {len(names)} entries; a bundle holds at most {MAX_BUNDLE_FILES}")
        files = {}
        for name in names:
            where = {"dir_fd": dir_fd} if dir_fd is not None else {}
            target = name if dir_fd is not None else directory / name
            info = os.stat(target, follow_symlinks=False, **where)
            if stat.S_ISLNK(info.st_mode):
                raise BundleError(f"{name} in {directory} is a symbolic link; a bundle holds only regular files")
            if not stat.S_ISREG(info.st_mode):
                raise BundleError(f"{name} in {directory} is not a regular file (a folder or a device); refused")
            if info.st_size > _limit(name):
                raise BundleError(f"{name} in {directory} has {info.st_size} bytes, over the limit of {_limit(name)}")
            try:
                descriptor = os.open(target, flags, **where)
            except OSError as error:
                raise BundleError(f"{name} in {directory} cannot be opened: {error.strerror}") from None
            with os.fdopen(descriptor, "rb") as stream:
                opened = os.fstat(stream.fileno())
                if not stat.S_ISREG(opened.st_mode):
                    raise BundleError(f"{name} in {directory} is not a regular file; refused")
                if opened.st_size > _limit(name):
                    raise BundleError(f"{name} in {directory} has {opened.st_size} bytes, over the limit of "
                                      f"{_limit(name)}")
                # Asking for the file's own size (not the limit): read(n) reserves n bytes up front, so asking for
                # the 4 GiB limit would reserve 4 GiB of address space for every file of every bundle read.
                data = stream.read(opened.st_size + 1)
            if len(data) != opened.st_size:
                raise BundleError(f"{name} in {directory} changed size while it was read; refused")
            files[name] = data
        return files
    finally:
        if dir_fd is not None:
            os.close(dir_fd)


# --- the manifest -------------------------------------------------------------------------------------
def build_manifest(files: Mapping[str, bytes]) -> bytes:
    """The canonical ``MANIFEST.json`` bytes listing ``files`` (name → content)."""
    listed = {name: {"sha256": _sha256(data), "size": len(data)} for name, data in sorted(files.items())
              if name not in (MANIFEST_FILE, SIGNATURE_FILE)}
    return canonical_json({"type": MANIFEST_TYPE, "schema_version": MANIFEST_SCHEMA_VERSION, "files": listed}) + b"\n"


def _parse_manifest(data: bytes) -> dict[str, dict[str, Any]]:
    try:
        document = load_json(data, MANIFEST_FILE)
    except LedgerFormatError as error:
        raise BundleError(str(error)) from None
    if not isinstance(document, dict) or document.get("type") != MANIFEST_TYPE:
        raise BundleError(f"{MANIFEST_FILE}: 'type' must be {MANIFEST_TYPE!r}")
    version = document.get("schema_version")
    if version != MANIFEST_SCHEMA_VERSION:
        raise BundleError(f"{MANIFEST_FILE}: schema_version must be {MANIFEST_SCHEMA_VERSION} (this privfed reads "
                          f"that one), got {version!r}")
    listed = document.get("files")
    if not isinstance(listed, dict) or _LEDGER_FILE not in listed:
        raise BundleError(f"{MANIFEST_FILE}: 'files' must be an object listing at least {_LEDGER_FILE}")
    for name, record in listed.items():
        plain = Path(name).name == name and "\\" not in name and "\0" not in name
        if name in (".", "..", MANIFEST_FILE, SIGNATURE_FILE) or not plain:
            raise BundleError(f"{MANIFEST_FILE} lists {name!r}, which is not a plain file name inside the bundle")
        if not (isinstance(record, dict) and isinstance(record.get("sha256"), str)
                and isinstance(record.get("size"), int) and not isinstance(record.get("size"), bool)):
            raise BundleError(f"{MANIFEST_FILE}: files[{name!r}] must be an object with 'sha256' and 'size'")
    return listed


def verify_manifest(files: Mapping[str, bytes], *, where: str = "the bundle") -> str:
    """Check ``files`` (from :func:`read_bundle_files`) against their manifest; return the bundle digest.

    Raises
    ------
    BundleError
        No manifest (a bundle written before privfed 0.2: its integrity cannot be
        verified), or a malformed one.
    BundleIntegrityError
        A file is not listed, missing, or differs in size or sha256 from its record.
    """
    if MANIFEST_FILE not in files:
        if _LEDGER_FILE in files:
            raise BundleError(
                f"{where} has no {MANIFEST_FILE}: a legacy bundle (written before bundles carried a manifest) whose "
                "integrity cannot be verified; re-save the model with privfed.save_bundle, or pass allow_legacy=True "
                "to load it knowingly unverified"
            )
        raise BundleError(f"{where} is not a privfed bundle: it has no {MANIFEST_FILE} and no {_LEDGER_FILE}")
    listed = _parse_manifest(files[MANIFEST_FILE])
    unlisted = sorted(set(files) - set(listed) - {MANIFEST_FILE, SIGNATURE_FILE})
    if unlisted:
        raise BundleIntegrityError(f"{where} holds {', '.join(unlisted)}, not in {MANIFEST_FILE}: added after the "
                                   "bundle was written; refused")
    for name, record in sorted(listed.items()):
        if name not in files:
            raise BundleIntegrityError(f"{name}, listed in {MANIFEST_FILE}, is missing from {where}")
        data = files[name]
        if len(data) != record["size"] or _sha256(data) != record["sha256"]:
            raise BundleIntegrityError(
                f"{name} does not match {MANIFEST_FILE} ({len(data)} bytes, sha256 {_sha256(data)[:16]}…; recorded "
                f"{record['size']} bytes, {str(record['sha256'])[:16]}…): modified or replaced after it was written"
            )
    return _sha256(files[MANIFEST_FILE])
