"""The DP Selective-FD selector: one Gaussian mechanism of sensitivity 1, the rest post-processing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from privfed.accounting import account
from privfed.pipelines.selective_fd.dp_selector import (
    DPDensityRatioSelector,
    random_fourier_features,
    selector_mechanism,
    selector_noise_multiplier,
    weighted_quantile,
)
from sklearn.metrics import roc_auc_score
from threadpoolctl import threadpool_limits


@pytest.fixture(autouse=True, scope="module")
def one_blas_thread():
    with threadpool_limits(1):
        yield


def two_clusters(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A client's data around 0, and a proxy set half around 0 (in-distribution) and half around 4 (not)."""
    rng = np.random.default_rng(seed)
    client = rng.normal(0.0, 1.0, (400, 2))
    proxy = np.vstack([rng.normal(0.0, 1.0, (300, 2)), rng.normal(4.0, 1.0, (300, 2))])
    return client, proxy, np.repeat([True, False], 300)


@settings(max_examples=50, deadline=None)
@given(arrays(np.float64, (5, 3), elements=st.floats(-1e6, 1e6)), st.integers(0, 2**32 - 1))
def test_every_feature_vector_has_norm_one(X, seed) -> None:
    """‖φ(x)‖₂ = 1 for any x: one example moves the released sum by a unit vector (ℓ2 sensitivity 1)."""
    frequencies = np.random.default_rng(seed).normal(0.0, 3.0, (3, 17))
    np.testing.assert_allclose(np.linalg.norm(random_fourier_features(X, frequencies), axis=1), 1.0, rtol=1e-12)


def test_the_features_approximate_the_gaussian_kernel() -> None:
    rng = np.random.default_rng(0)
    width, x, y = 1.5, rng.normal(size=(1, 4)), rng.normal(size=(1, 4))
    frequencies = rng.normal(0.0, 1.0 / width, (4, 20000))
    estimate = float((random_fourier_features(x, frequencies) @ random_fourier_features(y, frequencies).T)[0, 0])
    assert estimate == pytest.approx(np.exp(-np.sum((x - y) ** 2) / (2 * width**2)), abs=0.02)


def test_the_data_enter_only_through_the_noisy_sum() -> None:
    """Same seed, one example removed: the releases differ by exactly that example's feature vector (the noise,
    frequencies and auxiliary samples depend on public values only), and everything else is derived from them."""
    client, proxy, _ = two_clusters()
    kwargs = dict(noise_multiplier=3.0, n_frequencies=32, n_auxiliary=200, random_state=7, noise_seed=11)
    full = DPDensityRatioSelector(**kwargs).fit(client, public=proxy)
    fewer = DPDensityRatioSelector(**kwargs).fit(client[1:], public=proxy)
    np.testing.assert_array_equal(full.frequencies_, fewer.frequencies_)
    np.testing.assert_array_equal(full.auxiliary_, fewer.auxiliary_)
    np.testing.assert_allclose(full.noisy_sum_ - fewer.noisy_sum_,
                               random_fourier_features(client[:1], full.frequencies_)[0], atol=1e-9)
    # Post-processing: θ, the threshold and every decision come back from the release and public values alone.
    arrays_ = full.fitted_arrays()
    assert set(arrays_) == {"noisy_sum", "frequencies", "auxiliary", "kernel_width"}
    private_rows = {row.tobytes() for row in client}
    assert not any(row.tobytes() in private_rows for array in arrays_.values() if array.ndim == 2 for row in array)
    restored = DPDensityRatioSelector(**kwargs).with_fitted_arrays(arrays_)
    np.testing.assert_array_equal(restored.theta_, full.theta_)
    assert restored.threshold_ == full.threshold_
    np.testing.assert_array_equal(restored.select(proxy), full.select(proxy))


