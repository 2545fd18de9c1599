"""PrivateKT end to end on scikit-learn's digits, and its building blocks (sampling, RR, estimator, buffer)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.tree import DecisionTreeClassifier

torch = pytest.importorskip("torch")

from privfed.accounting import (  # noqa: E402
    RandomizedResponse,
    account,
    compose_parallel,
    randomized_response_estimate,
    randomized_response_keep_probability,
    randomized_response_variance,
)
from privfed.pipelines.models.torch_models import TorchCNN, TorchMLP  # noqa: E402
from privfed.pipelines.privatekt.estimator import (  # noqa: E402
    KnowledgeBuffer,
    PrivateKT,
    importance_sample,
    perturb_labels,
    predictive_entropy,
)

import privfed  # noqa: E402
from tests.conftest import digits_federation  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def digits():
    return digits_federation(8)


# --- randomized response ----------------------------------------------------------------------------
@pytest.mark.parametrize(("epsilon", "labels", "classes"), [(5.0, 2, 10), (1.0, 1, 3), (8.0, 4, 26)])
def test_rr_frequencies_match_beta(epsilon, labels, classes):
    rng = np.random.default_rng(7)
    beta = randomized_response_keep_probability(epsilon, num_classes=classes, labels_per_report=labels)
    n = 40_000
    truth = rng.integers(0, classes, size=n)
    reported = perturb_labels(truth, keep_probability=beta, num_classes=classes, rng=rng)
    # A report equals the truth with probability β + (1 − β)/C; any given other class with (1 − β)/C.
    p_same = beta + (1 - beta) / classes
    assert abs(np.mean(reported == truth) - p_same) < 5 * math.sqrt(p_same * (1 - p_same) / n)
    p_next = (1 - beta) / classes
    assert abs(np.mean(reported == (truth + 1) % classes) - p_next) < 5 * math.sqrt(p_next * (1 - p_next) / n)


def test_unbiased_estimator_is_unbiased_on_simulated_votes():
    rng = np.random.default_rng(11)
    classes, beta, clients, trials = (
        10, randomized_response_keep_probability(5.0, num_classes=10, labels_per_report=2), 40, 3000
    )
    truth = rng.integers(0, 3, size=clients)  # clients' true labels for one public example, 3 classes used
    true_counts = np.bincount(truth, minlength=classes)
    reports = perturb_labels(np.tile(truth, (trials, 1)), keep_probability=beta, num_classes=classes, rng=rng)
    counts = np.stack([np.bincount(row, minlength=classes) for row in reports])
    estimates = randomized_response_estimate(counts, keep_probability=beta)
    standard_error = np.sqrt(randomized_response_variance(true_counts, keep_probability=beta) / trials)
    assert np.all(np.abs(estimates.mean(axis=0) - true_counts) < 5 * standard_error)
    # The raw counts are biased toward uniform: the estimator is what removes it.
    assert np.abs(counts.mean(axis=0) - true_counts).max() > 10 * standard_error.max() * beta


# --- sampling and the buffer --------------------------------------------------------------------------
def test_entropy_of_uniform_and_one_hot_rows():
    entropy = predictive_entropy(np.array([[0.25] * 4, [1.0, 0, 0, 0], [0.5, 0.5, 0, 0]]))
    np.testing.assert_allclose(entropy, [math.log(4), 0.0, math.log(2)])


def test_importance_sampling_favours_high_entropy_and_self_training_low():
    rng = np.random.default_rng(0)
    entropy = np.r_[np.zeros(500), np.full(500, math.log(10))]  # softmax weights 1 : 10
    draws = 4000
    high = np.mean([importance_sample(entropy, 1, rng)[0] >= 500 for _ in range(draws)])
    p = 10 / 11
    assert abs(high - p) < 5 * math.sqrt(p * (1 - p) / draws)
    low = np.mean([importance_sample(entropy, 1, rng, uncertain=False)[0] < 500 for _ in range(draws)])
    assert abs(low - p) < 5 * math.sqrt(p * (1 - p) / draws)
    sample = importance_sample(entropy, 300, rng)
    assert len(np.unique(sample)) == 300  # without replacement
    with pytest.raises(ValueError, match="size"):
        importance_sample(entropy, 1001, rng)


@settings(max_examples=30, deadline=None)
@given(capacity=st.integers(1, 6), pushes=st.integers(1, 15), per_round=st.integers(1, 4))
def test_buffer_keeps_exactly_the_last_b_rounds(capacity, pushes, per_round):
    buffer = KnowledgeBuffer(capacity)
    for round_index in range(pushes):
        buffer.push(np.full(per_round, round_index), np.full(per_round, round_index % 3))
    assert len(buffer) == min(capacity, pushes)
    indices, labels = buffer.contents()
    expected_rounds = list(range(max(0, pushes - capacity), pushes))
    np.testing.assert_array_equal(indices, np.repeat(expected_rounds, per_round))
    np.testing.assert_array_equal(labels, np.repeat(expected_rounds, per_round) % 3)


# --- end to end -------------------------------------------------------------------------------------
def small(model, **options):
    settings_ = dict(epsilon_per_round=20.0, queries_per_round=20, buffer_rounds=4, self_training_size=60, rounds=6,
                     client_fraction=0.5, local_epochs=3, random_state=0)
    return PrivateKT(model, **{**settings_, **options})


def test_end_to_end_torch_learns_across_rounds(digits):
    parties, public, (X_test, y_test) = digits
    # noise_seed: one fixed draw of the randomized-response coins (β ≈ 0.94 per label), so the test does not flake
    model = small(TorchMLP(hidden=(64,), lr=1e-2, batch_size=32, random_state=0), epsilon_per_round=100.0,
                  noise_seed=0).fit(parties, public, eval_set=(X_test, y_test))
    accuracy = [record["accuracy"] for record in model.history_]
    assert len(accuracy) == 6 and accuracy[-1] > 0.5 and accuracy[-1] > accuracy[0]
    assert [r["buffer_examples"] for r in model.history_] == [20, 40, 60, 80, 80, 80]
    assert model.participation_.sum() == 6 * 4 and "warm start" in model.training_
    assert model.score(X_test, y_test) == pytest.approx(accuracy[-1])


def test_batched_clients_give_the_sequential_run(digits):
    """The round's clients trained together (one vmapped computation) or one after another: same run."""
    parties, public, (X_test, _) = digits
    runs = [small(TorchMLP(hidden=(32,), lr=1e-2, batch_size=32, random_state=0), rounds=3, batch_clients=batched,
                  self_training_size=30, noise_seed=1).fit(parties, public) for batched in (True, False)]
    np.testing.assert_array_equal(runs[0].participation_, runs[1].participation_)
    np.testing.assert_allclose(runs[0].predict_proba(X_test), runs[1].predict_proba(X_test), atol=1e-4)


