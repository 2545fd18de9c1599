"""SkellamMechanism: its RDP against brute-force Rényi divergences, its PLD against an exact reference."""

import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution
from privfed.accounting.ledger import Ledger
from privfed.accounting.orders import default_orders
from privfed.accounting.registry import mechanism_from_record
from privfed.accounting.skellam import SkellamMechanism, skellam_log_pmf
from privfed.accounting.spec import load_mechanisms
from scipy import stats

import privfed


def _pmf(variance, shift=0, half=None):
    half = half or int(60 * math.sqrt(variance)) + 60
    support = np.arange(-half, half + 1)
    return support, np.exp(skellam_log_pmf(support - shift, variance))


def _renyi(variance, shift, alpha):
    """D_α(Sk(shift) ‖ Sk(0)) summed over a support wide enough that the rest is below float precision."""
    _, p = _pmf(variance, shift)
    _, q = _pmf(variance, 0)
    keep = (p > 0) & (q > 0)
    log_terms = alpha * np.log(p[keep]) + (1 - alpha) * np.log(q[keep])
    return float(np.logaddexp.reduce(log_terms) / (alpha - 1))


def _hockey_stick(variance, shift, epsilon):
    _, p = _pmf(variance, shift)
    _, q = _pmf(variance, 0)
    return float(np.maximum(p - math.exp(epsilon) * q, 0).sum())


@pytest.mark.parametrize("variance", [2.0, 10.0, 60.0])
@pytest.mark.parametrize("move", [(1,), (3,), (2, -2), (1, 1, 1, -1), (3, -1)])
def test_rdp_bounds_the_brute_force_renyi_divergence_of_every_move(variance, move):
    move = np.asarray(move)
    mechanism = SkellamMechanism(variance, l1_sensitivity=float(np.abs(move).sum()),
                                 l2_sensitivity=float(np.linalg.norm(move)))
    orders = np.array([1.5, 2.0, 3.0, 5.0, 8.0, 16.0, 32.0])
    bound = mechanism.rdp(orders)
    # Independent coordinates: Rényi divergences add.
    exact = np.array([sum(_renyi(variance, abs(int(d)), a) for d in move) for a in orders])
    assert np.all(exact <= bound * (1 + 1e-9))
    # and the bound is not vacuous: within a factor 2 of the truth at order 2 here
    assert bound[1] <= 2.5 * exact[1] + 0.05


def test_rdp_composes_count_times():
    orders = default_orders("tight")
    one = SkellamMechanism(30.0, l1_sensitivity=4, l2_sensitivity=2 * math.sqrt(2)).rdp(orders)
    many = SkellamMechanism(30.0, l1_sensitivity=4, l2_sensitivity=2 * math.sqrt(2), count=7).rdp(orders)
    np.testing.assert_allclose(many, 7 * one)


def test_hockey_stick_divergence_grows_with_the_shift():
    """The dominance step of the PLD: H_{e^ε}(Sk(d) ‖ Sk(0)) is non-decreasing in |d|, equal for ±d."""
    for variance in (0.5, 3.0, 40.0):
        for epsilon in (0.0, 0.1, 0.5, 1.0, 3.0):
            values = [_hockey_stick(variance, d, epsilon) for d in range(0, 8)]
            assert all(b >= a - 1e-15 for a, b in zip(values, values[1:]))
            assert _hockey_stick(variance, -3, epsilon) == pytest.approx(_hockey_stick(variance, 3, epsilon), abs=1e-15)


def _reference_epsilon(variance, shift, compositions, delta, pessimistic):
    """The PLD of one coordinate shifted by ``shift``, on a wide support and a fine grid, composed."""
    support, lower = _pmf(variance, 0)
    _, upper = _pmf(variance, shift)
    log_lower = {int(k): math.log(p) for k, p in zip(support, lower) if p > 0}
    log_upper = {int(k): math.log(p) for k, p in zip(support, upper) if p > 0}
    pld = privacy_loss_distribution.from_two_probability_mass_functions(
        log_lower, log_upper, pessimistic_estimate=pessimistic, value_discretization_interval=1e-4)
    return pld.self_compose(compositions).get_epsilon_for_delta(delta)


# dp-accounting's self_compose of the optimistic reference PLD overflows harmlessly inside scipy's logsumexp.
@pytest.mark.filterwarnings("ignore:overflow encountered in divide:RuntimeWarning")
@pytest.mark.parametrize("sigma,shift,queries", [(8.0, 1, 200), (20.0, 3, 300), (4.0, 2, 50)])
def test_account_is_within_5_percent_of_the_exact_pld_of_a_vote_histograms_worst_move(sigma, shift, queries):
    """A FedKT consistent-vote histogram: per query a party moves 2 counts by s; (queries × classes) counts."""
    delta = 1e-5
    mechanism = SkellamMechanism(sigma**2, l1_sensitivity=2 * shift * queries,
                                 l2_sensitivity=shift * math.sqrt(2 * queries),
                                 coordinate_sensitivity=shift, moved_coordinates=2 * queries)
    report = privfed.account(mechanism, delta=delta)
    optimistic = _reference_epsilon(sigma**2, shift, 2 * queries, delta, pessimistic=False)
    pessimistic = _reference_epsilon(sigma**2, shift, 2 * queries, delta, pessimistic=True)
    assert report.method == "pld"
    assert report.epsilon >= optimistic  # never below the exact ε
    assert report.epsilon <= 1.05 * pessimistic
    # The RDP bound alone is valid and larger.
    rdp_epsilon, _ = mechanism.epsilon(default_orders("tight"), delta, analysis="tight")
    assert rdp_epsilon >= report.epsilon


