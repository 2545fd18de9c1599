"""Rényi orders used by privfed's accountants.

privfed always speaks of Rényi orders α > 1, as dp-accounting does. The PATE
and FedKT papers speak of moments λ = α − 1 and of log-moments
α(λ) = λ · RDP(α); :mod:`accounting.report` exposes both.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CLASSIC_ORDERS", "TIGHT_ORDERS", "default_orders"]

#: The papers' moments λ = 1..8 (FedKT ``privacy_analysis.py``, PATE 2017), as Rényi orders 2..9.
CLASSIC_ORDERS: np.ndarray = np.arange(2.0, 10.0)

#: A wide grid for ``analysis="tight"``: fractional orders near 1 (where small-ε
#: compositions are optimised), every integer up to 64, then geometric steps.
#: It contains :data:`CLASSIC_ORDERS`, so on the same inputs the tight bound can
#: only be at most the classic one.
TIGHT_ORDERS: np.ndarray = np.unique(
    np.concatenate(
        [
            1.0 + np.arange(1, 40) / 40.0,  # 1.025 .. 1.975
            np.arange(2.0, 10.0, 0.25),
            np.arange(10.0, 65.0),
            np.array([80.0, 96.0, 128.0, 192.0, 256.0, 384.0, 512.0, 1024.0]),
        ]
    )
)
TIGHT_ORDERS.setflags(write=False)
CLASSIC_ORDERS.setflags(write=False)


def default_orders(analysis: str) -> np.ndarray:
    """The default order grid of an analysis (``"classic"`` or ``"tight"``)."""
    return CLASSIC_ORDERS if analysis == "classic" else TIGHT_ORDERS
