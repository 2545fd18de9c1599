"""KuLSIF density-ratio estimation and the Selective-FD client-side selector."""

from __future__ import annotations

import numpy as np
import pytest
from privfed.pipelines.selective_fd.kulsif import DensityRatioSelector, KuLSIF, gaussian_kernel_sums, median_distance
from scipy import stats
from threadpoolctl import threadpool_limits


@pytest.fixture(autouse=True, scope="module")
def one_blas_thread():
    """Small matrices run fastest on one BLAS thread, and the machine's two cores are shared."""
    with threadpool_limits(1):
        yield


def gaussian_gram(A: np.ndarray, B: np.ndarray, width: float) -> np.ndarray:
    """The full kernel matrix, by broadcasting (the brute-force reference)."""
    return np.exp(-((A[:, None, :] - B[None, :, :]) ** 2).sum(axis=2) / (2 * width**2))


def brute_force_ratio(fitted: KuLSIF, X: np.ndarray) -> np.ndarray:
    """KuLSIF's closed form (Kanamori et al. 2009, §3.3) with an explicit inverse, on a tiny problem."""
    Q, P, width, lam = fitted.auxiliary_, fitted.known_, fitted.kernel_width_, fitted.regularization
    n, m = len(Q), len(P)
    inverse = np.linalg.inv(gaussian_gram(Q, Q, width) / n + lam * np.eye(n))
    alpha = -inverse @ gaussian_gram(Q, P, width) @ np.ones(m) / (n * m * lam)
    return gaussian_gram(X, Q, width) @ alpha + gaussian_gram(X, P, width).sum(axis=1) / (m * lam)


def test_closed_form_matches_a_brute_force_solve() -> None:
    rng = np.random.default_rng(0)
    known = rng.normal(size=(30, 3))
    fitted = KuLSIF(kernel_width=1.3, regularization=0.05, n_auxiliary=12, random_state=1).fit(known)
    X = rng.normal(size=(7, 3)) * 2
    np.testing.assert_allclose(fitted.score_samples(X), brute_force_ratio(fitted, X), rtol=1e-9, atol=1e-12)
    assert fitted.auxiliary_.shape == (12, 3)
    # The auxiliary samples are uniform on the known samples' bounding box.
    assert (fitted.auxiliary_ >= known.min(axis=0)).all() and (fitted.auxiliary_ <= known.max(axis=0)).all()


def test_the_authors_matrix_product_is_not_the_solution() -> None:
    """Multiplying by (K₁₁/n + λI) instead of its inverse (the public code) gives other coefficients."""
    rng = np.random.default_rng(1)
    fitted = KuLSIF(kernel_width=1.0, regularization=0.01, n_auxiliary=10, random_state=0).fit(rng.normal(size=(20, 2)))
    Q, P, lam = fitted.auxiliary_, fitted.known_, fitted.regularization
    matrix = gaussian_gram(Q, Q, 1.0) / len(Q) + lam * np.eye(len(Q))
    right_hand_side = -gaussian_gram(Q, P, 1.0) @ np.ones(len(P)) / (len(Q) * len(P) * lam)
    np.testing.assert_allclose(matrix @ fitted.alpha_, right_hand_side, rtol=1e-8)  # α solves the system
    assert not np.allclose(matrix @ right_hand_side, fitted.alpha_, rtol=0.1)


def test_ratio_follows_a_known_density() -> None:
    """Known samples from N(0, I₂), auxiliary uniform on [−4, 4]²: r̂ ranks points as the Gaussian density does.

    (Outside the auxiliary box q = 0 and the ratio means nothing; the probes stay inside.)
    """
    rng = np.random.default_rng(2)
    fitted = KuLSIF(n_auxiliary=300, bounds=(-4.0, 4.0), random_state=0).fit(rng.normal(size=(600, 2)))
    radii = np.array([0.0, 0.8, 1.6, 2.4, 3.2])
    along_axis = fitted.score_samples(np.column_stack([radii, np.zeros_like(radii)]))
    assert (np.diff(along_axis) < 0).all()
    probes = rng.uniform(-3, 3, size=(400, 2))
    ratio = stats.multivariate_normal(np.zeros(2), np.eye(2)).pdf(probes) * 64.0  # p / q, q = 1/64 on the box
    estimate = fitted.score_samples(probes)
    assert stats.pearsonr(estimate, ratio).statistic > 0.9
    assert np.abs(estimate - ratio).mean() < 0.75 * ratio.mean()  # the scale too, not only the ranking


def test_in_distribution_points_score_higher_than_far_points() -> None:
    rng = np.random.default_rng(3)
    cluster = rng.normal(loc=0.0, scale=0.3, size=(200, 5))
    fitted = KuLSIF(n_auxiliary=200, bounds=(-4.0, 4.0), random_state=0).fit(cluster)
    near = fitted.score_samples(rng.normal(loc=0.0, scale=0.3, size=(50, 5)))
    far = fitted.score_samples(rng.normal(loc=2.5, scale=0.3, size=(50, 5)))
    assert near.min() > far.max()
    assert (fitted.auxiliary_ >= -4).all() and (fitted.auxiliary_ <= 4).all() and fitted.auxiliary_.min() < -3


