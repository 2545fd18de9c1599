"""PrivateKT as party steps and server steps over explicit messages (PrivateKT Algorithm 1, lines 4–11).

Each round, after the schema exchange of :mod:`privfed.pipelines.data.party_schema` (once, before round 1):

1. server → each selected client, :class:`PrivateKTTask`: the K importance-sampled public queries,
   the classes, the global network's parameters (a TorchClassifier after round 1: its state dict's
   tensors concatenated in order into one float32 array; empty otherwise — the model itself travels
   as a JSON spec, never pickled, with its DP-SGD configuration ``dp=`` if any), the keep probability β,
   the local epochs, the client's seed and the seed of the round-1 initialisation (both from
   ``random_state``: initialisation and shuffles only) and, only when the run opted in to reproducible
   noise (``noise_seed=``), the seed of the client's noise;
2. client → server, :class:`PrivateKTReport`: its K labels after K-ary randomized response, made on
   the client (:func:`perturb_labels`) with coins from the client's own
   :class:`~privfed.accounting.NoiseSource` (secret unless the task carries a noise seed), and, with
   DP-SGD local training, a :class:`~privfed.pipelines.protocol.dp_ledger.DPTrainingReport` of that training's one
   release (σ, q, steps), so that the server's ledger can record it.

The party step (:func:`privatekt_party_step`) trains the client's copy of the global model, labels
the queries and randomizes the labels; :func:`batched_party_steps` is the same step for a round's
clients of a torch model, their training stacked in one computation (in-process only). The server
steps (:func:`privatekt_tasks`, :func:`receive_privatekt_replies`, :func:`aggregate_reports`) make
the tasks, check the reports and estimate the labels; ``PrivateKT.fit`` and the Flower app
(``privfed.federation``) run these functions through the server's round loop,
:class:`~privfed.pipelines.privatekt.server.PrivateKTServer`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from sklearn.base import clone

from ...accounting import DPSGD, NoiseSource, RandomizedResponse, randomized_response_estimate
from ...accounting._checks import check_probability
from ..data.party_data import class_codes
from ..models.fitting import fit_classifier, is_torch_classifier, with_noise_seed
from ..protocol.dp_ledger import DPTrainingReport, receive_trainings, training_report, without_trainings
from ..protocol.messages import ArraySpec, MessageError, Record, WireMessage
from ..protocol.run_parameters import record_draw
from ..protocol.seeds import spawn_seeds
from ..protocol.voting import break_ties_at_random

__all__ = [
    "PrivateKTReport",
    "PrivateKTTask",
    "aggregate_reports",
    "batched_party_steps",
    "network_from_parameters",
    "network_parameters",
    "perturb_labels",
    "privatekt_party_step",
    "privatekt_planned_release",
    "privatekt_tasks",
    "receive_privatekt_replies",
]

def perturb_labels(labels: np.ndarray, *, keep_probability: float, num_classes: int,
                   rng: np.random.Generator) -> np.ndarray:
    """K-ary randomized response (PrivateKT Eq. 2): keep each label w.p. β, else a uniform draw from the C classes.

    ``rng`` draws both coins (keep, replacement): the client's :class:`~privfed.accounting.NoiseSource`'s
    ``generator``, never one derived from ``random_state`` — whoever can predict the coins reads the labels.
    """
    labels = np.asarray(labels, dtype=np.int64)
    beta = check_probability("keep_probability", keep_probability, open_high=False)
    keep = rng.random(labels.shape) < beta
    return np.where(keep, labels, rng.integers(0, num_classes, size=labels.shape))


# --- messages -------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class PrivateKTTask(WireMessage):
    """Server → selected client: queries (K, ...), classes (C,), the global network's parameters (P,), settings.

    ``parameters`` is empty before the global network exists (round 1, which starts every client from
    the network seeded by ``init_seed``) and for a scikit-learn model (each client fits a fresh one).
    The clients' DP-SGD configuration is not here: it is the global model's ``dp=``, in its spec.
    ``seed`` and ``init_seed`` derive from ``random_state`` (initialisation, shuffles). ``noise_seed`` is None
    (absent from the wire) unless the run opted in to reproducible noise; the client draws its
    randomized-response coins and its DP-SGD noise from its own secret source otherwise.
    """

    KIND: ClassVar[str] = "privatekt-task"
    ARRAYS: ClassVar = {"queries": ArraySpec("iuf", None), "classes": ArraySpec("iufbU", 1),
                        "parameters": ArraySpec("f", 1)}

    queries: np.ndarray
    classes: np.ndarray
    parameters: np.ndarray
    keep_probability: float
    local_epochs: int
    seed: int
    init_seed: int
    noise_seed: int | None = None


@dataclass(frozen=True, eq=False)
class PrivateKTReport(WireMessage):
    """Client → server: the K randomized labels (class codes); a DP-trained client also sends a ``dp-training``."""

    KIND: ClassVar[str] = "privatekt-report"
    ARRAYS: ClassVar = {"labels": ArraySpec("iu", 1)}

    labels: np.ndarray


# --- the global network on the wire -------------------------------------------------------------------
def network_parameters(model: Any) -> np.ndarray:
    """A fitted TorchClassifier's state-dict tensors, in order, concatenated into one float32 array."""
    tensors = [tensor.detach().cpu().numpy() for tensor in model.module_.state_dict().values()]
    if any(tensor.dtype.kind != "f" for tensor in tensors):
        raise TypeError(f"{type(model).__name__}'s network holds non-float tensors; PrivateKT sends float weights")
    return np.concatenate([tensor.ravel() for tensor in tensors]).astype(np.float32)


