"""FedKT's server step (FedKT Algorithm 1, lines 11–14): the parties' replies, the votes, the ledger, the model.

The server checks each party's :class:`~privfed.pipelines.fedkt.steps.FedKTVotes` against its task
(:func:`receive_fedkt_replies`), counts the students' consistent votes on the final queries, adds the
server-side noise under L1 (its own :class:`~privfed.accounting.NoiseSource`, secret unless the run opted
in with ``noise_seed=``), records every release in the ledger (the accounting of L0, L1 and L2) and trains
the final model on the voted labels (:func:`fedkt_server_step`, returning a :class:`FedKTFit`). Under
secure aggregation it receives only the noisy sum of the parties' vote histograms
(:class:`~privfed.pipelines.fedkt.secure.FedKTVoteSum`). It warns when the final model cannot learn much
from the labels (:func:`warn_if_too_little_to_learn`). ``FedKT.fit`` and the Flower app
(``privfed.federation``) run these very functions on the same messages.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from ...accounting import Ledger, Mechanism, WithheldVotesNoisyMax, account, compose_parallel
from ...accounting.fingerprint import data_fingerprint
from ...accounting.mechanism import ALL_RELATIONS
from ...accounting.noise_source import NoiseSource
from ...accounting.noisy_max import VoteMechanism
from ..data.party_schema import PartySchema, record_schema_exchange
from ..models.fitting import with_seed
from ..protocol.dp_ledger import record_local_training, without_trainings
from ..protocol.messages import MessageError, Record
from ..protocol.preflight import is_near_chance
from ..protocol.voting import consistent_votes, noisy_labels, prediction_votes
from .secure import FedKTVoteSum, record_secure_votes
from .steps import (
    WITHHELD,
    FedKTTask,
    FedKTVotes,
    NoisyArgmax,
    clone_with_noise_seed,
    fedkt_noise,
    fedkt_noise_seeds,
    largest_fitting,
    query_count,
)

__all__ = [
    "MAX_MAJORITY_SHARE",
    "FedKTFit",
    "fedkt_server_step",
    "receive_fedkt_replies",
    "warn_if_too_little_to_learn",
]


#: One class holding this share of the voted labels or more draws a warning.
MAX_MAJORITY_SHARE = 0.95


def warn_if_too_little_to_learn(labels: np.ndarray, n_classes: int, local_answered: list[int] | None) -> None:
    """Warn when the final model (or, under L2, a party's students) cannot do better than near chance.

    A classifier predicts only the classes it was trained on, so one trained on labels of k of C classes answers
    at most k/C of a test set with balanced classes right: near chance
    (:func:`~privfed.pipelines.protocol.preflight.is_near_chance`) when k/C is. That is a bound, whatever the data;
    how many labels per class a model needs beyond it depends on the data (6 per class give 0.86 accuracy on
    digits), so a count per class is no criterion. Noise that drowns the votes is the pre-flight check's
    (:func:`~privfed.pipelines.fedkt.steps.preflight_fedkt`); one class holding :data:`MAX_MAJORITY_SHARE` of
    the labels draws its own warning.
    """
    advice = "query more public examples (query_fraction), add less noise (gamma, sigma) or raise target_epsilon"
    if local_answered is not None and is_near_chance(min(min(local_answered), n_classes) / n_classes, 1 / n_classes):
        fewest = min(local_answered)
        warnings.warn(
            f"FedKT: a party answered only {fewest} local queries for {n_classes} classes: its students can "
            f"predict at most {fewest} classes, so they answer at most {fewest / n_classes:.0%} of a balanced test "
            f"set right, near chance; {advice}",
            UserWarning, stacklevel=4,
        )
    covered = len(np.unique(labels))
    if is_near_chance(covered / n_classes, 1 / n_classes):
        warnings.warn(
            f"FedKT: the server's {len(labels)} voted labels hold only {covered} of {n_classes} classes: the final "
            f"model can predict no other class, so it answers at most {covered / n_classes:.0%} of a balanced test "
            f"set right, near chance; {advice}",
            UserWarning, stacklevel=4,
        )
    share = np.bincount(labels, minlength=n_classes).max() / len(labels)
    if share >= MAX_MAJORITY_SHARE:
        warnings.warn(
            f"FedKT: {share:.0%} of the server's voted labels are one class: the final model will predict little "
            f"else (the noise may drown the votes); {advice}",
            UserWarning, stacklevel=4,
        )


def receive_fedkt_replies(
    tasks: Sequence[FedKTTask], records: Sequence[Sequence[Record]], names: Sequence[str], *, max_bytes: int
) -> list[FedKTVotes]:
    """Validate each party's reply records against its task; :class:`MessageError` names the first bad party.

    A party's ``dp-training`` report (its teachers' DP-SGD) is left to
    :func:`~pipelines.protocol.dp_ledger.receive_trainings`.
    """
    replies = []
    for task, sent, name in zip(tasks, records, names):
        sent = without_trainings(sent)  # the DP training report is read by receive_trainings
        by_kind = {record.kind: record for record in sent}
        expected = {FedKTVotes.KIND}
        if set(by_kind) != expected or len(sent) != len(expected):
            raise MessageError(f"{name} sent messages {[r.kind for r in sent]}, expected {sorted(expected)}")
        s, n_classes = task.n_partitions, len(task.classes)
        votes = FedKTVotes.from_record(
            by_kind[FedKTVotes.KIND], sender=name, shapes={"predictions": (s, task.n_final_queries)},
            max_bytes=max_bytes,
        )
        if not 1 <= votes.n_local_answered <= task.n_local_queries or votes.n_teachers != task.n_teachers:
            raise MessageError(
                f"{name} sent a malformed 'fedkt-votes' message: n_local_answered={votes.n_local_answered} "
                f"(expected 1..{task.n_local_queries}), n_teachers={votes.n_teachers} (expected {task.n_teachers})"
            )
        if votes.predictions.size and not (0 <= votes.predictions.min() and votes.predictions.max() < n_classes):
            raise MessageError(f"{name} sent a malformed 'fedkt-votes' message: predictions outside 0..{n_classes - 1}")
        for gap in (1, 2):
            value = getattr(votes, f"affected_partitions_gap_{gap}")
            if (value != WITHHELD) if task.party_noise else not 0 <= value <= s:
                expected_value = f"{WITHHELD} (withheld under L2)" if task.party_noise else f"in 0..{s}"
                raise MessageError(
                    f"{name} sent a malformed 'fedkt-votes' message: gap-{gap} count {value}, expected {expected_value}"
                )
        replies.append(votes)
    return replies


@dataclass(frozen=True, eq=False)
class FedKTFit:
    """The server step's result: the fitted attributes of a FedKT estimator."""

    final_model: Any
    ledger: Ledger
    evidence: dict[str, np.ndarray]
    n_queries_answered: int
    n_local_queries_answered: list[int]
    example_level_epsilons: dict[str, Any] | None


