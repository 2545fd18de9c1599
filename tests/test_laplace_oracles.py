"""LaplaceNoisyMax against reference implementations (../shared/oracles) and closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS
from privfed.accounting import LaplaceNoisyMax, account, laplace_failure_bounds

from tests.conftest import oracle_cases, requires_oracles

RTOL = 1e-9
PATE_CASES = oracle_cases("pate_laplace.json")
CLOSED_FORMS = oracle_cases("closed_forms.json", "laplace_per_query_and_composed")
LNMAX_DI = oracle_cases("dp_accounting.json", "lnmax_data_independent")


def _moment_orders(moments: int) -> np.ndarray:
    """The papers' moments λ = 1..moments as Rényi orders α = λ + 1."""
    return np.arange(2.0, moments + 2.0)


@requires_oracles
def test_oracles_present() -> None:
    assert len(PATE_CASES) > 10 and len(CLOSED_FORMS) > 10


@pytest.mark.parametrize("case", PATE_CASES, ids=lambda c: c["id"])
def test_classic_reproduces_fedkt_moments_accountant(case: dict) -> None:
    expected = case["expected"]
    votes = np.array(case["counts"])
    orders = _moment_orders(case["moments"])
    mechanism = LaplaceNoisyMax(votes, case["gamma"], case["k"])

    np.testing.assert_allclose(mechanism.failure_bounds()[:5], expected["q_per_query"], rtol=RTOL)
    report = account(mechanism, delta=case["delta"], analysis="classic", orders=orders)
    np.testing.assert_allclose(report.log_moments, expected["total_logmgf_by_order"], rtol=RTOL)
    assert report.epsilon == pytest.approx(expected["eps_data_dependent"], rel=RTOL)
    assert report.order - 1 == expected["eps_data_dependent_order"]
    assert report.epsilon_data_independent == pytest.approx(expected["eps_data_independent"], rel=RTOL)
    assert mechanism.pure_epsilon() == pytest.approx(expected["eps_pure_composition"], rel=RTOL)
    assert report.data_dependent


@pytest.mark.parametrize("case", PATE_CASES, ids=lambda c: c["id"])
def test_party_level_uses_one_k_inside_and_outside_the_log_term(case: dict) -> None:
    """FedKT's literal code takes the threshold from z but ε₀ from n_partition; privfed uses one k throughout."""
    expected = case["expected"]
    mechanism = LaplaceNoisyMax(np.array(case["counts"]), case["gamma"], case["n_partition"], unit="party")
    report = account(mechanism, delta=case["delta"], analysis="classic", orders=_moment_orders(case["moments"]))
    assert report.epsilon == pytest.approx(expected["eps_party_level_own_threshold"], rel=RTOL)


@pytest.mark.parametrize("case", PATE_CASES, ids=lambda c: c["id"])
def test_general_order_form_agrees_with_pate_2018_at_integer_orders(case: dict) -> None:
    expected = case["expected"]
    mechanism = LaplaceNoisyMax(np.array(case["counts"]), case["gamma"], case["k"])
    alphas = _moment_orders(case["moments"])
    # PATE 2018's rdp_pure_eps summed over queries, at α = l + 1.
    np.testing.assert_allclose(
        mechanism.rdp(alphas, analysis="classic"), expected["pate2018_lnmax_rdp_by_alpha"], rtol=RTOL
    )
    assert account(mechanism, delta=case["delta"], analysis="classic", orders=alphas).epsilon == pytest.approx(
        expected["pate2018_lnmax_eps"], rel=RTOL
    )


@pytest.mark.parametrize("case", PATE_CASES, ids=lambda c: c["id"])
def test_reference_quirks_are_not_reported(case: dict) -> None:
    """FedKT prints −ln δ / moments as its 'data-independent' ε (it passes k = 0): never a privfed output."""
    expected = case["expected"]
    mechanism = LaplaceNoisyMax(np.array(case["counts"]), case["gamma"], case["k"])
    report = account(mechanism, delta=case["delta"], analysis="classic", orders=_moment_orders(case["moments"]))
    assert report.epsilon_data_independent > expected["eps_data_independent_fedkt_literal"]


def _undecided_votes(num_queries: int) -> np.ndarray:
    """Tied votes: q = 1/2, above every threshold, so only data-independent bounds apply."""
    return np.ones((num_queries, 2), dtype=np.int64)