def network_from_parameters(
    prototype: Any, parameters: np.ndarray, n_classes: int, input_shape: tuple[int, ...]
) -> Any:
    """The global TorchClassifier rebuilt from ``prototype``'s architecture and the received parameters."""
    import torch

    from ..models.torch_training import resolve_device

    model = clone(prototype)
    model._check_architecture()
    model.classes_ = np.arange(n_classes)
    model._record_input_shape(np.empty((0, *input_shape)))
    model.loss_curve_ = []
    with torch.random.fork_rng(devices=[]):
        module = model._build_module(tuple(input_shape), n_classes)
    state = module.state_dict()
    sizes = [tensor.numel() for tensor in state.values()]
    if len(parameters) != sum(sizes):
        raise MessageError(
            f"the server sent a malformed 'privatekt-task' message: parameters hold {len(parameters)} values, "
            f"the {type(model).__name__} network has {sum(sizes)}"
        )
    chunks = np.split(np.asarray(parameters), np.cumsum(sizes)[:-1])
    module.load_state_dict({name: torch.from_numpy(chunk.reshape(tensor.shape).astype(np.float32)).to(tensor.dtype)
                            for (name, tensor), chunk in zip(state.items(), chunks)}, strict=True)
    device = resolve_device(model.device)
    model.module_, model.device_ = module.to(device).eval(), device
    return model


def _client_network(task: PrivateKTTask, prototype: Any) -> Any:
    """The client's copy of the global network: received parameters, or round 1's network seeded by init_seed."""
    if len(task.parameters):
        return network_from_parameters(prototype, task.parameters, len(task.classes), tuple(task.queries.shape[1:]))
    return clone(prototype).set_params(random_state=task.init_seed)


def _local_seed(task: PrivateKTTask, rng: np.random.Generator) -> int:
    """The client's training seed: drawn from its own stream once the network exists, else round 1's init_seed."""
    return int(rng.integers(2**31)) if len(task.parameters) else task.init_seed


def _report(task: PrivateKTTask, predictions: np.ndarray, noise: NoiseSource) -> PrivateKTReport:
    """Randomized response on the client, coins from its own noise source, then the message it sends."""
    keep_probability, num_classes = task.keep_probability, len(task.classes)
    record_draw("PrivateKT client randomized response", "randomized-response", keep_probability=keep_probability,
                num_classes=num_classes)
    return PrivateKTReport(perturb_labels(predictions, keep_probability=keep_probability,
                                          num_classes=num_classes, rng=noise.generator))


