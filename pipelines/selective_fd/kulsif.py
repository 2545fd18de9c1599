"""KuLSIF density-ratio estimation, and the Selective-FD client-side selector built on it.

KuLSIF (Kanamori, Suzuki, Sugiyama, "Efficient direct density ratio estimation for
non-stationarity adaptation and outlier detection", NeurIPS 2008; JMLR 10, 2009, §3.3
"kernel unconstrained least-squares importance fitting") estimates the ratio
r(x) = p(x)/q(x) of the density p of *known* samples x^p_1..x^p_m to the density q
of *auxiliary* samples x^q_1..x^q_n by regularised least squares in the Gaussian RKHS
of k(x, x') = exp(−‖x − x'‖² / (2σ²)). Its minimiser has the closed form

    r̂(x) = Σ_i α_i k(x, x^q_i) + (1/(mλ)) Σ_j k(x, x^p_j),
    α = −(K₁₁/n + λ I_n)⁻¹ K₁₂ 1_m / (n m λ),

with K₁₁ = [k(x^q_i, x^q_i')] (n × n) and K₁₂ = [k(x^q_i, x^p_j)] (n × m). Selective-FD
(Shao, Wu, Zhang, Nat. Commun. 2024) takes q uniform on the input box, so r̂ is a
density of the client's data up to a constant, and lets a client share its
prediction on a proxy example only where r̂ is high.

α is obtained by *solving* the n × n symmetric positive-definite system (Cholesky);
the inverse is never formed. (The authors' public code, ``KuLSIF.py`` in
shaojiawei07/Selective-FD, computes the inverse and then multiplies the right-hand
side by the matrix itself instead of by its inverse; privfed does not reproduce that.)

Kernel sums are computed in row blocks, so memory stays bounded by
``block_cells`` kernel values whatever the number of points scored, and at most
``max_known`` known samples are kept (a uniform subsample, as the paper does).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from scipy import linalg
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from ...accounting._checks import check_int_at_least, check_positive_finite, check_probability
from ..protocol.seeds import RandomState, as_generator

__all__ = ["DensityRatioSelector", "KuLSIF", "gaussian_kernel_sums", "median_distance"]

#: Kernel values held in memory at once when scoring (8 bytes each: 32 MiB).
_BLOCK_CELLS = 1 << 22
#: Pairs of known samples the median heuristic looks at.
_MEDIAN_SAMPLE = 1000


def _as_matrix(name: str, X: object) -> np.ndarray:
    """``X`` as a finite float64 matrix (n, d), examples of any shape flattened."""
    X = np.asarray(X)
    if X.ndim < 2 or len(X) == 0:
        raise ValueError(f"{name} must be a non-empty array of shape (n, features...), got shape {X.shape}")
    X = X.reshape(len(X), -1).astype(np.float64, copy=False)
    if not np.isfinite(X).all():
        raise ValueError(f"{name} must hold finite values only")
    return X


def _squared_distances(A: np.ndarray, B: np.ndarray, B_norms: np.ndarray) -> np.ndarray:
    """‖a − b‖² for all pairs (rows of A × rows of B), clipped at 0 against rounding."""
    distances = (A * A).sum(axis=1)[:, None] + B_norms[None, :] - 2.0 * (A @ B.T)
    return np.maximum(distances, 0.0, out=distances)


def gaussian_kernel_sums(
    X: np.ndarray, centres: np.ndarray, weights: np.ndarray, *, width: float, block_cells: int = _BLOCK_CELLS
) -> np.ndarray:
    """Σ_j weights_j · exp(−‖x − centres_j‖² / (2 width²)) for every row x of X, in row blocks.

    At most ``block_cells`` kernel values are held at once (at least one row of X).
    """
    rows = max(1, block_cells // max(1, len(centres)))
    centre_norms = (centres * centres).sum(axis=1)
    scale = -0.5 / (width * width)
    sums = np.empty(len(X))
    for start in range(0, len(X), rows):
        block = _squared_distances(X[start : start + rows], centres, centre_norms)
        np.multiply(block, scale, out=block)
        np.exp(block, out=block)
        sums[start : start + rows] = block @ weights
    return sums


def median_distance(X: np.ndarray, rng: np.random.Generator) -> float:
    """Median Euclidean distance between distinct pairs of (up to 1000 sampled) rows: the median heuristic."""
    sample = X[rng.choice(len(X), size=min(len(X), _MEDIAN_SAMPLE), replace=False)]
    distances = _squared_distances(sample, sample, (sample * sample).sum(axis=1))
    upper = distances[np.triu_indices(len(sample), k=1)]
    positive = upper[upper > 0]
    if len(positive) == 0:
        raise ValueError("the median heuristic needs at least two distinct known samples; give kernel_width a number")
    return float(np.sqrt(np.median(positive)))


def _check_kernel_width(kernel_width: object) -> None:
    if kernel_width == "median":
        return
    if isinstance(kernel_width, bool) or not isinstance(kernel_width, numbers.Real):
        raise TypeError(f"kernel_width must be 'median' or a positive number, got {kernel_width!r}")
    check_positive_finite("kernel_width", kernel_width)


class KuLSIF(BaseEstimator):
    """Kernel unconstrained least-squares importance fitting: r̂(x) = p_known(x) / q_auxiliary(x).

    ``fit(X)`` takes the known samples; the auxiliary samples are drawn uniformly
    on a box (by default the known samples' per-feature bounding box), so the
    ratio ranks points by how typical they are of the known samples.

    Parameters
    ----------
    kernel_width : float or "median", default="median"
        σ of the Gaussian kernel exp(−‖x − x'‖²/(2σ²)); ``"median"`` takes the median
        distance between known samples.
    regularization : float, default=1e-3
        λ > 0.
    n_auxiliary : int, default=1000
        n, the auxiliary samples (the linear system is n × n).
    max_known : int, default=1000
        m ≤ this many known samples are kept (a uniform subsample when there are more).
    bounds : (low, high) or None, default=None
        The auxiliary box: scalars or per-feature arrays; ``None`` uses the known
        samples' per-feature minimum and maximum.
    block_cells : int, default=4194304
        Kernel values held in memory at once while scoring or fitting.
    random_state : int, numpy Generator or None, default=None
        Seeds the subsample, the auxiliary samples and the median heuristic.

    Attributes
    ----------
    known_ : ndarray of shape (m, d)
        The known samples kept (flattened).
    auxiliary_ : ndarray of shape (n, d)
        The auxiliary samples.
    alpha_ : ndarray of shape (n,)
        The coefficients α of the auxiliary kernel terms.
    kernel_width_ : float
        σ used.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> ratio = KuLSIF(n_auxiliary=200, random_state=0).fit(rng.normal(size=(300, 2)))
    >>> near, far = ratio.score_samples(np.array([[0.0, 0.0], [2.5, 2.5]]))
    >>> bool(near > far)
    True
    """

    def __init__(
        self,
        *,
        kernel_width: float | str = "median",
        regularization: float = 1e-3,
        n_auxiliary: int = 1000,
        max_known: int = 1000,
        bounds: tuple[Any, Any] | None = None,
        block_cells: int = _BLOCK_CELLS,
        random_state: RandomState = None,
    ) -> None:
        self.kernel_width = kernel_width
        self.regularization = regularization
        self.n_auxiliary = n_auxiliary
        self.max_known = max_known
        self.bounds = bounds
        self.block_cells = block_cells
        self.random_state = random_state

    def _validate(self) -> None:
        _check_kernel_width(self.kernel_width)
        check_positive_finite("regularization", self.regularization)
        check_int_at_least("n_auxiliary", self.n_auxiliary, 1)
        check_int_at_least("max_known", self.max_known, 1)
        check_int_at_least("block_cells", self.block_cells, 1)
        if self.bounds is not None and (not isinstance(self.bounds, (tuple, list)) or len(self.bounds) != 2):
            raise ValueError(f"bounds must be None or a (low, high) pair, got {self.bounds!r}")

    def _box(self, known: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.bounds is None:
            return known.min(axis=0), known.max(axis=0)
        low = np.broadcast_to(np.asarray(self.bounds[0], dtype=float), known.shape[1:])
        high = np.broadcast_to(np.asarray(self.bounds[1], dtype=float), known.shape[1:])
        if not (np.isfinite(low).all() and np.isfinite(high).all() and (low <= high).all()):
            raise ValueError(f"bounds must be finite with low <= high in every feature, got {self.bounds!r}")
        return low, high

    def fit(self, X: np.ndarray, y: None = None) -> KuLSIF:
        """Fit on the known samples ``X`` (shape (n, features...); flattened)."""
        self._validate()
        X = _as_matrix("X", X)
        rng = as_generator(self.random_state)
        if len(X) > self.max_known:
            X = X[np.sort(rng.choice(len(X), size=self.max_known, replace=False))]
        low, high = self._box(X)
        width = median_distance(X, rng) if self.kernel_width == "median" else float(self.kernel_width)
        auxiliary = rng.uniform(low, high, size=(self.n_auxiliary, X.shape[1]))
        self.known_, self.auxiliary_, self.kernel_width_ = X, auxiliary, width
        self.alpha_ = self._solve_alpha()
        self.n_features_in_ = X.shape[1]
        return self

    def _solve_alpha(self) -> np.ndarray:
        """α = −(K₁₁/n + λI)⁻¹ K₁₂ 1_m / (n m λ), by a Cholesky solve (KuLSIF closed form)."""
        n, m, lam = len(self.auxiliary_), len(self.known_), float(self.regularization)
        aux_norms = (self.auxiliary_ * self.auxiliary_).sum(axis=1)
        gram = _squared_distances(self.auxiliary_, self.auxiliary_, aux_norms)
        gram *= -0.5 / (self.kernel_width_ * self.kernel_width_)
        np.exp(gram, out=gram)
        gram /= n
        gram[np.diag_indices(n)] += lam
        cross_sums = gaussian_kernel_sums(
            self.auxiliary_, self.known_, np.ones(m), width=self.kernel_width_, block_cells=self.block_cells
        )  # K₁₂ 1_m
        return -linalg.solve(gram, cross_sums, assume_a="pos") / (n * m * lam)

    def score_samples(self, X: np.ndarray) -> np.ndarray:
        """r̂(x) for every row of ``X`` (higher: more typical of the known samples)."""
        check_is_fitted(self, "alpha_")
        X = _as_matrix("X", X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features per example, KuLSIF was fitted on {self.n_features_in_}")
        m, lam = len(self.known_), float(self.regularization)
        auxiliary_term = gaussian_kernel_sums(
            X, self.auxiliary_, self.alpha_, width=self.kernel_width_, block_cells=self.block_cells
        )
        known_term = gaussian_kernel_sums(
            X, self.known_, np.full(m, 1.0 / (m * lam)), width=self.kernel_width_, block_cells=self.block_cells
        )
        return auxiliary_term + known_term


class DensityRatioSelector(BaseEstimator):
    """Selective-FD's client-side selector: share a prediction only where the KuLSIF ratio is high.

    ``fit(X)`` holds out a random ``validation_fraction`` of the client's examples,
    fits :class:`KuLSIF` on the rest, and sets the threshold to the ``quantile``
    (τ_client) of r̂ on the held-out part; :meth:`select` keeps the examples whose
    r̂ exceeds it. About a fraction 1 − τ_client of fresh in-distribution examples
    is therefore shared.

    Parameters
    ----------
    quantile : float, default=0.25
        τ_client in [0, 1).
    validation_fraction : float, default=0.2
        Share of the client's examples held out for the threshold (at least one
        example on each side).
    feature_map : callable or None, default=None
        ``feature_map(X) -> (n, d)`` array applied before KuLSIF (raw, flattened
        inputs when None); the paper uses pretrained features for CIFAR-10.
    kernel_width, regularization, n_auxiliary, max_known, bounds, block_cells
        As in :class:`KuLSIF`.
    random_state : int, numpy Generator or None, default=None

    Attributes
    ----------
    ratio_ : KuLSIF
        The fitted ratio estimator.
    threshold_ : float
        The τ_client quantile of r̂ on the held-out examples.
    """

    def __init__(
        self,
        *,
        quantile: float = 0.25,
        validation_fraction: float = 0.2,
        feature_map: Callable[[np.ndarray], np.ndarray] | None = None,
        kernel_width: float | str = "median",
        regularization: float = 1e-3,
        n_auxiliary: int = 1000,
        max_known: int = 1000,
        bounds: tuple[Any, Any] | None = None,
        block_cells: int = _BLOCK_CELLS,
        random_state: RandomState = None,
    ) -> None:
        self.quantile = quantile
        self.validation_fraction = validation_fraction
        self.feature_map = feature_map
        self.kernel_width = kernel_width
        self.regularization = regularization
        self.n_auxiliary = n_auxiliary
        self.max_known = max_known
        self.bounds = bounds
        self.block_cells = block_cells
        self.random_state = random_state

    def _features(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(X) if self.feature_map is None else np.asarray(self.feature_map(np.asarray(X)))

    def fit(self, X: np.ndarray, y: None = None) -> DensityRatioSelector:
        """Fit the ratio on part of the client's examples ``X`` and the threshold on the rest."""
        check_probability("quantile", self.quantile, open_low=False, open_high=True)
        check_probability("validation_fraction", self.validation_fraction)
        if self.feature_map is not None and not callable(self.feature_map):
            raise TypeError(f"feature_map must be None or a callable X -> features, got {self.feature_map!r}")
        features = _as_matrix("X", self._features(X))
        if len(features) < 2:
            raise ValueError(f"X must hold at least 2 examples (known and held-out parts), got {len(features)}")
        rng = as_generator(self.random_state)
        n_held_out = min(len(features) - 1, max(1, round(self.validation_fraction * len(features))))
        order = rng.permutation(len(features))
        held_out, known = features[order[:n_held_out]], features[order[n_held_out:]]
        self.ratio_ = KuLSIF(
            kernel_width=self.kernel_width, regularization=self.regularization, n_auxiliary=self.n_auxiliary,
            max_known=self.max_known, bounds=self.bounds, block_cells=self.block_cells, random_state=rng,
        ).fit(known)
        self.threshold_ = float(np.quantile(self.ratio_.score_samples(held_out), self.quantile))
        return self

    def score_samples(self, X: np.ndarray) -> np.ndarray:
        """r̂ of every example (after the feature map)."""
        check_is_fitted(self, "ratio_")
        return self.ratio_.score_samples(self._features(X))

    def select(self, X: np.ndarray) -> np.ndarray:
        """Boolean mask: r̂(x) > threshold_ (the examples the client shares)."""
        return self.score_samples(X) > self.threshold_

    def fitted_arrays(self) -> dict[str, np.ndarray]:
        """The fitted state as named arrays (no pickle): KuLSIF's known and auxiliary samples, α, σ, the threshold.

        :meth:`with_fitted_arrays` on an unfitted selector with the same parameters restores it exactly
        (a federated client that keeps no object between rounds stores these).
        """
        check_is_fitted(self, "ratio_")
        ratio = self.ratio_
        return {"known": ratio.known_, "auxiliary": ratio.auxiliary_, "alpha": ratio.alpha_,
                "kernel_width": np.asarray(ratio.kernel_width_, dtype=float),
                "threshold": np.asarray(self.threshold_, dtype=float)}

    def with_fitted_arrays(self, arrays: Mapping[str, np.ndarray]) -> DensityRatioSelector:
        """Set the fitted state from :meth:`fitted_arrays` (this selector's parameters are kept); returns self."""
        ratio = KuLSIF(kernel_width=self.kernel_width, regularization=self.regularization, n_auxiliary=self.n_auxiliary,
                       max_known=self.max_known, bounds=self.bounds, block_cells=self.block_cells)
        ratio.known_, ratio.auxiliary_ = np.asarray(arrays["known"]), np.asarray(arrays["auxiliary"])
        ratio.alpha_, ratio.kernel_width_ = np.asarray(arrays["alpha"]), float(arrays["kernel_width"])
        ratio.n_features_in_ = ratio.known_.shape[1]
        self.ratio_, self.threshold_ = ratio, float(arrays["threshold"])
        return self
