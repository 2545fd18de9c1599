"""The Rényi filter a silo's budget enforces: against fixed-parameter composition, and by brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
from privfed.accounting import RandomizedResponse
from privfed.accounting.conversion import classic_epsilon
from privfed.accounting.privacy_filter import FILTER_ORDERS, RenyiFilter, non_adaptive_epsilon
from privfed.accounting.silo_budget import release_cost


def _binary_rr_rdp(epsilon: float, orders: np.ndarray) -> np.ndarray:
    """Exact Rényi divergence of binary randomized response (keep probability e^ε/(1+e^ε)) at ``orders``."""
    p = math.exp(epsilon) / (1.0 + math.exp(epsilon))
    a = np.asarray(orders, dtype=float)
    return np.log(p**a * (1 - p) ** (1 - a) + (1 - p) ** a * p ** (1 - a)) / (a - 1)


def test_on_a_fixed_sequence_the_filter_certifies_the_classic_rdp_total_at_delta_over_k_or_basic_composition() -> None:
    rule = RenyiFilter(epsilon=5.0, delta=1e-5)
    orders = np.asarray(FILTER_ORDERS)
    total = sum(_binary_rr_rdp(0.3, orders) for _ in range(20))
    expected, _ = classic_epsilon(orders, total, 1e-5 / len(orders))
    assert rule.epsilon_of(np.append(total, np.inf)) == pytest.approx(expected, rel=1e-12)
    assert rule.epsilon_of(np.append(total, 20 * 0.3)) == pytest.approx(min(expected, 6.0), rel=1e-12)
    assert rule.epsilon_of(np.append(total, 2.0)) == 2.0  # basic composition, when it is the smaller
    # never below the fixed-parameter total privfed's accountant reports for the same releases
    tight = non_adaptive_epsilon([RandomizedResponse(2, epsilon=0.3, unit="example")] * 20, 1e-5)
    assert rule.epsilon_of(np.append(total, 6.0)) >= tight


def test_a_fixed_sequence_is_admitted_exactly_while_its_total_stays_within_the_policy() -> None:
    rule = RenyiFilter(epsilon=2.0, delta=1e-6)
    step = np.append(_binary_rr_rdp(0.25, np.asarray(FILTER_ORDERS)), 0.25)
    spent, admitted = np.zeros(len(FILTER_ORDERS) + 1), 0
    while rule.admits(spent, step):
        spent, admitted = spent + step, admitted + 1
    assert rule.epsilon_of(spent) <= 2.0 < rule.epsilon_of(spent + step)
    assert admitted == max(n for n in range(200) if rule.epsilon_of(n * step) <= 2.0)


def test_the_library_cost_of_randomized_response_is_its_exact_renyi_divergence() -> None:
    _, cost = release_cost(RandomizedResponse(2, epsilon=0.7, unit="example"), FILTER_ORDERS, unit="example")
    np.testing.assert_allclose(cost[:-1], _binary_rr_rdp(0.7, np.asarray(FILTER_ORDERS)), rtol=1e-9)
    assert cost[-1] == pytest.approx(0.7)


def _adaptive_transcripts(rule: RenyiFilter, steps: int, small: float, large: float, *, pure: bool = True):
    """Every transcript of an adaptive analyst against the filter, with its probability under D (bit 1) and D′ (bit 0).

    Each step the analyst asks binary randomized response at ε = ``large`` after a 1 (the answer that favours D)
    and ``small`` after a 0 — spending more exactly where the loss is already high; the filter admits or refuses
    the request from the spent curve (public), and a refused request produces the output ``None``. With
    ``pure=False`` the requests declare no pure ε, so that only the Rényi part of the rule decides.
    """
    orders = np.asarray(rule.orders)
    costs = {e: np.append(_binary_rr_rdp(e, orders), e if pure else np.inf) for e in (small, large)}

    def walk(step, spent, last, p_d, p_d_prime, transcript):
        if step == steps:
            yield transcript, p_d, p_d_prime
            return
        epsilon = large if last == 1 else small
        if not rule.admits(spent, costs[epsilon]):
            yield from walk(step + 1, spent, last, p_d, p_d_prime, transcript + (None,))
            return
        keep = math.exp(epsilon) / (1.0 + math.exp(epsilon))
        for output in (0, 1):
            under_d = keep if output == 1 else 1 - keep
            under_d_prime = keep if output == 0 else 1 - keep
            yield from walk(step + 1, spent + costs[epsilon], output, p_d * under_d, p_d_prime * under_d_prime,
                            transcript + (output,))

    return list(walk(0, np.zeros(len(orders) + 1), 1, 1.0, 1.0, ()))


@pytest.mark.parametrize("pure", [False, True])
@pytest.mark.parametrize("orders", [(4.0,), (1.5, 2.0, 4.0, 8.0), FILTER_ORDERS])
def test_brute_force_the_adaptive_interaction_the_filter_lets_run_is_epsilon_delta_dp(orders, pure) -> None:
    rule = RenyiFilter(epsilon=3.0, delta=0.05, orders=orders)
    transcripts = _adaptive_transcripts(rule, steps=12, small=0.2, large=0.9, pure=pure)
    assert sum(p for _, p, _ in transcripts) == pytest.approx(1.0)
    ran = [len(t) - t.count(None) for t, _, _ in transcripts]
    assert min(ran) >= 2 and max(ran) == 12 and min(ran) < 12  # the stopping point depends on the outputs
    for first, second in ((1, 2), (2, 1)):  # both directions of the neighbouring pair
        delta = sum(max(0.0, t[first] - math.exp(rule.epsilon) * t[second]) for t in transcripts)
        assert delta <= rule.delta, (orders, pure, first, delta)


def test_brute_force_shows_the_guarantee_is_not_vacuous_summing_past_the_filter_breaks_it() -> None:
    """The same analyst without the filter, run to the end, is NOT (3, 0.05)-DP: the filter is what holds it."""
    no_stop = RenyiFilter(epsilon=1e9, delta=0.05, orders=(2.0,))
    transcripts = _adaptive_transcripts(no_stop, steps=12, small=0.2, large=0.9)
    assert all(None not in t for t, _, _ in transcripts)
    delta = sum(max(0.0, t[1] - math.exp(3.0) * t[2]) for t in transcripts)
    assert delta > 0.05


@pytest.mark.parametrize("arguments, needle", [
    ({"epsilon": 0.0, "delta": 1e-5}, "epsilon must be finite and > 0"),
    ({"epsilon": 1.0, "delta": 1.0}, "delta must be in the open interval (0, 1)"),
    ({"epsilon": 1.0, "delta": 1e-5, "orders": (4.0, 2.0)}, "strictly increasing"),
    ({"epsilon": 1.0, "delta": 1e-5, "orders": (1.0,)}, "orders"),
])
def test_bad_policies_are_one_line_errors(arguments, needle) -> None:
    with pytest.raises((ValueError, TypeError)) as caught:
        RenyiFilter(**arguments)
    assert needle in str(caught.value) and "\n" not in str(caught.value)
