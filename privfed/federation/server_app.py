"""privfed's Flower ServerApp: the server steps of a pipeline, moving messages to and from the SuperNodes.

``flwr run`` starts :data:`app`, which reads the run configuration (``docs/federation.md``), fits the
estimator it describes and writes the output bundle; :func:`privfed.federation.simulate` runs the same
:func:`run_server` through :func:`make_server_app` and returns the fitted estimator instead.

The exchange: a ``query.schema`` message to every SuperNode (each party's schema, checked before any
training), then one ``train`` message per party carrying its task (FedKT: ``FedKTTask``; FedKD:
``FedKDTask``) and the model specs; the replies are validated by the pipeline's ``receive_*_replies``
and handed to its server step. PrivateKT: one ``train`` message per round to each sampled client only
(``PrivateKTTask``), its randomized-response report back. Selective-FD, FedMD and independent learning run
their own round loop (``_FederatedDistillation._run``) over the SuperNodes: ``train.selective_fd`` messages
for the setup, each round's share and distillation, and the final publication of client ``client``'s model.

Faults: FedKT and FedKD are one-shot, so a party that does not reply within ``timeout`` seconds, or
replies with an error, stops the run with a :class:`FederationError` naming it and the step — a
federation missing a party is not the federation the user configured, and nothing is written.
PrivateKT samples clients every round anyway: a sampled client that times out or is unreachable is
dropped for that round and the run continues (:func:`_exchange_allowing_missing` says which parties
are missing; ``PrivateKT.dropouts_`` and the ledger record them). A malformed,
oversized or wrongly shaped reply stops it the same way (a :class:`MessageError` naming the party).
Selective-FD stops the same way at any round (see ``docs/federation.md`` for why it does not continue without
the party). The bundle is written only after the server step has succeeded.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from privfed.federation.task import (
    DP_TRAINING_REQUEST,
    PUBLISH_REQUEST,
    estimator_from_config,
    from_recorddict,
    load_party_data,
    load_public,
    model_from_record,
    model_spec,
    to_recorddict,
)
from privfed.pipelines.data.party_schema import PartySchema, federation_classes
from privfed.pipelines.fedkd.server import fedkd_server_step
from privfed.pipelines.fedkd.steps import fedkd_tasks, local_models, party_noise_seeds, receive_fedkd_replies
from privfed.pipelines.fedkt.server import fedkt_server_step, receive_fedkt_replies
from privfed.pipelines.fedkt.steps import FedKTTask, fedkt_tasks
from privfed.pipelines.protocol.dp_ledger import DPTrainingReport, effective_noise_seed, receive_trainings
from privfed.pipelines.protocol.messages import DEFAULT_MAX_BYTES, MessageError, Record, record_sizes
from privfed.pipelines.protocol.seeds import as_seed_sequence
from privfed.pipelines.protocol.silo_gate import RefusalLog, RefusedRunError, is_refusal, refusals_in

# `app` (built on first access, see __getattr__) is listed: Flower checks the component statically, in __all__.
__all__ = [  # noqa: F822
    "FederationError", "ServerJob", "app", "job_from_config", "make_server_app", "run_server", "selective_fd_configs",
]

#: Seconds between two looks at the connected SuperNodes while waiting for them.
_POLL_SECONDS = 0.2


class FederationError(RuntimeError):
    """A party did not take part as required (timed out, disconnected, failed); nothing was written."""


@dataclass(frozen=True, eq=False)
class ServerJob:
    """What one server run needs: the unfitted estimator, the public set, and how long to wait."""

    estimator: Any
    public: np.ndarray
    num_supernodes: int
    timeout: float | None = None
    max_message_bytes: int = DEFAULT_MAX_BYTES
    output_bundle: str | None = None
    overwrite: bool = False  # replace a bundle already in output_bundle (else the run stops before any message)
    ship_evidence: bool = False
    test: tuple[np.ndarray, np.ndarray] | None = None  # labelled (X, y) held out on the server: test accuracy
    announce: bool = False  # print the summary line for `privfed federation run` (privfed.federation.summary)
    intended_use: str | None = None  # the model card's intended use


#: The warning printed (and so streamed by ``flwr run``) when the bundle ships the parties' private evidence.
SHIP_EVIDENCE_WARNING = (
    "ship-evidence=true: the bundle's evidence.npz holds private evidence (the vote histograms behind the "
    "data-dependent epsilon); give that file to auditors only, never publish it with the model"
)


#: Seconds between two "waiting for SuperNodes" lines when nobody connects or leaves.
_WAITING_EVERY = 30.0


def _wait_for_nodes(grid: Any, count: int, timeout: float | None, *, announce: bool = False) -> list[int]:
    """The first ``count`` SuperNodes to connect (sorted ids); waits at most ``timeout`` seconds.

    ``announce``: while some are missing, print who is connected (:func:`~privfed.federation.summary.waiting_line`)
    at once, whenever that changes, and every :data:`_WAITING_EVERY` seconds.
    """
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    said: tuple[list[int], float] | None = None
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= count:
            return nodes[:count]
        now = time.monotonic()
        if deadline is not None and now > deadline:
            raise FederationError(
                f"only {len(nodes)} of {count} SuperNodes connected after {now - started:.1f} s "
                f"(timeout={timeout} s); nothing was written"
            )
        if announce and (said is None or said[0] != nodes or now - said[1] >= _WAITING_EVERY):
            from privfed.federation.summary import WAITING_PREFIX, waiting_line

            print(WAITING_PREFIX + waiting_line(nodes, count, now - started, timeout), flush=True)
            said = (nodes, now)
        time.sleep(_POLL_SECONDS)


#: Flower error codes of a reply that means "the party is gone" (a dropout), not "the party's step failed".
_UNREACHABLE = (3, 4, 5, 8)  # MESSAGE_UNAVAILABLE, REPLY_MESSAGE_UNAVAILABLE, NODE_UNAVAILABLE, CLIENT_APP_CRASHED


def _exchange_allowing_missing(
    grid: Any, contents: dict[int, Any], message_type: str, names: dict[int, str], timeout: float | None, step: str
) -> tuple[dict[int, tuple[list, dict]], list[int]]:
    """Send one message per node; return the replies received and the nodes that are missing.

    A node is missing when no reply arrived within ``timeout`` seconds, or its reply is an error that says it
    is unreachable (disconnected, its ClientApp crashed). A reply that is an error of its step (the ClientApp
    raised) still raises :class:`FederationError` naming the party.
    """
    from flwr.app import Message

    messages = [Message(content, dst_node_id=node, message_type=message_type) for node, content in contents.items()]
    replies = {reply.metadata.src_node_id: reply for reply in grid.send_and_receive(messages, timeout=timeout)}
    received, missing = {}, []
    for node in contents:
        reply = replies.get(node)
        if reply is None or (reply.has_error() and reply.error.code in _UNREACHABLE):
            missing.append(node)
        elif reply.has_error():
            raise FederationError(f"{names[node]} failed at the {step} step: {reply.error.reason}; nothing was written")
        else:
            received[node] = from_recorddict(reply.content, sender=names[node])
    return received, missing


def _exchange(
    grid: Any, contents: dict[int, Any], message_type: str, names: dict[int, str], timeout: float | None, step: str
) -> dict[int, tuple[list, dict]]:
    """Send one message per node and collect every reply, or raise naming the parties that failed."""
    started = time.monotonic()
    received, missing = _exchange_allowing_missing(grid, contents, message_type, names, timeout, step)
    if missing:
        waited = time.monotonic() - started
        cause = ("no reply within the timeout" if timeout is not None and waited >= timeout
                 else "Flower reported it unreachable (disconnected or its ClientApp crashed)")
        raise FederationError(
            f"{', '.join(names[node] for node in missing)} did not reply to the {step} step after {waited:.1f} s "
            f"(timeout={timeout} s: {cause}); the run stops without partial results and nothing was written"
        )
    return received


def run_server(grid: Any, job: ServerJob) -> Any:
    """Fit ``job.estimator`` (FedKT, FedKD, PrivateKT, SelectiveFD, FedMD, IndependentLearning) over the Grid's
    SuperNodes; return it fitted, as ``fit`` would."""
    from privfed.pipelines.fedkd.estimator import FedKD

    model = job.estimator
    model._validate()
    multilabel = isinstance(model, FedKD) and bool(model.multilabel)
    public = np.asarray(job.public)
    if public.ndim < 2 or len(public) == 0:
        raise ValueError(f"public must be a non-empty array of shape (n, features...), got shape {public.shape}")
    if job.output_bundle:  # a bundle that could not be written stops the run now, before any SuperNode is asked
        from privfed.output_folder import check_output_folder

        check_output_folder(job.output_bundle, "output-bundle", overwrite=job.overwrite, how_to_overwrite=(
            "set overwrite = true in the run configuration (privfed federation run --overwrite)"))
    nodes = _wait_for_nodes(grid, job.num_supernodes, job.timeout, announce=job.announce)

    # 1. Schemas: every party describes its data; the server orders the parties and checks them.
    names = {node: f"node {node}" for node in nodes}
    query = {"multilabel": True} if multilabel else None  # FedKD multi-label: (n, L) 0/1 indicators
    if getattr(model, "classes", None) is not None:  # a public label set: parties withhold their size and labels
        query = {"public-classes": json.dumps(np.asarray(model.classes).tolist())}
    answers = _exchange(grid, {node: to_recorddict([], query) for node in nodes}, "query.schema", names,
                        job.timeout, "schema")
    order = sorted(nodes, key=lambda node: (int(answers[node][1].get("party-index", -1)), node))
    names = {node: f"party {index} (node {node})" for index, node in enumerate(order)}
    schemas = []
    for node in order:
        records = answers[node][0]
        if len(records) != 1:
            raise MessageError(f"{names[node]} sent {len(records)} messages to the schema step, expected 1")
        schemas.append(PartySchema.from_record(records[0], sender=names[node], max_bytes=job.max_message_bytes))
    classes = federation_classes(schemas, public.shape[1:], [names[node] for node in order], multilabel=multilabel)

    # 2. One task per party, then the server step; the bundle only once the server step has succeeded.
    _server_steps(model)(grid, job, model, public, schemas, classes, order, names)
    metrics = None
    if job.test is not None:
        from privfed.evaluation import accuracy_line, evaluate_accuracy

        metrics = evaluate_accuracy(model, *job.test)
        print(f"privfed: {accuracy_line(metrics)}", flush=True)
    if job.output_bundle:
        from privfed.bundle.save import save_bundle

        if job.ship_evidence:  # save_bundle's default keeps private evidence at home; shipping it is explicit
            warnings.warn(SHIP_EVIDENCE_WARNING, UserWarning, stacklevel=2)
        data = {"public": public} if job.test is None else {"public": public, "test": job.test[0]}
        save_bundle(model, job.output_bundle, evidence=True if job.ship_evidence else None, metrics=metrics,
                    data=data, intended_use=job.intended_use, overwrite=job.overwrite)
    if job.announce:
        from privfed.federation.summary import run_summary, summary_line

        print(summary_line(run_summary(model, parties=[names[node] for node in order], bundle=job.output_bundle,
                                       metrics=metrics)), flush=True)
    return model


def _server_steps(model: Any) -> Callable[..., None]:
    """The function running ``model``'s server steps over the SuperNodes (below, one per pipeline)."""
    from privfed.pipelines.fedkd.estimator import FedKD
    from privfed.pipelines.privatekt.estimator import PrivateKT
    from privfed.pipelines.selective_fd.driver import _FederatedDistillation

    steps = ((FedKD, _train_fedkd), (PrivateKT, _train_privatekt), (_FederatedDistillation, _train_selective_fd))
    return next((function for kind, function in steps if isinstance(model, kind)), _train_fedkt)


