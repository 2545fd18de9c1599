"""Hypothesis-testing views of a guarantee: the privacy profile δ(ε), the trade-off curve and Gaussian-DP μ.

An attacker who must tell whether one unit's data was in the input (the two hypotheses of
differential privacy) has, at each false-positive rate α, a largest achievable true-positive rate:
1 − f(α), where f is the *trade-off function* (the smallest type II error at type I error α; Dong,
Roth & Su, "Gaussian Differential Privacy", JRSS-B 2022, Def. 2.1). A mechanism that is
(ε, δ(ε))-DP for every ε ≥ 0 has (ibid., Prop. 2.12)

    f(α) ≥ sup_ε max(0, 1 − δ(ε) − e^ε α, e^(−ε) (1 − δ(ε) − α)),

so any valid privacy profile δ(ε) gives a valid trade-off curve, and the attack's true-positive
rate 1 − f(α) is an upper bound. The supremum is taken over a finite grid of ε: fewer constraints
give a smaller f, hence a larger true-positive rate — the grid can only make the curve more
conservative.

The profile comes from the privacy loss distribution (PLD) privfed already builds for the
mechanisms' dp-accounting events (:func:`~accounting._dp_accounting.event_pld`, pessimistic
discretization: its δ(ε) is an upper bound) where every mechanism has one — for Gaussians only, the
Gaussian's exact profile in closed form, rounded up (:mod:`~accounting.gaussian_profile`) — otherwise
from the RDP curve (dp-accounting's ``compute_delta``: valid, looser). :attr:`PrivacyProfile.basis` says which.

μ-Gaussian DP (ibid., Cor. 2.13) holds exactly when δ(ε) ≤ δ_μ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)
for every ε ≥ 0. :meth:`PrivacyProfile.gdp_mu` finds the smallest μ for which it holds between every two grid
points (δ decreases in ε, so δ(ε_i) ≤ δ_μ(ε_{i+1}) covers [ε_i, ε_{i+1}]) up to an additive
:data:`GDP_DELTA_SLACK`: the releases are (ε, δ_μ(ε) + 10⁻¹⁰)-DP for every ε. The slack absorbs the PLD's
pessimistic discretization in the far tail (δ below 10⁻¹⁰), which no attack at a meaningful false-positive rate
reaches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import dp_accounting
import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant
from scipy import special

from . import gaussian_profile
from ._dp_accounting import MAX_PLD_COMPOSITIONS, event_pld, gaussian_mu, pld_compositions, pld_interval

__all__ = [
    "GDP_DELTA_SLACK",
    "PROFILE_DELTA_RESOLUTION",
    "PROFILE_POINTS",
    "PrivacyProfile",
    "check_false_positive_rates",
    "gaussian_delta",
    "gaussian_true_positive_rate",
    "pld_profile",
    "rdp_profile",
    "tradeoff_true_positive_rate",
]

#: Number of ε grid points a profile is evaluated on (uniform from 0 to where δ(ε) reaches the resolution).
PROFILE_POINTS = 1001
#: The smallest δ a profile resolves: the grid ends where δ(ε) falls to it.
PROFILE_DELTA_RESOLUTION = 1e-15
#: The additive δ a μ-GDP claim allows at every ε (see the module docstring).
GDP_DELTA_SLACK = 1e-10
#: The largest μ searched: beyond it the trade-off curve is indistinguishable from no privacy.
_MU_MAX = 64.0


def check_false_positive_rates(false_positive_rates: object) -> np.ndarray:
    """``false_positive_rates`` as a float array of values in [0, 1], or a one-line ValueError."""
    try:
        rates = np.asarray(false_positive_rates, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"false_positive_rates must be numbers in [0, 1], got {false_positive_rates!r:.80}") from None
    if rates.ndim > 1 or not np.all((rates >= 0.0) & (rates <= 1.0)):
        raise ValueError(f"false_positive_rates must be a number or a 1-D sequence of numbers in [0, 1], got "
                         f"{false_positive_rates!r:.80}")
    return rates


def tradeoff_true_positive_rate(epsilons: np.ndarray, deltas: np.ndarray, false_positive_rates: object) -> np.ndarray:
    """The best attack's true-positive rate 1 − f(α) at each α, from the (ε_i, δ_i)-DP constraints (Prop. 2.12)."""
    alpha = check_false_positive_rates(false_positive_rates)
    flat = np.atleast_1d(alpha)[None, :]
    eps = np.asarray(epsilons, dtype=float)[:, None]
    slack = 1.0 - np.asarray(deltas, dtype=float)[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        first = slack - np.exp(eps) * flat
        second = np.exp(-eps) * (slack - flat)
    type_two = np.max(np.maximum(0.0, np.maximum(np.nan_to_num(first, nan=0.0, neginf=0.0), second)), axis=0)
    tpr = np.clip(1.0 - type_two, flat[0], 1.0)  # never below α: guessing at random achieves it
    return tpr.reshape(alpha.shape)


def gaussian_true_positive_rate(mu: float, false_positive_rates: object) -> np.ndarray:
    """1 − G_μ(α) = Φ(Φ⁻¹(α) + μ): the best attack on μ-Gaussian DP (Dong, Roth & Su, Eq. 2.5)."""
    alpha = check_false_positive_rates(false_positive_rates)
    return special.ndtr(special.ndtri(alpha) + mu)


def gaussian_delta(mu: float, epsilons: float | np.ndarray) -> np.ndarray:
    """δ_μ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2), computed in logs (ibid., Cor. 2.13)."""
    eps = np.asarray(epsilons, dtype=float)
    log_first = special.log_ndtr(-eps / mu + mu / 2.0)
    log_second = eps + special.log_ndtr(-eps / mu - mu / 2.0)
    with np.errstate(divide="ignore"):
        return np.exp(log_first) * -np.expm1(np.minimum(log_second - log_first, 0.0))


@dataclass(frozen=True)
class PrivacyProfile:
    """δ(ε) on a grid of ε ≥ 0, and which accountant gave it (``basis``: ``"pld"`` or ``"rdp"``)."""

    epsilons: np.ndarray
    deltas: np.ndarray
    basis: str

    def true_positive_rates(self, false_positive_rates: object) -> np.ndarray:
        """The best attack's true-positive rate at each false-positive rate (an upper bound)."""
        return tradeoff_true_positive_rate(self.epsilons, self.deltas, false_positive_rates)

    def gdp_mu(self) -> float | None:
        """The smallest μ (to 10⁻⁶ relative, rounded up) with δ(ε_i) ≤ δ_μ(ε_{i+1}) + :data:`GDP_DELTA_SLACK`;
        ``None`` for an RDP profile or where no μ ≤ 64 fits."""
        if self.basis != "pld":
            return None
        # Beyond the grid's end δ(ε) ≤ the resolution (where the grid stops), within the slack.

        def holds(mu: float) -> bool:
            return bool(np.all(self.deltas[:-1] <= gaussian_delta(mu, self.epsilons[1:]) + GDP_DELTA_SLACK))

        if not holds(_MU_MAX):
            return None
        low, high = 0.0, _MU_MAX
        while high - low > 1e-6 * high:
            middle = 0.5 * (low + high)
            low, high = (low, middle) if holds(middle) else (middle, high)
        return high


def _grid_end(delta_at: Callable[[float], float], start: float) -> float:
    """The first ε (doubling from ``start``) with δ(ε) ≤ :data:`PROFILE_DELTA_RESOLUTION`, or where δ stops falling
    (a PLD's mass at infinite loss is a floor δ never goes below)."""
    end = max(start, 1e-3)
    while delta_at(end) > PROFILE_DELTA_RESOLUTION and delta_at(2.0 * end) < delta_at(end) and end < 1e4:
        end *= 2.0
    return end


def pld_profile(event: dp_accounting.DpEvent, *, epsilon_hint: float | None = None) -> PrivacyProfile | None:
    """δ(ε) of ``event``'s pessimistic PLD, or ``None`` where privfed builds no PLD for it; for a plain Gaussian
    event (:func:`~accounting._dp_accounting.gaussian_mu`) its exact profile in closed form, rounded up
    (:func:`~accounting.gaussian_profile.gaussian_delta`), and no PLD.

    ``epsilon_hint`` (a valid upper bound on ε) sizes the PLD grid as :func:`~accounting._dp_accounting.pld_interval`
    does for the reports' ε.
    """
    mu = gaussian_mu(event)
    if mu is not None:
        end = _grid_end(lambda eps: gaussian_profile.gaussian_delta(mu, eps),
                        gaussian_profile.gaussian_epsilon(mu, 1e-6))
        epsilons = np.linspace(0.0, end, PROFILE_POINTS)
        return PrivacyProfile(epsilons, np.array([gaussian_profile.gaussian_delta(mu, eps) for eps in epsilons]),
                              "pld")
    if pld_compositions(event) > MAX_PLD_COMPOSITIONS:
        return None
    try:
        pld = event_pld(event, value_discretization_interval=pld_interval(event, epsilon_hint=epsilon_hint))
    except TypeError:
        return None
    end = _grid_end(lambda eps: float(pld.get_delta_for_epsilon(eps)), float(pld.get_epsilon_for_delta(1e-6)))
    epsilons = np.linspace(0.0, end, PROFILE_POINTS)
    return PrivacyProfile(epsilons, np.asarray(pld.get_delta_for_epsilon(epsilons), dtype=float), "pld")


def rdp_profile(orders: tuple[float, ...] | np.ndarray, rdp: tuple[float, ...] | np.ndarray) -> PrivacyProfile:
    """δ(ε) from an RDP curve by dp-accounting's conversion (``compute_delta``: valid, looser than a PLD)."""
    grid, curve = [float(a) for a in orders], [float(r) for r in rdp]

    def delta_at(eps: float) -> float:
        return float(rdp_privacy_accountant.compute_delta(grid, curve, eps)[0])

    end = _grid_end(delta_at, 1.0)
    epsilons = np.linspace(0.0, end, PROFILE_POINTS)
    return PrivacyProfile(epsilons, np.array([delta_at(eps) for eps in epsilons]), "rdp")
