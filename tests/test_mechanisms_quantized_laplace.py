"""QuantizedLaplaceEnsemble (FedKD): quantizer, weights, sensitivity, composition, the unsafe clip."""

from __future__ import annotations

import dp_accounting
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from privfed.accounting._dp_accounting import event_pld_epsilon
from privfed.accounting.conversion import tight_epsilon

import privfed
from tests.conftest import load_oracle, requires_oracles


# --- quantizer and weights ---------------------------------------------------------
@settings(max_examples=50, deadline=None)
@given(
    logits=hnp.arrays(np.float64, st.integers(1, 30), elements=st.floats(-1e6, 1e6)),
    clip=st.floats(0.01, 100.0),
    scale=st.integers(1, 1000),
)
def test_quantizer_stays_in_range_on_grid_and_is_idempotent(logits, clip, scale):
    quantized = privfed.quantize_logits(logits, clip=clip, quantization_scale=scale)
    assert np.all(np.abs(quantized) <= clip * (1 + 1e-12))
    steps = quantized / (clip / scale)
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-6)
    inside = np.abs(logits) <= clip
    assert np.all(np.abs(quantized - logits)[inside] <= clip / scale / 2 * (1 + 1e-9))
    np.testing.assert_allclose(privfed.quantize_logits(quantized, clip=clip, quantization_scale=scale), quantized)


def test_class_count_weights_are_shares_per_class():
    counts = np.array([[10, 0, 5], [30, 0, 5]])
    weights = privfed.class_count_weights(counts)
    np.testing.assert_allclose(weights, [[0.25, 0.5, 0.5], [0.75, 0.5, 0.5]])
    np.testing.assert_allclose(weights.sum(axis=0), 1.0)


# --- sensitivity and per-answer ε --------------------------------------------------------
def test_sensitivity_with_data_derived_and_public_weights():
    derived = privfed.QuantizedLaplaceEnsemble(10, 2.0, 0.5, 100)
    assert derived.sensitivity == pytest.approx(2 * 2.0 * 10)
    assert derived.epsilon_per_query == pytest.approx(0.5 * 40.0)
    weights = np.array([[0.5] * 10, [0.25] * 10, [0.25] * 10])
    public = privfed.QuantizedLaplaceEnsemble(10, 2.0, 0.5, 100, weights=weights)
    assert public.sensitivity == pytest.approx(2 * 2.0 * 5.0)
    assert public.pure_epsilon() == pytest.approx(100 * 0.5 * 20.0)


def test_sensitivity_bound_is_attained_by_an_adversarial_party():
    """Data-derived weights: one party that changes its data can move every class across [−Z, Z]."""
    clip, classes = 1.0, 4
    # Neighbour A: party 0 holds every training example and predicts −Z; party 1 predicts +Z.
    logits_a = np.stack([np.full(classes, -clip), np.full(classes, clip)])
    weights_a = privfed.class_count_weights(np.array([[100] * classes, [0] * classes]))
    # Neighbour B: party 0's data replaced by nothing: party 1 gets all the weight.
    weights_b = privfed.class_count_weights(np.array([[0] * classes, [100] * classes]))
    aggregate_a = (weights_a * privfed.quantize_logits(logits_a, clip=clip)).sum(axis=0)
    aggregate_b = (weights_b * privfed.quantize_logits(logits_a, clip=clip)).sum(axis=0)
    mechanism = privfed.QuantizedLaplaceEnsemble(classes, clip, 1.0, 1)
    assert np.abs(aggregate_a - aggregate_b).sum() == pytest.approx(mechanism.sensitivity)
    # Every coordinate moves by its full cap 2Z: the per-coordinate worst case is attained.
    np.testing.assert_allclose(np.abs(aggregate_a - aggregate_b), mechanism.coordinate_shifts()[0])


# --- composition -------------------------------------------------------------------------
@requires_oracles
def test_tight_rdp_is_dp_accounting_laplace_and_matches_oracle():
    for case in load_oracle("dp_accounting.json")["laplace"][:4]:
        # Oracle: Laplace with noise_multiplier = scale / ℓ1 sensitivity = 1/(2mγ), i.e. Δ₁ = 2m.
        gamma, m = case["gamma"], case["votes_changed_m"]
        weights = np.array([[float(m), 0.0]])  # public weights: one coordinate moves by 2·Z·m = 2m with Z = 1
        mechanism = privfed.QuantizedLaplaceEnsemble(2, 1.0, gamma, case["count"], weights=weights)
        assert 1.0 / mechanism.epsilon_per_query == pytest.approx(case["noise_multiplier"], rel=1e-12)
        orders = np.asarray(dp_accounting.rdp.RdpAccountant()._orders)
        assert tight_epsilon(orders, mechanism.rdp(orders), case["delta"])[0] == pytest.approx(
            case["expected"]["rdp_eps"], rel=1e-9)
        assert event_pld_epsilon(mechanism.dp_event(), case["delta"]) == pytest.approx(
            case["expected"]["pld_eps"], rel=1e-6)
        assert mechanism.pure_epsilon() == pytest.approx(case["expected"]["pure_composition_eps"], rel=1e-9)


def _laplace_rdp(order: float, shift: float, gamma: float) -> float:
    """Mironov 2017, Prop. 6: D_α(Lap(0, 1/γ) ‖ Lap(shift, 1/γ)) in closed form."""
    t = gamma * shift
    return np.log(order / (2 * order - 1) * np.exp((order - 1) * t)
                  + (order - 1) / (2 * order - 1) * np.exp(-order * t)) / (order - 1)


