"""Reading what users write: ``.npy`` arrays without pickle, and the keys and numbers of JSON/TOML documents.

Every reader of a user's file (mechanism files, claims files, sweep configurations,
vote matrices) goes through these checks, so that each mistake is answered the same
way: one ``ValueError`` naming the file or key, what is wrong and what is valid.

* :func:`load_npy` reads a ``.npy`` file that must hold a plain numeric array. A
  file that is not ``.npy`` at all, a truncated one, or one holding Python objects
  is refused as such; privfed never unpickles (numpy's own message would suggest
  ``allow_pickle=True``, the opposite of this rule).
* :func:`unknown_key_message` names an unknown key, the valid keys and the closest
  valid key (``difflib``), so that a misspelled optional parameter is refused rather
  than silently replaced by its default.
* :func:`check_finite_numbers` refuses ``inf`` and ``nan`` anywhere in a document
  (TOML has them; JSON readers accept ``Infinity``), naming the key.
* :func:`parse_json` is the one JSON reader for everything privfed parses (ledgers,
  claims files, manifests, signatures, bundles' side files, mechanism files, messages):
  a duplicate key in one object is refused (JSON parsers keep the last, so a file could
  say two things and mean one), and so is nesting deeper than :data:`MAX_JSON_DEPTH`,
  each as one ``ValueError`` line, never a ``RecursionError``.
* :func:`parse_toml` is the one TOML reader: malformed TOML, nesting deeper than
  :data:`MAX_JSON_DEPTH` and bytes that are not UTF-8 are one ``ValueError`` line.
* :func:`check_declared_work` is the work budget of a document, computed from what it
  declares before anything is computed: at most :data:`MAX_DECLARED_EVENTS` dp-accounting
  event nodes (each one is a privacy-loss distribution or an RDP curve to build) and
  :data:`MAX_DECLARED_RECORDS` mechanism records, so that a small file cannot make
  a reader work for minutes.
* :func:`read_npz` is the one ``.npz`` reader (bundle evidence, party and public data, audit samples, datasets,
  checkpoints): without pickle, and within a memory budget computed from the archive's declared sizes before
  anything is decompressed or allocated.
"""

from __future__ import annotations

import difflib
import io
import json
import math
import os
import tomllib
import zipfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ._checks import MAX_EPSILON_PER_ANSWER

__all__ = [
    "MAX_EPSILON_PER_ANSWER",
    "NPY_MAGIC",
    "check_answer_epsilon",
    "check_declared_work",
    "check_finite_numbers",
    "declared_work",
    "MAX_DECLARED_EVENTS",
    "MAX_DECLARED_RECORDS",
    "MAX_JSON_DEPTH",
    "NPZ_ALLOWANCE",
    "NPZ_EXPANSION",
    "NPZ_MAX_MEMBERS",
    "load_npy",
    "read_npz",
    "not_a_file",
    "parse_json",
    "parse_toml",
    "reject_json_constant",
    "unknown_key_message",
]

#: The first bytes of every ``.npy`` file (numpy's format specification).
NPY_MAGIC = b"\x93NUMPY"
#: Properties through which mechanisms state the pure ε of one answer.
_ANSWER_EPSILONS = ("epsilon_per_query", "epsilon_per_label")


