"""Mechanism files: a pipeline's releases listed in JSON or TOML, for ``privfed account``.

A file lists mechanisms under ``mechanisms``, each with its registered ``kind``,
an optional ``unit`` (the mechanism's default otherwise) and its constructor's
arguments. Vote matrices of noisy-max mechanisms are named as ``.npy`` files,
relative to the mechanism file and inside its folder, and loaded without pickle.
Unknown keys are refused with the closest valid one, and numbers must be finite::

    [[mechanisms]]
    kind = "laplace_noisy_max"
    unit = "example"
    votes = "votes.npy"
    gamma = 0.05

    [[mechanisms]]
    kind = "dpsgd"
    noise_multiplier = 1.1
    sample_rate = 0.01
    steps = 2000
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .documents import (
    MAX_EPSILON_PER_ANSWER,
    check_answer_epsilon,
    check_declared_work,
    check_finite_numbers,
    load_npy,
    parse_json,
    parse_toml,
    unknown_key_message,
)
from .mechanism import Mechanism
from .registry import mechanism_class, mechanism_kinds

__all__ = ["load_mechanisms"]

#: Largest mechanism file read (a list of mechanisms and their parameters; vote matrices are separate .npy files).
MAX_MECHANISM_FILE_BYTES = 16 << 20
#: Arguments that name a ``.npy`` file (relative to the mechanism file) instead of holding the array.
_ARRAY_FILE_ARGUMENTS = frozenset({"votes"})


def _read(path: Path) -> Any:
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise ValueError(f"path must name a .json or .toml mechanism file, got {str(path)!r}")
    what = f"mechanism file {str(path)!r}"
    size = path.stat().st_size
    if size > MAX_MECHANISM_FILE_BYTES:
        raise ValueError(f"{what} has {size} bytes; a mechanism file may have at most {MAX_MECHANISM_FILE_BYTES}")
    data = path.read_bytes()
    document = parse_toml(data, what) if suffix == ".toml" else parse_json(data, what, finite=True)
    check_declared_work(document, what)
    return document


def _load_array(base: Path, value: object, *, where: str) -> np.ndarray:
    """The ``.npy`` file ``value`` names, which must lie inside the mechanism file's folder ``base``."""
    if not isinstance(value, str) or not value.endswith(".npy"):
        raise ValueError(f"{where} must name a .npy file relative to the mechanism file, got {value!r}")
    file = (base / value).resolve()
    if not file.is_relative_to(base):
        raise ValueError(f"{where} names {value!r}, outside the mechanism file's folder {str(base)!r}; "
                         "a mechanism file may only name files in its own folder or below")
    return load_npy(file, f"{where} file")


def _mechanism(entry: object, index: int, base: Path) -> Mechanism:
    where = f"mechanisms[{index}]"
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where} must be a table of kind and parameters, got {entry!r}")
    arguments = dict(entry)
    kind = arguments.pop("kind", None)
    if kind not in mechanism_kinds():
        close = difflib.get_close_matches(str(kind), mechanism_kinds(), n=1)
        raise ValueError(f"{where}.kind must be one of {', '.join(mechanism_kinds())}; got {kind!r}"
                         + (f"; did you mean {close[0]!r}?" if close else ""))
    cls = mechanism_class(kind)
    accepted = set(inspect.signature(cls).parameters) - {"self"}
    for key in arguments:
        if key not in accepted:
            raise ValueError(unknown_key_message(key, accepted, f"{where} ({kind})"))
    for name in _ARRAY_FILE_ARGUMENTS & set(arguments):
        arguments[name] = _load_array(base, arguments[name], where=f"{where}.{name}")
    try:
        mechanism = cls(**arguments)
    except TypeError as error:
        raise TypeError(f"{where} ({kind}): {error}") from None
    except ValueError as error:
        raise ValueError(f"{where} ({kind}): {error}") from None
    except OverflowError as error:
        given = ", ".join(f"{key}={value!r}" for key, value in entry.items() if isinstance(value, (int, float)))
        raise ValueError(f"{where} ({kind}): {given} overflow the accounting ({error}): the ε of one answer must be "
                         f"at most {MAX_EPSILON_PER_ANSWER:g}") from None
    check_answer_epsilon(mechanism, f"{where} ({kind})")
    return mechanism


def load_mechanisms(path: str | Path) -> list[Mechanism]:
    """Read the mechanisms listed in a JSON or TOML file.

    Parameters
    ----------
    path:
        A ``.json`` or ``.toml`` file with a top-level ``mechanisms`` list (and
        optionally a ``description`` string).

    Returns
    -------
    list of Mechanism, in file order (compose them with :func:`privfed.accounting.account`).

    Examples
    --------
    >>> import privfed  # doctest: +SKIP
    >>> privfed.account(privfed.load_mechanisms("examples/pipeline.toml"), delta=1e-5)  # doctest: +SKIP
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path must be an existing mechanism file, got {str(path)!r}")
    document = _read(path)
    if not isinstance(document, Mapping):
        raise ValueError(f"{str(path)!r} must hold a top-level 'mechanisms' list")
    for key in document:
        if key not in ("mechanisms", "description"):
            raise ValueError(unknown_key_message(key, ("description", "mechanisms"), repr(str(path))))
    if not isinstance(document.get("mechanisms"), list):
        raise ValueError(f"{str(path)!r} must hold a top-level 'mechanisms' list")
    check_finite_numbers(document, f"{str(path)!r}:")
    if not document["mechanisms"]:
        raise ValueError(f"{str(path)!r} lists no mechanisms")
    base = path.resolve().parent
    return [_mechanism(entry, i, base) for i, entry in enumerate(document["mechanisms"])]
