"""FedKT warns when the final model has too little to learn from; privacy reports print as one line."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.tree import DecisionTreeClassifier

import privfed


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return [(X[i:1200:4], y[i:1200:4]) for i in range(4)], X[1200:1700]


def test_labels_of_too_few_classes_draw_a_warning(digits):
    parties, public = digits
    # 3 answered queries: the final model knows at most 3 of 10 classes, at most 30 % of a balanced test set.
    model = privfed.FedKT(DecisionTreeClassifier(max_depth=6), n_partitions=1, privacy="L0", query_fraction=0.006,
                          random_state=0)
    with pytest.warns(UserWarning, match=r"voted labels hold only [23] of 10 classes: the final model can predict no"):
        model.fit(parties, public)


def test_too_few_local_queries_under_l2_draw_a_warning(digits):
    parties, public = digits
    model = privfed.FedKT(DecisionTreeClassifier(max_depth=6), n_partitions=1, privacy="L2", gamma=2.0,
                          local_query_fraction=0.006, noise_seed=0, random_state=0)
    with pytest.warns(UserWarning, match="a party answered only 3 local queries for 10 classes: its students can "
                                         "predict at most 3 classes"):
        model.fit(parties, public)


def _walkthrough_digits():
    """docs/federation.md's walkthrough data: three hospitals of 400 digits, 300 public rows."""
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    order = np.random.default_rng(0).permutation(len(y))
    X, y = X[order], y[order]
    return [(X[400 * i:400 * (i + 1)], y[400 * i:400 * (i + 1)]) for i in range(3)], X[1200:1500]


def test_the_walkthrough_numbers_draw_no_warning_and_a_hopeless_gamma_does():
    """docs/federation.md's settings: 60 answered queries (a fifth of 300) over 10 classes, at most 6 votes per query
    under Laplace noise of scale 1 — the criteria alone (the run below does the whole fit, slowly)."""
    from privfed.pipelines.fedkt.server import warn_if_too_little_to_learn
    from privfed.pipelines.fedkt.steps import preflight_fedkt

    documented = privfed.FedKT(DecisionTreeClassifier(), privacy="L1", gamma=1.0, query_fraction=0.2)
    labels = np.arange(60) % 10  # 6 per class: the old "10 per class" rule called this close to guessing
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        preflight_fedkt(documented, n_parties=3, n_classes=10)
        warn_if_too_little_to_learn(labels, 10, None)
    with pytest.warns(UserWarning, match="each server query has at most 6 votes.*NEAR CHANCE"):
        preflight_fedkt(documented.set_params(gamma=0.1), n_parties=3, n_classes=10)
    with pytest.warns(UserWarning, match="hold only 3 of 10 classes"):
        warn_if_too_little_to_learn(labels % 3, 10, None)


@pytest.mark.slow
def test_the_walkthrough_settings_draw_no_warning_and_a_hopeless_gamma_does():
    """docs/federation.md's documented settings (0.859 test accuracy) warn of nothing; its gamma = 0.1 (noise of
    scale 10 on at most 6 votes) is near chance, and the pre-flight check says so before training."""
    from sklearn.linear_model import LogisticRegression

    parties, public = _walkthrough_digits()
    documented = dict(privacy="L1", gamma=1.0, query_fraction=0.2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        privfed.FedKT(LogisticRegression(max_iter=300), **documented).fit(parties, public)
    hopeless = privfed.FedKT(LogisticRegression(max_iter=300), **{**documented, "gamma": 0.1})
    with pytest.warns(UserWarning, match="each server query has at most 6 votes.*NEAR CHANCE"):
        hopeless.fit(parties, public)


def test_voted_labels_of_one_class_draw_a_warning():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 4))
    y = (X[:, 0] > 2.0).astype(int)  # about 2 % positives: the teachers vote almost only 0
    parties = [(X[i::4], y[i::4]) for i in range(4)]
    model = privfed.FedKT(DecisionTreeClassifier(max_depth=2), n_teachers=2, random_state=0)
    with pytest.warns(UserWarning, match=r"of the server's voted labels are one class"):
        model.fit(parties, rng.normal(size=(300, 4)))


