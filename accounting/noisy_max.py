"""What every report-noisy-max mechanism over a private vote matrix shares.

A noisy-max release holds the vote matrix it answered (queries × classes),
which is private evidence: its data-dependent bounds are computed from it, it
never enters a public record, and rebuilding the mechanism from a ledger needs
it back (:meth:`VoteMechanism.from_parameters`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from ._checks import check_choice, check_int_at_least, check_positive_finite, check_recorded_int, check_votes
from .mechanism import ALL_RELATIONS, UNITS, Mechanism, check_relations
from .registry import MAX_PUBLIC_CLASSES, PublicVoteView

__all__ = ["VoteMechanism", "distinct_counts"]


def distinct_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_counts=True)`` of a 1-D float array that the caller gives up: it is sorted in
    place, so the only extra memory is a mask (1 byte a value) and the distinct values' positions (``np.unique``
    sorts a copy, and its per-query bounds of a 1e7-query release are 80 MB each)."""
    values.sort()
    if values.size == 0:
        return values, np.zeros(0, dtype=np.int64)
    starts = np.empty(values.size, dtype=bool)
    starts[0] = True
    np.not_equal(values[1:], values[:-1], out=starts[1:])
    positions = np.flatnonzero(starts)
    del starts
    return values[positions], np.diff(np.append(positions, values.size))


class VoteMechanism(Mechanism):
    """Base of noisy-max mechanisms whose fields are ``votes``, a noise parameter, ``votes_per_unit`` and ``unit``.

    ``data_independent_votes_per_unit`` (keyword, default ``None``) is for a
    ``votes_per_unit`` that was itself computed from private data (FedKT's code's
    z): the data-dependent bound then uses ``votes_per_unit``, and every
    data-independent bound (RDP, PLD event, pure ε) the bound given here, which
    must hold whatever the data. A z-based ε is then never called data-independent.

    ``relations`` (keyword, default both: :data:`~privfed.accounting.mechanism.ALL_RELATIONS`) are the
    neighbouring relations under which one unit moves at most ``votes_per_unit`` votes: the analysis
    holds for exactly those. With teachers trained on disjoint data sets fixed by position (PATE), one
    example added, removed or replaced changes one teacher: k = 1 covers both. Where a unit's
    assignment to teachers depends on its contents (FedKT's keyed teacher subsets), a replaced example
    leaves one teacher and joins another: k = 1 covers ``{"add_or_remove_one"}`` only, and k = 2 both.

    Subclasses are frozen dataclasses that name their noise parameter in
    :attr:`noise_parameter` (``"gamma"``, ``"sigma"``) and call
    :meth:`_validate_votes` from ``__post_init__``.
    """

    #: Name of the constructor's second argument, the noise parameter.
    noise_parameter: ClassVar[str]
    votes: np.ndarray
    votes_per_unit: int
    data_independent_votes_per_unit: int | None
    relations: frozenset[str]

    def _validate_votes(self) -> None:
        # Read-only, and no copy when the votes are int64 already (1e7 queries × 10 classes are 800 MB): a view of
        # the caller's array, which must not change it afterwards (the ledger's evidence commitment, taken when the
        # release is recorded, would then no longer match on verify). Other dtypes are converted, once.
        votes = check_votes(self.votes).view()
        votes.setflags(write=False)
        object.__setattr__(self, "votes", votes)
        name = self.noise_parameter
        object.__setattr__(self, name, check_positive_finite(name, getattr(self, name)))
        object.__setattr__(self, "votes_per_unit", check_int_at_least("votes_per_unit", self.votes_per_unit, 1))
        if self.data_independent_votes_per_unit is not None:
            bound = check_int_at_least("data_independent_votes_per_unit", self.data_independent_votes_per_unit, 1)
            if bound < self.votes_per_unit:
                raise ValueError(
                    f"data_independent_votes_per_unit must be >= votes_per_unit = {self.votes_per_unit} (a bound that "
                    f"holds whatever the data is at least the one computed from it), got {bound!r}"
                )
            object.__setattr__(self, "data_independent_votes_per_unit", bound)
        check_choice("unit", self.unit, UNITS)
        object.__setattr__(self, "relations", check_relations(self.relations))

    @property
    def public_votes_per_unit(self) -> int:
        """k of the data-independent bounds: ``data_independent_votes_per_unit`` if given, else ``votes_per_unit``."""
        return (
            self.votes_per_unit if self.data_independent_votes_per_unit is None
            else self.data_independent_votes_per_unit
        )

    def notes(self) -> tuple[str, ...]:
        if self.data_independent_votes_per_unit is None:
            return ()
        return (
            f"{self.kind}: votes_per_unit = {self.votes_per_unit} was computed from the private data (a local "
            "sensitivity, not a differential-privacy guarantee), so the data-dependent ε uses it and every "
            f"data-independent bound uses data_independent_votes_per_unit = {self.data_independent_votes_per_unit}",
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(<{self.num_queries} queries × {self.num_classes} classes>, "
            f"{self.noise_parameter}={getattr(self, self.noise_parameter)!r}, "
            f"votes_per_unit={self.votes_per_unit!r}, unit={self.unit!r})"
        )

    @property
    def num_queries(self) -> int:
        return int(self.votes.shape[0])

    @property
    def num_classes(self) -> int:
        return int(self.votes.shape[1])

    @property
    def data_dependent(self) -> bool:
        return True

    def evidence(self) -> dict[str, np.ndarray]:
        """The vote matrix (private)."""
        return {"votes": self.votes}

    @classmethod
    def from_parameters(
        cls, parameters: Mapping[str, Any], *, unit: str, evidence: Mapping[str, np.ndarray] | None = None
    ) -> VoteMechanism:
        if not evidence or "votes" not in evidence:
            raise ValueError(
                f"evidence must contain 'votes' to rebuild a {cls.__name__} (its accounting is data-dependent)"
            )
        return cls(  # type: ignore[call-arg]
            evidence["votes"], parameters[cls.noise_parameter], parameters.get("votes_per_unit", 1), unit=unit,
            data_independent_votes_per_unit=parameters.get("data_independent_votes_per_unit"),
            relations=parameters.get("relations", ALL_RELATIONS),
        )

    @classmethod
    def from_public_parameters(cls, parameters: Mapping[str, Any], *, unit: str) -> Mechanism:
        """The release through its public parameters: one all-zero vote row of ``num_classes`` counts, its
        data-independent bounds composed ``num_queries`` times (a :class:`~privfed.accounting.registry.PublicVoteView`,
        memory independent of ``num_queries``)."""
        count = check_recorded_int(parameters, "num_queries", 1)
        classes = check_recorded_int(parameters, "num_classes", 2, MAX_PUBLIC_CLASSES)
        placeholder = {"votes": np.zeros((1, classes), dtype=np.int64)}
        return PublicVoteView(cls.from_parameters(parameters, unit=unit, evidence=placeholder), count)

    def parameters(self) -> dict[str, Any]:
        return {
            self.noise_parameter: getattr(self, self.noise_parameter),
            "votes_per_unit": self.votes_per_unit,
            **({} if self.data_independent_votes_per_unit is None
               else {"data_independent_votes_per_unit": self.data_independent_votes_per_unit}),
            "num_queries": self.num_queries,
            "num_classes": self.num_classes,
            **({} if self.relations == ALL_RELATIONS else {"relations": sorted(self.relations)}),
        }
