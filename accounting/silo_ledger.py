"""The file a silo's budget lives in: its lines, their hash chain, and how a check reads them.

:class:`~accounting.silo_budget.SiloBudget` decides; this module writes and reads. A ledger is JSON Lines: a
header with the policy, then one line per charge (or ``torn`` line sealing a killed writer's unfinished line).
Every line starts with the previous line's sha256, at a fixed place, and ends with its own (the sha256 of the
line without that member), and carries the running totals after it. A quick scan (:func:`scan_file` with
``full=False``, :func:`scan_appended`) checks both hashes of every line a list at a time, without parsing
JSON, and reads the totals from the last line; a full scan parses every charge and re-adds it. The format
is documented in ``docs/budget.md``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ._checks import check_choice, check_int_at_least
from .fingerprint import canonical_json, sha256_hex
from .observers import OBSERVERS, check_observers
from .privacy_filter import RenyiFilter

__all__ = [
    "BUDGET_UNITS",
    "SCHEMA",
    "BudgetRefusedError",
    "Policy",
    "Scan",
    "SiloCharge",
    "TamperedLedgerError",
    "carried_over",
    "checked_policy",
    "cost_of",
    "encode_line",
    "encoded_values",
    "line_links",
    "now",
    "parse_header",
    "public_key_hex",
    "read_checked_state",
    "scan_appended",
    "scan_file",
    "signature_problem",
    "total_member",
    "write_checked_state",
]

#: The file's schema version (the header's ``schema``).
SCHEMA = 1
#: The units a silo's budget can protect.
BUDGET_UNITS: tuple[str, ...] = ("example", "party", "person")
_SHA_SUFFIX_LENGTH = len(b',"sha256":"') + 64 + len(b'"}')


class BudgetRefusedError(RuntimeError):
    """The silo refused a release: nothing was recorded and nothing may be released."""


class TamperedLedgerError(BudgetRefusedError):
    """The ledger file fails verification; every charge is refused until a person resets it."""


@dataclass(frozen=True)
class SiloCharge:
    """One release the silo's data took part in, as its ledger line records it."""

    index: int
    study: str
    pipeline: str
    mechanism: dict[str, Any]
    unit: str
    observers: tuple[str, ...]
    time: str
    rdp: tuple[float, ...]
    pure_epsilon: float
    sha256: str


@dataclass(frozen=True)
class Policy:
    """A budget's policy, as its header states it: (ε, δ), the unit, k rows per person, the filter's orders, and
    the hex Ed25519 public key every line is signed with (None: an unsigned ledger)."""

    epsilon: float
    delta: float
    unit: str
    max_records_per_person: int | None
    orders: tuple[float, ...]
    public_key: str | None = None

    def header(self, *, restarted_from: dict[str, Any] | None) -> dict[str, Any]:
        """The header line's members (``restarted_from``: the archive a reset started this file from)."""
        signed = {} if self.public_key is None else {"public_key": self.public_key}
        return {"type": "budget", "schema": SCHEMA, "epsilon": self.epsilon, "delta": self.delta, "unit": self.unit,
                "max_records_per_person": self.max_records_per_person, "orders": list(self.orders),
                "created": now(), "restarted_from": restarted_from, **signed}


