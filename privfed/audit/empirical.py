"""Empirical lower bounds on ε: membership inference with confidence intervals, and one-run canary audits.

An (ε, δ)-DP training algorithm bounds every membership test on its output:
for any decision rule, TPR ≤ e^ε·FPR + δ and, symmetrically,
TNR ≤ e^ε·FNR + δ (Kairouz, Oh, Viswanath 2015, Thm 2.1; the auditing argument of
Jagielski, Ullman, Oprea 2020). Turning an observed attack into a lower bound
on ε therefore needs an *upper* confidence bound on the FPR and a *lower* one on
the TPR:

    ε ≥ log((TPR_lower − δ) / FPR_upper).

Two tools here:

* :func:`membership_epsilon_lower_bound` — a loss/confidence-threshold attack on
  labelled member and non-member samples, with Clopper–Pearson intervals. The
  threshold is chosen on one half of the samples and evaluated on the other, so
  the reported bound is an honest 95% statement (no search over thresholds on the
  evaluation data).
* :func:`one_run_epsilon_lower_bound` and :func:`one_run_audit` — the one-run
  audit of Steinke, Nasr and Jagielski, "Privacy Auditing with One (1) Training
  Run", NeurIPS 2023: m canaries each included independently with probability ½,
  one training run, r guesses of which v are correct. Theorem 3.1 there bounds
  the number of correct guesses of an (ε, δ)-DP algorithm; inverting it gives the
  ε lower bound. :func:`insert_canaries` and :func:`true_label_scores` connect it
  to privfed's pipelines (one party-side insertion, one fit).

Both bounds are *lower* bounds that hold with probability ≥ the stated confidence
over the audit's own randomness; they say nothing about an upper bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from privfed.accounting._checks import check_int_at_least, check_probability
from privfed.accounting.auditing import count_correct_guesses, epsilon_lower_bound

__all__ = [
    "MembershipBound",
    "OneRunBound",
    "clopper_pearson",
    "insert_canaries",
    "membership_epsilon_lower_bound",
    "one_run_audit",
    "one_run_epsilon_lower_bound",
    "plant_canaries",
    "true_label_scores",
]

#: The two tests: flag *member* when the score is ≥ t (TPR ≤ e^ε·FPR + δ), or flag *non-member* when
#: it is < t (TNR ≤ e^ε·FNR + δ). Both hold for an (ε, δ)-DP algorithm, by the symmetry of the definition.
DIRECTIONS: tuple[str, ...] = ("members-above", "non-members-below")
#: Smallest probability used in log-likelihood scores (a model may give a label probability 0).
_PROBABILITY_FLOOR = 1e-12
#: Fewest samples per group for a membership bound: below this the intervals are too wide to say anything.
MIN_SAMPLES = 20


def clopper_pearson(successes: int, trials: int, *, confidence: float = 0.95) -> tuple[float, float]:
    """Exact two-sided Clopper–Pearson interval for a binomial proportion.

    Each end is a one-sided bound at level (1 + confidence)/2:
    lower = Beta⁻¹((1 − c)/2; k, n − k + 1), upper = Beta⁻¹((1 + c)/2; k + 1, n − k),
    with lower = 0 when k = 0 and upper = 1 when k = n (Clopper & Pearson 1934).
    """
    trials = check_int_at_least("trials", trials, 1)
    if not isinstance(successes, (int, np.integer)) or not 0 <= successes <= trials:
        raise ValueError(f"successes must be an integer in [0, trials={trials}], got {successes!r}")
    confidence = check_probability("confidence", confidence)
    tail = (1.0 - confidence) / 2.0
    lower = 0.0 if successes == 0 else float(stats.beta.ppf(tail, successes, trials - successes + 1))
    upper = 1.0 if successes == trials else float(stats.beta.ppf(1.0 - tail, successes + 1, trials - successes))
    return lower, upper


def _epsilon_from_rates(tpr_lower: float, fpr_upper: float, delta: float) -> float:
    """log((TPR_lower − δ)/FPR_upper), floored at 0 (a negative value says nothing)."""
    if tpr_lower <= delta:
        return 0.0
    if fpr_upper <= 0.0:
        return math.inf
    return max(0.0, math.log((tpr_lower - delta) / fpr_upper))


@dataclass(frozen=True)
class MembershipBound:
    """The result of :func:`membership_epsilon_lower_bound`.

    ``epsilon_lower`` holds with probability ≥ ``confidence`` (over the choice of
    the samples and of the split). ``direction`` is ``"members-above"`` when the
    attack says *member* for scores ≥ ``threshold`` (``tpr``/``fpr`` as usual), or
    ``"non-members-below"`` when it says *non-member* for scores < ``threshold``
    (then ``tpr`` holds the TNR and ``fpr`` the FNR, which play the same roles in
    TNR ≤ e^ε·FNR + δ). Rates and intervals are on the evaluation half.
    """

    epsilon_lower: float
    delta: float
    confidence: float
    threshold: float
    direction: str
    tpr: float
    fpr: float
    tpr_interval: tuple[float, float]
    fpr_interval: tuple[float, float]
    members_evaluated: int
    non_members_evaluated: int

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def _flag_counts(member_scores: np.ndarray, non_member_scores: np.ndarray, thresholds: np.ndarray,
                 direction: str) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(hits in the numerator group, hits in the other group, sizes of both) at each threshold.

    ``"members-above"``: the event score ≥ t, numerator members (TPR against FPR).
    ``"non-members-below"``: the event score < t, numerator non-members (TNR against FNR).
    """
    members, non_members = np.sort(member_scores), np.sort(non_member_scores)
    members_below = np.searchsorted(members, thresholds, side="left")
    non_members_below = np.searchsorted(non_members, thresholds, side="left")
    if direction == "members-above":
        return len(members) - members_below, len(non_members) - non_members_below, len(members), len(non_members)
    return non_members_below, members_below, len(non_members), len(members)


