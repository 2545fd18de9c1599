"""FedKT: model-agnostic one-shot federated learning by two-tier PATE.

Li, He, Song, "Practical One-Shot Federated Learning for Cross-Silo Setting",
IJCAI 2021, Algorithm 1 (here "FedKT"). Each party splits its data s times
(partitions) into t disjoint subsets and trains one teacher per subset; for each
partition the teachers label a local query set of public examples by vote, and a
student learns those labels. Only the s students leave the party. The server
lets the students vote on a final query set — a party counts only if its s
students agree (consistent voting) — and trains the final model on the voted
labels.

Privacy levels (FedKT §4):

* ``"L0"`` — no noise, no guarantee (recorded in the ledger as such);
* ``"L1"`` — noise on the server's vote counts (Laplace(1/γ), or Gaussian N(0, σ²)
  with ``aggregator="gaussian"``): party-level DP with
  k = s, and example-level DP with k = s (an example sits in one teacher per
  partition, so it can change all s students of its party; see ``accounting``);
* ``"L2"`` — the same noise on each partition's teacher votes inside the party:
  example-level DP with k = 1 over the party's s·Q_local answers, and
  party-level DP with k = t; parallel composition over parties (FedKT Thm 4).
  Everything after the noisy labels (students, server votes, final model) is
  post-processing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from privfed.accounting import (
    GaussianNoisyMax,
    LaplaceNoisyMax,
    Ledger,
    Mechanism,
    account,
    compose_parallel,
    compose_sequential,
)
from privfed.accounting._checks import (
    check_choice,
    check_delta,
    check_int_at_least,
    check_positive_finite,
    check_probability,
)
from privfed.accounting.fingerprint import data_fingerprint
from privfed.accounting.noisy_max import VoteMechanism
from privfed.pipelines._dp_ledger import record_local_training
from privfed.pipelines._models import FittedClassifier, dp_release, fit_classifier, with_seed
from privfed.pipelines._random import as_seed_sequence
from privfed.pipelines.executor import PartyTask, run_party_tasks
from privfed.pipelines.partition import teacher_subsets
from privfed.pipelines.voting import consistent_votes, noisy_labels, prediction_votes
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

__all__ = ["CentralizedPATE", "FedKT", "Solo", "check_parties", "check_party_data", "query_count"]

PRIVACY_LEVELS = ("L0", "L1", "L2")
ACCOUNTINGS = ("conservative", "paper")
SMALL_PARTY_POLICIES = ("error", "fewer-teachers")


def query_count(fraction: float, n_public: int) -> int:
    """⌈fraction · |public|⌉: the first this-many public examples are the query set."""
    return min(n_public, math.ceil(fraction * n_public - 1e-9))


def check_party_data(parties: object) -> list[tuple[np.ndarray, np.ndarray]]:
    """Validate ``parties``, a non-empty sequence of ``(X, y)`` with one feature shape, before any work."""
    if isinstance(parties, (str, bytes)) or not isinstance(parties, Sequence) or len(parties) == 0:
        raise ValueError(f"parties must be a non-empty sequence of (X, y) pairs, got {type(parties).__name__}")
    checked = []
    for index, party in enumerate(parties):
        if not isinstance(party, (tuple, list)) or len(party) != 2:
            raise ValueError(f"parties[{index}] must be an (X, y) pair, got {type(party).__name__}")
        X, y = np.asarray(party[0]), np.asarray(party[1])
        if X.ndim < 2 or y.ndim != 1 or len(X) != len(y) or len(y) == 0:
            raise ValueError(
                f"parties[{index}] must hold X of shape (n, features...) and y of shape (n,) with n >= 1; "
                f"got X {X.shape} and y {y.shape}"
            )
        if checked and X.shape[1:] != checked[0][0].shape[1:]:
            raise ValueError(f"parties[{index}] has features of shape {X.shape[1:]}, parties[0] has {checked[0][0].shape[1:]}")
        checked.append((X, y))
    return checked


def check_parties(parties: object, public: object) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """Validate ``parties`` (see :func:`check_party_data`) and the unlabeled ``public`` set."""
    checked = check_party_data(parties)
    public = np.asarray(public)
    feature_shape = checked[0][0].shape[1:]
    if public.ndim < 2 or len(public) == 0:
        raise ValueError(f"public must be a non-empty array of shape (n, features...), got shape {public.shape}")
    if public.shape[1:] != feature_shape:
        raise ValueError(f"public has features of shape {public.shape[1:]}, the parties have {feature_shape}")
    return checked, public


@dataclass(frozen=True)
class NoisyArgmax:
    """The noisy-max aggregator of one tier: Laplace(1/γ) (PATE 2017) or Gaussian N(0, σ²) (PATE 2018) counts."""

    aggregator: str
    scale: float  # γ for "laplace", σ for "gaussian"

    def labels(self, votes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Noisy argmax of every row of ``votes``."""
        if self.aggregator == "laplace":
            return noisy_labels(votes, rng, gamma=self.scale)
        return noisy_labels(votes, rng, sigma=self.scale)

    def mechanism(self, votes: np.ndarray, votes_per_unit: int, unit: str) -> VoteMechanism:
        """The privfed mechanism that accounts these answers."""
        cls = LaplaceNoisyMax if self.aggregator == "laplace" else GaussianNoisyMax
        return cls(votes, self.scale, votes_per_unit, unit=unit)

    def describe(self) -> str:
        if self.aggregator == "laplace":
            return f"Laplace noise of scale 1/γ = {1 / self.scale:g}"
        return f"Gaussian noise of σ = {self.scale:g}"


