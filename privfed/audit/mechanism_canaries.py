"""Mechanism-level canaries: many one-query canaries through a pipeline's own noise step, in one run.

A pipeline-level canary (a whole party, a client's data) spends one canary on many queries and a training
run; the audit's bound then stays far below the claim. A mechanism-level canary is one neighbour change of
one noisy answer, built so that the answer is as informative as the claim allows, and m of them (tens of
thousands) go through the pipeline's own noise code in one call:

* **FedKT-L1's server noisy max** (:func:`fedkt_noisy_max_design`): canary i is one party (its s students
  agree, so it moves s votes, the k = s of the party-level ledger) on its own server query. Filler parties give
  the query a leader a_i and a runner-up b_i behind it by a gap g (chosen in advance, below). Half the canaries
  vote b_i when in and a_i when out (b_i winning is then evidence of *in*), the other half the reverse (b_i
  winning is evidence of *out*). Only the rare b_i wins are informative, and there the likelihood ratio of
  the Laplace noisy max approaches e^{2sγ}, the ledger's ε per answer. The queries run through
  :func:`~privfed.pipelines.fedkt.server.fedkt_server_step` (consistent voting, the server's noise source,
  the noisy max); score = ±1 when b_i wins, else 0.
* **PrivateKT's randomized response** (:func:`privatekt_rr_design`): canary i is one client whose model
  labels all K queries c_i when in and c'_i when out (the replace-one relation of local DP); its report is
  randomized by :func:`~privfed.pipelines.privatekt.steps.perturb_labels` with the keep probability the
  pipeline computes; score = #(c_i) − #(c'_i). The extreme scores (all K labels c_i, or all c'_i) carry
  likelihood ratio exactly e^ε.

Each design comes with its *stated* mechanism: the same canary layout run through an ideal implementation of
the ledger's mechanism (numpy Laplace/Gaussian noisy max, K-ary randomized response) with the ledger's
parameters. The audit uses it twice, always with randomness of its own and never the sealed coins: to choose
the design's free parameters and the number of guesses before the run (no search over the observed scores,
so no confidence is split), and to report the bound the stated mechanism is expected to give
(:func:`privfed.audit.empirical_pipelines.empirical_audit`'s ``expected_lower_bound``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privfed.accounting import NoiseSource, RandomizedResponse, account, randomized_response_keep_probability
from privfed.accounting.auditing import epsilon_lower_bound, max_lower_bound
from privfed.pipelines.fedkt.server import fedkt_server_step
from privfed.pipelines.fedkt.steps import FedKTVotes, fedkt_noise
from privfed.pipelines.privatekt.steps import perturb_labels

__all__ = ["CanaryDesign", "choose_guesses", "fedkt_noisy_max_design", "privatekt_rr_design"]

#: Guess counts considered when a design is tuned, as fractions of the canaries (chosen before the run).
TUNING_FRACTIONS: tuple[float, ...] = (1 / 512, 1 / 256, 1 / 128, 1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)
#: Simulated runs of the stated mechanism per candidate when tuning.
TUNING_REPEATS = 4
#: Fewest guesses a tuned design makes, or m/8 if fewer (fewer: the best of many noisy simulated bounds is mostly
#: luck).
MIN_TUNED_GUESSES = 250


@dataclass
class CanaryDesign:
    """One audit's canaries: ``release(included)`` runs the code under audit and returns one score per canary;
    ``claim`` is the ledger's ε for what one canary can change (NaN: known only after the run, in
    ``details["ledger"]["epsilon"]``); ``stated(included, rng)`` the same scores from the stated mechanism (None:
    no simulator); ``num_guesses`` the guess count fixed in advance (None: the default fractions);
    ``guess_in_only``: every guess is *in* (:func:`privfed.accounting.auditing.audit_scores`)."""

    release: Callable[[np.ndarray], np.ndarray]
    claim: float
    details: dict[str, Any] = field(default_factory=dict)
    stated: Callable[[np.ndarray, np.random.Generator], np.ndarray] | None = None
    num_guesses: int | None = None
    guess_in_only: bool = False


def _simulated_bounds(stated, num_canaries: int, counts: list[int], *, delta: float, confidence: float,
                      rng: np.random.Generator, repeats: int, guess_in_only: bool = False) -> np.ndarray:
    """Mean ε lower bound of the stated mechanism at each guess count (each audited at full confidence)."""
    bounds = np.zeros(len(counts))
    for _ in range(repeats):
        included = rng.random(num_canaries) < 0.5
        scores = stated(included, rng)
        # count_correct_guesses for every r from one sort: ascending score, random among ties
        ranked = included[np.lexsort((rng.random(num_canaries), scores))]
        right_in = np.concatenate([[0], np.cumsum(ranked[::-1])])  # right among the k highest, k = 0..m
        right_out = np.concatenate([[0], np.cumsum(~ranked)])  # right among the k lowest
        for index, r in enumerate(counts):
            guesses_in = r if guess_in_only else (r + 1) // 2
            correct = int(right_in[guesses_in] + right_out[r - guesses_in])
            bounds[index] += epsilon_lower_bound(correct, r, num_canaries, delta=delta,
                                                 confidence=confidence) / repeats
    return bounds


def choose_guesses(stated, num_canaries: int, *, delta: float, confidence: float, rng: np.random.Generator,
                   claim: float = 0.0, repeats: int = TUNING_REPEATS, guess_in_only: bool = False) -> tuple[int, float]:
    """The guess count r (among :data:`TUNING_FRACTIONS` · m) with the largest simulated bound, and that bound.

    Only the counts whose every-guess-right bound exceeds ``claim`` are considered (when any does), so that the audit
    can refute the claim at all. Runs the *stated* mechanism only, with ``rng``'s randomness: the choice is made
    before the audited run, so the audit uses r at its full confidence."""
    fewest = max(1, min(MIN_TUNED_GUESSES, num_canaries // 8))
    counts = sorted({max(fewest, round(fraction * num_canaries)) for fraction in TUNING_FRACTIONS})
    refuting = [r for r in counts if max_lower_bound(num_canaries, delta=delta, confidence=confidence,
                                                     num_guesses=r) > claim]
    counts = refuting or counts
    # The simulated bounds are compared at δ = 0 (closed form, fast): δ ≤ 1/m hardly moves the best count.
    bounds = _simulated_bounds(stated, num_canaries, counts, delta=0.0, confidence=confidence, rng=rng,
                               repeats=repeats, guess_in_only=guess_in_only)
    best = int(np.argmax(bounds))
    return counts[best], float(bounds[best])


def _audit_delta(mechanism: Any, delta: float) -> float:
    """The δ the audit will use: 0 for a pure ε-DP release (audited against its pure ε), else the claim's δ."""
    pure = mechanism.pure_epsilon()  # None: no pure ε (the Gaussian noisy max)
    return 0.0 if pure is not None and np.isfinite(pure) else delta


