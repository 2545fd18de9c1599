"""FedKT-L1 with distributed Skellam noise and secure aggregation (``aggregator="skellam"``).

Agarwal, Kairouz, Liu, "The Skellam Mechanism for Differentially Private
Federated Learning", NeurIPS 2021: each of the n parties adds Skellam noise of
variance σ²/n to its own integer vote histogram, so the sum of the histograms
carries Sk(σ²) exactly (Skellam is closed under summation). The party sends only
that noisy histogram — no student predictions, no gap counts z — and secure
aggregation (Flower's SecAgg+ in ``privfed.federation``; :func:`secure_sum` in
process) hands the server only the sum, :class:`FedKTVoteSum`. The server's labels
are the argmax of the noisy sum, with no further noise.

The exchange replaces FedKT's step 2 (:mod:`privfed.pipelines.fedkt.steps`):

1. server → party, ``FedKTTask`` with ``party_noise="skellam"`` and ``noise_scale`` the party's
   share of the variance, σ²/n;
2. party → secure aggregation, :class:`FedKTNoisyVotes`: the party's consistent-vote histogram on
   the final queries (queries × classes; s votes to the class its s students agree on, none
   otherwise) plus its Skellam share;
3. secure aggregation → server, :class:`FedKTVoteSum`: the sum over the parties whose shares arrived
   and how many they are.

Accounting (:func:`skellam_releases`): one party's histogram moves by at most s at 2 counts per
query, party level; at example level the same conservative k = s (one example can change all s of
its party's students). A party that drops out takes its histogram and its noise share with it: the
released sum then carries variance σ²·(received)/n, and that realised variance is what is accounted.

Collusion (:func:`honest_contributors`). Secure aggregation hides the parties' histograms from the
coordinator only as long as the other parties do not pool what they know with it: parties that
collude with the coordinator know their own shares and subtract them, so only the honest parties'
shares protect a target. The coordinator's ε is therefore computed against the coordinator colluding
with up to ``c`` parties (``FedKT(collusion=c)``): the noise left is that of the ``received − c``
honest contributors' shares, (received − c)·σ²/n, and never less than the target's own share σ²/n.
The default, ``collusion=None``, is the worst coalition a party can face, every other party
(c = n − 1): the target keeps only its own share σ²/n. This holds whatever secure-aggregation
protocol runs: Flower's SecAgg+ (in ``privfed.federation``, each party's window sized for the c the
ledger assumes: :mod:`privfed.federation.secaggplus_neighbourhood`) reveals to the coordinator and
c < n − 1 colluders at most the sum of the honest parties' histograms, and to n − 1 colluders the
target's histogram, which carries its own share. The
public (the argmax labels and the final model) is accounted at the full realised variance: it
sees only what the coordinator computes from the whole sum and holds no party's share.

Randomness: each party draws its share from its own :class:`~privfed.accounting.NoiseSource`
(``NoiseSource.for_task(task.noise_seed)``), secret by default: no seed of it is in any message or
in the ledger, so the coordinator cannot regenerate and subtract it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ...accounting import Ledger, Mechanism
from ...accounting.noise_source import NoiseSource
from ...accounting.skellam import SkellamMechanism
from ..protocol.dp_ledger import DPTrainingReport, training_report
from ..protocol.messages import ArraySpec, MessageError, WireMessage
from ..protocol.run_parameters import record_draw
from ..protocol.secure_sum import (
    add_skellam_share,
    check_collusion,
    colluding_parties,
    honest_contributors,
    secure_value_bound,
    skellam_share_variance,
)
from ..protocol.voting import consistent_votes

__all__ = [
    "SECURE_AGGREGATOR",
    "FedKTNoisyVotes",
    "FedKTSecureOutcome",
    "FedKTVoteSum",
    "check_collusion",
    "honest_contributors",
    "own_share_release",
    "record_secure_votes",
    "secure_party_outcome",
    "secure_sum",
    "secure_value_bound",
    "skellam_releases",
    "skellam_share_variance",
]

#: The aggregator whose noise the parties add themselves, summed under secure aggregation.
SECURE_AGGREGATOR = "skellam"
#: A party's noisy count lies within s ± this many standard deviations of its share (+ a constant) or it refuses
#: to send; the chance of reaching it is below 10⁻¹⁰⁰ per count.
@dataclass(frozen=True, eq=False)
class FedKTNoisyVotes(WireMessage):
    """Party → secure aggregation: its consistent-vote histogram plus its Skellam share, (final queries, classes)."""

    KIND: ClassVar[str] = "fedkt-noisy-votes"
    ARRAYS: ClassVar = {"noisy_votes": ArraySpec("i", 2)}

    noisy_votes: np.ndarray


@dataclass(frozen=True, eq=False)
class FedKTVoteSum(WireMessage):
    """Secure aggregation → server: the sum of the noisy histograms of ``n_contributors`` of ``n_parties`` parties."""

    KIND: ClassVar[str] = "fedkt-vote-sum"
    ARRAYS: ClassVar = {"vote_sum": ArraySpec("i", 2)}

    vote_sum: np.ndarray
    n_parties: int
    n_contributors: int


@dataclass(frozen=True, eq=False)
class FedKTSecureOutcome:
    """A party step's result under secure aggregation: only the noisy histogram (and DP-SGD parameters) leave."""

    noisy_votes: FedKTNoisyVotes
    students: tuple[Any, ...]
    #: The teachers' vote histograms on the answered local queries: kept on the party, as in the plain step.
    teacher_votes: np.ndarray
    teacher_training: Mechanism | None = None

    def sent(self) -> list[WireMessage]:
        training = training_report(self.teacher_training)
        return [m for m in (self.noisy_votes, training) if m is not None]


