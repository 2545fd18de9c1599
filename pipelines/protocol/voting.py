"""Vote counting and noisy aggregation for PATE-style pipelines (FedKT Algorithm 1)."""

from __future__ import annotations

import numpy as np

__all__ = ["break_ties_at_random", "consistent_votes", "noisy_labels", "prediction_votes"]


def prediction_votes(predictions: np.ndarray, n_classes: int) -> np.ndarray:
    """Vote histogram (queries × classes) of hard predictions of shape (voters, queries)."""
    predictions = np.asarray(predictions, dtype=np.int64)
    votes = np.zeros((predictions.shape[1], n_classes), dtype=np.int64)
    for row in predictions:
        np.add.at(votes, (np.arange(predictions.shape[1]), row), 1)
    return votes


def consistent_votes(predictions: np.ndarray, n_classes: int) -> np.ndarray:
    """FedKT's consistent voting over parties' students.

    ``predictions`` has shape (parties, s, queries). A party contributes s votes
    to class c on a query only if all its s students predict c, and nothing
    otherwise (FedKT §3.2). One party therefore moves at most s votes, which is
    the k = s of the party-level analysis.
    """
    predictions = np.asarray(predictions, dtype=np.int64)
    parties, students, queries = predictions.shape
    agree = (predictions == predictions[:, :1, :]).all(axis=1)
    votes = np.zeros((queries, n_classes), dtype=np.int64)
    for party in range(parties):
        rows = np.flatnonzero(agree[party])
        np.add.at(votes, (rows, predictions[party, 0, rows]), students)
    return votes


def break_ties_at_random(votes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """argmax per row, ties broken uniformly at random (not toward the lowest class)."""
    votes = np.asarray(votes, dtype=float)
    # Integer counts: a jitter in [0, 1/2) reorders only tied maxima, uniformly.
    return np.argmax(votes + 0.5 * rng.random(votes.shape), axis=1)


def noisy_labels(
    votes: np.ndarray, rng: np.random.Generator, *, gamma: float | None = None, sigma: float | None = None
) -> np.ndarray:
    """argmax of the votes with Laplace(1/γ) or Gaussian N(0, σ²) noise on each count, or none.

    Without noise, ties are broken at random. Noise is drawn independently for
    every count of every query (PATE 2017's LNMax; PATE 2018's GNMax).
    """
    votes = np.asarray(votes, dtype=float)
    if gamma is not None:
        return np.argmax(votes + rng.laplace(0.0, 1.0 / gamma, size=votes.shape), axis=1)
    if sigma is not None:
        return np.argmax(votes + rng.normal(0.0, sigma, size=votes.shape), axis=1)
    return break_ties_at_random(votes, rng)
