"""Conversion of a Rényi-DP curve to an (ε, δ) guarantee.

Two conversions, one per analysis:

* ``classic`` — the moments-accountant tail bound used by PATE 2017
  (Papernot et al., Thm 2) and FedKT's ``privacy_analysis.py``:
  ε = min_λ (α(λ) + ln(1/δ)) / λ with λ = α − 1 and α(λ) = λ · RDP(α), i.e.
  ε = min_α RDP(α) + ln(1/δ)/(α − 1) (Mironov 2017, Prop. 3).
* ``tight`` — the improved conversion of Balle et al. 2020 / Canonne et al. 2020,
  dp-accounting's :func:`compute_epsilon` bit for bit
  (:func:`~privfed.accounting.rdp_closed_forms.rdp_epsilon`, which needs no
  dp-accounting import): never larger than the classic one at any order.
"""

from __future__ import annotations

import math

import numpy as np

from .rdp_closed_forms import rdp_epsilon

__all__ = ["classic_epsilon", "rdp_to_epsilon", "tight_epsilon"]


def classic_epsilon(orders: np.ndarray, rdp: np.ndarray, delta: float) -> tuple[float, float]:
    """ε = min_α RDP(α) + ln(1/δ)/(α − 1), and the minimising order."""
    orders = np.asarray(orders, dtype=float)
    rdp = np.asarray(rdp, dtype=float)
    moments = orders - 1.0
    # Written as (α(λ) + ln(1/δ)) / λ, exactly as the papers state it.
    candidates = (rdp * moments - math.log(delta)) / moments
    best = int(np.argmin(candidates))
    return float(candidates[best]), float(orders[best])


def tight_epsilon(orders: np.ndarray, rdp: np.ndarray, delta: float) -> tuple[float, float]:
    """dp-accounting's RDP → (ε, δ) conversion (:func:`~privfed.accounting.rdp_closed_forms.rdp_epsilon`), and the
    minimising order."""
    epsilon, order = rdp_epsilon([float(a) for a in orders], [float(r) for r in rdp], delta)
    return float(epsilon), float(order)


def rdp_to_epsilon(orders: np.ndarray, rdp: np.ndarray, delta: float, analysis: str) -> tuple[float, float]:
    """Dispatch to the conversion of ``analysis`` (``"classic"`` or ``"tight"``)."""
    if analysis == "classic":
        return classic_epsilon(orders, rdp, delta)
    return tight_epsilon(orders, rdp, delta)