def _send_tasks(
    grid: Any, job: ServerJob, tasks: list, order: list[int], names: dict[int, str], configs: list[dict]
) -> list[list]:
    """Send each party its task (with its config) and return the records each party sent back, in party order."""
    contents = {
        node: to_recorddict([task.to_record()], {**config, "max-message-bytes": int(job.max_message_bytes)})
        for node, task, config in zip(order, tasks, configs)
    }
    results = _exchange(grid, contents, "train", names, job.timeout, "train")
    return [results[node][0] for node in order]


def _without_refusals(model: Any, sent: list[list], order: list[int], names: dict[int, str],
                      pipeline: str) -> list[int]:
    """Record in ``model.refused_`` the parties whose silos refused (their reply a budget refusal alone); return
    the positions of the others, or raise :class:`RefusedRunError` when none is left."""
    model.refused_ = refusals_in(sent, [names[node] for node in order])
    kept = [index for index in range(len(order)) if index not in {refusal.party for refusal in model.refused_}]
    if not kept:
        raise RefusedRunError(model.refused_, f"{pipeline} cannot run: no party took part")
    return kept


def _train_fedkt(grid, job, model, public, schemas, classes, order, names) -> None:
    """FedKT: tasks with the public queries; replies with the students' predictions (and L2's evidence)."""
    from privfed.accounting import NoiseSource

    student = model.teacher if model.student is None else model.student
    specs = {"teacher": model_spec(model.teacher, name="teacher"), "student": model_spec(student, name="student")}
    ordered_names = [names[node] for node in order]
    seed_sequence = as_seed_sequence(model.random_state)
    party_seeds, server_seeds = seed_sequence.spawn(2)
    # Secret by default: each party draws its own noise, and no noise seed is in any task.
    noise_source = NoiseSource.for_task(effective_noise_seed(model))
    tasks: list[FedKTTask] = fedkt_tasks(model, schemas, classes, public, party_seeds, ordered_names,
                                         noise_source=noise_source)
    if model.secure_aggregation:
        replies, sent, ordered_names = _secure_vote_sum(grid, job, model, tasks, order, names, specs)
    else:
        sent = _send_tasks(grid, job, tasks, order, names, [specs] * len(order))
        kept = _without_refusals(model, sent, order, names, "FedKT")
        tasks, sent, ordered_names, schemas = ([items[index] for index in kept]
                                               for items in (tasks, sent, ordered_names, schemas))
        replies = receive_fedkt_replies(tasks, sent, ordered_names, max_bytes=job.max_message_bytes)
    trainings = receive_trainings(sent, ordered_names, max_bytes=job.max_message_bytes,
                                  models=[model.teacher] * len(sent))
    fitted = fedkt_server_step(model, replies, classes, public, seed_sequence, server_seeds, trainings,
                               schemas=schemas, noise_source=noise_source)
    schema_records = [[schema.to_record()] for schema in schemas]
    model._set_fitted(fitted, classes, record_sizes([first + rest for first, rest in zip(schema_records, sent)]))