def test_blocked_kernel_sums_equal_one_block() -> None:
    rng = np.random.default_rng(4)
    X, centres, weights = rng.normal(size=(23, 4)), rng.normal(size=(9, 4)), rng.normal(size=9)
    expected = gaussian_gram(X, centres, 0.7) @ weights
    for block_cells in (1, 7, 9, 50, 10**6):
        np.testing.assert_allclose(gaussian_kernel_sums(X, centres, weights, width=0.7, block_cells=block_cells),
                                   expected, rtol=1e-12)


def test_known_points_are_subsampled_and_images_flattened() -> None:
    rng = np.random.default_rng(5)
    images = rng.random((50, 4, 4))
    fitted = KuLSIF(max_known=20, n_auxiliary=30, random_state=0).fit(images)
    assert fitted.known_.shape == (20, 16)
    flat = images.reshape(50, 16)
    assert all(any(np.array_equal(row, original) for original in flat) for row in fitted.known_)
    assert fitted.score_samples(images[:3]).shape == (3,)


def test_median_heuristic_is_the_median_pairwise_distance() -> None:
    X = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 4.0]])  # distances 3, 4, 5
    assert median_distance(X, np.random.default_rng(0)) == pytest.approx(4.0)
    assert KuLSIF(n_auxiliary=5, random_state=0).fit(X).kernel_width_ == pytest.approx(4.0)


def test_threshold_is_the_quantile_on_the_held_out_part() -> None:
    rng = np.random.default_rng(6)
    X = rng.normal(size=(100, 3))
    selector = DensityRatioSelector(quantile=0.3, validation_fraction=0.25, n_auxiliary=100, random_state=0).fit(X)
    known_rows = {row.tobytes() for row in selector.ratio_.known_}
    held_out = np.array([row for row in X if row.tobytes() not in known_rows])
    assert len(held_out) == 25
    scores = selector.ratio_.score_samples(held_out)
    assert selector.threshold_ == pytest.approx(np.quantile(scores, 0.3))
    np.testing.assert_array_equal(selector.select(held_out), scores > selector.threshold_)
    # Fresh in-distribution examples are shared at about the rate 1 − quantile.
    fresh = selector.select(rng.normal(size=(4000, 3))).mean()
    assert 0.55 < fresh < 0.85


def test_quantile_zero_shares_nearly_everything_in_distribution() -> None:
    rng = np.random.default_rng(7)
    X = rng.normal(size=(200, 2))
    loose = DensityRatioSelector(quantile=0.0, n_auxiliary=100, random_state=0).fit(X)
    strict = DensityRatioSelector(quantile=0.9, n_auxiliary=100, random_state=0).fit(X)
    probes = rng.normal(size=(1000, 2))
    assert loose.select(probes).mean() > 0.9
    assert strict.select(probes).mean() < 0.3


def test_feature_map_is_applied_before_the_ratio() -> None:
    rng = np.random.default_rng(8)
    X = np.column_stack([rng.normal(size=120), rng.normal(scale=100.0, size=120)])
    selector = DensityRatioSelector(feature_map=lambda A: A[:, :1], n_auxiliary=50, random_state=0).fit(X)
    assert selector.ratio_.n_features_in_ == 1
    # The second column is ignored: only the first decides.
    assert selector.select(np.array([[0.0, 1e6]]))[0] and not selector.select(np.array([[6.0, 0.0]]))[0]


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        ({"kernel_width": -1.0}, ValueError, "kernel_width"),
        ({"kernel_width": "mean"}, TypeError, "kernel_width"),
        ({"regularization": 0.0}, ValueError, "regularization"),
        ({"n_auxiliary": 0}, ValueError, "n_auxiliary"),
        ({"max_known": 0}, ValueError, "max_known"),
        ({"bounds": (0.0,)}, ValueError, "bounds"),
        ({"bounds": (1.0, 0.0)}, ValueError, "bounds"),
    ],
)
def test_bad_parameters_name_the_argument(settings, error, message) -> None:
    with pytest.raises(error, match=message):
        KuLSIF(**settings).fit(np.random.default_rng(0).normal(size=(10, 2)))


def test_bad_data_and_selector_settings_fail_clearly() -> None:
    with pytest.raises(ValueError, match="finite"):
        KuLSIF().fit(np.array([[0.0, np.nan], [1.0, 1.0]]))
    with pytest.raises(ValueError, match="distinct"):
        KuLSIF().fit(np.ones((5, 2)))
    fitted = KuLSIF(n_auxiliary=5, random_state=0).fit(np.random.default_rng(0).normal(size=(10, 2)))
    with pytest.raises(ValueError, match="features"):
        fitted.score_samples(np.zeros((1, 3)))
    with pytest.raises(ValueError, match="quantile"):
        DensityRatioSelector(quantile=1.0).fit(np.zeros((10, 2)))
    with pytest.raises(ValueError, match="at least 2 examples"):
        DensityRatioSelector().fit(np.zeros((1, 2)))
