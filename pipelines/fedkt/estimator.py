"""FedKT: model-agnostic one-shot federated learning by two-tier PATE.

Li, He, Song, "Practical One-Shot Federated Learning for Cross-Silo Setting",
IJCAI 2021, Algorithm 1 (here "FedKT"). Each party splits its data s times
(partitions) into t disjoint subsets and trains one teacher per subset; for each
partition the teachers label a local query set of public examples by vote, and a
student learns those labels. Only the s students' predictions on the final
queries leave the party (:mod:`privfed.pipelines.fedkt.steps` lists the messages). The server
lets the students vote on a final query set — a party counts only if its s
students agree (consistent voting) — and trains the final model on the voted
labels.

Privacy levels (FedKT §4):

* ``"L0"`` — no noise, no guarantee (recorded in the ledger as such);
* ``"L1"`` — noise on the server's vote counts (Laplace(1/γ), or Gaussian N(0, σ²)
  with ``aggregator="gaussian"``): party-level DP with
  k = s, and example-level DP with k = s (an example sits in one teacher per
  partition, so it can change all s students of its party; see ``accounting``);
  with ``aggregator="skellam", secure_aggregation=True`` the parties add Skellam
  noise in shares and the server receives only the noisy sum
  (:mod:`privfed.pipelines.fedkt.secure`);
* ``"L2"`` — the same noise on each partition's teacher votes inside the party:
  example-level DP with k = 1 over the party's s·Q_local answers, and
  party-level DP with k = t; parallel composition over parties (FedKT Thm 4).
  Everything after the noisy labels (students, server votes, final model) is
  post-processing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.utils.validation import check_is_fitted

from ...accounting._checks import (
    check_choice,
    check_delta,
    check_int_at_least,
    check_positive_finite,
    check_probability,
)
from ...accounting.ledger import Ledger
from ...accounting.noise_source import NoiseSource, check_noise_seed
from ...accounting.silo_budget import SiloBudget
from ..data.party_data import check_parties, check_party_data, party_classes
from ..data.party_schema import PartySchema, describe_party, federation_classes
from ..models.fitting import fit_classifier, with_noise_seed
from ..protocol.dp_ledger import effective_noise_seed, receive_trainings
from ..protocol.executor import PartyTask, run_party_tasks
from ..protocol.messages import DEFAULT_MAX_BYTES, record_sizes
from ..protocol.progress import check_progress, progress_bar
from ..protocol.run_parameters import records_run_parameters
from ..protocol.seeds import as_seed_sequence
from ..protocol.silo_gate import BudgetRefusal, RefusedRunError, admit, check_budgets, refusals_in, study_name
from .secure import SECURE_AGGREGATOR, FedKTSecureOutcome, FedKTVoteSum, secure_sum
from .server import FedKTFit, fedkt_server_step, receive_fedkt_replies
from .steps import (
    FedKTPartyOutcome,
    FedKTVotes,
    fedkt_noise,
    fedkt_party_step,
    fedkt_planned_release,
    fedkt_tasks,
    query_count,
)

__all__ = ["CentralizedPATE", "FedKT", "Solo", "query_count"]

PRIVACY_LEVELS = ("L0", "L1", "L2")
ACCOUNTINGS = ("conservative", "paper")
AGGREGATORS = ("laplace", "gaussian", "confident-gnmax", SECURE_AGGREGATOR)
SMALL_PARTY_POLICIES = ("error", "fewer-teachers")



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
    aggregator : {"laplace", "gaussian", "confident-gnmax", "skellam"}, default="laplace"
        Noisy-max aggregator: Laplace(1/γ) counts (the paper's), Gaussian N(0, σ²) counts (PATE 2018's
        GNMax, the tighter aggregator FedKT names as future work), accounted by ``GaussianNoisyMax``, or
        (L1 only) Confident GNMax (PATE 2018, Algorithm 1): the server answers a query only when its top
        count plus N(0, σ₁²) reaches ``threshold``, then by GNMax; accounted by ``ConfidentGNMax`` (both
        steps; unanswered queries pay for the threshold step only) and the final model learns the answered ones.
        ``"skellam"`` (L1, with ``secure_aggregation=True``): distributed Skellam noise (Agarwal, Kairouz, Liu
        2021), each of the n parties adding Sk(σ²/n) to its own consistent-vote histogram; the server receives
        only the noisy sum and labels by its argmax; accounted by ``SkellamMechanism``
        (:mod:`privfed.pipelines.fedkt.secure`).
    sigma : float, default=None
        Gaussian noise standard deviation in votes; required for L1 and L2 with ``aggregator="gaussian"`` and
        for ``"confident-gnmax"`` (its answering step); with ``"skellam"``, the standard deviation of the summed
        Skellam noise per count (total variance σ²).
    secure_aggregation : bool, default=False
        The parties send their noisy histograms through secure aggregation (in process, a function standing
        in for it; on Flower, Flower's SecAgg+), so the coordinator learns only their sum: no student
        predictions and no gap counts leave the parties. Requires ``aggregator="skellam"``, privacy ``"L1"``,
        consistent voting and ``accounting="conservative"``; no ``target_epsilon`` (the ε is data-independent:
        size σ with ``privfed.account(privfed.SkellamMechanism(...))`` beforehand).
    collusion : int, default=None
        With ``secure_aggregation=True`` only: the number c of parties assumed to collude with the coordinator,
        in 0..n − 1. The colluders subtract their own Skellam shares, so the coordinator's ε is computed at the
        variance of the other contributors' shares; the public's at every contributor's. None: the worst
        coalition, every other party (c = n − 1), which leaves a party only its own share σ²/n
        (:mod:`privfed.pipelines.fedkt.secure`).
    threshold, sigma_threshold : float, default=None
        Confident GNMax's threshold T and its noise σ₁, in votes (the server tier has ``parties · s`` voters);
        required with ``aggregator="confident-gnmax"``, refused otherwise.
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
    classes : array-like, default=None
        The federation's public label set. Given, every party checks its labels against it and
        withholds its size and label set from the coordinator (the schema exchange then reveals
        nothing; a party smaller than ``n_teachers`` leaves some teachers empty, which cast no vote,
        and the party-level k stays ``n_teachers``). None: the classes are the union of the parties'
        labels, and the coordinator learns each party's size and labels (recorded in the ledger).
    random_state : int, default=None
        Seeds what no guarantee relies on: partitions, the teacher-assignment key, query order, model
        initialisations, ties of un-noised votes. Never the noise.
    noise_seed : int, default=None
        None: every draw a guarantee relies on (L1's server noise and threshold noise, L2's party-side noise,
        the Skellam shares, DP-trained models' noise) comes from a secret source on whoever adds it
        (:class:`~privfed.accounting.NoiseSource`). An int makes that noise reproducible, for tests and
        reproductions only: the tasks then carry seeds derived from it, the ledger records it, and every ε
        of the ledger is ∞ for its holders.
    n_jobs : int, default=1
        Parties trained in parallel (joblib).
    progress : bool or None, default=None
        A progress bar over the parties' training: ``None`` on a terminal only, ``True`` always,
        ``False`` never (see :mod:`privfed.pipelines.protocol.progress`).

    Attributes
    ----------
    classes_ : ndarray
        The labels seen in the parties' data.
    final_model_ : estimator
        The server's fitted final model, trained on the original labels: it can be
        published on its own (``privfed.save_bundle(model, path)`` saves it with the ledger).
    students_ : list of list of FittedClassifier
        Each party's s students.
    party_votes_ : list of ndarray
        Each party's teacher vote histograms on its answered local queries, (s, answered, classes): the
        party's own state, never sent (an in-process run holds every party; a Flower run has none of them).
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
    refused_ : list of Refusal
        The parties whose silo budgets (``fit(..., budgets=...)``) refused, with their reasons; they sent
        nothing else, and ``students_`` and ``party_votes_`` hold ``[]`` and None for them.

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
        threshold: float | None = None,
        sigma_threshold: float | None = None,
        secure_aggregation: bool = False,
        collusion: int | None = None,
        accounting: str = "conservative",
        target_epsilon: float | None = None,
        delta: float = 1e-5,
        small_parties: str = "error",
        classes: Any = None,
        random_state: int | None = None,
        noise_seed: int | None = None,
        n_jobs: int = 1,
        progress: bool | None = None,
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
        self.threshold = threshold
        self.sigma_threshold = sigma_threshold
        self.secure_aggregation = secure_aggregation
        self.collusion = collusion
        self.accounting = accounting
        self.target_epsilon = target_epsilon
        self.delta = delta
        self.small_parties = small_parties
        self.classes = classes
        self.random_state = random_state
        self.noise_seed = noise_seed
        self.n_jobs = n_jobs
        self.progress = progress

    # --- validation -------------------------------------------------------------------------------
    def _validate(self) -> None:
        for name in ("teacher", "student", "final"):
            value = getattr(self, name)
            if value is None and name != "teacher":
                continue
            if not (hasattr(value, "fit") and hasattr(value, "predict") and hasattr(value, "get_params")):
                raise TypeError(
                    f"{name} must be a scikit-learn-style classifier (fit, predict, get_params), got {value!r}"
                )
        check_int_at_least("n_partitions", self.n_partitions, 1)
        check_int_at_least("n_teachers", self.n_teachers, 1)
        check_choice("privacy", self.privacy, PRIVACY_LEVELS)
        check_choice("aggregator", self.aggregator, AGGREGATORS)
        check_choice("accounting", self.accounting, ACCOUNTINGS)
        check_choice("small_parties", self.small_parties, SMALL_PARTY_POLICIES)
        check_probability("query_fraction", self.query_fraction, open_high=False)
        check_probability("local_query_fraction", self.local_query_fraction, open_high=False)
        check_delta(self.delta)
        if not isinstance(self.consistent_voting, bool):
            raise TypeError(f"consistent_voting must be a bool, got {self.consistent_voting!r}")
        self._validate_confident()
        self._validate_secure()
        needed, unused = ("gamma", "sigma") if self.aggregator == "laplace" else ("sigma", "gamma")
        if getattr(self, unused) is not None:
            raise ValueError(
                f"{unused} does not apply to aggregator={self.aggregator!r}; got {getattr(self, unused)!r}"
            )
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
        if self.classes is not None:
            classes = np.asarray(self.classes)
            if classes.ndim != 1 or len(np.unique(classes)) != len(classes) or len(classes) < 2:
                raise ValueError(f"classes must be a 1-D array of at least 2 distinct labels, got {self.classes!r}")
        check_progress(self.progress)
        check_noise_seed(self.noise_seed)

    def _validate_confident(self) -> None:
        """Confident GNMax's threshold parameters: required with it (server tier, L1), refused otherwise."""
        names = ("threshold", "sigma_threshold")
        if self.aggregator != "confident-gnmax":
            for name in names:
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} applies to aggregator='confident-gnmax' only; got {name}="
                                     f"{getattr(self, name)!r} with aggregator={self.aggregator!r}")
            return
        if self.privacy != "L1":
            raise ValueError(f"aggregator='confident-gnmax' thresholds the server's votes: it needs privacy='L1', "
                             f"got privacy={self.privacy!r}")
        for name in names:
            if getattr(self, name) is None:
                raise ValueError(f"{name} is required with aggregator='confident-gnmax', got None")
            check_positive_finite(name, getattr(self, name))

    def _validate_secure(self) -> None:
        """Secure aggregation with distributed Skellam noise: only for the server tier's consistent votes (L1)."""
        if not isinstance(self.secure_aggregation, bool):
            raise TypeError(f"secure_aggregation must be a bool, got {self.secure_aggregation!r}")
        if self.secure_aggregation != (self.aggregator == SECURE_AGGREGATOR):
            raise ValueError(
                "secure_aggregation=True and aggregator='skellam' go together (the parties add the Skellam noise in "
                f"shares, which only a secure sum keeps private); got secure_aggregation={self.secure_aggregation!r}, "
                f"aggregator={self.aggregator!r}"
            )
        if not self.secure_aggregation:
            if self.collusion is not None:
                raise ValueError(f"collusion applies to secure_aggregation=True only (the parties colluding with the "
                                 f"coordinator against secure aggregation); got collusion={self.collusion!r}")
            return
        if self.collusion is not None:
            check_int_at_least("collusion", self.collusion, 0)
        refusals = (
            (self.privacy != "L1", f"privacy={self.privacy!r}", "privacy='L1' (L0 adds no noise, so a sum would be "
             "exact; L2's noise is on the teachers' votes inside each party)"),
            (self.accounting != "conservative", f"accounting={self.accounting!r}", "accounting='conservative' (the "
             "paper's k = z needs each party's un-noised gap counts, which secure aggregation does not send)"),
            (not self.consistent_voting, "consistent_voting=False", "consistent_voting=True"),
            (self.target_epsilon is not None, f"target_epsilon={self.target_epsilon!r}", "target_epsilon=None (the "
             "Skellam ε is data-independent: choose sigma and query_fraction with privfed.account beforehand)"),
        )
        for refused, given, needed in refusals:
            if refused:
                raise ValueError(f"secure_aggregation=True needs {needed}; got {given}")

    # --- fitting ----------------------------------------------------------------------------------
    @records_run_parameters
    def fit(self, parties: Sequence[tuple[np.ndarray, np.ndarray]], public: np.ndarray, *,
            budgets: Sequence[SiloBudget | None] | None = None, study: str | None = None) -> FedKT:
        """Run FedKT on the parties' private data and the unlabeled public set.

        ``budgets``: one :class:`~privfed.SiloBudget` (or None) per party. A party with a budget charges its
        reply's release (:func:`~privfed.pipelines.fedkt.steps.fedkt_planned_release`) under ``study`` (default
        ``"FedKT fit"``) before touching its data, or refuses (listed in ``refused_``); the others go on, and a
        run that every party refused raises :class:`~privfed.pipelines.protocol.silo_gate.RefusedRunError`.

        A driver over the party steps of :mod:`privfed.pipelines.fedkt.steps` and the server step of
        :mod:`privfed.pipelines.fedkt.server`: every message goes through its wire form, exactly as in a
        Flower run (``privfed.federation``).

        Warns (``UserWarning``) when the voted labels hold so few classes that the final model is near chance
        on a balanced test set whatever it learns, or when 95 % or more of them are one class.
        """
        self._validate()
        parties, public = check_parties(parties, public)
        budgets = check_budgets(budgets, len(parties), public_classes=self.classes)
        study = study_name(study, "FedKT")
        names = [f"party {index}" for index in range(len(parties))]
        schemas = [
            PartySchema.from_record(describe_party(X, y, public_classes=self.classes).to_record(), sender=name)
            for (X, y), name in zip(parties, names)
        ]
        classes = federation_classes(schemas, public.shape[1:], names)
        seed_sequence = as_seed_sequence(self.random_state)
        party_seeds, server_seeds = seed_sequence.spawn(2)
        noise_source = NoiseSource.for_task(effective_noise_seed(self))
        tasks = fedkt_tasks(self, schemas, classes, public, party_seeds, names, noise_source=noise_source)
        if self.target_epsilon is not None:
            self._check_budget_allows_a_query([task.n_teachers for task in tasks], len(classes))
        student = self.teacher if self.student is None else self.student
        answers: list[FedKTPartyOutcome | FedKTSecureOutcome | BudgetRefusal] = run_party_tasks(
            _party_step, [(X, y, task, budget, study) for (X, y), task, budget in zip(parties, tasks, budgets)],
            config=(self.teacher, student), random_state=party_seeds, n_jobs=self.n_jobs, progress=self.progress,
        )
        self.refused_ = refusals_in([[a.to_record()] if isinstance(a, BudgetRefusal) else [] for a in answers])
        kept = [index for index, answer in enumerate(answers) if not isinstance(answer, BudgetRefusal)]
        if not kept:
            raise RefusedRunError(self.refused_, "FedKT cannot run: no party took part")
        outcomes: list[FedKTPartyOutcome] = [answers[index] for index in kept]  # type: ignore[misc]
        tasks = [tasks[index] for index in kept]
        names = [names[index] for index in kept]
        schemas = [schemas[index] for index in kept]
        sent = [[message.to_record() for message in outcome.sent()] for outcome in outcomes]
        replies: list[FedKTVotes] | FedKTVoteSum
        if self.secure_aggregation:  # the server step sees only the sum of the parties' noisy histograms
            replies = secure_sum(tasks, sent, names, max_bytes=DEFAULT_MAX_BYTES, n_parties=len(parties))
        else:
            replies = receive_fedkt_replies(tasks, sent, names, max_bytes=DEFAULT_MAX_BYTES)
        self.students_ = [[] if isinstance(a, BudgetRefusal) else list(a.students) for a in answers]
        self.party_votes_ = [None if isinstance(a, BudgetRefusal) else a.teacher_votes for a in answers]
        schema_records = [[schema.to_record()] for schema in schemas]
        self._set_fitted(
            fedkt_server_step(self, replies, classes, public, seed_sequence, server_seeds,
                              receive_trainings(sent, names, max_bytes=DEFAULT_MAX_BYTES,
                                                models=[self.teacher] * len(names)), schemas=schemas,
                              noise_source=noise_source),
            classes,
            record_sizes([first + rest for first, rest in zip(schema_records, sent)]),
        )
        return self

    def _set_fitted(self, fitted: FedKTFit, classes: np.ndarray, bandwidth: dict[str, list[int]]) -> None:
        """Set the fitted attributes from the server step's result (shared with ``privfed.federation``)."""
        self.classes_ = classes
        self.final_model_ = fitted.final_model
        self.ledger_ = fitted.ledger
        self.evidence_ = fitted.evidence
        self.n_queries_answered_ = fitted.n_queries_answered
        self.n_local_queries_answered_ = fitted.n_local_queries_answered
        if fitted.example_level_epsilons is not None:
            self.example_level_epsilons_ = fitted.example_level_epsilons
        self.bandwidth_ = bandwidth

    def _check_budget_allows_a_query(self, teacher_counts: list[int], n_classes: int) -> None:
        """Refuse, before any training, a ``target_epsilon`` that not even one unanimous answer fits in.

        A unanimous vote histogram (every voter on one class) has the largest top-2
        gap, hence the smallest ε of any histogram; if one such answer exceeds the
        budget, no answer fits, whatever the teachers would have voted.
        """
        noise = fedkt_noise(self)
        assert noise is not None and self.target_epsilon is not None  # called for L1 and L2 with a budget
        if self.privacy == "L1":
            checks = [("a single server query", len(teacher_counts) * self.n_partitions, self.n_partitions, "party", 1)]
        else:  # L2: each party answers one local query in each of its s partitions
            checks = [(f"party {i} to answer a single local query", t, 1, "example", self.n_partitions)
                      for i, t in enumerate(teacher_counts)]
        for what, voters, votes_per_unit, unit, rows in checks:
            votes = np.zeros((rows, n_classes), dtype=np.int64)
            votes[:, 0] = voters
            ledger = Ledger(target_epsilon={unit: self.target_epsilon}, delta=self.delta, primary_unit=unit)
            if not ledger.fits(noise.mechanism(votes, votes_per_unit, unit), unit=unit):
                raise ValueError(
                    f"target_epsilon={self.target_epsilon} does not allow {what}, even a "
                    f"unanimous one ({unit}-level ε of one answer with {noise.describe()} exceeds it); raise "
                    "target_epsilon or add less noise (a larger gamma, a smaller sigma)"
                )

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
        proba[:, np.searchsorted(self.classes_, self.final_model_.classes_)] = self.final_model_.predict_proba(
            np.asarray(X)
        )
        return proba