def _secure_train(grid, job, model, tasks, order, names, configs) -> tuple[list[int], list]:
    """Under secure aggregation, the tasks: a party that does not reply, or whose silo refuses (recorded in
    ``model.refused_``), drops out with its noise share. Returns the nodes that took theirs and what each sent
    back: at most its DP training report, since its noisy vector waits in its own state for SecAgg+
    (:mod:`privfed.federation.secure_aggregation`)."""
    contents = {node: to_recorddict([task.to_record()], {**config, "max-message-bytes": int(job.max_message_bytes)})
                for node, task, config in zip(order, tasks, configs)}
    received, _ = _exchange_allowing_missing(grid, contents, "train", names, job.timeout, "train")
    model.refused_ = refusals_in([received[node][0] if node in received else [] for node in order],
                                 [names[node] for node in order])
    refused = {order[refusal.party] for refusal in model.refused_}
    present = [node for node in order if node in received and node not in refused]
    sent = [received[node][0] for node in present]
    for node, records in zip(present, sent):
        if any(record.kind != DPTrainingReport.KIND for record in records):
            raise MessageError(f"{names[node]} sent {[r.kind for r in records]} to the secure train step, expected "
                               f"at most its {DPTrainingReport.KIND!r} report")
    return present, sent


def _secure_vote_sum(grid, job, model, tasks, order, names, specs) -> tuple[Any, list, list[str]]:
    """FedKT under secure aggregation: the tasks (:func:`_secure_train`), then Flower's SecAgg+ over the parties
    that took theirs; the vote sum, their DP training reports, their names."""
    from privfed.federation.secure_aggregation import secaggplus_vote_sum

    present, sent = _secure_train(grid, job, model, tasks, order, names, [specs] * len(order))
    by_node = dict(zip(order, tasks))
    vote_sum = secaggplus_vote_sum(grid, {node: by_node[node] for node in present}, n_parties=len(order),
                                   timeout=job.timeout, colluders=job.estimator.collusion)
    if vote_sum.vote_sum.shape != (tasks[0].n_final_queries, len(tasks[0].classes)):
        raise MessageError(f"SecAgg+ returned a vote sum of shape {vote_sum.vote_sum.shape}, expected "
                           f"{(tasks[0].n_final_queries, len(tasks[0].classes))}")
    return vote_sum, sent, [names[node] for node in present]


