"""The Gaussian mechanism's exact privacy profile as a certified upper bound (issue 46, item 4).

References: δ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2) evaluated with mpmath at 50 digits and ε solved by 200 steps of
bisection in that precision, independently of privfed; dp-accounting's pessimistic PLD of the same Gaussian.
"""

from __future__ import annotations

import math

import dp_accounting
import mpmath
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution
from privfed.accounting import GaussianNoisyMax, Ledger, NoiseSource, _dp_accounting, account
from privfed.accounting._dp_accounting import gaussian_mu
from privfed.accounting.gaussian_profile import gaussian_delta, gaussian_epsilon

MUS = np.geomspace(1e-3, 50.0, 9)
DELTAS = np.geomspace(1e-12, 0.5, 7)


def reference_delta(mu: float, epsilon: float) -> mpmath.mpf:
    with mpmath.workdps(50):
        mu_, epsilon_ = mpmath.mpf(mu), mpmath.mpf(epsilon)
        return mpmath.ncdf(-epsilon_ / mu_ + mu_ / 2) - mpmath.exp(epsilon_) * mpmath.ncdf(-epsilon_ / mu_ - mu_ / 2)


def reference_epsilon(mu: float, delta: float) -> mpmath.mpf:
    """The exact ε to 50 digits: bisection on the high-precision δ(ε), which decreases in ε."""
    with mpmath.workdps(50):
        if reference_delta(mu, 0.0) <= delta:
            return mpmath.mpf(0)
        low, high = mpmath.mpf(0), mpmath.mpf(mu * mu / 2 + 40 * mu)
        for _ in range(200):
            middle = (low + high) / 2
            low, high = (middle, high) if reference_delta(mu, middle) > delta else (low, middle)
        return high


@pytest.mark.parametrize("mu", MUS)
def test_epsilon_is_at_least_the_exact_one_and_within_1e_9_of_it(mu):
    for delta in DELTAS:
        ours, exact = gaussian_epsilon(mu, delta), reference_epsilon(mu, delta)
        assert ours >= exact, (mu, delta)
        assert ours <= exact * (1 + 1e-9) if exact > 0 else ours == 0.0, (mu, delta)
        assert reference_delta(mu, ours) <= delta, (mu, delta)  # the ε returned holds


@pytest.mark.parametrize("mu", MUS[:-1:2])  # (μ = 50 on dp-accounting's 10⁻⁴ grid takes minutes)
def test_epsilon_is_at_most_dp_accountings_pld_of_the_same_gaussian(mu):
    """Up to 10⁻¹⁰ relative: dp-accounting 0.6's pessimistic PLD is not always above the exact ε (μ = 3.34,
    δ = 7.9·10⁻⁹: its ε is 3.6·10⁻¹² relative below the 50-digit one, its δ(ε) 1.5·10⁻¹⁰ relative above δ)."""
    pld = privacy_loss_distribution.from_gaussian_mechanism(standard_deviation=1.0 / mu)
    for delta in DELTAS[::2]:
        assert gaussian_epsilon(mu, delta) <= pld.get_epsilon_for_delta(delta) * (1 + 1e-10), (mu, delta)


@pytest.mark.parametrize("mu", MUS)
def test_delta_is_rounded_up_and_tight(mu):
    for epsilon in (0.0, 0.1 * mu, mu, mu * mu / 2 + 3 * mu):
        exact = reference_delta(mu, epsilon)
        ours = gaussian_delta(mu, epsilon)
        assert exact <= ours <= exact * (1 + 1e-9) + 1e-300, (mu, epsilon)
    for delta in DELTAS:
        assert gaussian_delta(mu, gaussian_epsilon(mu, delta)) <= delta * (1 + 1e-15)


def test_no_noise_is_infinite_epsilon_and_no_release_is_zero():
    assert gaussian_epsilon(math.inf, 1e-5) == math.inf and gaussian_delta(math.inf, 3.0) == 1.0
    assert gaussian_epsilon(0.0, 1e-5) == 0.0 and gaussian_delta(0.0, 0.0) == 0.0
    assert gaussian_epsilon(1e-3, 0.5) == 0.0  # δ(0) ≈ 4·10⁻⁴ ≤ δ


