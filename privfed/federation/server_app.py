"""privfed's Flower ServerApp: the server steps of a pipeline, moving messages to and from the SuperNodes.

``flwr run`` starts :data:`app`, which reads the run configuration (``docs/federation.md``), fits the
estimator it describes and writes the output bundle; :func:`privfed.federation.simulate` runs the same
:func:`run_server` through :func:`make_server_app` and returns the fitted estimator instead.

The exchange: a ``query.schema`` message to every SuperNode (each party's schema, checked before any
training), then one ``train`` message per party carrying its task (FedKT: ``FedKTTask``; FedKD:
``FedKDTask``) and the model specs; the replies are validated by the pipeline's ``receive_*_replies``
and handed to its server step.

Faults: a party that does not reply within ``timeout`` seconds, or replies with an error, stops the
run with a :class:`FederationError` naming it and the step — FedKT and FedKD are one-shot, so a
federation missing a party is not the federation the user configured, and nothing is written. A malformed,
oversized or wrongly shaped reply stops it the same way (a :class:`MessageError` naming the party).
The bundle is written only after the server step has succeeded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from privfed.federation.task import (
    estimator_from_config,
    from_recorddict,
    load_public,
    model_spec,
    to_recorddict,
)
from privfed.pipelines._dp_ledger import receive_trainings
from privfed.pipelines._random import as_seed_sequence
from privfed.pipelines.fedkd_steps import receive_fedkd_replies
from privfed.pipelines.fedkt_steps import FedKTTask, fedkt_server_step, fedkt_tasks, receive_fedkt_replies
from privfed.pipelines.messages import DEFAULT_MAX_BYTES, MessageError, record_sizes
from privfed.pipelines.party_schema import PartySchema, federation_classes

# `app` (built on first access, see __getattr__) is listed: Flower checks the component statically, in __all__.
__all__ = ["FederationError", "ServerJob", "app", "job_from_config", "make_server_app", "run_server"]  # noqa: F822

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


def _wait_for_nodes(grid: Any, count: int, timeout: float | None) -> list[int]:
    """The first ``count`` SuperNodes to connect (sorted ids); waits at most ``timeout`` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= count:
            return nodes[:count]
        if deadline is not None and time.monotonic() > deadline:
            raise FederationError(
                f"only {len(nodes)} of {count} SuperNodes connected within timeout={timeout} s; nothing was written"
            )
        time.sleep(_POLL_SECONDS)


def _exchange(
    grid: Any, contents: dict[int, Any], message_type: str, names: dict[int, str], timeout: float | None, step: str
) -> dict[int, tuple[list, dict]]:
    """Send one message per node and collect every reply, or raise naming the parties that failed."""
    from flwr.app import Message

    messages = [Message(content, dst_node_id=node, message_type=message_type) for node, content in contents.items()]
    replies = {reply.metadata.src_node_id: reply for reply in grid.send_and_receive(messages, timeout=timeout)}
    missing = [names[node] for node in contents if node not in replies]
    if missing:
        raise FederationError(
            f"{', '.join(missing)} did not reply to the {step} step within timeout={timeout} s (timed out or "
            "disconnected); the run stops without partial results and nothing was written"
        )
    received = {}
    for node in contents:
        reply = replies[node]
        if reply.has_error():
            raise FederationError(f"{names[node]} failed at the {step} step: {reply.error.reason}; nothing was written")
        received[node] = from_recorddict(reply.content, sender=names[node])
    return received


def run_server(grid: Any, job: ServerJob) -> Any:
    """Fit ``job.estimator`` (FedKT or FedKD) over the Grid's SuperNodes; return it fitted, as ``fit`` would."""
    from privfed.pipelines.fedkd import FedKD

    model = job.estimator
    model._validate()
    multilabel = isinstance(model, FedKD) and bool(model.multilabel)
    public = np.asarray(job.public)
    if public.ndim < 2 or len(public) == 0:
        raise ValueError(f"public must be a non-empty array of shape (n, features...), got shape {public.shape}")
    nodes = _wait_for_nodes(grid, job.num_supernodes, job.timeout)

    # 1. Schemas: every party describes its data; the server orders the parties and checks them.
    names = {node: f"node {node}" for node in nodes}
    query = {"multilabel": True} if multilabel else None  # FedKD multi-label: (n, L) 0/1 indicators
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
    train = _train_fedkd if isinstance(model, FedKD) else _train_fedkt
    train(grid, job, model, public, schemas, classes, order, names)
    if job.output_bundle:
        from privfed.bundle import save_bundle

        save_bundle(model, job.output_bundle, evidence=model.ledger_.evidence())
    return model


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


