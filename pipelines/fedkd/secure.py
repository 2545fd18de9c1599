"""FedKD with distributed Skellam noise and secure aggregation (``aggregator="skellam"``).

A party's clipped, quantized logits on the public set are integers on the grid: the level
ℓ = round(S·clip(z, −Z, Z)/Z) ∈ [−S, S] per public example and class (value ℓ·Z/S). Each of the n
parties adds its Skellam share of variance σ²/n to its (n_public × C) level matrix
(:func:`~privfed.pipelines.protocol.secure_sum.add_skellam_share`, from its own noise source) and sends only that;
secure aggregation hands the server the sum, which carries Sk(σ²) exactly. The server's ensemble is
(Z/S)·sum/n — uniform weights 1/n, since class counts would otherwise travel in clear — with no further
noise. ``σ`` is in grid steps (Z/S each).

The exchange replaces FedKD's logits message (:mod:`privfed.pipelines.fedkd.steps`):

1. server → party, ``FedKDTask`` with ``skellam_share_variance`` = σ²/n;
2. party → secure aggregation, :class:`FedKDNoisyLevels`: its level matrix plus its share (no class counts,
   no model size);
3. secure aggregation → server, :class:`FedKDLevelSum`: the sum over the parties and how many they are.

**Sensitivity** (:func:`level_sensitivity`). Replacing one party's data (or one of its examples, which may
change its whole local model) moves each of its C levels on a public example anywhere in [−S, S]: by at
most 2S per coordinate, on all C coordinates, so ℓ1 ≤ 2SC and ℓ2 ≤ 2S√C per public example; the n_public
examples compose (``count``). The release is :class:`~privfed.accounting.skellam.SkellamMechanism` with
those sensitivities, party and example level: the public (the server model distilled from the sum,
post-processing) at the variance of every contributor's share; the coordinator (the noisy sum itself) at the
variance of the shares of the parties not colluding with it (``FedKD(collusion=c)``, default c = n − 1: a target
keeps only its own share σ²/n), as for FedKT (:mod:`privfed.pipelines.protocol.secure_sum`).

Over Flower the sum is Flower's own SecAgg+ (``privfed.federation.secure_aggregation``, the adapter FedKT's
vote histograms use too): each party keeps its noisy levels until SecAgg+ asks for them masked, and the server
learns only the sum; in process :func:`secure_level_sum` stands in for it. Both give the same ledger.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ...accounting.skellam import SkellamMechanism
from ..protocol.dp_ledger import DPTrainingReport
from ..protocol.messages import ArraySpec, MessageError, Record, WireMessage
from ..protocol.secure_sum import secure_value_bound

__all__ = [
    "FedKDLevelSum",
    "FedKDNoisyLevels",
    "level_sensitivity",
    "own_share_release",
    "secure_level_sum",
    "skellam_logit_releases",
]


@dataclass(frozen=True, eq=False)
class FedKDNoisyLevels(WireMessage):
    """Party → secure aggregation: its quantized logit levels plus its Skellam share, (n_public, C) integers."""

    KIND: ClassVar[str] = "fedkd-noisy-levels"
    ARRAYS: ClassVar = {"noisy_levels": ArraySpec("i", 2)}

    noisy_levels: np.ndarray


@dataclass(frozen=True, eq=False)
class FedKDLevelSum(WireMessage):
    """Secure aggregation → server: the sum of ``n_contributors`` of ``n_parties`` parties' noisy level matrices."""

    KIND: ClassVar[str] = "fedkd-level-sum"
    ARRAYS: ClassVar = {"level_sum": ArraySpec("i", 2)}

    level_sum: np.ndarray
    n_parties: int
    n_contributors: int


def level_sensitivity(quantization_scale: int, n_outputs: int) -> dict[str, Any]:
    """One party's largest move of its level vector on one public example: 2S on each of the C coordinates.

    Returns the :class:`SkellamMechanism` keywords ``l1_sensitivity`` (2SC), ``l2_sensitivity`` (2S√C),
    ``coordinate_sensitivity`` (2S) and ``moved_coordinates`` (C).
    """
    step = 2 * int(quantization_scale)
    return {"l1_sensitivity": float(step * n_outputs), "l2_sensitivity": step * math.sqrt(n_outputs),
            "coordinate_sensitivity": step, "moved_coordinates": int(n_outputs)}


