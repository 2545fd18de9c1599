"""The fused failure bounds and the composed curves give the numbers of the previous computation.

The previous computation (tests/accounting_reference.py) is what the fast paths replaced: q for Laplace and
log q for GNMax in separate numpy passes, every distinct q sorted. The vote matrices mix ties, unanimous rows,
rows of zeros (no teacher answered) and spreads, and span several of the fast paths' chunks.
"""

from __future__ import annotations

import numpy as np
import pytest
from privfed.accounting import GaussianNoisyMax, LaplaceNoisyMax
from privfed.accounting import gaussian_noisy_max as gaussian_module
from privfed.accounting import laplace_noisy_max as laplace_module
from privfed.accounting.gaussian_noisy_max import gaussian_log_failure_bounds
from privfed.accounting.laplace_noisy_max import laplace_failure_bounds
from privfed.accounting.orders import default_orders

from tests import accounting_reference as reference


def _votes(seed: int, queries: int, classes: int, teachers: int) -> np.ndarray:
    """Dirichlet profiles from confident to contested, with unanimous, all-zero and all-tied rows mixed in."""
    rng = np.random.default_rng(seed)
    concentration = rng.choice([0.05, 0.3, 3.0, 50.0], size=queries)
    profiles = rng.gamma(concentration[:, None], size=(queries, classes)) + 1e-12
    profiles /= profiles.sum(axis=1, keepdims=True)
    votes = rng.multinomial(teachers, profiles)
    kind = rng.integers(0, 8, size=queries)
    votes[kind == 0] = 0  # no teacher answered: every class tied at 0
    votes[kind == 1] = 0
    votes[kind == 1, rng.integers(0, classes, size=int((kind == 1).sum()))] = teachers  # unanimous
    votes[kind == 2] = teachers // classes  # all tied
    return votes


CASES = [(seed, queries, classes, teachers) for seed, (queries, classes, teachers) in enumerate(
    [(1, 2, 1), (7, 2, 3), (500, 3, 40), (20_000, 10, 250), (3_000, 100, 7), (9_000, 5, 3_000)]
)]


@pytest.mark.parametrize(("seed", "queries", "classes", "teachers"), CASES)
@pytest.mark.parametrize("gamma", [0.01, 0.05, 1.3])
def test_laplace_failure_bounds_are_the_previous_ones(seed, queries, classes, teachers, gamma) -> None:
    votes = _votes(seed, queries, classes, teachers)
    np.testing.assert_array_equal(laplace_failure_bounds(votes, gamma), reference.laplace_failure_bounds(votes, gamma))


def test_laplace_failure_bounds_beyond_the_table_are_the_previous_ones(monkeypatch) -> None:
    """Vote counts above the tabulated range take the per-cell path; it gives the same q."""
    votes = _votes(11, 2_000, 4, 400)
    monkeypatch.setattr(laplace_module, "_MAX_TABULATED_GAP", 100)
    np.testing.assert_allclose(laplace_failure_bounds(votes, 0.02), reference.laplace_failure_bounds(votes, 0.02),
                               rtol=1e-15, atol=0)


@pytest.mark.parametrize(("seed", "queries", "classes", "teachers"), CASES)
@pytest.mark.parametrize("analysis", ["classic", "tight"])
@pytest.mark.parametrize(("gamma", "k"), [(0.05, 1), (0.01, 3), (0.2, 1)])
def test_laplace_curves_are_the_previous_ones(seed, queries, classes, teachers, analysis, gamma, k) -> None:
    mechanism = LaplaceNoisyMax(_votes(seed, queries, classes, teachers), gamma, k)
    orders = default_orders(analysis)
    np.testing.assert_allclose(mechanism.rdp(orders, analysis=analysis),
                               reference.laplace_rdp(mechanism, orders, analysis), rtol=1e-12, atol=0)


@pytest.mark.parametrize(("seed", "queries", "classes", "teachers"), CASES)
@pytest.mark.parametrize("sigma", [0.5, 4.0, 40.0])
def test_gaussian_log_failure_bounds_are_the_previous_ones(seed, queries, classes, teachers, sigma) -> None:
    votes = _votes(seed, queries, classes, teachers)
    np.testing.assert_allclose(gaussian_log_failure_bounds(votes, sigma),
                               reference.gaussian_log_failure_bounds(votes, sigma), rtol=1e-12, atol=0)


@pytest.mark.parametrize(("seed", "queries", "classes", "teachers"), CASES)
@pytest.mark.parametrize("analysis", ["classic", "tight"])
@pytest.mark.parametrize(("sigma", "k"), [(20.0, 1), (4.0, 1), (150.0, 3)])
def test_gaussian_curves_are_the_previous_ones(seed, queries, classes, teachers, analysis, sigma, k) -> None:
    mechanism, orders = GaussianNoisyMax(_votes(seed, queries, classes, teachers), sigma, k), default_orders(analysis)
    np.testing.assert_allclose(mechanism.rdp(orders, analysis=analysis), reference.gaussian_rdp(mechanism, orders),
                               rtol=1e-12, atol=0)


def test_gaussian_log_failure_bounds_beyond_the_table_are_the_previous_ones(monkeypatch) -> None:
    """Vote counts above the tabulated range take the per-vote path; it gives the same log q."""
    votes = _votes(12, 2_000, 4, 400)
    monkeypatch.setattr(gaussian_module, "_MAX_TABULATED_GAP", 100)
    np.testing.assert_allclose(gaussian_log_failure_bounds(votes, 30.0),
                               reference.gaussian_log_failure_bounds(votes, 30.0), rtol=1e-12, atol=0)