# --- FedKT-L1: the server's noisy max on constructed vote histograms ------------------------------------------
def _abstaining(s: int, n_classes: int, queries: int) -> np.ndarray:
    """Predictions of s students that disagree on every query: under consistent voting, no vote."""
    return np.broadcast_to(np.arange(s)[:, None] % n_classes, (s, queries)).copy()


def fedkt_noisy_max_design(model: Any, classes: np.ndarray, num_canaries: int, *, delta: float, confidence: float,
                           rng: np.random.Generator) -> CanaryDesign:
    """Canary parties on their own server queries, through the server step (module docstring).

    The gap g (in parties) between leader and runner-up and the guess count are chosen by simulating the stated
    noisy max (Laplace(1/γ) or N(0, σ²) on each count) on this layout, before the run.
    """
    s, n_classes, m = int(model.n_partitions), len(classes), num_canaries
    laplace = model.aggregator == "laplace"
    scale = 1.0 / float(model.gamma) if laplace else float(model.sigma)
    leader = rng.integers(n_classes, size=m)
    runner_up = (leader + rng.integers(1, n_classes, size=m)) % n_classes
    orientation = np.where(rng.random(m) < 0.5, 1.0, -1.0)  # +1: in votes the runner-up; −1: in votes the leader
    base = int(np.ceil(6.0 * scale / s))  # the runner-up's parties: it beats the empty classes all but always
    rows = np.arange(m)

    def histogram(included: np.ndarray, gap: int) -> np.ndarray:
        votes = np.zeros((m, n_classes))
        votes[rows, runner_up] = base * s
        votes[rows, leader] = (base + gap) * s
        to_runner_up = included == (orientation > 0)
        votes[rows, np.where(to_runner_up, runner_up, leader)] += s
        return votes

    def scores(labels: np.ndarray) -> np.ndarray:
        return np.where(labels == runner_up, orientation, 0.0)

    def stated_at(gap: int):
        def stated(included: np.ndarray, generator: np.random.Generator) -> np.ndarray:
            votes = histogram(included, gap)
            noise = generator.laplace(0.0, scale, votes.shape) if laplace else generator.normal(0.0, scale, votes.shape)
            return scores(np.argmax(votes + noise, axis=1))
        return stated

    mechanism = fedkt_noise(model).mechanism(histogram(np.zeros(m, dtype=bool), 0)[:1], s, "party")
    claim = float(account(mechanism, delta=delta).epsilon)
    tried: dict[int, tuple[float, int]] = {}

    def best(gaps) -> int:  # the gap (of those tried so far) with the largest simulated bound; smaller on ties
        for gap in gaps:
            if gap not in tried and gap >= 0:
                tried[gap] = choose_guesses(stated_at(gap), m, delta=_audit_delta(mechanism, delta),
                                            confidence=confidence, rng=rng)[::-1]
        return max(tried, key=lambda gap: (tried[gap][0], -gap))

    coarse = best(range(0, int(np.ceil(6.0 * scale / s)) + 1, 2))  # every other gap, then its neighbours
    gap = best((coarse - 1, coarse + 1))
    num_guesses = tried[gap][1]
    queries = np.zeros((m, 1))  # the final model never trains (it only records the labels): any public rows do
    fillers = []
    for party in range(2 * base + gap):  # filler parties: `base + gap` vote the leader, `base` the runner-up
        predictions = _abstaining(s, n_classes, m)
        predictions[:, :] = np.where(party < base + gap, leader, runner_up)[None, :]
        fillers.append(predictions)
    server = model.__class__(**{**model.get_params(deep=False), "query_fraction": 1.0})

    def release(included: np.ndarray) -> np.ndarray:
        from privfed.audit.released_labels import ReleasedLabels  # imports scikit-learn: only when run

        canary = np.broadcast_to(np.where(included == (orientation > 0), runner_up, leader), (s, m))
        replies = [FedKTVotes(predictions=np.asarray(p, dtype=np.int64), n_local_answered=1, n_teachers=int(
            model.n_teachers), affected_partitions_gap_1=s, affected_partitions_gap_2=s) for p in [*fillers, canary]]
        fit = fedkt_server_step(server.set_params(final=ReleasedLabels()), replies, np.asarray(classes), queries,
                                np.random.SeedSequence(int(rng.integers(2**63))),
                                np.random.SeedSequence(int(rng.integers(2**63))))
        return scores(np.searchsorted(classes, fit.final_model.labels_))

    details = {"queries": m, "gap_parties": gap, "runner_up_parties": base, "filler_parties": len(fillers),
               "ledger": {"pure_epsilon": mechanism.pure_epsilon()}}
    return CanaryDesign(release, claim, details, stated_at(gap), num_guesses)


