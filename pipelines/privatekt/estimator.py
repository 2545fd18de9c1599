"""PrivateKT: federated knowledge transfer through locally private labels on a few public examples per round.

Qi, Wu, Wu, He, Huang, Xie, "Differentially private knowledge transfer for
federated learning", Nature Communications 14, 3785 (2023), Algorithm 1.
Each round t:

1. **Importance sampling.** The server draws K public examples without
   replacement with probabilities softmax(H(x)), H the global model's predictive
   entropy (uncertain examples first).
2. **Local training and labelling.** A fraction of the clients, chosen at random,
   each train a copy of the global model on their own data, predict the K labels,
   and perturb them by K-ary randomized response (Eq. 2): each label is kept with
   probability β = (e^{ε/K} − 1)/(e^{ε/K} − 1 + C) (Lemma 1) and otherwise
   replaced by a uniform draw over the C classes. The report is ε-LDP for the client.
3. **Aggregation.** The server estimates the true label counts without bias
   (Eq. 3, :func:`privfed.accounting.randomized_response_estimate`) and takes their argmax
   (which equals the plurality of the noisy reports: the estimator is an
   increasing affine map of the counts), as the authors' code does.
4. **Knowledge buffer.** The K (example, label) pairs join a FIFO buffer of the
   last B rounds; the global model is fine-tuned on the whole buffer.
5. **Self-training.** M public examples are drawn by softmax(−H) (confident
   examples first) and the global model is trained on its own predictions there.

**Privacy.** Only step 2 touches private data. A client's reports in the rounds
it joins are composed (basic composition ε·T, and dp-accounting's RDP/PLD of the
randomized-response event); clients hold disjoint data, so the federation-level
guarantee for one client's data set is that client's own composition, i.e. the
parallel composition over clients (per-order maximum). Everything else (client
selection, sampling, fine-tuning, self-training) is the server's processing of
public data and of those reports. The unit is the client's whole data set
(``"party"``); the example-level guarantee has the same value. The paper argues
that the privacy loss does not accumulate over rounds because the public
examples change; privfed does not rely on that claim and notes it as the
authors' in the ledger.

**Randomness.** Each client draws its randomized-response coins (keep or not, and the replacement
label) from its own :class:`~privfed.accounting.NoiseSource`: secret, keyed from the client's OS entropy,
never derived from ``random_state``, sent or recorded; a DP-trained client draws its DP-SGD noise the same
way. ``random_state`` sets what no guarantee relies on: the importance sampling of the queries, the
choice of clients each round (the ledger composes every round a client joins and amplifies by no
sampling), the tie-breaks of the aggregate (post-processing of the reports), the self-training sample and
every model's initialisation and shuffles. ``noise_seed=`` makes the noise reproducible, for tests and
reproductions only: the ledger then records the seed and every ε is ∞ for its holders.

**Models.** With a :class:`~pipelines.models.torch_models.TorchClassifier` the global
model learns across rounds: clients continue training a copy of it, the server
continues training it (``fit_soft(..., warm_start=True)``), and self-training uses
its soft predictions, as in the paper. Any other scikit-learn classifier with
``predict_proba`` cannot be trained incrementally here: each selected client fits
a fresh model on its own data (no knowledge flows from the global model to the
clients), and each round the server refits the global model from scratch on the
buffer and then on the buffer plus the self-training examples with hard
pseudo-labels — a degraded variant, recorded in ``training_``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from ...accounting import RandomizedResponse
from ...accounting.noise_source import check_noise_seed
from ...accounting.silo_budget import SiloBudget
from ..data.party_data import check_parties
from ..data.party_schema import PartySchema, check_public_classes, local_schema_exchange
from ..models.fitting import FittedClassifier, is_torch_classifier
from ..protocol.checkpoint import RoundCheckpoint, estimator_checkpoint
from ..protocol.executor import PartyTask, run_party_tasks
from ..protocol.messages import DEFAULT_MAX_BYTES, Record, WireMessage
from ..protocol.progress import progress_bar
from ..protocol.run_parameters import records_run_parameters
from ..protocol.silo_gate import RefusalLog, admit, check_budgets, study_name
from .server import (
    KnowledgeBuffer,
    PrivateKTFit,
    PrivateKTServer,
    RoundExchange,
    check_privatekt_settings,
    client_releases,
    importance_sample,
    predictive_entropy,
)
from .steps import (
    PrivateKTTask,
    batched_party_steps,
    perturb_labels,
    privatekt_party_step,
    privatekt_planned_release,
)

__all__ = ["KnowledgeBuffer", "PrivateKT", "RoundExchange", "importance_sample", "perturb_labels", "predictive_entropy"]


def _party_step(task: PartyTask) -> list[WireMessage]:
    """One selected client's work in the in-process run (a joblib task): the party step on its own data."""
    X, y, message, name = task.data
    return privatekt_party_step(message, X, y, model=task.config, party=name)