def test_the_noise_is_secret_unless_seeded_and_random_state_keeps_the_public_draws() -> None:
    """The attack: replay the fit with everything but the data (the same random_state, one public example) and
    subtract its noise from the release. By default it leaves noise of the full scale behind (the noise is drawn
    from a secret source); only with the ``noise_seed`` opt-in does it recover the exact feature sum."""
    client, proxy, _ = two_clusters()
    kwargs = dict(noise_multiplier=3.0, n_frequencies=32, n_auxiliary=200, random_state=7)
    for noise_seed in (None, 11):
        party = DPDensityRatioSelector(**kwargs, noise_seed=noise_seed).fit(client, public=proxy)
        replay = DPDensityRatioSelector(**kwargs, noise_seed=noise_seed).fit(proxy[:1], public=proxy)
        np.testing.assert_array_equal(replay.frequencies_, party.frequencies_)  # public draws: random_state's
        np.testing.assert_array_equal(replay.auxiliary_, party.auxiliary_)
        noise = replay.noisy_sum_ - random_fourier_features(proxy[:1], replay.frequencies_).sum(axis=0)
        recovered = party.noisy_sum_ - noise
        error = np.abs(recovered - random_fourier_features(client, party.frequencies_).sum(axis=0))
        if noise_seed is None:
            assert error.max() > 1.0  # about 3·√2 per coordinate: the noise stays
        else:
            assert error.max() < 1e-9


def test_a_bad_noise_seed_is_refused_in_one_line() -> None:
    client, proxy, _ = two_clusters()
    with pytest.raises(ValueError, match="noise_seed must be None .* got -1"):
        DPDensityRatioSelector(noise_seed=-1).fit(client, public=proxy)


def test_the_noise_has_the_stated_scale() -> None:
    client, proxy, _ = two_clusters()
    noise = []
    for seed in range(200):
        selector = DPDensityRatioSelector(noise_multiplier=2.5, n_frequencies=8, n_auxiliary=50, random_state=seed)
        selector.fit(client, public=proxy)
        noise.append(selector.noisy_sum_ - random_fourier_features(client, selector.frequencies_).sum(axis=0))
    assert np.std(noise) == pytest.approx(2.5, rel=0.05) and abs(np.mean(noise)) < 0.1


def test_it_selects_the_clients_distribution() -> None:
    client, proxy, inside = two_clusters()
    selector = DPDensityRatioSelector(noise_multiplier=selector_noise_multiplier(epsilon=1.0, delta=1e-5),
                                      random_state=0).fit(client, public=proxy)
    scores = selector.score_samples(proxy)
    assert roc_auc_score(inside, scores) > 0.95
    shared = selector.select(proxy)
    assert shared[inside].mean() > 0.6 and shared[~inside].mean() < 0.1
    assert scores.mean() == pytest.approx(1.0)  # normalised: E_proxy[r̂] = 1 on the auxiliary samples


def test_weighted_quantile_against_brute_force() -> None:
    rng = np.random.default_rng(3)
    values, weights = rng.normal(size=40), rng.exponential(size=40)
    for quantile in (0.0, 0.1, 0.25, 0.5, 0.99):
        brute = min(v for v in values if weights[values <= v].sum() >= quantile * weights.sum())
        assert weighted_quantile(values, weights, quantile) == brute
    # equal weights: the ordinary lower quantile
    assert weighted_quantile(np.arange(10.0), np.ones(10), 0.25) == 2.0


def test_the_mechanism_is_the_gaussian_mechanism_and_calibrated() -> None:
    sigma = selector_noise_multiplier(epsilon=1.0, delta=1e-5)
    mechanism = selector_mechanism(sigma)
    orders = np.array([2.0, 8.0, 32.0])
    np.testing.assert_allclose(mechanism.rdp(orders), orders / (2 * sigma**2), rtol=1e-9)  # RDP of N(0, σ²), Δ = 1
    assert mechanism.unit == "example"
    # σ comes from dpsgd_noise_multiplier (q = 1, one step): never above the target; how close it gets is that
    # function's business (calibrated on RDP, reported by the tighter PLD).
    assert 0.8 < account(mechanism, delta=1e-5).epsilon <= 1.0


@pytest.mark.parametrize(("change", "message"), [
    (dict(noise_multiplier=0.0), "noise_multiplier"),
    (dict(n_frequencies=0), "n_frequencies"),
    (dict(quantile=1.0), "quantile"),
    (dict(regularization=-1.0), "regularization"),
    (dict(kernel_width="wide"), "kernel_width"),
])
def test_bad_settings_are_refused_in_one_line(change, message) -> None:
    client, proxy, _ = two_clusters()
    with pytest.raises((ValueError, TypeError), match=message) as error:
        DPDensityRatioSelector(**change).fit(client, public=proxy)
    assert "\n" not in str(error.value)


def test_mismatched_public_features_are_refused() -> None:
    client, proxy, _ = two_clusters()
    with pytest.raises(ValueError, match="X has 3 features per example and public 2"):
        DPDensityRatioSelector().fit(np.hstack([client, client[:, :1]]), public=proxy)
