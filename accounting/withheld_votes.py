"""A noisy-max release whose votes never leave the party that answered it, accounted data-independently.

Under FedKT-L2 every party labels its local queries by a noisy argmax of its own
teachers' votes and sends the coordinator only what its students predict. The
vote histograms stay with the party, so the coordinator (and the public) can
account the release only through the bound that holds whatever the votes: the
noisy-max mechanism's data-independent curve, composed over the answered queries
(Mironov 2017, Prop. 1),

    RDP(α) = num_queries · RDP_indep,1(α),

with RDP_indep,1 the per-query data-independent bound of
:class:`~privfed.accounting.laplace_noisy_max.LaplaceNoisyMax` (Laplace(1/γ) noise,
PATE 2017) or :class:`~privfed.accounting.gaussian_noisy_max.GaussianNoisyMax`
(N(0, σ²), PATE 2018), at sensitivity ``votes_per_unit`` (k). Nothing in it is
computed from private data: it records no evidence and its ε is data-independent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar

import dp_accounting
import numpy as np

from ._checks import check_choice, check_int_at_least, check_positive_finite
from .gaussian_noisy_max import GaussianNoisyMax
from .laplace_noisy_max import LaplaceNoisyMax
from .mechanism import ALL_RELATIONS, UNITS, Mechanism, check_relations
from .registry import MAX_PUBLIC_CLASSES, PublicVoteView, register

__all__ = ["WithheldVotesNoisyMax"]

_AGGREGATORS: dict[str, type[LaplaceNoisyMax] | type[GaussianNoisyMax]] = {
    "laplace": LaplaceNoisyMax, "gaussian": GaussianNoisyMax,
}


@register
@dataclass(frozen=True)
class WithheldVotesNoisyMax(Mechanism):
    """Noisy argmax over vote histograms the accountant never sees: data-independent accounting only.

    Parameters
    ----------
    aggregator:
        ``"laplace"`` (``scale`` is γ: Laplace noise of scale 1/γ per count) or ``"gaussian"``
        (``scale`` is σ: N(0, σ²) per count).
    scale:
        γ or σ, > 0.
    num_answered:
        How many queries were answered (≥ 1).
    num_classes:
        Classes per histogram (≥ 2).
    votes_per_unit:
        k: how many votes of a histogram one protected unit can move (1 for one example
        under FedKT's disjoint teachers, the teachers per partition for a whole party).
    unit:
        ``"example"`` or ``"party"``.
    relations:
        The neighbouring relations under which one unit moves at most k votes (keyword; default both).
        FedKT-L2 at example level: one example added or removed changes one keyed teacher per partition
        (k = 1, ``{"add_or_remove_one"}``); a replaced one can change two, so k = 2 covers
        ``{"add_or_remove_one", "replace_one"}``. A whole party (k = its teachers per partition) covers both.

    Examples
    --------
    >>> from privfed.accounting import account
    >>> mechanism = WithheldVotesNoisyMax("laplace", 0.05, num_answered=100, num_classes=10)
    >>> account(mechanism, delta=1e-5).data_dependent
    False
    """

    kind: ClassVar[str] = "withheld_votes_noisy_max"
    aggregator: str
    scale: float
    num_answered: int
    num_classes: int
    votes_per_unit: int = 1
    unit: str = "example"
    _: KW_ONLY
    relations: frozenset[str] = ALL_RELATIONS

    def __post_init__(self) -> None:
        check_choice("aggregator", self.aggregator, tuple(_AGGREGATORS))
        object.__setattr__(self, "scale", check_positive_finite("scale", self.scale))
        object.__setattr__(self, "num_answered", check_int_at_least("num_answered", self.num_answered, 1))
        classes = check_int_at_least("num_classes", self.num_classes, 2)
        if classes > MAX_PUBLIC_CLASSES:
            raise ValueError(f"num_classes must be at most {MAX_PUBLIC_CLASSES}, got {classes}")
        object.__setattr__(self, "num_classes", classes)
        object.__setattr__(self, "votes_per_unit", check_int_at_least("votes_per_unit", self.votes_per_unit, 1))
        check_choice("unit", self.unit, UNITS)
        object.__setattr__(self, "relations", check_relations(self.relations))

    def public_view(self) -> PublicVoteView:
        """The per-query mechanism on one placeholder row, composed ``num_answered`` times (its data-independent
        bounds do not read the votes)."""
        one_query = _AGGREGATORS[self.aggregator](np.zeros((1, self.num_classes), dtype=np.int64), self.scale,
                                                  self.votes_per_unit, unit=self.unit, relations=self.relations)
        return PublicVoteView(one_query, self.num_answered)

    @property
    def num_queries(self) -> int:
        return self.num_answered

    @property
    def data_dependent(self) -> bool:
        return False

    def rdp(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        return self.rdp_data_independent(orders, analysis=analysis)

    def rdp_data_independent(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        return self.public_view().rdp_data_independent(orders, analysis=analysis)

    def pure_epsilon(self) -> float | None:
        return self.public_view().pure_epsilon()

    def dp_event(self) -> dp_accounting.DpEvent | None:
        return self.public_view().dp_event()

    def parameters(self) -> Mapping[str, Any]:
        return {"aggregator": self.aggregator, "scale": self.scale, "num_answered": self.num_answered,
                "num_classes": self.num_classes, "votes_per_unit": self.votes_per_unit,
                **({} if self.relations == ALL_RELATIONS else {"relations": sorted(self.relations)})}
