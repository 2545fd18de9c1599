"""The narrow bridge to dp-accounting: RDP curves of its standard events.

privfed never re-derives a mechanism that dp-accounting already implements;
it asks an :class:`~dp_accounting.rdp.RdpAccountant` built on the caller's
orders and reads its curve.
"""

from __future__ import annotations

import dp_accounting
import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant

__all__ = ["event_rdp"]


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
    accountant.compose(event, count)
    return np.asarray(accountant.rdp, dtype=float).copy()
