"""A silo's own privacy budget: a file on the silo's machine that every release of its data is charged to first.

:class:`SiloBudget` keeps, across every study and pipeline the silo joins, an append-only record of the
releases its data took part in, and refuses a release that would take it past its (ε, δ) policy. The
running total is the Rényi filter of :mod:`~accounting.privacy_filter` (valid when each study is chosen
after seeing the results of the earlier ones). A release is charged by its public parameters alone — a
privfed :class:`~accounting.mechanism.Mechanism` or its ``{"kind", "unit", "parameters"}`` record — from
its *data-independent* RDP curve, so the silo knows the cost before it touches its data.

**The file** (JSON Lines, ``docs/budget.md``): a header line with the policy (ε, δ, unit, the filter's
orders), then one line per charge: study, pipeline, the mechanism's kind, unit and public parameters,
the observers who see the release, the time, its RDP at the filter's orders and its pure ε, the running
totals after it, the ``sha256`` of the previous line (first, at a fixed place) and its own ``sha256`` (last).
A budget check re-hashes the file, checks both hashes of every line without parsing JSON and reads the
totals from the last line; :meth:`SiloBudget.verify` also re-adds every charge. Editing, dropping,
inserting or reordering lines breaks the chain; the ledger then refuses every charge (:class:`TamperedLedgerError`) until a person archives it
and starts over (:meth:`SiloBudget.reset`). A chain cannot show that its *last* lines were dropped:
compare :attr:`LedgerCheck.head_sha256` with a head noted elsewhere (``verify(head=...)``).

**Concurrency and faults.** Check and append happen under an exclusive ``fcntl.flock`` of the file,
so two processes (two federations at one silo) never overspend; the line is written and fsynced before
:meth:`SiloBudget.charge` returns, so a release made after ``charge`` returned is always on disk (a crash
between charging and releasing over-counts). A process killed while writing leaves an unterminated last
line: a line that still parses as a complete, chained record counts in full; any other torn tail belongs
to a charge that never returned (so to a release that never happened): it counts nothing, is reported,
and the next charge seals it with a ``torn`` line naming its sha256, the file staying append-only.

**Units.** ``"example"`` accepts example- and party-level releases (a party-level guarantee covers any
change of its examples); ``"party"`` accepts party-level releases only; ``"person"`` (rows carrying a
person id, at most ``max_records_per_person = k`` rows each) accepts party-level releases as they are and
example-level ones through RDP group privacy (Mironov 2017, "Rényi differential privacy", Prop. 11 in
arXiv:1702.07476): a mechanism (α, ρ(α))-RDP for neighbours at distance 1 is (β, 3^c·ρ(2^c·β))-RDP for
data sets at distance ≤ 2^c, c = ⌈log₂ k⌉, for β ≥ 2; below order 2 the cost is ∞. A pure ε becomes kε.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import numpy as np

from ._checks import check_choice, check_int_at_least
from .dp_event_release import event_to_json
from .fingerprint import canonical_json, sha256_hex
from .interop import data_independent_event
from .ledger_entry import GENESIS_SHA256, to_json_value
from .mechanism import Mechanism
from .observers import OBSERVERS, check_observers
from .privacy_filter import FILTER_ORDERS, RenyiFilter
from .registry import public_mechanism_from_record

__all__ = [
    "BUDGET_UNITS",
    "BudgetRefusedError",
    "LedgerCheck",
    "SiloBudget",
    "SiloBudgetExceededError",
    "SiloCharge",
    "TamperedLedgerError",
    "release_cost",
]

#: The file's schema version (the header's ``schema``).
SCHEMA = 1
#: The units a silo's budget can protect.
BUDGET_UNITS: tuple[str, ...] = ("example", "party", "person")
#: The mechanism units each budget unit accepts (see the module docstring).
_ACCEPTED = {"example": ("example", "party"), "party": ("party",), "person": ("example", "party")}
_SHA_SUFFIX_LENGTH = len(b',"sha256":"') + 64 + len(b'"}')


class BudgetRefusedError(RuntimeError):
    """The silo refused a release: nothing was recorded and nothing may be released."""


class SiloBudgetExceededError(BudgetRefusedError):
    """The release would take an observer's spent ε past the silo's policy.

    Attributes: ``observer``, ``epsilon`` (what would have been spent), ``budget_epsilon``, ``delta``, ``study``.
    """

    def __init__(self, *, observer: str, epsilon: float, budget_epsilon: float, delta: float, study: str) -> None:
        self.observer, self.epsilon, self.budget_epsilon = observer, epsilon, budget_epsilon
        self.delta, self.study = delta, study
        super().__init__(f"refused: charging study {study!r} would take the {observer}'s spent ε to {epsilon:.4g} > "
                         f"the silo's budget ε = {budget_epsilon:g} at δ = {delta:g} (Rényi filter); nothing was "
                         "recorded")


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
class LedgerCheck:
    """What :meth:`SiloBudget.verify` found.

    ``intact`` is False when the chain is broken (``problem`` says where) or when ``head`` was given and the
    last line's sha256 differs; ``torn_tail_bytes`` counts an unterminated last line that is not a record.
    """

    intact: bool
    records: int
    head_sha256: str
    problem: str | None
    torn_tail_bytes: int


@dataclass(frozen=True)
class _Policy:
    epsilon: float
    delta: float
    unit: str
    max_records_per_person: int | None
    orders: tuple[float, ...]

    def header(self, *, restarted_from: dict[str, Any] | None) -> dict[str, Any]:
        return {"type": "budget", "schema": SCHEMA, "epsilon": self.epsilon, "delta": self.delta, "unit": self.unit,
                "max_records_per_person": self.max_records_per_person, "orders": list(self.orders),
                "created": _now(), "restarted_from": restarted_from}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _policy(epsilon: object, delta: object, unit: object, max_records_per_person: object,
            orders: Sequence[float]) -> _Policy:
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
    return _Policy(rule.epsilon, rule.delta, unit, k, rule.orders)


# --- the cost of a release ----------------------------------------------------------------------------
def _as_mechanism(release: object) -> Mechanism:
    if isinstance(release, Mechanism):
        return release
    if isinstance(release, Mapping):
        mechanism, _ = public_mechanism_from_record(release)
        return mechanism
    raise TypeError(f"release must be a privfed Mechanism or its {{'kind', 'unit', 'parameters'}} record, got "
                    f"{type(release).__name__}")


def release_cost(release: object, orders: Sequence[float], *, unit: str,
                 max_records_per_person: int | None = None) -> tuple[Mechanism, np.ndarray]:
    """The release as a mechanism, and its cost for a budget of ``unit``: its data-independent RDP at each of
    ``orders``, then its pure ε (``inf`` when it has none), the curve :class:`~accounting.privacy_filter.RenyiFilter`
    takes.

    Raises a one-line ``ValueError`` when the release has no data-independent bound (its cost would need the
    private data) or protects a unit the budget cannot use.
    """
    mechanism = _as_mechanism(release)
    unit = check_choice("unit", unit, BUDGET_UNITS)
    if mechanism.unit not in _ACCEPTED[unit]:
        raise ValueError(f"release protects unit {mechanism.unit!r}; a {unit}-level budget accepts "
                         f"{' or '.join(_ACCEPTED[unit])}-level releases only (no bound on a whole party's influence "
                         "follows from an example-level one)")
    points = np.asarray(orders, dtype=float)
    group = 1 if unit != "person" or mechanism.unit == "party" else int(max_records_per_person or 1)
    pure = mechanism.pure_epsilon()
    pure_cost = math.inf if pure is None else group * float(pure)  # pure ε-DP gives kε for k rows, exactly
    if group == 1:
        cost = np.asarray(mechanism.rdp_data_independent(points, analysis="tight"), dtype=float)
    else:  # Mironov 2017, Prop. 11: (β, 3^c·ρ(2^c·β)) for groups of up to 2^c rows, β >= 2
        doublings = math.ceil(math.log2(group))
        inner = np.asarray(mechanism.rdp_data_independent(points * 2**doublings, analysis="tight"), dtype=float)
        cost = np.where(points >= 2.0, 3.0**doublings * inner, np.inf)
    if cost.shape != points.shape or np.isnan(cost).any():
        raise ValueError(f"{type(mechanism).__name__} gave no usable data-independent RDP curve at the filter's orders")
    if np.isinf(cost).all() and math.isinf(pure_cost):
        raise ValueError(f"release {mechanism.kind!r} has no data-independent privacy bound (its cost depends on the "
                         "private data), so a silo cannot charge it before touching its data")
    return mechanism, np.append(cost, pure_cost)


# --- the file's lines -----------------------------------------------------------------------------------
#: Every line starts with the previous line's sha256, at a fixed place, so the chain is checked without parsing JSON.
_PREVIOUS = b'{"previous_sha256":"'


def _line(record: dict[str, Any], previous: str) -> tuple[bytes, str]:
    """``record`` as one JSON line: ``{"previous_sha256": previous, ...record, "sha256": own}``, ``own`` the
    sha256 of the line without its ``"sha256"`` member; returns the line and ``own``."""
    body = _PREVIOUS + previous.encode() + b'",' + canonical_json(record)[1:]
    digest = sha256_hex(body)
    return body[:-1] + b',"sha256":"' + digest.encode() + b'"}', digest


def _links(line: bytes) -> tuple[str, str] | None:
    """(previous sha256, own sha256) of a line whose own sha256 matches its content; None for any other line."""
    if not line.startswith(_PREVIOUS) or len(line) < len(_PREVIOUS) + 66 + _SHA_SUFFIX_LENGTH \
            or line[-_SHA_SUFFIX_LENGTH:-66] != b',"sha256":"' or not line.endswith(b'"}'):
        return None
    digest = line[-66:-2].decode("ascii", "replace")
    if sha256_hex(line[:-_SHA_SUFFIX_LENGTH] + b"}") != digest:
        return None
    return line[20:84].decode("ascii", "replace"), digest


def _values(curve: np.ndarray) -> list[float | str]:
    return ["inf" if math.isinf(v) else float(v) for v in curve]


def _decoded(values: object, size: int, what: str) -> np.ndarray:
    if not isinstance(values, list) or len(values) != size:
        raise ValueError(f"{what} must list {size} values")
    curve = np.array([math.inf if v == "inf" else v for v in values], dtype=float)
    if np.isnan(curve).any() or (curve < 0).any():
        raise ValueError(f"{what} must hold non-negative numbers or 'inf'")
    return curve


def _cost_of(record: Mapping[str, Any], size: int) -> np.ndarray:
    """A charge record's cost: its ``rdp`` at the ``size`` filter orders, then its ``pure_epsilon``."""
    return np.append(_decoded(record.get("rdp"), size, "rdp"),
                     _decoded([record.get("pure_epsilon")], 1, "pure_epsilon"))