def _train_fedkt(grid, job, model, public, schemas, classes, order, names) -> None:
    """FedKT: tasks with the public queries; replies with the students' predictions (and L2's evidence)."""
    student = model.teacher if model.student is None else model.student
    specs = {"teacher": model_spec(model.teacher, name="teacher"), "student": model_spec(student, name="student")}
    ordered_names = [names[node] for node in order]
    seed_sequence = as_seed_sequence(model.random_state)
    party_seeds, server_seeds = seed_sequence.spawn(2)
    tasks: list[FedKTTask] = fedkt_tasks(model, schemas, classes, public, party_seeds, ordered_names)
    sent = _send_tasks(grid, job, tasks, order, names, [specs] * len(order))
    replies = receive_fedkt_replies(tasks, sent, ordered_names, max_bytes=job.max_message_bytes)
    trainings = receive_trainings(sent, ordered_names, max_bytes=job.max_message_bytes,
                                  models=[model.teacher] * len(order))
    fitted = fedkt_server_step(model, replies, classes, public, seed_sequence, server_seeds, trainings)
    schema_records = [[schema.to_record()] for schema in schemas]
    model._set_fitted(fitted, classes, record_sizes([first + rest for first, rest in zip(schema_records, sent)]))


def _train_fedkd(grid, job, model, public, schemas, classes, order, names) -> None:
    """FedKD: tasks with the public set; replies with quantized logits and class counts; the server distils."""
    if len(classes) < 2:
        raise ValueError(f"the parties' labels hold a single class {classes[0]!r}; FedKD needs at least 2")
    model.classes_ = classes
    local_models = model._local_models(len(order))
    configs = [{"local-model": model_spec(m, name=f"local_model[{i}]")} for i, m in enumerate(local_models)]
    seed_sequence = as_seed_sequence(model.random_state)
    party_seeds, server_seeds = seed_sequence.spawn(2)
    tasks = model._party_tasks(public, party_seeds, len(order))
    sent = _send_tasks(grid, job, tasks, order, names, configs)
    ordered_names = [names[node] for node in order]
    replies = receive_fedkd_replies(tasks, sent, ordered_names, max_bytes=job.max_message_bytes)
    trainings = receive_trainings(sent, ordered_names, max_bytes=job.max_message_bytes, models=local_models)
    model._fit_server(replies, public, server_seeds, int(seed_sequence.entropy), trainings)


def make_server_app(job: ServerJob | None = None, on_fitted: Callable[[Any], None] | None = None) -> Any:
    """A Flower ``ServerApp`` running :func:`run_server` on ``job`` (default: the one its run config describes)."""
    from flwr.serverapp import ServerApp

    server = ServerApp()

    @server.main()
    def main(grid: Any, context: Any) -> None:
        fitted = run_server(grid, job if job is not None else job_from_config(context.run_config))
        if on_fitted is not None:
            on_fitted(fitted)

    return server


def job_from_config(config: Any) -> ServerJob:
    """The :class:`ServerJob` of a ``flwr run`` configuration (``public-path``, ``num-supernodes``, ...)."""
    public_path = str(config.get("public-path", ""))
    if not public_path:
        raise ValueError("the run config needs public-path, the public (unlabelled) set's file on the server")
    public = load_public(public_path)
    timeout = float(config.get("timeout", 0.0)) or None
    return ServerJob(
        estimator=estimator_from_config(config),
        public=public,
        num_supernodes=int(config.get("num-supernodes", 3)),
        timeout=timeout,
        max_message_bytes=int(config.get("max-message-bytes", DEFAULT_MAX_BYTES)),
        output_bundle=str(config.get("output-bundle", "")) or None,
    )


def __getattr__(name: str) -> Any:
    # ``flwr run`` loads ``privfed.federation.server_app:app``; built on first access so that importing this
    # module does not need Flower.
    if name == "app":
        return make_server_app()
    raise AttributeError(name)