def fedkt_server_step(
    model: Any,
    replies: Sequence[FedKTVotes] | FedKTVoteSum,
    classes: np.ndarray,
    public: np.ndarray,
    seed_sequence: np.random.SeedSequence,
    server_seeds: np.random.SeedSequence,
    teacher_trainings: Sequence[Mechanism | None] | None = None,
    *,
    schemas: Sequence[PartySchema] | None = None,
    noise_source: NoiseSource | None = None,
) -> FedKTFit:
    """Server side of FedKT (Algorithm 1, lines 11–14): consistent votes, server noise (L1), ledger, final model.

    ``teacher_trainings`` (one per party, from their ``dp-training`` reports: :func:`~pipelines.protocol.dp_ledger.
    receive_trainings`; None where a party's teachers are not all DP-trained) are the parties' DP-SGD: with
    DP-trained teachers every release is post-processing of that training, recorded as such in the ledger.
    ``schemas``: the parties' schemas, whose exchange the ledger records unless every party withheld its size.
    Under secure aggregation ``replies`` is the :class:`~privfed.pipelines.fedkt.secure.FedKTVoteSum` alone:
    the noisy sum of the parties' histograms, all the server receives of their votes.

    Randomness: ``seed_sequence`` and ``server_seeds`` (``random_state``'s) seed the ties of un-noised votes
    (L0, L2) and the final model; ``noise_source`` is the fit's root noise source (default: a secret one),
    recorded in the ledger (:meth:`~privfed.accounting.Ledger.record_noise_source`), whose server child
    (:func:`fedkt_noise_seeds`) draws L1's noise: the noisy max, Confident GNMax's threshold noise, and the
    random ties of the Skellam sum's argmax.
    """
    noise_source = NoiseSource.secret() if noise_source is None else noise_source
    n_classes = len(classes)
    noise = fedkt_noise(model)
    student = model.teacher if model.student is None else model.student
    final = student if model.final is None else model.final
    X_final = public[: query_count(model.query_fraction, len(public))]
    if isinstance(replies, FedKTVoteSum):
        server_votes = replies.vote_sum
        n_parties = replies.n_contributors
        local_answered = [query_count(model.local_query_fraction, len(public))] * n_parties
    else:
        n_parties = len(replies)
        local_answered = [votes.n_local_answered for votes in replies]
        predictions = np.stack([votes.predictions for votes in replies])
        if model.consistent_voting:
            server_votes = consistent_votes(predictions, n_classes)
        else:
            server_votes = prediction_votes(predictions.reshape(-1, len(X_final)), n_classes)

    primary_unit = "example" if model.privacy == "L2" else "party"
    ledger = Ledger(
        # The budget binds the primary unit: L2's party-level ε (k = t) is recorded but not budgeted.
        target_epsilon=None if model.target_epsilon is None else {primary_unit: model.target_epsilon},
        delta=model.delta,
        primary_unit=primary_unit,
        seeds={"random_state": int(cast(int, seed_sequence.entropy))},
        public_data_sha256=data_fingerprint({"public": public}),
        description=(
            f"FedKT-{model.privacy} final model: {n_parties} parties, s = {model.n_partitions} partitions, "
            f"t = {model.n_teachers} teachers, {type(model.teacher).__name__} teachers, "
            f"{type(final).__name__} final model"
        ),
    )
    ledger.record_noise_source(noise_source)
    evidence: dict[str, np.ndarray] = {}
    derived = record_local_training(ledger, list(teacher_trainings or [None] * n_parties), what="FedKT teachers")
    _, server_noise_seed = fedkt_noise_seeds(noise_source, 0)
    server_source = NoiseSource.for_task(server_noise_seed)
    server_noise = server_source.generator
    # Confident GNMax's threshold step runs first (its ⊥ pattern is public and accounted).
    confident = noise.answered(server_votes, server_noise) if (noise is not None and noise.confident) else None
    if isinstance(replies, FedKTVoteSum):
        n_answered, example_level = record_secure_votes(ledger, model, replies, derived=derived), None
    else:
        n_answered, example_level = _account(model, ledger, replies, server_votes, noise, evidence, derived, confident)
    record_schema_exchange(ledger, schemas)
    server_rng = np.random.default_rng(server_seeds)
    kept = np.ones(n_answered, dtype=bool) if confident is None else confident[:n_answered]
    answered = server_votes[:n_answered][kept]
    if len(answered) == 0:
        raise ValueError(
            f"no server query cleared Confident GNMax's threshold T = {model.threshold:g}: lower the threshold, "
            "query more public examples (query_fraction) or raise target_epsilon"
        )
    # L1's noisy max draws from the server's noise source; un-noised ties (L0, L2's post-processing) from random_state.
    labels = (noise.labels(answered, server_noise) if model.privacy == "L1" and noise is not None
              else noisy_labels(answered, server_rng))
    if len(np.unique(labels)) < 2:
        raise ValueError(
            "the server's voted labels hold a single class: the final model cannot be trained; "
            "query more public examples (query_fraction) or lower the noise"
        )
    warn_if_too_little_to_learn(labels, len(classes), local_answered if model.privacy == "L2" else None)
    # The final model learns the original labels, so that it can be published (and bundled) on its own.
    final_prototype = clone_with_noise_seed(final, server_source.child_seeds(1)[0])
    final_model = with_seed(final_prototype, server_rng.integers(2**31)).fit(X_final[:n_answered][kept],
                                                                            classes[labels])
    return FedKTFit(
        final_model=final_model,
        ledger=ledger,
        evidence=evidence,
        n_queries_answered=len(labels),
        n_local_queries_answered=local_answered,
        example_level_epsilons=example_level,
    )


