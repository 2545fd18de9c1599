"""The parties of an in-process Selective-FD run: their steps in this process, through the executor.

:class:`LocalClients` is the transport ``fit`` drives :class:`~privfed.pipelines.selective_fd.server.FDServer` over;
the Flower app implements the same calls over its SuperNodes. Each party's silo budget is charged before its step
reads its data (:mod:`~privfed.pipelines.selective_fd.planned_releases`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...accounting.mechanism import Mechanism
from ..protocol.executor import PartyTask, run_party_tasks
from ..protocol.messages import Record
from ..protocol.silo_gate import BudgetRefusal, Refusal, RefusedRunError, admit
from .dp_selector import DPDensityRatioSelector
from .kulsif import DensityRatioSelector
from .planned_releases import planned_publish_release, planned_round_release, planned_setup_release
from .steps import (
    FDClient,
    SelectiveFDEnsemble,
    SelectiveFDRound,
    SelectiveFDSetup,
    SelectiveFDShare,
    client_from_state,
    client_state,
    distill_step,
    setup_client,
    share_step,
    training_step,
)

__all__ = ["LocalClients"]


def _setup_task(task: PartyTask) -> FDClient:
    X, y, message, local_model, feature_map = task.data
    return setup_client(message, X, y, local_model=local_model, feature_map=feature_map, party=f"party {task.index}")


def _restore_task(task: PartyTask) -> FDClient:
    message, state, X, y, local_model, feature_map = task.data
    return client_from_state(message, state, X, y, local_model=local_model, feature_map=feature_map,
                             party=f"party {task.index}")


def _share_task(task: PartyTask) -> tuple[FDClient, SelectiveFDShare | None]:
    return share_step(*task.data)


def _distill_task(task: PartyTask) -> FDClient:
    return distill_step(*task.data)


class LocalClients:
    """The parties of an in-process run: their states in memory, their steps through the executor.

    The server's round loop talks to the parties through four calls — :meth:`setup` and :meth:`share`
    (returning the records each party sent), :meth:`distill`, :meth:`final_models` — which the Flower
    app implements over its SuperNodes. A message of None is not sent (the party stopped taking part).

    ``budgets`` (one :class:`~privfed.SiloBudget` or None per party): before a party's setup, round or publish
    step reads its data, the step's planned release (:func:`planned_setup_release`, :func:`planned_round_release`,
    :func:`planned_publish_release`) is charged to its budget under ``study``; a party whose silo refuses sends
    its :class:`~privfed.pipelines.protocol.silo_gate.BudgetRefusal` alone and its step does not run.
    """

    def __init__(self, parties: Sequence[tuple[np.ndarray, np.ndarray]], local_models: Sequence[Any], *,
                 feature_map: Callable | None, n_jobs: int, budgets: Sequence[Any] | None = None,
                 study: str = "", pipeline: str = "selective-fd") -> None:
        self.parties, self.local_models = list(parties), list(local_models)
        self.feature_map, self.n_jobs = feature_map, n_jobs
        self.budgets = list(budgets) if budgets is not None else [None] * len(self.parties)
        self.study, self.pipeline = study, pipeline
        self.clients: list[FDClient | None] = []

    def _run(self, fn: Callable, data: list) -> list:
        return run_party_tasks(fn, data, config=None, random_state=0, n_jobs=self.n_jobs, progress=False)

    def _gate(self, party: int, release: Mechanism | str | None) -> list[Record] | None:
        """The refusal party ``party`` sends instead of its step's reply (None: charged, or nothing to charge)."""
        refusal = admit(self.budgets[party], release, study=self.study, pipeline=self.pipeline)
        return None if refusal is None else [refusal.to_record()]

    def setup(self, messages: Sequence[SelectiveFDSetup]) -> list[list[Record]]:
        refusals = [self._gate(p, planned_setup_release(m)) if self.budgets[p] is not None else None
                    for p, m in enumerate(messages)]
        admitted = [p for p, refusal in enumerate(refusals) if refusal is None]
        fitted = self._run(_setup_task, [(*self.parties[p], messages[p], self.local_models[p], self.feature_map)
                                         for p in admitted])
        self.clients = [None] * len(messages)
        for p, client in zip(admitted, fitted):
            self.clients[p] = client
        return [refusal or [] for refusal in refusals]

    def share(self, messages: Sequence[SelectiveFDRound | None], round_index: int) -> list[list[Record]]:
        sent: list[list[Record]] = [[] for _ in messages]
        running = []
        for p, message in enumerate(messages):
            client = self.clients[p]
            if message is None or client is None:
                continue
            if self.budgets[p] is not None:
                refusal = self._gate(p, planned_round_release(client.setup, message,
                                                              local_model=self.local_models[p]))
                if refusal is not None:
                    sent[p] = refusal
                    continue
            running.append(p)
        outputs = self._run(_share_task, [(self.clients[p], messages[p]) for p in running])
        for p, (client, share) in zip(running, outputs):
            self.clients[p] = client
            sent[p] = [] if share is None else [share.to_record()]
        return sent

    def distill(self, messages: Sequence[SelectiveFDEnsemble | None], round_index: int) -> None:
        running = [p for p, message in enumerate(messages) if message is not None and self.clients[p] is not None]
        for p, client in zip(running, self._run(_distill_task, [(self.clients[p], messages[p]) for p in running])):
            self.clients[p] = client

    def models(self) -> list[Any]:
        """Every party's current model (the in-process run holds them all; None for a party refused at setup)."""
        return [None if client is None else client.model for client in self.clients]

    def final_models(self, client: int) -> tuple[list[Any], dict[str, list[int]]]:
        """Every party's model, and the bytes of what crossed the wire to publish them (nothing here); the
        refusal of the publishing party's silo as a :class:`~privfed.pipelines.protocol.silo_gate.RefusedRunError`."""
        if self.budgets[client] is not None:
            party = self.clients[client]
            if party is None:
                raise RefusedRunError([Refusal(client, "its silo refused the setup: it has no model")],
                                      f"client {client}'s model cannot be published")
            refusal = self._gate(client, planned_publish_release(party.setup, local_model=self.local_models[client],
                                                                 trainings=party.trainings))
            if refusal is not None:
                reason = BudgetRefusal.from_record(refusal[0], sender=f"party {client}").reason
                raise RefusedRunError([Refusal(client, reason)], f"client {client}'s model cannot be published")
        return self.models(), {}

    def states(self) -> list[Record]:
        """Every party's between-rounds state (:func:`client_state`'s state record), for a round checkpoint
        (budgets, and so refused parties, are never combined with a checkpoint: ``fit`` refuses that)."""
        if any(client is None for client in self.clients):
            raise RuntimeError("a round checkpoint holds every party's state; a party refused at setup has none")
        return [client_state(client)[1] for client in self.clients if client is not None]

    def restore(self, messages: Sequence[SelectiveFDSetup], states: Sequence[Record]) -> None:
        """Instead of :meth:`setup`: the parties as :meth:`states` left them, under the same setup messages."""
        self.clients = self._run(_restore_task, [(message, state, X, y, model, self.feature_map)
                                                 for (X, y), message, state, model
                                                 in zip(self.parties, messages, states, self.local_models)])

    def selectors(self) -> list[DensityRatioSelector | DPDensityRatioSelector | None]:
        return [None if client is None else client.selector for client in self.clients]

    def trainings(self) -> list[list[Record]]:
        """Every party's ``dp-training`` report (:func:`training_step`; empty for a model without DP-SGD or a party
        refused at setup)."""
        return [[] if client is None else training_step(client) for client in self.clients]
