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
from privfed.accounting._checks import check_choice, check_int_at_least, check_positive_finite, check_votes
from privfed.accounting.mechanism import UNITS, Mechanism

__all__ = ["VoteMechanism"]


class VoteMechanism(Mechanism):
    """Base of noisy-max mechanisms whose fields are ``votes``, a noise parameter, ``votes_per_unit`` and ``unit``.

    Subclasses are frozen dataclasses that name their noise parameter in
    :attr:`noise_parameter` (``"gamma"``, ``"sigma"``) and call
    :meth:`_validate_votes` from ``__post_init__``.
    """

    #: Name of the constructor's second argument, the noise parameter.
    noise_parameter: ClassVar[str]
    votes: np.ndarray
    votes_per_unit: int

    def _validate_votes(self) -> None:
        # A private, read-only copy, column-major so that per-query reductions over classes are fast.
        votes = np.array(check_votes(self.votes), dtype=np.int64, order="F", copy=True)
        votes.setflags(write=False)
        object.__setattr__(self, "votes", votes)
        name = self.noise_parameter
        object.__setattr__(self, name, check_positive_finite(name, getattr(self, name)))
        object.__setattr__(self, "votes_per_unit", check_int_at_least("votes_per_unit", self.votes_per_unit, 1))
        check_choice("unit", self.unit, UNITS)

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
            evidence["votes"], parameters[cls.noise_parameter], parameters.get("votes_per_unit", 1), unit=unit
        )

    def parameters(self) -> dict[str, Any]:
        return {
            self.noise_parameter: getattr(self, self.noise_parameter),
            "votes_per_unit": self.votes_per_unit,
            "num_queries": self.num_queries,
            "num_classes": self.num_classes,
        }