def privatekt_planned_release(task: PrivateKTTask) -> RandomizedResponse | str:
    """What a client's report this round is accounted under, from the task's public parameters alone (before its
    data is touched): K-ary randomized response of its K labels at the task's keep probability, party level (a
    DP-trained client's training is behind the labels: the report bounds everything it sends); else the reason no
    silo can charge it (β = 1 keeps every label: no noise)."""
    if task.keep_probability >= 1.0:
        return "PrivateKT with keep_probability = 1 sends the labels un-randomized: no bound a silo could charge"
    return RandomizedResponse(len(task.classes), keep_probability=task.keep_probability,
                              labels_per_report=len(task.queries), unit="party")


# --- the party step ---------------------------------------------------------------------------------------
def privatekt_party_step(task: PrivateKTTask, X: np.ndarray, y: np.ndarray, *, model: Any,
                         party: str) -> list[WireMessage]:
    """Client side of one round: train a copy of the global model, label the K queries, randomize them.

    ``model`` is the unfitted prototype of the global model (its class and hyper-parameters, its
    ``dp=`` included); ``y`` holds the client's original labels. Returns the messages the client
    sends: its :class:`PrivateKTReport`, then, when ``model`` trains with DP-SGD, the
    :class:`~privfed.pipelines.protocol.dp_ledger.DPTrainingReport` of this round's training.

    The randomized-response coins come from the client's :class:`~privfed.accounting.NoiseSource` (the
    task's ``noise_seed``: secret when None), and so does a DP-trained model's noise (its child source);
    the task's ``seed`` sets only the training's initialisation and shuffles.
    """
    codes = class_codes(task.classes, y, party=party)
    n_classes = len(task.classes)
    rng = np.random.default_rng(task.seed)
    noise = NoiseSource.for_task(task.noise_seed)
    if not is_torch_classifier(model):
        fitted = fit_classifier(model, X, codes, n_classes=n_classes, seed=int(rng.integers(2**31)))
        return [_report(task, fitted.predict(task.queries), noise)]
    local = with_noise_seed(_client_network(task, model), noise.child_seeds(1)[0])
    local.set_params(epochs=task.local_epochs, random_state=_local_seed(task, rng))
    local.fit_soft(X, np.eye(n_classes)[codes], loss="kl", classes=np.arange(n_classes), warm_start=True)
    predictions = np.asarray(local.predict(task.queries), dtype=np.int64)
    training = training_report(local.dp_releases_[-1] if local.dp is not None else None)
    return [_report(task, predictions, noise), *([] if training is None else [training])]


def batched_party_steps(tasks: Sequence[PrivateKTTask], parties: Sequence[tuple[np.ndarray, np.ndarray]], *,
                        model: Any) -> list[PrivateKTReport]:
    """:func:`privatekt_party_step` for a round's clients of a torch model, their training stacked in one computation.

    The tasks share the global network, the queries and the settings; each client keeps its own seed,
    hence its own ``random_state`` and shuffle, and its own noise source for its randomized response. Only the
    order of the floating-point work changes (see :mod:`~privfed.pipelines.models.batched_training`). Not for DP-SGD
    (Opacus trains each copy on its own) nor for a scikit-learn model.
    """
    from ..models.batched_training import train_copies  # torch: imported only where a torch model is trained

    first = tasks[0]
    n_classes = len(first.classes)
    rngs = [np.random.default_rng(task.seed) for task in tasks]
    states = [_local_seed(task, rng) for task, rng in zip(tasks, rngs)]
    local = _client_network(first, model).set_params(epochs=first.local_epochs)
    eye = np.eye(n_classes)
    data = [(X, eye[class_codes(task.classes, y, party=f"client {index}")])
            for index, (task, (X, y)) in enumerate(zip(tasks, parties))]
    networks = train_copies(local, data, random_states=states, classes=np.arange(n_classes), loss="kl")
    predictions = networks.predict(first.queries).astype(np.int64)
    return [_report(task, labels, NoiseSource.for_task(task.noise_seed)) for task, labels in zip(tasks, predictions)]


