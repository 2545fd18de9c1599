"""The accounting computations as they were before the fast paths (commit 9d6f49b), kept as references.

The fast paths must give the same numbers: the tests compare them with these on random vote matrices, and
``bench/accounting_speed.py`` times both side by side. Nothing in the library imports this module.
"""

from __future__ import annotations

import math

import numpy as np
from privfed.accounting import GaussianNoisyMax, LaplaceNoisyMax
from privfed.accounting.gaussian_noisy_max import gaussian_noisy_max_rdp
from privfed.accounting.laplace_noisy_max import _data_dependent_rdp
from scipy import special, stats

__all__ = ["gaussian_log_failure_bounds", "gaussian_rdp", "laplace_failure_bounds", "laplace_rdp"]

_CHUNK_ROWS = 65_536
_CHUNK_CELLS = 131_072
_SMALLEST_FAILURE_BOUND = float(np.finfo(float).tiny)


def _laplace_gap_terms(gaps: np.ndarray, gamma: float) -> np.ndarray:
    largest = int(gaps.max(initial=0))
    grid = gamma * np.arange(largest + 1, dtype=float)
    with np.errstate(over="ignore"):
        table = (2.0 + grid) / (4.0 * np.exp(grid))
    table[0] = 0.0
    return np.take(table, gaps)


def laplace_failure_bounds(votes: np.ndarray, gamma: float) -> np.ndarray:
    """PATE 2017 Lemma 4's q per query: max, gaps, tie count, per-gap table and sum as separate passes."""
    votes = np.asarray(votes, dtype=np.int64)
    num_queries, num_classes = votes.shape
    cap = 1.0 - 1.0 / num_classes
    bounds = np.empty(num_queries, dtype=float)
    for start in range(0, num_queries, _CHUNK_ROWS):
        chunk = votes[start : start + _CHUNK_ROWS].T
        gaps = chunk.max(axis=0) - chunk
        ties = (gaps == 0).sum(axis=0, dtype=np.int32)
        q = np.add.reduce(_laplace_gap_terms(gaps, gamma), axis=0) + 0.5 * (ties - 1.0)
        np.clip(q, _SMALLEST_FAILURE_BOUND, cap, out=bounds[start : start + chunk.shape[1]])
    return bounds


def laplace_rdp(mechanism: LaplaceNoisyMax, orders: np.ndarray, analysis: str) -> np.ndarray:
    """The composed RDP curve: every distinct q sorted, then the inapplicable ones set aside."""
    independent = mechanism._per_query_independent_of_votes(orders, analysis, mechanism.votes_per_unit)
    values, counts = np.unique(laplace_failure_bounds(mechanism.votes, mechanism.gamma), return_counts=True)
    applicable = values < 1.0 / (math.exp(mechanism.epsilon_per_query) + 1.0)
    total = float(counts[~applicable].sum()) * independent
    values, counts = values[applicable], counts[applicable].astype(float)
    rows = max(1, _CHUNK_CELLS // len(orders))
    for start in range(0, len(values), rows):
        bound = _data_dependent_rdp(values[start : start + rows], mechanism.epsilon_per_query, orders)
        np.minimum(bound, independent, out=bound)
        total += counts[start : start + rows] @ bound
    return total


def gaussian_log_failure_bounds(votes: np.ndarray, sigma: float) -> np.ndarray:
    """PATE 2018 Prop. 8's log q per query: ``norm.logsf`` of every vote's gap, then ``logsumexp``."""
    votes = np.asarray(votes, dtype=np.int64)
    num_queries, num_classes = votes.shape
    cap = math.log1p(-1.0 / num_classes)
    log_bounds = np.empty(num_queries, dtype=float)
    for start in range(0, num_queries, _CHUNK_ROWS):
        chunk = votes[start : start + _CHUNK_ROWS].astype(float)
        winners = chunk.argmax(axis=1)
        log_tails = stats.norm.logsf(
            chunk[np.arange(len(chunk)), winners][:, None] - chunk, scale=math.sqrt(2.0) * sigma
        )
        log_tails[np.arange(len(chunk)), winners] = -np.inf
        np.minimum(special.logsumexp(log_tails, axis=1), cap, out=log_bounds[start : start + len(chunk)])
    return log_bounds


def gaussian_rdp(mechanism: GaussianNoisyMax, orders: np.ndarray) -> np.ndarray:
    """The composed RDP curve: PATE 2018's bound evaluated at every distinct log q."""
    values, counts = np.unique(gaussian_log_failure_bounds(mechanism.votes, mechanism.sigma), return_counts=True)
    rows = max(1, 1_048_576 // len(orders))
    total = np.zeros_like(orders)
    for start in range(0, len(values), rows):
        per_query = gaussian_noisy_max_rdp(values[start : start + rows], mechanism.effective_sigma, orders)
        total = total + counts[start : start + rows].astype(float) @ per_query
    return total
