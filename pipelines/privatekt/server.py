"""PrivateKT's server across the rounds (PrivateKT Algorithm 1): sampling, aggregation, buffer, self-training.

Each round the server draws K public examples by importance sampling (softmax of the global model's
predictive entropy, :func:`importance_sample`), selects the clients, sends them their tasks
(:func:`~privfed.pipelines.privatekt.steps.privatekt_tasks`), checks their randomized-response reports
(:func:`~privfed.pipelines.privatekt.steps.receive_privatekt_replies`), estimates the K labels
(:func:`~privfed.pipelines.privatekt.steps.aggregate_reports`), pushes them into the
:class:`KnowledgeBuffer` and updates the global model (:func:`server_update`: fine-tuning on the buffer,
then self-training). :class:`PrivateKTServer` holds the server's state between rounds, saves and
restores it for round checkpoints, and records the ledger at the end. ``PrivateKT.fit`` and the Flower
app (``privfed.federation``) drive it round by round; only the :data:`RoundExchange` differs.

Randomness: the server adds no noise. Its generators (``random_state``) draw the queries, the clients,
the tie-breaks of the aggregate and the global model's training seeds — the clients from a stream of their
own, so that which clients join which round (and so every client's ε) follows ``random_state`` alone, not the
labels the rounds before produced. The ledger composes each client's reports over the rounds it actually
joined and amplifies by none of this sampling, and all of it is post-processing of ε-LDP reports, so no
guarantee relies on its secrecy. The clients' randomized-response
coins are drawn by each client from its own secret source; the server holds only the run's root
:class:`~privfed.accounting.NoiseSource`, whose children seed the clients' noise when the run opted in with
``noise_seed=`` (None each otherwise), and a checkpoint never stores a noise source.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from scipy.special import softmax
from sklearn.base import clone

from ...accounting import (
    DPSGD,
    Ledger,
    NoiseSource,
    RandomizedResponse,
    account,
    compose_dpsgd,
    compose_parallel,
    randomized_response_keep_probability,
)
from ...accounting._checks import check_delta, check_int_at_least, check_positive_finite, check_probability
from ...accounting.fingerprint import data_fingerprint
from ..data.party_schema import PartySchema, record_schema_exchange
from ..models.fitting import FittedClassifier, fit_classifier, is_torch_classifier
from ..protocol.dp_ledger import effective_noise_seed, record_local_training
from ..protocol.messages import Record, Traffic
from ..protocol.progress import check_progress
from ..protocol.seeds import as_seed_sequence
from .steps import (
    PrivateKTTask,
    aggregate_reports,
    network_from_parameters,
    network_parameters,
    privatekt_tasks,
    receive_privatekt_replies,
)

__all__ = [
    "KnowledgeBuffer",
    "PrivateKTFit",
    "PrivateKTServer",
    "RoundExchange",
    "check_privatekt_settings",
    "client_releases",
    "importance_sample",
    "predictive_entropy",
    "server_update",
]

#: How a driver moves one round's messages: given the selected clients (indices, sorted) and their tasks,
#: return the records each client that replied sent (by client index) and the clients that did not reply.
RoundExchange = Callable[[Sequence[int], Sequence[PrivateKTTask]], tuple[dict[int, list[Record]], list[int]]]


def check_privatekt_settings(model: Any, n_public: int | None = None) -> None:
    """Validate the PrivateKT estimator ``model``'s settings (against the public set's size ``n_public`` if given)."""
    if not (
        hasattr(model.model, "fit") and hasattr(model.model, "predict_proba") and hasattr(model.model, "get_params")
    ):
        raise TypeError(
            f"model must be a scikit-learn-style classifier with fit and predict_proba, got {model.model!r}"
        )
    check_positive_finite("epsilon_per_round", model.epsilon_per_round)
    check_int_at_least("queries_per_round", model.queries_per_round, 1)
    check_int_at_least("buffer_rounds", model.buffer_rounds, 1)
    check_int_at_least("self_training_size", model.self_training_size, 0)
    check_int_at_least("rounds", model.rounds, 1)
    check_probability("client_fraction", model.client_fraction, open_high=False)
    for name in ("local_epochs", "fine_tune_epochs", "self_training_epochs"):
        check_int_at_least(name, getattr(model, name), 1)
    if model.fine_tune_batch_size is not None:
        check_int_at_least("fine_tune_batch_size", model.fine_tune_batch_size, 1)
        if not is_torch_classifier(model.model):
            raise ValueError(
                f"fine_tune_batch_size applies to a torch global model only (fine-tuned in mini-batches), got "
                f"{model.fine_tune_batch_size} with {type(model.model).__name__}; leave it None")
    check_delta(model.delta)
    check_progress(model.progress)
    if not (isinstance(model.batch_clients, bool) or (isinstance(model.batch_clients, str)
                                                       and model.batch_clients == "auto")):
        raise TypeError(f"batch_clients must be True, False or 'auto', got {model.batch_clients!r}")
    for name in ("queries_per_round", "self_training_size"):
        if n_public is not None and getattr(model, name) > n_public:
            raise ValueError(f"{name} must be at most the public set's size {n_public}, got {getattr(model, name)}")


# --- sampling and the knowledge buffer ------------------------------------------------------------------
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


# --- the global model's update --------------------------------------------------------------------------
def server_update(model: Any, global_: FittedClassifier | None, buffer: KnowledgeBuffer, public: np.ndarray,
                  n_classes: int, rng: np.random.Generator, init_seed: int, warm: bool) -> FittedClassifier:
    """Fine-tune on the buffer, then self-train on M confident public examples (Algorithm 1, lines 12–16).

    ``model`` is the PrivateKT estimator (its global model's prototype and the server's epochs); ``warm``:
    the global model is a TorchClassifier that continues training, else it is refitted from scratch.
    """
    indices, labels = buffer.contents()
    classes = np.arange(n_classes)
    M = model.self_training_size
    if warm:
        if global_ is None:  # round 1: the network the clients started from (same seed)
            network = clone(model.model).set_params(random_state=init_seed)
        else:
            network = global_.estimator.set_params(random_state=int(rng.integers(2**31)))
        # The server trains on public data only (labels from the clients' reports): no DP-SGD needed.
        batch_size = network.get_params()["batch_size"]
        network.set_params(epochs=model.fine_tune_epochs, dp=None, batch_size=model.fine_tune_batch_size or batch_size)
        network.fit_soft(public[indices], np.eye(n_classes)[labels], loss="kl", classes=classes, warm_start=True)
        network.set_params(batch_size=batch_size)
        if M:
            proba = network.predict_proba(public)
            chosen = importance_sample(predictive_entropy(proba), M, rng, uncertain=False)
            network.set_params(epochs=model.self_training_epochs, random_state=int(rng.integers(2**31)))
            network.fit_soft(public[chosen], proba[chosen], loss="kl", classes=classes, warm_start=True)
        return FittedClassifier(network, classes, n_classes)
    fitted = fit_classifier(model.model, public[indices], labels, n_classes=n_classes, seed=int(rng.integers(2**31)))
    if M:
        proba = fitted.predict_proba(public)
        chosen = importance_sample(predictive_entropy(proba), M, rng, uncertain=False)
        fitted = fit_classifier(
            model.model, np.concatenate([public[indices], public[chosen]]),
            np.concatenate([labels, proba[chosen].argmax(axis=1)]), n_classes=n_classes,
            seed=int(rng.integers(2**31)),
        )
    return fitted


# --- the server over a run ------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class PrivateKTFit:
    """The run's result: the fitted attributes of a PrivateKT estimator (named as they are there, less ``_``)."""

    global_model: Any
    global_classes: np.ndarray
    keep_probability: float
    participation: np.ndarray
    dropouts: list[dict[str, Any]]
    history: list[dict[str, Any]]
    training: str
    bandwidth: dict[str, list[int]]
    ledger: Ledger
    client_epsilons: dict[str, np.ndarray]


