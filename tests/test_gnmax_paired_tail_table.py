"""GNMax's failure bounds from the table of tail ratios are bit for bit those computed per vote (issue 46, item 4).

``reference_log_failure_bounds`` is the computation the table replaced (main at f0cdd7e): the log tails gathered per
gap, the winner's set to −∞, the largest subtracted and exponentiated per vote. Every ε GNMax prints is a function
of these bounds, so equality here (``np.array_equal``, not a tolerance) keeps every printed ε as it was.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from privfed.accounting import GaussianNoisyMax, account
from privfed.accounting import gaussian_noisy_max as module
from privfed.accounting.orders import default_orders
from scipy import stats

from bench.accounting import simulate_votes


def reference_log_failure_bounds(votes: np.ndarray, sigma: float) -> np.ndarray:
    """log q per query as privfed computed it before the table of tail ratios (per-gap tails, exp per vote)."""
    votes = np.asarray(votes, dtype=np.int64)
    num_queries, num_classes = votes.shape
    cap = math.log1p(-1.0 / num_classes)
    table = stats.norm.logsf(np.arange(int(votes.max()) + 1, dtype=float), scale=math.sqrt(2.0) * sigma)
    log_bounds = np.empty(num_queries, dtype=float)
    for start in range(0, num_queries, 8_192):
        chunk = votes[start : start + 8_192]
        log_tails = table[chunk.max(axis=1)[:, None] - chunk]  # (queries, classes)
        log_tails[np.arange(len(chunk)), chunk.argmax(axis=1)] = -np.inf
        peak = log_tails.max(axis=1)
        terms = np.exp(log_tails - peak[:, None])
        total = terms[:, 0].copy()
        for column in range(1, num_classes):  # summed class after class, in their order
            total += terms[:, column]
        log_q = np.log(total) + peak
        log_bounds[start : start + len(chunk)] = np.minimum(log_q, cap)
    return log_bounds


def _cases() -> list[tuple[str, np.ndarray, float]]:
    rng = np.random.default_rng(3)
    bench_votes = simulate_votes(100_000, 10)  # the bench's simulated votes (250 teachers), a tenth of its queries
    return [
        *[(f"bench σ={sigma:g}", bench_votes, sigma) for sigma in (40.0, 5.0, 0.5, 400.0)],
        ("ledger tests' votes", rng.multinomial(50, [0.7, 0.2, 0.1], size=2_000), 40.0),
        ("two classes, many ties", rng.integers(0, 3, size=(5_000, 2)), 1.0),
        ("100 classes", rng.multinomial(500, np.full(100, 0.01), size=1_000), 12.0),
        ("one query", np.array([[9, 9, 0]]), 2.0),
        ("tails that underflow to −inf", np.array([[1000, 0, 3], [0, 1000, 1000], [5, 4, 1000]]), 1e-3),
        ("gaps past the table: per-vote path", rng.integers(0, 3_000, size=(500, 4)), 300.0),
    ]


@pytest.mark.parametrize("name, votes, sigma", _cases(), ids=[case[0] for case in _cases()])
def test_the_table_of_tail_ratios_gives_the_same_bits_as_the_per_vote_computation(name, votes, sigma):
    expected = reference_log_failure_bounds(votes, sigma)
    assert np.array_equal(module.gaussian_log_failure_bounds(votes, sigma), expected, equal_nan=True)


def test_the_bench_releases_curves_and_epsilons_are_unchanged(monkeypatch):
    votes = simulate_votes(50_000, 10)
    classic, tight = default_orders("classic"), default_orders("tight")
    new = GaussianNoisyMax(votes, 40.0)
    results = (new.rdp(classic, analysis="classic"), account(new, delta=1e-5, analysis="classic").epsilon,
               account(GaussianNoisyMax(votes, 40.0), delta=1e-5).epsilon)
    monkeypatch.setattr(module, "gaussian_log_failure_bounds", reference_log_failure_bounds)
    old = GaussianNoisyMax(votes, 40.0)
    assert np.array_equal(results[0], old.rdp(classic, analysis="classic"))
    assert results[1] == account(old, delta=1e-5, analysis="classic").epsilon
    assert results[2] == account(GaussianNoisyMax(votes, 40.0), delta=1e-5).epsilon
    assert tight.size > classic.size  # both analyses' grids were exercised