def load_npy(path: str | Path, name: str) -> np.ndarray:
    """The array of a ``.npy`` file, read with ``allow_pickle=False``.

    Parameters
    ----------
    path : str or Path
        The file.
    name : str
        How the message names the file (an argument such as ``"VOTES file"`` or a key).

    Raises
    ------
    ValueError
        The file does not exist, cannot be read, is not a ``.npy`` file, is truncated
        or corrupt, or holds Python objects.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{name} {str(path)!r} {not_a_file(path)}")
    try:
        with path.open("rb") as handle:
            if handle.read(len(NPY_MAGIC)) != NPY_MAGIC:
                raise ValueError(f"{name} {str(path)!r} is not a NumPy .npy file (it lacks the .npy header; "
                                 "save the array with numpy.save)")
            handle.seek(0)
            try:
                _check_npy_header(handle)
                handle.seek(0)
                return np.lib.format.read_array(handle, allow_pickle=False)
            except ValueError as error:
                if "pickle" in str(error).lower():
                    raise ValueError(f"{name} {str(path)!r} holds Python objects (an object array), not a numeric "
                                     "array; privfed never unpickles: save a numeric array with numpy.save") from None
                raise ValueError(f"{name} {str(path)!r} is not a valid NumPy .npy file (truncated or corrupt: "
                                 f"{error})") from None
            except (EOFError, SyntaxError, TypeError) as error:
                raise ValueError(f"{name} {str(path)!r} is not a valid NumPy .npy file (truncated or corrupt: "
                                 f"{error})") from None
    except OSError as error:
        raise ValueError(f"{name} {str(path)!r} could not be read: {error.strerror or error}") from None


#: What an ``.npz`` may unpack to: :data:`NPZ_EXPANSION` times its own size plus :data:`NPZ_ALLOWANCE` bytes.
#: np.savez stores arrays uncompressed (ratio 1); a compressed archive of votes rarely exceeds 20, the shipped
#: datasets' compact copies at most 36.
NPZ_EXPANSION = 64
NPZ_ALLOWANCE = 16 << 20
#: Most arrays an ``.npz`` read by privfed may hold.
NPZ_MAX_MEMBERS = 4096


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def read_npz(source: bytes | str | Path, what: str) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` (bytes in memory, or a path), read without pickle and within a memory budget.

    The budget is checked on the archive's declared sizes before anything is decompressed: at most
    :data:`NPZ_MAX_MEMBERS` arrays, together unpacking to at most ``NPZ_EXPANSION × size + NPZ_ALLOWANCE``
    bytes (``size``: the archive's), and each array's header (shape × item size) no larger than its member
    (numpy allocates what the header declares before reading): a small archive cannot make the reader
    allocate gigabytes. An archive written by ``numpy.savez`` (uncompressed) is always within it.

    Parameters
    ----------
    source : bytes, str or Path
        The archive's bytes, or its path.
    what : str
        How messages name the archive (e.g. ``"evidence.npz"``, ``"data-path '/x.npz'"``).

    Returns
    -------
    dict of str to ndarray
        The arrays by name.

    Raises
    ------
    ValueError
        One line: the archive is over the budget, holds a member that is not a ``.npy`` array or an array
        that would need unpickling, or is not a readable ``.npz``.
    """
    try:
        if isinstance(source, bytes):
            size, opened = len(source), zipfile.ZipFile(io.BytesIO(source))
        else:
            size, opened = os.stat(source).st_size, zipfile.ZipFile(source)
        budget = NPZ_EXPANSION * size + NPZ_ALLOWANCE
        with opened as archive:
            members = archive.infolist()
            if len(members) > NPZ_MAX_MEMBERS:
                raise _Refused(f"{what} holds {len(members)} arrays; at most {NPZ_MAX_MEMBERS} are read")
            declared = sum(member.file_size for member in members)
            if declared > budget:
                raise _Refused(f"{what} declares {declared} bytes of arrays in a {size}-byte archive, over the "
                               f"reader's budget of {budget} bytes; refused (a compression bomb? numpy.savez, "
                               "uncompressed, is always read)")
            arrays = {}
            for member in members:
                if not member.filename.endswith(".npy"):
                    raise _Refused(f"{what} holds {member.filename!r}, which is not a .npy array")
                with archive.open(member) as stream:
                    version = np.lib.format.read_magic(stream)
                    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                   else np.lib.format.read_array_header_2_0)
                    shape, _, dtype = read_header(stream)
                    if dtype.hasobject:
                        raise ValueError("Object arrays cannot be loaded when allow_pickle=False")
                    declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
                    if declared > member.file_size:
                        raise _Refused(f"{what}: array {member.filename!r} declares {declared} bytes in a "
                                       f"{member.file_size}-byte member; refused")
                with archive.open(member) as stream:
                    arrays[member.filename[:-4]] = np.lib.format.read_array(stream, allow_pickle=False)
            return arrays
    except _Refused:
        raise
    except ValueError as error:
        if "pickle" in str(error).lower():
            raise _Refused(f"{what} holds Python objects (an object array), which would need unpickling; "
                           "privfed never unpickles: save numeric arrays with numpy.savez") from None
        raise _Refused(f"{what} is not a readable .npz: {_first_line(error)}") from None
    except (OSError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile, AttributeError, SyntaxError,
            TypeError, NotImplementedError, RuntimeError) as error:
        raise _Refused(f"{what} is not a readable .npz: {_first_line(error)}") from None


