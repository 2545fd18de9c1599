"""privfed's Flower ClientApp: one party's steps, on the data its SuperNode holds.

Each SuperNode reads its own data from ``data-path`` in its node config (``flower-supernode
--node-config 'data-path="site-a.npz"'``; optional ``label-column`` and ``feature-columns`` for
CSV/Parquet, ``n-features`` for LIBSVM, ``party-index`` to fix the party's position, ``budget-path`` and
``study`` for the silo's own privacy budget, charged before every release: see :func:`silo_budget`); under the
simulation engine, from the run config's ``data-paths``
(comma-separated, indexed by the virtual SuperNode's ``partition-id``). Rows never leave the party:
the schema step sends the shape of an example, the labels present and the number of examples, and the
train step sends what the pipeline's party step releases (FedKT: the students' predictions).

Every received message passes :meth:`~privfed.pipelines.protocol.messages.WireMessage.from_record` first; the
model classes a party trains are built from JSON specs of trusted packages only (nothing is unpickled).

Imports: Flower runs each message in a fresh ``flwr-clientapp`` process that imports this module, so it loads a
pipeline's party side (its steps, their accounting, scikit-learn or torch through the models) only when a message
of that pipeline arrives: the schema step imports numpy and the message layer, a FedKT party's train step neither
torch, pandas nor skops.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from privfed.accounting.documents import parse_json
from privfed.federation.task import (
    DP_TRAINING_REQUEST,
    PUBLISH_REQUEST,
    build_model,
    from_recorddict,
    load_party_data,
    model_to_record,
    to_recorddict,
)
from privfed.pipelines.data.party_schema import describe_party
from privfed.pipelines.protocol.messages import DEFAULT_MAX_BYTES, MessageError
from privfed.pipelines.protocol.silo_gate import SCHEMA_NOT_WITHHELD, admit

# `app` (built on first access, see __getattr__) is listed: Flower checks the component statically, in __all__.
__all__ = ["app", "make_client_app", "party_data_path", "silo_budget"]  # noqa: F822


def party_data_path(context: Any, data_paths: Sequence[str] | None = None) -> str:
    """This SuperNode's data file: node config ``data-path``, else ``data-paths[partition-id]``."""
    node = context.node_config
    if "data-path" in node:
        return str(node["data-path"])
    paths = list(data_paths) if data_paths is not None else [
        p.strip() for p in str(context.run_config.get("data-paths", "")).split(",") if p.strip()
    ]
    index = int(node.get("partition-id", -1))
    if not 0 <= index < len(paths):
        raise ValueError(
            "this SuperNode has no data: pass --node-config 'data-path=\"...\"' (deployment), or the run config "
            f"data-paths with one file per virtual SuperNode (simulation; partition-id={index}, {len(paths)} paths)"
        )
    return paths[index]


def _party_index(context: Any) -> int:
    node = context.node_config
    return int(node.get("party-index", node.get("partition-id", -1)))


def _fedkt_step(task: Any, X: Any, y: Any, config: dict, party: str) -> list:
    from privfed.pipelines.fedkt.steps import fedkt_party_step

    teacher = build_model(str(config.get("teacher", "")), name="teacher")
    student = build_model(str(config.get("student", "")), name="student")
    return fedkt_party_step(task, X, y, teacher=teacher, student=student, party=party).sent()


def _fedkd_step(task: Any, X: Any, y: Any, config: dict, party: str) -> list:
    from privfed.pipelines.fedkd.steps import fedkd_party_step

    local_model = build_model(str(config.get("local-model", "")), name="local_model")
    return fedkd_party_step(task, X, y, local_model=local_model, party=party).sent()


def _privatekt_step(task: Any, X: Any, y: Any, config: dict, party: str) -> list:
    from privfed.pipelines.privatekt.steps import privatekt_party_step

    model = build_model(str(config.get("model", "")), name="model")
    return privatekt_party_step(task, X, y, model=model, party=party)


