"""The narrow bridge to dp-accounting: RDP curves and privacy loss distributions of its standard events.

privfed never re-derives a mechanism that dp-accounting already implements;
it asks an :class:`~dp_accounting.rdp.RdpAccountant` built on the caller's
orders and reads its curve, or builds the event's privacy loss distribution
(PLD) from dp-accounting's constructors. The one exception,
:mod:`~privfed.accounting.rdp_closed_forms` (the Laplace and randomized-response
RDP and the tight conversion), repeats dp-accounting's arithmetic bit for bit
so that curves needing no PLD do not import dp-accounting.

The PLD is built here rather than with :class:`~dp_accounting.pld.PLDAccountant`
because dp-accounting 0.6.0's accountant ignores ``count`` for
:class:`~dp_accounting.RandomizedResponseDpEvent`: composing randomized response
T times returns the single-use ε (``../shared/oracles/dp_accounting.json``,
``replace_one_pld_accountant_compose_count_eps``). :func:`event_pld`
self-composes every event explicitly, and builds each leaf under the neighbouring
relation its mechanism is stated for.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from collections.abc import Sequence

import dp_accounting
import numpy as np
from dp_accounting.pld import privacy_loss_distribution
from dp_accounting.rdp import rdp_privacy_accountant

from .gaussian_profile import gaussian_epsilon

__all__ = [
    "DEFAULT_PLD_INTERVAL",
    "MAX_PLD_COMPOSITIONS",
    "PldDpEvent",
    "event_pld",
    "event_pld_epsilon",
    "event_rdp",
    "gaussian_mu",
    "merged_gaussians",
    "pld_compositions",
    "pld_interval",
]

#: dp-accounting's default PLD value discretization interval.
DEFAULT_PLD_INTERVAL = 1e-4
#: The PLD grid is coarsened so that a composed PLD of total privacy loss ε spans
#: about this many grid points: the cost stays bounded for vacuous compositions.
_PLD_POINTS_PER_EPSILON = 50_000


#: Most uses of one event a PLD is self-composed over where the composition has no closed form (T Gaussians have
#: one). dp-accounting's self-composition costs time that grows with the count (10⁸ uses of randomized response take
#: about 35 s, 10⁹ do not finish); beyond this cap the PLD is not built, and the RDP and pure bounds, whose
#: composition is a product by the count, stand alone.
MAX_PLD_COMPOSITIONS = 10**6


def pld_compositions(event: dp_accounting.DpEvent) -> int:
    """The largest number of uses :func:`event_pld` self-composes one leaf over (1 for closed-form compositions)."""
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        if isinstance(event.event, dp_accounting.GaussianDpEvent):
            return 1
        return int(event.count) * pld_compositions(event.event)
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return max((pld_compositions(member) for member in event.events), default=1)
    return 1


class PldDpEvent(dp_accounting.DpEvent):
    """A leaf event whose privacy loss distribution privfed builds itself (dp-accounting has no constructor).

    Subclasses are frozen dataclasses and implement :meth:`pld`; :func:`event_pld`
    composes them with dp-accounting's own events. dp-accounting's RDP accountant
    does not know them: they are for the PLD only.
    """

    def pld(self, *, value_discretization_interval: float) -> privacy_loss_distribution.PrivacyLossDistribution:
        """The pessimistic PLD of one use of the event on the grid of ``value_discretization_interval``."""
        raise NotImplementedError


def event_rdp(
    event: dp_accounting.DpEvent,
    orders: np.ndarray,
    *,
    count: int = 1,
    relation: dp_accounting.NeighboringRelation = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
) -> np.ndarray:
    """RDP of ``event`` composed ``count`` times, at each of ``orders``, as dp-accounting computes it."""
    accountant = rdp_privacy_accountant.RdpAccountant(
        orders=[float(a) for a in orders], neighboring_relation=relation
    )
    logger, notice = logging.getLogger("absl"), _UnconvergedOrderNotice()
    logger.addFilter(notice)
    try:
        accountant.compose(event, count)
    finally:
        logger.removeFilter(notice)
    return np.asarray(accountant.rdp, dtype=float).copy()


class _UnconvergedOrderNotice(logging.Filter):
    """dp-accounting's notice, one line per order, that a fractional order's series for the subsampled Gaussian
    did not converge. That order's RDP is then +inf (the order is excluded), which keeps every ε a valid upper
    bound — the conversion takes the best of the remaining orders — so the notice is dropped, not printed (DP-SGD
    accounting printed hundreds of them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "_compute_log_a_frac failed to converge" not in record.getMessage()


def _randomized_response_epsilon(event: dp_accounting.RandomizedResponseDpEvent) -> float:
    """Pure ε of one use of randomized response: ln(1 + (1 − p)·C / p) with p the noise parameter."""
    p, buckets = event.noise_parameter, event.num_buckets
    return math.log1p((1.0 - p) * buckets / p)


def _leaves(event: dp_accounting.DpEvent) -> list[dp_accounting.DpEvent]:
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return _leaves(event.event)
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return [leaf for member in event.events for leaf in _leaves(member)]
    return [event]


def pld_interval(event: dp_accounting.DpEvent, *, epsilon_hint: float | None = None) -> float:
    """The PLD discretization interval privfed uses for ``event``: 10⁻⁴ · 2^k for an integer k.

    The finest interval any leaf needs — dp-accounting's default 10⁻⁴, or ε₀/1000
    for randomized response of per-use ε₀ (its PLD has three atoms, so the
    rounding would otherwise dominate) — taking the coarsest over the leaves,
    and coarsened to ``epsilon_hint`` / 50 000 when a valid upper bound
    ``epsilon_hint`` on the composed ε (the RDP one) is large, so that the grid
    stays small; then rounded down to 10⁻⁴ · 2^k (never coarser than needed).
    Pessimistic rounding keeps every interval a valid upper bound.

    The interval never shrinks when an event is composed with another (both
    terms are maxima that only grow), and intervals of the form 10⁻⁴ · 2^k give
    nested grids: a coarser grid rounds every privacy loss up at least as far as
    a finer one. So adding a mechanism never lowers the PLD's ε.
    """
    interval = 0.0
    for leaf in _leaves(event):
        needed = DEFAULT_PLD_INTERVAL
        if isinstance(leaf, dp_accounting.RandomizedResponseDpEvent):
            needed = min(needed, _randomized_response_epsilon(leaf) / 1000.0)
        interval = max(interval, needed)
    if epsilon_hint is not None and math.isfinite(epsilon_hint):
        interval = max(interval, epsilon_hint / _PLD_POINTS_PER_EPSILON)
    return DEFAULT_PLD_INTERVAL * 2.0 ** math.floor(math.log2(interval / DEFAULT_PLD_INTERVAL) + 1e-12)


def _gaussian_uses(event: dp_accounting.DpEvent) -> tuple[float, int] | None:
    """(noise multiplier, uses) of a Gaussian event used once or self-composed; ``None`` for any other event."""
    if isinstance(event, dp_accounting.GaussianDpEvent):
        return float(event.noise_multiplier), 1
    if isinstance(event, dp_accounting.SelfComposedDpEvent) and isinstance(event.event, dp_accounting.GaussianDpEvent):
        return float(event.event.noise_multiplier), int(event.count)
    return None


def merged_gaussians(events: Sequence[dp_accounting.DpEvent]) -> list[dp_accounting.DpEvent]:
    """``events`` with every Gaussian member (used once or self-composed) replaced by their exact composition: one
    ``GaussianDpEvent`` of noise multiplier (Σ countᵢ / zᵢ²)^(−1/2), where the first Gaussian member stood.

    A ``GaussianDpEvent(z)`` is the Gaussian mechanism of ℓ2 sensitivity 1 and noise N(0, z²) (the events privfed
    builds state that sensitivity: GNMax's histogram is ``GaussianDpEvent(σ/(√2k))``, its ℓ2 sensitivity √2k
    divided out). Independent Gaussian outputs on neighbouring inputs are N(0, I) against N(m, I) with
    mᵢ = 1/zᵢ per use, whose privacy loss is exactly that of one Gaussian of shift ‖m‖ = (Σ countᵢ / zᵢ²)^(1/2):
    μᵢ-GDP mechanisms compose into one √(Σ μᵢ²)-GDP mechanism with no loss (Dong, Roth, Su, "Gaussian
    differential privacy", JRSS-B 2022, Cor. 3.3). One pessimistic PLD of that Gaussian is therefore a valid upper
    bound, and tighter than composing each member's pessimistically rounded PLD (which rounds every member's losses
    up before composing). Members are merged only when there are at least two, every multiplier is positive and
    finite and every count at least 1; otherwise ``events`` is returned as it is. (A composition of Gaussians only
    gets no PLD at all where its ε is asked for: :func:`event_pld_epsilon` takes the closed form.)
    """
    uses = [_gaussian_uses(event) for event in events]
    gaussian = [found for found in uses if found is not None]
    if len(gaussian) < 2 or not all(0.0 < z < math.inf and count >= 1 for z, count in gaussian):
        return list(events)
    merged = dp_accounting.GaussianDpEvent(noise_multiplier=math.fsum(count / (z * z) for z, count in gaussian) ** -0.5)
    first = next(index for index, found in enumerate(uses) if found is not None)
    return [merged if index == first else event for index, (event, found) in enumerate(zip(events, uses))
            if found is None or index == first]


def gaussian_mu(event: dp_accounting.DpEvent) -> float | None:
    """μ of ``event`` where it is a plain Gaussian mechanism: a ``GaussianDpEvent`` of noise multiplier z (μ = 1/z),
    self-compositions (μ√count) and compositions (√(Σ μᵢ²)) of them; ``None`` for any other event, and where some
    multiplier is not positive and finite or some count is below 1 (those keep the PLD path).

    The composition is exact (μ-GDP mechanisms compose into one √(Σ μᵢ²)-GDP mechanism, Dong, Roth, Su 2022,
    Cor. 3.3; the reasoning of :func:`merged_gaussians`), so the event's exact ε is
    :func:`~accounting.gaussian_profile.gaussian_epsilon` of this μ.
    """
    squared = _gaussian_mu_squared(event)
    return None if squared is None else math.sqrt(squared)


def _gaussian_mu_squared(event: dp_accounting.DpEvent) -> float | None:
    if isinstance(event, dp_accounting.GaussianDpEvent):
        z = float(event.noise_multiplier)
        return 1.0 / (z * z) if 0.0 < z < math.inf else None
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        inner = _gaussian_mu_squared(event.event)
        return None if inner is None or int(event.count) < 1 else int(event.count) * inner
    if isinstance(event, dp_accounting.ComposedDpEvent) and event.events:
        members = [_gaussian_mu_squared(member) for member in event.events]
        return None if any(member is None for member in members) else math.fsum(members)  # type: ignore[arg-type]
    return None


def event_pld(
    event: dp_accounting.DpEvent, *, value_discretization_interval: float = DEFAULT_PLD_INTERVAL
) -> privacy_loss_distribution.PrivacyLossDistribution:
    """The pessimistic PLD of ``event``, every self-composition applied explicitly, and the Gaussian members of a
    composition composed exactly into one Gaussian first (:func:`merged_gaussians`).

    Supported leaves: Gaussian and Laplace (sensitivity 1, the event's noise
    multiplier as scale), randomized response (replace-one: the true value
    replaced by another), the Poisson-subsampled Gaussian (add-or-remove-one,
    as Opacus and dp-accounting's RDP accountant state DP-SGD), and privfed's own
    :class:`PldDpEvent` leaves (a shuffled round of LDP reports, a Skellam coordinate).
    """
    interval = value_discretization_interval
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        if isinstance(event.event, dp_accounting.GaussianDpEvent):
            # T Gaussians of scale σ compose exactly to one of scale σ/√T.
            return privacy_loss_distribution.from_gaussian_mechanism(
                standard_deviation=event.event.noise_multiplier / math.sqrt(event.count),
                value_discretization_interval=interval,
            )
        return event_pld(event.event, value_discretization_interval=interval).self_compose(event.count)
    if isinstance(event, dp_accounting.ComposedDpEvent):
        composed = privacy_loss_distribution.identity(value_discretization_interval=interval)
        for member in merged_gaussians(event.events):
            composed = composed.compose(event_pld(member, value_discretization_interval=interval))
        return composed
    if isinstance(event, PldDpEvent):
        return event.pld(value_discretization_interval=interval)
    if isinstance(event, dp_accounting.RandomizedResponseDpEvent):
        return privacy_loss_distribution.from_randomized_response(
            noise_parameter=event.noise_parameter,
            num_buckets=event.num_buckets,
            value_discretization_interval=interval,
            neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
        )
    if isinstance(event, dp_accounting.GaussianDpEvent):
        return privacy_loss_distribution.from_gaussian_mechanism(
            standard_deviation=event.noise_multiplier, value_discretization_interval=interval
        )
    if isinstance(event, dp_accounting.LaplaceDpEvent):
        return privacy_loss_distribution.from_laplace_mechanism(
            parameter=event.noise_multiplier, value_discretization_interval=interval
        )
    if isinstance(event, dp_accounting.PoissonSampledDpEvent) and isinstance(
        event.event, dp_accounting.GaussianDpEvent
    ):
        return privacy_loss_distribution.from_gaussian_mechanism(
            standard_deviation=event.event.noise_multiplier,
            sampling_prob=event.sampling_probability,
            value_discretization_interval=interval,
            neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
        )
    raise TypeError(f"event must be built from Gaussian, Laplace, randomized-response, Poisson-sampled Gaussian, "
                    f"Skellam or privfed's PldDpEvent events to get a privacy loss distribution, got "
                    f"{type(event).__name__}")


class PLDMemo:
    """The last ``size`` PLD ε values by their exact inputs: (``repr(event)``, δ, ε hint), least recently used
    dropped first. A dp-accounting event's repr names every parameter (floats in their exact shortest form), so
    equal keys mean the same event, hence the same ε: a ledger asked the same question again — the bundle's
    ledger, its card, its totals all account the same entries — costs a look-up instead of a PLD."""

    def __init__(self, size: int):
        self.size = size
        self._values: OrderedDict[tuple, float] = OrderedDict()

    def epsilon(self, event: dp_accounting.DpEvent, delta: float, epsilon_hint: float | None) -> float:
        key = (repr(event), float(delta), epsilon_hint)
        if key in self._values:
            self._values.move_to_end(key)
            return self._values[key]
        interval = pld_interval(event, epsilon_hint=epsilon_hint)
        value = float(event_pld(event, value_discretization_interval=interval).get_epsilon_for_delta(delta))
        if self.size > 0:
            self._values[key] = value
            if len(self._values) > self.size:
                self._values.popitem(last=False)
        return value


#: The process's PLD memo (a few hundred floats and their keys).
PLD_MEMO = PLDMemo(256)


def event_pld_epsilon(
    event: dp_accounting.DpEvent, delta: float, *, epsilon_hint: float | None = None
) -> float:
    """ε at ``delta`` of ``event``'s privacy loss distribution: for a plain Gaussian mechanism (:func:`gaussian_mu`,
    compositions of Gaussians included) the exact ε of its privacy profile, a certified upper bound
    (:func:`~accounting.gaussian_profile.gaussian_epsilon`: no grid, microseconds); otherwise ε of the event's
    pessimistic PLD (a valid upper bound: pessimistic discretization), memoised (:class:`PLDMemo`)."""
    mu = gaussian_mu(event)
    if mu is not None:
        return gaussian_epsilon(mu, delta)
    return PLD_MEMO.epsilon(event, delta, epsilon_hint)
