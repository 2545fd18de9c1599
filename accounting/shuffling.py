"""Privacy amplification by shuffling: n users' ε₀-LDP reports, shuffled, as a central (ε, δ) guarantee.

Source: Feldman, McMillan, Talwar, "Hiding among the clones: a simple and nearly
optimal analysis of privacy amplification by shuffling", FOCS 2021 ("FMT"),
Theorem 3.1 and its numerical bound (Sec. 5).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, ClassVar

import dp_accounting
import numpy as np
from dp_accounting.pld import pld_pmf, privacy_loss_distribution
from scipy import special, stats

from ._checks import (
    check_at_most,
    check_choice,
    check_delta,
    check_int_at_least,
    check_orders,
    check_positive_finite,
)
from ._dp_accounting import MAX_PLD_COMPOSITIONS, PldDpEvent, event_pld
from .mechanism import ALL_RELATIONS, ANALYSES, UNITS, Mechanism
from .registry import register

__all__ = ["ShuffledRandomizedResponse", "ShuffledRoundDpEvent", "shuffle_dominating_pair"]

#: Binomial tails beyond this mass are dropped from the support (and charged in full: see below).
_TAIL = 1e-16
_PLD_INTERVAL = 1e-4


@functools.lru_cache(maxsize=32)
def shuffle_dominating_pair(epsilon_local: float, num_users: int) -> tuple[np.ndarray, np.ndarray, float]:
    """FMT Theorem 3.1's dominating pair, as (ln P₀, ln P₁) over its support and the mass left out.

    With p = e^{ε₀}/(e^{ε₀} + 1), C ~ Bin(n − 1, e^{−ε₀}) (the other users whose
    report is a "clone" of the target's) and A ~ Bin(C, ½), the shuffled reports
    of two neighbouring data sets are a post-processing of

        P₀ = (A + 1, C − A) w.p. p,  (A, C − A + 1) w.p. 1 − p;
        P₁ = (A + 1, C − A) w.p. 1 − p,  (A, C − A + 1) w.p. p,

    whatever the ε₀-LDP randomiser. On the outcome (a, c + 1 − a),
    P₀ ∝ Pr[C = c]·Bin(c, ½)(a)·(p·a/(c + 1 − a) + 1 − p) up to the common factor,
    and symmetrically for P₁. The support is cut where the binomial tails fall
    below 10⁻¹⁶ per dimension; the mass cut (returned) is charged as privacy loss
    +∞ (PLD) or at the pure bound ε₀ (RDP), so every bound stays valid.
    """
    n_others = num_users - 1
    clone = math.exp(-epsilon_local)
    p = math.exp(epsilon_local) / (math.exp(epsilon_local) + 1.0)
    low_c = int(stats.binom.ppf(_TAIL, n_others, clone)) if n_others else 0
    high_c = int(stats.binom.isf(_TAIL, n_others, clone)) if n_others else 0
    cs = np.arange(low_c, high_c + 1)
    log_pc = stats.binom.logpmf(cs, n_others, clone)
    left_out = float(stats.binom.cdf(low_c - 1, n_others, clone) + stats.binom.sf(high_c, n_others, clone))
    # a = 0 … c + 1 per c; keep a within the Bin(c, ½) tail bounds (±1 for the shift).
    width = int(np.ceil(stats.norm.isf(_TAIL) * math.sqrt(max(high_c, 1)) / 2.0)) + 2
    offsets = np.arange(-width, width + 1)
    c_grid = cs[:, None]
    a_grid = np.floor(c_grid / 2.0).astype(int) + offsets[None, :]
    valid = (a_grid >= 0) & (a_grid <= c_grid + 1)
    a_grid = np.clip(a_grid, 0, c_grid + 1)
    log_binom_here = np.where(a_grid <= c_grid, stats.binom.logpmf(a_grid, c_grid, 0.5), -np.inf)  # A = a
    log_binom_shift = np.where(a_grid >= 1, stats.binom.logpmf(a_grid - 1, c_grid, 0.5), -np.inf)  # A = a − 1
    log_p, log_not = math.log(p), math.log1p(-p)
    log_p0 = log_pc[:, None] + np.logaddexp(log_p + log_binom_shift, log_not + log_binom_here)
    log_p1 = log_pc[:, None] + np.logaddexp(log_not + log_binom_shift, log_p + log_binom_here)
    log_p0, log_p1 = log_p0[valid], log_p1[valid]
    left_out += max(0.0, 1.0 - float(np.exp(special.logsumexp(log_p0))))
    return log_p0, log_p1, min(left_out, 1.0)


@dataclass(frozen=True)
class ShuffledRoundDpEvent(PldDpEvent):
    """One shuffled round of ``num_users`` ε₀-LDP reports, as a dp-accounting event for the PLD.

    Its PLD is that of FMT's dominating pair (:func:`shuffle_dominating_pair`):
    losses rounded up to the grid, the left-out mass at +∞ (pessimistic), so it
    composes with dp-accounting's own events inside one privacy loss distribution.
    """

    epsilon_local: float
    num_users: int

    def pld(self, *, value_discretization_interval: float) -> privacy_loss_distribution.PrivacyLossDistribution:
        log_p0, log_p1, left_out = shuffle_dominating_pair(self.epsilon_local, self.num_users)
        buckets = np.ceil((log_p0 - log_p1) / value_discretization_interval).astype(np.int64)
        keys, where = np.unique(buckets, return_inverse=True)
        masses = np.bincount(where, weights=np.exp(log_p0))
        pmf = pld_pmf.create_pmf(dict(zip(keys.tolist(), masses.tolist())), value_discretization_interval, left_out,
                                 True)
        return privacy_loss_distribution.PrivacyLossDistribution(pmf)


@register
@dataclass(frozen=True, eq=False)
class ShuffledRandomizedResponse(Mechanism):
    """ε₀-LDP reports of ``num_users`` users per round, shuffled by a trusted shuffler, for ``reports`` rounds.

    Each round, every user sends one report through an ε₀-LDP randomiser
    (``epsilon_local``; k-ary randomized response over ``num_classes`` classes,
    as PrivateKT's clients do) and a trusted shuffler releases the reports in a
    uniformly random order. **Unit: party** (a user; replace-one: one user's data
    replaced), the relation FMT's theorem is stated for.

    **One round** is bounded by FMT Theorem 3.1's dominating pair
    (:func:`shuffle_dominating_pair`), valid for every ε₀-LDP randomiser (the
    number of classes is recorded, not used: the bound is the generic one):

    * :meth:`central_epsilon`: the pair's privacy loss distribution (dp-accounting,
      pessimistic), self-composed over ``reports`` rounds: FMT's numerical bound;
    * :meth:`rdp`: the pair's exact Rényi divergence, × ``reports``;
    * :meth:`pure_epsilon`: ε₀ · ``reports`` (shuffling never hurts).

    :meth:`dp_event` is the round as a :class:`ShuffledRoundDpEvent`, self-composed
    over ``reports``: ``privfed.account`` and a ledger compose its PLD with the
    other releases' (dp-accounting) and report the smallest of the PLD, RDP and
    pure figures; alone, that is :meth:`central_epsilon`. Without a
    trusted shuffler none of this applies: the guarantee is
    :class:`RandomizedResponse`'s, ε₀ per report, composed over rounds.
    """

    epsilon_local: float
    _: KW_ONLY
    num_users: int
    num_classes: int
    reports: int = 1
    unit: str = "party"
    _cache: dict[Hashable, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    kind: ClassVar[str] = "shuffled_randomized_response"

    def __post_init__(self) -> None:
        epsilon = check_positive_finite("epsilon_local", self.epsilon_local)
        object.__setattr__(self, "epsilon_local", check_at_most(
            "epsilon_local", epsilon, 50.0, "beyond it no user is a clone of another: e^{−ε₀} underflows the analysis"))
        users = check_int_at_least("num_users", self.num_users, 1)
        object.__setattr__(self, "num_users", int(check_at_most(
            "num_users", users, 10**6, "the dominating pair's support grows with √n · n·e^{−ε₀}")))
        object.__setattr__(self, "num_classes", check_int_at_least("num_classes", self.num_classes, 2))
        object.__setattr__(self, "reports", int(check_at_most(
            "reports", check_int_at_least("reports", self.reports, 1), MAX_PLD_COMPOSITIONS,
            "the rounds' composition has no closed form: its PLD is self-composed once per round")))
        check_choice("unit", self.unit, UNITS)

    @property
    def relations(self) -> frozenset[str]:
        """Party level ``{"replace_one"}``: ε-LDP bounds a report's output for any two inputs of its
        sender, not a sender's reports appearing or vanishing. Example level both: the sender reports
        either way, and an example added, removed or replaced changes only its sender's input."""
        return ALL_RELATIONS if self.unit == "example" else frozenset({"replace_one"})

    @property
    def data_dependent(self) -> bool:
        return False

    @property
    def num_queries(self) -> int:
        """Shuffled rounds."""
        return self.reports

    def _pair(self) -> tuple[np.ndarray, np.ndarray, float]:
        return shuffle_dominating_pair(self.epsilon_local, self.num_users)

    def round_event(self) -> ShuffledRoundDpEvent:
        """One shuffled round as a dp-accounting event (PLD only)."""
        return ShuffledRoundDpEvent(self.epsilon_local, self.num_users)

    def dp_event(self) -> dp_accounting.DpEvent:
        """:meth:`round_event` self-composed ``reports`` times."""
        return dp_accounting.SelfComposedDpEvent(self.round_event(), self.reports)

    def round_pld(self) -> privacy_loss_distribution.PrivacyLossDistribution:
        """The privacy loss distribution of one round (losses rounded up; the left-out mass at +∞)."""
        return self.round_event().pld(value_discretization_interval=_PLD_INTERVAL)

    def central_epsilon(self, delta: float) -> float:
        """Central ε at ``delta`` over all rounds: the PLD of FMT's pair self-composed ``reports`` times."""
        delta = check_delta(delta)
        key = ("epsilon", delta)
        if key not in self._cache:
            pld = event_pld(self.dp_event(), value_discretization_interval=_PLD_INTERVAL)
            self._cache[key] = min(float(pld.get_epsilon_for_delta(delta)), self.pure_epsilon())
        return self._cache[key]

    def rdp(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        """Exact RDP of the pair at each order (left-out mass at ratio e^{ε₀}), × rounds; capped by the pure bound."""
        orders = check_orders(orders)
        check_choice("analysis", analysis, ANALYSES)
        log_p0, log_p1, left_out = self._pair()
        moments = orders - 1.0
        terms = special.logsumexp(orders[:, None] * log_p0[None, :] - moments[:, None] * log_p1[None, :], axis=1)
        if left_out > 0:
            terms = np.logaddexp(terms, math.log(left_out) + moments * self.epsilon_local)
        pure = np.minimum(0.5 * orders * self.epsilon_local**2, self.epsilon_local)
        return self.reports * np.minimum(np.maximum(terms, 0.0) / moments, pure)

    def rdp_data_independent(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        return self.rdp(orders, analysis=analysis)

    def pure_epsilon(self) -> float:
        """ε₀ per round, composed: ε₀ · reports."""
        return self.epsilon_local * self.reports

    def parameters(self) -> dict[str, Any]:
        return {"epsilon_local": self.epsilon_local, "num_users": self.num_users, "num_classes": self.num_classes,
                "reports": self.reports}
