"""The f-DP one-run bound (Mahloujifar, Melis and Chaudhuri 2025) for Gaussian DP: validity, tightness, inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from privfed.accounting.auditing import audit_scores, one_run_p_value
from privfed.accounting.fdp_auditing import (
    gdp_epsilon,
    gdp_lower_bound,
    gdp_mu_lower_bound,
    gdp_tail_bound,
)
from scipy import stats


# --- (a) the probability bound against exact and brute-force tails ----------------------------------------------
@pytest.mark.parametrize("num_guesses", range(1, 11))
def test_at_mu_zero_the_bound_covers_the_fair_coin_binomial_tail_and_stays_near_it(num_guesses):
    # μ = 0 is perfect privacy: every guess is a fair coin, T ~ Binomial(k, 1/2) exactly when all m = k are guessed.
    for num_canaries in (num_guesses, 3 * num_guesses):
        for correct in range(num_guesses + 1):
            bound = gdp_tail_bound(correct, num_guesses, num_canaries, mu=0.0)
            exact = stats.binom.sf(correct - 1, num_guesses, 0.5)
            assert bound >= exact * (1 - 1e-6)
            if correct >= 0.7 * num_guesses:
                assert bound <= 1.2 * exact  # measured: at most 1.155× on k ≤ 12
    assert gdp_tail_bound(num_guesses, num_guesses, num_guesses, mu=0.0) == pytest.approx(2.0**-num_guesses, rel=1e-6)


@pytest.mark.parametrize("mu", [0.25, 1.0, 3.0])
def test_the_bound_covers_independent_gaussian_canaries_exactly(mu):
    # Canary i releases μ·b_i + N(0, 1): μ-GDP in each coin. Guessing every canary by the sign of the release minus
    # μ/2 is right with probability Φ(μ/2), independently: T ~ Binomial(m, Φ(μ/2)), an exact tail.
    for num_canaries in range(1, 13):
        for correct in range(num_canaries + 1):
            exact = stats.binom.sf(correct - 1, num_canaries, stats.norm.cdf(mu / 2))
            assert gdp_tail_bound(correct, num_canaries, num_canaries, mu=mu) >= exact * (1 - 1e-6)


@pytest.mark.parametrize(("mu", "num_canaries", "num_guesses"), [(1.0, 6, 2), (1.0, 8, 4), (2.0, 8, 2), (0.5, 5, 4)])
def test_the_bound_covers_a_brute_force_tail_with_abstentions(mu, num_canaries, num_guesses):
    # Guess in for the highest releases, out for the lowest, abstain on the rest: the tail by simulation.
    rng = np.random.default_rng(7)
    runs = 40_000
    included = rng.random((runs, num_canaries)) < 0.5
    order = np.argsort(mu * included + rng.standard_normal((runs, num_canaries)), axis=1)
    ranked = np.take_along_axis(included, order, axis=1)
    correct = ranked[:, num_canaries - (num_guesses + 1) // 2:].sum(1) + (~ranked[:, :num_guesses // 2]).sum(1)
    for c in range(num_guesses + 1):
        tail = (correct >= c).mean()
        assert gdp_tail_bound(c, num_guesses, num_canaries, mu=mu) >= tail - 4 * math.sqrt(tail * (1 - tail) / runs)


def test_the_bound_grows_with_mu_and_falls_with_the_correct_guesses():
    mus = [0.0, 0.1, 0.5, 1.0, 2.0, 4.0]
    for correct in (60, 80, 95, 100):
        bounds = [gdp_tail_bound(correct, 100, 1000, mu=mu) for mu in mus]
        assert all(a <= b for a, b in zip(bounds, bounds[1:])) and bounds[0] < bounds[-1]
    tails = [gdp_tail_bound(c, 100, 1000, mu=1.0) for c in range(50, 101, 5)]
    assert all(a >= b for a, b in zip(tails, tails[1:])) and tails[-1] < tails[0]
    assert gdp_tail_bound(100, 100, 1000, mu=math.inf) == 1.0 and gdp_tail_bound(0, 10, 10, mu=0.0) == 1.0
    lower = [gdp_mu_lower_bound(c, 1000, 1000) for c in (500, 600, 700, 800, 900, 1000)]
    assert lower[0] == 0.0 and all(a < b for a, b in zip(lower, lower[1:]))


def test_the_mu_lower_bound_is_where_the_tail_bound_crosses_the_significance():
    for correct, guesses, canaries in [(100, 100, 1000), (80, 100, 1000), (700, 1000, 1000)]:
        mu = gdp_mu_lower_bound(correct, guesses, canaries, confidence=0.95)
        assert gdp_tail_bound(correct, guesses, canaries, mu=mu * (1 - 1e-6)) <= 0.05
        assert gdp_tail_bound(correct, guesses, canaries, mu=mu * (1 + 1e-6)) > 0.05


def test_the_epsilon_is_the_standard_gaussian_dp_conversion():
    # δ_μ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) at the returned ε (Dong, Roth & Su, Cor. 2.13).
    for mu, delta in [(0.5, 1e-5), (1.0, 1e-5), (2.0, 1e-3), (1.0, 0.3)]:
        eps = gdp_epsilon(mu, delta=delta)
        assert stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2) == \
            pytest.approx(delta, rel=1e-8)
    assert gdp_epsilon(1.0, delta=1e-5) == pytest.approx(4.377178095681, rel=1e-10)  # 40-digit mpmath root
    assert gdp_epsilon(0.0, delta=0.0) == 0.0 and gdp_epsilon(1.0, delta=0.0) == math.inf
    assert gdp_epsilon(0.1, delta=0.5) == 0.0  # δ above δ_μ(0) = 2Φ(μ/2) − 1
    bound = gdp_lower_bound(100, 100, 1000, delta=1e-5)
    assert bound.epsilon == gdp_epsilon(bound.mu, delta=1e-5) and bound.delta == 1e-5


# --- (b) false alarms on a Gaussian mechanism of known μ --------------------------------------------------------
@pytest.mark.parametrize("confidence", [0.95, 0.5])
def test_a_correct_gaussian_mechanism_is_refuted_at_most_at_the_confidences_rate(confidence):
    mu, canaries, audits = 1.0, 1000, 150
    rng = np.random.default_rng(11)
    bounds = []
    for _ in range(audits):
        included = rng.random(canaries) < 0.5
        result = audit_scores(mu * included + rng.standard_normal(canaries), included, claimed_epsilon=10.0,
                              delta=1e-5, confidence=confidence, num_guesses=250, random_state=rng)
        bounds.append(result.gdp_mu_lower)
    bounds = np.array(bounds)
    allowed = stats.binom.ppf(0.999, audits, 1 - confidence)  # the rate the theorem allows, with sampling slack
    assert (bounds > mu).sum() <= allowed  # measured: 0 of 150 at 95 %, 8 of 150 at 50 %
    assert bounds.mean() > (0.5 if confidence == 0.95 else 0.7) * mu  # not vacuous: measured 0.60 and 0.86


def test_twice_the_claimed_mu_is_refuted():
    rng = np.random.default_rng(12)
    refuted = 0
    for _ in range(40):
        included = rng.random(1000) < 0.5
        result = audit_scores(2.0 * included + rng.standard_normal(1000), included, claimed_epsilon=10.0,
                              delta=1e-5, num_guesses=250, random_state=rng)
        refuted += result.gdp_mu_lower > 1.0
    assert refuted >= 36  # measured: 40 of 40


# --- (c) against Steinke et al. on the same guesses --------------------------------------------------------------
_DELTAS = np.logspace(-12, -0.5, 24)


def _steinke_mu_lower_bound(correct: int, guesses: int, canaries: int) -> float:
    """The largest μ that Steinke et al.'s test refutes at 95%, through μ-GDP ⇒ (ε_μ(δ), δ)-DP at every δ."""
    def refuted(mu: float) -> bool:
        return min(one_run_p_value(num_correct=correct, num_guesses=guesses, num_canaries=canaries,
                                   epsilon=gdp_epsilon(mu, delta=d), delta=d) for d in _DELTAS) <= 0.05

    if not refuted(1e-9):
        return 0.0
    low, high = 0.0, 1.0
    while refuted(high):
        low, high = high, 2 * high
    for _ in range(25):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if refuted(middle) else (low, middle)
    return low