@dataclass(frozen=True)
class _PartyConfig:
    """What every party's task needs besides its own data (shared, read-only)."""

    teacher: Any
    student: Any
    n_partitions: int
    n_classes: int
    X_query: np.ndarray
    noise: NoisyArgmax | None  # the party tier's aggregator (L2), None without party-side noise
    target_epsilon: float | None
    delta: float


@dataclass(frozen=True, eq=False)
class _PartyResult:
    """What a party sends (its students) and what it keeps private (votes, diagnostics)."""

    students: tuple[FittedClassifier, ...]
    votes: np.ndarray  # (s, local queries, classes): private evidence
    n_answered: int
    n_teachers: int
    max_affected_partitions: dict[int, int]  # gap threshold -> partitions whose labels one example may flip
    teacher_training: Mechanism | None = None  # the teachers' DP-SGD (None: some teacher is not DP-trained)


def _affected_partitions(votes: np.ndarray, gap: int) -> int:
    """Partitions with some query whose top-2 teacher-vote gap is ≤ ``gap`` (FedKT's z)."""
    top_two = np.sort(votes, axis=2)[:, :, -2:]
    return int(((top_two[:, :, 1] - top_two[:, :, 0]) <= gap).any(axis=1).sum())


def _answerable_local_queries(votes: np.ndarray, config: _PartyConfig) -> int:
    """Largest n such that answering the first n local queries of every partition stays within budget."""
    if config.target_epsilon is None:
        return votes.shape[1]

    def fits(n: int) -> bool:
        ledger = Ledger(target_epsilon=config.target_epsilon, delta=config.delta, primary_unit="example")
        stacked = votes[:, :n].reshape(-1, votes.shape[2])
        return ledger.fits(config.noise.mechanism(stacked, 1, "example"), unit="example")

    return _largest_fitting(votes.shape[1], fits)


