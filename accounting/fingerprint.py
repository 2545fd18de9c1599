"""sha256 fingerprints for ledgers: canonical JSON, files, public data and committed evidence.

Two kinds of fingerprint, for two kinds of data:

* **Public data** (the public transfer set, model files, the ledger itself) is
  fingerprinted with a plain sha256: anyone holding the data can check it.
* **Private evidence** (vote histograms, per-query statistics) is *committed to*
  with a salted sha256, ``sha256(tag ‖ salt ‖ arrays)`` with a fresh 32-byte
  random salt kept beside the arrays in the private evidence file. A plain hash
  of a small vote matrix could be inverted by hashing every candidate matrix; the
  salt makes the published digest reveal nothing about the votes (hiding) while
  still pinning them down (binding).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "SALT_BYTES",
    "canonical_json",
    "commit_evidence",
    "data_fingerprint",
    "file_sha256",
    "new_salt",
    "sha256_hex",
]

#: Length of the random salt of an evidence commitment.
SALT_BYTES = 32

_EVIDENCE_TAG = b"privfed-evidence-commitment-v1\0"
_DATA_TAG = b"privfed-data-fingerprint-v1\0"


def canonical_json(value: Any) -> bytes:
    """UTF-8 JSON with sorted keys and no whitespace: equal documents give equal bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def sha256_hex(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _update_with_arrays(digest: "hashlib._Hash", arrays: Mapping[str, np.ndarray]) -> None:
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        if array.dtype == object:
            raise TypeError(f"array {name!r} has dtype object; only numeric arrays can be fingerprinted")
        header = f"{name}\0{array.dtype.str}\0{array.shape}\0".encode()
        digest.update(len(header).to_bytes(8, "little") + header)
        digest.update(array.tobytes())


def data_fingerprint(arrays: Mapping[str, np.ndarray]) -> str:
    """Plain sha256 of named numeric arrays (names, dtypes, shapes and bytes), for *public* data.

    Examples
    --------
    >>> import numpy as np
    >>> a = data_fingerprint({"X": np.zeros((2, 3))})
    >>> a == data_fingerprint({"X": np.zeros((2, 3))}), a == data_fingerprint({"X": np.zeros((3, 2))})
    (True, False)
    """
    digest = hashlib.sha256(_DATA_TAG)
    _update_with_arrays(digest, arrays)
    return digest.hexdigest()


def new_salt() -> np.ndarray:
    """A fresh random salt (uint8 array of :data:`SALT_BYTES`) for :func:`commit_evidence`."""
    return np.frombuffer(secrets.token_bytes(SALT_BYTES), dtype=np.uint8).copy()


def commit_evidence(arrays: Mapping[str, np.ndarray], salt: np.ndarray) -> str:
    """Salted sha256 commitment to private arrays: hides them, yet changes if any byte changes."""
    salt = np.asarray(salt)
    if salt.dtype != np.uint8 or salt.shape != (SALT_BYTES,):
        raise ValueError(f"salt must be a uint8 array of shape ({SALT_BYTES},), got {salt.dtype} {salt.shape}")
    digest = hashlib.sha256(_EVIDENCE_TAG + salt.tobytes())
    _update_with_arrays(digest, arrays)
    return digest.hexdigest()
