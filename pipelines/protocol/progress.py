"""Progress bars for long work: one rule for every pipeline, the demo, sweeps and the bench scripts.

``progress`` takes three values everywhere in privfed:

* ``None`` (the default) — automatic: a bar on a terminal, nothing otherwise (the
  bar is written to standard error and shown only when standard error is a TTY, so
  logs, pipes, CI and captured test output stay clean);
* ``True`` — always show the bar (for example in a notebook, whose output is not a
  terminal);
* ``False`` — never show it.

The bars are tqdm's (``tqdm.auto``: a widget in a notebook, text on a terminal).

Examples
--------
>>> [step for step in progress_bar(range(3), progress=False, desc="rounds")]
[0, 1, 2]
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TextIO

from tqdm.auto import tqdm

__all__ = ["check_progress", "progress_bar", "shows_progress"]


def check_progress(progress: object) -> None:
    """Refuse anything but ``None``, ``True`` or ``False`` (before any work starts)."""
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress must be None (a bar on a terminal only), True or False, got {progress!r}")


def shows_progress(progress: bool | None, stream: TextIO | None = None) -> bool:
    """Whether a bar is shown: ``progress`` itself, or for ``None`` whether ``stream`` (stderr) is a terminal."""
    check_progress(progress)
    if progress is not None:
        return progress
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


def progress_bar(
    iterable: Iterable[Any] | None = None,
    *,
    progress: bool | None,
    total: int | None = None,
    desc: str | None = None,
    unit: str = "it",
    leave: bool = False,
) -> tqdm:
    """A tqdm bar over ``iterable`` (or updated by hand when ``iterable`` is None), shown as ``progress`` says."""
    return tqdm(iterable, total=total, desc=desc, unit=unit, leave=leave, disable=not shows_progress(progress))