def _fedkt_release(task: Any, config: dict, budget: Any) -> Any:
    from privfed.pipelines.fedkt.steps import fedkt_planned_release

    return fedkt_planned_release(task, budget_unit=budget.unit)


def _fedkd_release(task: Any, config: dict, budget: Any) -> Any:
    from privfed.pipelines.fedkd.steps import fedkd_planned_release

    return fedkd_planned_release(task, local_model=build_model(str(config.get("local-model", "")),
                                                               name="local_model"))


def _privatekt_release(task: Any, config: dict, budget: Any) -> Any:
    from privfed.pipelines.privatekt.steps import privatekt_planned_release

    return privatekt_planned_release(task)


def _fedkt_task() -> tuple:
    from privfed.pipelines.fedkt.steps import FedKTTask

    return FedKTTask, "queries", _fedkt_step, _fedkt_release, "fedkt"


def _fedkd_task() -> tuple:
    from privfed.pipelines.fedkd.steps import FedKDTask

    return FedKDTask, "public", _fedkd_step, _fedkd_release, "fedkd"


def _privatekt_task() -> tuple:
    from privfed.pipelines.privatekt.steps import PrivateKTTask

    return PrivateKTTask, "queries", _privatekt_step, _privatekt_release, "privatekt"


#: Task message kind → what handles it, imported when a task of that kind arrives: (message class, its field of
#: feature rows, party step, its planned release, pipeline). The kinds are the classes' ``KIND`` (tested).
_TASKS = {"fedkt-task": _fedkt_task, "fedkd-task": _fedkd_task, "privatekt-task": _privatekt_task}
#: The Selective-FD messages a party's ``train.selective_fd`` function takes (the classes' ``KIND``, tested).
_SELECTIVE_FD_SETUP, _SELECTIVE_FD_ROUND = "selective-fd-setup", "selective-fd-round"


def silo_budget(context: Any) -> tuple[Any, str]:
    """This SuperNode's own budget (node config ``budget-path``, opened with the policy its file states, and the
    key of a signed ledger from ``budget-signing-key``, a PEM file) and the study it charges (node config
    ``study``, default ``"flower run <run id>"``); (None, "") without a budget."""
    node = context.node_config
    if "budget-path" not in node:
        return None, ""
    from privfed.accounting.silo_budget import SiloBudget, load_key

    study = str(node.get("study", "")).strip() or f"flower run {getattr(context, 'run_id', '?')}"
    key = str(node.get("budget-signing-key", "")).strip()
    return SiloBudget.open(str(node["budget-path"]), signing_key=load_key(key, private=True) if key else None), study


def _selective_fd_release(records: list, config: dict, state: Any, party: str) -> Any:
    """What this party's reply to a Selective-FD message releases (the ``planned_*_release`` functions of
    :mod:`~privfed.pipelines.selective_fd.planned_releases`), from the message, the setup it stored and its model's
    configuration — never its data. None for the distillation and DP-training-report steps (nothing new leaves)."""
    if len(records) != 1 or records[0].kind not in (_SELECTIVE_FD_SETUP, _SELECTIVE_FD_ROUND, PUBLISH_REQUEST):
        return None
    from privfed.accounting.dpsgd import DPSGD
    from privfed.pipelines.selective_fd.planned_releases import (
        planned_publish_release,
        planned_round_release,
        planned_setup_release,
    )
    from privfed.pipelines.selective_fd.steps import STATE_KIND, SelectiveFDRound, SelectiveFDSetup

    max_bytes = int(config.get("max-message-bytes", DEFAULT_MAX_BYTES))
    if records[0].kind == SelectiveFDSetup.KIND:
        return planned_setup_release(SelectiveFDSetup.from_record(records[0], sender="the server", max_bytes=max_bytes))
    stored = {record.kind: record for record in from_recorddict(state, sender=f"{party}'s own stored state")[0]}
    if SelectiveFDSetup.KIND not in stored:
        return f"{party} took no part: its silo refused the setup"
    setup = SelectiveFDSetup.from_record(stored[SelectiveFDSetup.KIND], sender=f"{party}'s own stored state")
    local_model = build_model(str(config.get("local-model", "")), name="local_model")
    if records[0].kind == SelectiveFDRound.KIND:
        message = SelectiveFDRound.from_record(records[0], sender="the server", max_bytes=max_bytes)
        return planned_round_release(setup, message, local_model=local_model)
    trainings = parse_json(str(stored[STATE_KIND].scalars.get("dp-trainings", "[]")), f"{party}'s dp-trainings")
    return planned_publish_release(setup, local_model=local_model, trainings=[DPSGD(**t) for t in trainings])


