"""One-run auditing statistics (Steinke, Nasr, Jagielski 2023) and the generic audit of a release.

Oracles: exact binomial sums in mpmath (50 digits), the binomial closed form at v = r, and jax-privacy's
``auditing`` module when it is installed (``pip install --no-deps jax-privacy==2.0.0``: its auditing.py needs
only numpy, scipy and dp-accounting; it is loaded as a file so that jax itself is not needed). Measured
properties: the false-alarm rate of a correct mechanism at the stated level, the catch rate of a planted bug
(true ε 3, claimed 1), and tightness on a Laplace count with 5,000 canaries.
"""

from __future__ import annotations

import doctest
import importlib.util
import math
import pathlib
import sys

import mpmath
import numpy as np
import pytest
from privfed.accounting import auditing
from privfed.accounting.auditing import AuditResult, audit_release, epsilon_lower_bound, one_run_p_value

import privfed


def _exact_p_value(v: int, r: int, m: int, epsilon: float, delta: float) -> mpmath.mpf:
    """f(v) + 2mδ · max_{1 ≤ i ≤ v} (f(v − i) − f(v))/i with f the exact binomial upper tail, in 50 digits."""
    with mpmath.workdps(50):
        q = 1 / (1 + mpmath.exp(-mpmath.mpf(epsilon)))
        pmf = [mpmath.binomial(r, k) * q**k * (1 - q) ** (r - k) for k in range(r + 1)]
        tails = [mpmath.fsum(pmf[k:]) for k in range(r + 1)]
        f = tails[v]
        if delta == 0 or v == 0:
            return min(f, 1)
        slope = max((tails[v - i] - f) / i for i in range(1, v + 1))
        return min(f + 2 * m * mpmath.mpf(delta) * slope, 1)


# --- the bound ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("r", [20, 100, 500])
def test_every_guess_right_gives_the_binomial_closed_form(r):
    # δ = 0, v = r: P[Bin(r, q) ≥ r] = q^r = 0.05 at the bound, so ε = logit(0.05^(1/r)).
    q = 0.05 ** (1 / r)
    assert epsilon_lower_bound(r, r, 1000) == pytest.approx(math.log(q / (1 - q)), rel=1e-8)


@pytest.mark.parametrize(("v", "r", "m", "delta"), [
    (90, 100, 1000, 0.0), (90, 100, 1000, 1e-5), (160, 200, 200, 1e-3), (70, 100, 5000, 0.0), (50, 60, 60, 1e-3),
])
def test_bound_is_the_largest_epsilon_the_exact_p_value_rejects(v, r, m, delta):
    bound = epsilon_lower_bound(v, r, m, delta=delta)
    assert bound > 0
    assert float(_exact_p_value(v, r, m, bound, delta)) == pytest.approx(0.05, rel=1e-6)
    assert _exact_p_value(v, r, m, bound * (1 - 1e-6), delta) < 0.05 < _exact_p_value(v, r, m, bound * (1 + 1e-6),
                                                                                         delta)
    assert one_run_p_value(num_correct=v, num_guesses=r, num_canaries=m, epsilon=bound, delta=delta) == \
        pytest.approx(float(_exact_p_value(v, r, m, bound, delta)), rel=1e-8)


def test_bound_is_zero_without_evidence_monotone_in_v_and_delta_only_lowers_it():
    assert epsilon_lower_bound(50, 100, 100) == 0.0 and epsilon_lower_bound(0, 100, 100) == 0.0
    bounds = [epsilon_lower_bound(v, 200, 1000) for v in range(100, 201, 10)]
    assert all(a <= b for a, b in zip(bounds, bounds[1:])) and bounds[-1] > 3
    assert epsilon_lower_bound(180, 200, 1000, delta=1e-5) < epsilon_lower_bound(180, 200, 1000)
    assert epsilon_lower_bound(180, 200, 1000, confidence=0.99) < epsilon_lower_bound(180, 200, 1000)


def test_bound_covers_the_true_epsilon_of_a_simulated_epsilon_dp_guesser():
    # A guesser right with probability e^ε/(1 + e^ε), independently, is what ε-DP allows at most (randomized
    # response): the 95% bound may exceed ε in at most 5% of audits. 1,000 audits: ≤ 5% + 3 standard deviations.
    epsilon, r = 1.0, 200
    correct = np.random.default_rng(0).binomial(r, 1 / (1 + math.exp(-epsilon)), size=1000)
    exceed = np.mean([epsilon_lower_bound(int(v), r, r) > epsilon for v in correct])
    assert exceed <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 1000)
    assert exceed > 0.01  # and the bound is not vacuous: it reaches ε about as often as the level allows