def test_per_query_form_equals_the_whole_histogram():
    """count queries of (2 coordinates, shift s) is the same release as one histogram of all queries."""
    per_query = SkellamMechanism(50.0, l1_sensitivity=4, l2_sensitivity=2 * math.sqrt(2), count=40,
                                 coordinate_sensitivity=2, moved_coordinates=2)
    whole = SkellamMechanism(50.0, l1_sensitivity=160, l2_sensitivity=2 * math.sqrt(80),
                             coordinate_sensitivity=2, moved_coordinates=80)
    a, b = privfed.account(per_query, delta=1e-6), privfed.account(whole, delta=1e-6)
    assert a.epsilon == pytest.approx(b.epsilon, rel=1e-9)


def test_without_coordinate_bounds_the_pld_still_dominates_every_integer_move():
    mechanism = SkellamMechanism(20.0, l1_sensitivity=3, l2_sensitivity=math.sqrt(5))
    assert mechanism.dominating_move() == (3, 2)  # at most 3 coordinates (ℓ1 ≤ 3), by at most 2 (ℓ2 ≤ √5)
    report = privfed.account(mechanism, delta=1e-5)
    # the move (2, 1) is allowed; its exact ε is below the reported one
    support, p0 = _pmf(20.0, 0)
    product_exact = privacy_loss_distribution.from_two_probability_mass_functions(
        {int(k): math.log(p) for k, p in zip(support, p0) if p > 0},
        {int(k): math.log(p) for k, p in zip(support, _pmf(20.0, 2)[1]) if p > 0}, pessimistic_estimate=False,
    ).compose(privacy_loss_distribution.from_two_probability_mass_functions(
        {int(k): math.log(p) for k, p in zip(support, p0) if p > 0},
        {int(k): math.log(p) for k, p in zip(support, _pmf(20.0, 1)[1]) if p > 0}, pessimistic_estimate=False))
    assert report.epsilon >= product_exact.get_epsilon_for_delta(1e-5)


def test_large_variance_is_accounted_by_rdp_alone():
    mechanism = SkellamMechanism(1e9, l1_sensitivity=2, l2_sensitivity=math.sqrt(2))
    assert mechanism.dp_event() is None
    assert privfed.account(mechanism, delta=1e-5).method == "rdp"


def test_round_trip_through_a_ledger_and_a_mechanism_file(tmp_path):
    mechanism = SkellamMechanism(64.0, l1_sensitivity=4, l2_sensitivity=2 * math.sqrt(2), count=30, unit="party",
                                 coordinate_sensitivity=2, moved_coordinates=2)
    ledger = Ledger()
    ledger.record(mechanism, note="noisy vote histograms")
    loaded = Ledger.from_json(ledger.to_json())
    loaded.verify()
    before, after = ledger.account(1e-5, unit="party"), loaded.account(1e-5, unit="party")
    assert after.epsilon == before.epsilon
    rebuilt = mechanism_from_record({"kind": "skellam", "unit": "party", "parameters": mechanism.parameters()})
    assert rebuilt.parameters() == mechanism.parameters() and rebuilt.unit == "party"
    spec = tmp_path / "mechanisms.toml"
    spec.write_text('[[mechanisms]]\nkind = "skellam"\nunit = "party"\nvariance = 64.0\nl1_sensitivity = 4\n'
                    'l2_sensitivity = 2.8284271247461903\ncount = 30\ncoordinate_sensitivity = 2\n'
                    'moved_coordinates = 2\n')
    (from_file,) = load_mechanisms(spec)
    assert privfed.account(from_file, delta=1e-5).epsilon == privfed.account(mechanism, delta=1e-5).epsilon


@pytest.mark.parametrize("arguments,message", [
    ({"variance": 0.0}, "variance must be finite and > 0, got 0.0"),
    ({"l1_sensitivity": 0.5}, "l1_sensitivity must be >= 1"),
    ({"l2_sensitivity": 3.0}, "l2_sensitivity must be <= l1_sensitivity"),
    ({"count": 0}, "count must be an integer >= 1, got 0"),
    ({"coordinate_sensitivity": 2}, "give both coordinate_sensitivity and moved_coordinates"),
    ({"unit": "user"}, "unit must be one of 'example', 'party'; got 'user'"),
])
def test_bad_input_is_refused_in_one_line(arguments, message):
    given = {"variance": 10.0, "l1_sensitivity": 2.0, "l2_sensitivity": 1.5, **arguments}
    variance = given.pop("variance")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")) as error:
        SkellamMechanism(variance, **given)
    assert "\n" not in str(error.value)


def test_skellam_pmf_is_scipys_difference_of_poissons():
    values = np.arange(-6, 7)
    by_convolution = [sum(stats.poisson.pmf(k + j, 1.5) * stats.poisson.pmf(j, 1.5) for j in range(0, 80))
                      for k in values]
    np.testing.assert_allclose(np.exp(skellam_log_pmf(values, 3.0)), by_convolution, rtol=1e-10)