# --- PrivateKT: clients' randomized response on constructed predictions -----------------------------------------
def privatekt_rr_design(model: Any, classes: np.ndarray, num_canaries: int, *, delta: float, confidence: float,
                        rng: np.random.Generator) -> CanaryDesign:
    """Canary clients' reports through :func:`~privfed.pipelines.privatekt.steps.perturb_labels` (module docstring)."""
    n_classes, K, m = len(classes), int(model.queries_per_round), num_canaries
    keep = randomized_response_keep_probability(model.epsilon_per_round, num_classes=n_classes, labels_per_report=K)
    inside = rng.integers(n_classes, size=m)
    outside = (inside + rng.integers(1, n_classes, size=m)) % n_classes

    def scores(labels: np.ndarray) -> np.ndarray:
        return ((labels == inside[:, None]).sum(axis=1) - (labels == outside[:, None]).sum(axis=1)).astype(float)

    def predictions(included: np.ndarray) -> np.ndarray:
        return np.repeat(np.where(included, inside, outside)[:, None], K, axis=1)

    def stated(included: np.ndarray, generator: np.random.Generator) -> np.ndarray:
        labels = predictions(included)
        kept = generator.random(labels.shape) < keep
        return scores(np.where(kept, labels, generator.integers(0, n_classes, size=labels.shape)))

    def release(included: np.ndarray) -> np.ndarray:
        return scores(perturb_labels(predictions(included), keep_probability=keep, num_classes=n_classes,
                                     rng=NoiseSource.secret().generator))

    mechanism = RandomizedResponse(n_classes, epsilon=float(model.epsilon_per_round), labels_per_report=K, unit="party")
    num_guesses, _ = choose_guesses(stated, m, delta=_audit_delta(mechanism, delta), confidence=confidence, rng=rng)
    return CanaryDesign(release, float(account(mechanism, delta=delta).epsilon),
                        {"queries_per_round": K, "keep_probability": keep,
                         "ledger": {"pure_epsilon": mechanism.pure_epsilon()}}, stated, num_guesses)
