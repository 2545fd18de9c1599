"""Confident GNMax (PATE 2018, Algorithm 1): answer only the queries whose noisy top vote clears a threshold.

Source: Papernot et al., "Scalable private learning with PATE", ICLR 2018
("PATE 2018"), Sec. 4.1, Algorithm 1, App. B–D.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, ClassVar, cast

import numpy as np
from scipy import stats

from ._checks import check_choice, check_orders, check_positive_finite, check_recorded_int, check_votes
from .gaussian_noisy_max import GaussianNoisyMax, gaussian_noisy_max_rdp
from .mechanism import ALL_RELATIONS, ANALYSES, Mechanism
from .noisy_max import VoteMechanism
from .registry import MAX_PUBLIC_CLASSES, PublicVoteView, mechanism_from_record, register
from .sequential import SequentialComposition
from .smooth_sensitivity import smooth_sensitivity

__all__ = [
    "ConfidentGNMax", "PublicConfidentView", "public_confident_view", "threshold_local_sensitivity_bounds",
    "threshold_log_failure_bounds",
]


def threshold_log_failure_bounds(votes: np.ndarray, *, threshold: float, sigma_threshold: float) -> np.ndarray:
    """Per query ln q of the threshold step: q = min(p, 1 − p), p = Pr[max_j n_j + N(0, σ₁²) ≥ T]."""
    top = check_votes(votes).max(axis=1).astype(float)
    log_p = stats.norm.logsf(threshold - top, scale=sigma_threshold)
    log_not = stats.norm.logcdf(threshold - top, scale=sigma_threshold)
    return np.minimum(log_p, log_not)


def _threshold_rdp_by_top(num_teachers: int, threshold: float, sigma_threshold: float, order: float) -> np.ndarray:
    """The threshold step's data-dependent RDP at ``order`` for a top count v = 0 … T."""
    tops = np.arange(num_teachers + 1, dtype=float)
    log_q = np.minimum(stats.norm.logsf(threshold - tops, scale=sigma_threshold),
                       stats.norm.logcdf(threshold - tops, scale=sigma_threshold))
    return gaussian_noisy_max_rdp(log_q, math.sqrt(2.0) * sigma_threshold, np.array([order]))[:, 0]


def threshold_local_sensitivity_bounds(
    votes: np.ndarray, *, threshold: float, sigma_threshold: float, order: float, num_teachers: int
) -> np.ndarray:
    """LS(d) of the threshold step's data-dependent RDP, shape (queries, T).

    The threshold step's RDP depends on the data only through the top count v,
    and one unit moves v by at most 1; so the local sensitivity at v is
    max(|β(v−1) − β(v)|, |β(v+1) − β(v)|) and at distance d the largest of it at
    v ± d (0 beyond both ends). Vectorised: β is tabulated for v = 0 … T.
    """
    rdp = _threshold_rdp_by_top(num_teachers, threshold, sigma_threshold, order)
    steps = np.abs(np.diff(rdp))  # |β(v+1) − β(v)|, v = 0 … T−1
    at = np.zeros(num_teachers + 1)
    at[:-1] = steps
    at[1:] = np.maximum(at[1:], steps)
    top = check_votes(votes).max(axis=1)
    distances = np.arange(num_teachers)
    padded = np.concatenate([at, [0.0]])  # index T + 1 → 0
    up = np.minimum(top[:, None] + distances[None, :], num_teachers + 1)
    down = top[:, None] - distances[None, :]
    return np.maximum(padded[up], np.where(down >= 0, padded[np.maximum(down, 0)], 0.0))


