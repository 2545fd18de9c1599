"""FedKT's messages and party step (FedKT Algorithm 1, lines 2–10), and the tasks the server sends.

The exchange, after the schema exchange of :mod:`privfed.pipelines.data.party_schema`:

1. server → party, :class:`FedKTTask`: the public queries (the longer of the local and the final
   query prefixes), the classes, s, the party's teacher count t, its seed (``random_state``'s: teacher
   key, model initialisations, ties of un-noised votes) and, under L2, the party-side noise; a
   ``noise_seed`` only when the estimator was given one (by default each party draws its noise from
   its own secret :class:`~privfed.accounting.NoiseSource`, and nothing noise-related is sent);
2. party → server, :class:`FedKTVotes`: its s students' predictions on the final queries (s label
   vectors — not the students), how many local queries it answered, and, under L0 and L1, its gap
   counts z (the partitions with a top-2 teacher-vote gap ≤ 1 and ≤ 2, used only by the ``"paper"``
   accounting and the ``example_level_epsilons_`` diagnostic).

Under L2 a party sends nothing un-noised: its students learn from its noisy teacher labels, so their
predictions are post-processing of the party-side noisy max; the number of answered local queries is
chosen on the data-independent ε (public values only); the gap counts are withheld (sent as -1). The
vote histograms never leave the party, so the coordinator accounts the party-side noisy max
data-independently (:class:`~privfed.accounting.withheld_votes.WithheldVotesNoisyMax`), and the
coordinator's example-level ε is finite.

The party step (:func:`fedkt_party_step`) trains the teachers, labels the local queries (with the
party-side noise under L2), trains the students and predicts the final queries; what it is accounted
under is known from its task alone (:func:`fedkt_planned_release`). The server makes the tasks here
(:func:`fedkt_tasks`, with the noisy-max aggregator :class:`NoisyArgmax` that both sides draw through);
its step, which counts the consistent votes, adds the server-side noise (L1), records the ledger and
trains the final model, is :func:`~privfed.pipelines.fedkt.server.fedkt_server_step`. ``FedKT.fit`` and
the Flower app (``privfed.federation``) run these very functions.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import numpy as np

from ...accounting import (
    ConfidentGNMax,
    GaussianNoisyMax,
    LaplaceNoisyMax,
    Ledger,
    Mechanism,
    WithheldVotesNoisyMax,
    compose_parallel,
    compose_sequential,
)
from ...accounting.mechanism import ALL_RELATIONS
from ...accounting.noise_source import NoiseSource
from ...accounting.noisy_max import VoteMechanism
from ..data.partition import keyed_teacher_subsets
from ..data.party_schema import WITHHELD_SIZE, PartySchema
from ..models.fitting import FittedClassifier, dp_release, fit_classifier, with_noise_seed
from ..protocol.dp_ledger import training_report
from ..protocol.messages import ArraySpec, WireMessage
from ..protocol.preflight import warn_if_noise_drowns_votes
from ..protocol.run_parameters import record_draw
from ..protocol.seeds import spawn_seeds
from ..protocol.voting import break_ties_at_random, noisy_labels, prediction_votes
from .secure import (
    SECURE_AGGREGATOR,
    FedKTSecureOutcome,
    check_collusion,
    own_share_release,
    secure_party_outcome,
    skellam_share_variance,
)

__all__ = [
    "WITHHELD",
    "FedKTPartyOutcome",
    "FedKTTask",
    "FedKTVotes",
    "NoisyArgmax",
    "clone_with_noise_seed",
    "fedkt_noise",
    "fedkt_noise_seeds",
    "fedkt_party_step",
    "fedkt_planned_release",
    "fedkt_tasks",
    "largest_fitting",
    "preflight_fedkt",
    "query_count",
]


def query_count(fraction: float, n_public: int) -> int:
    """⌈fraction · |public|⌉: the first this-many public examples are the query set."""
    return min(n_public, math.ceil(fraction * n_public - 1e-9))


@dataclass(frozen=True)
class NoisyArgmax:
    """The noisy-max aggregator of one tier: Laplace(1/γ) (PATE 2017), Gaussian N(0, σ²) (PATE 2018's GNMax)
    counts, or Confident GNMax (PATE 2018, Algorithm 1): a query is answered, by GNMax, only when its top
    count plus N(0, σ₁²) clears the threshold T; or ``"skellam"``, whose noise the parties add themselves
    under secure aggregation (:mod:`~privfed.pipelines.fedkt.secure`): its votes arrive noisy."""

    aggregator: str
    scale: float  # γ for "laplace", σ for "gaussian", "confident-gnmax" and "skellam"
    threshold: float | None = None  # T, "confident-gnmax" only
    sigma_threshold: float | None = None  # σ₁, "confident-gnmax" only

    @property
    def confident(self) -> bool:
        return self.aggregator == "confident-gnmax"

    def answered(self, votes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Confident GNMax's threshold step: which queries are answered (max_j n_j + N(0, σ₁²) ≥ T)."""
        assert self.sigma_threshold is not None  # set for "confident-gnmax" (fedkt_noise)
        top = np.asarray(votes, dtype=float).max(axis=1)
        record_draw("FedKT Confident GNMax threshold step", "gaussian-threshold", sigma=self.sigma_threshold)
        return top + rng.normal(0.0, self.sigma_threshold, size=top.shape) >= self.threshold

    def labels(self, votes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Noisy argmax of every row of ``votes`` (Skellam: the votes are the noisy sum; ties broken at random)."""
        if self.aggregator == SECURE_AGGREGATOR:
            return break_ties_at_random(votes, rng)
        if self.aggregator == "laplace":
            gamma = self.scale
            record_draw("FedKT noisy max", "laplace", scale=1.0 / gamma)
            return noisy_labels(votes, rng, gamma=gamma)
        sigma = self.scale
        record_draw("FedKT noisy max", "gaussian", sigma=sigma)
        return noisy_labels(votes, rng, sigma=sigma)

    def mechanism(
        self, votes: np.ndarray, votes_per_unit: int, unit: str, *, data_independent_votes_per_unit: int | None = None,
        answered: np.ndarray | None = None,
    ) -> VoteMechanism:
        """The privfed mechanism that accounts these answers (``answered``: Confident GNMax's public ⊥ pattern;
        None charges the GNMax step on every query, a bound whatever was answered)."""
        if self.confident:
            assert self.threshold is not None and self.sigma_threshold is not None
            return ConfidentGNMax(votes, threshold=self.threshold, sigma_threshold=self.sigma_threshold,
                                  sigma=self.scale, votes_per_unit=votes_per_unit, answered=answered, unit=unit,
                                  data_independent_votes_per_unit=data_independent_votes_per_unit)
        cls = LaplaceNoisyMax if self.aggregator == "laplace" else GaussianNoisyMax
        return cls(votes, self.scale, votes_per_unit, unit=unit,
                   data_independent_votes_per_unit=data_independent_votes_per_unit)

    def describe(self) -> str:
        if self.aggregator == SECURE_AGGREGATOR:
            return f"Skellam noise of σ = {self.scale:g}, added in shares by the parties under secure aggregation"
        if self.aggregator == "laplace":
            return f"Laplace noise of scale 1/γ = {1 / self.scale:g}"
        if self.confident:
            return (f"Confident GNMax: threshold T = {self.threshold:g} with σ₁ = {self.sigma_threshold:g}, "
                    f"then Gaussian noise of σ = {self.scale:g}")
        return f"Gaussian noise of σ = {self.scale:g}"


# --- messages ---------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class FedKTTask(WireMessage):
    """Server → party: public queries, classes and the party's settings.

    ``party_noise`` is ``""`` (no party-side noise: L0, L1) or the aggregator (``"laplace"``,
    ``"gaussian"``) of L2, with ``noise_scale`` its γ or σ, or ``"skellam"`` (L1 under secure
    aggregation), with ``noise_scale`` the party's share of the Skellam variance, σ²/n;
    ``target_epsilon`` is NaN without a budget. ``seed`` derives from ``random_state`` and seeds what
    no guarantee relies on; ``noise_seed`` is None (the default: the party draws its noise — L2's
    noisy labels, its Skellam share, its DP-trained models' noise — from its own secret
    :class:`~privfed.accounting.NoiseSource`, and the field is not sent) or the reproducible seed
    of that noise when the estimator was given ``noise_seed`` (every ε is then ∞ for its holders).
    """

    KIND: ClassVar[str] = "fedkt-task"
    ARRAYS: ClassVar = {"queries": ArraySpec("iuf", None), "classes": ArraySpec("iufbU", 1)}

    queries: np.ndarray
    classes: np.ndarray
    n_local_queries: int
    n_final_queries: int
    n_partitions: int
    n_teachers: int
    seed: int
    party_noise: str
    noise_scale: float
    target_epsilon: float
    delta: float
    noise_seed: int | None = None

    @property
    def noise(self) -> NoisyArgmax | None:
        return NoisyArgmax(self.party_noise, self.noise_scale) if self.party_noise else None


#: The gap counts a party sends under L2 and with secure aggregation: withheld (they are private statistics).
WITHHELD = -1


@dataclass(frozen=True, eq=False)
class FedKTVotes(WireMessage):
    """Party → server: its s students' predicted class codes on the final queries, shape (s, final queries).

    The gap counts are :data:`WITHHELD` (-1) under L2, where the party sends nothing un-noised.
    """

    KIND: ClassVar[str] = "fedkt-votes"
    ARRAYS: ClassVar = {"predictions": ArraySpec("iu", 2)}

    predictions: np.ndarray
    n_local_answered: int
    n_teachers: int
    affected_partitions_gap_1: int
    affected_partitions_gap_2: int


@dataclass(frozen=True, eq=False)
class FedKTPartyOutcome:
    """A party step's result: what it sends, and what stays on the party (its students, its teachers' votes)."""

    votes: FedKTVotes
    students: tuple[FittedClassifier, ...]
    #: The teachers' vote histograms on the answered local queries, (s, answered, classes): kept on the party.
    teacher_votes: np.ndarray
    #: The teachers' DP-SGD, composed (None: some teacher is not DP-trained); sent as its parameters (dp-training).
    teacher_training: Mechanism | None = None

    def sent(self) -> list[WireMessage]:
        """The votes, and the teachers' DP-SGD parameters when every teacher is DP-trained."""
        training = training_report(self.teacher_training)
        return [m for m in (self.votes, training) if m is not None]


# --- party step -------------------------------------------------------------------------------------
def _affected_partitions(votes: np.ndarray, gap: int) -> int:
    """Partitions with some query whose top-2 teacher-vote gap is ≤ ``gap`` (FedKT's z)."""
    top_two = np.sort(votes, axis=2)[:, :, -2:]
    return int(((top_two[:, :, 1] - top_two[:, :, 0]) <= gap).any(axis=1).sum())


def largest_fitting(upper: int, fits: Any) -> int:
    """The largest n in [0, upper] with fits(n), for a monotone predicate (bisection)."""
    low, high = 0, upper
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def _answerable_local_queries(votes: np.ndarray, task: FedKTTask) -> int:
    """Largest n such that answering the first n local queries of every partition stays within budget."""
    if math.isnan(task.target_epsilon):
        return votes.shape[1]
    noise = task.noise
    assert noise is not None  # called only for party-side noise (L2)

    def fits(n: int) -> bool:
        ledger = Ledger(target_epsilon=task.target_epsilon, delta=task.delta, primary_unit="example")
        stacked = votes[:, :n].reshape(-1, votes.shape[2])
        return ledger.fits(noise.mechanism(stacked, 1, "example"), unit="example")

    return largest_fitting(votes.shape[1], fits)


def fedkt_planned_release(task: FedKTTask, *, budget_unit: str) -> Mechanism | str:
    """What a party's FedKT reply is accounted under, from the task's public parameters alone (before its data is
    touched): L2's party-side noisy labels on every local query of its s partitions (an upper bound on the ones it
    answers), at example level k = 1 or, for a party-level budget, k = t; under secure aggregation its own Skellam
    share on its vote histograms (:func:`own_share_release`); else the reason no silo can charge it (L0 and L1 send
    the coordinator un-noised predictions)."""
    if not task.party_noise:
        return ("FedKT sends the coordinator the students' un-noised predictions (L0/L1): no bound for the "
                "coordinator, so a silo with a budget cannot take part")
    if task.party_noise == SECURE_AGGREGATOR:
        return own_share_release(task)
    party_level = budget_unit == "party"
    return WithheldVotesNoisyMax(
        task.party_noise, task.noise_scale, num_answered=task.n_partitions * task.n_local_queries,
        num_classes=len(task.classes), votes_per_unit=task.n_teachers if party_level else 1,
        unit="party" if party_level else "example",
        relations=ALL_RELATIONS if party_level else frozenset({"add_or_remove_one"}))


def fedkt_party_step(
    task: FedKTTask, X: np.ndarray, y: np.ndarray, *, teacher: Any, student: Any, party: str
) -> FedKTPartyOutcome | FedKTSecureOutcome:
    """Party side of FedKT (Algorithm 1, lines 2–10), on the party's own ``(X, y)`` (original labels).

    Trains s × t teachers on disjoint subsets, labels the local queries by (noisy, under L2) teacher
    vote, trains one student per partition and predicts the final queries with each student. Under
    secure aggregation (``party_noise="skellam"``) it sends, instead of the predictions, its noisy
    consistent-vote histogram (:func:`~privfed.pipelines.fedkt.secure.secure_party_outcome`).

    Randomness: ``task.seed`` (from ``random_state``) keys the teacher assignment and seeds the models'
    initialisations and the ties of un-noised votes; the party's noise source
    (``NoiseSource.for_task(task.noise_seed)``: secret unless the task carries a seed) draws L2's noise and
    gives its DP-trained teachers and students their noise seeds (None each when secret).
    """
    if task.party_noise == SECURE_AGGREGATOR:
        plain = dataclasses.replace(task, party_noise="", noise_scale=0.0)
        return secure_party_outcome(task, fedkt_party_step(plain, X, y, teacher=teacher, student=student,
                                                           party=party), party=party)
    n_classes = len(task.classes)
    codes = np.searchsorted(task.classes, y).clip(0, n_classes - 1)
    if not np.array_equal(task.classes[codes], y):
        raise ValueError(f"{party} holds labels outside the federation's classes {task.classes.tolist()}")
    rng = np.random.default_rng(task.seed)
    noise_source = NoiseSource.for_task(task.noise_seed)
    # DP-trained teachers' and students' noise seeds: None each (secret, their own) unless the task has a noise_seed.
    model_noise_seeds = iter(noise_source.child_seeds(task.n_partitions * (task.n_teachers + 1)))
    # Stable under adding or removing one example (one teacher per partition changes): see keyed_teacher_subsets.
    # The key follows random_state: the k = 1 analysis holds for every key, so it need not be secret.
    subsets = keyed_teacher_subsets(X, codes, n_partitions=task.n_partitions, n_teachers=task.n_teachers,
                                    random_state=rng)
    X_local = task.queries[: task.n_local_queries]
    votes = np.zeros((task.n_partitions, len(X_local), n_classes), dtype=np.int64)
    partition_trainings: list[Mechanism | None] = []
    for partition, members in enumerate(subsets):
        seeds = rng.integers(2**31, size=len(members))  # one per teacher, whatever its subset
        noise_seeds = [next(model_noise_seeds) for _ in members]
        teachers = [
            fit_classifier(clone_with_noise_seed(teacher, noise_seed), X[rows], codes[rows], n_classes=n_classes,
                           seed=seed)
            for rows, seed, noise_seed in zip(members, seeds, noise_seeds)
            if len(rows)  # an empty teacher (a small party's hash left it no example) casts no vote
        ]
        votes[partition] = prediction_votes(np.stack([t.predict(X_local) for t in teachers]), n_classes)
        releases = [dp_release(t) for t in teachers]
        # A partition's teachers see disjoint subsets; one example is in one teacher of every partition.
        partition_trainings.append(None if None in releases else compose_parallel(releases))
    noise = task.noise
    n_answered = _answerable_local_queries(votes, task) if noise is not None else len(X_local)
    if n_answered == 0:
        raise ValueError(f"target_epsilon={task.target_epsilon} does not allow {party} to answer a single local query")
    students = []
    for partition in range(task.n_partitions):
        answered = votes[partition, :n_answered]
        # L2's noisy max draws from the party's noise source; un-noised ties (L0, L1) follow random_state.
        labels = noisy_labels(answered, rng) if noise is None else noise.labels(answered, noise_source.generator)
        students.append(
            fit_classifier(clone_with_noise_seed(student, next(model_noise_seeds)), X_local[:n_answered], labels,
                           n_classes=n_classes, seed=rng.integers(2**31))
        )
    X_final = task.queries[: task.n_final_queries]
    answered_votes = votes[:, :n_answered]
    gaps = ((WITHHELD, WITHHELD) if noise is not None
            else (_affected_partitions(answered_votes, 1), _affected_partitions(answered_votes, 2)))
    sent = FedKTVotes(
        predictions=np.stack([s.predict(X_final) for s in students]).astype(np.int64),
        n_local_answered=int(n_answered),
        n_teachers=int(task.n_teachers),
        affected_partitions_gap_1=gaps[0],
        affected_partitions_gap_2=gaps[1],
    )
    teacher_training = (None if None in partition_trainings
                        else compose_sequential(cast(list[Mechanism], partition_trainings)))
    return FedKTPartyOutcome(sent, tuple(students), answered_votes, teacher_training)


def clone_with_noise_seed(prototype: Any, noise_seed: int | None) -> Any:
    """``prototype``, or a clone of it with ``noise_seed`` when it has that parameter (a DP-trained torch model)."""
    if "noise_seed" not in prototype.get_params(deep=False):
        return prototype
    from sklearn.base import clone

    return with_noise_seed(clone(prototype), noise_seed)


# --- the tasks the server sends ---------------------------------------------------------------------
def fedkt_noise(model: Any) -> NoisyArgmax | None:
    """The noisy-max aggregator of the validated estimator ``model`` (None under L0, which adds no noise)."""
    if model.privacy == "L0":
        return None
    if model.aggregator == "confident-gnmax":
        return NoisyArgmax(model.aggregator, float(model.sigma), float(model.threshold), float(model.sigma_threshold))
    return NoisyArgmax(model.aggregator, float(model.gamma if model.aggregator == "laplace" else model.sigma))


def fedkt_noise_seeds(noise_source: NoiseSource, n_parties: int) -> tuple[list[int | None], int | None]:
    """The parties' noise seeds and the server's, from the fit's root ``noise_source``.

    All None for a secret source (the default): each party and the server draw their noise from their own
    secret source, and no seed exists to send. For a seeded one (``noise_seed=``), independent seeds derived
    from it: the server's is its first child whatever the number of parties, the parties' the next ``n_parties``.
    """
    server, *parties = noise_source.child_seeds(n_parties + 1)
    return parties, server


def fedkt_tasks(
    model: Any, schemas: Sequence[PartySchema], classes: np.ndarray, public: np.ndarray,
    party_seeds: np.random.SeedSequence, names: Sequence[str], *, noise_source: NoiseSource | None = None,
) -> list[FedKTTask]:
    """One :class:`FedKTTask` per party, from the validated estimator ``model`` and the parties' schemas.

    ``party_seeds`` (from ``random_state``) seed what no guarantee relies on; ``noise_source`` is the fit's root
    noise source (default: a secret one): a seeded one puts each party's noise seed in its task
    (:func:`fedkt_noise_seeds`), a secret one puts none.
    """
    noise_seeds = [None] * len(schemas) if noise_source is None else fedkt_noise_seeds(noise_source, len(schemas))[0]
    n_local = query_count(model.local_query_fraction, len(public))
    n_final = query_count(model.query_fraction, len(public))
    noise = fedkt_noise(model) if model.privacy == "L2" else None
    secure = model.aggregator == SECURE_AGGREGATOR  # each party adds its share σ²/n of the Skellam noise
    tasks = []
    check_collusion(model, len(schemas))
    for schema, name, seed, noise_seed in zip(schemas, names, spawn_seeds(party_seeds, len(schemas)), noise_seeds):
        withheld = schema.n_examples == WITHHELD_SIZE  # empty teachers of a small party cast no vote
        if not withheld and schema.n_examples < model.n_teachers and model.small_parties == "error":
            raise ValueError(
                f"{name} holds {schema.n_examples} examples, fewer than n_teachers={model.n_teachers} (each teacher "
                "needs a non-empty disjoint subset); lower n_teachers or pass small_parties='fewer-teachers'"
            )
        tasks.append(
            FedKTTask(
                queries=public[: max(n_local, n_final)],
                classes=classes,
                n_local_queries=n_local,
                n_final_queries=n_final,
                n_partitions=int(model.n_partitions),
                n_teachers=int(model.n_teachers) if withheld else min(int(model.n_teachers), schema.n_examples),
                seed=int(seed),
                party_noise=SECURE_AGGREGATOR if secure else "" if noise is None else noise.aggregator,
                noise_scale=(skellam_share_variance(model.sigma, len(schemas)) if secure
                             else 0.0 if noise is None else noise.scale),
                target_epsilon=(
                    math.nan if noise is None or model.target_epsilon is None else float(model.target_epsilon)
                ),
                delta=float(model.delta),
                noise_seed=noise_seed,
            )
        )
    preflight_fedkt(model, n_parties=len(schemas), n_classes=len(classes))
    return tasks


def preflight_fedkt(model: Any, *, n_parties: int, n_classes: int) -> None:
    """Warn before any training when FedKT's noise drowns even a unanimous vote (:mod:`.preflight`)."""
    noise = fedkt_noise(model)
    if noise is None:
        return
    aggregator = "laplace" if noise.aggregator == "laplace" else "gaussian"
    scale = 1.0 / noise.scale if aggregator == "laplace" else noise.scale
    if model.privacy == "L2":  # each party's teachers vote on its local queries, noised on the party
        votes, tier, fewer = int(model.n_teachers), "party's local", "more teachers (n_teachers)"
    else:  # the parties' students vote on the server's queries, noised on the server
        votes, tier, fewer = n_parties * int(model.n_partitions), "server", "more parties or partitions"
    warn_if_noise_drowns_votes("FedKT", votes=votes, n_classes=n_classes, aggregator=aggregator, scale=scale,
                               what=f"each {tier} query has at most {votes} votes",
                               advice=f"add less noise (a larger gamma, a smaller sigma) or use {fewer}")