_JAX_PRIVACY = importlib.util.find_spec("jax_privacy")


def _jax_privacy_auditing():
    spec = _JAX_PRIVACY
    path = pathlib.Path(next(iter(spec.submodule_search_locations))) / "auditing.py"
    module_spec = importlib.util.spec_from_file_location("_jax_privacy_auditing_oracle", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module
    try:
        module_spec.loader.exec_module(module)
    finally:
        del sys.modules[module_spec.name]
    return module


@pytest.mark.skipif(_JAX_PRIVACY is None or not _JAX_PRIVACY.submodule_search_locations,
                    reason="jax-privacy is not installed (pip install --no-deps jax-privacy==2.0.0): no oracle")
@pytest.mark.parametrize(("v", "r", "m", "delta"), [
    (90, 100, 1000, 0.0), (90, 100, 1000, 1e-5), (700, 1000, 1000, 1e-6), (3000, 4000, 5000, 1e-5),
])
def test_bound_agrees_with_jax_privacy(v, r, m, delta):
    oracle = _jax_privacy_auditing()
    theirs = oracle._epsilon_one_run(0, m, r, v, 0.05, delta)  # their root-finder stops at xtol = 1e-6
    assert epsilon_lower_bound(v, r, m, delta=delta) == pytest.approx(theirs, abs=2e-6)


@pytest.mark.parametrize(("args", "kwargs", "match"), [
    ((5, 4, 10), {}, "num_correct"),
    ((1, 11, 10), {}, "num_guesses"),
    ((1, 1, 0), {}, "num_canaries"),
    ((1, 1, 1), {"delta": 1.0}, "delta"),
    ((1, 1, 1), {"confidence": 1.0}, "confidence"),
])
def test_bound_refuses_bad_input(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        epsilon_lower_bound(*args, **kwargs)


def test_public_names_and_docstring_examples():
    assert privfed.epsilon_lower_bound is epsilon_lower_bound and privfed.audit_release is audit_release
    assert privfed.AuditResult is AuditResult
    assert doctest.testmod(auditing, raise_on_error=False).failed == 0


# --- the generic audit --------------------------------------------------------------------------------
def _laplace_count(epsilon: float, seed: int):
    """Each canary adds 1 to its own count; Laplace(1/ε) noise on each count: ε-DP per canary (add/remove)."""
    def release(included: np.ndarray) -> np.ndarray:
        return included + np.random.default_rng(seed).laplace(0.0, 1.0 / epsilon, size=len(included))
    return release


def _randomized_response(epsilon: float, seed: int):
    """Each canary's bit, kept with probability e^ε/(1 + e^ε): exactly ε-DP, the worst case for false alarms."""
    keep = 1 / (1 + math.exp(-epsilon))

    def release(included: np.ndarray) -> np.ndarray:
        return np.where(np.random.default_rng(seed).random(len(included)) < keep, included, ~included).astype(float)
    return release


@pytest.mark.parametrize("mechanism", [_laplace_count, _randomized_response])
def test_false_alarms_on_a_correct_mechanism_stay_at_the_stated_level(mechanism):
    # 200 audits of a mechanism whose claim is exactly right: a violation is a false alarm. At the 95% level at most
    # 5% are allowed; P[Bin(200, 0.05) ≥ 19] < 0.01.
    audits = [audit_release(mechanism(1.0, seed + 10_000), 1000, claimed_epsilon=1.0, random_state=seed)
              for seed in range(200)]
    false_alarms = sum(result.violation for result in audits)
    assert false_alarms <= 18
    assert all(result.num_canaries == 1000 and result.guess_counts_tried == (31, 62, 125, 250, 500, 1000)
               for result in audits)


def test_a_planted_bug_is_caught_in_every_audit():
    # The claim says ε = 1 but the noise is that of ε = 3 (scale 1/3 instead of 1).
    audits = [audit_release(_laplace_count(3.0, seed + 10_000), 1000, claimed_epsilon=1.0, random_state=seed)
              for seed in range(40)]
    assert all(result.violation for result in audits)
    assert min(result.epsilon_lower for result in audits) > 1.5


@pytest.mark.parametrize("epsilon", [1.0, 2.0])
def test_laplace_count_with_5000_canaries_is_audited_tightly(epsilon):
    audits = [audit_release(_laplace_count(epsilon, seed + 10_000), 5000, claimed_epsilon=epsilon,
                            random_state=seed) for seed in range(10)]
    lower = np.array([result.epsilon_lower for result in audits])
    assert lower.mean() >= 0.7 * epsilon and not any(result.violation for result in audits)


def test_fixed_guess_count_and_the_result_fields():
    result = audit_release(lambda included: included.astype(float), 100, claimed_epsilon=0.5, num_guesses=40,
                           random_state=0, unit="party")
    # Scores equal to the coins: all 40 guesses right, so the bound is the closed form of v = r = 40.
    assert (result.num_guesses, result.num_correct, result.guess_counts_tried, result.unit) == (40, 40, (40,), "party")
    assert result.epsilon_lower == pytest.approx(epsilon_lower_bound(40, 40, 100)) and result.violation
    assert result.to_dict()["guess_counts_tried"] == [40] and result.ratio == result.epsilon_lower / 0.5
    unnoised = audit_release(lambda included: included.astype(float), 100, claimed_epsilon=math.inf)
    assert not unnoised.violation and unnoised.to_dict()["claimed_epsilon"] == "inf"


def test_release_sees_a_copy_of_the_coins_and_must_return_one_score_each():
    def tamper(included):
        included[:] = True
        return included.astype(float)

    assert audit_release(tamper, 50, claimed_epsilon=1.0, random_state=0).num_included < 50
    with pytest.raises(ValueError, match="one score per canary"):
        audit_release(lambda included: np.zeros(3), 50, claimed_epsilon=1.0)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"claimed_epsilon": -1.0}, ValueError, "claimed_epsilon"),
    ({"claimed_epsilon": 1.0, "num_guesses": 51}, ValueError, "num_guesses"),
    ({"claimed_epsilon": 1.0, "delta": -0.1}, ValueError, "delta"),
    ({"claimed_epsilon": 1.0, "unit": "person"}, ValueError, "unit"),
])
def test_audit_refuses_bad_input_before_running_the_mechanism(kwargs, error, match):
    calls = []
    with pytest.raises(error, match=match):
        audit_release(lambda included: calls.append(1) or included.astype(float), 50, **kwargs)
    assert not calls
    with pytest.raises(TypeError, match="release"):
        audit_release(None, 50, claimed_epsilon=1.0)


