"""Selective-FD's server step of a round: receive the shares, aggregate them, select and label the batch.

:func:`receive_shares` validates each party's :class:`~privfed.pipelines.selective_fd.steps.SelectiveFDShare`;
:func:`server_round` aggregates them — the equally weighted mean of soft predictions
(:func:`aggregate_predictions`) kept by the server-side selector (:func:`confident_examples`), or the hard-label
votes, estimated under randomized response or answered by the server's noisy argmax (GNMax, Confident GNMax) —
and returns the :class:`RoundOutcome` that :class:`~privfed.pipelines.selective_fd.server.FDServer` sends back and
records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...accounting import randomized_response_estimate
from ...accounting.noise_source import NoiseSource
from ..protocol.messages import MessageError, Record
from ..protocol.run_parameters import record_draw
from ..protocol.voting import break_ties_at_random
from .steps import FDProtocol, SelectiveFDRound, SelectiveFDShare

__all__ = [
    "SERVER_NOISE_MODES",
    "RoundOutcome",
    "aggregate_predictions",
    "confident_examples",
    "receive_shares",
    "server_round",
]

#: Modes in which the server releases noisy argmaxes of the clients' hard-label votes.
SERVER_NOISE_MODES = ("gnmax", "confident-gnmax")


# --- the server's two selection steps (pure functions) ----------------------------------------------
def aggregate_predictions(predictions: np.ndarray, shared: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per example, the equally weighted mean of the predictions of the clients that shared it.

    Parameters
    ----------
    predictions : ndarray of shape (clients, examples, classes)
        Each client's class probabilities (one-hot rows for hard labels).
    shared : bool ndarray of shape (clients, examples)
        Which client shared which example.

    Returns
    -------
    ensemble : ndarray of shape (examples, classes)
        The mean over sharing clients; rows of examples nobody shared are 0.
    sharers : ndarray of shape (examples,)
        How many clients shared each example.
    """
    predictions = np.asarray(predictions, dtype=float)
    shared = np.asarray(shared, dtype=bool)
    if predictions.ndim != 3 or shared.shape != predictions.shape[:2]:
        raise ValueError(
            f"predictions must have shape (clients, examples, classes) and shared (clients, examples); "
            f"got {predictions.shape} and {shared.shape}"
        )
    sharers = shared.sum(axis=0)
    total = np.einsum("ce,cek->ek", shared.astype(float), predictions)
    return total / np.maximum(sharers, 1)[:, None], sharers


def confident_examples(ensemble: np.ndarray, tau_server: float) -> np.ndarray:
    """The server-side selector: keep x where max_c e_c(x) ≥ 1 − τ_server/2.

    Equivalently ‖e(x) − onehot(argmax e(x))‖₁ = 2(1 − max_c e_c(x)) ≤ τ_server;
    τ_server = 2 keeps every example, τ_server = 0 only unanimous ones.
    """
    tau_server = float(tau_server)
    if not 0.0 <= tau_server <= 2.0:
        raise ValueError(f"tau_server must be in [0, 2], got {tau_server!r}")
    return np.asarray(ensemble, dtype=float).max(axis=1) >= 1.0 - tau_server / 2.0 - 1e-12



def receive_shares(
    rounds: Sequence[SelectiveFDRound], records: Sequence[Sequence[Record]], names: Sequence[str], *,
    n_classes: int, labels: str, shares: bool, max_bytes: int,
) -> list[SelectiveFDShare | None]:
    """Validate each party's reply to its round message; :class:`MessageError` names the first bad party."""
    replies: list[SelectiveFDShare | None] = []
    for message, sent, name in zip(rounds, records, names):
        if not shares:
            if len(sent):
                raise MessageError(f"{name} sent {len(sent)} messages where nothing is shared")
            replies.append(None)
            continue
        if len(sent) != 1:
            raise MessageError(f"{name} sent {len(sent)} messages, expected one {SelectiveFDShare.KIND!r}")
        share = SelectiveFDShare.from_record(sent[0], sender=name, shapes={"shared": (len(message.batch),)},
                                             max_bytes=max_bytes)
        n_shared = int(share.shared.sum())
        predictions = share.predictions
        where = f"{name} sent a malformed {SelectiveFDShare.KIND!r} message"
        if labels == "soft":
            if predictions.shape != (n_shared, n_classes) or predictions.dtype.kind != "f":
                raise MessageError(f"{where}: predictions of shape {predictions.shape} and dtype {predictions.dtype}, "
                                   f"expected probabilities of shape ({n_shared}, {n_classes})")
            if not (np.isfinite(predictions).all() and (predictions >= 0).all()
                    and np.allclose(predictions.sum(axis=1), 1.0, atol=1e-6)):
                raise MessageError(f"{where}: predictions are not probability rows (non-negative, summing to 1)")
        elif (predictions.shape != (n_shared,) or predictions.dtype.kind not in "iu"
              or predictions.min(initial=0) < 0 or predictions.max(initial=0) >= n_classes):
            raise MessageError(f"{where}: predictions of shape {predictions.shape} and dtype {predictions.dtype}, "
                               f"expected ({n_shared},) class codes in 0..{n_classes - 1}")
        replies.append(share)
    return replies