def test_enough_balanced_answers_draw_no_warning(digits):
    parties, public = digits
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        privfed.FedKT(DecisionTreeClassifier(max_depth=6), n_partitions=1, random_state=0).fit(parties, public)


def test_privacy_reports_print_as_one_line_and_keep_their_curves(digits):
    parties, public = digits
    model = privfed.FedKT(DecisionTreeClassifier(max_depth=6), n_partitions=1, privacy="L1", gamma=0.5,
                          query_fraction=0.4, random_state=0).fit(parties, public)
    report = model.ledger_.account()
    line = repr(report)
    assert "\n" not in line and len(line) < 200
    assert line.startswith("PrivacyReport(ε = ") and "unit = 'party'" in line and "δ = 1e-05" in line
    assert ("DATA-DEPENDENT" if report.epsilon_is_data_dependent else "data-independent") in line
    printed = str(report.other_units)
    assert printed.count("PrivacyReport(") == len(report.other_units) == 1 and len(printed) < 300
    assert "unit = 'example'" in printed
    assert "\n" not in repr(report.mechanisms)
    curves = report.curves()
    assert curves["orders"] == report.orders and curves["rdp"] == report.rdp and len(report.rdp) > 10
    assert report.other_units["example"].curves()["rdp"] == report.other_units["example"].rdp


def test_unanimous_accuracy_matches_the_two_class_closed_forms():
    """Two classes: Laplace, P(D < v) for D the difference of two Laplace(b) = 1 − ½e^(−v/b)(1 + v/(2b));
    Gaussian, Φ(v / (σ√2))."""
    from privfed.pipelines.protocol.preflight import unanimous_accuracy
    from scipy.stats import norm

    for votes, scale in ((1, 1.0), (6, 10.0), (3, 0.5)):
        laplace = 1 - 0.5 * np.exp(-votes / scale) * (1 + votes / (2 * scale))
        assert unanimous_accuracy(votes, 2, aggregator="laplace", scale=scale) == pytest.approx(laplace, abs=0.025)
        gaussian = norm.cdf(votes / (scale * np.sqrt(2)))
        assert unanimous_accuracy(votes, 2, aggregator="gaussian", scale=scale) == pytest.approx(gaussian, abs=0.025)


def test_the_preflight_check_warns_with_the_numbers_when_noise_drowns_the_votes(digits):
    """γ = 0.1 on 4 parties × 1 partition: noise of scale 10 on 4 votes, near chance; γ = 2 is not."""
    parties, public = digits
    noisy = privfed.FedKT(DecisionTreeClassifier(max_depth=6), n_partitions=1, privacy="L1", gamma=0.1,
                          random_state=0)
    with pytest.warns(UserWarning, match=r"FedKT pre-flight: each server query has at most 4 votes and gets Laplace "
                                         r"noise of scale 10 \(1/gamma\); even a unanimous vote is answered correctly "
                                         r"only \d+% of the time with 10 classes \(chance: 10%\).*NEAR CHANCE"):
        noisy.fit(parties, public)
    with pytest.warns(UserWarning, match=r"each party's local query has at most 5 votes and gets Gaussian noise of "
                                         r"standard deviation 20"):
        privfed.FedKT(DecisionTreeClassifier(max_depth=6), n_partitions=1, privacy="L2", aggregator="gaussian",
                      sigma=20.0, random_state=0).fit(parties, public)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        privfed.FedKT(DecisionTreeClassifier(max_depth=6), n_partitions=1, privacy="L1", gamma=2.0,
                      random_state=0).fit(parties, public)
    assert not [w for w in caught if "pre-flight" in str(w.message)]
