"""Who sees a release: the observers a privacy guarantee is stated against.

A federated pipeline releases different things to different parties. The
**public** sees the published model and published outputs (noisy labels, the
ledger); the **coordinator** (the server that runs the protocol: Flower's
SuperLink/ServerApp machine) receives every message the parties send, and it
computes and publishes the public outputs. Every ledger entry lists the
observers that see it (:attr:`~privfed.accounting.ledger_entry.LedgerEntry.observers`),
and :meth:`privfed.Ledger.account` states ε per observer: the composition of the
releases that observer sees. A release an observer sees without any mechanism
covering it makes that observer's ε infinite.

Whatever the public sees is computed by the coordinator from what the
coordinator sees (post-processing), so the public's ε is never larger than the
coordinator's where every public release is also seen by the coordinator.

**What every observer's ε assumes** (:data:`DEFAULT_ASSUMPTIONS`), whatever the
ledger says:

* *Honest execution*: every party and the coordinator run the protocol as
  implemented: each noise draw is added as recorded, from the drawing machine's
  own secret source (:class:`~privfed.accounting.noise_source.NoiseSource`), and
  every release is recorded in the ledger. A coordinator that deviates (sends
  crafted tasks, drops parties to isolate one) is outside the guarantee.
* *No collusion*: the observer holds only what it is listed as seeing. The
  coordinator's ε assumes it colludes with no party: a party that shares its own
  data, models or noise shares with the coordinator removes that noise from the
  coordinator's view (under secure aggregation, a party facing the coordinator
  and the other n − 1 parties keeps only its own share of the noise).
* The public sees the published outputs only, never a message of the protocol.

A ledger entry states any further assumption its guarantee needs (a trusted
shuffler, a bound on colluding parties, a public sample rate) with
``assumptions=`` (:meth:`privfed.Ledger.record`, :meth:`privfed.Ledger.record_unaccounted`);
every report whose ε composes the entry prints it
(:attr:`~privfed.accounting.report.PrivacyReport.assumptions`).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["DEFAULT_ASSUMPTIONS", "OBSERVERS", "check_observer", "check_observers", "describe_observer"]

#: The observers, in the order reports list them.
OBSERVERS: tuple[str, ...] = ("public", "coordinator")

_DESCRIPTIONS = {
    "public": "the public: whoever sees the released model and the published outputs",
    "coordinator": "the coordinator: the server that receives every message the parties send in the protocol",
}


#: What every observer's ε assumes unless a ledger entry says otherwise (see the module docstring).
DEFAULT_ASSUMPTIONS: dict[str, tuple[str, ...]] = {
    "public": (
        "honest execution: every party and the coordinator ran the protocol as implemented, each adding its noise "
        "from its own secret source and recording every release",
        "the public sees the published model and outputs only",
    ),
    "coordinator": (
        "honest execution: the coordinator and every party ran the protocol as implemented, each party adding its "
        "noise from its own secret source",
        "no collusion: the coordinator holds only the messages the parties send it and colludes with no party",
    ),
}


def check_observer(observer: object) -> str:
    """``observer`` if it is one of :data:`OBSERVERS`, else a one-line ``ValueError``."""
    if not isinstance(observer, str) or observer not in OBSERVERS:
        raise ValueError(f"observer must be one of {', '.join(OBSERVERS)}, got {observer!r}")
    return observer


def check_observers(observers: object) -> tuple[str, ...]:
    """A non-empty, duplicate-free selection of :data:`OBSERVERS`, returned in their canonical order."""
    if isinstance(observers, str) or not isinstance(observers, Iterable):
        raise TypeError(f"observers must be a tuple of observers from {OBSERVERS}, got {observers!r}")
    chosen = list(observers)
    for observer in chosen:
        if not isinstance(observer, str) or observer not in OBSERVERS:
            raise ValueError(f"observers must be chosen from {', '.join(OBSERVERS)}, got {observer!r}")
    if not chosen or len(set(chosen)) != len(chosen):
        raise ValueError(f"observers must name each observer at most once and at least one, got {tuple(chosen)!r}")
    return tuple(observer for observer in OBSERVERS if observer in chosen)


def describe_observer(observer: str) -> str:
    """One line saying who the observer is."""
    return _DESCRIPTIONS[check_observer(observer)]