def _train_fedkd(grid, job, model, public, schemas, classes, order, names) -> None:
    """FedKD: tasks with the public set; replies with quantized logits and class counts; the server distils."""
    if len(classes) < 2:
        raise ValueError(f"the parties' labels hold a single class {classes[0]!r}; FedKD needs at least 2")
    model.classes_ = classes
    models = local_models(model, len(order))
    configs = [{"local-model": model_spec(m, name=f"local_model[{i}]")} for i, m in enumerate(models)]
    seed_sequence = as_seed_sequence(model.random_state)
    party_seeds, server_seeds = seed_sequence.spawn(2)
    noise = model._noise_source()  # secret by default: the tasks then carry no noise seed
    tasks = fedkd_tasks(model, public, classes, party_seeds, len(order),
                        noise_seeds=party_noise_seeds(noise, len(order)))
    if model.secure_aggregation:  # only the sum of the parties' noisy levels reaches the server, through SecAgg+
        replies, sent, models, schemas, ordered_names = _secure_level_sum(grid, job, model, tasks, order, names,
                                                                          configs, models, schemas)
    else:
        sent = _send_tasks(grid, job, tasks, order, names, configs)
        kept = _without_refusals(model, sent, order, names, "FedKD")
        tasks, sent, models, schemas = ([items[index] for index in kept] for items in (tasks, sent, models, schemas))
        ordered_names = [names[order[index]] for index in kept]
        replies = receive_fedkd_replies(tasks, sent, ordered_names, max_bytes=job.max_message_bytes)
    trainings = receive_trainings(sent, ordered_names, max_bytes=job.max_message_bytes, models=models)
    model._set_fitted(fedkd_server_step(model, replies, public, server_seeds, int(seed_sequence.entropy), trainings,
                                        noise=noise, schemas=None if model.multilabel else schemas))


