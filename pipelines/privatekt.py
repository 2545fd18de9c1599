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

**Models.** With a :class:`~pipelines.torch_models.TorchClassifier` the global
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

import math
import os
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
from scipy.special import softmax
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.utils.validation import check_is_fitted

from ..accounting import (
    DPSGD,
    Ledger,
    RandomizedResponse,
    account,
    compose_dpsgd,
    compose_parallel,
    randomized_response_keep_probability,
)
from ..accounting._checks import (
    check_delta,
    check_int_at_least,
    check_positive_finite,
    check_probability,
)
from ..accounting.fingerprint import data_fingerprint
from ._dp_ledger import record_local_training
from ._models import FittedClassifier, fit_classifier
from ._random import as_seed_sequence
from .checkpoint import RoundCheckpoint, run_fingerprint
from .executor import PartyTask, run_party_tasks
from .messages import DEFAULT_MAX_BYTES, Record, WireMessage, record_sizes
from .party_data import check_parties
from .party_schema import PartySchema, describe_party, federation_classes, record_schema_exchange
from .privatekt_steps import (
    PrivateKTTask,
    aggregate_reports,
    batched_party_steps,
    is_torch_classifier,
    network_from_parameters,
    network_parameters,
    perturb_labels,
    privatekt_party_step,
    privatekt_tasks,
    receive_privatekt_replies,
)
from .progress import check_progress, progress_bar

__all__ = ["KnowledgeBuffer", "PrivateKT", "RoundExchange", "importance_sample", "perturb_labels", "predictive_entropy"]

#: How a driver moves one round's messages: given the selected clients (indices, sorted) and their tasks,
#: return the records each client that replied sent (by client index) and the clients that did not reply.
RoundExchange = Callable[[Sequence[int], Sequence[PrivateKTTask]], tuple[dict[int, list[Record]], list[int]]]