def _account(
    model: Any,
    ledger: Ledger,
    replies: Sequence[FedKTVotes],
    server_votes: np.ndarray,
    noise: NoisyArgmax | None,
    evidence: dict[str, np.ndarray],
    derived: bool,
    confident: np.ndarray | None = None,
) -> tuple[int, dict[str, Any] | None]:
    """Record every release in the ledger; return the server queries answered and L1's example-level ε.

    ``derived``: the teachers are DP-trained, so every release (students, votes, the final model) is
    computed from them and public data only — post-processing of their training.
    """
    s = model.n_partitions
    if model.privacy == "L0":
        ledger.record_unaccounted(
            "FedKT-L0: no noise is added anywhere; the students' predictions the parties send, the server's votes "
            "and the model have no differential-privacy guarantee",
            derived_from_training=derived,
        )
        evidence["server_votes"] = server_votes
        return len(server_votes), None
    assert noise is not None  # L1 and L2 have noise (fedkt_noise)

    if model.privacy == "L2":
        n_classes = server_votes.shape[1]
        answered = [s * votes.n_local_answered for votes in replies]

        def party_side(votes_per_unit: list[int], unit: str, relations: frozenset[str] = ALL_RELATIONS) -> Mechanism:
            return compose_parallel([
                WithheldVotesNoisyMax(noise.aggregator, noise.scale, num_answered=n, num_classes=n_classes,
                                      votes_per_unit=k, unit=unit, relations=relations)
                for n, k in zip(answered, votes_per_unit)
            ])

        # k = 1 bounds an example added or removed (one keyed teacher per partition); a replaced one can move two.
        ledger.record(
            {"example": party_side([1] * len(replies), "example", frozenset({"add_or_remove_one"})),
             "party": party_side([votes.n_teachers for votes in replies], "party")},
            note=(
                f"party-side noisy teacher votes ({noise.describe()}): "
                f"{[votes.n_local_answered for votes in replies]} local queries per partition answered by each "
                f"party, s = {s} partitions; example level k = 1, party level k = teachers per partition; "
                "parallel composition over parties; the votes never leave the parties, so the bound is "
                "data-independent; the coordinator receives only the students' predictions (post-processing)"
            ),
            derived_from_training=derived,
        )
        return len(server_votes), None

    # L1: noise on the server's vote counts.
    z = {gap: max(getattr(votes, f"affected_partitions_gap_{gap}") for votes in replies) for gap in (1, 2)}

    def mask(n: int) -> np.ndarray | None:
        return None if confident is None else confident[:n]

    def releases(n: int) -> dict[str, VoteMechanism]:
        if model.accounting == "conservative":
            example = noise.mechanism(server_votes[:n], s, "example", answered=mask(n))
        else:  # z comes from private votes: its ε is data-dependent, the data-independent bounds keep k = s
            example = noise.mechanism(server_votes[:n], max(z[1], 1), "example", data_independent_votes_per_unit=s,
                                      answered=mask(n))
        return {"party": noise.mechanism(server_votes[:n], s, "party", answered=mask(n)), "example": example}

    n_answered = len(server_votes)
    if model.target_epsilon is not None:
        n_answered = largest_fitting(len(server_votes), lambda n: n > 0 and ledger.fits(releases(n)))
        if n_answered == 0:
            raise ValueError(f"target_epsilon={model.target_epsilon} does not allow a single server query")
    example_level = {
        "conservative": account(noise.mechanism(server_votes[:n_answered], s, "example", answered=mask(n_answered)),
                                delta=model.delta).epsilon,
        "paper": account(
            noise.mechanism(server_votes[:n_answered], max(z[1], 1), "example", data_independent_votes_per_unit=s,
                            answered=mask(n_answered)),
            delta=model.delta, analysis="classic",
        ).epsilon,
        "z_gap_le_1": z[1],
        "z_gap_le_2": z[2],
    }
    ledger.record(
        releases(n_answered),
        note=(
            f"server noisy consistent votes ({noise.describe()}) on {n_answered} public queries"
            + ("" if confident is None else f" ({int(confident[:n_answered].sum())} cleared the threshold)")
            + f"; party level k = s = {s}; example level k = "
            + (f"s = {s} (conservative)" if model.accounting == "conservative" else f"z = {max(z[1], 1)} (paper)")
        ),
        derived_from_training=derived,
    )
    ledger.record_unaccounted(
        "FedKT-L1: the students' predictions each party sends to the coordinator come from students trained on "
        "un-noised teacher votes, and the coordinator counts them before adding noise; the guarantee covers the "
        "final model and the server's noisy labels (the public), not the coordinator's view",
        derived_from_training=derived, observers=("coordinator",),
    )
    if model.accounting == "paper":
        ledger.record_unaccounted(
            f"FedKT-L1 example level uses the paper's data-dependent sensitivity k = z = {max(z[1], 1)}, "
            "which is not a differential-privacy guarantee: z is computed from the private teacher votes and a "
            f"neighbouring data set can have a larger z; the conservative k = s = {s} holds whatever the data "
            "(accounting='conservative')",
            derived_from_training=derived, units=("example",),
        )
    evidence["server_votes"] = server_votes[:n_answered]
    return n_answered, example_level