def now() -> str:
    """The time a line records: UTC, ISO 8601, microseconds."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def checked_policy(epsilon: object, delta: object, unit: object, max_records_per_person: object,
                   orders: Sequence[float]) -> Policy:
    """The policy these arguments state, each checked (one-line errors naming the argument)."""
    rule = RenyiFilter(epsilon=epsilon, delta=delta, orders=tuple(orders))  # type: ignore[arg-type]
    unit = check_choice("unit", unit, BUDGET_UNITS)
    if unit == "person":
        if max_records_per_person is None:
            raise ValueError("max_records_per_person is required with unit='person': the most rows one person has "
                             "(an integer >= 1)")
        k: int | None = check_int_at_least("max_records_per_person", max_records_per_person, 1)
    elif max_records_per_person is not None:
        raise ValueError(f"max_records_per_person applies to unit='person' only, got unit={unit!r}")
    else:
        k = None
    return Policy(rule.epsilon, rule.delta, unit, k, rule.orders)


# --- the file's lines -----------------------------------------------------------------------------------
#: Every line starts with the previous line's sha256, at a fixed place, so the chain is checked without parsing JSON.
_PREVIOUS = b'{"previous_sha256":"'


def _signed_body(record: Mapping[str, Any], previous: str) -> bytes:
    return _PREVIOUS + previous.encode() + b'",' + canonical_json(record)[1:]


def encode_line(record: dict[str, Any], previous: str, signer: Any = None) -> tuple[bytes, str]:
    """``record`` as one JSON line: ``{"previous_sha256": previous, ...record, "sha256": own}``, ``own`` the
    sha256 of the line without its ``"sha256"`` member; returns the line and ``own``.

    ``signer`` (an Ed25519 private key of the ``cryptography`` package): the line also carries ``"signature"``, the
    hex Ed25519 signature of the line without its ``"signature"`` and ``"sha256"`` members — which hold the previous
    line's sha256, so the last line's signature covers the whole chain."""
    body = _signed_body(record, previous)
    if signer is not None:
        body = _signed_body({**record, "signature": signer.sign(body).hex()}, previous)
    digest = sha256_hex(body)
    return body[:-1] + b',"sha256":"' + digest.encode() + b'"}', digest


def public_key_hex(key: Any) -> str:
    """The hex of an Ed25519 key's raw public bytes (``key``: a private or public key of the ``cryptography``
    package, or that hex already); a one-line ``TypeError``/``ValueError`` otherwise."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

    if isinstance(key, str):
        return _public_key(key).public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
    if isinstance(key, Ed25519PrivateKey):
        key = key.public_key()
    if not isinstance(key, Ed25519PublicKey):
        raise TypeError(f"the key must be an Ed25519 key of the cryptography package (or its public key's hex), got "
                        f"{type(key).__name__}")
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


@lru_cache(maxsize=8)
def _public_key(hex_key: str) -> Any:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        return Ed25519PublicKey.from_public_bytes(bytes.fromhex(hex_key))
    except ValueError:
        raise ValueError(f"public_key must be the hex of 32 raw Ed25519 public-key bytes, got {hex_key!r}") from None


def signature_problem(line: bytes, public_key: str) -> str | None:
    """None when ``line`` carries an Ed25519 signature (:func:`encode_line`) that verifies under ``public_key``
    (hex), else what is wrong."""
    from cryptography.exceptions import InvalidSignature

    try:
        record = json.loads(line)
        previous, signature = record.pop("previous_sha256"), record.pop("signature", None)
        record.pop("sha256")
    except (ValueError, TypeError, KeyError, AttributeError):
        return "it is not a ledger record"
    if not isinstance(signature, str) or not isinstance(previous, str):
        return "it is not signed"
    try:
        _public_key(public_key).verify(bytes.fromhex(signature), _signed_body(record, previous))
    except (InvalidSignature, ValueError):
        return "its Ed25519 signature does not verify under the silo's public key"
    return None


def line_links(line: bytes) -> tuple[str, str] | None:
    """(previous sha256, own sha256) of a line whose own sha256 matches its content; None for any other line."""
    if not line.startswith(_PREVIOUS) or len(line) < len(_PREVIOUS) + 66 + _SHA_SUFFIX_LENGTH \
            or line[-_SHA_SUFFIX_LENGTH:-66] != b',"sha256":"' or not line.endswith(b'"}'):
        return None
    digest = line[-66:-2].decode("ascii", "replace")
    if sha256_hex(line[:-_SHA_SUFFIX_LENGTH] + b"}") != digest:
        return None
    return line[20:84].decode("ascii", "replace"), digest


def encoded_values(curve: np.ndarray) -> list[float | str]:
    """A curve as JSON values (``"inf"`` for ∞)."""
    return ["inf" if math.isinf(v) else float(v) for v in curve]


def decoded_values(values: object, size: int, what: str) -> np.ndarray:
    """JSON values back as a curve of ``size`` non-negative numbers (``ValueError`` naming ``what`` otherwise)."""
    if not isinstance(values, list) or len(values) != size:
        raise ValueError(f"{what} must list {size} values")
    curve = np.array([math.inf if v == "inf" else v for v in values], dtype=float)
    if np.isnan(curve).any() or (curve < 0).any():
        raise ValueError(f"{what} must hold non-negative numbers or 'inf'")
    return curve


def cost_of(record: Mapping[str, Any], size: int) -> np.ndarray:
    """A charge record's cost: its ``rdp`` at the ``size`` filter orders, then its ``pure_epsilon``."""
    return np.append(decoded_values(record.get("rdp"), size, "rdp"),
                     decoded_values([record.get("pure_epsilon")], 1, "pure_epsilon"))