# --- the server steps ---------------------------------------------------------------------------------
def privatekt_tasks(*, queries: np.ndarray, classes: np.ndarray, parameters: np.ndarray, keep_probability: float,
                    local_epochs: int, init_seed: int, round_seed: np.random.SeedSequence,
                    n_clients: int, noise_seeds: Sequence[int | None] | None = None) -> list[PrivateKTTask]:
    """The round's tasks, one per selected client in order (seed i: the i-th child of ``round_seed``).

    ``noise_seeds``: one per client, from the run's noise source (None, the default: each client draws secret
    noise, and no task carries a noise seed).
    """
    noise_seeds = [None] * n_clients if noise_seeds is None else list(noise_seeds)
    if len(noise_seeds) != n_clients:
        raise ValueError(f"noise_seeds must hold one seed (or None) per client ({n_clients}), got {len(noise_seeds)}")
    return [
        PrivateKTTask(queries=queries, classes=classes, parameters=parameters, keep_probability=float(keep_probability),
                      local_epochs=int(local_epochs), seed=int(seed), init_seed=int(init_seed), noise_seed=noise_seed)
        for seed, noise_seed in zip(spawn_seeds(round_seed, n_clients), noise_seeds)
    ]


def receive_privatekt_replies(tasks: Sequence[PrivateKTTask], records: Sequence[Sequence[Record]],
                              names: Sequence[str], *, max_bytes: int,
                              model: Any) -> tuple[list[PrivateKTReport], list[DPSGD | None]]:
    """Each client's report and its round's DP-SGD release (None: not DP-trained), validated against its task.

    ``model`` is the unfitted global model the clients train a copy of: its ``dp=`` decides whether a
    client must send one ``dp-training`` release, which must match it (with the task's local epochs;
    :func:`~privfed.pipelines.protocol.dp_ledger.receive_trainings`). :class:`MessageError` names the first bad client.
    """
    asked = getattr(model, "dp", None) is not None
    reports, trainings = [], []
    for task, sent, name in zip(tasks, records, names):
        labelled = without_trainings(sent)
        if len(labelled) != 1:
            raise MessageError(f"{name} sent {len(labelled)} messages besides its {DPTrainingReport.KIND!r}, "
                               "expected one 'privatekt-report'")
        report = PrivateKTReport.from_record(labelled[0], sender=name, shapes={"labels": (len(task.queries),)},
                                             max_bytes=max_bytes)
        if report.labels.min(initial=0) < 0 or report.labels.max(initial=0) >= len(task.classes):
            raise MessageError(f"{name} sent a malformed 'privatekt-report' message: labels outside "
                               f"[0, {len(task.classes)})")
        local = clone(model).set_params(epochs=task.local_epochs) if asked else model
        (training,) = receive_trainings([sent], [name], max_bytes=max_bytes, models=[local])
        if asked and training is None:
            raise MessageError(f"{name} sent no {DPTrainingReport.KIND!r} message for the DP-SGD training its model "
                               "asks for")
        if training is not None and not isinstance(training, DPSGD):
            raise MessageError(f"{name} sent a {DPTrainingReport.KIND!r} message of several releases, expected one "
                               "(its copy of the global model's training this round)")
        reports.append(report)
        trainings.append(training)
    return reports, trainings


def aggregate_reports(reports: Sequence[PrivateKTReport], *, n_classes: int, keep_probability: float,
                      rng: np.random.Generator) -> np.ndarray:
    """The K aggregated labels: argmax of the unbiased estimate of the true counts (Eq. 3), ties at random.

    The tie-breaking ``rng`` follows ``random_state``: it post-processes the clients' reports, which are
    already ε-LDP, so no guarantee relies on its secrecy.
    """
    stacked = np.stack([report.labels for report in reports])  # (clients, K)
    counts = np.stack([np.bincount(stacked[:, j], minlength=n_classes) for j in range(stacked.shape[1])])
    return break_ties_at_random(randomized_response_estimate(counts, keep_probability=keep_probability), rng)