@pytest.mark.parametrize(("correct", "guesses", "canaries"), [
    (100, 100, 1000), (90, 100, 1000), (80, 100, 1000), (450, 500, 1000), (700, 1000, 1000), (50, 50, 100)])
def test_the_fdp_bound_refutes_more_than_steinkes_bound_converted_on_the_same_guesses(correct, guesses, canaries):
    assert gdp_mu_lower_bound(correct, guesses, canaries) > 1.05 * _steinke_mu_lower_bound(correct, guesses, canaries)


def test_near_the_edge_of_refutation_with_few_guesses_steinke_is_slightly_tighter():
    # docs/audit.md states this exception: 60 of 100 guesses right among 1,000 canaries.
    fdp, steinke = gdp_mu_lower_bound(60, 100, 1000), _steinke_mu_lower_bound(60, 100, 1000)
    assert 0.0 < fdp < steinke < 1.3 * fdp


# --- the audit result carries the estimate -----------------------------------------------------------------------
def test_audit_scores_fills_the_fdp_fields_beside_steinkes():
    rng = np.random.default_rng(3)
    included = rng.random(1000) < 0.5
    scores = 2.0 * included + rng.standard_normal(1000)
    result = audit_scores(scores, included, claimed_epsilon=1.0, delta=1e-5, random_state=0)
    assert result.gdp_num_guesses in result.guess_counts_tried and 0 < result.gdp_num_correct <= result.gdp_num_guesses
    each = 1 - 0.05 / len(result.guess_counts_tried)
    assert result.gdp_mu_lower == gdp_mu_lower_bound(result.gdp_num_correct, result.gdp_num_guesses, 1000,
                                                     confidence=each)
    assert result.gdp_epsilon_lower == gdp_epsilon(result.gdp_mu_lower, delta=1e-5)
    assert result.gdp_epsilon_lower > result.epsilon_lower > 1.0 and result.violation  # violation: Steinke's alone
    record = result.to_dict()
    assert {"gdp_mu_lower", "gdp_epsilon_lower", "gdp_num_guesses", "gdp_num_correct"} <= set(record)
    pure = audit_scores(scores, included, claimed_epsilon=1.0, delta=0.0, random_state=0)
    assert pure.gdp_mu_lower == result.gdp_mu_lower and math.isnan(pure.gdp_epsilon_lower)


