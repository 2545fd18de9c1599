"""Round checkpoints: a long federated run saved after every round and resumed where it stopped.

A checkpoint is one ``.npz`` file of plain numeric arrays plus a JSON header stored as a string
array. Nothing in it is executable: it is read with ``numpy.load(allow_pickle=False)`` and the
header with privfed's JSON reader (``parse_json``: no duplicate keys). Each save goes to a
temporary file in the same folder, which is then
renamed over the previous checkpoint, so an interrupted write leaves the last complete round's
checkpoint in place. The file is readable by its owner only: it holds weights trained on the
clients' data.

Every checkpoint carries the fingerprint of its run (:func:`run_fingerprint`: the estimator's
parameters and a SHA-256 of the data) and is refused for any other run, so a file left by an
earlier experiment is never silently continued with other settings or other data.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from ...accounting.documents import parse_json, read_npz

FORMAT = "privfed-round-checkpoint"
VERSION = 1
_HEADER = "__header__"


def _describe(value: Any) -> Any:
    """A JSON-able, process-independent description of an estimator parameter."""
    if hasattr(value, "get_params") and not isinstance(value, type):
        return {"class": f"{type(value).__module__}.{type(value).__qualname__}",
                "params": {name: _describe(v) for name, v in sorted(value.get_params(deep=False).items())}}
    if isinstance(value, np.ndarray):
        return {"array_sha256": hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest(),
                "shape": list(value.shape), "dtype": value.dtype.str}
    if isinstance(value, (list, tuple)):
        return [_describe(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _describe(v) for k, v in sorted(value.items(), key=lambda item: str(item[0]))}
    if callable(value):  # a module function: its name (its address changes from process to process)
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', type(value).__qualname__)}"
    return repr(value)


def run_fingerprint(parameters: Mapping[str, Any], arrays: Sequence[np.ndarray]) -> str:
    """SHA-256 of the run's parameters (estimators described by class and parameters) and data arrays."""
    digest = hashlib.sha256(json.dumps(_describe(dict(parameters)), sort_keys=True).encode())
    for array in arrays:
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class RoundCheckpoint:
    """The checkpoint file of one run: :meth:`save` after a round, :meth:`load` before the first.

    ``state`` is a JSON-serialisable dict (round counters, histories, random generator states),
    ``arrays`` named numeric arrays (weights, buffers); names must not start with ``__``.
    """

    path: Path
    fingerprint: str

    @classmethod
    def at(cls, path: str | os.PathLike[str], fingerprint: str) -> RoundCheckpoint:
        """The checkpoint at ``path`` (an ``.npz`` file, existing or not) of the run ``fingerprint``."""
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"checkpoint must be a path to an .npz file, got {path!r}")
        path = Path(path)
        if path.suffix != ".npz":
            raise ValueError(f"checkpoint must be a path ending in .npz, got {str(path)!r}")
        if not path.parent.is_dir():
            raise ValueError(f"checkpoint's folder {str(path.parent)!r} does not exist")
        if path.is_dir():
            raise ValueError(f"checkpoint {str(path)!r} is a folder, expected an .npz file")
        return cls(path, fingerprint)

    def load(self) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
        """(state, arrays) saved for this run, or None when there is no checkpoint yet.

        Raises ValueError if the file is not a privfed round checkpoint or belongs to another run.
        """
        if not self.path.exists():
            return None
        try:
            stored = read_npz(self.path, "the file")
            header = parse_json(str(stored[_HEADER][()]), "its header")
            arrays = {name: array for name, array in stored.items() if name != _HEADER}
        except (OSError, ValueError, KeyError) as error:
            raise ValueError(f"checkpoint {str(self.path)!r} is not a privfed round checkpoint ({error})") from None
        if header.get("format") != FORMAT or header.get("version") != VERSION:
            raise ValueError(f"checkpoint {str(self.path)!r} is not a privfed round checkpoint of version {VERSION}")
        if header.get("fingerprint") != self.fingerprint:
            raise ValueError(
                f"checkpoint {str(self.path)!r} belongs to another run (other parameters or data); "
                "delete it or give another checkpoint path")
        return header["state"], arrays

    def save(self, state: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        """Write atomically: a temporary file in the same folder renamed over the previous checkpoint."""
        if any(name.startswith("__") or name == "allow_pickle" for name in arrays):  # np.savez's own keyword
            raise ValueError(f"array names must not start with '__' nor be 'allow_pickle', got {sorted(arrays)!r}")
        arrays = {name: np.asarray(array) for name, array in arrays.items()}
        if any(array.dtype.kind not in "biuf" for array in arrays.values()):
            raise TypeError(f"checkpoint arrays must be numeric (never objects, which need pickle), got "
                            f"{ {name: array.dtype.str for name, array in arrays.items()} !r}")
        header = json.dumps({"format": FORMAT, "version": VERSION, "fingerprint": self.fingerprint,
                             "state": dict(state)})
        handle, temporary = tempfile.mkstemp(prefix=self.path.name, suffix=".tmp.npz", dir=self.path.parent)
        try:
            with os.fdopen(handle, "wb") as file:
                np.savez(file, **cast(dict[str, Any], {_HEADER: np.array(header), **arrays}))
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


def estimator_checkpoint(path: str | os.PathLike[str] | None, estimator: Any, arrays: Sequence[np.ndarray], *,
                         ignore: Sequence[str]) -> RoundCheckpoint | None:
    """The checkpoint at ``path`` of a run of ``estimator`` on ``arrays`` (None: none asked).

    The run's fingerprint covers the estimator's parameters but those in ``ignore`` (settings that do not
    change the result, such as ``n_jobs`` and ``progress``) and the data ``arrays``.
    """
    if path is None:
        return None
    parameters = {k: v for k, v in estimator.get_params(deep=False).items() if k not in ignore}
    return RoundCheckpoint.at(path, run_fingerprint(parameters, arrays))
