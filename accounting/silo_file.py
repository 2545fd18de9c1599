"""A silo budget's file on disk: the lock every check and charge holds, the fsynced append, and the fast check.

:class:`CheckedFile` keeps the verified :class:`~accounting.silo_ledger.Scan` of the file as this process last
saw it, and the file's stamp then (device, inode, size, mtime, ctime): a read with the same stamp checks nothing
again, a read after an append checks only the lines that follow, and a new object starts from the checked state
the last check left beside the file (:func:`~accounting.silo_ledger.read_checked_state`). On a signed ledger every
read also verifies the last record's signature. :class:`~accounting.silo_budget.SiloBudget` decides what to write;
this module only reads, locks and appends.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import numpy as np

from .silo_ledger import (
    Policy,
    Scan,
    TamperedLedgerError,
    read_checked_state,
    scan_appended,
    scan_file,
    signature_problem,
    write_checked_state,
)

__all__ = ["CheckedFile", "append_line", "locked"]


@contextmanager
def locked(path: Path, *, exclusive: bool, create: bool = False) -> Iterator[IO[bytes]]:
    """The budget file open for reading and appending, under a shared or an exclusive ``fcntl.flock``; a missing
    file is a :class:`TamperedLedgerError` unless ``create``."""
    if not create and not path.is_file():
        raise TamperedLedgerError(f"{path}: the budget file is missing; a silo budget is never recreated "
                                  "silently (privfed budget init writes a new one)")
    with open(path, "a+b") as stream:
        fcntl.flock(stream.fileno(), fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            stream.seek(0)
            yield stream
        finally:
            fcntl.flock(stream.fileno(), fcntl.LOCK_UN)


def append_line(stream: IO[bytes], data: bytes) -> None:
    """Append ``data`` and its newline, written and fsynced before returning."""
    stream.write(data + b"\n")
    stream.flush()
    os.fsync(stream.fileno())


class CheckedFile:
    """A silo budget's file (``path``, with ``policy`` in its header) and the scan of it this object last verified."""

    def __init__(self, path: Path, policy: Policy) -> None:
        self.path, self.policy = path, policy
        self._scan: Scan | None = None

    def read(self, stream: IO[bytes] | None = None, *, full: bool = False, fresh: bool = False) -> Scan:
        """The verified scan of the file (``full``: with every charge parsed and its total checked); the caller
        holds the lock when it passes ``stream``."""
        if stream is None:
            with locked(self.path, exclusive=False) as opened:
                return self.read(opened, full=full, fresh=fresh)
        status = os.fstat(stream.fileno())
        stamp = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)
        previous = None if full or fresh else self._scan
        if previous is None and not (full or fresh):  # a new object: start where the last check left the file
            previous = read_checked_state(self.path, self.policy, stamp,
                                          lambda start, size: _read_at(stream, start, size))
            if previous is not None:
                self._check_last_signature(previous, stream)
                self._scan = previous
        if previous is not None and previous.stamp == stamp:  # nobody wrote since: nothing to check again
            return previous
        scan = None
        if previous is not None and previous.stamp[:2] == stamp[:2] and status.st_size > previous.size:
            stream.seek(previous.last_start)  # only appended? then check what follows the last line we checked
            scan = scan_appended(stream.read(), self.path, previous)
            stream.seek(0)
        if scan is None:
            scan = scan_file(stream.read(), self.path, full=full)
        if scan.policy != self.policy:
            raise TamperedLedgerError(f"{self.path}: the header's policy changed since the budget was opened")
        self._check_last_signature(scan, stream)
        scan.stamp = stamp
        self._scan = None if scan.torn_tail else scan  # a torn tail is re-read whole until a charge seals it
        if self._scan is not None:
            write_checked_state(self.path, scan)
        return scan

    def remember(self, scan: Scan, stream: IO[bytes], *, start: int, line: bytes, head: str,
                 spent: dict[str, np.ndarray], added: int) -> None:
        """Keep, as the scan of the file, ``scan`` followed by the line this process just wrote at ``start``."""
        status = os.fstat(stream.fileno())
        self._scan = Scan(scan.policy, start + len(line) + 1, start, scan.lines + added, head, scan.count + 1,
                          spent, None, stamp=(status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns,
                                              status.st_ctime_ns))
        write_checked_state(self.path, self._scan)

    def forget(self) -> None:
        """Drop the scan kept: the next read checks the whole file (after the file was replaced)."""
        self._scan = None

    def _check_last_signature(self, scan: Scan, stream: IO[bytes]) -> None:
        """On a signed ledger, the last record's signature (it covers the chain before it)."""
        if self.policy.public_key is None:
            return
        last = scan.torn_tail if scan.tail_is_record else _read_at(stream, scan.last_start,
                                                                    scan.size - scan.last_start - 1)
        problem = signature_problem(last, self.policy.public_key)
        if problem is not None:
            raise TamperedLedgerError(f"{self.path}: the last record: {problem} (the ledger was edited)")


def _read_at(stream: IO[bytes], start: int, size: int) -> bytes:
    """``size`` bytes of the file from ``start``, leaving the stream at its start."""
    stream.seek(start)
    data = stream.read(size)
    stream.seek(0)
    return data