def secure_party_outcome(task: Any, plain: Any, *, party: str) -> FedKTSecureOutcome:
    """Turn a party's plain FedKT-L1 outcome into what it sends under secure aggregation.

    ``task`` is its ``FedKTTask`` (``noise_scale``: its share of the variance); ``plain`` the outcome of
    the party step without party-side noise, whose students' predictions stay on the party.
    """
    if not (math.isfinite(task.noise_scale) and task.noise_scale > 0):  # never send a histogram without its share
        raise MessageError(f"the server asked {party} for its Skellam share with variance {task.noise_scale!r}; "
                           "it must be finite and > 0")
    predictions = plain.votes.predictions  # (s, final queries): never sent
    histogram = consistent_votes(predictions[None], len(task.classes))
    # The party's own noise source (secret unless the task carries a noise_seed); the plain step drew nothing from it.
    record_draw(f"FedKT {party}'s Skellam share", "skellam-share", variance=task.noise_scale)
    noisy = add_skellam_share(histogram, task.noise_scale, value_bound=task.n_partitions,
                              generator=NoiseSource.for_task(task.noise_seed).generator, party=party)
    return FedKTSecureOutcome(FedKTNoisyVotes(noisy), tuple(plain.students), plain.teacher_votes,
                              plain.teacher_training)


def secure_sum(tasks: Any, records: Any, names: Any, *, max_bytes: int,
               n_parties: int | None = None) -> FedKTVoteSum:
    """The in-process stand-in for secure aggregation: each party's noisy histogram checked for form, summed.

    Only the sum goes on to the server step (as Flower's SecAgg+ gives only the sum in a federation).
    ``n_parties``: how many parties were sent tasks (each share is σ²/n of them; default ``len(tasks)``) when only
    ``tasks`` of them contribute (the others refused).
    """
    total: np.ndarray | None = None
    for task, sent, name in zip(tasks, records, names):
        mine = [record for record in sent if record.kind == FedKTNoisyVotes.KIND]
        others = [record.kind for record in sent if record.kind not in (FedKTNoisyVotes.KIND, DPTrainingReport.KIND)]
        if len(mine) != 1 or others:
            raise MessageError(f"{name} sent messages {[r.kind for r in sent]}, expected one "
                               f"{FedKTNoisyVotes.KIND!r} (and its DP training report)")
        shape = (task.n_final_queries, len(task.classes))
        votes = FedKTNoisyVotes.from_record(mine[0], sender=name, shapes={"noisy_votes": shape}, max_bytes=max_bytes)
        total = votes.noisy_votes.astype(np.int64) if total is None else total + votes.noisy_votes
    assert total is not None  # at least one party (the caller refuses a run without one)
    return FedKTVoteSum(vote_sum=total, n_parties=len(tasks) if n_parties is None else int(n_parties),
                        n_contributors=len(tasks))


def _histogram_move(n_partitions: int, n_queries: int) -> dict[str, Any]:
    """One party's largest move of its consistent-vote histograms: per query its s votes move between two classes
    (or appear, or vanish): ℓ1 ≤ 2s, ℓ2 ≤ √2·s, 2 coordinates by s each; ``n_queries`` queries compose."""
    s = int(n_partitions)
    return {"l1_sensitivity": 2.0 * s, "l2_sensitivity": math.sqrt(2.0) * s, "count": int(n_queries),
            "coordinate_sensitivity": s, "moved_coordinates": 2}