def secure_level_sum(tasks: Sequence[Any], records: Sequence[Sequence[Record]], names: Sequence[str], *,
                     max_bytes: int, n_parties: int | None = None) -> FedKDLevelSum:
    """The in-process stand-in for secure aggregation: each party's noisy levels checked for form, summed.

    Each party must send one :class:`FedKDNoisyLevels` of shape (n_public, C) within the bound its share
    allows (and at most its DP training report); only the sum goes on to the server step. ``n_parties``: how many
    parties were sent tasks (each share is σ²/n of them; default ``len(tasks)``) when only ``tasks`` of them
    contribute (the others refused).
    """
    total: np.ndarray | None = None
    for task, sent, name in zip(tasks, records, names):
        mine = [record for record in sent if record.kind == FedKDNoisyLevels.KIND]
        others = [record.kind for record in sent if record.kind not in (FedKDNoisyLevels.KIND, DPTrainingReport.KIND)]
        if len(mine) != 1 or others:
            raise MessageError(f"{name} sent messages {[r.kind for r in sent]}, expected one "
                               f"{FedKDNoisyLevels.KIND!r} (and its DP training report)")
        shape = (len(task.public), len(task.classes))
        levels = FedKDNoisyLevels.from_record(mine[0], sender=name, shapes={"noisy_levels": shape},
                                              max_bytes=max_bytes).noisy_levels
        bound = secure_value_bound(task.quantization_scale, task.skellam_share_variance)
        if np.abs(levels).max(initial=0) > bound:
            raise MessageError(f"{name} sent noisy levels outside [-{bound}, {bound}]")
        total = levels.astype(np.int64) if total is None else total + levels
    assert total is not None  # at least one party (the caller refuses a run without one)
    return FedKDLevelSum(level_sum=total, n_parties=len(tasks) if n_parties is None else int(n_parties),
                         n_contributors=len(tasks))


def skellam_logit_releases(model: Any, level_sum: FedKDLevelSum, *,
                           contributors: int | None = None) -> dict[str, SkellamMechanism]:
    """The Skellam release of the noisy level sum, party and example level, at the realised variance
    σ²·(contributors)/n, one release per public example (:func:`level_sensitivity`).

    ``contributors``: how many parties' shares protect the target (default: every contributor's; against the
    coordinator and its colluders, :func:`~privfed.pipelines.protocol.secure_sum.honest_contributors`)."""
    n_public, n_outputs = level_sum.level_sum.shape
    contributors = level_sum.n_contributors if contributors is None else contributors
    variance = float(model.sigma) ** 2 * contributors / level_sum.n_parties
    move = level_sensitivity(model.quantization_scale, n_outputs)
    return {unit: SkellamMechanism(variance, unit=unit, count=int(n_public), **move) for unit in ("party", "example")}


def own_share_release(task: Any) -> SkellamMechanism | str:
    """What one party's noisy levels cost it at worst, from its ``FedKDTask`` alone: the Skellam mechanism at its own
    share's variance σ²/n (``task.skellam_share_variance``), one release per public example
    (:func:`level_sensitivity`: the levels lie in [−S, S] whatever the data, so the bound holds at party level, and
    for its examples too); the reason no silo can charge it when the task has no public grid (clip Z, scale S).

    It bounds every observer the ledger accounts whoever contributes: the coordinator's entry is at the shares of
    the parties not colluding with it, at least the target's own, and the public's at every contributor's share; the
    other shares only add independent noise. It is the coordinator's entry when the coordinator colludes with every
    other party (``collusion=None``, c = n − 1).
    """
    if math.isnan(task.clip) or not task.quantization_scale:
        return (f"FedKD under secure aggregation without a public grid (clip {task.clip!r}, quantization scale "
                f"{task.quantization_scale!r}): the levels have no public bound")
    move = level_sensitivity(task.quantization_scale, len(task.classes))
    return SkellamMechanism(float(task.skellam_share_variance), unit="party", count=len(task.public), **move)