def _selective_fd_step(records: list, config: dict, X: Any, y: Any, state: Any, party: str) -> list:
    """One Selective-FD message (setup, round, ensemble or publish) on this party's state, kept in ``state``.

    ``state`` is the SuperNode's ``context.state``: the party's model, selector and scores as arrays
    (:func:`~privfed.pipelines.selective_fd.steps.client_state`), rebuilt for every message.
    """
    from privfed.pipelines.selective_fd.steps import (
        STATE_KIND,
        SelectiveFDEnsemble,
        SelectiveFDRound,
        SelectiveFDSetup,
        client_state,
        distill_step,
        restore_client,
        setup_client,
        share_step,
        training_step,
    )

    kinds = (SelectiveFDSetup, SelectiveFDRound, SelectiveFDEnsemble)
    by_kind = {kind.KIND: kind for kind in kinds}
    requests = {PUBLISH_REQUEST, DP_TRAINING_REQUEST}
    if len(records) != 1 or records[0].kind not in {*by_kind, *requests}:
        raise MessageError(f"the server sent {[r.kind for r in records]} to the Selective-FD step, expected one of "
                           f"{sorted({*by_kind, *requests})}")
    local_model = build_model(str(config.get("local-model", "")), name="local_model")
    max_bytes = int(config.get("max-message-bytes", DEFAULT_MAX_BYTES))
    if records[0].kind == SelectiveFDSetup.KIND:
        setup = SelectiveFDSetup.from_record(records[0], sender="the server", max_bytes=max_bytes)
        if setup.shares and setup.proxy.shape[1:] != X.shape[1:]:
            raise MessageError(f"the server sent proxy examples of shape {setup.proxy.shape[1:]}, {party}'s data has "
                               f"{X.shape[1:]}")
        client, sent = setup_client(setup, X, y, local_model=local_model, party=party), []
    else:
        stored, _ = from_recorddict(state, sender=f"{party}'s own stored state")
        if records[0].kind == DP_TRAINING_REQUEST and not stored:
            return []  # its silo refused the setup: it never trained
        client = restore_client([r for r in stored if r.kind in (SelectiveFDSetup.KIND, STATE_KIND)], X, y,
                                local_model=local_model, party=party)
        if records[0].kind == PUBLISH_REQUEST:
            return [model_to_record(client.model)]
        if records[0].kind == DP_TRAINING_REQUEST:
            return training_step(client)
        message = by_kind[records[0].kind].from_record(records[0], sender="the server", max_bytes=max_bytes)
        positions = message.batch if isinstance(message, SelectiveFDRound) else message.rows
        if positions.size and not 0 <= positions.min() <= positions.max() < len(client.setup.proxy):
            raise MessageError(f"the server sent proxy positions outside 0..{len(client.setup.proxy) - 1}")
        if isinstance(message, SelectiveFDRound):
            client, share = share_step(client, message)
            sent = [] if share is None else [share]
        else:
            client, sent = distill_step(client, message), []
    for key, value in to_recorddict(client_state(client)).items():
        state[key] = value
    return [message.to_record() for message in sent]


def _secure_aggregation_mod(message: Any, context: Any, call_next: Any) -> Any:
    """:func:`~privfed.federation.secure_aggregation.secure_aggregation_mod`, imported when a train message arrives."""
    from privfed.federation.secure_aggregation import secure_aggregation_mod

    return secure_aggregation_mod(message, context, call_next)


