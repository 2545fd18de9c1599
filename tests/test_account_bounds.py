"""Every reported ε is the minimum of its valid bounds, adding a release never lowers it, bad inputs are refused."""

from __future__ import annotations

import logging
import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from privfed.accounting.gaussian_noisy_max import gaussian_noisy_max_rdp

import privfed


# --- the pure-DP bound caps the tight analysis -----------------------------------------------------
def test_one_laplace_query_never_prints_more_than_its_pure_epsilon():
    """One LaplaceNoisyMax query, γ = 1, k = 1: pure 2.0; the RDP/PLD figure alone was 2.0134."""
    mechanism = privfed.LaplaceNoisyMax(np.array([[3, 3]]), gamma=1.0)  # a tie: no data-dependent gain
    report = privfed.account(mechanism, delta=1e-5)
    assert report.epsilon <= 2.0 and report.epsilon_data_independent <= 2.0
    assert report.method == "pure" and "basic composition" in report.conversion
    assert report.mechanisms[0].epsilon <= 2.0
    assert "≤" not in str(report) and "ε = 2.000" in str(report)


def test_randomized_response_never_prints_more_than_its_pure_epsilon():
    report = privfed.account(privfed.RandomizedResponse(2, epsilon=1.0, labels_per_report=2), delta=1e-5)
    assert report.epsilon <= 1.0 and report.method == "pure"


def test_classic_analysis_stays_the_papers_arithmetic():
    mechanism = privfed.LaplaceNoisyMax(np.array([[5, 0]]), gamma=1.0)
    assert privfed.account(mechanism, delta=1e-5, analysis="classic").method == "rdp"


def test_ledger_total_agrees_with_account_when_pure_is_smallest():
    ledger = privfed.Ledger(delta=1e-5)
    mechanisms = [privfed.RandomizedResponse(2, epsilon=1.0, labels_per_report=2),
                  privfed.RandomizedResponse(3, epsilon=0.5, reports=2)]
    for mechanism in mechanisms:
        ledger.record(mechanism)
    direct = privfed.account(mechanisms, delta=1e-5)
    total = ledger.account()
    assert total.epsilon == pytest.approx(direct.epsilon, rel=1e-12) and total.method == direct.method
    assert [row.epsilon for row in total.mechanisms] == pytest.approx([row.epsilon for row in direct.mechanisms])


# --- adding a mechanism never lowers the total -------------------------------------------------------
@st.composite
def mechanisms(draw):
    kind = draw(st.sampled_from(["laplace", "gaussian", "rr", "qle", "dpsgd"]))
    if kind == "laplace":
        queries = draw(st.integers(1, 3))
        votes = np.array(draw(st.lists(st.integers(0, 40), min_size=2 * queries, max_size=2 * queries)))
        return privfed.LaplaceNoisyMax(votes.reshape(-1, 2), draw(st.floats(0.01, 2.0)), draw(st.integers(1, 3)),
                                       unit="party")
    if kind == "gaussian":
        queries = draw(st.integers(1, 2))
        votes = np.array(draw(st.lists(st.integers(0, 40), min_size=3 * queries, max_size=3 * queries)))
        return privfed.GaussianNoisyMax(votes.reshape(-1, 3), draw(st.floats(1.0, 40.0)), unit="party")
    if kind == "rr":
        return privfed.RandomizedResponse(draw(st.integers(2, 5)), epsilon=draw(st.floats(0.02, 4.0)),
                                          labels_per_report=draw(st.integers(1, 3)), reports=draw(st.integers(1, 5)))
    if kind == "qle":
        return privfed.QuantizedLaplaceEnsemble(draw(st.integers(2, 4)), draw(st.floats(0.1, 2.0)),
                                                draw(st.floats(0.005, 0.5)), draw(st.integers(1, 20)))
    return privfed.DPSGD(draw(st.floats(0.8, 4.0)), draw(st.floats(0.001, 0.05)), draw(st.integers(1, 50)),
                         unit="party")


@settings(max_examples=30, deadline=None)
@given(before=st.lists(mechanisms(), min_size=1, max_size=3), added=mechanisms(),
       delta=st.sampled_from([1e-3, 1e-5, 1e-8]))
def test_adding_a_mechanism_never_lowers_the_total(before, added, delta):
    logging.disable(logging.WARNING)  # dp-accounting logs orders it skips; irrelevant here
    try:
        smaller = privfed.account(before, delta=delta)
        larger = privfed.account([*before, added], delta=delta)
    finally:
        logging.disable(logging.NOTSET)
    assert larger.epsilon >= smaller.epsilon * (1 - 1e-12)
    assert larger.epsilon_data_independent >= smaller.epsilon_data_independent * (1 - 1e-12)
    # Every total is also the minimum of its bounds: never above pure basic composition.
    pure = [m.pure_epsilon() for m in [*before, added]]
    if all(value is not None for value in pure):
        assert larger.epsilon <= sum(pure) * (1 + 1e-12)


# --- GNMax: ln(1 − q) accurate for tiny q ------------------------------------------------------------------
def _thm6(log_q: float, sigma: float, order: float) -> float:
    """PATE 2018 Thm 6 with Prop. 7's μ₁, μ₂, in 50-digit arithmetic."""
    with mpmath.workdps(50):
        q = mpmath.exp(log_q)
        mu2 = sigma * mpmath.sqrt(-mpmath.mpf(log_q))
        mu1 = mu2 + 1
        eps1, eps2 = mu1 / sigma**2, mu2 / sigma**2
        a = (1 - q) / (1 - (q * mpmath.exp(eps2)) ** ((mu2 - 1) / mu2))
        b = mpmath.exp(eps1) / q ** (1 / (mu1 - 1))
        return float(mpmath.log((1 - q) * a ** (order - 1) + q * b ** (order - 1)) / (order - 1))