def _party_step(task: PartyTask) -> FedKTPartyOutcome | FedKTSecureOutcome | BudgetRefusal:
    """One party's work in the in-process run (a joblib task): its silo's budget charged first (or a refusal),
    then the party step on its own data."""
    X, y, message, budget, study = task.data
    if budget is not None:
        refusal = admit(budget, fedkt_planned_release(message, budget_unit=budget.unit), study=study,
                        pipeline="fedkt")
        if refusal is not None:
            return refusal
    teacher, student = task.config
    return fedkt_party_step(message, X, y, teacher=teacher, student=student, party=f"party {task.index}")


class CentralizedPATE(FedKT):
    """Centralised PATE baseline: one party holding all the parties' data, same s and t (FedKT §5)."""

    # The baseline pools the parties into one: it takes no per-silo budgets (FedKT.fit's keywords).
    def fit(self, parties: Sequence[tuple[np.ndarray, np.ndarray]], public: np.ndarray) -> CentralizedPATE:
        checked, public = check_parties(parties, public)
        pooled = (np.concatenate([X for X, _ in checked]), np.concatenate([y for _, y in checked]))
        return super().fit([pooled], public)


class Solo(ClassifierMixin, BaseEstimator):
    """SOLO baseline: each party trains ``model`` on its own data alone (FedKT §5).

    ``score`` is the parties' mean accuracy; ``predict`` uses party ``party`` (default 0).
    ``progress`` shows a bar over the parties (``None``: on a terminal only). SOLO adds no noise of its own;
    a DP-trained ``model`` draws its DP-SGD noise from a secret source, unless ``noise_seed`` (an int, for
    tests and reproductions) gives each party's model a seed derived from it. ``random_state`` seeds the
    models' initialisations.
    """

    def __init__(self, model: Any, *, party: int = 0, random_state: int | None = None, n_jobs: int = 1,
                 progress: bool | None = None, noise_seed: int | None = None) -> None:
        self.model = model
        self.party = party
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.progress = progress
        self.noise_seed = noise_seed

    def fit(self, parties: Sequence[tuple[np.ndarray, np.ndarray]], public: np.ndarray | None = None) -> Solo:
        check_progress(self.progress)
        check_noise_seed(self.noise_seed)
        noise_seed = effective_noise_seed(self)
        checked = check_party_data(parties)
        self.classes_ = party_classes(checked)
        seeds = as_seed_sequence(self.random_state).spawn(len(checked))
        noise_seeds = [None] * len(checked) if noise_seed is None else NoiseSource.seeded(noise_seed).child_seeds(
            len(checked))
        self.models_ = [
            fit_classifier(
                with_noise_seed(clone(self.model), party_noise_seed), X, np.searchsorted(self.classes_, y),
                n_classes=len(self.classes_), seed=int(seed.generate_state(1)[0]),
            )
            for (X, y), seed, party_noise_seed in progress_bar(
                list(zip(checked, seeds, noise_seeds)), progress=self.progress, desc="SOLO: parties", unit="party"
            )
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
