"""A noisy integer sum over Flower's own SecAgg+: FedKT's vote histograms and FedKD's logit levels.

``FedKT(aggregator="skellam", secure_aggregation=True)`` and ``FedKD(aggregator="skellam",
secure_aggregation=True)`` share this one adapter. privfed writes no cryptography: the ClientApp's default
``train`` function runs under Flower's ``secaggplus_mod`` (:func:`secure_aggregation_mod` routes only SecAgg+
messages to it), and the ServerApp runs Flower's ``SecAggPlusWorkflow`` under a ``LegacyContext`` whose
``Strategy`` (:class:`_SecureSumStrategy`) asks every party that took its task for its stored noisy vector.

The exchange, after the schema step:

1. ``train`` with each party's task (``FedKTTask`` with ``party_noise="skellam"``, or ``FedKDTask`` with a
   ``skellam_share_variance``): the party computes its integer vector (FedKT: its consistent-vote histogram;
   FedKD: its quantized logit levels), adds its own Skellam share (:mod:`privfed.pipelines.protocol.secure_sum`) and
   keeps the noisy vector in its ``context.state`` (:func:`store_noisy_votes`); it replies with its DP
   training report only (or nothing);
2. ``SecAggPlusWorkflow`` (four ``train`` stages: setup, key sharing, masked vectors, unmasking): in the
   masked-vectors stage ``secaggplus_mod`` calls the ClientApp, which answers with the stored vector
   as a FitRes (``num_examples=1``, :func:`noisy_votes_reply`); Flower masks it, and the server learns only
   the sum (:func:`secaggplus_sum`; per pipeline :func:`secaggplus_vote_sum`, :func:`secaggplus_level_sum`).

Exact integers: SecAgg+ clips each value to ±``clipping_range``, maps it to ``(x + c)·q/(2c)`` with
``q = quantization_range`` and a weight ``num_examples/max_weight``, sums modulo ``modulus_range``
and returns the weighted average. With ``clipping_range = B`` (an integer bound the party checks its
noisy values against, :func:`~privfed.pipelines.protocol.secure_sum.secure_value_bound`),
``quantization_range = 2B``, ``num_examples = max_weight = 1``, each integer x maps to x + B exactly
(stochastic rounding of an integer is the integer), the sum of n parties stays below
``modulus_range = 2³²`` while n·2B < 2³², and the average times the n contributors is the integer sum
(rounded to remove float error far below ½).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from privfed.federation.secaggplus_neighbourhood import secaggplus_neighbourhood
from privfed.pipelines.fedkd.secure import FedKDLevelSum, FedKDNoisyLevels
from privfed.pipelines.fedkd.steps import FedKDTask
from privfed.pipelines.fedkt.secure import SECURE_AGGREGATOR, FedKTNoisyVotes, FedKTVoteSum
from privfed.pipelines.fedkt.steps import FedKTTask
from privfed.pipelines.protocol.messages import MessageError
from privfed.pipelines.protocol.secure_sum import secure_value_bound

__all__ = ["MODULUS_RANGE", "SECURE_SUM_MESSAGES", "is_vote_request", "noisy_votes_reply", "secaggplus_level_sum",
           "secaggplus_sum", "secaggplus_vote_sum", "secure_aggregation_mod", "sends_through_secure_sum",
           "store_noisy_votes", "vote_sum_from_average"]

#: SecAgg+'s modulus: the largest Flower 1.41 supports (2³²).
MODULUS_RANGE = 2**32
#: The messages a party sends only masked, through SecAgg+: its noisy integer vector (one array each).
SECURE_SUM_MESSAGES = (FedKTNoisyVotes, FedKDNoisyLevels)
#: Where a party keeps its noisy vector between its train step and the SecAgg+ stages.
_STATE_KEY = "privfed.secure-sum-vector"
#: The FitIns config key that asks for the stored vector.
_REQUEST = "privfed-request"


def secure_aggregation_mod(message: Any, context: Any, call_next: Any) -> Any:
    """Flower's ``secaggplus_mod`` for the SecAgg+ stages; every other message goes straight to the ClientApp."""
    from flwr.client.mod import secaggplus_mod
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS

    if RECORD_KEY_CONFIGS in message.content.config_records:
        return secaggplus_mod(message, context, call_next)
    return call_next(message, context)


def sends_through_secure_sum(task: Any) -> bool:
    """Whether a party's ``task`` has it send its noisy vector only through SecAgg+ (FedKT's or FedKD's Skellam
    setting: ``party_noise="skellam"``, or a ``skellam_share_variance``)."""
    if isinstance(task, FedKTTask):
        return task.party_noise == SECURE_AGGREGATOR
    return isinstance(task, FedKDTask) and task.skellam_share_variance is not None


def is_vote_request(content: Any) -> bool:
    """Whether a ``train`` message is SecAgg+'s masked-vectors call for the stored noisy vector (a FitIns)."""
    return "fitins.config" in content.config_records


