"""Publishing a folder atomically: a reader sees the old folder or the complete new one, never a mixture.

A writer fills a fresh sibling folder (:func:`write_file` fsyncs each file),
fsyncs it, then :func:`publish_folder` renames it into place:

* without ``overwrite`` the rename itself is the exclusive create: POSIX
  ``rename`` of a folder fails on a non-empty destination, so of two racing
  writers exactly one succeeds and the other gets ``FileExistsError``;
* with ``overwrite`` the two folders are exchanged atomically (Linux
  ``renameat2(RENAME_EXCHANGE)``), then the old one is deleted. Where the system
  has no such call, the old folder is renamed aside first: a crash between the two
  renames leaves it under ``.NAME.privfed-old-…``.

A process killed at any point therefore leaves the old folder or the new one
in place (and at worst a stale hidden staging folder beside it).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import secrets
import shutil
import sys
from collections.abc import Collection
from pathlib import Path

__all__ = ["check_replaceable", "fsync_path", "publish_folder", "write_file"]


def fsync_path(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    except OSError:  # some file systems cannot fsync a folder
        pass
    finally:
        os.close(descriptor)


def write_file(path: Path, data: bytes) -> None:
    with open(path, "xb") as stream:
        stream.write(data)
        stream.flush()
        os.fsync(stream.fileno())


def _exchange(source: Path, destination: Path) -> bool:
    """Atomically swap two folders (Linux renameat2 RENAME_EXCHANGE); False where the system has no such call."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(source), at_fdcwd, os.fsencode(destination), rename_exchange) != 0:
        code = ctypes.get_errno()
        if code in (errno.ENOSYS, errno.EINVAL):  # kernel or file system without RENAME_EXCHANGE
            return False
        raise OSError(code, os.strerror(code), os.fspath(destination))
    return True


def publish_folder(staging: Path, directory: Path, *, overwrite: bool, allowed: Collection[str]) -> None:
    """Rename the complete ``staging`` folder to ``directory``; exclusive unless ``overwrite``.

    With ``overwrite`` an existing ``directory`` is replaced only if it holds nothing but ``allowed`` names.
    """
    try:
        os.rename(staging, directory)  # POSIX: succeeds only if directory is absent or an empty folder
        return
    except OSError as error:
        if error.errno not in (errno.ENOTEMPTY, errno.EEXIST) and not isinstance(error, FileExistsError):
            raise
        if not overwrite:
            raise FileExistsError(
                f"path {directory} is not empty (another writer may have just created it); pass overwrite=True to "
                "replace a bundle there"
            ) from None
    check_replaceable(directory, allowed)
    if _exchange(staging, directory):
        shutil.rmtree(staging)  # staging now holds the old bundle
        return
    # No atomic exchange here: move the old bundle aside, the new one in, then drop the old one. A crash between
    # the two renames leaves the old bundle under the name printed below.
    retired = directory.with_name(f".{directory.name}.privfed-old-{secrets.token_hex(4)}")
    os.rename(directory, retired)
    os.rename(staging, directory)
    shutil.rmtree(retired)


def check_replaceable(directory: Path, allowed: Collection[str]) -> None:
    """Refuse to replace a symbolic link, or a folder holding a name outside ``allowed``."""
    if directory.is_symlink():
        raise ValueError(f"path {directory} is a symbolic link; save_bundle replaces only a real bundle folder")
    others = sorted(set(os.listdir(directory)) - set(allowed))
    if others:
        raise FileExistsError(
            f"path {directory} holds {', '.join(others[:5])}, which no privfed bundle holds; overwrite=True replaces "
            "only a bundle folder, refusing to delete other files"
        )