@pytest.mark.parametrize(("model", "batch_clients", "expected"), [
    (TorchMLP(hidden=(16,), batch_size=32, random_state=0, device="cpu"), "auto", True),
    (TorchCNN(conv_channels=(2, 4), hidden=(8,), padding=2, batch_size=32, random_state=0, device="cpu"), "auto",
     False),
    (TorchCNN(conv_channels=(2, 4), hidden=(8,), padding=2, batch_size=32, random_state=0, device="cpu"), True,
     True),
    (TorchMLP(hidden=(16,), batch_size=32, random_state=0, device="cpu"), False, False),
])
def test_batch_clients_decides_whether_the_clients_train_together(digits, monkeypatch, model, batch_clients,
                                                                  expected):
    """"auto" batches an MLP on a CPU and trains a CNN's clients one after another; True and False are obeyed."""
    from privfed.pipelines.models import batched_training

    calls = []
    real = batched_training.train_copies
    monkeypatch.setattr(batched_training, "train_copies", lambda *a, **k: calls.append(1) or real(*a, **k))
    parties, public, _ = digits
    fitted = small(model, rounds=2, local_epochs=1, self_training_size=10, batch_clients=batch_clients).fit(
        parties, public)
    assert (len(calls) == 2) is expected and (len(calls) == 0) is not expected
    assert fitted.participation_.sum() == 2 * 4


class RecordingMLP(TorchMLP):
    """TorchMLP that records the rows, batch size and epochs of every soft-label fit (the server's steps)."""

    fits: list[tuple[int, int, int]] = []

    def fit_soft(self, X, proba, **options):
        RecordingMLP.fits.append((len(X), self.batch_size, self.epochs))
        return super().fit_soft(X, proba, **options)


@pytest.mark.parametrize("fine_tune_batch_size", [None, 100])
def test_fine_tune_batch_size_sets_the_buffer_fine_tuning_batches_only(digits, fine_tune_batch_size):
    parties, public, (X_test, _) = digits
    RecordingMLP.fits = []
    model = small(RecordingMLP(hidden=(32,), lr=1e-2, batch_size=32, random_state=0), rounds=3,
                  fine_tune_batch_size=fine_tune_batch_size, noise_seed=1).fit(parties, public)
    fine_tuning = [fit for fit in RecordingMLP.fits if fit[2] == model.fine_tune_epochs]
    self_training = [fit for fit in RecordingMLP.fits if fit[2] == model.self_training_epochs]
    assert [rows for rows, _, _ in fine_tuning] == [20, 40, 60]  # the buffer, one fine-tuning per round
    assert {batch for _, batch, _ in fine_tuning} == {fine_tune_batch_size or 32}
    assert [(rows, batch) for rows, batch, _ in self_training] == [(60, 32)] * 3
    assert model.global_model_.get_params()["batch_size"] == 32
    if fine_tune_batch_size:  # the whole buffer in one batch trains another network than batches of 32
        default = small(TorchMLP(hidden=(32,), lr=1e-2, batch_size=32, random_state=0), rounds=3,
                        noise_seed=1).fit(parties, public)
        assert not np.allclose(model.predict_proba(X_test), default.predict_proba(X_test), atol=1e-4)


