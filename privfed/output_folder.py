"""Output folders, checked before any work: the CLI's ``--out`` arguments and the Flower ServerApp's output bundle.

Only the standard library is imported here, so that the command line stays instant and the ServerApp (run by
``flwr run``, without privfed's command line) refuses an unusable folder with the same one-line message.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["check_output_folder"]


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_output_folder(path: str | os.PathLike[str], argument: str, *, overwrite: bool | None = None,
                        how_to_overwrite: str = "pass --overwrite") -> Path:
    """Check, before any work, that ``path`` can become an output folder; nothing is created.

    ``path`` must not be a file; with ``overwrite=False`` an existing folder must be
    empty (``overwrite=None``: an existing folder is reused, as a resumed sweep does;
    ``how_to_overwrite`` is what the refusal tells the user to do);
    the folder, or its nearest existing ancestor, must be writable (a file is created
    and removed there to find out).
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{argument} {str(path)!r} is a file; it must name a folder")
    if overwrite is False and path.is_dir() and any(path.iterdir()):
        raise ValueError(f"{argument} {str(path)!r} exists and is not empty; {how_to_overwrite} to replace its "
                         "contents")
    ancestor = _nearest_existing(path)
    if not ancestor.is_dir():
        raise ValueError(f"{argument} {str(path)!r} cannot be created: {str(ancestor)!r} is a file")
    try:
        with tempfile.TemporaryFile(dir=ancestor):
            pass
    except OSError as error:
        raise ValueError(f"{argument} {str(path)!r} is not writable: {str(ancestor)!r}: "
                         f"{error.strerror or error}") from None
    return path