def _cp_lower(successes: np.ndarray, trials: int, tail: float) -> np.ndarray:
    successes = np.asarray(successes)
    safe = np.maximum(successes, 1)
    return np.where(successes == 0, 0.0, stats.beta.ppf(tail, safe, trials - safe + 1))


def _cp_upper(successes: np.ndarray, trials: int, tail: float) -> np.ndarray:
    successes = np.asarray(successes)
    safe = np.minimum(successes, trials - 1)
    return np.where(successes == trials, 1.0, stats.beta.ppf(1.0 - tail, safe + 1, trials - safe))


def _bounds(member_scores, non_member_scores, thresholds, direction, delta, confidence) -> np.ndarray:
    """The Clopper–Pearson ε lower bound of the test at each threshold (vectorised)."""
    true_hits, false_hits, positives, negatives = _flag_counts(member_scores, non_member_scores, thresholds, direction)
    tail = (1.0 - confidence) / 2.0
    tpr_lower, fpr_upper = _cp_lower(true_hits, positives, tail), _cp_upper(false_hits, negatives, tail)
    with np.errstate(divide="ignore", invalid="ignore"):
        epsilon = np.log(np.maximum(tpr_lower - delta, 0.0) / fpr_upper)
    return np.where(tpr_lower > delta, np.maximum(epsilon, 0.0), 0.0)