def store_noisy_votes(sent: list, state: Any) -> list:
    """Keep the party's noisy integer vector (one of :data:`SECURE_SUM_MESSAGES`: FedKT's histogram, FedKD's
    levels) in ``state`` for SecAgg+; return the other messages to send."""
    from flwr.app import Array, ArrayRecord

    mine = [message for message in sent if isinstance(message, SECURE_SUM_MESSAGES)]
    if len(mine) != 1:
        raise MessageError(f"the party step made {len(mine)} noisy vectors for secure aggregation, expected 1")
    (name,) = type(mine[0]).ARRAYS
    values = np.asarray(getattr(mine[0], name))
    if values.dtype.kind not in "iu":
        raise MessageError(f"the party step's noisy {mine[0].KIND} must hold integers, got dtype {values.dtype}")
    state[_STATE_KEY] = ArrayRecord({"noisy_vector": Array(values)})
    return [message for message in sent if not isinstance(message, SECURE_SUM_MESSAGES)]


def noisy_votes_reply(message: Any, state: Any) -> Any:
    """The ClientApp's answer to SecAgg+'s masked-vectors call: the stored noisy vector as FitRes parameters."""
    from flwr.app import Message
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
    from flwr.compat.common import recorddict_compat as compat

    if _STATE_KEY not in state:
        raise MessageError("secure aggregation asked for a noisy vector this party has not computed")
    votes = state[_STATE_KEY]["noisy_vector"].numpy()
    del state[_STATE_KEY]  # one vector, summed once
    reply = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([votes]), num_examples=1, metrics={})
    return Message(compat.fitres_to_recorddict(reply, keep_input=True), reply_to=message)


def vote_sum_from_average(average: Any, contributors: int, bound: int) -> np.ndarray:
    """The integer vote sum from SecAgg+'s average of ``contributors`` histograms with values in ±``bound``.

    Checked before any int64 arithmetic: the average must be a finite real array (a NaN would cast to
    INT64_MIN) and the sum within ±``contributors × bound``, the range the parties' values allow (a value
    outside it would wrap or, cast, mean nothing).

    Raises
    ------
    MessageError
        A non-finite or non-numeric average, or a sum outside the range.
    """
    if isinstance(contributors, bool) or not isinstance(contributors, int) or contributors < 1:
        raise ValueError(f"contributors must be a positive integer, got {contributors!r}")
    if isinstance(bound, bool) or not isinstance(bound, (int, np.integer)) or not 1 <= bound < MODULUS_RANGE:
        raise ValueError(f"bound must be an integer in [1, {MODULUS_RANGE}), got {bound!r}")
    values = np.asarray(average)
    if values.dtype.kind not in "iuf":
        raise MessageError(f"SecAgg+ returned an average of dtype {values.dtype}; a real array was expected")
    values = values.astype(float)
    if not np.isfinite(values).all():
        raise MessageError("SecAgg+ returned an average holding NaN or infinite values; refused")
    total = values * contributors
    limit = contributors * int(bound)
    if total.size and np.abs(total).max() > limit + 0.5:
        raise MessageError(f"SecAgg+ returned a vote sum of magnitude {np.abs(total).max():.6g}, outside the range "
                           f"±{limit} that {contributors} histograms with values in ±{bound} allow; refused")
    return np.rint(total).astype(np.int64)


def _strategy(proxies: Mapping[int, Any], bound: int) -> Any:
    """A Flower ``Strategy`` that asks ``proxies`` for their stored noisy vectors and keeps the sum SecAgg+ returns."""
    from flwr.common import FitIns, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server.strategy import Strategy

    class _SecureSumStrategy(Strategy):
        """configure_fit: every party, once; aggregate_fit: average × contributors = the integer sum."""

        vote_sum: np.ndarray | None = None
        contributors: int = 0

        def initialize_parameters(self, client_manager: Any) -> None:
            return None

        def configure_fit(self, server_round: int, parameters: Any, client_manager: Any) -> list:
            request = FitIns(ndarrays_to_parameters([]), {_REQUEST: "noisy-vector"})
            return [(proxy, request) for proxy in proxies.values()]

        def aggregate_fit(self, server_round: int, results: list, failures: list) -> tuple[None, dict]:
            if results:  # SecAgg+ sets every result's parameters to the weighted average of the masked vectors
                (average,) = parameters_to_ndarrays(results[0][1].parameters)
                self.vote_sum = vote_sum_from_average(average, len(results), bound)
                self.contributors = len(results)
            return None, {}

        def configure_evaluate(self, server_round: int, parameters: Any, client_manager: Any) -> list:
            return []

        def aggregate_evaluate(self, server_round: int, results: list, failures: list) -> tuple[None, dict]:
            return None, {}

        def evaluate(self, server_round: int, parameters: Any) -> None:
            return None

    return _SecureSumStrategy()


