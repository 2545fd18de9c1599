"""A silo's own privacy budget: a file on the silo's machine that every release of its data is charged to first.

:class:`SiloBudget` keeps, across every study and pipeline the silo joins, an append-only record of the
releases its data took part in, and refuses a release that would take it past its (ε, δ) policy. The
running total is the Rényi filter of :mod:`~accounting.privacy_filter` (valid when each study is chosen
after seeing the results of the earlier ones). A release is charged by its public parameters alone — a
privfed :class:`~accounting.mechanism.Mechanism` or its ``{"kind", "unit", "parameters"}`` record — from
its *data-independent* RDP curve, so the silo knows the cost before it touches its data.

**The file** (JSON Lines, written and read by :mod:`~accounting.silo_ledger`, documented in
``docs/budget.md``): a header line with the policy (ε, δ, unit, the filter's orders), then one line per
charge: study, pipeline, the mechanism's kind, unit and public parameters, the observers who see the
release, the time, its RDP at the filter's orders and its pure ε, the running totals after it, the
``sha256`` of the previous line (first, at a fixed place) and its own ``sha256`` (last). A first check
checks both hashes of every line without parsing JSON and reads the totals from the last line; later
checks by the same object read only what was appended (:mod:`~accounting.silo_file`);
:meth:`SiloBudget.verify` also re-adds every charge. Editing, dropping, inserting or reordering lines breaks
the chain; the ledger then refuses every charge (:class:`TamperedLedgerError`) until a person archives it
and starts over (:meth:`SiloBudget.reset`). A chain cannot show that its *last* lines were dropped: compare
:attr:`LedgerCheck.head_sha256` with a head noted elsewhere (``verify(head=...)``).

**Concurrency and faults.** Check and append happen under an exclusive ``fcntl.flock`` of the file,
so two processes (two federations at one silo) never overspend; the line is written and fsynced before
:meth:`SiloBudget.charge` returns, so a release made after ``charge`` returned is always on disk (a crash
between charging and releasing over-counts). A process killed while writing leaves an unterminated last
line: a line that still parses as a complete, chained record counts in full; any other torn tail belongs
to a charge that never returned (so to a release that never happened): it counts nothing, is reported,
and the next charge seals it with a ``torn`` line naming its sha256, the file staying append-only.

**Units.** ``"example"`` accepts example- and party-level releases, ``"party"`` party-level ones only,
``"person"`` (at most ``max_records_per_person`` rows per person) both, example-level ones through RDP group
privacy: :mod:`~accounting.silo_cost` prices a release for each unit.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from .fingerprint import sha256_hex
from .ledger_entry import GENESIS_SHA256, to_json_value
from .observers import OBSERVERS, check_observers
from .privacy_filter import FILTER_ORDERS, RenyiFilter
from .registry import public_mechanism_from_record
from .silo_cost import release_cost
from .silo_file import CheckedFile, append_line, locked
from .silo_ledger import (
    BUDGET_UNITS,
    BudgetRefusedError,
    Policy,
    Scan,
    SiloCharge,
    TamperedLedgerError,
    carried_over,
    checked_policy,
    encode_line,
    encoded_values,
    line_links,
    now,
    parse_header,
    public_key_hex,
    scan_file,
    signature_problem,
    total_member,
)

__all__ = [
    "BUDGET_UNITS",
    "BudgetRefusedError",
    "LedgerCheck",
    "SiloBudget",
    "SiloBudgetExceededError",
    "SiloCharge",
    "TamperedLedgerError",
    "load_key",
    "release_cost",
]

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


def load_key(path: str | os.PathLike[str], *, private: bool) -> Any:
    """The silo's Ed25519 key from a PEM file (unencrypted PKCS#8 private key, or SubjectPublicKeyInfo public key);
    a one-line ``ValueError`` naming the file otherwise."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

    what = "private" if private else "public"
    try:
        data = Path(path).read_bytes()
        key = (serialization.load_pem_private_key(data, password=None) if private
               else serialization.load_pem_public_key(data))
    except (OSError, ValueError, TypeError) as error:
        raise ValueError(f"{str(path)!r} is not a readable, unencrypted PEM {what} key: {error}") from None
    if not isinstance(key, Ed25519PrivateKey if private else Ed25519PublicKey):
        raise ValueError(f"{str(path)!r} holds a {type(key).__name__}, not an Ed25519 {what} key")
    return key


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
        With ``unit="person"``: the most rows any one person has (group privacy, :mod:`~accounting.silo_cost`).
    orders:
        The filter's Rényi orders, fixed for the file's life (default :data:`~accounting.privacy_filter.FILTER_ORDERS`).
    signing_key:
        The silo's Ed25519 private key (``cryptography``'s ``Ed25519PrivateKey``), or None. Given when the file is
        created, its header names the public key and every line carries an Ed25519 signature (its last line's
        covers the whole chain); a signed ledger is charged only by a budget holding that key, and every check
        verifies the last line's signature. None on a signed ledger: it can be read and checked, not charged.

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
                 max_records_per_person: int | None = None, orders: Sequence[float] = FILTER_ORDERS,
                 signing_key: Any = None) -> None:
        self.path = Path(path)
        policy = checked_policy(epsilon, delta, unit, max_records_per_person, orders)
        if signing_key is not None:
            from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

            if not isinstance(signing_key, Ed25519PrivateKey):
                raise TypeError(f"signing_key must be None or an Ed25519 private key (cryptography's "
                                f"Ed25519PrivateKey), got {type(signing_key).__name__}")
            policy = replace(policy, public_key=public_key_hex(signing_key))
        self._signer = signing_key
        with locked(self.path, exclusive=True, create=True) as stream:
            if os.fstat(stream.fileno()).st_size == 0:
                line, _ = encode_line(policy.header(restarted_from=None), GENESIS_SHA256, signing_key)
                append_line(stream, line)
                found = policy
            else:
                found, _ = parse_header(stream.readline().rstrip(b"\n"), self.path)
        if signing_key is None:  # a reader: the file says whether it is signed, and by whom
            policy = replace(policy, public_key=found.public_key)
        if found != policy:
            raise ValueError(f"{self.path} holds a budget with a different policy ({_describe(found)}) than the one "
                             f"given ({_describe(policy)}); open it with SiloBudget.open(path)")
        self._policy = policy
        self._file = CheckedFile(self.path, policy)

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, signing_key: Any = None) -> SiloBudget:
        """The budget an existing ledger file holds, with the policy its header states (``signing_key``: the
        silo's key, to charge a signed ledger)."""
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"budget file {str(path)!r} does not exist (create it with privfed budget init)")
        with open(path, "rb") as stream:
            policy, _ = parse_header(stream.readline().rstrip(b"\n"), path)
        return cls(path, epsilon=policy.epsilon, delta=policy.delta, unit=policy.unit,
                   max_records_per_person=policy.max_records_per_person, orders=policy.orders,
                   signing_key=signing_key)

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
    def public_key(self) -> str | None:
        """The hex Ed25519 public key the ledger's lines are signed with (None: unsigned)."""
        return self._policy.public_key

    @property
    def filter(self) -> RenyiFilter:
        """The privacy filter the budget enforces."""
        return RenyiFilter(epsilon=self.epsilon, delta=self.delta, orders=self._policy.orders)

    def person_rows(self, person_ids: Sequence[Any] | np.ndarray) -> np.ndarray:
        """The rows a person-level budget's data may use: each person's first ``max_records_per_person`` rows, in
        the order given (row indices, sorted).

        The group-privacy cost this budget charges holds only when no person has more than k rows; this bounds each
        person's contribution to k before the data is used. The choice of one person's rows depends on that
        person's rows alone, so adding or removing a person changes at most k rows of the result.

        Raises a one-line ``ValueError`` when the budget is not person-level or ``person_ids`` is not one id per row.
        """
        if self.unit != "person":
            raise ValueError(f"person_rows needs a person-level budget (unit='person'), this one is {self.unit!r}")
        ids = np.asarray(person_ids)
        if ids.ndim != 1:
            raise ValueError(f"person_ids must hold one id per row (1-D), got shape {ids.shape}")
        _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
        order = np.argsort(inverse, kind="stable")  # rows grouped by person, each person's rows in the given order
        starts = np.searchsorted(inverse[order], np.arange(len(first)))
        rank = np.empty(len(ids), dtype=np.int64)
        rank[order] = np.arange(len(ids)) - np.repeat(starts, np.diff(np.append(starts, len(ids))))
        return np.flatnonzero(rank < int(self.max_records_per_person or 1))

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
        scan = self._file.read()
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
        self._check_signer()
        described = {"kind": mechanism.kind, "unit": mechanism.unit,
                     "parameters": to_json_value(mechanism.parameters(), f"{type(mechanism).__name__}.parameters()")}
        with locked(self.path, exclusive=True) as stream:
            scan = self._file.read(stream, full=False)
            rule = self.filter
            for observer in observers:
                if not rule.admits(scan.spent[observer], cost):
                    raise SiloBudgetExceededError(
                        observer=observer, epsilon=rule.epsilon_of(scan.spent[observer] + cost),
                        budget_epsilon=self.epsilon, delta=self.delta, study=study)
            prefix, head = b"", scan.head
            if scan.torn_tail:
                prefix = b"\n"
                if not scan.tail_is_record:
                    prefix, head = self._sealed(scan)
            index, time = scan.count, now()
            spent = {o: scan.spent[o] + cost if o in observers else scan.spent[o] for o in OBSERVERS}
            record = {"type": "charge", "index": index, "study": study, "pipeline": pipeline,
                      "mechanism": described, "unit": self.unit, "observers": list(observers), "time": time,
                      "rdp": encoded_values(cost[:-1]), "pure_epsilon": encoded_values(cost[-1:])[0],
                      "total": total_member(index + 1, spent)}
            line, digest = encode_line(record, head, self._signer)
            append_line(stream, prefix + line)
            self._file.remember(scan, stream, start=scan.size + len(scan.torn_tail) + len(prefix), line=line,
                           head=digest, spent=spent, added=prefix.count(b"\n") + 1)
        return SiloCharge(index=index, study=study, pipeline=pipeline, mechanism=described, unit=self.unit,
                          observers=observers, time=time, rdp=tuple(float(v) for v in cost[:-1]),
                          pure_epsilon=float(cost[-1]), sha256=digest)

    def _sealed(self, scan: Scan) -> tuple[bytes, str]:
        """The bytes that terminate a torn tail and the torn record after it, and the new chain head."""
        torn, digest = encode_line({"type": "torn", "torn_sha256": sha256_hex(scan.torn_tail),
                                    "torn_bytes": len(scan.torn_tail), "time": now(),
                                    "total": total_member(scan.count, scan.spent)}, scan.head, self._signer)
        return b"\n" + torn + b"\n", digest

    def _check_signer(self) -> None:
        if self._policy.public_key is not None and self._signer is None:
            raise ValueError(f"{self.path} is a signed ledger: charging it needs the silo's signing_key "
                             "(SiloBudget.open(path, signing_key=...))")

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
        scan = self._file.read(full=study is not None)
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
        from .dp_event_release import event_to_json  # dp-accounting's events: imported by the one method using them
        from .interop import data_independent_event

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

    def verify(self, *, head: str | None = None, public_key: Any = None) -> LedgerCheck:
        """Check the whole chain (and, given ``head``, that the last line's sha256 is that one); on a signed ledger
        every line's signature too. ``public_key`` (the silo's Ed25519 public key, or its hex), given: the ledger
        must be signed with that key (what an attacker who can write the file cannot forge)."""
        expected = None if public_key is None else public_key_hex(public_key)
        try:
            problem = self._signature_problems(expected)  # first: it names the first line edited after signing
            if problem is not None:
                return LedgerCheck(False, 0, "", problem, 0)
            scan = self._file.read(fresh=True, full=True)
        except TamperedLedgerError as error:
            return LedgerCheck(False, 0, "", str(error), 0)
        if problem is None and head is not None and head != scan.head:
            problem = (f"{self.path}: the last line's sha256 is {scan.head}, not the expected {head} (lines were "
                       "dropped from the end, or the ledger was replaced)")
        return LedgerCheck(problem is None, scan.count, scan.head, problem,
                           0 if scan.tail_is_record else len(scan.torn_tail))

    def _signature_problems(self, expected: str | None) -> str | None:
        """What is wrong with the file's signatures (None: every record line verifies, or the ledger is unsigned
        and no key was expected)."""
        key = self._policy.public_key
        if expected is not None and key != expected:
            return (f"{self.path}: the ledger is not signed with the expected public key (its header names "
                    f"{key or 'none'}): it was re-keyed or replaced")
        if key is None:
            return None
        with locked(self.path, exclusive=False) as stream:
            data = stream.read()
        for number, line in enumerate(data.split(b"\n"), start=1):
            if line and line_links(line) is not None:
                problem = signature_problem(line, key)
                if problem is not None:
                    return f"{self.path}: line {number}: {problem} (edited after it was signed)"
        return None

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
        self._check_signer()
        with locked(self.path, exclusive=True) as stream:
            data = stream.read()
            try:
                scan_file(data, self.path, full=True)
            except TamperedLedgerError:
                pass
            else:
                raise ValueError(f"{self.path} verifies; there is nothing to reset")
            archive = self.path.with_name(f"{self.path.name}.tampered-{datetime.now(timezone.utc):%Y%m%dT%H%M%S%fZ}")
            os.link(self.path, archive)
            carried = carried_over(data, len(self._policy.orders))
            header, head = encode_line(self._policy.header(
                restarted_from={"archive": archive.name, "file_sha256": sha256_hex(data), "reason": reason.strip()}),
                sha256_hex(data), self._signer)
            lines = [header]
            spent = {o: np.zeros(len(self._policy.orders) + 1) for o in OBSERVERS}
            for index, (observer, curve) in enumerate(item for item in carried.items() if item[1].any()):
                spent[observer] = spent[observer] + curve
                carried_charge = {
                    "type": "charge", "index": index, "study": "(carried over)", "pipeline": "reset",
                    "mechanism": {"kind": "carried_over", "unit": self.unit, "parameters": {"archive": archive.name}},
                    "unit": self.unit, "observers": [observer], "time": now(), "rdp": encoded_values(curve[:-1]),
                    "pure_epsilon": encoded_values(curve[-1:])[0], "total": total_member(index + 1, spent)}
                line, head = encode_line(carried_charge, head, self._signer)
                lines.append(line)
            replacement = self.path.with_name(self.path.name + ".new")
            with open(replacement, "wb") as out:
                out.write(b"\n".join(lines) + b"\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(replacement, self.path)
            self._file.forget()
        return archive

    def _charges(self) -> list[SiloCharge]:
        return self._file.read(full=True).charges or []


def _describe(policy: Policy) -> str:
    person = f", max_records_per_person={policy.max_records_per_person}" if policy.unit == "person" else ""
    return (f"epsilon={policy.epsilon:g}, delta={policy.delta:g}, unit={policy.unit!r}{person}, "
            f"{len(policy.orders)} orders")