def membership_epsilon_lower_bound(
    member_scores: Sequence[float] | np.ndarray,
    non_member_scores: Sequence[float] | np.ndarray,
    *,
    delta: float,
    confidence: float = 0.95,
    random_state: int | None = 0,
) -> MembershipBound:
    """Empirical ε lower bound of a score-threshold membership-inference attack.

    Parameters
    ----------
    member_scores, non_member_scores:
        Attack scores (higher = more likely a member; e.g. the log-probability the
        model gives the true label, :func:`true_label_scores`) of samples that were
        and were not in the training data, drawn from the same distribution.
    delta:
        The δ of the claim under test, in [0, 1).
    confidence:
        Joint confidence of the bound (default 0.95).
    random_state:
        Seed of the split into selection and evaluation halves.

    Returns
    -------
    MembershipBound

    Notes
    -----
    1. Each group is split at random into a *selection* half and an *evaluation*
       half. 2. On the selection half, every observed score is tried as a threshold
       in both tests (TPR against FPR for "score ≥ t means member", TNR against FNR
       for "score < t means non-member"), and the one with the largest
       Clopper–Pearson bound is kept (ties: the largest rate gap). 3. On the evaluation
       half, only that test is run: with the two-sided ``confidence`` intervals
       of its TPR and FPR (each end a one-sided bound at (1 + confidence)/2, so both
       hold jointly with probability ≥ ``confidence`` by the union bound),
       ε_lower = max(0, log((TPR_lower − δ)/FPR_upper)). Because the threshold never
       saw the evaluation half, no correction for the search is needed; the price is
       half the samples.
    """
    members = _scores("member_scores", member_scores)
    non_members = _scores("non_member_scores", non_member_scores)
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    confidence = check_probability("confidence", confidence)
    rng = np.random.default_rng(random_state)
    members, non_members = rng.permutation(members), rng.permutation(non_members)
    select_members, eval_members = members[: len(members) // 2], members[len(members) // 2:]
    select_non, eval_non = non_members[: len(non_members) // 2], non_members[len(non_members) // 2:]

    thresholds = np.unique(np.concatenate([select_members, select_non]))
    candidates = []
    for direction in DIRECTIONS:
        true_hits, false_hits, positives, negatives = _flag_counts(select_members, select_non, thresholds, direction)
        gap = true_hits / positives - false_hits / negatives  # tie-break among equal bounds (often all 0)
        bounds = _bounds(select_members, select_non, thresholds, direction, delta, confidence)
        best = int(np.lexsort((-gap, -bounds))[0])
        candidates.append((bounds[best], gap[best], float(thresholds[best]), direction))
    _, _, threshold, direction = max(candidates)
    true_hits, false_hits, positives, negatives = _flag_counts(
        eval_members, eval_non, np.array([threshold]), direction)
    tpr_interval = clopper_pearson(int(true_hits[0]), positives, confidence=confidence)
    fpr_interval = clopper_pearson(int(false_hits[0]), negatives, confidence=confidence)
    return MembershipBound(
        epsilon_lower=_epsilon_from_rates(tpr_interval[0], fpr_interval[1], delta), delta=float(delta),
        confidence=confidence, threshold=threshold, direction=direction,
        tpr=int(true_hits[0]) / positives, fpr=int(false_hits[0]) / negatives,
        tpr_interval=tpr_interval, fpr_interval=fpr_interval,
        members_evaluated=len(eval_members), non_members_evaluated=len(eval_non),
    )


def _scores(name: str, values: object) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or len(array) < MIN_SAMPLES:
        raise ValueError(f"{name} must be a 1-D array of at least {MIN_SAMPLES} scores, got shape {array.shape}")
    if np.isnan(array).any():
        raise ValueError(f"{name} must not contain NaN")
    return array


def true_label_scores(model: Any, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """log p(y | x) under ``model``: the negative cross-entropy loss, the standard attack score.

    ``model`` needs ``predict_proba`` and ``classes_`` (scikit-learn, xgboost's
    ``XGBClassifier``, privfed's pipelines and ``TorchClassifier``), or is a
    ``torch.nn.Module`` returning logits (classes 0..C−1). A label the model does
    not know gets probability 0 (score log 1e-12).
    """
    X, y = np.asarray(X), np.asarray(y)
    if len(X) != len(y):
        raise ValueError(f"X and y must have the same length, got {len(X)} and {len(y)}")
    if hasattr(model, "predict_proba"):
        proba = np.asarray(model.predict_proba(X), dtype=float)
        classes = np.asarray(getattr(model, "classes_", np.arange(proba.shape[1])))
    else:
        import torch

        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must have predict_proba or be a torch.nn.Module, got {type(model).__name__}")
        with torch.no_grad():
            proba = torch.softmax(model(torch.as_tensor(X, dtype=torch.float32)), dim=1).numpy().astype(float)
        classes = np.arange(proba.shape[1])
    column = np.searchsorted(classes, y)
    known = (column < len(classes)) & (classes[np.minimum(column, len(classes) - 1)] == y)
    picked = np.where(known, proba[np.arange(len(y)), np.minimum(column, len(classes) - 1)], 0.0)
    return np.log(np.maximum(picked, _PROBABILITY_FLOOR))


# --- one-run auditing (Steinke, Nasr, Jagielski 2023) -------------------------------------------------
def one_run_epsilon_lower_bound(
    *, canaries: int, guesses: int, correct: int, delta: float = 0.0, confidence: float = 0.95
) -> float:
    """The ε lower bound of a one-run audit (Steinke, Nasr, Jagielski 2023, Thm 3.1).

    The keyword form of :func:`privfed.accounting.auditing.epsilon_lower_bound` (``privfed.epsilon_lower_bound``),
    which holds the statistics: m = ``canaries`` examples each included independently with probability ½,
    r = ``guesses`` guesses, v = ``correct`` of them right; the largest ε whose p-value is ≤ 1 − ``confidence``.
    """
    return epsilon_lower_bound(correct, guesses, canaries, delta=delta, confidence=confidence)


@dataclass(frozen=True)
class OneRunBound:
    """The result of :func:`one_run_audit`: ε lower bound, canaries m, guesses r, correct guesses v."""

    epsilon_lower: float
    canaries: int
    included: int
    guesses: int
    correct: int
    delta: float
    confidence: float

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def one_run_audit(
    scores: Sequence[float] | np.ndarray,
    included: Sequence[bool] | np.ndarray,
    *,
    guesses_in: int,
    guesses_out: int,
    delta: float = 0.0,
    confidence: float = 0.95,
    random_state: int | None = 0,
) -> OneRunBound:
    """Guess in for the ``guesses_in`` highest-scoring canaries, out for the ``guesses_out`` lowest; bound ε.

    ``guesses_in`` and ``guesses_out`` (k₊, k₋ in the paper) must be fixed before
    looking at the scores: trying several and keeping the best is a search that
    the bound does not pay for (divide 1 − confidence by the number tried).
    Ties in the scores are broken at random (``random_state``).
    """
    scores = np.asarray(scores, dtype=float)
    included = np.asarray(included)
    if scores.ndim != 1 or scores.shape != included.shape or included.dtype != bool:
        raise ValueError(f"scores and included must be 1-D of one length, included boolean; got {scores.shape}, "
                         f"{included.shape} {included.dtype}")
    guesses_in = check_int_at_least("guesses_in", guesses_in, 0)
    guesses_out = check_int_at_least("guesses_out", guesses_out, 0)
    if guesses_in + guesses_out < 1 or guesses_in + guesses_out > len(scores):
        raise ValueError(f"guesses_in + guesses_out must be in [1, {len(scores)}], got {guesses_in + guesses_out}")
    correct = count_correct_guesses(scores, included, guesses_in=guesses_in, guesses_out=guesses_out,
                                    rng=np.random.default_rng(random_state))
    guesses = guesses_in + guesses_out
    epsilon = one_run_epsilon_lower_bound(canaries=len(scores), guesses=guesses, correct=correct, delta=delta,
                                          confidence=confidence)
    return OneRunBound(epsilon_lower=epsilon, canaries=len(scores), included=int(included.sum()), guesses=guesses,
                       correct=correct, delta=float(delta), confidence=confidence)


def insert_canaries(
    parties: Sequence[tuple[np.ndarray, np.ndarray]],
    canary_X: np.ndarray,
    canary_y: np.ndarray,
    *,
    random_state: int | None = 0,
) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """Add each canary, independently with probability ½, to one party chosen uniformly at random.

    Returns the parties with their canaries appended (for one ``fit`` of any privfed
    pipeline) and the boolean inclusion vector the audit keeps secret until scoring.
    Canaries with labels chosen at random (mislabelled examples) are the easiest to detect.
    """
    canary_X, canary_y = np.asarray(canary_X), np.asarray(canary_y)
    if len(canary_X) != len(canary_y) or len(canary_y) < 1:
        raise ValueError(f"canary_X and canary_y must hold the same number (>= 1) of canaries, got "
                         f"{len(canary_X)} and {len(canary_y)}")
    if not parties:
        raise ValueError("parties must hold at least one (X, y) pair")
    rng = np.random.default_rng(random_state)
    included = rng.random(len(canary_y)) < 0.5
    owner = rng.integers(len(parties), size=len(canary_y))
    return plant_canaries(parties, canary_X, canary_y, included=included, owner=owner), included


def plant_canaries(
    parties: Sequence[tuple[np.ndarray, np.ndarray]],
    canary_X: np.ndarray,
    canary_y: np.ndarray,
    *,
    included: np.ndarray,
    owner: np.ndarray,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Append canary i to party ``owner[i]`` where ``included[i]``: the parties one audited run trains on.

    The coins (``included``) and owners are the auditor's, drawn before the run (:func:`insert_canaries`, or
    :func:`privfed.audit_release`'s sealed coins in :func:`privfed.empirical_audit`).
    """
    canary_X, canary_y = np.asarray(canary_X), np.asarray(canary_y)
    included, owner = np.asarray(included, dtype=bool), np.asarray(owner)
    if not len(canary_y) == len(canary_X) == len(included) == len(owner):
        raise ValueError(f"canary_X, canary_y, included and owner must have one length, got {len(canary_X)}, "
                         f"{len(canary_y)}, {len(included)} and {len(owner)}")
    with_canaries = []
    for index, (X, y) in enumerate(parties):
        rows = included & (owner == index)
        with_canaries.append(
            (np.concatenate([np.asarray(X), canary_X[rows]]), np.concatenate([np.asarray(y), canary_y[rows]]))
        )
    return with_canaries