def secaggplus_vote_sum(grid: Any, tasks: Mapping[int, Any], *, n_parties: int, timeout: float | None,
                        colluders: int | None = None) -> FedKTVoteSum:
    """FedKT: :func:`secaggplus_sum` over the nodes in ``tasks`` (node → its FedKTTask), as a :class:`FedKTVoteSum`.

    ``n_parties`` is the number of parties the noise shares were planned for. The coordinator and up to
    n − 2 colluding parties learn at most the sum of the other parties' histograms, and n − 1 colluders the
    last party's own noisy histogram: the ledger's coordinator entry, computed for ``FedKT(collusion=c)``
    colluders at the honest shares' variance (:mod:`privfed.pipelines.fedkt.secure`), holds for every c up to n − 1.
    """
    first = next(iter(tasks.values()))
    total, contributors = secaggplus_sum(grid, sorted(tasks), bound=secure_value_bound(first.n_partitions,
                                                                                       first.noise_scale),
                                         n_parties=n_parties, colluders=colluders, timeout=timeout)
    return FedKTVoteSum(vote_sum=total, n_parties=n_parties, n_contributors=contributors)


def secaggplus_level_sum(grid: Any, tasks: Mapping[int, Any], *, n_parties: int, timeout: float | None,
                         colluders: int | None = None) -> FedKDLevelSum:
    """FedKD: :func:`secaggplus_sum` over the nodes in ``tasks`` (node → its FedKDTask), as a :class:`FedKDLevelSum`.

    Each party's noisy levels lie within ±B, B = :func:`secure_value_bound` of its grid (S) and its share's
    variance; ``n_parties`` is the number of parties the noise shares were planned for. The coordinator receives
    the sum only; the ledger accounts it at the realised variance of the contributors' shares
    (:mod:`privfed.pipelines.fedkd.secure`).
    """
    first = next(iter(tasks.values()))
    bound = secure_value_bound(first.quantization_scale, first.skellam_share_variance)
    total, contributors = secaggplus_sum(grid, sorted(tasks), bound=bound, n_parties=n_parties,
                                         colluders=colluders, timeout=timeout)
    return FedKDLevelSum(level_sum=total, n_parties=n_parties, n_contributors=contributors)


def secaggplus_sum(grid: Any, nodes: Sequence[int], *, bound: int, n_parties: int, colluders: int | None,
                   timeout: float | None) -> tuple[np.ndarray, int]:
    """Run Flower's ``SecAggPlusWorkflow`` over ``nodes``, each holding a stored noisy integer vector within
    ±``bound`` (:func:`store_noisy_votes`); return the integer sum and how many vectors it adds.

    ``n_parties`` is the number of parties the noise shares were planned for; ``colluders`` the parties the
    ledger's coordinator entry assumes collude with the coordinator (the pipeline's ``collusion``; None: every
    other party). Each party shares with a window of about 2·log₂ n neighbours sized so that those colluders
    learn at most the sum of the honest parties' vectors (:func:`~privfed.federation.secaggplus_neighbourhood.
    secaggplus_neighbourhood`, which states the dropouts it survives): the ledger's coordinator entry, computed
    at the honest shares' variance, holds for every c up to n − 1.
    """
    from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict
    from flwr.server.compat.grid_client_proxy import GridClientProxy
    from flwr.server.compat.legacy_context import LegacyContext
    from flwr.server.workflow import SecAggPlusWorkflow
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD, Key

    nodes = sorted(nodes)
    if len(nodes) < 2:
        raise ValueError(f"secure aggregation needs at least 2 parties to take part, got {len(nodes)}")
    if len(nodes) * 2 * bound >= MODULUS_RANGE:
        raise ValueError(f"secure aggregation of {len(nodes)} vectors with values in ±{bound} would overflow "
                         f"SecAgg+'s modulus 2**32; lower sigma or the number of parties")
    run_id = getattr(getattr(grid, "run", None), "run_id", 0)
    strategy = _strategy({node: GridClientProxy(node_id=node, grid=grid, run_id=run_id) for node in nodes}, bound)
    context = LegacyContext(Context(run_id=run_id, node_id=0, node_config={}, state=RecordDict(), run_config={}),
                            strategy=strategy)
    context.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({Key.CURRENT_ROUND: 1})
    context.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord()
    window = secaggplus_neighbourhood(len(nodes), colluders=n_parties - 1 if colluders is None else colluders)
    workflow = SecAggPlusWorkflow(
        **window.workflow_arguments(), max_weight=1.0,
        clipping_range=float(bound), quantization_range=2 * bound, modulus_range=MODULUS_RANGE, timeout=timeout,
    )
    workflow(grid, context)
    if strategy.vote_sum is None:
        raise MessageError("SecAgg+ halted before the sum was recovered (a party's window of "
                           f"{window.shares} kept fewer than its reconstruction threshold {window.threshold}); "
                           "nothing was written")
    return strategy.vote_sum, strategy.contributors
