"""Empirical lower bounds: Clopper–Pearson, the membership-inference bound, the one-run canary audit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from privfed.pipelines.fedkt.estimator import FedKT
from sklearn.datasets import make_classification
from sklearn.tree import DecisionTreeClassifier

from privfed.audit.empirical import (
    clopper_pearson,
    insert_canaries,
    membership_epsilon_lower_bound,
    one_run_audit,
    one_run_epsilon_lower_bound,
    true_label_scores,
)


# --- Clopper–Pearson ---------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [10, 137, 1000])
def test_clopper_pearson_closed_forms_at_the_edges(n):
    # With k = 0 the upper end solves (1 − p)^n = α/2; with k = n the lower end solves p^n = α/2.
    assert clopper_pearson(0, n)[1] == pytest.approx(1 - 0.025 ** (1 / n), rel=1e-9)
    assert clopper_pearson(n, n)[0] == pytest.approx(0.025 ** (1 / n), rel=1e-9)
    assert clopper_pearson(0, n)[0] == 0.0 and clopper_pearson(n, n)[1] == 1.0


def test_clopper_pearson_covers_the_truth_about_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    hits = [lo <= 0.3 <= hi for lo, hi in (clopper_pearson(int(k), 80) for k in rng.binomial(80, 0.3, size=400))]
    assert np.mean(hits) >= 0.93  # exact intervals are conservative: coverage ≥ 95% up to sampling noise


def test_clopper_pearson_refuses_bad_counts():
    with pytest.raises(ValueError, match="successes"):
        clopper_pearson(11, 10)


# --- one-run audit (Steinke, Nasr, Jagielski 2023) ------------------------------------------------------
def test_one_run_bound_with_every_guess_right_is_the_binomial_closed_form():
    # Pure DP, v = r: P[Bin(r, p) ≥ r] = p^r = 0.05 at the bound, so ε = logit(0.05^(1/r)).
    for guesses in (20, 100, 500):
        p = 0.05 ** (1 / guesses)
        assert one_run_epsilon_lower_bound(canaries=1000, guesses=guesses, correct=guesses) == pytest.approx(
            math.log(p / (1 - p)), rel=1e-6)


def test_one_run_bound_is_monotone_and_delta_only_lowers_it():
    bounds = [one_run_epsilon_lower_bound(canaries=1000, guesses=200, correct=v) for v in range(100, 201, 10)]
    assert bounds[0] == 0.0 and all(a <= b for a, b in zip(bounds, bounds[1:])) and bounds[-1] > 2
    assert one_run_epsilon_lower_bound(canaries=1000, guesses=200, correct=180, delta=1e-5) < \
        one_run_epsilon_lower_bound(canaries=1000, guesses=200, correct=180)


def test_one_run_bound_is_valid_and_close_for_a_simulated_epsilon_dp_guesser():
    # A guesser that is right with probability e^ε/(1 + e^ε) independently is exactly what ε-DP allows at most.
    epsilon, m = 1.0, 4000
    rng = np.random.default_rng(1)
    correct = int(rng.binomial(m, 1 / (1 + math.exp(-epsilon))))
    bound = one_run_epsilon_lower_bound(canaries=m, guesses=m, correct=correct)
    # Valid: below the true ε. Close: the one-sided 95% margin on the success rate is ≈ 1.645·sqrt(p(1−p)/m) ≈ 0.0116,
    # which moves logit(p) by ≈ 0.0116/(p(1−p)) ≈ 0.06; allow three times that.
    assert 1.0 - 0.18 < bound <= epsilon


def test_one_run_audit_counts_guesses_from_scores():
    included = np.array([True] * 50 + [False] * 50)
    scores = np.where(included, 1.0, 0.0)
    result = one_run_audit(scores, included, guesses_in=20, guesses_out=20)
    assert (result.guesses, result.correct, result.canaries, result.included) == (40, 40, 100, 50)
    assert result.epsilon_lower == pytest.approx(one_run_epsilon_lower_bound(canaries=100, guesses=40, correct=40))


def _federation(seed=0):
    X, y = make_classification(n_samples=2400, n_features=8, n_informative=5, n_classes=2, flip_y=0.3,
                               random_state=seed)
    parties = [(X[i * 150:(i + 1) * 150], y[i * 150:(i + 1) * 150]) for i in range(4)]
    return parties, X[600:900], (X[900:1500], y[900:1500]), (X[1500:], y[1500:])


def test_canaries_in_a_fedkt_run_stay_below_its_epsilon_and_a_memorising_model_is_caught():
    parties, public, _, (canary_X, y_canary) = _federation()
    rng = np.random.default_rng(2)
    canary_y = rng.integers(0, 2, size=len(y_canary))  # random labels: the easiest canaries to detect
    with_canaries, included = insert_canaries(parties, canary_X[:400], canary_y[:400], random_state=3)
    assert sum(len(y) for _, y in with_canaries) == 600 + included.sum() and 150 < included.sum() < 250

    private = FedKT(DecisionTreeClassifier(max_depth=4), n_partitions=2, n_teachers=3, privacy="L1", gamma=0.02,
                    random_state=0).fit(with_canaries, public)
    claimed = private.ledger_.account(unit="example").epsilon
    scores = true_label_scores(private, canary_X[:400], canary_y[:400])
    result = one_run_audit(scores, included, guesses_in=40, guesses_out=40)
    assert result.epsilon_lower <= claimed

    memorising = DecisionTreeClassifier(random_state=0).fit(np.concatenate([X for X, _ in with_canaries]),
                                                            np.concatenate([y for _, y in with_canaries]))
    result = one_run_audit(true_label_scores(memorising, canary_X[:400], canary_y[:400]), included,
                           guesses_in=80, guesses_out=80)
    # Included canaries are memorised (score 0); an excluded one scores 0 only when the tree happens to agree with
    # its random label (about half the time). So the 80 "out" guesses (lowest scores) are all right, and the 80 "in"
    # guesses, drawn among ≈ 200 included + 100 lucky excluded canaries, are right ≈ 2/3 of the time (±4.3):
    # v ≈ 132 of 160 (bound 1.2); three standard deviations lower, v = 118 still gives 0.73.
    assert result.correct >= 118 and result.epsilon_lower > 0.7


# --- membership inference with Clopper–Pearson -----------------------------------------------------------
def test_membership_bound_is_zero_for_strong_dp_and_clearly_positive_for_an_overfit_model():
    parties, public, (X_out, y_out), _ = _federation(seed=4)
    X_in, y_in = np.concatenate([X for X, _ in parties]), np.concatenate([y for _, y in parties])

    private = FedKT(DecisionTreeClassifier(max_depth=4), n_partitions=2, n_teachers=3, privacy="L1", gamma=0.005,
                    random_state=0).fit(parties, public)
    bound = membership_epsilon_lower_bound(true_label_scores(private, X_in, y_in),
                                           true_label_scores(private, X_out, y_out), delta=1e-5)
    # The final model never sees the members; its attack rates differ by less than the intervals' widths.
    assert abs(bound.tpr - bound.fpr) <= (bound.tpr_interval[1] - bound.tpr_interval[0]) + \
        (bound.fpr_interval[1] - bound.fpr_interval[0])
    assert bound.epsilon_lower <= min(0.25, private.ledger_.account(unit="example").epsilon)

    overfit = DecisionTreeClassifier(random_state=0).fit(X_in, y_in)
    bound = membership_epsilon_lower_bound(true_label_scores(overfit, X_in, y_in),
                                           true_label_scores(overfit, X_out, y_out), delta=1e-5)
    # Members are memorised (FNR = 0 of 300, upper bound 1 − 0.025^(1/300) ≈ 0.012); with 30% label noise about a
    # third of non-members are misclassified (TNR ≈ 0.35 ± 0.06), so ε ≥ log(0.28/0.012) ≈ 3 is expected.
    assert bound.direction == "non-members-below"
    assert bound.fpr_interval[1] == pytest.approx(1 - 0.025 ** (1 / bound.members_evaluated))
    assert bound.epsilon_lower > 2.0


def test_membership_bound_refuses_too_few_samples():
    with pytest.raises(ValueError, match="at least 20"):
        membership_epsilon_lower_bound(np.zeros(5), np.zeros(50), delta=1e-5)


def test_true_label_scores_are_log_probabilities_of_the_true_label():
    X = np.array([[0.0], [1.0], [2.0], [3.0]])
    model = DecisionTreeClassifier().fit(X, ["a", "a", "b", "b"])
    scores = true_label_scores(model, X, np.array(["a", "b", "b", "c"]))
    np.testing.assert_allclose(scores, [0.0, math.log(1e-12), 0.0, math.log(1e-12)])
