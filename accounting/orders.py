"""Rényi orders used by privfed's accountants.

privfed always speaks of Rényi orders α > 1, as dp-accounting does. The PATE
and FedKT papers speak of moments λ = α − 1 and of log-moments
α(λ) = λ · RDP(α); :mod:`privfed.accounting.report` exposes both.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CLASSIC_ORDERS", "TIGHT_ORDERS", "default_orders"]

#: The papers' moments λ = 1..8 (FedKT ``privacy_analysis.py``, PATE 2017), as Rényi orders 2..9.
CLASSIC_ORDERS: np.ndarray = np.arange(2.0, 10.0)

#: The grid for ``analysis="tight"``: 64 orders with moments λ = α − 1 spaced
#: geometrically from 0.02 to 1023 (about 19 % apart, fine enough that a denser
#: grid changes ε by well under 1 %: see ``docs/accounting.md``), plus the
#: integers 2..9. It contains :data:`CLASSIC_ORDERS`, so on the same inputs the
#: tight bound is never above the classic one.
TIGHT_ORDERS: np.ndarray = np.unique(np.concatenate([1.0 + np.geomspace(0.02, 1023.0, 64), CLASSIC_ORDERS]))
TIGHT_ORDERS.setflags(write=False)
CLASSIC_ORDERS.setflags(write=False)


def default_orders(analysis: str) -> np.ndarray:
    """The default order grid of an analysis (``"classic"`` or ``"tight"``)."""
    return CLASSIC_ORDERS if analysis == "classic" else TIGHT_ORDERS