@pytest.mark.parametrize("case", CLOSED_FORMS, ids=lambda c: c["id"])
def test_closed_forms_per_query_and_composed(case: dict) -> None:
    expected = case["expected"]
    mechanism = LaplaceNoisyMax(_undecided_votes(case["count"]), case["gamma"], case["m"])
    assert mechanism.epsilon_per_query == pytest.approx(expected["eps_per_query"], rel=RTOL)
    assert mechanism.pure_epsilon() == pytest.approx(expected["eps_pure_composition"], rel=RTOL)
    report = account(mechanism, delta=case["delta"], analysis="classic")
    np.testing.assert_allclose(report.log_moments, expected["moments_accountant_logmgf_by_order_l1_to_8"], rtol=RTOL)
    assert report.epsilon == pytest.approx(expected["moments_accountant_eps_l1_to_8"], rel=RTOL)
    assert report.epsilon == pytest.approx(report.epsilon_data_independent, rel=RTOL)


@pytest.mark.parametrize("case", LNMAX_DI, ids=lambda c: c["id"])
def test_tight_data_independent_is_the_per_coordinate_laplace_rdp(case: dict) -> None:
    """Tight, data-independent: 2·count Laplace events of shift k (dp-accounting's per-coordinate value)."""
    expected = case["expected"]
    mechanism = LaplaceNoisyMax(_undecided_votes(case["count"]), case["gamma"], case["votes_changed_m"])
    for moments in (8, 32, 128):
        classic = account(mechanism, delta=case["delta"], analysis="classic", orders=_moment_orders(moments))
        assert classic.epsilon == pytest.approx(expected[f"moments_accountant_eps_l1_to_{moments}"], rel=RTOL)
    tight = account(mechanism, delta=case["delta"], orders=DEFAULT_RDP_ORDERS)
    assert tight.epsilon == pytest.approx(expected["dp_accounting_laplace_per_coordinate_rdp_eps"], rel=RTOL)
    # The ℓ1-sensitivity view (one Laplace of sensitivity 2k) is valid but looser.
    assert tight.epsilon < expected["dp_accounting_laplace_l1sens_rdp_eps"]


def test_adult_l2_scale_example() -> None:
    """FedKT's Adult L2 setting: 81 queries, γ = 0.04, k = 1. Classic data-independent bound 3.72; tight ≈ 2.2."""
    mechanism = LaplaceNoisyMax(_undecided_votes(81), 0.04, 1)
    classic = account(mechanism, delta=1e-5, analysis="classic")
    tight = account(mechanism, delta=1e-5)
    assert round(classic.epsilon, 2) == 3.72
    assert 2.0 < tight.epsilon < 2.3


def _exact_two_class_log_outcomes(lead: float, gamma: float) -> tuple[float, float]:
    """log Pr[class 1 wins], log Pr[class 2 wins] for a lead d = n_1 − n_2 under Laplace(1/γ) noise.

    The difference X of two Laplace(1/γ) variables has Pr[X > x] = (2 + γx) e^{−γx} / 4 for x ≥ 0.
    """
    log_tail = math.log(2.0 + gamma * abs(lead)) - gamma * abs(lead) - math.log(4.0)
    log_rest = math.log1p(-math.exp(log_tail))
    return (log_rest, log_tail) if lead >= 0 else (log_tail, log_rest)


def _bernoulli_renyi(log_p: tuple[float, float], log_p_other: tuple[float, float], order: float) -> float:
    terms = [order * a + (1 - order) * b for a, b in zip(log_p, log_p_other)]
    return float(np.logaddexp(*terms)) / (order - 1)


@pytest.mark.parametrize("gamma", [0.05, 0.2, 1.0])
@pytest.mark.parametrize("lead", [0, 3, 10, 40])
@pytest.mark.parametrize("k", [1, 2])
def test_tight_bound_dominates_the_exact_divergence_of_two_class_argmax(gamma: float, lead: int, k: int) -> None:
    """With two classes the argmax's distribution is known exactly: the bound must hold at every order."""
    total = 100
    first = (total + lead) // 2
    votes = np.array([[first, total - first]])
    orders = np.array([1.1, 1.5, 2.0, 3.5, 8.0, 20.0, 64.0])
    bound = LaplaceNoisyMax(votes, gamma, k).rdp(orders)
    p = _exact_two_class_log_outcomes(2 * first - total, gamma)
    for shift in (-k, k):
        neighbour_lead = (first + shift) - (total - first - shift)
        p_other = _exact_two_class_log_outcomes(neighbour_lead, gamma)
        exact = np.array([_bernoulli_renyi(p, p_other, a) for a in orders])
        assert np.all(exact <= bound * (1 + 1e-9) + 1e-15), (exact, bound)


def test_failure_bound_counts_ties_with_the_winner() -> None:
    q = laplace_failure_bounds(np.array([[5, 5, 5], [9, 0, 9], [7, 1, 1]]), 0.5)
    assert q[0] == pytest.approx(2 / 3)  # 1/2 + 1/2 capped at 1 − 1/C
    assert q[1] == pytest.approx(0.5 + (2 + 4.5) / (4 * math.exp(4.5)))
    assert q[2] == pytest.approx(2 * (2 + 3.0) / (4 * math.exp(3.0)))