@dataclass(frozen=True, eq=False)
class RoundOutcome:
    """The server's result of one round: what it sends back, and what its history and ledger record."""

    kept: np.ndarray  # positions in the batch
    targets: np.ndarray  # (kept, C) distributions (soft) or (kept,) class codes (hard)
    shared: np.ndarray  # (clients, batch) share masks
    sharers: np.ndarray  # (batch,) clients that shared each example
    released: tuple[np.ndarray, np.ndarray] | None  # GNMax: (vote histograms answered, cleared the threshold)


def server_round(
    shares: Sequence[SelectiveFDShare], n_classes: int, protocol: FDProtocol, keep_probability: float | None,
    rng: np.random.Generator, *, noise: NoiseSource | None = None,
) -> RoundOutcome:
    """Aggregate, select and label one batch (the server's step of a round).

    ``noise`` is the source of the server's GNMax (and Confident GNMax threshold) noise — None: a fresh secret
    one; ``rng`` breaks ties between randomized-response estimates (post-processing, no guarantee relies on it).
    """
    shared = np.stack([share.shared for share in shares])
    if protocol.labels == "soft":
        predictions = np.zeros((*shared.shape, n_classes))
        for client_predictions, share in zip(predictions, shares):
            client_predictions[share.shared] = share.predictions
        ensemble, sharers = aggregate_predictions(predictions, shared)
        kept = np.flatnonzero((sharers > 0) & confident_examples(ensemble, protocol.tau_server))
        return RoundOutcome(kept, ensemble[kept], shared, sharers, None)
    votes = np.zeros((shared.shape[1], n_classes), dtype=np.int64)
    for share in shares:
        votes[np.flatnonzero(share.shared), share.predictions] += 1
    sharers = votes.sum(axis=1)
    answered = np.flatnonzero(sharers > 0)
    released = None
    if protocol.privacy in SERVER_NOISE_MODES:
        assert protocol.sigma is not None  # GNMax's σ is set (FDProtocol)
        record_draw("Selective-FD server GNMax", "gaussian", sigma=protocol.sigma)
        if protocol.privacy == "confident-gnmax":
            assert protocol.sigma_threshold is not None  # Confident GNMax's σ₁ is set (FDProtocol)
            record_draw("Selective-FD server threshold step", "gaussian-threshold", sigma=protocol.sigma_threshold)
        gaussian = (NoiseSource.secret() if noise is None else noise).generator
        released_votes = votes[answered]
        passed = np.ones(len(answered), dtype=bool)
        if protocol.privacy == "confident-gnmax":  # PATE 2018 Algorithm 1: the threshold step first
            assert protocol.sigma_threshold is not None and protocol.threshold is not None
            top = released_votes.max(axis=1) + gaussian.normal(0.0, protocol.sigma_threshold, size=len(answered))
            passed = top >= protocol.threshold
        released = (released_votes, passed)
        noisy = released_votes + gaussian.normal(0.0, protocol.sigma, size=released_votes.shape)
        labels, confidence = noisy.argmax(axis=1), noisy.max(axis=1) / sharers[answered]
        confidence = np.where(passed, confidence, -np.inf)  # ⊥: not answered
    else:
        counts = votes[answered].astype(float)
        if keep_probability is not None:
            counts = randomized_response_estimate(votes[answered], keep_probability=keep_probability)
        labels = break_ties_at_random(counts, rng)
        confidence = counts.max(axis=1) / sharers[answered]
    confident = confidence >= 1.0 - protocol.tau_server / 2.0 - 1e-12
    return RoundOutcome(answered[confident], labels[confident], shared, sharers, released)