class PrivateKT(ClassifierMixin, BaseEstimator):
    """PrivateKT: rounds of locally private labels on importance-sampled public data, a knowledge buffer, self-training.

    Parameters
    ----------
    model : estimator
        The global model: a :class:`~pipelines.models.torch_models.TorchClassifier` (learns
        across rounds) or any scikit-learn classifier with ``predict_proba``
        (refitted each round; see the module docstring).
    epsilon_per_round : float, default=5.0
        ε of one client's report of K labels (Lemma 1; β follows).
    queries_per_round : int, default=2
        K, public examples labelled per round.
    buffer_rounds : int, default=25
        B, rounds of knowledge the buffer keeps.
    self_training_size : int, default=1200
        M, public examples the global model self-trains on each round (0: none).
    rounds : int, default=100
        T.
    client_fraction : float, default=0.5
        Share of the clients selected each round (⌊fraction·n⌋, at least 1).
    local_epochs : int, default=5
        Epochs of a client's training on its data.
    fine_tune_epochs : int, default=4
        Epochs of the server's fine-tuning on the buffer (torch model).
    fine_tune_batch_size : int or None, default=None
        Mini-batch size of that fine-tuning (torch model); ``None``: the model's own ``batch_size``.
        The authors' code takes ``fine_tune_epochs`` steps on the whole buffer (Keras
        ``train_on_batch``): any value >= ``buffer_rounds * queries_per_round`` does the same.
    self_training_epochs : int, default=1
        Epochs of self-training (torch model).
    delta : float, default=1e-5
        δ of the per-client ε in ``client_epsilons_``.
    classes : array-like, default=None
        The federation's public label set. Given, every client checks its labels against it and withholds
        its size and labels from the coordinator: the schema exchange then reveals nothing and leaves the
        ledger, and with it the coordinator's ε is finite (the randomized-response reports and, with
        ``dp=`` and a public ``DPConfig(sample_rate=...)``, the DP-SGD reports are all it receives). None:
        the classes are the union of the clients' labels, and the coordinator learns each client's size and
        labels (recorded in the ledger).
    random_state : int, default=None
        Seeds what no guarantee relies on: query and client sampling, tie-breaks, models' initialisation.
    noise_seed : int or None, default=None
        None (the default): every client draws its randomized-response coins (and DP-SGD noise) from its
        own secret source. An int makes them reproducible (with ``random_state``, the whole run), for tests
        and reproductions only: the ledger records the seed and every ε of it is ∞ for its holders.
    n_jobs : int, default=1
        Clients trained in parallel within a round (joblib) when they are not batched (``batch_clients``).
    batch_clients : bool or "auto", default="auto"
        With a torch model, True trains the round's selected clients together: their copies
        of the global network stacked and trained in one batched computation
        (:func:`~privfed.pipelines.models.batched_training.train_copies`), each with its own
        seed, data, shuffle and optimizer — the same result as one after another up to
        floating-point rounding (and the same distribution with dropout). False trains
        them one after another (or in parallel with ``n_jobs``), as do DP-trained models (``dp=``): Opacus
        trains each client's copy on its own. "auto" batches where it was measured to pay
        (:func:`~privfed.pipelines.models.batched_training.batching_pays`): on a CUDA device, or a
        network without convolutions; a convolutional network on a CPU is trained one client
        after another (there, batching is no faster or slower).
    progress : bool or None, default=None
        A progress bar over the rounds: ``None`` on a terminal only, ``True`` always, ``False``
        never (see :mod:`privfed.pipelines.protocol.progress`).

    Attributes
    ----------
    classes_ : ndarray
    global_model_ : estimator or None
        The global model (None if it is a constant predictor). Its labels are
        indices into ``classes_`` given by ``global_classes_``.
    global_classes_ : ndarray
    keep_probability_ : float
        β.
    participation_ : ndarray of int, shape (n_clients,)
        Rounds each client joined: reports that reached the server (a client dropped in a round, in
        a Flower run, sent nothing that round and is not counted).
    dropouts_ : list of dict
        Each selected client whose report never arrived (Flower runs: timed out or disconnected):
        ``party``, ``round`` (1-based), ``step``. Empty in-process. Also listed in the ledger's note.
    bandwidth_ : dict of list of int
        Bytes per message kind and per client over the whole run: ``party-schema`` and
        ``privatekt-report`` (client → server), ``privatekt-task`` (server → client: the queries
        and the global network's parameters, each round the client was selected).
    client_epsilons_ : dict of ndarray
        Per client: ``"basic"`` (ε·T) and ``"tight"`` (the ledger's analysis at ``delta``).
    history_ : list of dict
        Per round: ``round``, ``clients`` (reports received), ``buffer_examples`` and, with ``eval_set``,
        ``accuracy``.
    training_ : str
        How the global model was trained (warm start or refit).
    ledger_ : accounting.Ledger
    refused_ : list of Refusal
        The clients whose silo budgets (``fit(..., budgets=...)``) refused, with the round and their reasons.
    evidence_ : dict of ndarray
        Empty: randomized response's ε does not depend on the data.

    Examples
    --------
    >>> from sklearn.datasets import load_digits
    >>> from sklearn.tree import DecisionTreeClassifier
    >>> X, y = load_digits(return_X_y=True)
    >>> parties = [(X[i:1200:6], y[i:1200:6]) for i in range(6)]
    >>> model = PrivateKT(DecisionTreeClassifier(max_depth=8), queries_per_round=20, self_training_size=50,
    ...                   rounds=3, random_state=0).fit(parties, X[1200:1500])
    >>> int(model.participation_.sum())  # 3 rounds × half of the 6 clients
    9
    """

    def __init__(
        self,
        model: Any,
        *,
        epsilon_per_round: float = 5.0,
        queries_per_round: int = 2,
        buffer_rounds: int = 25,
        self_training_size: int = 1200,
        rounds: int = 100,
        client_fraction: float = 0.5,
        local_epochs: int = 5,
        fine_tune_epochs: int = 4,
        fine_tune_batch_size: int | None = None,
        self_training_epochs: int = 1,
        delta: float = 1e-5,
        classes: Any = None,
        random_state: int | None = None,
        noise_seed: int | None = None,
        n_jobs: int = 1,
        batch_clients: bool | Literal["auto"] = "auto",
        progress: bool | None = None,
    ) -> None:
        self.model = model
        self.epsilon_per_round = epsilon_per_round
        self.queries_per_round = queries_per_round
        self.buffer_rounds = buffer_rounds
        self.self_training_size = self_training_size
        self.rounds = rounds
        self.client_fraction = client_fraction
        self.local_epochs = local_epochs
        self.fine_tune_epochs = fine_tune_epochs
        self.fine_tune_batch_size = fine_tune_batch_size
        self.self_training_epochs = self_training_epochs
        self.delta = delta
        self.classes = classes
        self.random_state = random_state
        self.noise_seed = noise_seed
        self.n_jobs = n_jobs
        self.batch_clients = batch_clients
        self.progress = progress

    def _validate(self, n_public: int | None = None) -> None:
        """Check the hyper-parameters (``privfed.federation`` calls this before starting anything)."""
        check_privatekt_settings(self, n_public)
        check_noise_seed(self.noise_seed)
        check_public_classes(self.classes)

    # --- fitting ---------------------------------------------------------------------------------------
    @records_run_parameters
    def fit(self, parties: Sequence[tuple[np.ndarray, np.ndarray]], public: np.ndarray, *,
            eval_set: tuple[np.ndarray, np.ndarray] | None = None,
            checkpoint: str | os.PathLike[str] | None = None,
            budgets: Sequence[SiloBudget | None] | None = None, study: str | None = None) -> PrivateKT:
        """Run ``rounds`` rounds of PrivateKT; ``eval_set=(X, y)`` records the accuracy after each round in
        ``history_``.

        A driver over the party steps of :mod:`privfed.pipelines.privatekt.steps` and the server of
        :mod:`privfed.pipelines.privatekt.server`: every message goes through its wire form, exactly as in
        a Flower run (``privfed.federation``).

        ``checkpoint``: an ``.npz`` path (torch global models only). The run's state is saved there
        after every round (:mod:`privfed.pipelines.protocol.checkpoint`: arrays and JSON, no pickle); if the
        file exists, the run continues after its last saved round, with the same result as an
        uninterrupted run when ``noise_seed`` is set (with secret noise, the default, the clients draw fresh
        secret coins after the resume: another draw of the same mechanism; no checkpoint holds a noise source).
        A checkpoint of other parameters, other data or another ``eval_set`` is refused.

        ``budgets``: one :class:`~privfed.SiloBudget` (or None) per party. A selected client with a budget
        charges its round's randomized response (:func:`~privfed.pipelines.privatekt.steps.privatekt_planned_release`)
        under ``study`` (default ``"PrivateKT fit"``) before touching its data; at the first round that would not
        fit it refuses and stops taking part (listed in ``refused_`` with that round, counted in this call's
        rounds). When every client has stopped the run raises
        :class:`~privfed.pipelines.protocol.silo_gate.RefusedRunError`.
        """
        parties, public = check_parties(parties, public)
        self._validate(len(public))
        budgets = check_budgets(budgets, len(parties), public_classes=self.classes)
        saved = self._checkpoint(checkpoint, parties, public, eval_set)
        names, schemas, classes = local_schema_exchange(parties, public.shape[1:], public_classes=self.classes)
        batched = self._batched(public, classes)
        study = study_name(study, "PrivateKT")
        refusals = RefusalLog(len(parties), "PrivateKT")

        def exchange(clients: Sequence[int], tasks: Sequence[PrivateKTTask]) -> tuple[dict[int, list[Record]], list]:
            refusals.round += 1
            clients, tasks = refusals.skip_stopped(clients, tasks)
            admitted = []
            for client, task in zip(clients, tasks):
                refusal = admit(budgets[client], privatekt_planned_release(task), study=study, pipeline="privatekt")
                if refusal is None:
                    admitted.append((client, task))
                else:
                    refusals.add(client, refusal.reason)
            clients, tasks = [client for client, _ in admitted], [task for _, task in admitted]
            data = [parties[client] for client in clients]
            messages: list[list[WireMessage]]
            if batched:
                messages = [[report] for report in batched_party_steps(tasks, data, model=self.model)]
            else:
                messages = run_party_tasks(
                    _party_step, [(X, y, task, names[client]) for (X, y), task, client in zip(data, tasks, clients)],
                    config=self.model, n_jobs=self.n_jobs, progress=False,
                )
            return {client: [m.to_record() for m in sent] for client, sent in zip(clients, messages)}, []

        self._fit_rounds(public, schemas, classes, names, exchange, eval_set=eval_set, checkpoint=saved)
        self.refused_ = refusals.refused
        return self

    def _batched(self, public: np.ndarray, classes: np.ndarray) -> bool:
        """Whether a round's clients are trained together (``batch_clients``; never for DP-SGD, whose copies
        Opacus trains one at a time, nor for a scikit-learn model)."""
        if not is_torch_classifier(self.model) or getattr(self.model, "dp", None) is not None:
            return False
        if self.batch_clients == "auto":
            from ..models.batched_training import batching_pays  # torch: imported only for a torch model

            return batching_pays(self.model, public, classes)
        return bool(self.batch_clients)

    def _checkpoint(self, path: str | os.PathLike[str] | None, parties: Sequence[tuple[np.ndarray, np.ndarray]],
                    public: np.ndarray, eval_set: tuple[np.ndarray, np.ndarray] | None) -> RoundCheckpoint | None:
        """The run's checkpoint file (None: none asked); refused for a model whose state is not plain arrays."""
        if path is not None and not is_torch_classifier(self.model):
            raise ValueError(
                f"checkpoint needs a TorchClassifier global model (its weights are saved as arrays), got "
                f"{type(self.model).__name__}: a scikit-learn model could only be saved by pickle, which privfed "
                "never loads")
        arrays = [public, *(array for X, y in parties for array in (X, y))]
        if eval_set is not None:
            arrays += [np.asarray(eval_set[0]), np.asarray(eval_set[1])]
        return estimator_checkpoint(path, self, arrays, ignore=("progress", "n_jobs"))

    def _fit_rounds(self, public: np.ndarray, schemas: Sequence[PartySchema], classes: np.ndarray,
                    names: Sequence[str], exchange: RoundExchange, *,
                    eval_set: tuple[np.ndarray, np.ndarray] | None = None,
                    max_bytes: int = DEFAULT_MAX_BYTES, checkpoint: RoundCheckpoint | None = None) -> PrivateKT:
        """Drive the server (:class:`~privfed.pipelines.privatekt.server.PrivateKTServer`) round by round, saving
        each round to ``checkpoint`` (shared with ``privfed.federation``); ``exchange`` moves the messages.

        A selected client that ``exchange`` reports missing is dropped for that round (listed in ``dropouts_``
        and in the ledger; its ε does not grow).
        """
        self.classes_ = classes
        server = PrivateKTServer(self, public, schemas, classes, names, max_bytes=max_bytes,
                                 saved=checkpoint.load() if checkpoint is not None else None)
        for round_index in progress_bar(range(server.rounds_done, self.rounds), progress=self.progress,
                                        desc="PrivateKT", unit="round"):
            server.round(round_index, exchange, eval_set)
            if checkpoint is not None:
                checkpoint.save(*server.state())
        self._set_fitted(server.result())
        return self

    def _set_fitted(self, fitted: PrivateKTFit) -> None:
        """Set the fitted attributes from the server's result."""
        self.global_model_, self.global_classes_ = fitted.global_model, fitted.global_classes
        self.keep_probability_, self.participation_ = fitted.keep_probability, fitted.participation
        self.dropouts_, self.history_, self.training_ = fitted.dropouts, fitted.history, fitted.training
        self.bandwidth_, self.ledger_, self.client_epsilons_ = fitted.bandwidth, fitted.ledger, fitted.client_epsilons
        self.evidence_: dict[str, np.ndarray] = {}

    # --- accounting ------------------------------------------------------------------------------------
    def client_releases(self, *, unit: str = "party") -> list[RandomizedResponse]:
        """Each participating client's composed randomized response (its reports over the rounds it joined)."""
        check_is_fitted(self, "participation_")
        return client_releases(self, self.participation_, len(self.classes_), unit=unit)

    # --- prediction ------------------------------------------------------------------------------------
    def _fitted_global(self) -> FittedClassifier:
        check_is_fitted(self, "global_classes_")
        return FittedClassifier(self.global_model_, self.global_classes_, len(self.classes_))

    @property
    def final_model_(self) -> Any:
        """The global model (what ``privfed.save_bundle(model, path)`` publishes)."""
        return self.global_model_

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Labels predicted by the global model."""
        return self.classes_[self._fitted_global().predict(np.asarray(X))]

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Class probabilities of the global model, columns in ``classes_`` order."""
        return self._fitted_global().predict_proba(np.asarray(X))