class _Refused(ValueError):
    """:func:`read_npz`'s own one-line refusal, told apart from numpy's ``ValueError`` while reading."""


def _check_npy_header(handle: Any) -> None:
    """Refuse a ``.npy`` whose header declares more data than the file holds (numpy allocates what it declares)."""
    version = np.lib.format.read_magic(handle)
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = read_header(handle)
    declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
    held = os.fstat(handle.fileno()).st_size - handle.tell()
    if not dtype.hasobject and declared > held:
        raise ValueError(f"its header declares {declared} bytes of data, the file holds {held}")


def not_a_file(path: Path) -> str:
    """Why ``path`` is not a readable regular file, in words: "does not exist", "is a folder", "is a FIFO"...

    For one-line messages such as ``f"claims file {path!r} {not_a_file(path)}"``: a named pipe or a
    device is not reported as missing.
    """
    if path.is_symlink() and not path.exists():
        return "is a symbolic link to nothing"
    if not path.exists():
        return "does not exist"
    if path.is_dir():
        return "is a folder, not a file"
    if path.is_fifo():
        return "is a named pipe (FIFO), not a regular file"
    if path.is_socket():
        return "is a socket, not a regular file"
    if path.is_block_device() or path.is_char_device():
        return "is a device, not a regular file"
    return "is not a regular file"


def unknown_key_message(key: str, valid: Iterable[str], where: str) -> str:
    """``"<where>: unknown key 'x'; valid keys: [...]; did you mean 'y'?"``."""
    valid = sorted(set(valid))
    close = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{where}: unknown key {key!r}; valid keys: {valid}{hint}"