def _largest_fitting(upper: int, fits: Any) -> int:
    """The largest n in [0, upper] with fits(n), for a monotone predicate (bisection)."""
    low, high = 0, upper
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def _train_party(task: PartyTask) -> _PartyResult:
    """Party side of FedKT (Algorithm 1, lines 2–10): a pure function of the party's task."""
    X, y, n_teachers = task.data
    config: _PartyConfig = task.config
    rng = np.random.default_rng(task.seed)
    subsets = teacher_subsets(len(y), n_partitions=config.n_partitions, n_teachers=n_teachers, random_state=rng)
    n_query = len(config.X_query)
    votes = np.zeros((config.n_partitions, n_query, config.n_classes), dtype=np.int64)
    partition_trainings: list[Mechanism | None] = []
    for partition, members in enumerate(subsets):
        teachers = [
            fit_classifier(config.teacher, X[rows], y[rows], n_classes=config.n_classes, seed=rng.integers(2**31))
            for rows in members
        ]
        votes[partition] = prediction_votes(np.stack([t.predict(config.X_query) for t in teachers]), config.n_classes)
        releases = [dp_release(teacher) for teacher in teachers]
        # A partition's teachers see disjoint subsets; one example is in one teacher of every partition.
        partition_trainings.append(None if None in releases else compose_parallel(releases))
    n_answered = _answerable_local_queries(votes, config) if config.noise is not None else n_query
    if n_answered == 0:
        raise ValueError(
            f"target_epsilon={config.target_epsilon} does not allow party {task.index} to answer a single local query"
        )
    students = []
    for partition in range(config.n_partitions):
        answered = votes[partition, :n_answered]
        labels = noisy_labels(answered, rng) if config.noise is None else config.noise.labels(answered, rng)
        students.append(
            fit_classifier(
                config.student, config.X_query[:n_answered], labels, n_classes=config.n_classes, seed=rng.integers(2**31)
            )
        )
    return _PartyResult(
        students=tuple(students),
        votes=votes[:, :n_answered],
        n_answered=n_answered,
        n_teachers=n_teachers,
        max_affected_partitions={gap: _affected_partitions(votes[:, :n_answered], gap) for gap in (1, 2)},
        teacher_training=None if None in partition_trainings else compose_sequential(partition_trainings),
    )