@pytest.mark.parametrize("classes, clip, gamma, n", [(10, 1.0, 0.005, 1000), (100, 0.5, 0.001, 1000), (3, 2.0, 0.3, 7)])
def test_rdp_is_c_times_n_laplace_releases_of_shift_2z(classes, clip, gamma, n):
    """Each coordinate moves by at most 2Z: the exact worst case is C·n Laplace releases of shift 2Z."""
    mechanism = privfed.QuantizedLaplaceEnsemble(classes, clip, gamma, n)
    orders = np.array([1.5, 2.0, 8.0, 64.0])
    expected = [classes * n * _laplace_rdp(a, 2 * clip, gamma) for a in orders]
    np.testing.assert_allclose(mechanism.rdp(orders), expected, rtol=1e-9)
    # ... strictly below one Laplace release of the whole ℓ1 sensitivity 2ZC per answer (the old bound).
    assert np.all(mechanism.rdp(orders) < [n * _laplace_rdp(a, 2 * clip * classes, gamma) for a in orders])


def test_the_issue_examples_per_coordinate():
    """Issue 16: C = 10, Z = 1, γ = 0.005, n = 1000 → 4.37 (was 17.42); C = 100, Z = 0.5, γ = 0.001 → ≤ 1.31."""
    first = privfed.account(privfed.QuantizedLaplaceEnsemble(10, 1.0, 0.005, 1000), delta=1e-5).epsilon
    second = privfed.account(privfed.QuantizedLaplaceEnsemble(100, 0.5, 0.001, 1000), delta=1e-5).epsilon
    assert 4.3 < first < 4.38
    assert 1.0 < second < 1.31


def test_public_weights_take_the_worst_party_per_coordinate():
    """Public weights: party k moves coordinate c by 2Z·ω_k^c; the RDP is the worst party's sum over coordinates."""
    weights = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, 0.5]])
    mechanism = privfed.QuantizedLaplaceEnsemble(3, 1.0, 0.2, 5, weights=weights)
    orders = np.array([2.0, 10.0])
    expected = [5 * (_laplace_rdp(a, 2.0, 0.2) + _laplace_rdp(a, 1.0, 0.2)) for a in orders]
    np.testing.assert_allclose(mechanism.rdp(orders), expected, rtol=1e-9)
    assert mechanism.sensitivity == pytest.approx(3.0)
    # The PLD event dominates every party: coordinate-wise maxima 2, 2, 1.
    report = privfed.account(mechanism, delta=1e-5)
    assert report.epsilon <= mechanism.pure_epsilon() + 1e-12


def test_fedkd_cifar10_setting_is_vacuous():
    """FedKD's CIFAR-10 setting: 50 000 public examples, S = 200, γ = 1, C = 10."""
    mechanism = privfed.QuantizedLaplaceEnsemble(10, 1.0, 1.0, 50_000, quantization_scale=200)
    report = privfed.account(mechanism, delta=1e-5)
    assert mechanism.epsilon_per_query == pytest.approx(20.0)
    assert report.epsilon > 1e5 and report.epsilon <= mechanism.pure_epsilon()


def test_unsafe_data_dependent_clip_is_flagged():
    mechanism = privfed.QuantizedLaplaceEnsemble(10, 3.7, 1.0, 20, data_dependent_clip=True)
    report = privfed.account(mechanism, delta=1e-5)
    assert report.data_dependent and mechanism.dp_event() is None
    assert report.epsilon_data_independent == np.inf
    assert any("UNSAFE" in note for note in report.notes)
    safe = privfed.account(privfed.QuantizedLaplaceEnsemble(10, 3.7, 1.0, 20), delta=1e-5)
    assert not safe.notes and not safe.data_dependent


# --- bad input ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        ((10, 0.0, 1.0, 5), {}, ValueError, "clip must be finite and > 0"),
        ((10, 1.0, -1.0, 5), {}, ValueError, "gamma must be finite and > 0"),
        ((10, 1.0, 1.0, 0), {}, ValueError, "num_examples must be an integer >= 1"),
        ((1, 1.0, 1.0, 5), {}, ValueError, "num_classes must be an integer >= 2"),
        ((3, 1.0, 1.0, 5), {"weights": np.ones((2, 4))}, ValueError, r"weights must have shape \(parties, 3\)"),
        ((3, 1.0, 1.0, 5), {"weights": -np.ones((2, 3))}, ValueError, "weights must be finite and >= 0"),
        ((3, 1.0, 1.0, 5), {"weights": np.zeros((2, 3))}, ValueError, "weights must have at least one entry > 0"),
        ((3, 1.0, 1.0, 5), {"draws_per_example": 0}, ValueError, "draws_per_example"),
        ((3, 1.0, 1.0, 5), {"data_dependent_clip": "yes"}, TypeError, "data_dependent_clip"),
    ],
)
def test_bad_arguments_are_refused(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        privfed.QuantizedLaplaceEnsemble(*args, **kwargs)


def test_bad_quantizer_input_is_refused():
    with pytest.raises(ValueError, match="logits must be finite"):
        privfed.quantize_logits(np.array([np.nan]), clip=1.0)
    with pytest.raises(ValueError, match="quantization_scale"):
        privfed.quantize_logits(np.array([0.5]), clip=1.0, quantization_scale=0)
    with pytest.raises(ValueError, match="class_counts"):
        privfed.class_count_weights(np.array([[1, -2]]))