def _secure_level_sum(grid, job, model, tasks, order, names, configs, models, schemas) -> tuple:
    """FedKD under secure aggregation: the tasks (:func:`_secure_train`), then Flower's SecAgg+ over the parties
    that took theirs; the level sum and, for those parties, their DP training reports, models, schemas and names.

    A party whose silo refused sends its refusal alone and takes no part in the sum (``model.refused_``).
    """
    from privfed.federation.secure_aggregation import secaggplus_level_sum

    present, sent = _secure_train(grid, job, model, tasks, order, names, configs)
    if not present:
        raise RefusedRunError(model.refused_, "FedKD cannot run: no party took part")
    by_node = {node: (task, local, schema) for node, task, local, schema in zip(order, tasks, models, schemas)}
    level_sum = secaggplus_level_sum(grid, {node: by_node[node][0] for node in present}, n_parties=len(order),
                                     timeout=job.timeout, colluders=job.estimator.collusion)
    expected = (len(tasks[0].public), len(tasks[0].classes))
    if level_sum.level_sum.shape != expected:
        raise MessageError(f"SecAgg+ returned a level sum of shape {level_sum.level_sum.shape}, expected {expected}")
    return (level_sum, sent, [by_node[node][1] for node in present], [by_node[node][2] for node in present],
            [names[node] for node in present])


# --- PrivateKT -------------------------------------------------------------------------------------
def _train_privatekt(grid, job, model, public, schemas, classes, order, names) -> None:
    """PrivateKT: each round, a task to each sampled client only; their randomized-response reports come back.

    Fault policy: a sampled client that times out or disconnects is dropped for that round and the run
    continues (``PrivateKT._fit_rounds`` records it); a malformed report still stops the run.
    """
    model._validate(len(public))
    # The clients' DP-SGD configuration (the model's dp=) travels in the spec; their releases come back as dp-training.
    config = {"model": model_spec(model.model, name="model"), "max-message-bytes": int(job.max_message_bytes)}

    refusals = RefusalLog(len(order), "PrivateKT")

    def exchange(clients, tasks):
        refusals.round += 1
        clients, tasks = refusals.skip_stopped(clients, tasks)  # a client whose silo refused is sent nothing more
        contents = {order[client]: to_recorddict([task.to_record()], config) for client, task in zip(clients, tasks)}
        received, missing = _exchange_allowing_missing(grid, contents, "train", names, job.timeout, "train")
        index = {node: client for client, node in enumerate(order)}
        reports = {}
        for node, (records, _) in received.items():
            if is_refusal(records, sender=names[node]):
                (refusal,) = refusals_in([records], [names[node]])
                refusals.add(index[node], refusal.reason)
            else:
                reports[index[node]] = records
        return reports, [index[node] for node in missing]

    model._fit_rounds(public, schemas, classes, [names[node] for node in order], exchange,
                      max_bytes=job.max_message_bytes)
    model.refused_ = refusals.refused