@pytest.mark.parametrize("call, message", [
    (lambda: gaussian_epsilon(-1.0, 1e-5), "mu must be ≥ 0"),
    (lambda: gaussian_epsilon(math.nan, 1e-5), "mu must be ≥ 0"),
    (lambda: gaussian_epsilon(1.0, 0.0), "delta must be in \\(0, 1\\)"),
    (lambda: gaussian_epsilon(1.0, 1.0), "delta must be in \\(0, 1\\)"),
    (lambda: gaussian_delta(1.0, -0.5), "epsilon must be ≥ 0"),
])
def test_bad_values_are_refused_by_name(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("call", [lambda: gaussian_epsilon("1", 1e-5), lambda: gaussian_delta(1.0, None),
                                  lambda: gaussian_epsilon(True, 1e-5)])
def test_bad_types_are_refused(call):
    with pytest.raises(TypeError, match="must be a real number"):
        call()


def test_mu_of_plain_gaussian_events_and_none_for_anything_else():
    gaussian = dp_accounting.GaussianDpEvent(2.0)
    composed = dp_accounting.ComposedDpEvent([gaussian, dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(4.0), 8)])
    assert gaussian_mu(gaussian) == 0.5 and gaussian_mu(composed) == pytest.approx(math.sqrt(0.25 + 0.5), rel=1e-15)
    for other in [dp_accounting.LaplaceDpEvent(1.0), dp_accounting.GaussianDpEvent(0.0),
                  dp_accounting.SelfComposedDpEvent(gaussian, 0), dp_accounting.ComposedDpEvent([]),
                  dp_accounting.PoissonSampledDpEvent(0.1, gaussian),
                  dp_accounting.ComposedDpEvent([gaussian, dp_accounting.LaplaceDpEvent(1.0)])]:
        assert gaussian_mu(other) is None


@pytest.fixture
def counted_plds(monkeypatch):
    built = []
    original = _dp_accounting.event_pld

    def event_pld(event, **options):
        built.append(repr(event))
        return original(event, **options)

    def from_gaussian_mechanism(*arguments, **options):
        built.append("from_gaussian_mechanism")
        return original_gaussian(*arguments, **options)

    original_gaussian = privacy_loss_distribution.from_gaussian_mechanism
    monkeypatch.setattr(_dp_accounting, "event_pld", event_pld)
    monkeypatch.setattr(privacy_loss_distribution, "from_gaussian_mechanism", from_gaussian_mechanism)
    monkeypatch.setattr(_dp_accounting, "PLD_MEMO", _dp_accounting.PLDMemo(256))
    return built


def test_a_ledger_of_1000_distinct_gnmax_entries_builds_no_pld_and_prints_the_exact_epsilons(counted_plds):
    rng = np.random.default_rng(2)
    ledger = Ledger(delta=1e-5)
    ledger.record_noise_source(NoiseSource.secret())
    sigmas, counts = 40.0 + 0.01 * np.arange(1000), 3 + np.arange(1000) % 7
    for sigma, count in zip(sigmas, counts):
        ledger.record(GaussianNoisyMax(rng.multinomial(50, [0.7, 0.2, 0.1], size=int(count)), float(sigma),
                                       unit="party"))
    report = ledger.account()
    assert counted_plds == []
    assert report.method == "pld" and len(report.mechanisms) == 1000
    # GNMax with k = 1 is GaussianDpEvent(σ/√2) per query: μ² = 2·count/σ² per entry.
    mu = math.sqrt(math.fsum(2.0 * count / sigma ** 2 for sigma, count in zip(sigmas, counts)))
    assert report.epsilon == pytest.approx(gaussian_epsilon(mu, 1e-5), rel=1e-14)  # μ summed in another order
    assert reference_epsilon(mu, 1e-5) <= report.epsilon <= reference_epsilon(mu, 1e-5) * (1 + 1e-9)
    for row, sigma, count in list(zip(report.mechanisms, sigmas, counts))[::100]:
        assert row.epsilon == pytest.approx(gaussian_epsilon(math.sqrt(2.0 * count) / sigma, 1e-5), rel=1e-14)


def test_a_gaussian_composed_with_laplace_keeps_the_pld(counted_plds):
    votes = np.random.default_rng(1).multinomial(50, [0.7, 0.2, 0.1], size=20)
    report = account([GaussianNoisyMax(votes, 40.0), dp_accounting.LaplaceDpEvent(20.0)], delta=1e-5)
    assert report.method == "pld" and counted_plds  # the mixed composition's ε is a PLD's


def test_the_evidence_packs_verify_script_computes_the_same_closed_form():
    from privfed.evidence import verify_script

    for mu in MUS[:-1]:
        for delta in DELTAS:
            assert verify_script.gaussian_epsilon(float(mu), float(delta)) == gaussian_epsilon(mu, delta)
    composed = dp_accounting.ComposedDpEvent([dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(4.0), 8),
                                              dp_accounting.GaussianDpEvent(2.0)])
    assert verify_script.gaussian_mu(composed) == gaussian_mu(composed)
    assert verify_script.gaussian_mu(dp_accounting.LaplaceDpEvent(1.0)) is None


def test_a_gaussian_reports_privacy_profile_is_the_closed_form_rounded_up_with_no_pld(counted_plds):
    report = account(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(4.0), 4), delta=1e-5)
    profile = report.privacy_profile()
    assert counted_plds == [] and profile.basis == "pld"
    for epsilon, delta in list(zip(profile.epsilons, profile.deltas))[::97]:
        exact = reference_delta(0.5, epsilon)
        assert exact <= delta <= exact * (1 + 1e-9) + 1e-300
    assert 0.5 <= report.gdp_mu <= 0.51