def predictive_entropy(probabilities: np.ndarray) -> np.ndarray:
    """H(x) = −Σ_c p_c log p_c per row of an (n, C) probability matrix (0 log 0 = 0)."""
    p = np.asarray(probabilities, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.sum(np.where(p > 0, p * np.log(p), 0.0), axis=1)


def importance_sample(
    entropy: np.ndarray, size: int, rng: np.random.Generator, *, uncertain: bool = True
) -> np.ndarray:
    """``size`` distinct indices drawn with probabilities softmax(H) (``uncertain=True``) or softmax(−H).

    PrivateKT's importance sampling of the knowledge-transfer examples (uncertain
    first) and its self-training sampling (confident first).
    """
    scores = np.asarray(entropy, dtype=float)
    size = check_int_at_least("size", size, 0)
    if size > len(scores):
        raise ValueError(f"size must be at most the number of examples ({len(scores)}), got {size}")
    return rng.choice(len(scores), size=size, replace=False, p=softmax(scores if uncertain else -scores))


class KnowledgeBuffer:
    """FIFO buffer of the aggregated knowledge of the last ``rounds`` rounds (PrivateKT §"knowledge buffer")."""

    def __init__(self, rounds: int) -> None:
        self.rounds = check_int_at_least("rounds", rounds, 1)
        self._entries: deque[tuple[np.ndarray, np.ndarray]] = deque(maxlen=self.rounds)

    def __len__(self) -> int:
        """Rounds currently held (at most ``rounds``)."""
        return len(self._entries)

    def push(self, indices: np.ndarray, labels: np.ndarray) -> None:
        """Add one round's public-example indices and aggregated labels, dropping the oldest round when full."""
        self._entries.append((np.asarray(indices, dtype=np.int64), np.asarray(labels, dtype=np.int64)))

    def entries(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The held rounds' (indices, labels), oldest first."""
        return list(self._entries)

    def contents(self) -> tuple[np.ndarray, np.ndarray]:
        """All held (indices, labels), oldest round first."""
        return (np.concatenate([i for i, _ in self._entries]), np.concatenate([label for _, label in self._entries]))


def _party_step(task: PartyTask) -> list[WireMessage]:
    """One selected client's work in the in-process run (a joblib task): the party step on its own data."""
    X, y, message, name = task.data
    return privatekt_party_step(message, X, y, model=task.config, party=name)


class PrivateKT(ClassifierMixin, BaseEstimator):
    """PrivateKT: rounds of locally private labels on importance-sampled public data, a knowledge buffer, self-training.

    Parameters
    ----------
    model : estimator
        The global model: a :class:`~pipelines.torch_models.TorchClassifier` (learns
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
    random_state : int, default=None
    n_jobs : int, default=1
        Clients trained in parallel within a round (joblib) when they are not batched (``batch_clients``).
    batch_clients : bool or "auto", default="auto"
        With a torch model, True trains the round's selected clients together: their copies
        of the global network stacked and trained in one batched computation
        (:func:`~privfed.pipelines.batched_training.train_copies`), each with its own
        seed, data, shuffle and optimizer — the same result as one after another up to
        floating-point rounding (and the same distribution with dropout). False trains
        them one after another (or in parallel with ``n_jobs``), as do DP-trained models (``dp=``): Opacus
        trains each client's copy on its own. "auto" batches where it was measured to pay
        (:func:`~privfed.pipelines.batched_training.batching_pays`): on a CUDA device, or a
        network without convolutions; a convolutional network on a CPU is trained one client
        after another (there, batching is no faster or slower).
    progress : bool or None, default=None
        A progress bar over the rounds: ``None`` on a terminal only, ``True`` always, ``False``
        never (see :mod:`privfed.pipelines.progress`).

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
        random_state: int | None = None,
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
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.batch_clients = batch_clients
        self.progress = progress

    # --- validation ---------------------------------------------------------------------------------------
    def _validate(self, n_public: int | None = None) -> None:
        if not (
            hasattr(self.model, "fit") and hasattr(self.model, "predict_proba") and hasattr(self.model, "get_params")
        ):
            raise TypeError(
                f"model must be a scikit-learn-style classifier with fit and predict_proba, got {self.model!r}"
            )
        check_positive_finite("epsilon_per_round", self.epsilon_per_round)
        check_int_at_least("queries_per_round", self.queries_per_round, 1)
        check_int_at_least("buffer_rounds", self.buffer_rounds, 1)
        check_int_at_least("self_training_size", self.self_training_size, 0)
        check_int_at_least("rounds", self.rounds, 1)
        check_probability("client_fraction", self.client_fraction, open_high=False)
        for name in ("local_epochs", "fine_tune_epochs", "self_training_epochs"):
            check_int_at_least(name, getattr(self, name), 1)
        if self.fine_tune_batch_size is not None:
            check_int_at_least("fine_tune_batch_size", self.fine_tune_batch_size, 1)
            if not is_torch_classifier(self.model):
                raise ValueError(
                    f"fine_tune_batch_size applies to a torch global model only (fine-tuned in mini-batches), got "
                    f"{self.fine_tune_batch_size} with {type(self.model).__name__}; leave it None")
        check_delta(self.delta)
        check_progress(self.progress)
        if not (isinstance(self.batch_clients, bool) or (isinstance(self.batch_clients, str)
                                                          and self.batch_clients == "auto")):
            raise TypeError(f"batch_clients must be True, False or 'auto', got {self.batch_clients!r}")
        for name in ("queries_per_round", "self_training_size"):
            if n_public is not None and getattr(self, name) > n_public:
                raise ValueError(f"{name} must be at most the public set's size {n_public}, got {getattr(self, name)}")

    # --- fitting ---------------------------------------------------------------------------------------
    def fit(self, parties: Sequence[tuple[np.ndarray, np.ndarray]], public: np.ndarray, *,
            eval_set: tuple[np.ndarray, np.ndarray] | None = None,
            checkpoint: str | os.PathLike[str] | None = None) -> PrivateKT:
        """Run ``rounds`` rounds of PrivateKT; ``eval_set=(X, y)`` records the accuracy after each round in
        ``history_``.

        A driver over the party and server steps of :mod:`privfed.pipelines.privatekt_steps`: every
        message goes through its wire form, exactly as in a Flower run (``privfed.federation``).

        ``checkpoint``: an ``.npz`` path (torch global models only). The run's state is saved there
        after every round (:mod:`privfed.pipelines.checkpoint`: arrays and JSON, no pickle); if the
        file exists, the run continues after its last saved round, with the same result as an
        uninterrupted run. A checkpoint of other parameters, other data or another ``eval_set`` is refused.
        """
        parties, public = check_parties(parties, public)
        self._validate(len(public))
        saved = self._checkpoint(checkpoint, parties, public, eval_set)
        names = [f"party {index}" for index in range(len(parties))]
        schemas = [
            PartySchema.from_record(describe_party(X, y).to_record(), sender=name)
            for (X, y), name in zip(parties, names)
        ]
        classes = federation_classes(schemas, public.shape[1:], names)
        batched = self._batched(public, classes)

        def exchange(clients: Sequence[int], tasks: Sequence[PrivateKTTask]) -> tuple[dict[int, list[Record]], list]:
            data = [parties[client] for client in clients]
            if batched:
                messages = [[report] for report in batched_party_steps(tasks, data, model=self.model)]
            else:
                messages = run_party_tasks(
                    _party_step, [(X, y, task, names[client]) for (X, y), task, client in zip(data, tasks, clients)],
                    config=self.model, n_jobs=self.n_jobs, progress=False,
                )
            return {client: [m.to_record() for m in sent] for client, sent in zip(clients, messages)}, []

        return self._fit_rounds(public, schemas, classes, names, exchange, eval_set=eval_set, checkpoint=saved)

    def _batched(self, public: np.ndarray, classes: np.ndarray) -> bool:
        """Whether a round's clients are trained together (``batch_clients``; never for DP-SGD, whose copies
        Opacus trains one at a time, nor for a scikit-learn model)."""
        if not is_torch_classifier(self.model) or getattr(self.model, "dp", None) is not None:
            return False
        if self.batch_clients == "auto":
            from .batched_training import batching_pays  # torch: imported only for a torch model

            return batching_pays(self.model, public, classes)
        return bool(self.batch_clients)

    def _checkpoint(self, path: str | os.PathLike[str] | None, parties: Sequence[tuple[np.ndarray, np.ndarray]],
                    public: np.ndarray, eval_set: tuple[np.ndarray, np.ndarray] | None) -> RoundCheckpoint | None:
        """The run's checkpoint file (None: none asked); refused for a model whose state is not plain arrays."""
        if path is None:
            return None
        if not is_torch_classifier(self.model):
            raise ValueError(
                f"checkpoint needs a TorchClassifier global model (its weights are saved as arrays), got "
                f"{type(self.model).__name__}: a scikit-learn model could only be saved by pickle, which privfed "
                "never loads")
        arrays = [public, *(array for X, y in parties for array in (X, y))]
        if eval_set is not None:
            arrays += [np.asarray(eval_set[0]), np.asarray(eval_set[1])]
        parameters = {k: v for k, v in self.get_params(deep=False).items() if k not in ("progress", "n_jobs")}
        return RoundCheckpoint.at(path, run_fingerprint(parameters, arrays))

    def _fit_rounds(self, public: np.ndarray, schemas: Sequence[PartySchema], classes: np.ndarray,
                    names: Sequence[str], exchange: RoundExchange, *,
                    eval_set: tuple[np.ndarray, np.ndarray] | None = None,
                    max_bytes: int = DEFAULT_MAX_BYTES, checkpoint: RoundCheckpoint | None = None) -> PrivateKT:
        """The server side of every round (shared with ``privfed.federation``); ``exchange`` moves the messages.

        A selected client that ``exchange`` reports missing is dropped for that round: its report was
        never released, so it neither joins the aggregate nor counts in ``participation_`` (its ε does
        not grow); it is listed in ``dropouts_`` and in the ledger. A round without any report adds
        nothing to the buffer and leaves the global model as it was.
        """
        self.classes_ = classes
        n_classes, n_clients = len(classes), len(schemas)
        per_round = max(1, math.floor(self.client_fraction * n_clients))
        K = self.queries_per_round
        beta = randomized_response_keep_probability(self.epsilon_per_round, num_classes=n_classes, labels_per_report=K)
        warm = is_torch_classifier(self.model)
        saved = checkpoint.load() if checkpoint is not None else None
        seed_sequence = (np.random.SeedSequence(int(saved[0]["entropy"])) if saved is not None
                         else as_seed_sequence(self.random_state))
        round_seeds = seed_sequence.spawn(self.rounds)
        rng = np.random.default_rng(seed_sequence.spawn(1)[0])
        init_seed = int(rng.integers(2**31))

        global_: FittedClassifier | None = None
        buffer = KnowledgeBuffer(self.buffer_rounds)
        self.participation_ = np.zeros(n_clients, dtype=np.int64)
        trainings: list[list[Any]] = [[] for _ in range(n_clients)]  # each client's DP-SGD releases, by round
        traffic = {kind: np.asarray(sizes) for kind, sizes in record_sizes([[s.to_record()] for s in schemas]).items()}
        self.history_: list[dict[str, Any]] = []
        self.dropouts_: list[dict[str, Any]] = []
        first_round = 0
        if saved is not None:
            first_round, global_, trainings, traffic = self._restore(saved, rng, buffer, public, n_classes)
            if global_ is not None:
                self.global_model_, self.global_classes_ = global_.estimator, global_.classes
        for round_index in progress_bar(range(first_round, self.rounds), progress=self.progress, desc="PrivateKT",
                                        unit="round"):
            entropy = np.zeros(len(public)) if global_ is None else predictive_entropy(global_.predict_proba(public))
            queries = importance_sample(entropy, K, rng, uncertain=True)
            clients = [int(client) for client in np.sort(rng.choice(n_clients, size=per_round, replace=False))]
            parameters = (network_parameters(global_.estimator) if warm and global_ is not None
                          else np.zeros(0, dtype=np.float32))
            tasks = privatekt_tasks(queries=public[queries], classes=classes, parameters=parameters,
                                    keep_probability=beta, local_epochs=self.local_epochs, init_seed=init_seed,
                                    round_seed=round_seeds[round_index], n_clients=len(clients))
            received, missing = exchange(clients, tasks)
            delivered = [(client, task) for client, task in zip(clients, tasks) if client in received]
            reports, releases = receive_privatekt_replies(
                [task for _, task in delivered], [received[c] for c, _ in delivered], [names[c] for c, _ in delivered],
                max_bytes=max_bytes, model=self.model)
            self.dropouts_ += [{"party": names[c], "round": round_index + 1, "step": "train"} for c in missing]
            sent = [[] for _ in range(n_clients)]
            for client, task in zip(clients, tasks):
                sent[client].append(task.to_record())  # the task went down, whether or not a report came back
            for (client, _), release in zip(delivered, releases):
                sent[client] += received[client]  # the report, and the DP-SGD release when DP-trained
                self.participation_[client] += 1
                trainings[client].append(release)
            for kind, sizes in record_sizes(sent).items():
                traffic[kind] = traffic.get(kind, 0) + np.asarray(sizes)
            if reports:
                buffer.push(queries, aggregate_reports(reports, n_classes=n_classes, keep_probability=beta, rng=rng))
                global_ = self._server_update(global_, buffer, public, n_classes, rng, init_seed, warm)
                self.global_model_, self.global_classes_ = global_.estimator, global_.classes
            record = {"round": round_index + 1, "clients": len(reports),
                      "buffer_examples": len(buffer.contents()[0]) if len(buffer) else 0}
            if eval_set is not None and global_ is not None:
                record["accuracy"] = float(np.mean(self.predict(eval_set[0]) == np.asarray(eval_set[1])))
            self.history_.append(record)
            if checkpoint is not None:
                checkpoint.save(*self._state(round_index + 1, seed_sequence, rng, global_, buffer, trainings, traffic))
        if global_ is None:
            raise RuntimeError(f"no client report arrived in any of the {self.rounds} rounds; there is no model")

        self.keep_probability_ = beta
        self.training_ = ("warm start: clients and server continue training the global TorchClassifier"
                          if warm else "refit: clients fit fresh models; the server refits the global model each round")
        self.bandwidth_ = {kind: [int(size) for size in traffic[kind]] for kind in sorted(traffic)}
        self.ledger_ = self._ledger(public, n_classes, int(seed_sequence.entropy), trainings)
        self.evidence_: dict[str, np.ndarray] = {}
        return self

    # --- checkpoints -----------------------------------------------------------------------------------
    def _state(self, rounds_done: int, seed_sequence: np.random.SeedSequence, rng: np.random.Generator,
               global_: FittedClassifier | None, buffer: KnowledgeBuffer, trainings: list[list[Any]],
               traffic: dict[str, np.ndarray]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The server's state after ``rounds_done`` rounds, as (JSON state, arrays) for :class:`RoundCheckpoint`."""
        state = {
            "rounds_done": rounds_done, "entropy": str(seed_sequence.entropy), "rng": rng.bit_generator.state,
            "buffer_rounds": len(buffer), "history": self.history_, "dropouts": self.dropouts_,
            "trainings": [[None if release is None else {"parameters": release.parameters(), "unit": release.unit}
                           for release in rounds] for rounds in trainings],
        }
        arrays = {"participation": self.participation_, **{f"traffic.{kind}": sizes for kind, sizes in traffic.items()}}
        for index, (indices, labels) in enumerate(buffer.entries()):
            arrays[f"buffer.{index}.indices"], arrays[f"buffer.{index}.labels"] = indices, labels
        if global_ is not None:
            arrays["global_parameters"] = network_parameters(global_.estimator)
        return state, arrays

    def _restore(self, saved: tuple[dict[str, Any], dict[str, np.ndarray]], rng: np.random.Generator,
                 buffer: KnowledgeBuffer, public: np.ndarray, n_classes: int,
                 ) -> tuple[int, FittedClassifier | None, list[list[Any]], dict[str, np.ndarray]]:
        """Put a checkpoint's state back (``rng`` and ``buffer`` in place, attributes on ``self``); returns
        (rounds done, global model, DP-SGD releases, traffic)."""
        state, arrays = saved
        rng.bit_generator.state = state["rng"]
        for index in range(state["buffer_rounds"]):
            buffer.push(arrays[f"buffer.{index}.indices"], arrays[f"buffer.{index}.labels"])
        self.history_, self.dropouts_ = state["history"], state["dropouts"]
        self.participation_ = arrays["participation"].astype(np.int64)
        trainings = [[None if release is None else DPSGD.from_parameters(release["parameters"], unit=release["unit"])
                      for release in rounds] for rounds in state["trainings"]]
        traffic = {name.removeprefix("traffic."): sizes
                   for name, sizes in arrays.items() if name.startswith("traffic.")}
        global_ = None
        if "global_parameters" in arrays:
            network = network_from_parameters(self.model, arrays["global_parameters"], n_classes, public.shape[1:])
            global_ = FittedClassifier(network, np.arange(n_classes), n_classes)
        return int(state["rounds_done"]), global_, trainings, traffic

    def _server_update(self, global_: FittedClassifier | None, buffer: KnowledgeBuffer, public: np.ndarray,
                       n_classes: int, rng: np.random.Generator, init_seed: int, warm: bool) -> FittedClassifier:
        """Fine-tune on the buffer, then self-train on M confident public examples (Algorithm 1, lines 12–16)."""
        indices, labels = buffer.contents()
        classes = np.arange(n_classes)
        M = self.self_training_size
        if warm:
            if global_ is None:  # round 1: the network the clients started from (same seed)
                model = clone(self.model).set_params(random_state=init_seed)
            else:
                model = global_.estimator.set_params(random_state=int(rng.integers(2**31)))
            # The server trains on public data only (labels from the clients' reports): no DP-SGD needed.
            batch_size = model.get_params()["batch_size"]
            model.set_params(epochs=self.fine_tune_epochs, dp=None,
                             batch_size=self.fine_tune_batch_size or batch_size)
            model.fit_soft(public[indices], np.eye(n_classes)[labels], loss="kl", classes=classes, warm_start=True)
            model.set_params(batch_size=batch_size)
            if M:
                proba = model.predict_proba(public)
                chosen = importance_sample(predictive_entropy(proba), M, rng, uncertain=False)
                model.set_params(epochs=self.self_training_epochs, random_state=int(rng.integers(2**31)))
                model.fit_soft(public[chosen], proba[chosen], loss="kl", classes=classes, warm_start=True)
            return FittedClassifier(model, classes, n_classes)
        fitted = fit_classifier(self.model, public[indices], labels, n_classes=n_classes, seed=int(rng.integers(2**31)))
        if M:
            proba = fitted.predict_proba(public)
            chosen = importance_sample(predictive_entropy(proba), M, rng, uncertain=False)
            fitted = fit_classifier(
                self.model, np.concatenate([public[indices], public[chosen]]),
                np.concatenate([labels, proba[chosen].argmax(axis=1)]), n_classes=n_classes,
                seed=int(rng.integers(2**31)),
            )
        return fitted

    # --- accounting ------------------------------------------------------------------------------------
    def client_releases(self, *, unit: str = "party") -> list[RandomizedResponse]:
        """Each participating client's composed randomized response (its reports over the rounds it joined)."""
        check_is_fitted(self, "participation_")
        return [
            RandomizedResponse(len(self.classes_), epsilon=float(self.epsilon_per_round),
                               labels_per_report=self.queries_per_round, reports=int(t), unit=unit)
            for t in self.participation_ if t > 0
        ]

    def _ledger(self, public: np.ndarray, n_classes: int, seed: int, trainings: list[list[Any]]) -> Ledger:
        """The clients' randomized responses; with DP-SGD local training also that training, which every report
        is derived from (the predictions of a client's DP-trained copy of the global model on public queries)."""
        ledger = Ledger(
            delta=self.delta,
            primary_unit="party",
            seeds={"random_state": seed},
            public_data_sha256=data_fingerprint({"public": public}),
            description=(
                f"PrivateKT global model: {len(self.participation_)} clients, {self.rounds} rounds, "
                f"ε = {self.epsilon_per_round:g} per report of K = {self.queries_per_round} labels, "
                f"{type(self.model).__name__}"
            ),
        )
        participants = [rounds for rounds in trainings if rounds]
        derived = record_local_training(
            ledger, [None if None in rounds else compose_dpsgd(rounds) for rounds in participants],
            what=f"PrivateKT clients' local training, composed over the rounds each joined ({self.rounds} rounds)",
        )
        ledger.record(
            {unit: compose_parallel(self.client_releases(unit=unit)) for unit in ("party", "example")},
            derived_from_training=derived,
            note=(
                f"k-ary randomized response (β = {self.keep_probability_:.6g}, C = {n_classes}): each client's reports "
                f"composed over the rounds it joined (max {int(self.participation_.max())}), parallel composition "
                "over clients (disjoint data). NOTE (authors' claim, not a guarantee privfed makes): PrivateKT argues "
                "the accumulation of privacy budgets across rounds is avoided by a model shuffling method; no "
                "shuffler runs here, so privfed composes every round a client joins (what a trusted shuffler would "
                "give: privfed.ShuffledRandomizedResponse)." + self._dropout_note()
            ),
        )
        record_schema_exchange(ledger)
        tight: dict[int, float] = {}
        for release in self.client_releases():
            tight.setdefault(release.reports, account(release, delta=self.delta).epsilon)
        self.client_epsilons_ = {
            "basic": self.participation_ * float(self.epsilon_per_round),
            "tight": np.array([tight.get(int(t), 0.0) for t in self.participation_]),
        }
        return ledger

    def _dropout_note(self) -> str:
        """The ledger's account of the clients dropped from a round (nothing when none was)."""
        if not self.dropouts_:
            return ""
        listed = "; ".join(f"{d['party']} in round {d['round']} ({d['step']} step)" for d in self.dropouts_)
        return (f" DROPOUTS ({len(self.dropouts_)}): {listed}. A dropped client's report never reached the server: "
                "it is not composed and that round aggregated the reports that arrived.")

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