def make_client_app(data_paths: Sequence[str] | None = None) -> Any:
    """A Flower ``ClientApp`` running the party steps (``data_paths``: the simulation's files, by partition-id)."""
    from flwr.app import Message
    from flwr.clientapp import ClientApp

    client = ClientApp()

    def party_data(context: Any) -> tuple[Any, Any]:
        node = context.node_config
        features = str(node.get("feature-columns", ""))
        return load_party_data(
            party_data_path(context, data_paths),
            label_column=node.get("label-column", -1),
            feature_columns=[c.strip() for c in features.split(",") if c.strip()] or None,
            n_features=int(node["n-features"]) if "n-features" in node else None,
        )

    @client.query("schema")
    def schema(message: Any, context: Any) -> Any:
        _, config = from_recorddict(message.content, sender="the server")
        public_classes = json.loads(str(config["public-classes"])) if "public-classes" in config else None
        if public_classes is None and silo_budget(context)[0] is not None:
            raise ValueError(f"this silo's budget refuses the study: {SCHEMA_NOT_WITHHELD}")
        X, y = party_data(context)
        described = describe_party(X, y, multilabel=bool(config.get("multilabel", False)),
                                   public_classes=public_classes)
        content = to_recorddict([described.to_record()], {"party-index": _party_index(context)})
        return Message(content, reply_to=message)

    @client.train(mods=[_secure_aggregation_mod])
    def train(message: Any, context: Any) -> Any:
        from privfed.federation.secure_aggregation import (
            is_vote_request,
            noisy_votes_reply,
            sends_through_secure_sum,
            store_noisy_votes,
        )

        if is_vote_request(message.content):  # SecAgg+ (secure_aggregation=True) asks for the noisy vector
            return noisy_votes_reply(message, context.state)
        records, config = from_recorddict(message.content, sender="the server")
        if len(records) != 1 or records[0].kind not in _TASKS:
            raise MessageError(
                f"the server sent {[r.kind for r in records]} to the train step, expected one of {sorted(_TASKS)}"
            )
        kind, features, run_step, planned_release, pipeline = _TASKS[records[0].kind]()
        max_bytes = int(config.get("max-message-bytes", DEFAULT_MAX_BYTES))
        budget, study = silo_budget(context)
        if budget is not None:  # charged from the task's public parameters, before the data is read
            planned = planned_release(kind.from_record(records[0], sender="the server", max_bytes=max_bytes),
                                      config, budget)
            refusal = admit(budget, planned, study=study, pipeline=pipeline)
            if refusal is not None:
                return Message(to_recorddict([refusal.to_record()]), reply_to=message)
        X, y = party_data(context)
        task = kind.from_record(records[0], sender="the server", shapes={features: (None, *X.shape[1:])},
                                max_bytes=max_bytes)
        sent = run_step(task, X, y, config, f"party {_party_index(context)}")
        if sends_through_secure_sum(task):
            sent = store_noisy_votes(sent, context.state)  # sent later, masked, through SecAgg+
        return Message(to_recorddict([reply.to_record() for reply in sent]), reply_to=message)

    @client.train("selective_fd")
    def selective_fd(message: Any, context: Any) -> Any:
        records, config = from_recorddict(message.content, sender="the server")
        party = f"party {_party_index(context)}"
        budget, study = silo_budget(context)
        if budget is not None:  # charged from the messages' public parameters, before the data is read
            refusal = admit(budget, _selective_fd_release(records, config, context.state, party), study=study,
                            pipeline=str(config.get("pipeline", "selective-fd")))
            if refusal is not None:
                return Message(to_recorddict([refusal.to_record()]), reply_to=message)
        X, y = party_data(context)
        sent = _selective_fd_step(records, config, X, y, context.state, party)
        return Message(to_recorddict(sent), reply_to=message)

    return client


def __getattr__(name: str) -> Any:
    # ``flwr run`` and ``flower-supernode`` load ``privfed.federation.client_app:app``; built on first access
    # so that importing this module does not need Flower.
    if name == "app":
        return make_client_app()
    raise AttributeError(name)