def check_finite_numbers(document: object, where: str) -> None:
    """Raise ``ValueError`` naming the first ``inf`` or ``nan`` found anywhere in ``document``."""
    if isinstance(document, float) and not math.isfinite(document):
        raise ValueError(f"{where} must be a finite number, got {document!r}")
    if isinstance(document, Mapping):
        for key, value in document.items():
            check_finite_numbers(value, f"{where}.{key}" if where else str(key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            check_finite_numbers(value, f"{where}[{index}]")


def check_answer_epsilon(mechanism: object, where: str) -> None:
    """Refuse a mechanism whose one-answer ε (``epsilon_per_query``/``epsilon_per_label``) exceeds 709.

    Beyond it, exp(ε) overflows a float and the accounting cannot represent the
    release; checked where a file is parsed, before any accounting.
    """
    for name in _ANSWER_EPSILONS:
        value = getattr(mechanism, name, None)
        if isinstance(value, float) and value > MAX_EPSILON_PER_ANSWER:
            raise ValueError(f"{where}: {name} = {value:g} is beyond what privfed can account: the ε of one answer "
                             f"must be at most {MAX_EPSILON_PER_ANSWER:g} (exp(ε) overflows a float beyond it)")


def reject_json_constant(constant: str) -> float:
    """``json.loads(..., parse_constant=reject_json_constant)``: ``Infinity``, ``-Infinity`` and ``NaN`` are refused."""
    raise ValueError(f"{constant} is not a finite number (JSON has no {constant}; privacy parameters must be finite)")


#: Deepest nesting of arrays and objects a JSON document privfed reads may have; privfed's own use about 12.
MAX_JSON_DEPTH = 64


def _refuse_duplicates(what: str, error: type[ValueError]) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        document: dict[str, Any] = {}
        for key, value in pairs:
            if key in document:
                raise error(f"{what} has the key {key!r} twice in one object; refused (a JSON reader keeps one of "
                            "them, so the file could be read as saying something it does not)")
            document[key] = value
        return document

    return hook


def parse_json(text: str | bytes, what: str, *, error: type[ValueError] = ValueError, finite: bool = False) -> Any:
    """Parse untrusted JSON text ``what``: one ``error`` line for invalid JSON, a duplicate key or deep nesting.

    ``finite=True`` also refuses ``Infinity``, ``-Infinity`` and ``NaN``
    (:func:`reject_json_constant`). Nesting deeper than :data:`MAX_JSON_DEPTH` is
    refused whether or not Python's parser itself would recurse that far.
    """
    too_deep = f"{what} is nested more than {MAX_JSON_DEPTH} levels deep; refused"
    try:
        document = json.loads(text, object_pairs_hook=_refuse_duplicates(what, error),
                              parse_constant=reject_json_constant if finite else None)
    except RecursionError:
        raise error(too_deep) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as failure:
        raise error(f"{what} is not valid JSON: {failure}") from None
    except error:
        raise
    except ValueError as failure:  # a refused constant
        raise error(f"{what}: {failure}") from None
    _check_depth(document, too_deep, error)
    return document


def _check_depth(document: Any, too_deep: str, error: type[ValueError]) -> None:
    stack = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise error(too_deep)
            stack.extend((item, depth + 1) for item in (value.values() if isinstance(value, dict) else value))


def parse_toml(text: str | bytes, what: str, *, error: type[ValueError] = ValueError) -> dict[str, Any]:
    """Parse untrusted TOML text ``what``: one ``error`` line for malformed TOML, bad UTF-8 or deep nesting.

    TOML forbids duplicate keys itself; ``inf`` and ``nan`` are left to :func:`check_finite_numbers`.
    """
    too_deep = f"{what} is nested more than {MAX_JSON_DEPTH} levels deep; refused"
    try:
        document = tomllib.loads(text.decode("utf-8") if isinstance(text, bytes) else text)
    except RecursionError:
        raise error(too_deep) from None
    except UnicodeDecodeError as failure:
        raise error(f"{what} is not UTF-8 text: {failure}") from None
    except tomllib.TOMLDecodeError as failure:
        raise error(f"{what} is not valid TOML: {failure}") from None
    _check_depth(document, too_deep, error)
    return document


#: Most dp-accounting event nodes (``{"event": "gaussian", ...}``; a composed event's members each count) one
#: document may declare. Each is a privacy-loss distribution or an RDP curve to build, up to seconds apiece on a
#: fine grid; privfed's own ledgers and the shipped claims files declare fewer than ten.
MAX_DECLARED_EVENTS = 256
#: Most mechanism records (objects with a ``kind``) one document may declare: each is rebuilt and accounted.
MAX_DECLARED_RECORDS = 10_000


def declared_work(document: object) -> dict[str, int]:
    """What ``document`` (parsed JSON or TOML) declares to compute: ``{"events": …, "records": …}``.

    Counted by one walk over the parsed document, before any mechanism is rebuilt:
    ``events`` are dp-accounting event nodes (objects whose ``event`` is a string),
    ``records`` mechanism records (objects whose ``kind`` is a string).
    """
    events = records = 0
    stack = [document]
    while stack:
        value = stack.pop()
        if isinstance(value, Mapping):
            events += isinstance(value.get("event"), str)
            records += isinstance(value.get("kind"), str)
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return {"events": events, "records": records}


def check_declared_work(document: object, what: str, *, error: type[ValueError] = ValueError) -> None:
    """Refuse ``document`` in one ``error`` line when it declares more work than the documented budget.

    The budget (:data:`MAX_DECLARED_EVENTS` event nodes, :data:`MAX_DECLARED_RECORDS`
    mechanism records) is checked on the declared sizes, before any computation.
    """
    work = declared_work(document)
    if work["events"] > MAX_DECLARED_EVENTS:
        raise error(f"{what} declares {work['events']} dp-accounting event nodes; privfed accounts at most "
                    f"{MAX_DECLARED_EVENTS} per file (each is a privacy-loss distribution to build): merge repeated "
                    "events into one self_composed event")
    if work["records"] > MAX_DECLARED_RECORDS:
        raise error(f"{what} declares {work['records']} mechanism records; privfed reads at most "
                    f"{MAX_DECLARED_RECORDS} per file")