class FedKT(ClassifierMixin, BaseEstimator):
    """FedKT: one-shot federated learning for any classifier, with L0/L1/L2 privacy and a ledger.

    Parameters
    ----------
    teacher : estimator
        scikit-learn-style classifier (``fit``/``predict``) cloned for every teacher.
    student : estimator, default=None
        Cloned for every party's s students (default: ``teacher``).
    final : estimator, default=None
        The server's final model (default: ``student``).
    n_partitions : int, default=2
        s, the number of times each party re-splits its data.
    n_teachers : int, default=5
        t, teachers per partition (disjoint subsets of the party's data).
    privacy : {"L0", "L1", "L2"}, default="L0"
        Where Laplace noise is added (see the module docstring).
    gamma : float, default=None
        Laplace noise parameter (scale 1/γ); required for L1 and L2 with ``aggregator="laplace"``.
    query_fraction : float, default=1.0
        Fraction of the public set the server queries (the first ⌈fraction·|public|⌉ examples).
    local_query_fraction : float, default=1.0
        Fraction of the public set each party's teachers label for its students.
    consistent_voting : bool, default=True
        A party votes (with s votes) only when its s students agree; otherwise every student votes once.
    aggregator : {"laplace", "gaussian"}, default="laplace"
        Noisy-max aggregator: Laplace(1/γ) counts (the paper's), or Gaussian N(0, σ²) counts (PATE 2018's
        GNMax, the tighter aggregator FedKT names as future work), accounted by ``GaussianNoisyMax``.
    sigma : float, default=None
        Gaussian noise standard deviation in votes; required for L1 and L2 with ``aggregator="gaussian"``.
    accounting : {"conservative", "paper"}, default="conservative"
        Example-level accounting of L1. ``"conservative"``: k = s, valid for every data set.
        ``"paper"``: k = z as FedKT's code counts it (partitions with a top-2 teacher gap ≤ 1) —
        a data-dependent sensitivity, *not* a DP guarantee; recorded for comparison only.
    target_epsilon : float, default=None
        Budget on the primary unit's ε (party for L1, example for L2): queries are answered while the
        ledger's budget filter accepts them, and the models train on what was answered.
    delta : float, default=1e-5
    small_parties : {"error", "fewer-teachers"}, default="error"
        A party holding fewer examples than ``n_teachers`` is an error, or trains that many teachers
        (recorded in the ledger: under L2 its party-level k is its own teacher count).
    random_state : int, default=None
    n_jobs : int, default=1
        Parties trained in parallel (joblib).
    progress : bool, default=False
        Show a progress bar over parties.

    Attributes
    ----------
    classes_ : ndarray
        The labels seen in the parties' data.
    final_model_ : estimator
        The server's fitted final model, trained on the original labels: it can be
        published on its own (``privfed.save_bundle(model, path)`` saves it with the ledger).
    students_ : list of list of FittedClassifier
        Each party's s students.
    ledger_ : accounting.Ledger
        The privacy ledger of the model.
    evidence_ : dict of ndarray
        Private evidence (vote histograms) behind the ledger's data-dependent entries.
    n_queries_answered_ : int
        Server queries answered (the final model's training set size).
    n_local_queries_answered_ : list of int
        Local queries each party answered.
    example_level_epsilons_ : dict
        Example-level ε of L1 under both accountings (``"conservative"`` and ``"paper"``).

    Examples
    --------
    >>> from sklearn.datasets import load_digits
    >>> from sklearn.tree import DecisionTreeClassifier
    >>> X, y = load_digits(return_X_y=True)
    >>> parties = [(X[i:1200:4], y[i:1200:4]) for i in range(4)]
    >>> model = FedKT(DecisionTreeClassifier(max_depth=8), privacy="L1", gamma=0.1, query_fraction=0.2,
    ...               random_state=0).fit(parties, X[1200:1500])
    >>> model.ledger_.account(delta=1e-5).unit
    'party'
    """

    def __init__(
        self,
        teacher: Any,
        student: Any = None,
        final: Any = None,
        *,
        n_partitions: int = 2,
        n_teachers: int = 5,
        privacy: str = "L0",
        gamma: float | None = None,
        query_fraction: float = 1.0,
        local_query_fraction: float = 1.0,
        consistent_voting: bool = True,
        aggregator: str = "laplace",
        sigma: float | None = None,
        accounting: str = "conservative",
        target_epsilon: float | None = None,
        delta: float = 1e-5,
        small_parties: str = "error",
        random_state: int | None = None,
        n_jobs: int = 1,
        progress: bool = False,
    ) -> None:
        self.teacher = teacher
        self.student = student
        self.final = final
        self.n_partitions = n_partitions
        self.n_teachers = n_teachers
        self.privacy = privacy
        self.gamma = gamma
        self.query_fraction = query_fraction
        self.local_query_fraction = local_query_fraction
        self.consistent_voting = consistent_voting
        self.aggregator = aggregator
        self.sigma = sigma
        self.accounting = accounting
        self.target_epsilon = target_epsilon
        self.delta = delta
        self.small_parties = small_parties
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.progress = progress

    # --- validation -------------------------------------------------------------------------------
    def _validate(self) -> None:
        for name in ("teacher", "student", "final"):
            value = getattr(self, name)
            if value is None and name != "teacher":
                continue
            if not (hasattr(value, "fit") and hasattr(value, "predict") and hasattr(value, "get_params")):
                raise TypeError(f"{name} must be a scikit-learn-style classifier (fit, predict, get_params), got {value!r}")
        check_int_at_least("n_partitions", self.n_partitions, 1)
        check_int_at_least("n_teachers", self.n_teachers, 1)
        check_choice("privacy", self.privacy, PRIVACY_LEVELS)
        check_choice("aggregator", self.aggregator, ("laplace", "gaussian"))
        check_choice("accounting", self.accounting, ACCOUNTINGS)
        check_choice("small_parties", self.small_parties, SMALL_PARTY_POLICIES)
        check_probability("query_fraction", self.query_fraction, open_high=False)
        check_probability("local_query_fraction", self.local_query_fraction, open_high=False)
        check_delta(self.delta)
        if not isinstance(self.consistent_voting, bool):
            raise TypeError(f"consistent_voting must be a bool, got {self.consistent_voting!r}")
        needed, unused = ("gamma", "sigma") if self.aggregator == "laplace" else ("sigma", "gamma")
        if getattr(self, unused) is not None:
            raise ValueError(f"{unused} does not apply to aggregator={self.aggregator!r}; got {getattr(self, unused)!r}")
        if self.privacy == "L0":
            if getattr(self, needed) is not None or self.target_epsilon is not None:
                raise ValueError(
                    f"{needed} and target_epsilon apply to privacy='L1' or 'L2' only; privacy='L0' adds no noise"
                )
        elif getattr(self, needed) is None:
            raise ValueError(
                f"{needed} is required with privacy={self.privacy!r} and aggregator={self.aggregator!r}, got None"
            )
        else:
            check_positive_finite(needed, getattr(self, needed))
        if self.target_epsilon is not None:
            check_positive_finite("target_epsilon", self.target_epsilon)

    def _teacher_counts(self, parties: list[tuple[np.ndarray, np.ndarray]]) -> list[int]:
        counts = []
        for index, (_, y) in enumerate(parties):
            if len(y) < self.n_teachers and self.small_parties == "error":
                raise ValueError(
                    f"party {index} holds {len(y)} examples, fewer than n_teachers={self.n_teachers} (each teacher "
                    "needs a non-empty disjoint subset); lower n_teachers or pass small_parties='fewer-teachers'"
                )
            counts.append(min(self.n_teachers, len(y)))
        return counts

    # --- fitting ----------------------------------------------------------------------------------
    def fit(self, parties: Sequence[tuple[np.ndarray, np.ndarray]], public: np.ndarray) -> FedKT:
        """Run FedKT on the parties' private data and the unlabeled public set."""
        self._validate()
        parties, public = check_parties(parties, public)
        teacher_counts = self._teacher_counts(parties)
        self.classes_ = np.unique(np.concatenate([y for _, y in parties]))
        n_classes = len(self.classes_)
        coded = [(X, np.searchsorted(self.classes_, y), t) for (X, y), t in zip(parties, teacher_counts)]

        seed_sequence = as_seed_sequence(self.random_state)
        party_seeds, server_seeds = seed_sequence.spawn(2)
        student = self.teacher if self.student is None else self.student
        final = student if self.final is None else self.final
        noise = None
        if self.privacy != "L0":
            noise = NoisyArgmax(self.aggregator, float(self.gamma if self.aggregator == "laplace" else self.sigma))
        config = _PartyConfig(
            teacher=self.teacher,
            student=student,
            n_partitions=self.n_partitions,
            n_classes=n_classes,
            X_query=public[: query_count(self.local_query_fraction, len(public))],
            noise=noise if self.privacy == "L2" else None,
            target_epsilon=self.target_epsilon if self.privacy == "L2" else None,
            delta=self.delta,
        )
        results: list[_PartyResult] = run_party_tasks(
            _train_party, coded, config=config, random_state=party_seeds, n_jobs=self.n_jobs, progress=self.progress
        )
        self.students_ = [list(result.students) for result in results]
        self.n_local_queries_answered_ = [result.n_answered for result in results]

        X_final = public[: query_count(self.query_fraction, len(public))]
        predictions = np.stack([[s.predict(X_final) for s in result.students] for result in results])
        if self.consistent_voting:
            server_votes = consistent_votes(predictions, n_classes)
        else:
            server_votes = prediction_votes(predictions.reshape(-1, len(X_final)), n_classes)

        primary_unit = "example" if self.privacy == "L2" else "party"
        ledger = Ledger(
            # The budget binds the primary unit: L2's party-level ε (k = t) is recorded but not budgeted.
            target_epsilon=None if self.target_epsilon is None else {primary_unit: self.target_epsilon},
            delta=self.delta,
            primary_unit=primary_unit,
            seeds={"random_state": int(seed_sequence.entropy)},
            public_data_sha256=data_fingerprint({"public": public}),
            description=(
                f"FedKT-{self.privacy} final model: {len(parties)} parties, s = {self.n_partitions} partitions, "
                f"t = {self.n_teachers} teachers, {type(self.teacher).__name__} teachers, "
                f"{type(final).__name__} final model"
            ),
        )
        self.evidence_: dict[str, np.ndarray] = {}
        n_answered = self._account(ledger, results, server_votes, noise)
        server_rng = np.random.default_rng(server_seeds)
        answered = server_votes[:n_answered]
        labels = noise.labels(answered, server_rng) if self.privacy == "L1" else noisy_labels(answered, server_rng)
        if len(np.unique(labels)) < 2:
            raise ValueError(
                "the server's voted labels hold a single class: the final model cannot be trained; "
                "query more public examples (query_fraction) or lower the noise"
            )
        # The final model learns the original labels, so that it can be published (and bundled) on its own.
        self.final_model_ = with_seed(final, server_rng.integers(2**31)).fit(X_final[:n_answered], self.classes_[labels])
        self.n_queries_answered_ = int(n_answered)
        self.ledger_ = ledger
        return self

    # --- accounting -------------------------------------------------------------------------------
    def _account(
        self, ledger: Ledger, results: list[_PartyResult], server_votes: np.ndarray, noise: NoisyArgmax | None
    ) -> int:
        """Record every release in the ledger; return the number of server queries answered.

        With DP-trained teachers every release (students, votes, the final model) is
        computed from the teachers and public data only: post-processing of their training.
        """
        s = self.n_partitions
        derived = record_local_training(ledger, [r.teacher_training for r in results], what="FedKT teachers")
        if self.privacy == "L0":
            ledger.record_unaccounted("FedKT-L0: no noise is added anywhere; the model has no differential-privacy guarantee",
                                      derived_from_training=derived)
            self.evidence_["server_votes"] = server_votes
            return len(server_votes)

        if self.privacy == "L2":
            stacked = [result.votes.reshape(-1, result.votes.shape[2]) for result in results]
            example = compose_parallel([noise.mechanism(v, 1, "example") for v in stacked])
            party = compose_parallel([noise.mechanism(v, r.n_teachers, "party") for v, r in zip(stacked, results)])
            ledger.record(
                {"example": example, "party": party},
                note=(
                    f"party-side noisy teacher votes ({noise.describe()}): "
                    f"{[r.n_answered for r in results]} local queries per partition answered by each party, "
                    f"s = {s} partitions; example level k = 1, party level k = teachers per partition; "
                    "parallel composition over parties"
                ),
                derived_from_training=derived,
            )
            for index, v in enumerate(stacked):
                self.evidence_[f"party_{index}_votes"] = v
            return len(server_votes)

        # L1: noise on the server's vote counts.
        z = {gap: max(r.max_affected_partitions[gap] for r in results) for gap in (1, 2)}

        def releases(n: int) -> dict[str, VoteMechanism]:
            example_k = s if self.accounting == "conservative" else max(z[1], 1)
            return {
                "party": noise.mechanism(server_votes[:n], s, "party"),
                "example": noise.mechanism(server_votes[:n], example_k, "example"),
            }

        n_answered = len(server_votes)
        if self.target_epsilon is not None:
            n_answered = _largest_fitting(len(server_votes), lambda n: n > 0 and ledger.fits(releases(n)))
            if n_answered == 0:
                raise ValueError(f"target_epsilon={self.target_epsilon} does not allow a single server query")
        self.example_level_epsilons_ = {
            "conservative": account(noise.mechanism(server_votes[:n_answered], s, "example"), delta=self.delta).epsilon,
            "paper": account(
                noise.mechanism(server_votes[:n_answered], max(z[1], 1), "example"), delta=self.delta, analysis="classic"
            ).epsilon,
            "z_gap_le_1": z[1],
            "z_gap_le_2": z[2],
        }
        ledger.record(
            releases(n_answered),
            note=(
                f"server noisy consistent votes ({noise.describe()}) on {n_answered} public "
                f"queries; party level k = s = {s}; example level k = "
                + (f"s = {s} (conservative)" if self.accounting == "conservative" else f"z = {max(z[1], 1)} (paper)")
            ),
            derived_from_training=derived,
        )
        ledger.record_unaccounted(
            "FedKT-L1: the students each party sends to the server are trained on un-noised teacher votes; "
            "the guarantee covers the final model and the server's noisy labels, not the students (trust the server)",
            derived_from_training=derived,
        )
        if self.accounting == "paper":
            ledger.record_unaccounted(
                f"FedKT-L1 example level uses the paper's data-dependent sensitivity k = z = {max(z[1], 1)}, "
                "which is not a differential-privacy guarantee; the conservative k = s is",
                derived_from_training=derived,
            )
        self.evidence_["server_votes"] = server_votes[:n_answered]
        return n_answered

    # --- prediction -------------------------------------------------------------------------------
    def predict(self, X: np.ndarray) -> np.ndarray:
        """Labels predicted by the final model."""
        check_is_fitted(self, "final_model_")
        return self.final_model_.predict(np.asarray(X))

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Class probabilities of the final model, columns in ``classes_`` order (classes it never saw get 0)."""
        check_is_fitted(self, "final_model_")
        if not hasattr(self.final_model_, "predict_proba"):
            raise AttributeError(f"the final model {type(self.final_model_).__name__} has no predict_proba")
        proba = np.zeros((len(X), len(self.classes_)))
        proba[:, np.searchsorted(self.classes_, self.final_model_.classes_)] = self.final_model_.predict_proba(np.asarray(X))
        return proba


class CentralizedPATE(FedKT):
    """Centralised PATE baseline: one party holding all the parties' data, same s and t (FedKT §5)."""

    def fit(self, parties: Sequence[tuple[np.ndarray, np.ndarray]], public: np.ndarray) -> CentralizedPATE:
        checked, public = check_parties(parties, public)
        pooled = (np.concatenate([X for X, _ in checked]), np.concatenate([y for _, y in checked]))
        return super().fit([pooled], public)


