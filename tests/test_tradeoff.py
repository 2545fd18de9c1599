"""The trade-off curve and Gaussian-DP μ of a report, against the closed forms of the Gaussian and Laplace."""

import math

import dp_accounting
import numpy as np
import pytest
from privfed.accounting import DpEventRelease
from privfed.accounting.tradeoff import gaussian_delta, tradeoff_true_positive_rate
from scipy.stats import norm

import privfed

ALPHAS = np.array([0.001, 0.01, 0.05, 0.1, 0.3, 0.5, 0.9])


def test_gaussian_tradeoff_and_mu_match_the_closed_form():
    sigma = 2.0
    report = privfed.account(DpEventRelease(dp_accounting.GaussianDpEvent(sigma)), delta=1e-5)
    mu = 1.0 / sigma
    exact = 1.0 - norm.cdf(norm.ppf(1.0 - ALPHAS) - mu)  # 1 − f(α), f(α) = Φ(Φ⁻¹(1−α) − μ)
    tpr = report.tradeoff(ALPHAS)
    assert report.tradeoff_basis == "pld"
    assert np.all(tpr >= exact - 1e-9)  # an upper bound on the attack ...
    assert np.max(tpr - exact) < 2e-3  # ... and a tight one
    assert mu <= report.gdp_mu <= mu * 1.01


def test_gaussian_composition_mu_adds_in_quadrature():
    report = privfed.account([DpEventRelease(dp_accounting.GaussianDpEvent(s)) for s in (1.0, 2.0, 2.0)], delta=1e-5)
    mu = math.sqrt(1.0 + 0.25 + 0.25)
    assert mu <= report.gdp_mu <= mu * 1.01


def test_laplace_tradeoff_matches_pure_epsilon():
    epsilon = 1.0
    report = privfed.account(DpEventRelease(dp_accounting.LaplaceDpEvent(1.0 / epsilon)), delta=1e-5)
    # pure ε: f(α) = max(0, 1 − e^ε α, e^{−ε}(1 − α)) bounds the Laplace's own curve from below
    pure_bound = 1.0 - np.maximum.reduce([np.zeros_like(ALPHAS), 1 - math.e * ALPHAS, (1 - ALPHAS) / math.e])
    # the Laplace's exact trade-off curve (location 0 vs 1, scale 1): threshold tests on the observed value
    t = np.where(ALPHAS < 0.5, -np.log(2 * ALPHAS), np.log(2 * (1 - ALPHAS)))  # P0(X > t) = α
    exact = np.where(t >= 1, 0.5 * np.exp(-(t - 1)), 1 - 0.5 * np.exp(t - 1))  # P1(X > t)
    tpr = report.tradeoff(ALPHAS)
    assert np.all(tpr >= exact - 1e-9)
    assert np.all(tpr <= pure_bound + 1e-6)
    assert np.max(tpr - exact) < 5e-3
    assert report.gdp_mu is not None and report.gdp_mu > 0


def test_profile_formula_reproduces_pure_dp_closed_form():
    tpr = tradeoff_true_positive_rate(np.array([0.5]), np.array([0.0]), ALPHAS)
    expected = 1 - np.maximum.reduce([np.zeros_like(ALPHAS), 1 - math.exp(0.5) * ALPHAS, (1 - ALPHAS) * math.exp(-0.5)])
    np.testing.assert_allclose(tpr, expected, atol=1e-12)


def test_gaussian_delta_is_the_gaussian_profile():
    pld = dp_accounting.pld.privacy_loss_distribution.from_gaussian_mechanism(1.0, value_discretization_interval=1e-5)
    eps = np.array([0.0, 0.5, 1.0, 3.0])
    np.testing.assert_allclose(gaussian_delta(1.0, eps), pld.get_delta_for_epsilon(eps), rtol=1e-3)


def test_rdp_only_report_says_so_and_has_no_mu():
    report = privfed.account(privfed.LaplaceNoisyMax(np.array([[48, 2], [30, 20]]), gamma=0.05), delta=1e-5)
    profile_free = privfed.accounting.report.PrivacyReport(**{
        **{name: getattr(report, name) for name in report.__dataclass_fields__}, "dp_event": None})
    assert profile_free.tradeoff_basis.startswith("rdp")
    assert profile_free.gdp_mu is None
    # the RDP profile is valid and looser than the PLD one
    assert np.all(profile_free.tradeoff(ALPHAS) >= report.tradeoff(ALPHAS) - 1e-9)


def test_infinite_epsilon_gives_no_protection():
    ledger = privfed.Ledger(delta=1e-5)
    ledger.record_unaccounted("labels in clear")
    report = ledger.account()
    assert report.tradeoff_basis == "none" and report.gdp_mu is None
    assert report.tradeoff([0.0, 0.01]).tolist() == [0.0, 1.0]


def test_false_positive_rates_are_checked():
    report = privfed.account(DpEventRelease(dp_accounting.GaussianDpEvent(1.0)), delta=1e-5)
    with pytest.raises(ValueError, match="false_positive_rates must be"):
        report.tradeoff([1.5])
