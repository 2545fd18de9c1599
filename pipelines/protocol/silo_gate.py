"""The silo's gate: charge a planned release to the silo's own budget before its data is touched, or refuse.

A party step that was given a :class:`~privfed.accounting.silo_budget.SiloBudget` first works out, from its
task's public parameters alone, the mechanism its reply will be accounted under, and charges it
(:func:`admit`). The charge is written and fsynced before the party reads a row, so a crash afterwards
over-counts, never under-counts. When the release does not fit — or has no data-independent bound a silo
could charge — the party sends a :class:`BudgetRefusal` instead of its reply: the refusal's reason names the
budget and the release's public cost only, nothing derived from the data.

The coordinator lists the refusals (:class:`Refusal`, the fitted estimator's ``refused_``), goes on with the
other parties when the protocol allows, and raises :class:`RefusedRunError` naming them when it cannot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ...accounting.mechanism import Mechanism
from ...accounting.observers import OBSERVERS
from ...accounting.silo_budget import BudgetRefusedError, SiloBudget
from .messages import MessageError, Record, WireMessage

__all__ = [
    "SCHEMA_NOT_WITHHELD", "BudgetRefusal", "Refusal", "RefusalLog", "RefusedRunError", "admit", "check_budgets",
    "is_refusal", "refusals_in", "study_name",
]


@dataclass(frozen=True, eq=False)
class BudgetRefusal(WireMessage):
    """Party → server: the silo refused the planned release; ``reason`` names its budget and the release's public
    cost only (no data-derived content)."""

    KIND: ClassVar[str] = "budget-refusal"

    reason: str


@dataclass(frozen=True)
class Refusal:
    """A party that refused: its index among the parties, the round it refused at (1-based; 1 for one-shot
    pipelines) and the reason its silo gave."""

    party: int
    reason: str
    round: int = 1


class RefusedRunError(RuntimeError):
    """The run cannot go on without the parties whose silos refused; the message names them and why."""

    def __init__(self, refused: Sequence[Refusal], why: str) -> None:
        self.refused = tuple(refused)
        named = "; ".join(f"party {r.party} (round {r.round}): {r.reason}" for r in self.refused)
        super().__init__(f"{why}; refused by their silos' budgets: {named}")


#: Why a silo with a budget refuses a study without a public label set (in process and over Flower).
SCHEMA_NOT_WITHHELD = ("without the study's public label set (classes=, run config classes) the schema step "
                       "sends each party's size and label set to the coordinator in the clear (ε = ∞ against it), "
                       "which no silo budget can admit")


def check_budgets(budgets: Sequence[SiloBudget | None] | None, n_parties: int, *,
                  public_classes: object = None) -> list[SiloBudget | None]:
    """One budget (or None) per party; ``None`` for all when ``budgets`` is None.

    ``public_classes``: the estimator's ``classes`` (None when the parties' schemas reveal their labels and sizes).
    A budget is refused without them: the schema exchange would release what no budget can charge.
    """
    if budgets is None:
        return [None] * n_parties
    budgets = list(budgets)
    if len(budgets) != n_parties:
        raise ValueError(f"budgets must hold one SiloBudget or None per party ({n_parties}), got {len(budgets)}")
    for index, budget in enumerate(budgets):
        if budget is not None and not isinstance(budget, SiloBudget):
            raise TypeError(f"budgets[{index}] must be a privfed.SiloBudget or None, got {type(budget).__name__}")
    if public_classes is None and any(budget is not None for budget in budgets):
        raise ValueError(f"budgets need classes=: {SCHEMA_NOT_WITHHELD}")
    return budgets


def study_name(study: str | None, pipeline: str) -> str:
    """The study a fit charges its silos' budgets under: ``study``, or ``"<pipeline> fit"`` when None."""
    if study is None:
        return f"{pipeline} fit"
    if not isinstance(study, str) or not study.strip():
        raise ValueError(f"study must be a non-empty string or None, got {study!r}")
    return study


def admit(budget: SiloBudget | None, release: Mechanism | str | None, *, study: str, pipeline: str,
          observers: Sequence[str] = OBSERVERS) -> BudgetRefusal | None:
    """Charge ``release`` to ``budget`` before the data is touched; None when charged (or no budget, or nothing is
    released), else the refusal to send.

    ``release`` is the mechanism the party's reply is accounted under, built from the task's public parameters,
    None when the reply releases nothing of the data, or a one-line reason why the reply has no bound a silo could
    charge (it is then refused).
    """
    if budget is None or release is None:
        return None
    if isinstance(release, str):
        return BudgetRefusal(f"{pipeline}: {release}")
    try:
        budget.charge(release, study=study, pipeline=pipeline, observers=observers)
    except (BudgetRefusedError, ValueError) as error:  # over budget, tampered, or no data-independent bound
        return BudgetRefusal(f"{pipeline}: {error}")
    return None


def is_refusal(records: Sequence[Record], *, sender: str) -> bool:
    """Whether a party's reply is a refusal (which must come alone: :class:`MessageError` names ``sender``)."""
    if not any(record.kind == BudgetRefusal.KIND for record in records):
        return False
    if len(records) != 1:
        raise MessageError(f"{sender} sent {[r.kind for r in records]}: a {BudgetRefusal.KIND!r} comes alone")
    return True


def refusals_in(sent: Sequence[Sequence[Record]], names: Sequence[str] | None = None, *,
                round: int = 1) -> list[Refusal]:
    """The refusals among the records each party sent (in party order; ``names`` for the errors)."""
    names = [f"party {index}" for index in range(len(sent))] if names is None else names
    return [
        Refusal(index, BudgetRefusal.from_record(records[0], sender=name).reason, round)
        for index, (records, name) in enumerate(zip(sent, names))
        if is_refusal(records, sender=name)
    ]


@dataclass
class RefusalLog:
    """The refusals of an iterative run (PrivateKT's rounds): a party whose silo refused takes no further part,
    and the run cannot go on once every party has stopped."""

    n_parties: int
    pipeline: str
    refused: list[Refusal] = field(default_factory=list)
    round: int = 0

    @property
    def stopped(self) -> set[int]:
        """The parties that refused in an earlier round (or this one)."""
        return {refusal.party for refusal in self.refused}

    def skip_stopped(self, parties: Sequence[int], tasks: Sequence[Any]) -> tuple[list[int], list[Any]]:
        """This round's parties and their tasks, less those that stopped (they are sent nothing more)."""
        stopped = self.stopped
        kept = [(party, task) for party, task in zip(parties, tasks) if party not in stopped]
        return [party for party, _ in kept], [task for _, task in kept]

    def add(self, party: int, reason: str) -> None:
        """Record that ``party`` refused at the current round; raise :class:`RefusedRunError` once all have."""
        self.refused.append(Refusal(party, reason, self.round))
        if len(self.stopped) == self.n_parties:
            raise RefusedRunError(self.refused, f"{self.pipeline} cannot go on: every client has stopped")