class Solo(ClassifierMixin, BaseEstimator):
    """SOLO baseline: each party trains ``model`` on its own data alone (FedKT §5).

    ``score`` is the parties' mean accuracy; ``predict`` uses party ``party`` (default 0).
    """

    def __init__(self, model: Any, *, party: int = 0, random_state: int | None = None, n_jobs: int = 1) -> None:
        self.model = model
        self.party = party
        self.random_state = random_state
        self.n_jobs = n_jobs

    def fit(self, parties: Sequence[tuple[np.ndarray, np.ndarray]], public: np.ndarray | None = None) -> Solo:
        checked = check_party_data(parties)
        self.classes_ = np.unique(np.concatenate([y for _, y in checked]))
        seeds = as_seed_sequence(self.random_state).spawn(len(checked))
        self.models_ = [
            fit_classifier(
                self.model, X, np.searchsorted(self.classes_, y), n_classes=len(self.classes_),
                seed=int(seed.generate_state(1)[0]),
            )
            for (X, y), seed in zip(checked, seeds)
        ]
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        check_is_fitted(self, "models_")
        return self.classes_[self.models_[self.party].predict(np.asarray(X))]

    def score(self, X: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None = None) -> float:
        """Mean over parties of each party's own model's accuracy."""
        check_is_fitted(self, "models_")
        y = np.asarray(y)
        return float(np.mean([np.mean(self.classes_[m.predict(np.asarray(X))] == y) for m in self.models_]))
