"""One-run audits of privfed's pipelines: canaries through the real pipeline code, ε lower bound beside the claim.

:func:`empirical_audit` builds, for one pipeline, a function of the sealed coin flips that runs the
pipeline's own party or server step with exactly the included canaries and scores each canary on the
quantity the ledger accounts; :func:`privfed.audit_release` seals the coins, guesses and bounds ε
(Steinke, Nasr, Jagielski 2023). The canary designs (docs/audit.md, "Empirical audits") are:

* **FedKT L1, party level** — m canary *parties*. Canary i's s students predict, on its own block of
  server queries, the runner-up class of the real parties' consistent votes there, and disagree with each
  other on every other query (so consistent voting gives it no vote elsewhere). The real server step
  (:func:`~privfed.pipelines.fedkt.server.fedkt_server_step`) aggregates the real parties' students' and the
  included canaries' predictions and draws the noisy labels; a canary's score is how many of its block's
  noisy labels are its class. Claim: the ledger's party-level ε of the noisy answers one canary can change
  (its block; each query accounted with k = s as the ledger does), beside the whole ledger's ε.
* **FedKT L2, example level** — m canary *examples*, each a public point planted in one party with the label
  that party's teachers vote least for there (from a run on the real parties alone, before any coin), and
  queried: the canary points are the first local queries. A canary's score is how many of its
  party's s partitions' noisy teacher-vote labels (the party-side noisy argmax, what the students learn
  from) on its point are its label (Chadha et al., ICML 2024, score PATE canaries the same way). Claim: the
  ledger's example-level ε (one example may change its party's every answer).
* **PrivateKT, party level** — m canary *clients* of one round, each holding data of one class: class c_i
  when its coin says in, another class c'_i when out (the replace-one relation of local DP). The real party
  step (:func:`~privfed.pipelines.privatekt.steps.privatekt_party_step`; a torch model's clients stacked,
  :func:`~privfed.pipelines.privatekt.steps.batched_party_steps`, as PrivateKT's rounds run them) trains, labels
  the round's K queries and randomizes them; score = #(reported c_i) − #(reported c'_i). Claim: ε of one report.
* **DP-SGD local model, example level** — m canary examples with random labels inserted into a party's
  data (:func:`privfed.audit.empirical.insert_canaries`'s design); the model trains once with DP-SGD; score =
  log-probability of the canary's label (:func:`privfed.audit.empirical.true_label_scores`): a black-box audit of
  the final model. Claim: the model's DP-SGD ε (example level).

``design="mechanism"`` (FedKT-L1's server noisy max, PrivateKT's randomized response:
:mod:`privfed.audit.mechanism_canaries`) and ``design="gradient"`` (white-box Dirac gradient canaries in DP-SGD:
:mod:`privfed.audit.gradient_canaries`) spend each canary on one noisy answer or one gradient; they fix their guess
count in advance by simulating the stated mechanism, which also gives ``expected_lower_bound``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
from sklearn.base import clone

from privfed.accounting import NoiseSource, RandomizedResponse, account, randomized_response_keep_probability
from privfed.accounting._checks import check_int_at_least, check_probability
from privfed.accounting.auditing import AuditResult, audit_release, audit_scores
from privfed.audit.empirical import plant_canaries, true_label_scores
from privfed.audit.mechanism_canaries import CanaryDesign, fedkt_noisy_max_design, privatekt_rr_design
from privfed.audit.released_labels import ReleasedLabels
from privfed.pipelines import FedKT, PrivateKT
from privfed.pipelines.data.party_data import check_parties
from privfed.pipelines.fedkt.secure import (
    SECURE_AGGREGATOR,
    FedKTVoteSum,
    secure_party_outcome,
    skellam_releases,
    skellam_share_variance,
)
from privfed.pipelines.fedkt.server import fedkt_server_step
from privfed.pipelines.fedkt.steps import FedKTVotes, fedkt_noise, query_count
from privfed.pipelines.privatekt.steps import (
    PrivateKTReport,
    batched_party_steps,
    is_torch_classifier,
    privatekt_party_step,
    privatekt_tasks,
)
from privfed.pipelines.protocol.seeds import as_seed_sequence, spawn_seeds
from privfed.pipelines.protocol.voting import consistent_votes

__all__ = ["empirical_audit"]

THREAT_MODELS = {
    "fedkt-l1": ("an adversary who controls whole canary parties (their students' predictions) and sees the "
                 "server's noisy labels, the quantity the ledger accounts (the final model is post-processing)"),
    "fedkt-l2": ("an adversary who plants labelled canary examples in parties, chooses the public queries and "
                 "sees each party's noisy teacher-vote labels, the quantity the ledger accounts (the students "
                 "and the final model are post-processing)"),
    "privatekt": ("an adversary who chooses a client's whole data set (one class or another) and sees its "
                  "randomized report, the quantity the ledger accounts (local DP, replace-one)"),
    "dpsgd": ("a black-box adversary who inserts mislabelled canary examples and sees the final model's "
              "predicted probabilities only, not the DP-SGD iterates the ledger accounts"),
    "fedkt-l1-queries": ("an adversary who controls one party per canary query (its students' predictions) and "
                         "the other parties' votes there, and sees the server's noisy labels: the server's noisy "
                         "max as the ledger accounts it, one answer per canary"),
    "privatekt-reports": ("an adversary who chooses what a canary client's model predicts (one class or "
                          "another) and sees its randomized report: the clients' randomized response, one "
                          "report per canary"),
    "dpsgd-gradient": ("a white-box adversary who inserts gradient canaries of norm C (one coordinate each) and "
                       "sees every privatized gradient, the iterates the ledger accounts"),
}
#: The canary designs ``empirical_audit(design=...)`` offers: whole pipelines, or one mechanism's own queries
#: (:mod:`privfed.audit.mechanism_canaries`), or DP-SGD's gradients (:mod:`privfed.audit.gradient_canaries`).
DESIGN_CHOICES = ("pipeline", "mechanism", "gradient")
#: Simulated runs of the stated mechanism behind ``expected_lower_bound``.
EXPECTED_REPEATS = 5


def _data_independent(report: Any) -> float:
    """The ε that holds whatever the data: a data-dependent ε is no claim an audit can refute."""
    return float(report.epsilon_data_independent if report.data_dependent else report.epsilon)


# --- FedKT L1: canary parties ------------------------------------------------------------------------------
def _crafted_reply(predictions: np.ndarray, model: FedKT) -> FedKTVotes:
    """An adversary's party: its s students' predictions, chosen (gap counts at their worst, s)."""
    s = model.n_partitions
    return FedKTVotes(predictions=predictions.astype(np.int64), n_local_answered=1, n_teachers=int(model.n_teachers),
                      affected_partitions_gap_1=s, affected_partitions_gap_2=s)


def _secure_vote_sum(model: FedKT, replies: list[FedKTVotes], classes: np.ndarray) -> FedKTVoteSum:
    """What secure aggregation hands the server: each party's histogram plus its own Skellam share
    (:func:`~privfed.pipelines.fedkt.secure.secure_party_outcome`, the parties' code), summed."""
    share = skellam_share_variance(model.sigma, len(replies))
    task = SimpleNamespace(noise_scale=share, classes=classes, noise_seed=None, n_partitions=model.n_partitions)
    total = sum(secure_party_outcome(task, SimpleNamespace(votes=reply, students=(), teacher_votes=None,
                                                           teacher_training=None), party=f"party {index}")
                .noisy_votes.noisy_votes for index, reply in enumerate(replies))
    return FedKTVoteSum(vote_sum=np.asarray(total, dtype=np.int64), n_parties=len(replies),
                        n_contributors=len(replies))


def _fedkt_party_release(model: FedKT, parties: list, public: np.ndarray, num_canaries: int,
                         seeds: np.random.SeedSequence) -> tuple[Callable, float, dict[str, Any]]:
    fit_seed, tie_seed, run_seed, server_seeds = seeds.spawn(4)
    fitted = clone(model).set_params(random_state=int(fit_seed.generate_state(1)[0])).fit(parties, public)
    classes, s = fitted.classes_, model.n_partitions
    X_final = public[: query_count(model.query_fraction, len(public))]
    per_canary = len(X_final) // num_canaries
    if per_canary < 1:
        raise ValueError(f"num_canaries must be at most the {len(X_final)} server queries (one query block per "
                         f"canary party), got {num_canaries}")
    real = np.stack([np.stack([student.predict(X_final) for student in students]) for students in fitted.students_])
    votes = consistent_votes(real, len(classes))
    order = np.argsort(votes + 0.5 * np.random.default_rng(tie_seed).random(votes.shape), axis=1)  # ties at random
    top, runner_up = order[:, -1], order[:, -2]
    helpers_needed = (votes[np.arange(len(votes)), top] - votes[np.arange(len(votes)), runner_up]) // s
    # Canary blocks: the queries whose real vote is closest (fewest helper parties to make it a tie) — chosen from
    # the real parties' data only, before any coin is seen.
    blocks = np.argsort(helpers_needed, kind="stable")[: num_canaries * per_canary].reshape(num_canaries, per_canary)
    abstain = np.broadcast_to(np.arange(s)[:, None] % len(classes), (s, len(X_final)))  # never consistent
    helpers = []
    for helper in range(int(helpers_needed[blocks].max(initial=0))):
        rows = blocks.ravel()[helpers_needed[blocks.ravel()] > helper]
        predictions = abstain.copy()
        predictions[:, rows] = runner_up[rows]
        helpers.append(_crafted_reply(predictions, model))
    real_replies = [
        FedKTVotes(predictions=prediction.astype(np.int64), n_local_answered=int(answered),
                   n_teachers=int(min(model.n_teachers, len(y))), affected_partitions_gap_1=s,
                   affected_partitions_gap_2=s)
        for prediction, answered, (_, y) in zip(real, fitted.n_local_queries_answered_, parties)
    ]
    server = clone(model).set_params(final=ReleasedLabels())
    n_parties = len(real_replies) + len(helpers) + num_canaries
    if model.aggregator == SECURE_AGGREGATOR:  # the parties' Skellam shares, summed: the noise the labels carry
        shape = (len(X_final), len(classes))
        every_share = FedKTVoteSum(vote_sum=np.zeros(shape, dtype=np.int64), n_parties=n_parties,
                                   n_contributors=n_parties)
        mechanism = skellam_releases(model, per_canary, every_share)["party"]
    else:
        mechanism = fedkt_noise(model).mechanism(votes[blocks[0]], s, "party")
    claim = _data_independent(account(mechanism, delta=model.delta))
    ledger: dict[str, Any] = {"pure_epsilon": mechanism.pure_epsilon()}

    def release(included: np.ndarray) -> np.ndarray:
        canaries = []
        for block, inside in zip(blocks, included):
            predictions = abstain.copy()
            predictions[:, block] = (runner_up if inside else top)[block]
            canaries.append(_crafted_reply(predictions, model))
        replies: list[FedKTVotes] | FedKTVoteSum = real_replies + helpers + canaries
        if model.aggregator == SECURE_AGGREGATOR:
            replies = _secure_vote_sum(model, replies, classes)
        result = fedkt_server_step(server, replies, classes, public, run_seed, server_seeds)
        ledger["epsilon"] = _data_independent(result.ledger.account(unit="party"))
        labels = np.searchsorted(classes, result.final_model.labels_)
        return (labels[blocks] == runner_up[blocks]).sum(axis=1).astype(float)

    return release, claim, {"queries_per_canary": per_canary, "ledger": ledger, "helper_parties": len(helpers)}


# --- FedKT L2: canary examples -----------------------------------------------------------------------------
def _fedkt_example_release(model: FedKT, parties: list, public: np.ndarray, num_canaries: int,
                           seeds: np.random.SeedSequence) -> tuple[Callable, float, dict[str, Any]]:
    rng = np.random.default_rng(seeds.spawn(1)[0])
    canary_X = public[rng.choice(len(public), size=num_canaries, replace=False)]
    owner = rng.integers(len(parties), size=num_canaries)
    audit_public = np.concatenate([canary_X, public])
    if query_count(model.local_query_fraction, len(audit_public)) < num_canaries:
        raise ValueError(f"num_canaries={num_canaries} canary queries do not fit in the local queries "
                         f"(local_query_fraction={model.local_query_fraction} of {len(audit_public)})")
    # Each canary's label: the class its owner's teachers vote least for on its point without it (a run on the
    # real parties only, before any coin), so that the one vote it can move goes against the others.
    baseline = clone(model).set_params(random_state=int(rng.integers(2**31))).fit(parties, audit_public)
    classes = baseline.classes_
    canary_codes = np.empty(num_canaries, dtype=np.int64)
    for party in range(len(parties)):  # without a budget every local query is answered: the canaries' come first
        votes = baseline.party_votes_[party]  # the party's own teachers' votes (an in-process run holds them)
        mine = np.flatnonzero(owner == party)
        jitter = 0.5 * rng.random((len(mine), len(classes)))  # ties at random
        canary_codes[mine] = np.argmin(votes[:, mine].sum(axis=0) + jitter, axis=1)
    student = model.teacher if model.student is None else model.student
    recording = clone(model).set_params(student=ReleasedLabels(student), random_state=int(rng.integers(2**31)))
    ledger: dict[str, Any] = {}

    def release(included: np.ndarray) -> np.ndarray:
        planted = plant_canaries(parties, canary_X, classes[canary_codes], included=included, owner=owner)
        fitted = recording.fit(planted, audit_public)
        ledger["epsilon"] = _data_independent(fitted.ledger_.account(unit="example"))
        scores = np.zeros(num_canaries)
        for index, (party, code) in enumerate(zip(owner, canary_codes)):
            for student_ in fitted.students_[party]:
                labels = (np.full(fitted.n_local_queries_answered_[party], student_.classes[0])
                          if student_.estimator is None else student_.classes[student_.estimator.labels_])
                scores[index] += index < len(labels) and labels[index] == code
        return scores

    return release, math.nan, {"ledger": ledger}


# --- PrivateKT: canary clients ------------------------------------------------------------------------------
def _privatekt_release(model: PrivateKT, parties: list, public: np.ndarray, num_canaries: int,
                       seeds: np.random.SeedSequence) -> tuple[Callable, float, dict[str, Any]]:
    rng = np.random.default_rng(seeds.spawn(1)[0])
    classes = np.unique(np.concatenate([y for _, y in parties]))
    n_classes, K = len(classes), int(model.queries_per_round)
    keep = randomized_response_keep_probability(model.epsilon_per_round, num_classes=n_classes, labels_per_report=K)
    tasks = privatekt_tasks(queries=public[rng.choice(len(public), size=K, replace=False)], classes=classes,
                            parameters=np.zeros(0, dtype=np.float32), keep_probability=keep,
                            local_epochs=int(model.local_epochs), init_seed=int(rng.integers(2**31)),
                            round_seed=seeds.spawn(1)[0], n_clients=num_canaries,
                            noise_seeds=NoiseSource.for_task(model.noise_seed).child_seeds(num_canaries))
    inside = rng.integers(n_classes, size=num_canaries)
    outside = (inside + rng.integers(1, n_classes, size=num_canaries)) % n_classes
    X_client = parties[0][0]  # a real party's features, relabelled: the client's model learns one class
    mechanism = RandomizedResponse(n_classes, epsilon=float(model.epsilon_per_round), labels_per_report=K, unit="party")
    claim = account(mechanism, delta=model.delta).epsilon
    # A torch model's clients train together in one stacked computation (as PrivateKT's rounds do), a scikit-learn
    # or DP-SGD model's one at a time.
    batched = is_torch_classifier(model.model) and getattr(model.model, "dp", None) is None

    def release(included: np.ndarray) -> np.ndarray:
        held = np.where(included, inside, outside)
        clients = [(X_client, np.full(len(X_client), classes[code])) for code in held]
        if batched:
            reports = batched_party_steps(tasks, clients, model=model.model)
        else:
            reports = [next(message for message in privatekt_party_step(task, X, y, model=model.model,
                                                                        party=f"canary {index}")
                            if isinstance(message, PrivateKTReport))
                       for index, (task, (X, y)) in enumerate(zip(tasks, clients))]
        labels = np.stack([report.labels for report in reports])
        return (labels == inside[:, None]).sum(axis=1) - (labels == outside[:, None]).sum(axis=1).astype(float)

    return release, float(claim), {"queries_per_round": K, "keep_probability": keep,
                                   "ledger": {"pure_epsilon": mechanism.pure_epsilon()}}


# --- DP-SGD local model: canary examples --------------------------------------------------------------------
def _dpsgd_release(model: Any, parties: list, public: np.ndarray, num_canaries: int,
                   seeds: np.random.SeedSequence) -> tuple[Callable, float, dict[str, Any]]:
    rng = np.random.default_rng(seeds.spawn(1)[0])
    X, y = parties[0]
    classes = np.unique(np.concatenate([labels for _, labels in parties]))
    canary_X = public[rng.choice(len(public), size=num_canaries, replace=False)]
    canary_y = classes[rng.integers(len(classes), size=num_canaries)]
    claim: dict[str, Any] = {}

    def release(included: np.ndarray) -> np.ndarray:
        ((X_in, y_in),) = plant_canaries([(X, y)], canary_X, canary_y, included=included,
                                         owner=np.zeros(num_canaries, dtype=np.int64))
        fitted = clone(model).set_params(random_state=int(rng.integers(2**31))).fit(X_in, y_in)
        claim["epsilon"] = account(fitted.dp_mechanism_, delta=model.dp.delta).epsilon
        return true_label_scores(fitted, canary_X, canary_y)

    return release, math.nan, {"ledger": claim}


_AUDITS = {"fedkt-l1": _fedkt_party_release, "fedkt-l2": _fedkt_example_release, "privatekt": _privatekt_release,
           "dpsgd": _dpsgd_release}
_UNITS = {"fedkt-l1": "party", "fedkt-l2": "example", "privatekt": "party", "dpsgd": "example",
          "fedkt-l1-queries": "party", "privatekt-reports": "party", "dpsgd-gradient": "example"}


def _canary_design(design: str, estimator: Any, parties: list, public: np.ndarray, num_canaries: int,
                   seeds: np.random.SeedSequence, *, delta: float, confidence: float) -> CanaryDesign:
    """The canaries of ``design``: a pipeline design of :data:`_AUDITS`, or a mechanism-level or gradient one."""
    if design in _AUDITS:
        return CanaryDesign(*_AUDITS[design](estimator, parties, public, num_canaries, seeds))
    rng = np.random.default_rng(seeds)
    if design == "dpsgd-gradient":
        from privfed.audit.gradient_canaries import dpsgd_gradient_design  # imports torch: only for this design

        return dpsgd_gradient_design(estimator, parties, num_canaries, delta=delta, confidence=confidence, rng=rng)
    classes = np.unique(np.concatenate([np.asarray(y) for _, y in parties]))
    build = fedkt_noisy_max_design if design == "fedkt-l1-queries" else privatekt_rr_design
    return build(estimator, classes, num_canaries, delta=delta, confidence=confidence, rng=rng)


def _chosen_design(estimator: Any, design: str) -> str:
    """The canary design for ``estimator`` under ``design`` ("pipeline", "mechanism" or "gradient")."""
    if design not in DESIGN_CHOICES:
        raise ValueError(f"design must be one of {list(DESIGN_CHOICES)}, got {design!r}")
    pipeline = _design(estimator)
    if design == "pipeline":
        return pipeline
    chosen = {("mechanism", "fedkt-l1"): "fedkt-l1-queries", ("mechanism", "privatekt"): "privatekt-reports",
              ("gradient", "dpsgd"): "dpsgd-gradient"}.get((design, pipeline))
    if chosen is None:
        raise ValueError(f"design={design!r} audits FedKT-L1's server noisy max (aggregator 'laplace' or 'gaussian') "
                         "or PrivateKT's randomized response ('mechanism'), or a TorchClassifier's DP-SGD "
                         f"('gradient'); got {type(estimator).__name__} ({pipeline})")
    if chosen == "fedkt-l1-queries" and estimator.aggregator == SECURE_AGGREGATOR:
        raise ValueError("design='mechanism' audits the server's noisy max: aggregator 'laplace' or 'gaussian', got "
                         f"{estimator.aggregator!r} (its noise is the parties' Skellam shares: design='pipeline')")
    return chosen


def stated_mechanism_bounds(canaries: CanaryDesign, num_canaries: int, *, claim: float, delta: float,
                            confidence: float, rng: np.random.Generator, repeats: int) -> list[float]:
    """The audit's lower bound on ``repeats`` simulated runs of the *stated* mechanism (numpy's noise in place of
    privfed's noise code) on the same canary design, claim, guess count and confidence: what a correct
    implementation shows. Needs a design with a ``stated`` simulation."""
    bounds = []
    for _ in range(repeats):
        included = rng.random(num_canaries) < 0.5
        bounds.append(audit_scores(canaries.stated(included, rng), included, claimed_epsilon=claim, delta=delta,
                                   confidence=confidence, num_guesses=canaries.num_guesses, random_state=rng,
                                   guess_in_only=canaries.guess_in_only).epsilon_lower)
    return bounds


def _expected_bounds(canaries: CanaryDesign, num_canaries: int, *, claim: float, delta: float, confidence: float,
                     seed: int, repeats: int) -> tuple[float, float]:
    """Mean and standard deviation of the bound of the stated mechanism on the same design (NaN without one)."""
    if canaries.stated is None or repeats < 1:
        return math.nan, math.nan
    bounds = stated_mechanism_bounds(canaries, num_canaries, claim=claim, delta=delta, confidence=confidence,
                                     rng=np.random.default_rng(seed), repeats=repeats)
    return float(np.mean(bounds)), float(np.std(bounds, ddof=1)) if repeats > 1 else math.nan


def _design(estimator: Any) -> str:
    if isinstance(estimator, PrivateKT):
        return "privatekt"
    if isinstance(estimator, FedKT):
        if estimator.privacy not in ("L1", "L2"):
            raise ValueError(f"FedKT privacy={estimator.privacy!r} adds no noise (ε = ∞): there is no claim to audit; "
                             "use privacy='L1' or 'L2'")
        if estimator.aggregator == "confident-gnmax" or estimator.target_epsilon is not None:
            raise ValueError("the FedKT audit needs every query answered: aggregator='laplace' or 'gaussian' and "
                             f"target_epsilon=None, got aggregator={estimator.aggregator!r}, "
                             f"target_epsilon={estimator.target_epsilon!r}")
        if estimator.privacy == "L1" and (not estimator.consistent_voting or estimator.n_partitions < 2):
            raise ValueError("the FedKT-L1 party audit needs consistent_voting=True and n_partitions >= 2 (a canary "
                             "party abstains outside its queries by disagreeing with itself)")
        return "fedkt-l1" if estimator.privacy == "L1" else "fedkt-l2"
    if getattr(estimator, "dp", None) is not None and hasattr(estimator, "fit_soft"):
        return "dpsgd"
    raise TypeError("estimator must be a FedKT (privacy 'L1' or 'L2'), a PrivateKT or a TorchClassifier with dp= "
                    f"(DP-SGD), got {type(estimator).__name__}")


def empirical_audit(estimator: Any, parties: Sequence[tuple[np.ndarray, np.ndarray]], X_public: np.ndarray, *,
                    num_canaries: int, confidence: float = 0.95, random_state: Any = None,
                    design: str = "pipeline", expected_repeats: int = EXPECTED_REPEATS) -> AuditResult:
    """An empirical ε lower bound for a pipeline, from one run with canaries, beside its claimed ε.

    Parameters
    ----------
    estimator : FedKT, PrivateKT or TorchClassifier
        Unfitted, with the settings under audit: FedKT with ``privacy="L1"`` (canary parties, party level) or
        ``"L2"`` (canary examples, example level); PrivateKT (canary clients' randomized reports, party level);
        a ``TorchClassifier(dp=...)`` (a party's DP-SGD local model: canary examples, black box).
    parties : sequence of (X, y)
        The real parties' data, as for ``fit``.
    X_public : array
        The unlabelled public set, as for ``fit`` (canary queries and canary points are drawn from it).
    num_canaries : int
        m ≥ 2; each in or out by a sealed fair coin.
    confidence : float, default=0.95
    random_state : int or None
    design : {"pipeline", "mechanism", "gradient"}, default="pipeline"
        ``"pipeline"``: the canaries above, through a whole fit. ``"mechanism"``: one canary per noisy answer of
        FedKT-L1's server noisy max or of PrivateKT's randomized response, m of them through the pipeline's own
        noise step in one call (:mod:`privfed.audit.mechanism_canaries`; the claim is one answer's ε). ``"gradient"``:
        white-box Dirac gradient canaries in one DP-SGD training run of a ``TorchClassifier(dp=...)``
        (:mod:`privfed.audit.gradient_canaries`; the claim is the run's DP-SGD ε). These two fix their guess count and
        free parameters in advance by simulating the stated mechanism.
    expected_repeats : int, default=5
        Simulated runs of the stated mechanism on the same design behind ``expected_lower_bound`` (0: none; the
        "pipeline" designs have no simulator and give NaN).

    Returns
    -------
    AuditResult
        ``claimed_epsilon`` is the ledger's ε for what one canary can change (module docstring), at the
        estimator's δ, data-independent; ``details["ledger_epsilon"]`` the whole run's ε for the same unit;
        ``details["seconds"]`` the audit's wall time. A pure ε-DP canary release (randomized response, the
        Laplace noisy max) is audited at δ = 0 against its pure ε (``details["claim_at_delta"]``: the claim at the
        estimator's δ). ``max_lower_bound``/``can_refute``: whether this design could refute the claim at all.
        ``violation`` refutes the claim at ``confidence``; no violation is not a pass (docs/audit.md says how
        loose each design is). FedKT with ``aggregator="skellam"`` is audited through the parties' Skellam shares
        and their secure sum, against the Skellam release's claim. ``gdp_mu_lower``/``gdp_epsilon_lower``: the f-DP
        one-run estimate on the same guesses (:class:`~privfed.accounting.auditing.AuditResult`; its ε assumes a
        Gaussian trade-off curve and decides no violation).
    """
    design = _chosen_design(estimator, design)
    num_canaries = check_int_at_least("num_canaries", num_canaries, 2)
    check_probability("confidence", confidence)
    expected_repeats = check_int_at_least("expected_repeats", expected_repeats, 0)
    if design in ("dpsgd", "dpsgd-gradient"):
        if not parties:
            raise ValueError("parties must hold at least one (X, y) pair")
        X_public = np.asarray(X_public)
    else:
        parties, X_public = check_parties(parties, X_public)
    if design in ("fedkt-l1", "fedkt-l2", "dpsgd") and num_canaries > len(X_public):  # drawn from the public set
        raise ValueError(f"num_canaries must be at most the public set's size {len(X_public)}, got {num_canaries}")
    start = time.perf_counter()
    seeds = as_seed_sequence(random_state)
    build_seeds, audit_seed = spawn_seeds(seeds, 2)
    delta = float(estimator.dp.delta if design in ("dpsgd", "dpsgd-gradient") else estimator.delta)
    canaries = _canary_design(design, estimator, list(parties), X_public, num_canaries,
                              np.random.SeedSequence(int(build_seeds)), delta=delta, confidence=confidence)
    release, claim, details = canaries.release, canaries.claim, canaries.details
    # A pure ε-DP canary release (randomized response, the Laplace noisy max) is audited as such: δ = 0 against its
    # pure ε (a δ > 0 only weakens the bound; the (ε, δ) claim at the estimator's δ stays in details).
    pure = details.get("ledger", {}).get("pure_epsilon")
    pure = None if pure is None or not math.isfinite(pure) else float(pure)
    claim_at_delta = claim
    if pure is not None:
        details["claim_at_delta"] = {"epsilon": claim, "delta": delta}
        claim, delta = pure, 0.0
    # The FedKT-L2 and DP-SGD claims come from the audited run's own ledger: the run comes first, the verdict after.
    result = audit_release(release, num_canaries, claimed_epsilon=0.0 if math.isnan(claim) else claim, delta=delta,
                           confidence=confidence, num_guesses=canaries.num_guesses, random_state=int(audit_seed),
                           unit=_UNITS[design], guess_in_only=canaries.guess_in_only)
    ledger = details.pop("ledger", {})
    ledger_epsilon = ledger.get("epsilon", claim_at_delta)
    claimed = ledger_epsilon if math.isnan(claim) else claim
    expected, expected_sd = _expected_bounds(canaries, num_canaries, claim=claimed, delta=delta, confidence=confidence,
                                             seed=int(audit_seed) + 1, repeats=expected_repeats)
    return dataclasses.replace(
        result, claimed_epsilon=claimed, violation=result.epsilon_lower > claimed, threat_model=THREAT_MODELS[design],
        expected_lower_bound=expected, expected_lower_bound_sd=expected_sd,

        details={"design": design, "ledger_epsilon": ledger_epsilon, "seconds": time.perf_counter() - start,
                 **details},
    )