def test_ledger_and_client_epsilons_equal_account(digits):
    parties, public, _ = digits
    model = small(DecisionTreeClassifier(max_depth=6), rounds=5, self_training_size=0).fit(parties, public)
    assert "refit" in model.training_
    releases = [RandomizedResponse(10, epsilon=20.0, labels_per_report=20, reports=int(t))
                for t in model.participation_ if t > 0]
    for unit in ("party", "example"):
        for analysis in ("tight", "classic"):
            assert model.ledger_.account(delta=1e-5, unit=unit, analysis=analysis).epsilon == pytest.approx(
                account(compose_parallel(releases), delta=1e-5, analysis=analysis).epsilon, rel=1e-9)
    for t, basic, tight in zip(model.participation_, model.client_epsilons_["basic"], model.client_epsilons_["tight"]):
        assert basic == 20.0 * t
        if t:
            assert tight == pytest.approx(account(RandomizedResponse(10, epsilon=20.0, labels_per_report=20,
                                                                     reports=int(t)), delta=1e-5).epsilon)
            assert tight <= basic + 1e-9
    # The busiest client bounds the federation: its composition is the parallel composition's.
    busiest = int(model.participation_.max())
    assert model.ledger_.account(delta=1e-5).epsilon >= model.client_epsilons_["tight"].max() - 1e-9
    assert model.ledger_.entries[0].analyses["party"].parameters["members"][0]["parameters"]["reports"] <= busiest
    assert "authors' claim" in model.ledger_.entries[0].note
    assert model.keep_probability_ == pytest.approx(
        randomized_response_keep_probability(20.0, num_classes=10, labels_per_report=20))


def test_forest_model_and_bundle_round_trip(digits, tmp_path):
    parties, public, (X_test, y_test) = digits
    model = small(RandomForestClassifier(n_estimators=10), rounds=3, epsilon_per_round=50.0).fit(parties, public)
    assert model.score(X_test, y_test) > 0.2  # chance 0.1; with secret coins 0.32–0.49 over 15 runs, once < 0.3
    path = privfed.save_bundle(model.global_model_, tmp_path / "privatekt", model.ledger_)
    loaded, ledger = privfed.load_bundle(path)
    np.testing.assert_array_equal(loaded.predict_proba(X_test), model.global_model_.predict_proba(X_test))
    assert ledger.account(delta=1e-5).epsilon == model.ledger_.account(delta=1e-5).epsilon


def test_same_random_state_same_run(digits):
    parties, public, (X_test, _) = digits
    first, second = (small(DecisionTreeClassifier(max_depth=6), rounds=2, self_training_size=0, noise_seed=2).fit(
        parties, public) for _ in range(2))
    np.testing.assert_array_equal(first.participation_, second.participation_)
    np.testing.assert_array_equal(first.predict(X_test), second.predict(X_test))


@pytest.mark.parametrize(
    ("settings_", "error", "message"),
    [
        ({"epsilon_per_round": 0.0}, ValueError, "epsilon_per_round"),
        ({"queries_per_round": 0}, ValueError, "queries_per_round"),
        ({"queries_per_round": 401}, ValueError, "queries_per_round"),
        ({"self_training_size": 401}, ValueError, "self_training_size"),
        ({"client_fraction": 0.0}, ValueError, "client_fraction"),
        ({"buffer_rounds": 0}, ValueError, "buffer_rounds"),
        ({"delta": 1.0}, ValueError, "delta"),
        ({"local_epochs": 1.5}, TypeError, "local_epochs"),
        ({"batch_clients": "yes"}, TypeError, "batch_clients"),
        ({"batch_clients": 1}, TypeError, "batch_clients"),
        ({"fine_tune_batch_size": 0}, ValueError, "fine_tune_batch_size"),
        ({"fine_tune_batch_size": 2.5}, TypeError, "fine_tune_batch_size"),
        ({"fine_tune_batch_size": 64}, ValueError, "torch global model only"),
        ({"noise_seed": -3}, ValueError, "noise_seed"),
        ({"noise_seed": "7"}, TypeError, "noise_seed"),
    ],
)
def test_bad_parameters_fail_before_training(digits, settings_, error, message):
    parties, public, _ = digits
    with pytest.raises(error, match=message):
        small(LogisticRegression(), **settings_).fit(parties, public)


def test_bad_model_is_named(digits):
    parties, public, _ = digits
    with pytest.raises(TypeError, match="predict_proba"):
        PrivateKT(object()).fit(parties, public)


def test_privatekt_is_importable_from_privfed():
    assert privfed.PrivateKT is PrivateKT
