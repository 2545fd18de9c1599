"""The exact privacy profile of the Gaussian mechanism: ε at δ and δ at ε as certified upper bounds.

The Gaussian mechanism of ℓ2 sensitivity Δ and noise N(0, σ²) is μ-GDP with μ = Δ/σ, and for every ε ≥ 0 it is
(ε, δ(ε))-DP with, exactly,

    δ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2)

(Balle & Wang, "Improving the Gaussian mechanism for differential privacy", ICML 2018, Thm 8; Dong, Roth, Su,
"Gaussian differential privacy", JRSS-B 2022, Cor. 2.13), under either neighbouring relation whose sensitivity is
Δ. No smaller δ holds at that ε, so this is the tightest (ε, δ) statement of the mechanism. μ-GDP mechanisms
compose into one √(Σ μᵢ²)-GDP mechanism with no loss (ibid., Cor. 3.3), so the same formula gives the exact
profile of any composition of Gaussian mechanisms.

δ(ε) is evaluated in logarithms (``scipy.special.log_ndtr`` for both terms, their difference by ``expm1``), and
then *rounded up*: each logarithm is taken :data:`_LOG_ULPS` units in the last place of its magnitude towards a
larger δ (the first term up, the second down) before the difference, so the value returned bounds the exact δ(ε)
as long as ``log_ndtr`` is accurate to that many ulps. :func:`gaussian_epsilon` returns the upper end of a
bracket of the root of that rounded-up δ(ε) = δ, checked to satisfy it, so it is never below the exact ε.
"""

from __future__ import annotations

import math
from numbers import Real

import numpy as np
from scipy import optimize, special

__all__ = ["gaussian_delta", "gaussian_epsilon"]

#: How many units in the last place of each term's logarithm its value is moved towards a larger δ.
_LOG_ULPS = 8.0
_UNIT_ROUNDOFF = 2.0 ** -53


def _real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)


def _checked_mu(mu: object) -> float:
    value = _real("mu", mu)
    if not value >= 0.0:
        raise ValueError(f"mu must be ≥ 0 (the Gaussian mechanism's sensitivity over its noise's standard "
                         f"deviation; ∞ without noise), got {mu!r}")
    return value


def _log_delta_upper(mu: float, epsilon: float) -> float:
    """log of an upper bound on δ(ε) for 0 < μ < ∞ and 0 ≤ ε < ∞ (see the module docstring)."""
    first = float(special.log_ndtr(-epsilon / mu + mu / 2.0))
    second = epsilon + float(special.log_ndtr(-epsilon / mu - mu / 2.0))
    first_up = first + _LOG_ULPS * _UNIT_ROUNDOFF * abs(first)
    second_down = second - _LOG_ULPS * _UNIT_ROUNDOFF * (abs(second) + 2.0 * epsilon)
    if second_down >= first_up:  # the difference is below the rounding: the first term alone bounds δ
        return min(first_up, 0.0)
    return min(first_up + math.log(-math.expm1(second_down - first_up)), 0.0)


def _delta_upper(mu: float, epsilon: float) -> float:
    """:func:`gaussian_delta` for 0 < μ < ∞ and 0 ≤ ε < ∞, the exponential rounded up by one ulp."""
    return min(float(np.nextafter(math.exp(_log_delta_upper(mu, epsilon)), math.inf)), 1.0)


def gaussian_delta(mu: float, epsilon: float) -> float:
    """δ at ``epsilon`` of a ``mu``-GDP mechanism (the Gaussian mechanism of sensitivity over noise μ), rounded up.

    Parameters
    ----------
    mu:
        μ ≥ 0: the ℓ2 sensitivity over the noise's standard deviation (√(Σ μᵢ²) for a composition); ∞ for a
        release without noise.
    epsilon:
        ε ≥ 0.

    Returns
    -------
    float
        An upper bound on Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2), above it by a few ulps of the logarithms only; 0 for
        μ = 0 (nothing released about the data), 1 for μ = ∞ (no noise) at finite ε.

    Examples
    --------
    >>> 0.1264 < gaussian_delta(1.0, 1.0) < 0.1265
    True
    """
    mu = _checked_mu(mu)
    epsilon = _real("epsilon", epsilon)
    if not epsilon >= 0.0:
        raise ValueError(f"epsilon must be ≥ 0, got {epsilon!r}")
    if mu == 0.0 or epsilon == math.inf:
        return 0.0
    if mu == math.inf:
        return 1.0
    return _delta_upper(mu, epsilon)


def gaussian_epsilon(mu: float, delta: float) -> float:
    """The smallest ε (to a relative 10⁻¹⁵ or so, always above) with δ(ε) ≤ ``delta`` for a ``mu``-GDP mechanism.

    The root of log δ(ε) = log δ, with δ(ε) rounded up as :func:`gaussian_delta` rounds it, is bracketed between
    0 and μ²/2 + μ·Φ⁻¹(1 − δ) (where the first term of δ(ε) alone is δ), located by Brent's method, and the
    returned ε is checked to satisfy :func:`gaussian_delta` of it ≤ δ, stepping up by relative 10⁻¹² until it does.
    It is therefore a valid ε for the mechanism, never below the exact one.

    Parameters
    ----------
    mu:
        μ ≥ 0 (see :func:`gaussian_delta`).
    delta:
        δ in (0, 1).

    Returns
    -------
    float
        ε ≥ 0; 0 where δ(0) ≤ δ already (μ = 0 among them), ∞ for μ = ∞ (no noise).

    Examples
    --------
    >>> 3.73 < gaussian_epsilon(1.0, 1e-5) < 3.74
    True
    """
    mu = _checked_mu(mu)
    delta = _real("delta", delta)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    if mu == 0.0:
        return 0.0
    if mu == math.inf:
        return math.inf
    target = math.log(delta)

    def excess(epsilon: float) -> float:
        return _log_delta_upper(mu, epsilon) - target

    if _delta_upper(mu, 0.0) <= delta:
        return 0.0
    high = mu * mu / 2.0 + mu * max(-float(special.ndtri(delta)), 0.0)
    step = max(high, 1e-300)
    while _delta_upper(mu, high) > delta:
        high, step = high + step, 2.0 * step
    epsilon = 0.0  # where the logarithms alone do not change sign (within an ulp of an end), stepped up below
    if excess(0.0) > 0.0 >= excess(high):
        epsilon = float(optimize.brentq(excess, 0.0, high, xtol=1e-300, rtol=4.0 * np.finfo(float).eps))
    step = 1e-12 * (epsilon if epsilon > 0.0 else high)
    while _delta_upper(mu, epsilon) > delta:  # the check gaussian_delta would make
        epsilon, step = min(epsilon + step, high), 2.0 * step
    return epsilon