def selective_fd_configs(model: Any, n_parties: int) -> list[dict]:
    """Each party's config for Selective-FD, FedMD or independent learning (its model spec); refuses what
    cannot run on Flower, before any message: a ``callback`` or a ``feature_map`` (code cannot travel to
    the parties)."""
    model._validate()
    if model.callback is not None:
        raise ValueError("callback runs in-process only (fit): on Flower the client models stay on the parties")
    if getattr(model, "feature_map", None) is not None:
        raise ValueError("feature_map must be None on Flower: a callable cannot travel to the parties")
    local_models = model._client_models(n_parties)
    pipeline = model._protocol().name.lower().replace(" ", "-")  # what a party's silo budget records
    return [{"local-model": model_spec(m, name=f"model[{i}]"), "pipeline": pipeline}
            for i, m in enumerate(local_models)]


class _SuperNodeClients:
    """Selective-FD's parties as SuperNodes: the in-process
    :class:`~privfed.pipelines.selective_fd.local_clients.LocalClients`' four calls, each a ``train.selective-fd``
    message per party; the party keeps its state in ``context.state``."""

    def __init__(self, grid: Any, job: ServerJob, order: list[int], names: dict[int, str], configs: list[dict]):
        self.grid, self.job, self.order, self.names = grid, job, order, names
        self.configs = {node: {**config, "max-message-bytes": int(job.max_message_bytes)}
                        for node, config in zip(order, configs)}

    def _send(self, records: dict[int, Record | None], step: str, *, replies: bool,
              refusable: bool = False) -> list[list[Record]]:
        """Send each party its record (none to a party whose record is None: it stopped taking part) and return
        what each sent ([] for those sent nothing). A silo's refusal is returned when ``refusable`` (the server
        goes on without that party), and raises :class:`RefusedRunError` otherwise."""
        contents = {node: to_recorddict([record], self.configs[node]) for node, record in records.items()
                    if record is not None}
        results = _exchange(self.grid, contents, "train.selective_fd", self.names, self.job.timeout, step)
        sent = [results[node][0] if node in contents else [] for node in records]
        refused = refusals_in(sent, [self.names[node] for node in records])
        if refused and not refusable:
            raise RefusedRunError(refused, f"Selective-FD cannot go on at the {step} step")
        refusing = {refusal.party for refusal in refused}
        for index, (node, party_sent) in enumerate(zip(records, sent)):
            if not replies and party_sent and index not in refusing:
                raise MessageError(f"{self.names[node]} sent {len(party_sent)} messages to the {step} step, "
                                   "expected none")
        return sent

    def _records(self, messages: list) -> dict[int, Record | None]:
        return {node: None if m is None else m.to_record() for node, m in zip(self.order, messages)}

    def setup(self, messages: list) -> list[list[Record]]:
        return self._send(self._records(messages), "setup", replies=False, refusable=True)

    def share(self, messages: list, round_index: int) -> list[list[Record]]:
        return self._send(self._records(messages), f"round {round_index + 1} share", replies=True, refusable=True)

    def distill(self, messages: list, round_index: int) -> None:
        self._send(self._records(messages), f"round {round_index + 1} distillation", replies=False)

    def models(self) -> list[Any]:
        raise ValueError("the client models stay on the parties during a Flower run")

    def final_models(self, client: int) -> tuple[list[Any], dict[str, list[int]]]:
        """Client ``client``'s model (the one the run publishes) in the bundle's safe formats; the others stay."""
        node = self.order[client]
        sent = self._send({node: Record(PUBLISH_REQUEST, {}, {})}, "publish", replies=True)[0]
        if len(sent) != 1:
            raise MessageError(f"{self.names[node]} sent {len(sent)} messages to the publish step, expected 1")
        models: list[Any] = [None] * len(self.order)
        models[client] = model_from_record(sent[0], sender=self.names[node], max_bytes=self.job.max_message_bytes)
        sizes = [0] * len(self.order)
        sizes[client] = sent[0].nbytes
        return models, {sent[0].kind: sizes}

    def selectors(self) -> list[None]:
        return [None] * len(self.order)

    def trainings(self) -> list[list[Record]]:
        """Every party's ``dp-training`` report (none from a party whose model trains without DP-SGD)."""
        return self._send({node: Record(DP_TRAINING_REQUEST, {}, {}) for node in self.order}, "DP training report",
                          replies=True)