def test_max_lower_bound_is_the_bound_of_every_guess_right_and_says_when_a_claim_cannot_be_refuted():
    from privfed.accounting.auditing import max_lower_bound

    # The numbers: δ = 1e-5 and the six default guess counts top out near 3.0 at 100 canaries, 6.2 at 10⁵.
    assert max_lower_bound(100, delta=1e-5) == pytest.approx(3.008, abs=1e-3)
    assert 6.0 < max_lower_bound(100_000, delta=1e-5) < 6.4
    assert max_lower_bound(100, num_guesses=40) == pytest.approx(epsilon_lower_bound(40, 40, 100))
    perfect = audit_release(lambda included: included.astype(float), 100, claimed_epsilon=1.0, delta=1e-5,
                            random_state=0)  # r = 100 guesses need exactly 50 canaries in to be all right
    assert perfect.epsilon_lower <= perfect.max_lower_bound and perfect.can_refute and perfect.violation
    forty = audit_release(lambda included: included.astype(float), 100, claimed_epsilon=1.0, num_guesses=40,
                          random_state=0)
    assert forty.epsilon_lower == pytest.approx(forty.max_lower_bound)
    hopeless = audit_release(lambda included: included.astype(float), 100, claimed_epsilon=3.7, delta=1e-5,
                             random_state=0)  # the DP-SGD audit's claim at 100 canaries
    assert not hopeless.can_refute and not hopeless.violation and hopeless.to_dict()["can_refute"] is False
    assert not AuditResult(0.0, 1.0, False, 1, 0, 1, 0, 0.0, 0.95, "example", (1,)).can_refute  # NaN: unknown
