"""The Gaussian members of a composition are composed exactly into one Gaussian (issue 46, item 4).

Gaussians of noise multipliers zᵢ used countᵢ times compose exactly into one Gaussian of multiplier
(Σ countᵢ/zᵢ²)^(−1/2). A composition with other members gets one PLD of that Gaussian; one of Gaussians only gets
the exact ε of that Gaussian's privacy profile (``accounting/gaussian_profile.py``). The ledger's ε must lie at or
above the exact ε (the analytical δ(ε) of a μ-GDP mechanism, solved here independently of privfed and
dp-accounting's PLD) and below dp-accounting's own composition of the members' PLDs (which rounds each member's
losses up before composing).
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution
from privfed.accounting import ConfidentGNMax, GaussianNoisyMax, Ledger, NoiseSource, account
from privfed.accounting._dp_accounting import event_pld, merged_gaussians, pld_interval
from scipy import optimize, special

DELTA = 1e-5


def gaussian_delta(epsilon: float, mu: float) -> float:
    """δ(ε) of a μ-GDP mechanism (the Gaussian of shift μ, unit noise), exactly:
    Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2) (Balle & Wang 2018, Thm 8; Dong, Roth, Su 2022, Cor. 2.13)."""
    upper = special.log_ndtr(-epsilon / mu + mu / 2.0)
    lower = epsilon + special.log_ndtr(-epsilon / mu - mu / 2.0)
    return math.exp(upper) * -math.expm1(lower - upper)


def exact_gaussian_epsilon(mu: float, delta: float) -> float:
    """The smallest ε with δ(ε) ≤ δ for a μ-GDP mechanism (δ(ε) decreases in ε)."""
    if gaussian_delta(0.0, mu) <= delta:
        return 0.0
    return optimize.brentq(lambda epsilon: gaussian_delta(epsilon, mu) - delta, 0.0, 10.0 * mu * mu + 50.0,
                           xtol=1e-14, rtol=1e-15)


def gnmax_ledger(sigmas: list[float], queries: list[int]) -> tuple[Ledger, list[GaussianNoisyMax]]:
    rng = np.random.default_rng(0)
    ledger = Ledger(delta=DELTA)
    ledger.record_noise_source(NoiseSource.secret())
    members = [GaussianNoisyMax(rng.multinomial(50, [0.7, 0.2, 0.1], size=count), sigma, unit="party")
               for sigma, count in zip(sigmas, queries)]
    for member in members:
        ledger.record(member)
    return ledger, members


def test_two_or_more_gaussian_members_become_one_gaussian_of_the_summed_inverse_variance():
    laplace = dp_accounting.LaplaceDpEvent(2.0)
    events = [laplace, dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(3.0), 5),
              dp_accounting.RandomizedResponseDpEvent(0.5, 3), dp_accounting.GaussianDpEvent(2.0)]
    merged = merged_gaussians(events)
    assert merged[0] is laplace and merged[2] is events[2] and len(merged) == 3
    assert isinstance(merged[1], dp_accounting.GaussianDpEvent)
    assert merged[1].noise_multiplier == pytest.approx((5 / 9 + 1 / 4) ** -0.5, rel=1e-15)


@pytest.mark.parametrize("events", [
    [dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(3.0), 5), dp_accounting.LaplaceDpEvent(1.0)],
    [dp_accounting.GaussianDpEvent(3.0), dp_accounting.GaussianDpEvent(0.0)],
    [dp_accounting.GaussianDpEvent(3.0), dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(2.0), 0)],
    [dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(1.0)), dp_accounting.GaussianDpEvent(2.0)],
], ids=["one-gaussian", "zero-noise", "zero-uses", "subsampled-is-not-plain"])
def test_anything_but_two_plain_gaussians_with_noise_is_composed_as_before(events):
    assert merged_gaussians(events) == events


@pytest.mark.parametrize("sigmas, queries", [([40.0, 25.0], [20, 7]), ([40.0, 40.5, 41.0, 60.0], [20, 21, 22, 300]),
                                             ([8.0, 12.0, 30.0], [3, 2, 50])])
def test_a_ledger_of_gnmax_entries_lies_between_the_exact_gaussian_and_dp_accountings_composition(sigmas, queries):
    ledger, members = gnmax_ledger(sigmas, queries)
    report = ledger.account()
    assert report.method == "pld"
    ours = report.epsilon
    # dp-accounting's own composition of the members' PLDs, on the grid privfed uses (today's path).
    event = dp_accounting.ComposedDpEvent([member.dp_event() for member in members])
    interval = pld_interval(event, epsilon_hint=report.epsilon_data_independent)
    theirs_pld = privacy_loss_distribution.identity(value_discretization_interval=interval)
    for member in members:
        z = member.dp_event().event.noise_multiplier
        theirs_pld = theirs_pld.compose(privacy_loss_distribution.from_gaussian_mechanism(
            standard_deviation=z / math.sqrt(member.num_queries), value_discretization_interval=interval))
    theirs = theirs_pld.get_epsilon_for_delta(DELTA)
    # The exact ε of the composition: one μ-GDP mechanism, μ² = Σ countᵢ · 2/σᵢ² (k = 1: multiplier σ/√2).
    mu = math.sqrt(sum(count * 2.0 / sigma ** 2 for sigma, count in zip(sigmas, queries)))
    exact = exact_gaussian_epsilon(mu, DELTA)
    # brentq's root may lie an ulp or two either side of the exact ε; privfed's is certified above it.
    assert exact * (1 - 1e-14) <= ours <= exact * (1 + 1e-9)
    assert ours <= event_pld(event, value_discretization_interval=interval).get_epsilon_for_delta(DELTA) <= theirs


def test_a_single_gnmax_entry_gets_the_exact_epsilon_of_its_gaussian_below_its_pld():
    ledger, (member,) = gnmax_ledger([40.0], [20])
    event = member.dp_event()
    interval = pld_interval(event, epsilon_hint=ledger.account().epsilon_data_independent)
    pld = event_pld(event, value_discretization_interval=interval).get_epsilon_for_delta(DELTA)
    exact = exact_gaussian_epsilon(math.sqrt(event.count) / event.event.noise_multiplier, DELTA)
    report = ledger.account()
    assert report.epsilon == report.mechanisms[0].epsilon
    assert exact * (1 - 1e-14) <= report.epsilon <= exact * (1 + 1e-9) and report.epsilon < pld


def test_confident_gnmax_has_no_event_so_a_ledger_holding_one_builds_no_pld():
    # Its answered count depends on the data: no data-independent event, so no PLD (merged or not) is built.
    votes = np.array([[40, 5, 5], [20, 20, 10]])
    confident = ConfidentGNMax(votes, threshold=30.0, sigma_threshold=20.0, sigma=10.0, unit="party")
    assert confident.dp_event() is None
    report = account([confident, GaussianNoisyMax(votes, 10.0, unit="party"),
                      GaussianNoisyMax(votes, 12.0, unit="party")], delta=DELTA)
    assert report.method == "rdp"


def test_a_laplace_release_between_gnmax_releases_is_still_composed_with_their_merged_gaussian():
    votes = np.random.default_rng(1).multinomial(50, [0.7, 0.2, 0.1], size=20)
    laplace = dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(20.0), 10)  # a recorded DpEvent
    members = [GaussianNoisyMax(votes, 40.0), laplace, GaussianNoisyMax(votes, 30.0)]
    report = account(members, delta=DELTA)
    assert report.method == "pld"
    event = report.dp_event
    assert [type(member) for member in merged_gaussians(event.events)] == [dp_accounting.GaussianDpEvent,
                                                                            dp_accounting.SelfComposedDpEvent]
    interval = pld_interval(event, epsilon_hint=report.epsilon_data_independent)
    ours = event_pld(event, value_discretization_interval=interval).get_epsilon_for_delta(DELTA)
    theirs = privacy_loss_distribution.identity(value_discretization_interval=interval)
    for member in event.events:  # dp-accounting's composition of each member's own PLD
        theirs = theirs.compose(event_pld(member, value_discretization_interval=interval))
    theirs_epsilon = theirs.get_epsilon_for_delta(DELTA)
    assert report.epsilon == ours
    assert theirs_epsilon - len(members) * interval <= ours <= theirs_epsilon + 1e-12
    gaussians = dp_accounting.ComposedDpEvent([event.events[0], event.events[2]])
    assert ours > event_pld(gaussians, value_discretization_interval=interval).get_epsilon_for_delta(DELTA)
