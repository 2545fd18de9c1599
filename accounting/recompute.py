"""Rebuilding one recorded analysis from its public parameters (and evidence) and comparing it with the record.

One function serves :meth:`privfed.accounting.ledger.Ledger.verify` (and so
``load_bundle``) and ``privfed audit``, so that the two check exactly the same
things:

* a data-independent mechanism is rebuilt from its parameters and both curves are compared;
* a data-dependent one with its verified evidence is rebuilt from the raw votes, both curves compared;
* a data-dependent one without evidence is rebuilt as its public view
  (:class:`~privfed.accounting.registry.PublicVoteView`, memory independent of
  the claimed number of queries) and its data-independent curve compared — the
  data-dependent curve needs the private votes.

In every case the recorded number of queries, the data-dependence flag and the
pure ε must match the rebuilt mechanism's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .ledger_entry import UnitAnalysis, analyse_mechanism
from .registry import mechanism_from_record, public_mechanism_from_record

__all__ = ["RTOL", "Recomputation", "recompute_analysis"]

#: Relative tolerance when a recorded curve is compared with its recomputation.
RTOL = 1e-9
_ATOL = 1e-12
#: What a rebuild of untrusted parameters may raise; each becomes a one-line problem, never a traceback.
_REBUILD_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, ArithmeticError, MemoryError)


@dataclass(frozen=True)
class Recomputation:
    """The outcome of :func:`recompute_analysis`.

    ``fresh`` is the rebuilt analysis (None when the parameters could not be
    rebuilt), ``checked`` the curve names compared, ``how`` a phrase for
    reports and ``problems`` one line per mismatch (empty: the record holds).
    """

    fresh: UnitAnalysis | None
    checked: tuple[str, ...]
    how: str
    problems: tuple[str, ...]


def _close(recorded: float, recomputed: float) -> bool:
    if math.isinf(recorded) or math.isinf(recomputed):
        return recorded == recomputed
    return math.isclose(recorded, recomputed, rel_tol=RTOL, abs_tol=_ATOL)


def recompute_analysis(member: UnitAnalysis, evidence: Mapping[str, np.ndarray] | None) -> Recomputation:
    """Rebuild ``member`` from its recorded parameters (with ``evidence``, its verified private arrays, if given)."""
    checked: tuple[str, ...]
    try:
        if evidence is not None:
            mechanism = mechanism_from_record(member.record(), evidence=evidence)
            checked, how = ("rdp", "rdp_data_independent"), "recomputed from the raw votes"
        else:
            mechanism, public_view = public_mechanism_from_record(member.record())
            if public_view:
                checked, how = ("rdp_data_independent",), "data-independent curve rebuilt from its parameters"
            else:
                checked, how = ("rdp", "rdp_data_independent"), "rebuilt from its parameters"
        fresh = analyse_mechanism(mechanism, evidence_sha256=member.evidence_sha256)
    except _REBUILD_ERRORS as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        return Recomputation(None, (), "not rebuilt", (f"cannot be rebuilt from its recorded parameters: {message}",))
    problems = []
    if fresh.num_queries != member.num_queries or fresh.data_dependent != member.data_dependent:
        problems.append(f"records {member.num_queries} queries (data-dependent: {member.data_dependent}) but its "
                        f"parameters give {fresh.num_queries} ({fresh.data_dependent})")
    recorded_pure, fresh_pure = member.pure_epsilon, fresh.pure_epsilon
    if (fresh_pure is None) != (recorded_pure is None) or (
            fresh_pure is not None and recorded_pure is not None and not _close(recorded_pure, fresh_pure)):
        problems.append(f"records pure ε {member.pure_epsilon} but its parameters give {fresh.pure_epsilon}")
    for analysis, curve in member.curves.items():
        new = fresh.curves.get(analysis)
        if new is None or new.orders != curve.orders:
            problems.append(f"its {analysis} curve cannot be recomputed on its recorded orders")
            continue
        for name in checked:
            recorded, recomputed = np.asarray(getattr(curve, name)), np.asarray(getattr(new, name))
            if not np.allclose(recorded, recomputed, rtol=RTOL, atol=_ATOL):
                finite = np.isfinite(recorded) & np.isfinite(recomputed)
                gap = np.where(finite, np.abs(recorded - recomputed), np.inf)
                worst = int(np.argmax(gap))
                problems.append(f"recorded {analysis} {name} differs from the recomputed one "
                                f"(order {curve.orders[worst]:g}: {recorded[worst]:.6g} recorded vs "
                                f"{recomputed[worst]:.6g})")
    return Recomputation(fresh, checked, how, tuple(problems))
