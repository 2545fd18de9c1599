"""A ledger's private evidence (vote matrices): kept in memory, out of the ledger's JSON, each set of arrays
bound to its entry by a salted sha256 commitment (:func:`~accounting.fingerprint.commit_evidence`).

The public entry holds only the commitment; :class:`CommittedEvidence` holds the arrays and their salt, writes
them for ``evidence.npz`` (keys ``"<sha256>/<name>"`` and ``"<sha256>#salt"``) and checks arrays read back
against the commitments of the entries that reference them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from .fingerprint import commit_evidence, new_salt
from .ledger_entry import LedgerEntry, LedgerIntegrityError

__all__ = ["CommittedEvidence"]


class CommittedEvidence:
    """The private arrays of a ledger's entries, keyed by their salted sha256 commitment."""

    def __init__(self) -> None:
        self._arrays: dict[str, dict[str, np.ndarray]] = {}

    def commit(self, arrays: Mapping[str, np.ndarray]) -> str:
        """Keep ``arrays`` under a fresh salt and return their commitment (what the public entry records)."""
        arrays = {name: np.array(array) for name, array in arrays.items()}
        salt = new_salt()
        commitment = commit_evidence(arrays, salt)
        self._arrays[commitment] = {**arrays, "#salt": salt}
        return commitment

    def arrays(self, commitment: str) -> dict[str, np.ndarray] | None:
        """The arrays committed as ``commitment`` (without their salt); None when they are not held."""
        held = self._arrays.get(commitment)
        return None if held is None else {name: array for name, array in held.items() if name != "#salt"}

    def export(self, entries: Iterable[LedgerEntry]) -> dict[str, np.ndarray]:
        """The evidence of every entry, ready for ``np.savez``; ValueError when an entry's is not held."""
        exported: dict[str, np.ndarray] = {}
        for entry in entries:
            for unit, member in entry.analyses.items():
                commitment = member.evidence_sha256
                if commitment is None:
                    continue
                if commitment not in self._arrays:
                    raise ValueError(
                        f"this ledger holds no evidence for entry {entry.index} ({unit}): it was read from JSON "
                        "without its evidence file; pass evidence= to Ledger.from_json"
                    )
                for name, array in self._arrays[commitment].items():
                    key = f"{commitment}{name}" if name == "#salt" else f"{commitment}/{name}"
                    exported[key] = array
        return exported

    def attach(self, entries: Iterable[LedgerEntry], evidence: Mapping[str, np.ndarray]) -> None:
        """Hold the arrays of ``evidence`` (as :meth:`export` writes them) after checking each against the
        commitment of the entry that references it; :class:`LedgerIntegrityError` for missing, altered or stray
        arrays."""
        referenced = set()
        for entry in entries:
            for unit, member in entry.analyses.items():
                commitment = member.evidence_sha256
                if commitment is None:
                    continue
                referenced.add(commitment)
                label = f"entry {entry.index} ({member.kind}, {unit})"
                if f"{commitment}#salt" not in evidence:
                    raise LedgerIntegrityError(
                        f"evidence for {label} is missing: no arrays are committed as {commitment[:16]}…; "
                        "the evidence belongs to another ledger or was edited"
                    )
                prefix = f"{commitment}/"
                arrays = {
                    key[len(prefix):]: np.asarray(value) for key, value in evidence.items() if key.startswith(prefix)
                }
                salt = np.asarray(evidence[f"{commitment}#salt"])
                if commit_evidence(arrays, salt) != commitment:
                    raise LedgerIntegrityError(
                        f"evidence for {label} does not match its sha256 commitment: the evidence was swapped or edited"
                    )
                self._arrays[commitment] = {**arrays, "#salt": salt}
        stray = sorted({key.split("/")[0].split("#")[0] for key in evidence} - referenced)
        if stray:
            raise LedgerIntegrityError(
                f"evidence holds arrays for {len(stray)} commitment(s) no entry references "
                f"({', '.join(s[:16] + '…' for s in stray)}): it belongs to another ledger"
            )