def _train_selective_fd(grid, job, model, public, schemas, classes, order, names) -> None:
    """Selective-FD, FedMD, independent learning: the estimator's own round loop over the SuperNodes."""
    from privfed.pipelines.selective_fd.steps import continues_training

    configs = selective_fd_configs(model, len(order))
    published = model._client_models(len(order))[model.client] if model.client < len(order) else None
    if job.output_bundle and published is not None and not continues_training(published):
        raise ValueError(
            f"output-bundle: client {model.client}'s model {type(published).__name__} is refitted every round and "
            "published as privfed's class-code wrapper, which a bundle cannot hold; use a TorchClassifier-family "
            "model for that client or leave output-bundle empty (nothing was trained)"
        )
    clients = _SuperNodeClients(grid, job, order, names, configs)
    model._run(clients, model._protocol(), classes, public, schemas, [names[node] for node in order],
               max_bytes=job.max_message_bytes)


def make_server_app(job: ServerJob | None = None, on_fitted: Callable[[Any], None] | None = None) -> Any:
    """A Flower ``ServerApp`` running :func:`run_server` on ``job`` (default: the one its run config describes)."""
    from flwr.serverapp import ServerApp

    server = ServerApp()

    @server.main()
    def main(grid: Any, context: Any) -> None:
        try:
            fitted = run_server(grid, job if job is not None else job_from_config(context.run_config))
        except Exception as error:  # one line for `privfed federation run`; Flower logs the traceback
            if job is None:
                from privfed.federation.summary import FAILURE_PREFIX, failure_record

                print(FAILURE_PREFIX + json.dumps(failure_record(error)), flush=True)
            raise
        if on_fitted is not None:
            on_fitted(fitted)

    return server


def job_from_config(config: Any) -> ServerJob:
    """The :class:`ServerJob` of a ``flwr run`` configuration (``public-path``, ``num-supernodes``, ...)."""
    public_path = str(config.get("public-path", ""))
    if not public_path:
        raise ValueError("the run config needs public-path, the public (unlabelled) set's file on the server")
    public = load_public(public_path)
    test_path = str(config.get("test-path", ""))
    try:
        test = load_party_data(test_path) if test_path else None
    except ValueError as error:  # its messages name a party's data-path
        raise ValueError(f"test-path (a labelled test file on the server): {error}") from None
    timeout = float(config.get("timeout", 0.0)) or None
    return ServerJob(
        estimator=estimator_from_config(config),
        public=public,
        num_supernodes=int(config.get("num-supernodes", 3)),
        timeout=timeout,
        max_message_bytes=int(config.get("max-message-bytes", DEFAULT_MAX_BYTES)),
        output_bundle=str(config.get("output-bundle", "")) or None,
        overwrite=_flag(config, "overwrite"),
        ship_evidence=_flag(config, "ship-evidence"),
        test=test,
        announce=True,
        intended_use=str(config.get("intended-use", "")) or None,
    )


def _flag(config: Any, key: str) -> bool:
    """A boolean run-config key (default false); ValueError naming it for anything but true/false."""
    value = config.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"the run config's {key} must be true or false, got {value!r}")
    return value


def __getattr__(name: str) -> Any:
    # ``flwr run`` loads ``privfed.federation.server_app:app``; built on first access so that importing this
    # module does not need Flower.
    if name == "app":
        return make_server_app()
    raise AttributeError(name)