def total_of(record: Mapping[str, Any], size: int) -> tuple[int, dict[str, np.ndarray]]:
    """A line's ``total``: how many charges so far, and each observer's summed cost after this line."""
    total = record.get("total")
    if not isinstance(total, dict) or not isinstance(total.get("charges"), int):
        raise ValueError("total must be an object with an integer 'charges'")
    return total["charges"], {o: decoded_values(total.get(o), size + 1, f"total.{o}") for o in OBSERVERS}


def total_member(count: int, spent: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """A line's ``total`` member: ``count`` charges so far and each observer's summed cost."""
    return {"charges": count, **{observer: encoded_values(spent[observer]) for observer in OBSERVERS}}


def parse_record(line: bytes, where: str) -> dict[str, Any]:
    """A line's JSON object, or a :class:`TamperedLedgerError` naming ``where``."""
    try:
        record = json.loads(line)
    except ValueError:
        record = None
    if not isinstance(record, dict):
        raise TamperedLedgerError(f"{where} is not a JSON object")
    return record


@dataclass
class Scan:
    """What the complete lines of a file say, and where they end (so a re-read checks only what follows).

    ``size`` is the end of the last complete line that was checked, ``last_start`` where that line starts,
    ``lines`` how many complete lines there are; ``stamp`` the file's (device, inode, size, mtime, ctime)
    when it was read. ``charges`` is None for a quick scan: the chain was checked and the totals read from the
    last line, but the charges themselves were not parsed.
    """

    policy: Policy
    size: int
    last_start: int
    lines: int
    head: str
    count: int
    spent: dict[str, np.ndarray]
    charges: list[SiloCharge] | None
    curves: list[np.ndarray] = field(default_factory=list)
    torn_tail: bytes = b""
    tail_is_record: bool = False
    stamp: tuple[int, ...] = ()

    def copy(self) -> Scan:
        return Scan(self.policy, self.size, self.last_start, self.lines, self.head, self.count, dict(self.spent),
                    None if self.charges is None else list(self.charges), list(self.curves))


def parse_header(line: bytes, path: Path) -> tuple[Policy, str]:
    """The policy a header line states, and the line's sha256."""
    links = line_links(line)
    try:
        header = json.loads(line)
        if links is None or not isinstance(header, dict) or header.get("type") != "budget" \
                or header.get("schema") != SCHEMA:
            raise ValueError("not a privfed silo budget header of schema 1")
        policy = checked_policy(header["epsilon"], header["delta"], header["unit"],
                                header["max_records_per_person"], header["orders"])
        if header.get("public_key") is not None:
            policy = replace(policy, public_key=public_key_hex(str(header["public_key"])))
    except (ValueError, TypeError, KeyError) as error:
        raise TamperedLedgerError(f"{path}: line 1 (the header) is not valid: {error}") from None
    return policy, links[1]


def apply_record(record: dict[str, Any], scan: Scan, digest: str, where: str) -> None:
    """Check a fully parsed line against ``scan`` and add it: its cost must add up to its recorded total."""
    size = len(scan.policy.orders)
    try:
        count, total = total_of(record, size)
        if record.get("type") == "torn":
            if not isinstance(record.get("torn_sha256"), str):
                raise ValueError("a torn record names the torn line's sha256")
            spent = scan.spent
        elif record.get("type") == "charge":
            if record.get("index") != scan.count:
                raise ValueError(f"expected charge number {scan.count}, got {record.get('index')!r}")
            observers = check_observers(record["observers"])
            curve = cost_of(record, size)
            spent = {o: scan.spent[o] + curve if o in observers else scan.spent[o] for o in OBSERVERS}
            if scan.charges is not None:
                scan.charges.append(SiloCharge(
                    index=scan.count, study=str(record["study"]), pipeline=str(record["pipeline"]),
                    mechanism=dict(record["mechanism"]), unit=str(record["unit"]), observers=observers,
                    time=str(record["time"]), rdp=tuple(float(v) for v in curve[:-1]),
                    pure_epsilon=float(curve[-1]), sha256=digest))
                scan.curves.append(curve)
            scan.count += 1
        else:
            raise ValueError(f"unknown record type {record.get('type')!r}")
        if count != scan.count or any(not np.array_equal(total[o], spent[o]) for o in OBSERVERS):
            raise ValueError("its total is not the previous total plus its cost")
    except (ValueError, TypeError, KeyError) as error:
        raise TamperedLedgerError(f"{where} is not a valid record: {error}") from None
    scan.spent = spent


def scan_file(data: bytes, path: Path, *, full: bool) -> Scan:
    """Verify ``data`` (the whole file) and read its totals (``full``: parse and check every charge too)."""
    end = data.find(b"\n")
    if end < 0:
        raise TamperedLedgerError(f"{path}: no complete header line (not a silo budget ledger, or emptied)")
    policy, head = parse_header(data[:end], path)
    zeros = np.zeros(len(policy.orders) + 1)
    scan = Scan(policy, end + 1, 0, 1, head, 0, {o: zeros for o in OBSERVERS}, [] if full else None)
    return scan_lines(data, path, scan, full=full)


def scan_appended(data: bytes, path: Path, previous: Scan) -> Scan | None:
    """``previous`` extended by what was appended since: ``data`` is the file from ``previous.last_start`` on.

    None when the last line ``previous`` checked is no longer there, unchanged, at its place (an edit
    shifted or changed it): the caller checks the whole file again.
    """
    known = previous.size - previous.last_start
    links = line_links(data[:known - 1]) if data[known - 1:known] == b"\n" else None
    if links is None or links[1] != previous.head:
        return None
    scan = previous.copy()
    scan.charges, scan.curves, scan.size, scan.last_start = None, [], known, 0
    scan = scan_lines(data, path, scan, full=False)
    scan.size, scan.last_start = scan.size + previous.last_start, scan.last_start + previous.last_start
    return scan


def quick_chain(data: bytes, scan: Scan) -> bool:
    """Check, a list at a time, that every line after ``scan.size`` is complete, carries its own sha256 and
    follows the one before; if so, move ``scan`` to the end with the last line's totals and return True.

    The common case of a quick scan, with no per-line Python loop; anything else (a torn line, a broken
    link) returns False, and :func:`scan_lines` finds and names it.
    """
    if not data.endswith(b"\n") or len(data) == scan.size:
        return len(data) == scan.size
    lines = data[scan.size:-1].split(b"\n")
    if any(line[-_SHA_SUFFIX_LENGTH:-66] != b',"sha256":"' or line[-2:] != b'"}' for line in lines):
        return False
    own = [line[-66:-2] for line in lines]
    if [hashlib.sha256(line[:-_SHA_SUFFIX_LENGTH] + b"}").hexdigest().encode() for line in lines] != own:
        return False
    if [line[:84] for line in lines] != [_PREVIOUS + digest for digest in [scan.head.encode(), *own[:-1]]]:
        return False
    read_total(scan, lines[-1], f"line {scan.lines + len(lines)}")
    scan.head, scan.lines = own[-1].decode(), scan.lines + len(lines)
    scan.size, scan.last_start = len(data), len(data) - 1 - len(lines[-1])
    return True


def scan_lines(data: bytes, path: Path, scan: Scan, *, full: bool) -> Scan:
    """Check the lines of ``data`` after ``scan.size`` (line ``scan.lines + 1`` on), extending ``scan``.

    Each complete line must carry its own sha256 and the previous line's; a line that does not (the torn
    write of a killed process) must be followed by a ``torn`` record naming it. A quick scan (not ``full``)
    parses only the last line, whose ``total`` sums everything up to it.
    """
    if not full and quick_chain(data, scan):
        return scan
    position, size, number, lines = scan.size, scan.size, scan.lines + 1, scan.lines
    last: tuple[bytes, str] | None = None  # a quick scan's latest line, parsed only at the end
    pending: tuple[bytes, int] | None = None
    while position < len(data):
        end = data.find(b"\n", position)
        line, where = data[position:len(data) if end < 0 else end], f"{path}: line {number}"
        links = line_links(line)
        if end < 0:  # an unterminated last line: a killed writer
            if last is not None:
                read_total(scan, *last)
                last = None
            if links is not None and links[0] == scan.head and pending is None:
                trial = scan.copy()
                try:
                    apply_record(parse_record(line, where), trial, links[1], where)
                except TamperedLedgerError:
                    pass
                else:  # a complete record missing only its newline: counted in full (over-count, never under-count)
                    trial.head, trial.tail_is_record = links[1], True
                    scan = trial
            scan.torn_tail = line
            break
        if links is None:
            if pending is not None:
                raise TamperedLedgerError(f"{path}: line {pending[1]} was edited or is not a ledger record")
            pending = (line, number)  # a torn write: the next line must be the torn record sealing it
        else:
            previous_sha256, digest = links
            if pending is not None:
                record = parse_record(line, where)
                if record.get("type") != "torn" or record.get("torn_sha256") != sha256_hex(pending[0]):
                    raise TamperedLedgerError(f"{path}: line {pending[1]} was edited or is not a ledger record")
                pending = None
            if previous_sha256 != scan.head:
                raise TamperedLedgerError(f"{where} does not follow the line before it (a line was dropped, "
                                          "inserted, moved or edited)")
            if full:
                apply_record(parse_record(line, where), scan, digest, where)
            else:
                last = (line, where)
            scan.head, scan.last_start = digest, position
            size, lines = end + 1, number
        position, number = end + 1, number + 1
    if pending is not None:
        raise TamperedLedgerError(f"{path}: line {pending[1]} was edited or is not a ledger record")
    if last is not None:
        read_total(scan, *last)
    scan.size, scan.lines = size, lines
    return scan


def read_total(scan: Scan, line: bytes, where: str) -> None:
    """Take ``scan``'s count and totals from a line's ``total`` (a quick scan trusts the chain for the sum)."""
    try:
        scan.count, scan.spent = total_of(parse_record(line, where), len(scan.policy.orders))
    except ValueError as error:
        raise TamperedLedgerError(f"{where} is not a valid record: {error}") from None


# --- the checked state a new process starts from --------------------------------------------------------------
def checked_state_path(path: Path) -> Path:
    """Where the state of the ledger's last check is kept: ``<ledger>.checked``, beside it."""
    return path.with_name(path.name + ".checked")


def write_checked_state(path: Path, scan: Scan) -> None:
    """Keep ``scan``'s place in the file (its end, last line, chain head, count) and the file's stamp after the
    check, for the next process (:func:`read_checked_state`). Written atomically by whoever holds the ledger's lock;
    a cache: a file system that refuses it only costs the next process a full scan."""
    state = {"size": scan.size, "last_start": scan.last_start, "lines": scan.lines, "head": scan.head,
             "count": scan.count, "stamp": list(scan.stamp)}
    target = checked_state_path(path)
    temporary = target.with_name(target.name + f".{os.getpid()}")
    try:
        temporary.write_bytes(canonical_json(state))
        os.replace(temporary, target)
    except OSError:
        temporary.unlink(missing_ok=True)


def read_checked_state(path: Path, policy: Policy, stamp: tuple[int, ...], data_at: Any) -> Scan | None:
    """The scan a check left (:func:`write_checked_state`), when the file's stamp (device, inode, size, mtime,
    ctime) is still the one it recorded — nobody wrote the file since — and its last line is still there, intact,
    at its place with the recorded sha256; None otherwise (the caller scans the file).

    ``data_at(start, size)`` reads the file's bytes. The totals come from that last line, as a quick scan's do.
    """
    try:
        state = json.loads(checked_state_path(path).read_bytes())
        size, start, head = int(state["size"]), int(state["last_start"]), str(state["head"])
        if tuple(state["stamp"]) != tuple(stamp) or size != stamp[2] or not 0 <= start < size:
            return None
        line = data_at(start, size - start)
    except (OSError, ValueError, TypeError, KeyError):
        return None
    links = line_links(line[:-1]) if line.endswith(b"\n") else None
    if links is None or links[1] != head:
        return None
    zeros = np.zeros(len(policy.orders) + 1)
    scan = Scan(policy, size, start, int(state["lines"]), head, 0, {o: zeros for o in OBSERVERS}, None)
    read_total(scan, line[:-1], f"{path}: line {scan.lines}")
    if scan.count != state["count"]:
        return None
    scan.stamp = tuple(stamp)
    return scan


def carried_over(data: bytes, size: int) -> dict[str, np.ndarray]:
    """Per observer, the larger of the summed cost of every line of ``data`` that parses as a charge and the
    largest running total a readable line records (each order on its own)."""
    summed = {observer: np.zeros(size + 1) for observer in OBSERVERS}
    largest = {observer: np.zeros(size + 1) for observer in OBSERVERS}
    for line in data.split(b"\n")[1:]:
        try:
            record = parse_record(line, "line")
        except TamperedLedgerError:
            continue
        try:
            _, total = total_of(record, size)
            for observer in OBSERVERS:
                largest[observer] = np.maximum(largest[observer], total[observer])
        except ValueError:
            pass
        if record.get("type") != "charge":
            continue
        try:
            curve = cost_of(record, size)
            observers = check_observers(record.get("observers"))
        except (ValueError, TypeError):
            continue
        for observer in observers:
            summed[observer] = summed[observer] + curve
    return {observer: np.maximum(summed[observer], largest[observer]) for observer in OBSERVERS}