def skellam_releases(model: Any, n_queries: int, vote_sum: FedKTVoteSum, *,
                     contributors: int | None = None) -> dict[str, SkellamMechanism]:
    """The Skellam release of the noisy vote sum, party and example level (k = s), at the realised variance.

    Per query one party's consistent-vote histogram moves by at most s at 2 counts (its s votes move from
    one class to another, or appear, or vanish): ℓ1 ≤ 2s, ℓ2 ≤ √2·s, 2 coordinates by s each.
    ``contributors``: how many parties' shares protect the target (default: every contributor's; against
    the coordinator and its colluders, :func:`honest_contributors`).
    """
    contributors = vote_sum.n_contributors if contributors is None else contributors
    variance = skellam_share_variance(model.sigma, vote_sum.n_parties) * contributors
    move = _histogram_move(model.n_partitions, n_queries)
    return {unit: SkellamMechanism(variance, unit=unit, **move) for unit in ("party", "example")}


def own_share_release(task: Any) -> SkellamMechanism:
    """What one party's noisy histograms cost it at worst, from its ``FedKTTask`` alone: the Skellam mechanism at
    its own share's variance σ²/n (``task.noise_scale``) on its final queries, party level (k = s; a party-level
    bound covers its examples too).

    It bounds every observer the ledger accounts whoever contributes: the coordinator's entry is at the shares of
    the honest contributors, at least the target's own, and the public's at every contributor's share; the other
    shares only add independent noise. It is the coordinator's entry when the coordinator colludes with every other
    party (``collusion=None``, c = n − 1).
    """
    return SkellamMechanism(float(task.noise_scale), unit="party",
                            **_histogram_move(task.n_partitions, task.n_final_queries))


def record_secure_votes(ledger: Ledger, model: Any, vote_sum: FedKTVoteSum, *, derived: bool) -> int:
    """Record the noisy vote sum's Skellam release in ``ledger``; return the number of server queries answered.

    Two entries: the public's (the argmax labels and the final model, post-processing of the whole sum) at
    the realised variance of every contributor's share, and the coordinator's (the noisy sum itself) at the
    variance of the honest contributors' shares only (:func:`honest_contributors`), its note stating the
    collusion assumption.
    """
    n_queries = len(vote_sum.vote_sum)
    releases = skellam_releases(model, n_queries, vote_sum)
    s = int(model.n_partitions)
    dropped = vote_sum.n_parties - vote_sum.n_contributors
    what = (
        f"secure aggregation of the parties' consistent-vote histograms on {n_queries} public queries, each with "
        f"its Skellam share (σ²/n = {model.sigma ** 2 / vote_sum.n_parties:g}); the coordinator receives only the "
        f"sum of {vote_sum.n_contributors} of {vote_sum.n_parties} parties' histograms, carrying Skellam noise of "
        f"realised variance {releases['party'].variance:g}"
        + (f" ({dropped} dropped out with their shares)" if dropped else "")
        + f"; party level k = s = {s} at 2 counts per query; example level k = s = {s} (conservative)"
    )
    ledger.record(releases, note=f"{what}; the public sees its argmax labels and the final model (post-processing)",
                  derived_from_training=derived, observers=("public",))
    colluders, honest = colluding_parties(model, vote_sum.n_parties), honest_contributors(model, vote_sum)
    guarded = skellam_releases(model, n_queries, vote_sum, contributors=honest)
    ledger.record(
        guarded,
        note=(
            f"{what}; against the coordinator: assumes the coordinator colludes with at most {colluders} of the "
            f"{vote_sum.n_parties} parties (the colluders subtract their own shares, leaving "
            + ("the target's own share" if honest == 1 else f"the shares of {honest} honest contributors")
            + f", variance {guarded['party'].variance:g}); secure "
            "aggregation by Flower's SecAgg+ (in process, a function standing in for it)"
        ),
        derived_from_training=derived, observers=("coordinator",),
        assumptions=(
            f"the coordinator colludes with at most {colluders} of the {vote_sum.n_parties} parties",
            "secure aggregation reveals only the sum of the shares to the coordinator (Flower's SecAgg+ over the "
            "network; in process, a function standing in for it)",
        ),
    )
    return n_queries