@register
@dataclass(frozen=True, eq=False, repr=False)
class ConfidentGNMax(VoteMechanism):
    """Confident GNMax over vote counts (PATE 2018 Algorithm 1).

    Per query: if max_j n_j + N(0, σ₁²) ≥ T (``threshold``, σ₁ =
    ``sigma_threshold``) the query is answered with argmax_j (n_j + N(0, σ²)),
    σ = ``sigma``; otherwise ⊥. One unit moves at most k = ``votes_per_unit`` votes.

    **Threshold step** (every query): a Gaussian mechanism on the top count
    (sensitivity k): data-independent RDP α·k²/(2σ₁²) per query; data-dependent,
    PATE 2018's bound for a two-outcome release with q = min(p, 1 − p),
    p = Pr[answered], through Thm 6 at noise √2·σ₁/k.

    **GNMax step**: :class:`GaussianNoisyMax` on the answered queries. Which
    queries were answered is public (the student sees ⊥): give it as
    ``answered`` (boolean per query) and the GNMax cost counts those queries
    only, as PATE 2018 accounts it — valid when the total is compared against a
    budget fixed in advance (fully adaptive RDP composition, Feldman & Zrnic
    2021). ``answered=None`` charges GNMax on every query: a bound that holds
    whatever was answered.

    Both steps compose (RDP curves add). :meth:`threshold_local_sensitivity_bounds`
    and :meth:`threshold_smooth_sensitivity` give the threshold step's smooth
    sensitivity; :meth:`gnmax` is the answering step, with its own.
    """

    votes: np.ndarray
    _: KW_ONLY
    threshold: float
    sigma_threshold: float
    sigma: float
    votes_per_unit: int = 1
    answered: np.ndarray | None = None
    unit: str = "example"
    data_independent_votes_per_unit: int | None = None
    relations: frozenset[str] = ALL_RELATIONS
    _cache: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    kind: ClassVar[str] = "confident_gnmax"
    noise_parameter: ClassVar[str] = "sigma"

    def __post_init__(self) -> None:
        self._validate_votes()
        object.__setattr__(self, "threshold", check_positive_finite("threshold", self.threshold))
        object.__setattr__(self, "sigma_threshold", check_positive_finite("sigma_threshold", self.sigma_threshold))
        if self.answered is not None:
            answered = np.asarray(self.answered)
            if answered.shape != (self.num_queries,) or answered.dtype != bool:
                raise ValueError(f"answered must be a boolean array of shape ({self.num_queries},) (one per query), "
                                 f"got dtype {answered.dtype} and shape {answered.shape}")
            answered = answered.copy()
            answered.setflags(write=False)
            object.__setattr__(self, "answered", answered)

    def __repr__(self) -> str:
        return (f"ConfidentGNMax(<{self.num_queries} queries × {self.num_classes} classes>, "
                f"threshold={self.threshold!r}, sigma_threshold={self.sigma_threshold!r}, sigma={self.sigma!r}, "
                f"votes_per_unit={self.votes_per_unit!r}, unit={self.unit!r})")

    @property
    def num_answered(self) -> int:
        """Queries charged for the GNMax step: the answered ones, or all without ``answered``."""
        return self.num_queries if self.answered is None else int(self.answered.sum())

    def gnmax(self) -> GaussianNoisyMax:
        """The answering step: GNMax on the answered queries (all of them without ``answered``)."""
        votes = self.votes if self.answered is None else self.votes[self.answered]
        return GaussianNoisyMax(votes, self.sigma, self.votes_per_unit, unit=self.unit,
                                data_independent_votes_per_unit=self.data_independent_votes_per_unit,
                                relations=self.relations)

    def threshold_log_failure_bounds(self) -> np.ndarray:
        """Per query ln min(p, 1 − p) of the threshold step (private)."""
        return threshold_log_failure_bounds(self.votes, threshold=self.threshold, sigma_threshold=self.sigma_threshold)

    def _threshold_rdp(self, orders: np.ndarray, votes_per_unit: int, data_dependent: bool) -> np.ndarray:
        scale = math.sqrt(2.0) * self.sigma_threshold / votes_per_unit
        if not data_dependent:
            return self.num_queries * orders / scale**2
        values, counts = np.unique(self.threshold_log_failure_bounds(), return_counts=True)
        return counts.astype(float) @ gaussian_noisy_max_rdp(values, scale, orders)

    def threshold_rdp(self, orders: np.ndarray, *, data_dependent: bool = True) -> np.ndarray:
        """RDP of the threshold step alone, composed over every query."""
        orders = check_orders(orders)
        k = self.votes_per_unit if data_dependent else self.public_votes_per_unit
        return self._threshold_rdp(orders, k, data_dependent)

    def rdp(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        orders = check_orders(orders)
        check_choice("analysis", analysis, ANALYSES)
        answering = self.gnmax().rdp(orders, analysis=analysis) if self.num_answered else 0.0
        return self.threshold_rdp(orders) + answering

    def rdp_data_independent(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        orders = check_orders(orders)
        check_choice("analysis", analysis, ANALYSES)
        answering = self.num_answered * orders * (self.public_votes_per_unit / self.sigma) ** 2
        return self.threshold_rdp(orders, data_dependent=False) + answering

    def threshold_local_sensitivity_bounds(self, order: float, *, num_teachers: int | None = None) -> np.ndarray:
        """LS(d) of the threshold step's data-dependent RDP at ``order`` (queries × T); needs k = 1."""
        if self.votes_per_unit != 1:
            raise ValueError(f"smooth sensitivity needs votes_per_unit=1, got {self.votes_per_unit}")
        teachers = int(self.votes.sum(axis=1).max()) if num_teachers is None else int(num_teachers)
        return threshold_local_sensitivity_bounds(self.votes, threshold=self.threshold,
                                                  sigma_threshold=self.sigma_threshold, order=order,
                                                  num_teachers=teachers)

    def threshold_smooth_sensitivity(self, *, order: float, beta: float, num_teachers: int | None = None) -> np.ndarray:
        """SS_β of the threshold step per query."""
        return smooth_sensitivity(self.threshold_local_sensitivity_bounds(order, num_teachers=num_teachers), beta=beta)

    # The answering step's bounds, under the names GaussianNoisyMax uses.
    def local_sensitivity_bounds(self, order: float, *, num_teachers: int | None = None) -> np.ndarray:
        """LS(d) of the GNMax step on the answered queries (see :meth:`GaussianNoisyMax.local_sensitivity_bounds`)."""
        return self.gnmax().local_sensitivity_bounds(order, num_teachers=num_teachers)

    def smooth_sensitivity(self, *, order: float, beta: float, num_teachers: int | None = None) -> np.ndarray:
        """SS_β of the GNMax step per answered query."""
        return self.gnmax().smooth_sensitivity(order=order, beta=beta, num_teachers=num_teachers)

    def evidence(self) -> dict[str, np.ndarray]:
        evidence = {"votes": self.votes}
        if self.answered is not None:
            evidence["answered"] = self.answered
        return evidence

    def parameters(self) -> dict[str, Any]:
        return {
            **super().parameters(),
            "threshold": self.threshold,
            "sigma_threshold": self.sigma_threshold,
            "num_answered": self.num_answered,
        }

    @classmethod
    def from_parameters(
        cls, parameters: Mapping[str, Any], *, unit: str, evidence: Mapping[str, np.ndarray] | None = None
    ) -> ConfidentGNMax:
        if not evidence or "votes" not in evidence:
            raise ValueError(
                "evidence must contain 'votes' to rebuild a ConfidentGNMax (its accounting is data-dependent)"
            )
        answered = evidence.get("answered")
        return cls(
            evidence["votes"], threshold=parameters["threshold"], sigma_threshold=parameters["sigma_threshold"],
            sigma=parameters["sigma"], votes_per_unit=parameters.get("votes_per_unit", 1), unit=unit,
            answered=None if answered is None else np.asarray(answered, dtype=bool),
            data_independent_votes_per_unit=parameters.get("data_independent_votes_per_unit"),
            relations=parameters.get("relations", ALL_RELATIONS),
        )

    @classmethod
    def from_public_parameters(cls, parameters: Mapping[str, Any], *, unit: str) -> Mechanism:
        """The release through its public parameters: a :class:`PublicConfidentView` when the record states
        ``num_answered`` (every query pays the threshold step, the answered ones GNMax too), else GNMax charged
        on every query (:meth:`VoteMechanism.from_public_parameters`)."""
        if "num_answered" not in parameters:
            return super().from_public_parameters(parameters, unit=unit)
        count = check_recorded_int(parameters, "num_queries", 1)
        classes = check_recorded_int(parameters, "num_classes", 2, MAX_PUBLIC_CLASSES)
        answered = check_recorded_int(parameters, "num_answered", 0, count)
        record = {"kind": cls.kind, "unit": unit, "parameters": parameters}
        return public_confident_view(record, classes, count, answered)


@dataclass(frozen=True, eq=False)
class PublicConfidentView(SequentialComposition):
    """A Confident GNMax record seen through its public parameters (ledgers without evidence, claims files).

    Every query pays the threshold step, the answered ones GNMax too, and how many were answered
    is public (the ⊥ pattern is released): the members are the :class:`PublicVoteView` of the
    unanswered and of the answered queries, composed in sequence (Mironov 2017, Prop. 1). It is
    presented under the record's own kind and parameters, so that claims and ledgers compare it
    with what they state.
    """

    kind: ClassVar[str] = "confident_gnmax"

    def parameters(self) -> dict[str, Any]:
        views = cast(tuple[PublicVoteView, ...], self.mechanisms)  # public_confident_view builds it so
        answered = sum(view.count for view in views if cast(ConfidentGNMax, view.one_query).num_answered)
        return {**views[0].one_query.parameters(), "num_queries": sum(view.count for view in views),
                "num_answered": answered}


def public_confident_view(
    record: Mapping[str, Any], num_classes: int, num_queries: int, num_answered: int
) -> PublicConfidentView:
    """The public view of a recorded Confident GNMax release of ``num_queries`` queries, ``num_answered`` answered."""
    zeros = np.zeros((1, num_classes), dtype=np.int64)
    return PublicConfidentView(tuple(
        PublicVoteView(mechanism_from_record(record, evidence={"votes": zeros, "answered": np.array([answered])}), n)
        for answered, n in ((False, num_queries - num_answered), (True, num_answered)) if n
    ))
