"""Flower's ServerApp and one ClientApp per virtual SuperNode, all in this process: no Ray, no sockets.

Imports Flower (``pip install 'privfed[federation]'``); :func:`privfed.federation.simulate` imports this module
only for ``backend="in-process"``.

:func:`run_in_process` calls the ``ServerApp`` as Flower's runtime calls it (``server_app(grid, context)``) with an
:class:`InProcessGrid`, a ``flwr.serverapp.Grid`` that hands every message to the ``ClientApp`` as a SuperNode
would (``client_app(message, context)``, with that node's own ``Context``, kept across messages) and returns its
reply. A copy of each message crosses in each direction, as a real grid's serialisation makes one: no object is
shared between the server and a party (SecAgg+'s client mod edits what it receives). A ClientApp that raises
becomes an error reply with Flower's code for it (``CLIENT_APP_RAISED_EXCEPTION``), as a SuperNode reports it.

The parties run one after another, each to completion, so nothing ever times out. What a party adds for a
guarantee it draws as on a SuperNode: inside its own ClientApp call, from its own secret source
(:class:`~privfed.accounting.noise_source.NoiseSource`), never sent in a message. What this runtime does not give is
isolation: every party's data and the server's share one process and its memory, which is what a simulation on
one machine is; ``flwr run`` and ``privfed federation local`` give each its own process.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import traceback
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from flwr.app import Context, Error, Message, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

__all__ = ["InProcessGrid", "run_in_process"]

#: The run id of the one run an in-process runtime serves.
RUN_ID = 1
#: Node id of virtual SuperNode ``i``: ``FIRST_NODE_ID + i`` (1 is Flower's SuperLink, 0 means "no node").
FIRST_NODE_ID = 100


class InProcessGrid(Grid):
    """A Flower ``Grid`` whose SuperNodes are ``client_app`` called in this process, one per node config.

    Node ``FIRST_NODE_ID + i`` has ``node_configs[i]`` and its own ``Context`` (run config ``run_config``), whose
    ``state`` persists between its messages as on a SuperNode.
    """

    def __init__(self, client_app: Any, node_configs: Sequence[Mapping[str, Any]],
                 run_config: Mapping[str, Any] | None = None) -> None:
        self._client_app = client_app
        self._contexts = {FIRST_NODE_ID + index: Context(RUN_ID, FIRST_NODE_ID + index, dict(config), RecordDict(),
                                                         dict(run_config or {}))
                          for index, config in enumerate(node_configs)}
        self._replies: dict[str, Message] = {}
        self._sent = 0
        self._run = Run.create_empty(RUN_ID)

    def set_run(self, run: Run) -> None:
        self._run = run

    @property
    def run(self) -> Run:
        return self._run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return list(self._contexts)

    def _deliver(self, message: Message) -> Message:
        """The reply of the node's ClientApp to a copy of ``message`` (a copy of it), or Flower's error reply."""
        node = message.metadata.dst_node_id
        if node not in self._contexts:
            return Message(Error(code=ErrorCode.NODE_UNAVAILABLE, reason=f"no SuperNode {node}"), reply_to=message)
        try:
            return copy.deepcopy(self._client_app(copy.deepcopy(message), self._contexts[node]))
        except Exception as error:  # a SuperNode reports a failing ClientApp as an error reply
            logging.getLogger("flwr").error("the ClientApp of node %s raised:\n%s", node, traceback.format_exc())
            return Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                                 reason=f"{type(error).__name__}: {error}"), reply_to=message)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for message in messages:
            self._sent += 1
            ids.append(str(self._sent))
            self._replies[ids[-1]] = self._deliver(message)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._replies.pop(key) for key in message_ids if key in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))


@contextlib.contextmanager
def _task_identity() -> Iterator[None]:
    """Flower's identity of the task running in this process, as its runtime sets it for a ServerApp (messages read
    it when they are made), restored afterwards."""
    names = ("run_id", "node_id", "task_id")
    before = {}
    for name in names:
        try:
            before[name] = getattr(TaskIdentity, name)
        except RuntimeError:  # not set
            before[name] = None
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = RUN_ID, SUPERLINK_NODE_ID, 1
    try:
        yield
    finally:
        for name, value in before.items():
            setattr(TaskIdentity, name, value)


def run_in_process(server_app: Any, client_app: Any, node_configs: Sequence[Mapping[str, Any]],
                   run_config: Mapping[str, Any] | None = None) -> None:
    """Run ``server_app`` with one virtual SuperNode running ``client_app`` per entry of ``node_configs``."""
    grid = InProcessGrid(client_app, node_configs, run_config)
    with _task_identity():
        server_app(grid, Context(RUN_ID, SUPERLINK_NODE_ID, {}, RecordDict(), dict(run_config or {})))