class PrivateKTServer:
    """The server's side of a PrivateKT run: its state between rounds, each round's steps, checkpoints, the ledger.

    Parameters
    ----------
    model : PrivateKT
        The validated estimator whose settings the server runs (it is not modified).
    public : ndarray
        The public set.
    schemas : sequence of PartySchema
        The clients' schemas (their exchange is counted in the traffic).
    classes : ndarray
        The federation's classes.
    names : sequence of str
        The clients' names, for error messages, ``dropouts`` and the ledger.
    max_bytes : int
        The largest record a client may send.
    saved : tuple, default=None
        A round checkpoint's (state, arrays) that :meth:`state` saved: the run continues after it. With a
        ``noise_seed`` the resumed run is bit-identical to an uninterrupted one (the clients' noise seeds follow
        from it and the round); with secret noise (the default) the clients draw fresh secret noise after the
        resume, so the rest of the run is another draw of the same mechanism, not a replay.
    """

    def __init__(self, model: Any, public: np.ndarray, schemas: Sequence[PartySchema], classes: np.ndarray,
                 names: Sequence[str], *, max_bytes: int,
                 saved: tuple[dict[str, Any], dict[str, np.ndarray]] | None = None) -> None:
        self.model, self.public, self.classes, self.names, self.max_bytes = model, public, classes, names, max_bytes
        self.schemas = list(schemas)  # what the schema exchange told the coordinator (the ledger records it)
        n_classes, n_clients = len(classes), len(schemas)
        self.per_round = max(1, math.floor(model.client_fraction * n_clients))
        self.keep_probability = randomized_response_keep_probability(
            model.epsilon_per_round, num_classes=n_classes, labels_per_report=model.queries_per_round)
        self.warm = is_torch_classifier(model.model)
        self.seed_sequence = (np.random.SeedSequence(int(saved[0]["entropy"])) if saved is not None
                              else as_seed_sequence(model.random_state))
        self.round_seeds = self.seed_sequence.spawn(model.rounds)
        self.rng = np.random.default_rng(self.seed_sequence.spawn(1)[0])
        self.init_seed = int(self.rng.integers(2**31))
        self.client_sampler = np.random.default_rng(self.seed_sequence.spawn(1)[0])  # draws nothing else
        self.noise = NoiseSource.for_task(effective_noise_seed(model))  # the run's root: never saved in a checkpoint
        self.noise_seeds = self.noise.child_seeds(model.rounds * self.per_round)  # round r: the r-th slice
        self.global_: FittedClassifier | None = None
        self.buffer = KnowledgeBuffer(model.buffer_rounds)
        self.participation = np.zeros(n_clients, dtype=np.int64)
        self.trainings: list[list[Any]] = [[] for _ in range(n_clients)]  # each client's DP-SGD releases, by round
        self.traffic = Traffic.of([[s.to_record()] for s in schemas])
        self.history: list[dict[str, Any]] = []
        self.dropouts: list[dict[str, Any]] = []
        self.rounds_done = 0
        if saved is not None:
            self._restore(saved)

    def round(self, round_index: int, exchange: RoundExchange,
              eval_set: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """One round: sample the queries and the clients, exchange, aggregate, update the global model.

        A selected client that ``exchange`` reports missing is dropped for that round: its report was never
        released, so it neither joins the aggregate nor counts in ``participation`` (its ε does not grow); it
        is listed in ``dropouts``. A round without any report adds nothing to the buffer and leaves the global
        model as it was. ``eval_set=(X, y)`` records the global model's accuracy in ``history``.
        """
        model, public, n_classes = self.model, self.public, len(self.classes)
        global_ = self.global_
        entropy = np.zeros(len(public)) if global_ is None else predictive_entropy(global_.predict_proba(public))
        queries = importance_sample(entropy, model.queries_per_round, self.rng, uncertain=True)
        clients = [int(client) for client in
                   np.sort(self.client_sampler.choice(len(self.participation), size=self.per_round, replace=False))]
        parameters = (network_parameters(global_.estimator) if self.warm and global_ is not None
                      else np.zeros(0, dtype=np.float32))
        tasks = privatekt_tasks(queries=public[queries], classes=self.classes, parameters=parameters,
                                keep_probability=self.keep_probability, local_epochs=model.local_epochs,
                                init_seed=self.init_seed, round_seed=self.round_seeds[round_index],
                                n_clients=len(clients),
                                noise_seeds=self.noise_seeds[round_index * self.per_round:
                                                             (round_index + 1) * self.per_round])
        received, missing = exchange(clients, tasks)
        delivered = [(client, task) for client, task in zip(clients, tasks) if client in received]
        reports, releases = receive_privatekt_replies(
            [task for _, task in delivered], [received[c] for c, _ in delivered],
            [self.names[c] for c, _ in delivered], max_bytes=self.max_bytes, model=model.model)
        self.dropouts += [{"party": self.names[c], "round": round_index + 1, "step": "train"} for c in missing]
        sent: list[list[Record]] = [[] for _ in self.participation]
        for client, task in zip(clients, tasks):
            sent[client].append(task.to_record())  # the task went down, whether or not a report came back
        for (client, _), release in zip(delivered, releases):
            sent[client] += received[client]  # the report, and the DP-SGD release when DP-trained
            self.participation[client] += 1
            self.trainings[client].append(release)
        self.traffic.add(sent)
        if reports:
            self.buffer.push(queries, aggregate_reports(reports, n_classes=n_classes,
                                                        keep_probability=self.keep_probability, rng=self.rng))
            self.global_ = server_update(model, global_, self.buffer, public, n_classes, self.rng, self.init_seed,
                                         self.warm)
        record: dict[str, Any] = {"round": round_index + 1, "clients": len(reports),
                  "buffer_examples": len(self.buffer.contents()[0]) if len(self.buffer) else 0}
        if eval_set is not None and self.global_ is not None:
            predicted = self.classes[self.global_.predict(np.asarray(eval_set[0]))]
            record["accuracy"] = float(np.mean(predicted == np.asarray(eval_set[1])))
        self.history.append(record)
        self.rounds_done = round_index + 1

    # --- checkpoints -----------------------------------------------------------------------------------
    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The server's state after the rounds done, as (JSON state, arrays) for a round checkpoint.

        ``rng`` and ``client_sampler`` are the ``random_state`` generators' states (sampling, tie-breaks,
        training seeds; the clients of each round); no noise source's state is ever saved (the clients hold theirs;
        a seeded run's follow from ``noise_seed``).
        """
        state = {
            "rounds_done": self.rounds_done, "entropy": str(self.seed_sequence.entropy),
            "rng": self.rng.bit_generator.state, "client_sampler": self.client_sampler.bit_generator.state,
            "buffer_rounds": len(self.buffer), "history": self.history,
            "dropouts": self.dropouts,
            "trainings": [[None if release is None else {"parameters": release.parameters(), "unit": release.unit}
                           for release in rounds] for rounds in self.trainings],
        }
        arrays = {"participation": self.participation, **self.traffic.arrays()}
        for index, (indices, labels) in enumerate(self.buffer.entries()):
            arrays[f"buffer.{index}.indices"], arrays[f"buffer.{index}.labels"] = indices, labels
        if self.global_ is not None:
            arrays["global_parameters"] = network_parameters(self.global_.estimator)
        return state, arrays

    def _restore(self, saved: tuple[dict[str, Any], dict[str, np.ndarray]]) -> None:
        """Put the state that :meth:`state` saved back."""
        state, arrays = saved
        self.rng.bit_generator.state = state["rng"]
        self.client_sampler.bit_generator.state = state["client_sampler"]
        for index in range(state["buffer_rounds"]):
            self.buffer.push(arrays[f"buffer.{index}.indices"], arrays[f"buffer.{index}.labels"])
        self.history, self.dropouts = state["history"], state["dropouts"]
        self.participation = arrays["participation"].astype(np.int64)
        self.trainings = [[None if release is None else DPSGD.from_parameters(release["parameters"],
                                                                              unit=release["unit"])
                           for release in rounds] for rounds in state["trainings"]]
        self.traffic = Traffic.from_arrays(arrays)
        if "global_parameters" in arrays:
            n_classes = len(self.classes)
            network = network_from_parameters(self.model.model, arrays["global_parameters"], n_classes,
                                              self.public.shape[1:])
            self.global_ = FittedClassifier(network, np.arange(n_classes), n_classes)
        self.rounds_done = int(state["rounds_done"])

    # --- the result ------------------------------------------------------------------------------------
    def result(self) -> PrivateKTFit:
        """The fitted attributes after the last round, with the ledger (raises if no report ever arrived)."""
        model = self.model
        if self.global_ is None:
            raise RuntimeError(f"no client report arrived in any of the {model.rounds} rounds; there is no model")
        releases = client_releases(model, self.participation, len(self.classes))
        tight: dict[int, float] = {}
        for release in releases:
            tight.setdefault(release.reports, account(release, delta=model.delta).epsilon)
        return PrivateKTFit(
            global_model=self.global_.estimator, global_classes=self.global_.classes,
            keep_probability=self.keep_probability, participation=self.participation, dropouts=self.dropouts,
            history=self.history,
            training=("warm start: clients and server continue training the global TorchClassifier" if self.warm
                      else "refit: clients fit fresh models; the server refits the global model each round"),
            bandwidth=self.traffic.totals(), ledger=self._ledger(),
            client_epsilons={"basic": self.participation * float(model.epsilon_per_round),
                             "tight": np.array([tight.get(int(t), 0.0) for t in self.participation])},
        )

    def _ledger(self) -> Ledger:
        """The clients' randomized responses; with DP-SGD local training also that training, which every report
        is derived from (the predictions of a client's DP-trained copy of the global model on public queries)."""
        model, n_classes = self.model, len(self.classes)
        ledger = Ledger(
            delta=model.delta,
            primary_unit="party",
            seeds={"random_state": int(cast(int, self.seed_sequence.entropy))},
            public_data_sha256=data_fingerprint({"public": self.public}),
            description=(
                f"PrivateKT global model: {len(self.participation)} clients, {model.rounds} rounds, "
                f"ε = {model.epsilon_per_round:g} per report of K = {model.queries_per_round} labels, "
                f"{type(model.model).__name__}"
            ),
        )
        participants = [rounds for rounds in self.trainings if rounds]
        derived = record_local_training(
            ledger, [None if None in rounds else compose_dpsgd(rounds) for rounds in participants],
            what=f"PrivateKT clients' local training, composed over the rounds each joined ({model.rounds} rounds)",
        )
        ledger.record(
            {unit: compose_parallel(client_releases(model, self.participation, n_classes, unit=unit))
             for unit in ("party", "example")},
            derived_from_training=derived,
            note=(
                f"k-ary randomized response (β = {self.keep_probability:.6g}, C = {n_classes}): each client's reports "
                f"composed over the rounds it joined (max {int(self.participation.max())}), parallel composition "
                "over clients (disjoint data). NOTE (authors' claim, not a guarantee privfed makes): PrivateKT argues "
                "the accumulation of privacy budgets across rounds is avoided by a model shuffling method; no "
                "shuffler runs here, so privfed composes every round a client joins (what a trusted shuffler would "
                "give: privfed.ShuffledRandomizedResponse)." + self._dropout_note()
            ),
        )
        record_schema_exchange(ledger, self.schemas)
        ledger.record_noise_source(self.noise)
        return ledger

    def _dropout_note(self) -> str:
        """The ledger's account of the clients dropped from a round (nothing when none was)."""
        if not self.dropouts:
            return ""
        listed = "; ".join(f"{d['party']} in round {d['round']} ({d['step']} step)" for d in self.dropouts)
        return (f" DROPOUTS ({len(self.dropouts)}): {listed}. A dropped client's report never reached the server: "
                "it is not composed and that round aggregated the reports that arrived.")


def client_releases(model: Any, participation: np.ndarray, n_classes: int, *,
                    unit: str = "party") -> list[RandomizedResponse]:
    """Each participating client's composed randomized response (its reports over the rounds it joined)."""
    return [
        RandomizedResponse(n_classes, epsilon=float(model.epsilon_per_round),
                           labels_per_report=model.queries_per_round, reports=int(t), unit=unit)
        for t in participation if t > 0
    ]
