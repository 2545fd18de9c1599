"""The Rényi privacy filter a silo's budget enforces: valid when every release is chosen after seeing the last.

A silo joins studies one after another, and which study it joins next, with which noise and how many
rounds, may depend on everything released before. Summing fixed-parameter guarantees assumes the
parameters were fixed in advance; a **privacy filter** is a stopping rule that stays valid when they
are not (Rogers, Roth, Ullman, Vadhan 2016). privfed implements one rule, over a finite set of Rényi
orders α₁ < … < α_K fixed when the budget is created (:data:`FILTER_ORDERS` by default):

**Theorem (Rényi filter at fixed orders, union over the orders, with basic composition).** Let M₁, M₂, …
run one after another, each Mₜ chosen (and with it its RDP curve ρₜ and its pure εₜ, ∞ when it has none) as
a function of the outputs of M₁ … Mₜ₋₁ only, with Mₜ (αₖ, ρₜ(αₖ))-RDP for every k and εₜ-DP given that
past. Run Mₜ only while

    min( Σ_{s ≤ t} ε_s ,  min_k  Σ_{s ≤ t} ρ_s(αₖ) + ln(K/δ)/(αₖ − 1) )  ≤  ε ,                  (F)

and refuse it otherwise (a refused release is never run; later, smaller ones may still fit). Then the
whole interaction, for as long as it runs, is (ε, δ)-DP.

*Proof.* Fix neighbouring data sets D, D′ and let Lₜ be the privacy loss of the outputs of the first
t releases that ran (the log-likelihood ratio under D against D′, the outputs drawn under D). For
each k, Zₜ = exp((αₖ − 1)(Lₜ − Σ_{s ≤ t} ρ_s(αₖ))) is a non-negative supermartingale with Z₀ = 1:
given the past, E[exp((αₖ − 1)ℓₜ)] = exp((αₖ − 1)·D_{αₖ}(Mₜ(D) ‖ Mₜ(D′))) ≤ exp((αₖ − 1)ρₜ(αₖ)).
This is the supermartingale behind Feldman & Zrnic 2021's Rényi filter ("Individual privacy
accounting via a Rényi filter", NeurIPS), and the argument is the one of Whitehouse, Ramdas, Rogers & Wu 2023
("Fully-adaptive composition in differential privacy", ICML): by Ville's inequality
P(∃t: Zₜ ≥ K/δ) ≤ δ/K, so with probability ≥ 1 − δ, for every t and every k at once,
Lₜ ≤ Σ_{s ≤ t} ρ_s(αₖ) + ln(K/δ)/(αₖ − 1); and Lₜ ≤ Σ_{s ≤ t} ε_s always (each loss ℓₜ ≤ εₜ, the
basic-composition filter of Rogers et al. 2016). Rule (F) keeps one of these right-hand sides at most ε
at every step that ran, so P(L ≥ ε at any time) ≤ δ, which gives (ε, δ)-DP. ∎

Two things this rule is *not*: it does not choose the best order after the fact for the privacy loss
(the union bound over the K fixed orders, δ/K each, is what pays for the choice), and it does not use
the improved RDP → (ε, δ) conversion of Balle et al. 2020 that privfed's accountant applies to a fixed
composition (that conversion is not a tail bound on the loss, which Ville's
inequality needs). What the adaptivity costs is therefore ln(K)/(α − 1) at the deciding order plus
the gap between the conversions: :func:`non_adaptive_epsilon` is the fixed-parameter total
privfed's accountant reports, and ``bench/silo_budget.py`` tabulates both on documented examples
(``docs/budget.md``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ._checks import check_delta, check_orders, check_positive_finite
from .conversion import tight_epsilon
from .mechanism import Mechanism
from .orders import TIGHT_ORDERS

__all__ = ["FILTER_ORDERS", "RenyiFilter", "non_adaptive_epsilon"]

#: The default orders of a silo's filter: 16 orders from 1.5 to 128, so that the union bound costs ln 16 ≈ 2.8
#: nats on top of ln(1/δ), divided by (α − 1) at the deciding order. Fixed before any release, as (F) requires.
FILTER_ORDERS: tuple[float, ...] = (1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0, 32.0, 64.0,
                                    128.0)


@dataclass(frozen=True)
class RenyiFilter:
    """Rule (F) of this module's theorem for an (ε, δ) policy over fixed ``orders``.

    Curves (``spent``, ``cost``) hold K + 1 values: the RDP at each of the K orders, then the pure ε
    (``inf`` for a release that has none).

    Parameters
    ----------
    epsilon, delta:
        The policy: the whole adaptive sequence of releases is (ε, δ)-DP.
    orders:
        The Rényi orders α₁ < … < α_K, fixed before the first release; each finite and > 1.

    Examples
    --------
    >>> rule = RenyiFilter(epsilon=1.0, delta=1e-5, orders=(2.0, 8.0))
    >>> rule.admits(np.zeros(3), np.array([0.01, 0.04, np.inf]))
    True
    """

    epsilon: float
    delta: float
    orders: tuple[float, ...] = FILTER_ORDERS

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_positive_finite("epsilon", self.epsilon))
        object.__setattr__(self, "delta", check_delta(self.delta))
        orders = check_orders(self.orders)
        if orders.size == 0 or np.any(np.diff(orders) <= 0):
            raise ValueError(f"orders must be a non-empty, strictly increasing sequence of numbers > 1, got "
                             f"{tuple(self.orders)!r}")
        object.__setattr__(self, "orders", tuple(float(a) for a in orders))

    @property
    def slack(self) -> np.ndarray:
        """ln(K/δ)/(αₖ − 1) at each order, then 0 for the pure ε: what (F) adds to a curve before comparing with ε."""
        orders = np.asarray(self.orders)
        return np.append((math.log(len(orders)) - math.log(self.delta)) / (orders - 1.0), 0.0)

    def epsilon_of(self, spent: np.ndarray) -> float:
        """The left-hand side of (F): the ε the rule certifies for ``spent`` (∞ when every entry is ∞)."""
        spent = self._curve(spent, "spent")
        return float(np.min(spent + self.slack))

    def admits(self, spent: np.ndarray, cost: np.ndarray) -> bool:
        """Whether a release of RDP ``cost`` may run after releases totalling ``spent`` (both at :attr:`orders`)."""
        return self.epsilon_of(self._curve(spent, "spent") + self._curve(cost, "cost")) <= self.epsilon

    def _curve(self, values: np.ndarray | Sequence[float], name: str) -> np.ndarray:
        curve = np.asarray(values, dtype=float)
        if curve.shape != (len(self.orders) + 1,):
            raise ValueError(f"{name} must hold one RDP value per filter order and the pure ε "
                             f"({len(self.orders) + 1} values), got shape {curve.shape}")
        if np.isnan(curve).any() or (curve < 0).any():
            raise ValueError(f"{name} must hold non-negative numbers or inf, got {curve.tolist()}")
        return curve


def non_adaptive_epsilon(mechanisms: Sequence[Mechanism], delta: float) -> float:
    """ε of the same releases composed with parameters fixed in advance: the comparison point of the theorem.

    The smaller of privfed's tight RDP bound (the releases' data-independent curves summed on
    :data:`~accounting.orders.TIGHT_ORDERS`, converted by Balle et al. 2020's improved conversion) and basic
    composition of their pure ε: the fixed-parameter version of the two bounds (F) uses. (A privacy loss
    distribution can be tighter still; it is not an RDP quantity and no filter here uses it.)
    """
    delta = check_delta(delta)
    curves = [np.asarray(m.rdp_data_independent(TIGHT_ORDERS, analysis="tight"), dtype=float) for m in mechanisms]
    epsilon, _ = tight_epsilon(TIGHT_ORDERS, np.sum(curves, axis=0), delta)
    pures = [m.pure_epsilon() for m in mechanisms]
    basic = sum(p for p in pures if p is not None) if None not in pures else math.inf
    return min(epsilon, float(basic))
