"""A differentially private client-side selector for Selective-FD: random-feature uLSIF on a Gaussian-noised sum.

Selective-FD's selector (:class:`~privfed.pipelines.selective_fd.kulsif.DensityRatioSelector`) keeps the client's raw
examples inside its kernel expansion and sets its threshold on held-out raw examples, so the share mask it
produces every round is a function of the private data that no mechanism covers. This selector touches the
client's data once, through one Gaussian mechanism, and everything else is post-processing of that release and
of public data (the proxy set):

1. **Features of norm one.** Random Fourier features (Rahimi & Recht, "Random features for large-scale kernel
   machines", NeurIPS 2007) of the Gaussian kernel k(x, x') = exp(−‖x − x'‖²/(2σ_k²)) in the [cos, sin] form
   (Sutherland & Schneider, UAI 2015): with F frequencies ω_1..ω_F ~ N(0, σ_k⁻² I) drawn from the seed,
   φ(x) = F^{−1/2} [cos ω_iᵀx, sin ω_iᵀx]_{i=1..F}, so φ(x)ᵀφ(x') is an unbiased estimate of k(x, x') and
   **‖φ(x)‖₂ = 1 for every x** (cos² + sin² = 1). The frequencies and the kernel width depend on public values only
   (the seed, and the median distance between proxy examples for ``kernel_width="median"``).
2. **The one release (Gaussian mechanism).** S̃ = Σ_{x in the client's data} φ(x) + N(0, σ² I_{2F}). Adding or
   removing one example moves the sum by one φ(x), of ℓ2 norm exactly 1: the ℓ2 sensitivity is 1, so the release
   is the Gaussian mechanism with noise multiplier σ (Dwork & Roth 2014, §3.5.3; RDP α/(2σ²), Mironov 2017,
   Prop. 7) at example level, add/remove-one neighbouring. It is the same mechanism as one full-batch DP-SGD step
   (sample rate 1, per-example vectors of norm ≤ 1, noise σ), so privfed accounts it as
   ``DPSGD(σ, sample_rate=1, steps=1)`` (:func:`selector_mechanism`; the sampled Gaussian mechanism at q = 1 is
   the Gaussian mechanism, Mironov, Talwar & Zhang 2019). The clients' data are disjoint and each releases its
   own sum with the same σ, so over the federation it composes in parallel. This is sufficient-statistic
   perturbation (as in DP kernel mean embeddings: Balog, Tolstikhin & Schölkopf, "Differentially private database
   release via kernel mean embeddings", ICML 2018; Harder, Adamczewski & Park, "DP-MERF", AISTATS 2021): S̃/m is a
   noisy empirical kernel mean embedding of the client's data.
3. **uLSIF on those features (post-processing).** Unconstrained least-squares importance fitting (Kanamori, Hido &
   Sugiyama, "A least-squares approach to direct importance estimation", JMLR 10, 2009, §3.2 — KuLSIF's
   linear-in-parameter form) with basis φ estimates the ratio r(x) = p_client(x)/p_proxy(x) of the client's
   density to the *proxy set's* as r̂(x) = φ(x)ᵀθ, θ = (Ĥ + λI)⁻¹ ĥ, with Ĥ = (1/n) Σ_{proxy} φφᵀ (public) and
   ĥ = Σ_client φ / m = S̃/m up to the noise. The unknown m only scales r̂, so θ = (Ĥ + λI)⁻¹ S̃ normalised to
   mean 1 over the proxy samples (E_proxy[r] = 1).
4. **The threshold (post-processing).** The raw-data selector takes the τ_client quantile of r̂ over held-out
   client examples, i.e. of r̂(X) for X ~ p_client. Here p_client ≈ r̂₊ · p_proxy, so the same quantile is
   estimated by self-normalised importance weighting of the proxy samples with weights max(r̂, 0) (a weighted
   quantile); no client example is looked at again. (If no weight is positive, the noise left nothing to rank by,
   and the selector shares every example.)

The selector therefore releases nothing but functions of S̃, the seed and the proxy set: its share masks over all
rounds are post-processing of one Gaussian mechanism per client.

Randomness. The Gaussian noise of step 2 is the only draw the guarantee relies on: it comes from a
:class:`~privfed.accounting.NoiseSource` that the fitting party builds itself — secret (AES-CTR keyed from this
machine's OS entropy) unless ``noise_seed`` is given — never from ``random_state``. ``random_state`` seeds the
public draws (the auxiliary subsample, the median heuristic's sample, the frequencies): the sensitivity is 1 for
every choice of them, so the analysis does not rely on their secrecy. Against the raw-data selector the auxiliary
distribution is the proxy set instead of a uniform box (importance weights over uniform samples of a
high-dimensional box would be degenerate), which also needs no bounding box of the private data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from scipy import linalg
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from ...accounting import DPSGD, dpsgd_noise_multiplier
from ...accounting._checks import check_delta, check_int_at_least, check_positive_finite, check_probability
from ...accounting.noise_source import NoiseSource, check_noise_seed
from ..protocol.seeds import RandomState, as_generator
from .kulsif import _as_matrix, _check_kernel_width, median_distance

__all__ = [
    "DPDensityRatioSelector",
    "random_fourier_features",
    "selector_mechanism",
    "selector_noise_multiplier",
    "weighted_quantile",
]


def random_fourier_features(X: np.ndarray, frequencies: np.ndarray) -> np.ndarray:
    """φ(x) = F^{−1/2} [cos(Xω), sin(Xω)] for the F columns ω of ``frequencies`` (d, F): rows of ℓ2 norm 1."""
    projections = X @ frequencies
    return np.hstack([np.cos(projections), np.sin(projections)]) / np.sqrt(frequencies.shape[1])


def weighted_quantile(values: np.ndarray, weights: np.ndarray, quantile: float) -> float:
    """The smallest value v with (Σ of the weights of values ≤ v) ≥ ``quantile`` · Σ weights (weights ≥ 0, sum > 0)."""
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    position = int(np.searchsorted(cumulative, quantile * cumulative[-1], side="left"))
    return float(values[order][min(position, len(values) - 1)])


def selector_mechanism(noise_multiplier: float) -> DPSGD:
    """The selector's release: the Gaussian mechanism with ℓ2 sensitivity 1 and noise ``noise_multiplier``.

    Accounted as ``DPSGD(σ, sample_rate=1, steps=1)``, example level: one full-batch noisy sum of per-example
    vectors of norm at most 1, which is exactly the Gaussian mechanism (the sampled Gaussian mechanism at q = 1).
    """
    return DPSGD(float(noise_multiplier), 1.0, 1, unit="example")


def selector_noise_multiplier(*, epsilon: float, delta: float) -> float:
    """The smallest σ (to 0.1 %) whose selector release (:func:`selector_mechanism`) has ε ≤ ``epsilon`` at δ."""
    return dpsgd_noise_multiplier(target_epsilon=check_positive_finite("epsilon", epsilon),
                                  delta=check_delta(delta), sample_rate=1.0, steps=1)


class DPDensityRatioSelector(BaseEstimator):
    """Selective-FD's client-side selector with differential privacy (see the module docstring for the maths).

    ``fit(X, public=proxy)`` releases the Gaussian-noised sum of the client's random Fourier features (its only
    use of ``X``) and derives the ratio r̂ = p_client/p_proxy and the threshold from that sum and the public proxy
    set; :meth:`select` keeps the examples whose r̂ exceeds the threshold.

    Parameters
    ----------
    quantile : float, default=0.25
        τ_client in [0, 1): the threshold is the τ_client quantile of r̂ under the estimated client density.
    noise_multiplier : float, default=4.0
        σ > 0 of the Gaussian noise on each coordinate of the sum (ℓ2 sensitivity 1);
        :func:`selector_noise_multiplier` gives σ for a target ε.
    n_frequencies : int, default=128
        F, random frequencies (2F features).
    kernel_width : float or "median", default="median"
        σ_k of the Gaussian kernel; ``"median"``: the median distance between the auxiliary proxy samples (public).
    regularization : float, default=1e-2
        λ > 0 of uLSIF's ridge term.
    n_auxiliary : int, default=1000
        Proxy samples used as the auxiliary sample (a uniform subsample when there are more).
    feature_map : callable or None, default=None
        A fixed ``feature_map(X) -> (n, d)`` applied before the random features (to the client's and the proxy
        examples alike); the sensitivity does not depend on it.
    random_state : int, numpy Generator or None, default=None
        Seeds the public draws: the auxiliary subsample, the median heuristic and the frequencies.
    noise_seed : int or None, default=None
        The Gaussian noise's source: None draws it from a fresh secret source (:meth:`NoiseSource.secret`); an
        int makes it reproducible (:meth:`NoiseSource.seeded`; for tests and reproductions only: whoever holds the
        seed subtracts the noise, so the release has no guarantee against them).

    Attributes
    ----------
    noisy_sum_ : ndarray of shape (2F,)
        S̃, the released Gaussian-noised sum (the only array computed from the client's data).
    frequencies_ : ndarray of shape (d, F)
    auxiliary_ : ndarray of shape (n, d)
        The auxiliary proxy samples (public).
    kernel_width_ : float
    theta_ : ndarray of shape (2F,)
        uLSIF's coefficients, normalised so that r̂ has mean 1 over ``auxiliary_``.
    threshold_ : float

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> proxy = np.vstack([rng.normal(0, 1, (300, 2)), rng.normal(4, 1, (300, 2))])
    >>> selector = DPDensityRatioSelector(noise_multiplier=2.0, random_state=0)
    >>> selector = selector.fit(rng.normal(0, 1, (400, 2)), public=proxy)
    >>> selector.select(np.array([[0.0, 0.0], [4.0, 4.0]])).tolist()
    [True, False]
    """

    def __init__(
        self,
        *,
        quantile: float = 0.25,
        noise_multiplier: float = 4.0,
        n_frequencies: int = 128,
        kernel_width: float | str = "median",
        regularization: float = 1e-2,
        n_auxiliary: int = 1000,
        feature_map: Callable[[np.ndarray], np.ndarray] | None = None,
        random_state: RandomState = None,
        noise_seed: int | None = None,
    ) -> None:
        self.quantile = quantile
        self.noise_multiplier = noise_multiplier
        self.n_frequencies = n_frequencies
        self.kernel_width = kernel_width
        self.regularization = regularization
        self.n_auxiliary = n_auxiliary
        self.feature_map = feature_map
        self.random_state = random_state
        self.noise_seed = noise_seed

    def validate(self) -> None:
        """Check the hyper-parameters (one ``ValueError``/``TypeError`` naming the first bad one)."""
        check_probability("quantile", self.quantile, open_low=False, open_high=True)
        check_positive_finite("noise_multiplier", self.noise_multiplier)
        check_int_at_least("n_frequencies", self.n_frequencies, 1)
        _check_kernel_width(self.kernel_width)
        check_positive_finite("regularization", self.regularization)
        check_int_at_least("n_auxiliary", self.n_auxiliary, 1)
        if self.feature_map is not None and not callable(self.feature_map):
            raise TypeError(f"feature_map must be None or a callable X -> features, got {self.feature_map!r}")
        check_noise_seed(self.noise_seed)

    def _features(self, name: str, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X)
        return _as_matrix(name, X if self.feature_map is None else np.asarray(self.feature_map(X)))

    def fit(self, X: np.ndarray, y: None = None, *, public: np.ndarray) -> DPDensityRatioSelector:
        """Release the noisy feature sum of the client's examples ``X`` and derive r̂ and the threshold from it
        and the public proxy set ``public``."""
        self.validate()
        auxiliary = self._features("public", public)
        features = self._features("X", X)
        if features.shape[1] != auxiliary.shape[1]:
            raise ValueError(f"X has {features.shape[1]} features per example and public {auxiliary.shape[1]}; "
                             "they must match")
        rng = as_generator(self.random_state)
        if len(auxiliary) > self.n_auxiliary:
            auxiliary = auxiliary[np.sort(rng.choice(len(auxiliary), size=self.n_auxiliary, replace=False))]
        width = median_distance(auxiliary, rng) if self.kernel_width == "median" else float(self.kernel_width)
        frequencies = rng.normal(0.0, 1.0 / width, size=(auxiliary.shape[1], self.n_frequencies))
        # The one use of the private data: the Gaussian mechanism on a sum of unit vectors, its noise drawn here.
        noise = NoiseSource.for_task(self.noise_seed).generator
        noisy_sum = random_fourier_features(features, frequencies).sum(axis=0)
        noisy_sum += noise.normal(0.0, float(self.noise_multiplier), size=noisy_sum.shape)
        return self._derive(noisy_sum, frequencies, auxiliary, width)

    def _derive(self, noisy_sum: np.ndarray, frequencies: np.ndarray, auxiliary: np.ndarray, width: float
                ) -> DPDensityRatioSelector:
        """uLSIF's θ and the importance-weighted threshold from the release and public values only."""
        basis = random_fourier_features(auxiliary, frequencies)
        gram = basis.T @ basis / len(basis)
        gram[np.diag_indices_from(gram)] += float(self.regularization)
        theta = linalg.solve(gram, noisy_sum, assume_a="pos")
        scores = basis @ theta
        mean = float(scores.mean())
        if mean > 0:
            theta, scores = theta / mean, scores / mean
        weights = np.maximum(scores, 0.0)
        threshold = weighted_quantile(scores, weights, float(self.quantile)) if weights.sum() > 0 else -np.inf
        self.noisy_sum_, self.frequencies_, self.auxiliary_ = noisy_sum, frequencies, auxiliary
        self.kernel_width_, self.theta_, self.threshold_ = float(width), theta, float(threshold)
        self.n_features_in_ = auxiliary.shape[1]
        return self

    def score_samples(self, X: np.ndarray) -> np.ndarray:
        """r̂(x) = φ(x)ᵀθ for every example (after the feature map; higher: more typical of the client)."""
        check_is_fitted(self, "theta_")
        features = self._features("X", X)
        if features.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {features.shape[1]} features per example, the selector was fitted on "
                             f"{self.n_features_in_}")
        return random_fourier_features(features, self.frequencies_) @ self.theta_

    def select(self, X: np.ndarray) -> np.ndarray:
        """Boolean mask: r̂(x) > threshold_ (the examples the client shares)."""
        return self.score_samples(X) > self.threshold_

    def fitted_arrays(self) -> dict[str, np.ndarray]:
        """The fitted state as named arrays (no pickle): the release S̃ and the public values it is derived with."""
        check_is_fitted(self, "theta_")
        return {"noisy_sum": self.noisy_sum_, "frequencies": self.frequencies_, "auxiliary": self.auxiliary_,
                "kernel_width": np.asarray(self.kernel_width_, dtype=float)}

    def with_fitted_arrays(self, arrays: Mapping[str, np.ndarray]) -> DPDensityRatioSelector:
        """Set the fitted state from :meth:`fitted_arrays`: θ and the threshold are derived again; returns self."""
        noisy_sum, frequencies = np.asarray(arrays["noisy_sum"], dtype=float), np.asarray(arrays["frequencies"])
        auxiliary, width = np.asarray(arrays["auxiliary"], dtype=float), float(arrays["kernel_width"])
        if noisy_sum.shape != (2 * frequencies.shape[1],) or frequencies.shape[0] != auxiliary.shape[1]:
            raise ValueError(f"inconsistent selector arrays: noisy_sum {noisy_sum.shape}, frequencies "
                             f"{frequencies.shape}, auxiliary {auxiliary.shape}")
        if not (np.isfinite(width) and width > 0):
            raise ValueError(f"kernel_width must be positive, got {width!r}")
        return self._derive(noisy_sum, frequencies, auxiliary, width)
