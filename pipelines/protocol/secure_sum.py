"""A party's share of distributed Skellam noise on an integer vector, before a secure sum.

Agarwal, Kairouz, Liu, "The Skellam Mechanism for Differentially Private Federated Learning",
NeurIPS 2021: each of n parties adds Skellam noise Sk(σ²/n) — the difference of two
Poisson(σ²/(2n)) draws per coordinate — to its own integer vector; secure aggregation hands the
server only the sum, which carries Sk(σ²) exactly (Skellam is closed under summation). Nothing here
knows a pipeline: :func:`add_skellam_share` is what a party does with whatever integer vector it
contributes (FedKD's quantized logit levels today; FedKT's vote histograms can adopt it), drawing
from its own :class:`~privfed.accounting.NoiseSource` — never from ``random_state``, never sent.

The share's variance (:func:`skellam_share_variance`) and the integer bound secure aggregation's modulus is
sized from (:func:`secure_value_bound`) live here too, for every pipeline that sums shares (FedKT's vote
histograms, FedKD's logit levels), and so does the collusion the coordinator's ε assumes (``collusion=c`` on
either estimator: :func:`check_collusion`, :func:`colluding_parties`, :func:`honest_contributors`): parties that
collude with the coordinator subtract their own shares, so only the honest contributors' shares protect a target.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["add_skellam_share", "check_collusion", "colluding_parties", "honest_contributors", "secure_value_bound",
           "skellam_share_variance"]

_BOUND_DEVIATIONS = 40.0


def skellam_share_variance(sigma: float, n_parties: int) -> float:
    """σ²/n: each party's share of the Skellam variance, so that the n shares sum to Sk(σ²)."""
    return float(sigma) ** 2 / n_parties


def secure_value_bound(value_bound: int, share_variance: float) -> int:
    """An integer B with every noisy count a party sends in [−B, B] (else it refuses): value bound + 40·√share + 40.

    Secure aggregation works on integers modulo a power of two; B sizes its clipping range, so that the
    parties' noisy histograms sum exactly (``privfed.federation``'s SecAgg+ run).
    """
    return int(value_bound + math.ceil(_BOUND_DEVIATIONS * math.sqrt(share_variance)) + 40)


def add_skellam_share(values: np.ndarray, share_variance: float, *, value_bound: int,
                      generator: np.random.Generator, party: str) -> np.ndarray:
    """``values`` (integers within ±``value_bound``) plus a Skellam share of variance ``share_variance``, as int64.

    ``generator`` is the party's own noise generator (its :class:`~privfed.accounting.NoiseSource`'s). The
    party refuses (ValueError, nothing sent) a variance that is not finite and > 0 — a vector without its
    share must never leave — and a noisy value beyond :func:`secure_value_bound` (probability < 10⁻¹⁰⁰ per
    value), rather than send a clipped one.
    """
    if not (math.isfinite(share_variance) and share_variance > 0):
        raise ValueError(f"{party}: the Skellam share's variance must be finite and > 0, got {share_variance!r}")
    values = np.asarray(values)
    if values.dtype.kind not in "iu" or np.abs(values).max(initial=0) > value_bound:
        raise ValueError(f"{party}: the vector to noise must hold integers within ±{value_bound}")
    rate = share_variance / 2.0
    noisy = values.astype(np.int64) + generator.poisson(rate, values.shape) - generator.poisson(rate, values.shape)
    bound = secure_value_bound(value_bound, share_variance)
    if np.abs(noisy).max(initial=0) > bound:
        raise ValueError(f"{party}'s noisy vector left [-{bound}, {bound}]; nothing was sent")
    return noisy


def check_collusion(model: Any, n_parties: int) -> None:
    """Refuse a ``collusion`` that is not a number of other parties, 0..n − 1 (one line, before any training)."""
    collusion = model.collusion
    if collusion is not None and collusion > n_parties - 1:
        raise ValueError(f"collusion must be a number of parties colluding with the coordinator in 0..{n_parties - 1} "
                         f"(the other parties of {n_parties}), got {collusion!r}")


def colluding_parties(model: Any, n_parties: int) -> int:
    """c: the parties assumed to collude with the coordinator (``collusion``; None: every other party, n − 1)."""
    return n_parties - 1 if model.collusion is None else int(model.collusion)


def honest_contributors(model: Any, total: Any) -> int:
    """The contributors whose shares still protect a target against the coordinator and its c colluders.

    ``total`` is the secure sum (its ``n_contributors`` of ``n_parties``: FedKT's vote sum, FedKD's level sum).
    The colluders may all be among the contributors, and the target is an honest contributor: received − c,
    at least 1 (its own share).
    """
    return max(1, total.n_contributors - colluding_parties(model, total.n_parties))