@pytest.mark.parametrize("log_q", [-20.0, -38.0, -45.0, -80.0])
@pytest.mark.parametrize("order", [2.0, 4.5, 9.0])
def test_gnmax_data_dependent_rdp_is_accurate_for_tiny_q(log_q, order):
    got = gaussian_noisy_max_rdp(np.array([log_q]), 12.0, np.array([order]))[0, 0]
    assert got == pytest.approx(_thm6(log_q, 12.0, order), rel=1e-9)


# --- inputs that used to fail inside account() are refused up front ---------------------------------------
@pytest.mark.parametrize("build, match", [
    (lambda: privfed.LaplaceNoisyMax(np.array([[3, 1]]), gamma=400.0), r"gamma must be <= 350 .*got 400"),
    (lambda: privfed.LaplaceNoisyMax(np.array([[3, 1]]), 200.0, 2), r"gamma must be <= 175"),
    (lambda: privfed.RandomizedResponse(3, epsilon=800.0), r"epsilon must be <= 700 .*got 800"),
    (lambda: privfed.QuantizedLaplaceEnsemble(3, 1.0, 1.0, 5, weights=np.zeros((2, 3))), "weights must have at least"),
    (lambda: privfed.DPSGD(1e-300, 0.1, 10), r"noise_multiplier must be >= 0.001 .*got 1e-300"),
    (lambda: privfed.DPSGD(1.0, 0.1, 10**18), r"steps must be <= 1e\+09 .*got 1000000000000000000"),
    (lambda: privfed.LaplaceNoisyMax(np.array([[10**19, 0]], dtype=np.uint64), gamma=1.0),
     r"votes must hold integers in \[0, 2\*\*53\]"),
    (lambda: privfed.GaussianNoisyMax([[1e19, 0.0]], sigma=1.0), r"votes must hold integers in \[0, 2\*\*53\]"),
])
def test_values_that_would_overflow_are_refused_at_construction(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_largest_accepted_values_still_account():
    assert math.isfinite(privfed.account(privfed.LaplaceNoisyMax(np.array([[3, 1]]), gamma=350.0),
                                         delta=1e-5).epsilon)
    assert math.isfinite(privfed.account(privfed.RandomizedResponse(3, epsilon=700.0), delta=1e-5).epsilon)


# --- a sensitivity computed from the data is never called data-independent ----------------------------------
def test_data_dependent_votes_per_unit_keeps_data_independent_bounds_on_the_public_k():
    votes = np.array([[30, 1, 0], [25, 3, 2], [9, 8, 0]])
    paper = privfed.LaplaceNoisyMax(votes, 0.1, 1, unit="example", data_independent_votes_per_unit=3)
    conservative = privfed.LaplaceNoisyMax(votes, 0.1, 3, unit="example")
    local = privfed.LaplaceNoisyMax(votes, 0.1, 1, unit="example")
    report = privfed.account(paper, delta=1e-5)
    assert report.epsilon_data_independent == pytest.approx(
        privfed.account(conservative, delta=1e-5).epsilon_data_independent, rel=1e-12)
    assert report.epsilon == pytest.approx(privfed.account(local, delta=1e-5).epsilon, rel=1e-12)
    assert paper.pure_epsilon() == conservative.pure_epsilon()
    assert any("computed from the private data" in note for note in report.notes)
    rebuilt = privfed.accounting.registry.mechanism_from_record(
        {"kind": paper.kind, "unit": "example", "parameters": paper.parameters()}, evidence=paper.evidence())
    assert rebuilt.data_independent_votes_per_unit == 3
    with pytest.raises(ValueError, match="data_independent_votes_per_unit must be >= votes_per_unit"):
        privfed.GaussianNoisyMax(votes, 5.0, 3, data_independent_votes_per_unit=2)


def test_reverse_divergence_is_not_bounded_by_the_data_dependent_term():
    """docs/accounting.md: votes [30, 0], k = 5, γ = 2, α = 3 — bound 1.6e-8, exact reverse divergence 0.881."""
    gamma, order, k = 2, 3, 5

    def wrong(gap):  # Pr[noisy argmax of two classes flips], Laplace(1/γ) per count (exact for two classes)
        return (2 + gamma * gap) / (4 * mpmath.exp(gamma * gap))

    def divergence(p, q):  # D_α(Bernoulli(p) ‖ Bernoulli(q))
        return mpmath.log((1 - p) ** order / (1 - q) ** (order - 1) + p**order / q ** (order - 1)) / (order - 1)

    with mpmath.workdps(60):
        here = wrong(30)
        neighbours = [wrong(30 - down - up) for down in range(k + 1) for up in range(k + 1)]
        forward = max(float(divergence(here, other)) for other in neighbours)
        reverse = max(float(divergence(other, here)) for other in neighbours)
    bound = privfed.LaplaceNoisyMax(np.array([[30, 0]]), 2.0, k).rdp(np.array([3.0]))[0]
    assert forward <= bound < 2e-8
    assert reverse == pytest.approx(0.8805, abs=1e-4) and reverse / bound > 5e7