# --- (d) inputs -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("call", "message"), [
    (lambda: gdp_tail_bound(3, 2, 10, mu=1.0), r"num_correct must be in \[0, num_guesses=2\], got 3"),
    (lambda: gdp_tail_bound(1, 11, 10, mu=1.0), r"num_guesses must be in \[1, num_canaries=10\], got 11"),
    (lambda: gdp_tail_bound(0, 0, 10, mu=1.0), "num_guesses"),
    (lambda: gdp_tail_bound(1, 2, 0, mu=1.0), "num_canaries"),
    (lambda: gdp_tail_bound(-1, 2, 10, mu=1.0), "num_correct"),
    (lambda: gdp_tail_bound(1, 2, 10, mu=-0.5), r"mu must be a number >= 0 .*got -0.5"),
    (lambda: gdp_tail_bound(1, 2, 10, mu=math.nan), "mu must be a number >= 0"),
    (lambda: gdp_tail_bound(1, 2, 10, mu="1"), "mu must be a number >= 0"),
    (lambda: gdp_mu_lower_bound(1, 2, 10, confidence=1.0), "confidence"),
    (lambda: gdp_mu_lower_bound(1, 2, 10, confidence=0.0), "confidence"),
    (lambda: gdp_epsilon(1.0, delta=1.0), r"delta must be in \[0, 1\), got 1.0"),
    (lambda: gdp_epsilon(1.0, delta=-1e-5), r"delta must be in \[0, 1\), got -1e-05"),
    (lambda: gdp_lower_bound(1, 2, 10, delta=True), "delta must be a real number, got True"),
])
def test_bad_input_is_refused_in_one_line_naming_argument_value_and_range(call, message):
    with pytest.raises((ValueError, TypeError), match=message) as caught:
        call()
    assert "\n" not in str(caught.value)
