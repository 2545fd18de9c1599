"""One-run auditing of Gaussian differential privacy: the f-DP bound of Mahloujifar, Melis and Chaudhuri.

Mahloujifar, Melis, Chaudhuri, "Auditing f-Differential Privacy in One Run", ICML 2025 (arXiv:2410.22235),
their Algorithm 3 and the theorem behind it. The game is the one of :mod:`accounting.auditing` (Steinke, Nasr and
Jagielski): m canaries, each in or out by a sealed fair coin, one run of the mechanism, then k guesses made from
the output alone (the other m − k canaries abstained on), T of them right. Instead of an (ε, δ) claim, the null
hypothesis is a *trade-off function* f (Dong, Roth & Su 2022): the mechanism is f-DP with respect to each
canary's coin. Write f̄(x) = 1 − f(x) for the largest probability an event can have on one side of a coin when
it has probability x on the other ("blow-up"). If P[T ≥ c] ≥ τ, then the two sequences

    r_c = τ·c/m,   h_c = τ·(k − c)/m,
    h_i = max(h_{i+1}, f̄⁻¹(r_{i+1})),   r_i = r_{i+1} + i/(k − i) · (h_i − h_{i+1}),   i = c − 1, …, 0,

end with r_0 + h_0 ≤ k/m. (r_i and h_i are the per-canary masses of right and wrong guesses on the event
T ≥ i, at their smallest; the f-DP constraint ties each right mass to the wrong mass it needs, and at i = 0
the two add up to every guess, k/m.) So an observed c whose sequences overshoot k/m at τ = 1 − confidence refutes
f at that confidence, over the audit's coins only.

For μ-Gaussian DP, f = G_μ(α) = Φ(Φ⁻¹(1 − α) − μ) and f̄⁻¹(y) = Φ(Φ⁻¹(y) − μ). A μ'-GDP mechanism is μ-GDP for
every μ ≥ μ', so refuting μ refutes every smaller μ: :func:`gdp_mu_lower_bound` finds the largest μ refuted.
:func:`gdp_epsilon` converts a μ to the ε it gives at a δ (Dong, Roth & Su, Cor. 2.13). That ε is an empirical
ε *under the assumption that the mechanism's trade-off curve is Gaussian* (the Gaussian mechanism, DP-SGD's
composition in the limit): an (ε, δ)-DP mechanism of another shape is not refuted by it. Steinke et al.'s bound
(:func:`accounting.auditing.epsilon_lower_bound`) assumes nothing about the shape; when the shape is Gaussian,
this one is tighter because it uses the whole curve, not one (ε, δ) point of it.

numpy and scipy only; nothing here knows a pipeline.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

from scipy import optimize, special

from ._checks import check_guess_counts, check_probability
from .tradeoff import gaussian_delta

__all__ = ["GaussianDPLowerBound", "gdp_epsilon", "gdp_lower_bound", "gdp_mu_lower_bound", "gdp_tail_bound"]

#: Above this μ the Gaussian trade-off curve is numerically no privacy at all: the search stops there (∞).
_MU_CAP = 1e3
#: Relative precision of the μ and τ searches.
_SEARCH_TOLERANCE = 1e-9


class GaussianDPLowerBound(NamedTuple):
    """The largest μ-Gaussian-DP claim an audit refutes, and the ε at ``delta`` a μ-GDP mechanism has."""

    mu: float
    epsilon: float
    delta: float


def _check_mu(mu: object) -> float:
    if not isinstance(mu, numbers.Real) or isinstance(mu, bool) or math.isnan(mu) or mu < 0.0:
        raise ValueError(f"mu must be a number >= 0 (math.inf: no privacy), got {mu!r}")
    return float(mu)


def _refutes(correct: int, guesses: int, canaries: int, mu: float, significance: float) -> bool:
    """Whether c = ``correct`` of k = ``guesses`` right refutes μ-GDP at level ``significance`` (τ): r_0 + h_0 > k/m."""
    every_guess = guesses / canaries
    right = significance * correct / canaries
    wrong = significance * (guesses - correct) / canaries
    for level in range(correct - 1, -1, -1):
        needed_wrong = float(special.ndtr(special.ndtri(right) - mu))  # f̄⁻¹(r) for G_μ
        if needed_wrong <= wrong:
            return False  # a fixed point: neither mass grows again, and r + h ≤ k/m so far
        right += level / (guesses - level) * (needed_wrong - wrong)
        wrong = needed_wrong
        if right + wrong > every_guess:
            return True  # both only grow from here
    return right + wrong > every_guess


def gdp_tail_bound(num_correct: int, num_guesses: int, num_canaries: int, *, mu: float) -> float:
    """Upper bound on P[T ≥ c] for a μ-GDP mechanism (Mahloujifar et al., Algorithm 3): the smallest τ it refutes.

    Parameters
    ----------
    num_correct, num_guesses, num_canaries : int
        c right guesses out of k, among m canaries (0 ≤ c ≤ k ≤ m, k ≥ 1).
    mu : float
        The null hypothesis: μ-Gaussian DP with respect to each canary's coin, μ ≥ 0.

    Returns
    -------
    float
        τ* in (0, 1]: the sequences of the module docstring overshoot k/m at τ*, so P[T ≥ c] < τ* (bisection to
        10⁻⁹ relative; τ* is always a refuted τ, so the bound holds even where the refuted τ are not an interval).
        1 when τ = 1 is not refuted (c = 0, or μ = ∞).

    Examples
    --------
    >>> round(gdp_tail_bound(10, 10, 10, mu=0.0), 6)  # μ = 0 is perfect privacy: all 10 right with probability 2⁻¹⁰
    0.000977
    """
    c, k, m = check_guess_counts(num_correct, num_guesses, num_canaries)
    mu = _check_mu(mu)
    if math.isinf(mu) or not _refutes(c, k, m, mu, 1.0):
        return 1.0
    low, high = 0.0, 1.0  # refuted at high, not at low
    while high - low > _SEARCH_TOLERANCE * high:
        middle = 0.5 * (low + high)
        low, high = (low, middle) if _refutes(c, k, m, mu, middle) else (middle, high)
    return high


def gdp_mu_lower_bound(num_correct: int, num_guesses: int, num_canaries: int, *, confidence: float = 0.95) -> float:
    """The largest μ whose μ-Gaussian-DP claim c right guesses of k refute at ``confidence`` (f-DP one-run audit).

    Parameters
    ----------
    num_correct, num_guesses, num_canaries : int
        c right guesses out of k, among m canaries (0 ≤ c ≤ k ≤ m, k ≥ 1), k fixed before looking.
    confidence : float, default=0.95
        In (0, 1).

    Returns
    -------
    float
        μ* ≥ 0 (bisection to 10⁻⁹ relative, rounded down): μ*-GDP is refuted at level 1 − confidence, and with it
        every μ < μ* (μ-GDP implies μ*-GDP); 0 when even μ = 0 (the coins' own guessing odds) is not.

    Examples
    --------
    >>> round(gdp_mu_lower_bound(100, 100, 1000), 3)  # every one of 100 guesses right, 1,000 canaries
    1.226
    """
    c, k, m = check_guess_counts(num_correct, num_guesses, num_canaries)
    significance = 1.0 - check_probability("confidence", confidence)
    if not _refutes(c, k, m, 0.0, significance):
        return 0.0
    low, high = 0.0, 1.0  # refuted at low, not at high
    while _refutes(c, k, m, high, significance):
        if high >= _MU_CAP:
            return math.inf
        low, high = high, 2.0 * high
    while high - low > _SEARCH_TOLERANCE * high:
        middle = 0.5 * (low + high)
        low, high = (middle, high) if _refutes(c, k, m, middle, significance) else (low, middle)
    return low


def gdp_epsilon(mu: float, *, delta: float) -> float:
    """The smallest ε with (ε, δ)-DP for a μ-GDP mechanism: δ_μ(ε) = δ (Dong, Roth & Su 2022, Cor. 2.13).

    Parameters
    ----------
    mu : float
        μ ≥ 0 (math.inf allowed: ε = ∞).
    delta : float
        In [0, 1); δ = 0 gives ∞ for every μ > 0 (a Gaussian curve is never pure DP).

    Examples
    --------
    >>> round(gdp_epsilon(1.0, delta=1e-5), 4)
    4.3772
    """
    mu, delta = _check_mu(mu), check_probability("delta", delta, open_low=False)
    if mu == 0.0:
        return 0.0
    if math.isinf(mu) or delta == 0.0:
        return math.inf

    def excess(epsilon: float) -> float:
        return float(gaussian_delta(mu, epsilon)) - delta

    if excess(0.0) <= 0.0:
        return 0.0
    high = 1.0
    while excess(high) > 0.0:
        high *= 2.0
    return float(optimize.brentq(excess, 0.0, high, xtol=1e-12, rtol=1e-12))


def gdp_lower_bound(num_correct: int, num_guesses: int, num_canaries: int, *, delta: float = 0.0,
                    confidence: float = 0.95) -> GaussianDPLowerBound:
    """:func:`gdp_mu_lower_bound` and the ε at ``delta`` it implies (:func:`gdp_epsilon`), under the Gaussian shape.

    The ε is a lower bound on the mechanism's ε at δ only if its trade-off curve is Gaussian (module docstring);
    :func:`accounting.auditing.epsilon_lower_bound` is the bound that assumes nothing.

    Examples
    --------
    >>> bound = gdp_lower_bound(100, 100, 1000, delta=1e-5)
    >>> round(bound.mu, 3), round(bound.epsilon, 3)
    (1.226, 5.549)
    """
    delta = check_probability("delta", delta, open_low=False)
    mu = gdp_mu_lower_bound(num_correct, num_guesses, num_canaries, confidence=confidence)
    return GaussianDPLowerBound(mu=mu, epsilon=gdp_epsilon(mu, delta=delta), delta=delta)
