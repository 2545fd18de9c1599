"""The protocol driver shared by Selective-FD, FedMD and independent learning: validation, ``fit``, prediction.

:class:`_FederatedDistillation` checks the hyper-parameters its subclasses share, turns a subclass's
``_protocol`` (:class:`~privfed.pipelines.selective_fd.steps.FDProtocol`) into a run of
:class:`~privfed.pipelines.selective_fd.server.FDServer` over the in-process parties
(:class:`~privfed.pipelines.selective_fd.local_clients.LocalClients`) — or, from ``privfed.federation``, over
Flower SuperNodes — and predicts with one client's model. The estimators are
:class:`~privfed.pipelines.selective_fd.estimator.SelectiveFD` and the baselines of
:mod:`~privfed.pipelines.selective_fd.baselines`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from ...accounting._checks import check_choice, check_delta, check_int_at_least, check_positive_finite
from ...accounting.noise_source import check_noise_seed
from ...accounting.silo_budget import SiloBudget
from ..data.party_data import check_parties, check_party_data
from ..data.party_schema import PartySchema, check_public_classes, local_schema_exchange
from ..protocol.checkpoint import RoundCheckpoint, estimator_checkpoint
from ..protocol.dp_ledger import effective_noise_seed
from ..protocol.executor import JoblibExecutor
from ..protocol.messages import DEFAULT_MAX_BYTES
from ..protocol.progress import check_progress, progress_bar
from ..protocol.run_parameters import records_run_parameters
from ..protocol.silo_gate import check_budgets, study_name
from .aggregation import SERVER_NOISE_MODES
from .local_clients import LocalClients
from .server import FDServer
from .steps import FDProtocol

LABELS = ("soft", "hard")
PRIVACY_MODES = (None, "rr", "gnmax", "confident-gnmax")


class _FederatedDistillation(ClassifierMixin, BaseEstimator):
    """The protocol shared by Selective-FD, FedMD and independent learning (subclasses give ``_protocol``)."""

    _estimator_name: ClassVar[str]

    def _protocol(self) -> FDProtocol:
        raise NotImplementedError

    def _validate(self) -> None:
        """Check the hyper-parameters (``privfed.federation`` calls this before starting anything)."""
        self._protocol()

    def _check_common(self) -> None:
        models = self.model if isinstance(self.model, (list, tuple)) else [self.model]
        if len(models) == 0:
            raise ValueError("model must be an estimator or a non-empty sequence of estimators (one per client)")
        for index, model in enumerate(models):
            if not (hasattr(model, "fit") and hasattr(model, "predict_proba") and hasattr(model, "get_params")):
                raise TypeError(
                    f"model{'' if len(models) == 1 else f'[{index}]'} must be a scikit-learn-style classifier "
                    f"with fit, predict_proba and get_params, got {model!r}"
                )
        check_int_at_least("rounds", self.rounds, 1)
        check_int_at_least("local_steps", self.local_steps, 1)
        check_int_at_least("client", self.client, 0)
        JoblibExecutor(n_jobs=self.n_jobs, progress=False)  # validates n_jobs
        if self.callback is not None and not callable(self.callback):
            raise TypeError(f"callback must be None or a callable (estimator, round) -> None, got {self.callback!r}")
        check_progress(self.progress)
        check_noise_seed(self.noise_seed)
        check_public_classes(self.classes)

    def _client_models(self, n_clients: int) -> list[Any]:
        if isinstance(self.model, (list, tuple)):
            if len(self.model) != n_clients:
                raise ValueError(
                    f"model lists {len(self.model)} estimators for {n_clients} clients; give one per client"
                )
            return list(self.model)
        return [self.model] * n_clients

    @records_run_parameters
    def fit(self, parties: Sequence[tuple[np.ndarray, np.ndarray]], public: np.ndarray | None = None, *,
            checkpoint: str | os.PathLike[str] | None = None,
            budgets: Sequence[SiloBudget | None] | None = None, study: str | None = None) -> _FederatedDistillation:
        """Run the protocol on the clients' private ``(X, y)`` data and the unlabeled proxy set ``public``.

        A driver over the party steps of :mod:`privfed.pipelines.selective_fd.steps` and the server of
        :mod:`privfed.pipelines.selective_fd.server`: the parties' replies go through their wire form,
        exactly as in a Flower run (``privfed.federation``).

        ``checkpoint``: an ``.npz`` path. The run's state (every client's weights, optimizer state,
        selector and distilled examples, the server's random state and history) is saved there after
        every round (:mod:`privfed.pipelines.protocol.checkpoint`: arrays and JSON, no pickle); if the file
        exists, the run continues after its last saved round — with ``noise_seed``, to the same result as an
        uninterrupted run; with secret noise (the default), the remaining rounds draw fresh secret noise (a
        checkpoint never holds a noise generator's state). A checkpoint of other parameters or other data is
        refused. DP-SGD-trained client models keep
        their rounds' releases in it, so a resumed run's ledger counts every round's training.

        ``budgets``: one :class:`~privfed.SiloBudget` (or None) per party, charged under ``study`` (default
        ``"<pipeline> fit"``). Before a party's step reads its data, the step's release is charged to its budget
        from public parameters: at setup the DP selector's Gaussian sum (the raw-data selector has no bound: refused);
        each round its randomized-response report (party level) or, without randomized response, its round of
        DP-SGD (predictions in the clear from a model without DP-SGD have no bound: refused); when its model is
        published, its rounds' DP-SGD unless every round already charged it (a model trained without DP-SGD:
        refused). A party whose silo refuses stops taking part at that round (listed in ``refused_``; it shares
        nothing from then on); the run raises :class:`~privfed.pipelines.protocol.silo_gate.RefusedRunError` when every
        party has stopped or the published model's silo refuses. Budgets cannot be combined with ``checkpoint``.
        """
        budgets = check_budgets(budgets, len(parties), public_classes=self.classes)
        protocol = self._protocol()
        pipeline = protocol.name.lower().replace(" ", "-")
        study = study_name(study, pipeline)
        if checkpoint is not None and any(budget is not None for budget in budgets):
            raise ValueError("checkpoint cannot be combined with budgets: a resumed run would not know which silos "
                             "stopped taking part; pass one or the other")
        if protocol.shares:
            if public is None:
                raise ValueError(f"{type(self).__name__} needs the unlabeled proxy set: fit(parties, public)")
            parties, public = check_parties(parties, public)
        else:
            parties = check_party_data(parties)
        arrays = [array for X, y in parties for array in (X, y)] + ([] if public is None else [public])
        saved = estimator_checkpoint(checkpoint, self, arrays, ignore=("progress", "n_jobs", "callback"))
        feature_shape = parties[0][0].shape[1:] if public is None else public.shape[1:]
        names, schemas, classes = local_schema_exchange(parties, feature_shape, public_classes=self.classes)
        clients = LocalClients(parties, self._client_models(len(parties)),
                               feature_map=getattr(self, "feature_map", None), n_jobs=self.n_jobs, budgets=budgets,
                               study=study, pipeline=pipeline)
        return self._run(clients, protocol, classes, public, schemas, names, max_bytes=DEFAULT_MAX_BYTES,
                         checkpoint=saved)

    def _run(self, clients: Any, protocol: FDProtocol, classes: np.ndarray, public: np.ndarray | None,
             schemas: Sequence[PartySchema], names: Sequence[str], *, max_bytes: int,
             checkpoint: RoundCheckpoint | None = None) -> _FederatedDistillation:
        """Drive the server (:class:`~privfed.pipelines.selective_fd.server.FDServer`) over ``clients``
        (:class:`~privfed.pipelines.selective_fd.local_clients.LocalClients` or the Flower app's SuperNodes) round by
        round, calling ``callback`` and saving ``checkpoint`` (in-process clients only) after every round."""
        n_parties = len(schemas)
        if self.client >= n_parties:
            raise ValueError(f"client must index one of the {n_parties} clients (0..{n_parties - 1}), "
                             f"got {self.client}")
        self.classes_ = classes
        server = FDServer(protocol, classes, public, schemas, names, models=self._client_models(n_parties),
                          client=self.client, delta=self.delta, random_state=self.random_state, max_bytes=max_bytes,
                          checkpoint=checkpoint, noise_seed=effective_noise_seed(self))
        self.refused_ = server.refusals.refused
        server.start(clients)
        self.history_, self.selectors_ = server.history, clients.selectors()
        for round_index in progress_bar(range(server.rounds_done, protocol.rounds), progress=self.progress,
                                        desc=protocol.name, unit="round"):
            server.round(round_index, clients)
            if self.callback is not None:
                self.models_ = clients.models()
                self.callback(self, round_index)
            if checkpoint is not None:  # after the callback: a resumed run repeats an interrupted callback's round
                checkpoint.save(*server.state(clients))
        fitted = server.finish(clients)
        stopped_at = {refusal.party: refusal.round for refusal in self.refused_}
        self.participation_ = np.array([stopped_at.get(party, protocol.rounds + 1) - 1 for party in range(n_parties)])
        self.models_, self.n_rounds_, self.bandwidth_ = fitted.models, fitted.n_rounds, fitted.bandwidth
        self.ledger_, self.evidence_ = fitted.ledger, fitted.evidence
        return self

    # --- prediction ----------------------------------------------------------------------------------
    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Class probabilities of client ``client``'s model, columns in ``classes_`` order."""
        check_is_fitted(self, "models_")
        return np.asarray(self.models_[self.client].predict_proba(np.asarray(X)), dtype=float)

    @property
    def final_model_(self) -> Any:
        """The chosen client's model (``client``) (what ``privfed.save_bundle(model, path)`` publishes)."""
        return self.models_[self.client]

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Labels predicted by client ``client``'s model."""
        return self.classes_[self.predict_proba(X).argmax(axis=1)]

    def client_scores(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Accuracy of every client's model on ``(X, y)`` (the paper reports their mean)."""
        check_is_fitted(self, "models_")
        X, y = np.asarray(X), np.asarray(y)
        return np.array([np.mean(self.classes_[np.asarray(m.predict_proba(X)).argmax(axis=1)] == y)
                         for m in self.models_])


def _check_distillation(estimator: Any) -> None:
    check_int_at_least("distill_steps", estimator.distill_steps, 1)
    check_int_at_least("proxy_batch", estimator.proxy_batch, 1)
    check_choice("labels", estimator.labels, LABELS)
    check_positive_finite("temperature", estimator.temperature)
    check_delta(estimator.delta)
    if estimator.privacy not in PRIVACY_MODES:
        raise ValueError(f"privacy must be one of {PRIVACY_MODES}, got {estimator.privacy!r}")
    if estimator.privacy is not None and estimator.labels != "hard":
        raise ValueError(
            f"privacy={estimator.privacy!r} shares hard labels; set labels='hard' (got {estimator.labels!r})"
        )
    if estimator.privacy == "rr":
        if estimator.epsilon_per_round is None:
            raise ValueError("privacy='rr' needs epsilon_per_round (ε per client per round, > 0), got None")
        check_positive_finite("epsilon_per_round", estimator.epsilon_per_round)
    elif estimator.epsilon_per_round is not None:
        raise ValueError(f"epsilon_per_round applies to privacy='rr' only, got it with privacy={estimator.privacy!r}")
    if estimator.privacy in SERVER_NOISE_MODES:
        if estimator.sigma is None:
            raise ValueError(f"privacy={estimator.privacy!r} needs sigma (the std of the Gaussian noise per vote "
                             "count, > 0), got None")
        check_positive_finite("sigma", estimator.sigma)
    elif estimator.sigma is not None:
        raise ValueError(f"sigma applies to privacy='gnmax' or 'confident-gnmax' only, got it with "
                         f"privacy={estimator.privacy!r}")
    for name in ("threshold", "sigma_threshold"):
        value = getattr(estimator, name, None)
        if estimator.privacy == "confident-gnmax":
            if value is None:
                raise ValueError(f"privacy='confident-gnmax' needs {name} (in votes, > 0), got None")
            check_positive_finite(name, value)
        elif value is not None:
            raise ValueError(f"{name} applies to privacy='confident-gnmax' only, got it with "
                             f"privacy={estimator.privacy!r}")