def _total_of(record: Mapping[str, Any], size: int) -> tuple[int, dict[str, np.ndarray]]:
    """A line's ``total``: how many charges so far, and each observer's summed cost after this line."""
    total = record.get("total")
    if not isinstance(total, dict) or not isinstance(total.get("charges"), int):
        raise ValueError("total must be an object with an integer 'charges'")
    return total["charges"], {o: _decoded(total.get(o), size + 1, f"total.{o}") for o in OBSERVERS}


def _total(count: int, spent: Mapping[str, np.ndarray]) -> dict[str, Any]:
    return {"charges": count, **{observer: _values(spent[observer]) for observer in OBSERVERS}}


def _record(line: bytes, where: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except ValueError:
        record = None
    if not isinstance(record, dict):
        raise TamperedLedgerError(f"{where} is not a JSON object")
    return record


@dataclass
class _Scan:
    """What the complete lines of a file say, and where they end (so a re-read checks only what follows).

    ``size`` is the end of the last complete line that was checked, ``last_start`` where that line starts,
    ``lines`` how many complete lines there are; ``stamp`` the file's (device, inode, size, mtime, ctime)
    when it was read. ``charges`` is None for a quick scan: the chain was checked and the totals read from the
    last line, but the charges themselves were not parsed.
    """

    policy: _Policy
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

    def copy(self) -> _Scan:
        return _Scan(self.policy, self.size, self.last_start, self.lines, self.head, self.count, dict(self.spent),
                     None if self.charges is None else list(self.charges), list(self.curves))


def _parse_header(line: bytes, path: Path) -> tuple[_Policy, str]:
    links = _links(line)
    try:
        header = json.loads(line)
        if links is None or not isinstance(header, dict) or header.get("type") != "budget" \
                or header.get("schema") != SCHEMA:
            raise ValueError("not a privfed silo budget header of schema 1")
        policy = _policy(header["epsilon"], header["delta"], header["unit"], header["max_records_per_person"],
                         header["orders"])
    except (ValueError, TypeError, KeyError) as error:
        raise TamperedLedgerError(f"{path}: line 1 (the header) is not valid: {error}") from None
    return policy, links[1]


def _apply(record: dict[str, Any], scan: _Scan, digest: str, where: str) -> None:
    """Check a fully parsed line against ``scan`` and add it: its cost must add up to its recorded total."""
    size = len(scan.policy.orders)
    try:
        count, total = _total_of(record, size)
        if record.get("type") == "torn":
            if not isinstance(record.get("torn_sha256"), str):
                raise ValueError("a torn record names the torn line's sha256")
            spent = scan.spent
        elif record.get("type") == "charge":
            if record.get("index") != scan.count:
                raise ValueError(f"expected charge number {scan.count}, got {record.get('index')!r}")
            observers = check_observers(record["observers"])
            curve = _cost_of(record, size)
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


def _scan(data: bytes, path: Path, *, full: bool) -> _Scan:
    """Verify ``data`` (the whole file) and read its totals (``full``: parse and check every charge too)."""
    end = data.find(b"\n")
    if end < 0:
        raise TamperedLedgerError(f"{path}: no complete header line (not a silo budget ledger, or emptied)")
    policy, head = _parse_header(data[:end], path)
    zeros = np.zeros(len(policy.orders) + 1)
    scan = _Scan(policy, end + 1, 0, 1, head, 0, {o: zeros for o in OBSERVERS}, [] if full else None)
    return _scan_lines(data, path, scan, full=full)


def _grown(data: bytes, path: Path, previous: _Scan) -> _Scan | None:
    """``previous`` extended by what was appended since: ``data`` is the file from ``previous.last_start`` on.

    None when the last line ``previous`` checked is no longer there, unchanged, at its place (an edit
    shifted or changed it): the caller checks the whole file again.
    """
    known = previous.size - previous.last_start
    links = _links(data[:known - 1]) if data[known - 1:known] == b"\n" else None
    if links is None or links[1] != previous.head:
        return None
    scan = previous.copy()
    scan.charges, scan.curves, scan.size, scan.last_start = None, [], known, 0
    scan = _scan_lines(data, path, scan, full=False)
    scan.size, scan.last_start = scan.size + previous.last_start, scan.last_start + previous.last_start
    return scan


def _quick_chain(data: bytes, scan: _Scan) -> bool:
    """Check, a list at a time, that every line after ``scan.size`` is complete, carries its own sha256 and
    follows the one before; if so, move ``scan`` to the end with the last line's totals and return True.

    The common case of a quick scan, with no per-line Python loop; anything else (a torn line, a broken
    link) returns False, and :func:`_scan_lines` finds and names it.
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
    _read_total(scan, lines[-1], f"line {scan.lines + len(lines)}")
    scan.head, scan.lines = own[-1].decode(), scan.lines + len(lines)
    scan.size, scan.last_start = len(data), len(data) - 1 - len(lines[-1])
    return True


def _scan_lines(data: bytes, path: Path, scan: _Scan, *, full: bool) -> _Scan:
    """Check the lines of ``data`` after ``scan.size`` (line ``scan.lines + 1`` on), extending ``scan``.

    Each complete line must carry its own sha256 and the previous line's; a line that does not (the torn
    write of a killed process) must be followed by a ``torn`` record naming it. A quick scan (not ``full``)
    parses only the last line, whose ``total`` sums everything up to it.
    """
    if not full and _quick_chain(data, scan):
        return scan
    position, size, number, lines = scan.size, scan.size, scan.lines + 1, scan.lines
    last: tuple[bytes, str] | None = None  # a quick scan's latest line, parsed only at the end
    pending: tuple[bytes, int] | None = None
    while position < len(data):
        end = data.find(b"\n", position)
        line, where = data[position:len(data) if end < 0 else end], f"{path}: line {number}"
        links = _links(line)
        if end < 0:  # an unterminated last line: a killed writer
            if last is not None:
                _read_total(scan, *last)
                last = None
            if links is not None and links[0] == scan.head and pending is None:
                trial = scan.copy()
                try:
                    _apply(_record(line, where), trial, links[1], where)
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
                record = _record(line, where)
                if record.get("type") != "torn" or record.get("torn_sha256") != sha256_hex(pending[0]):
                    raise TamperedLedgerError(f"{path}: line {pending[1]} was edited or is not a ledger record")
                pending = None
            if previous_sha256 != scan.head:
                raise TamperedLedgerError(f"{where} does not follow the line before it (a line was dropped, "
                                          "inserted, moved or edited)")
            if full:
                _apply(_record(line, where), scan, digest, where)
            else:
                last = (line, where)
            scan.head, scan.last_start = digest, position
            size, lines = end + 1, number
        position, number = end + 1, number + 1
    if pending is not None:
        raise TamperedLedgerError(f"{path}: line {pending[1]} was edited or is not a ledger record")
    if last is not None:
        _read_total(scan, *last)
    scan.size, scan.lines = size, lines
    return scan


def _read_total(scan: _Scan, line: bytes, where: str) -> None:
    """Take ``scan``'s count and totals from a line's ``total`` (a quick scan trusts the chain for the sum)."""
    try:
        scan.count, scan.spent = _total_of(_record(line, where), len(scan.policy.orders))
    except ValueError as error:
        raise TamperedLedgerError(f"{where} is not a valid record: {error}") from None


# --- the budget --------------------------------------------------------------------------------------------
class SiloBudget:
    """A silo's privacy budget across every study it joins: check, charge and report, on the silo's machine.

    Parameters
    ----------
    path:
        The ledger file. Created with the policy if missing; if it exists, its policy must equal the one given.
    epsilon, delta:
        The policy: every release of the silo's data, composed adaptively, is (ε, δ)-DP for each observer.
    unit:
        What the policy protects: ``"example"`` (one row), ``"party"`` (the silo's whole data set) or
        ``"person"`` (all rows of one person; needs ``max_records_per_person``).
    max_records_per_person:
        With ``unit="person"``: the most rows any one person has (group privacy, see the module docstring).
    orders:
        The filter's Rényi orders, fixed for the file's life (default :data:`~accounting.privacy_filter.FILTER_ORDERS`).

    Examples
    --------
    >>> import tempfile, os
    >>> from privfed.accounting import DPSGD
    >>> budget = SiloBudget(os.path.join(tempfile.mkdtemp(), "budget.jsonl"), epsilon=3.0, delta=1e-5)
    >>> release = DPSGD(1.1, 0.01, 1000)
    >>> budget.fits(release)
    True
    >>> budget.charge(release, study="sepsis-2026", pipeline="fedkd").index
    0
    """

    def __init__(self, path: str | os.PathLike[str], *, epsilon: float, delta: float, unit: str = "example",
                 max_records_per_person: int | None = None, orders: Sequence[float] = FILTER_ORDERS) -> None:
        self.path = Path(path)
        policy = _policy(epsilon, delta, unit, max_records_per_person, orders)
        self._scan: _Scan | None = None
        with self._locked(exclusive=True, create=True) as stream:
            if os.fstat(stream.fileno()).st_size == 0:
                line, _ = _line(policy.header(restarted_from=None), GENESIS_SHA256)
                self._append(stream, line)
                found = policy
            else:
                found, _ = _parse_header(stream.readline().rstrip(b"\n"), self.path)
        if found != policy:
            raise ValueError(f"{self.path} holds a budget with a different policy ({_describe(found)}) than the one "
                             f"given ({_describe(policy)}); open it with SiloBudget.open(path)")
        self._policy = policy

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> SiloBudget:
        """The budget an existing ledger file holds, with the policy its header states."""
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"budget file {str(path)!r} does not exist (create it with privfed budget init)")
        with open(path, "rb") as stream:
            policy, _ = _parse_header(stream.readline().rstrip(b"\n"), path)
        return cls(path, epsilon=policy.epsilon, delta=policy.delta, unit=policy.unit,
                   max_records_per_person=policy.max_records_per_person, orders=policy.orders)

    # --- the policy ---------------------------------------------------------------------------------------
    @property
    def epsilon(self) -> float:
        """The policy's ε."""
        return self._policy.epsilon

    @property
    def delta(self) -> float:
        """The policy's δ."""
        return self._policy.delta

    @property
    def unit(self) -> str:
        """The protected unit: ``"example"``, ``"party"`` or ``"person"``."""
        return self._policy.unit

    @property
    def max_records_per_person(self) -> int | None:
        """The most rows one person has (``unit="person"`` only)."""
        return self._policy.max_records_per_person

    @property
    def filter(self) -> RenyiFilter:
        """The privacy filter the budget enforces."""
        return RenyiFilter(epsilon=self.epsilon, delta=self.delta, orders=self._policy.orders)

    # --- checking and charging ----------------------------------------------------------------------------
    def cost(self, release: object) -> np.ndarray:
        """The release's RDP at the filter's orders, then its pure ε, for this budget's unit (public parameters
        only)."""
        return release_cost(release, self._policy.orders, unit=self.unit,
                            max_records_per_person=self.max_records_per_person)[1]

    def fits(self, release: object, *, observers: Sequence[str] = OBSERVERS) -> bool:
        """Whether :meth:`charge` would accept ``release`` now (nothing is recorded).

        Raises :class:`TamperedLedgerError` when the ledger fails verification.
        """
        cost = self.cost(release)
        observers = check_observers(observers)
        scan = self._read()
        return all(self.filter.admits(scan.spent[observer], cost) for observer in observers)

    def charge(self, release: object, *, study: str, pipeline: str,
               observers: Sequence[str] = OBSERVERS) -> SiloCharge:
        """Record ``release`` before it happens, or refuse it; return the record written (and fsynced).

        Parameters
        ----------
        release:
            A privfed :class:`~accounting.mechanism.Mechanism`, or its ``{"kind", "unit", "parameters"}``
            record, described by public parameters only.
        study, pipeline:
            Non-empty names: which study the release belongs to and which pipeline makes it.
        observers:
            Who sees the release (``"public"``, ``"coordinator"``; default both). The policy holds for each
            observer's releases.

        Raises
        ------
        SiloBudgetExceededError
            The release would take an observer past the policy; nothing was recorded.
        TamperedLedgerError
            The ledger fails verification; nothing was recorded.
        """
        for name, value in (("study", study), ("pipeline", pipeline)):
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        mechanism, cost = release_cost(release, self._policy.orders, unit=self.unit,
                                       max_records_per_person=self.max_records_per_person)
        observers = check_observers(observers)
        described = {"kind": mechanism.kind, "unit": mechanism.unit,
                     "parameters": to_json_value(mechanism.parameters(), f"{type(mechanism).__name__}.parameters()")}
        with self._locked(exclusive=True) as stream:
            scan = self._read(stream, full=False)
            rule = self.filter
            for observer in observers:
                if not rule.admits(scan.spent[observer], cost):
                    raise SiloBudgetExceededError(observer=observer, epsilon=rule.epsilon_of(scan.spent[observer] + cost),
                                                  budget_epsilon=self.epsilon, delta=self.delta, study=study)
            prefix, head = b"", scan.head
            if scan.torn_tail:
                prefix = b"\n"
                if not scan.tail_is_record:
                    prefix, head = self._sealed(scan)
            index, time = scan.count, _now()
            spent = {o: scan.spent[o] + cost if o in observers else scan.spent[o] for o in OBSERVERS}
            record = {"type": "charge", "index": index, "study": study, "pipeline": pipeline,
                      "mechanism": described, "unit": self.unit, "observers": list(observers), "time": time,
                      "rdp": _values(cost[:-1]), "pure_epsilon": _values(cost[-1:])[0],
                      "total": _total(index + 1, spent)}
            line, digest = _line(record, head)
            self._append(stream, prefix + line)
            self._remember(scan, stream, start=scan.size + len(scan.torn_tail) + len(prefix), line=line,
                           head=digest, spent=spent, added=prefix.count(b"\n") + 1)
        return SiloCharge(index=index, study=study, pipeline=pipeline, mechanism=described, unit=self.unit,
                          observers=observers, time=time, rdp=tuple(float(v) for v in cost[:-1]),
                          pure_epsilon=float(cost[-1]), sha256=digest)

    def _remember(self, scan: _Scan, stream: IO[bytes], *, start: int, line: bytes, head: str,
                  spent: dict[str, np.ndarray], added: int) -> None:
        """Keep, as the scan of the file, ``scan`` followed by the line this process just wrote at ``start``."""
        status = os.fstat(stream.fileno())
        self._scan = _Scan(scan.policy, start + len(line) + 1, start, scan.lines + added, head, scan.count + 1,
                           spent, None, stamp=(status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns,
                                               status.st_ctime_ns))

    @staticmethod
    def _sealed(scan: _Scan) -> tuple[bytes, str]:
        """The bytes that terminate a torn tail and the torn record after it, and the new chain head."""
        torn, digest = _line({"type": "torn", "torn_sha256": sha256_hex(scan.torn_tail),
                              "torn_bytes": len(scan.torn_tail), "time": _now(),
                              "total": _total(scan.count, scan.spent)}, scan.head)
        return b"\n" + torn + b"\n", digest

    # --- reporting ----------------------------------------------------------------------------------------
    @property
    def charges(self) -> tuple[SiloCharge, ...]:
        """Every charge recorded, in order."""
        return tuple(self._charges())

    def spent(self, *, study: str | None = None, observer: str = "coordinator") -> float:
        """ε (at the policy's δ, by the filter's rule) spent on the releases ``observer`` sees, of ``study`` or of all.

        The total (``study=None``) is what the policy is enforced on; a study's figure is that study's releases
        alone under the same rule.
        """
        observer = check_observers((observer,))[0]
        scan = self._read(full=study is not None)
        if study is None:
            return self.filter.epsilon_of(scan.spent[observer])
        total = np.zeros(len(self._policy.orders) + 1)
        for charge, curve in zip(scan.charges or (), scan.curves):
            if charge.study == study and observer in charge.observers:
                total = total + curve
        return self.filter.epsilon_of(total) if total.any() else 0.0

    def studies(self) -> tuple[str, ...]:
        """The studies charged, in the order of their first charge."""
        return tuple(dict.fromkeys(charge.study for charge in self._charges()))

    def to_dp_events(self) -> list[dict[str, Any]]:
        """Every charge as dp-accounting's JSON event (:func:`~accounting.interop.data_independent_event`).

        Each item: ``index``, ``study``, ``pipeline``, ``observers``, ``unit`` (the mechanism's own unit: a
        person-level budget's group privacy is in the ledger's curve, not in the event) and ``dp_event``
        (``None`` for the carried-over totals of a reset ledger, which have a curve and no event).
        """
        events = []
        for charge in self._charges():
            event = None
            if charge.mechanism.get("kind") != "carried_over":
                mechanism, _ = public_mechanism_from_record(charge.mechanism)
                event = event_to_json(data_independent_event(mechanism))
            events.append({"index": charge.index, "study": charge.study, "pipeline": charge.pipeline,
                           "observers": list(charge.observers), "unit": charge.mechanism.get("unit"),
                           "dp_event": event})
        return events

    def verify(self, *, head: str | None = None) -> LedgerCheck:
        """Check the whole chain (and, given ``head``, that the last line's sha256 is that one)."""
        try:
            scan = self._read(fresh=True, full=True)
        except TamperedLedgerError as error:
            return LedgerCheck(False, 0, "", str(error), 0)
        problem = None
        if head is not None and head != scan.head:
            problem = f"{self.path}: the last line's sha256 is {scan.head}, not the expected {head} (lines were dropped"\
                      " from the end, or the ledger was replaced)"
        return LedgerCheck(problem is None, scan.count, scan.head, problem,
                           0 if scan.tail_is_record else len(scan.torn_tail))

    def reset(self, *, acknowledge: bool, reason: str) -> Path:
        """Archive a ledger that fails verification and start a new one that carries its spending over.

        A person's decision, made after ``privfed budget verify``: the archive keeps every byte; the new
        ledger's header names it (file name, sha256, ``reason``) and its first charges carry, per observer, the
        larger of the sum of *every* charge line of the archive that still parses (duplicates and lines after
        the break included: an over-count) and the largest running total any readable line records (which
        still counts a charge whose own line was dropped). Charges only the deleted last lines knew cannot be
        recovered: the reason should say what was checked. Returns the archive's path.
        """
        if acknowledge is not True:
            raise ValueError("acknowledge must be True: resetting a tampered ledger is a person's decision")
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"reason must be a non-empty string saying what was checked, got {reason!r}")
        with self._locked(exclusive=True) as stream:
            data = stream.read()
            try:
                _scan(data, self.path, full=True)
            except TamperedLedgerError:
                pass
            else:
                raise ValueError(f"{self.path} verifies; there is nothing to reset")
            archive = self.path.with_name(f"{self.path.name}.tampered-{datetime.now(timezone.utc):%Y%m%dT%H%M%S%fZ}")
            os.link(self.path, archive)
            carried = _carried_over(data, len(self._policy.orders))
            header, head = _line(self._policy.header(
                restarted_from={"archive": archive.name, "file_sha256": sha256_hex(data), "reason": reason.strip()}),
                sha256_hex(data))
            lines = [header]
            spent = {o: np.zeros(len(self._policy.orders) + 1) for o in OBSERVERS}
            for index, (observer, curve) in enumerate(item for item in carried.items() if item[1].any()):
                spent[observer] = spent[observer] + curve
                line, head = _line({"type": "charge", "index": index, "study": "(carried over)", "pipeline": "reset",
                                    "mechanism": {"kind": "carried_over", "unit": self.unit,
                                                  "parameters": {"archive": archive.name}},
                                    "unit": self.unit, "observers": [observer], "time": _now(),
                                    "rdp": _values(curve[:-1]), "pure_epsilon": _values(curve[-1:])[0],
                                    "total": _total(index + 1, spent)}, head)
                lines.append(line)
            replacement = self.path.with_name(self.path.name + ".new")
            with open(replacement, "wb") as out:
                out.write(b"\n".join(lines) + b"\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(replacement, self.path)
            self._scan = None
        return archive

    # --- the file -------------------------------------------------------------------------------------------
    @contextmanager
    def _locked(self, *, exclusive: bool, create: bool = False) -> Iterator[IO[bytes]]:
        if not create and not self.path.is_file():
            raise TamperedLedgerError(f"{self.path}: the budget file is missing; a silo budget is never recreated "
                                      "silently (privfed budget init writes a new one)")
        with open(self.path, "a+b") as stream:
            fcntl.flock(stream.fileno(), fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                stream.seek(0)
                yield stream
            finally:
                fcntl.flock(stream.fileno(), fcntl.LOCK_UN)

    @staticmethod
    def _append(stream: IO[bytes], data: bytes) -> None:
        stream.write(data + b"\n")
        stream.flush()
        os.fsync(stream.fileno())

    def _read(self, stream: IO[bytes] | None = None, *, full: bool = False, fresh: bool = False) -> _Scan:
        """The verified scan of the file (``full``: with every charge parsed and its total checked); the caller
        holds the lock when it passes ``stream``."""
        if stream is None:
            with self._locked(exclusive=False) as locked:
                return self._read(locked, full=full, fresh=fresh)
        status = os.fstat(stream.fileno())
        stamp = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)
        previous = None if full or fresh else self._scan
        if previous is not None and previous.stamp == stamp:  # nobody wrote since: nothing to check again
            return previous
        scan = None
        if previous is not None and previous.stamp[:2] == stamp[:2] and status.st_size > previous.size:
            stream.seek(previous.last_start)  # only appended? then check what follows the last line we checked
            scan = _grown(stream.read(), self.path, previous)
            stream.seek(0)
        if scan is None:
            scan = _scan(stream.read(), self.path, full=full)
        if scan.policy != self._policy:
            raise TamperedLedgerError(f"{self.path}: the header's policy changed since the budget was opened")
        scan.stamp = stamp
        self._scan = None if scan.torn_tail else scan  # a torn tail is re-read whole until a charge seals it
        return scan

    def _charges(self) -> list[SiloCharge]:
        return self._read(full=True).charges or []


def _carried_over(data: bytes, size: int) -> dict[str, np.ndarray]:
    """Per observer, the larger of the summed cost of every line of ``data`` that parses as a charge and the
    largest running total a readable line records (each order on its own)."""
    summed = {observer: np.zeros(size + 1) for observer in OBSERVERS}
    largest = {observer: np.zeros(size + 1) for observer in OBSERVERS}
    for line in data.split(b"\n")[1:]:
        try:
            record = _record(line, "line")
        except TamperedLedgerError:
            continue
        try:
            _, total = _total_of(record, size)
            for observer in OBSERVERS:
                largest[observer] = np.maximum(largest[observer], total[observer])
        except ValueError:
            pass
        if record.get("type") != "charge":
            continue
        try:
            curve = _cost_of(record, size)
            observers = check_observers(record.get("observers"))
        except (ValueError, TypeError):
            continue
        for observer in observers:
            summed[observer] = summed[observer] + curve
    return {observer: np.maximum(summed[observer], largest[observer]) for observer in OBSERVERS}


def _describe(policy: _Policy) -> str:
    person = f", max_records_per_person={policy.max_records_per_person}" if policy.unit == "person" else ""
    return f"epsilon={policy.epsilon:g}, delta={policy.delta:g}, unit={policy.unit!r}{person}, {len(policy.orders)} orders"

