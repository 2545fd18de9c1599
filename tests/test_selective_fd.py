"""Selective-FD, FedMD and independent learning end to end on scikit-learn's digits, and the server's steps."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from privfed.accounting import ConfidentGNMax, GaussianNoisyMax, RandomizedResponse, account  # noqa: E402
from privfed.accounting.conversion import rdp_to_epsilon  # noqa: E402
from privfed.pipelines.models.fitting import FittedClassifier  # noqa: E402
from privfed.pipelines.models.torch_models import TorchMLP  # noqa: E402
from privfed.pipelines.selective_fd.aggregation import aggregate_predictions, confident_examples  # noqa: E402
from privfed.pipelines.selective_fd.baselines import FedMD, IndependentLearning  # noqa: E402
from privfed.pipelines.selective_fd.estimator import SelectiveFD  # noqa: E402
from privfed.pipelines.selective_fd.steps import (  # noqa: E402
    FDClient,
    SelectiveFDRound,
    SelectiveFDSetup,
    share_step,
    training_rows,
)
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.tree import DecisionTreeClassifier  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

import privfed  # noqa: E402

FAST = dict(rounds=6, local_steps=3, distill_steps=20, proxy_batch=150, random_state=0)
SELECTOR = dict(n_auxiliary=150, max_known=150, tau_server=1.5)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(1):
        yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def digits():
    """Strong non-IID: client c holds class c only (of 1000 training digits); 400 proxy, the rest for testing."""
    X, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    X, y = X[order] / 16.0, y[order]
    train, proxy, test = slice(0, 1000), slice(1000, 1400), slice(1400, None)
    parties = [(X[train][y[train] == c], y[train][y[train] == c]) for c in range(10)]
    return parties, X[proxy], (X[test], y[test])


def mlp():
    return TorchMLP(hidden=(32,), lr=1e-2, batch_size=32)


# --- the server's steps ----------------------------------------------------------------------------
def test_aggregate_averages_only_the_clients_that_shared() -> None:
    predictions = np.array(
        [
            [[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]],
            [[0.7, 0.3], [0.6, 0.4], [0.1, 0.9]],
            [[0.0, 1.0], [0.0, 1.0], [0.3, 0.7]],
        ]
    )
    shared = np.array([[True, True, False], [True, False, False], [False, True, False]])
    ensemble, sharers = aggregate_predictions(predictions, shared)
    np.testing.assert_allclose(ensemble, [[0.8, 0.2], [0.1, 0.9], [0.0, 0.0]])
    np.testing.assert_array_equal(sharers, [2, 2, 0])
    with pytest.raises(ValueError, match="shape"):
        aggregate_predictions(predictions, shared[:, :2])


def test_server_filter_keeps_confident_ensembles() -> None:
    ensemble = np.array([[1.0, 0.0, 0.0], [0.6, 0.4, 0.0], [0.5, 0.25, 0.25], [0.34, 0.33, 0.33]])
    # keep iff max ≥ 1 − τ/2, i.e. ‖e − onehot‖₁ = 2(1 − max) ≤ τ
    np.testing.assert_array_equal(confident_examples(ensemble, 0.0), [True, False, False, False])
    np.testing.assert_array_equal(confident_examples(ensemble, 0.8), [True, True, False, False])
    np.testing.assert_array_equal(confident_examples(ensemble, 1.0), [True, True, True, False])
    np.testing.assert_array_equal(confident_examples(ensemble, 2.0), [True, True, True, True])
    with pytest.raises(ValueError, match="tau_server"):
        confident_examples(ensemble, 2.5)


def test_training_rows_give_exactly_the_steps_asked() -> None:
    rng = np.random.default_rng(0)
    rows = training_rows(10, steps=7, batch_size=4, rng=rng)
    assert len(rows) == 28
    np.testing.assert_array_equal(np.sort(rows[:10]), np.arange(10))  # whole shuffled passes first
    np.testing.assert_array_equal(np.sort(rows[10:20]), np.arange(10))
    assert len(training_rows(100, steps=2, batch_size=8, rng=rng)) == 16


class FixedProbabilities:
    """A stand-in for a fitted client model: the same probability row for every example."""

    def __init__(self, row):
        self.row = np.asarray(row, dtype=float)

    def predict_proba(self, X):
        return np.tile(self.row, (len(X), 1))


def client_share(row, *, labels="hard", keep_probability=None, temperature=1.0, n=4000):
    """One client's share of a round, its model fixed to ``row``, sharing every example (no selector)."""
    setup = SelectiveFDSetup(
        proxy=np.zeros((n, 3)), classes=np.arange(len(row)), seed=0, local_steps=1, distill_steps=1, labels=labels,
        temperature=temperature, shares=True, keep_probability=np.nan if keep_probability is None else keep_probability,
        selects=False, quantile=0.0, validation_fraction=0.0, kernel_width="median", regularization=0.0,
        n_auxiliary=0, max_known=0,
    )
    client = FDClient(setup=setup, X=np.zeros((2, 3)), y=np.array([0, 1]), prototype=DecisionTreeClassifier(),
                      model=FixedProbabilities(row))
    _, share = share_step(client, SelectiveFDRound(np.arange(n), 0))
    return share


def test_a_client_shares_the_argmax_and_randomized_response_keeps_it_at_the_right_rate() -> None:
    clear = client_share([0.1, 0.55, 0.35])
    assert (clear.predictions == 1).all() and clear.shared.all()
    beta = 0.4
    noisy = client_share([0.1, 0.55, 0.35], keep_probability=beta).predictions
    # Kept with probability β, else uniform over the 3 classes: P(1) = β + (1 − β)/3, P(0) = P(2) = (1 − β)/3.
    np.testing.assert_allclose(np.bincount(noisy, minlength=3) / len(noisy),
                               [(1 - beta) / 3, beta + (1 - beta) / 3, (1 - beta) / 3], atol=0.03)


def test_soft_shares_are_tempered_probabilities() -> None:
    share = client_share([0.2, 0.8], labels="soft", temperature=2.0, n=3)
    tempered = np.sqrt([0.2, 0.8]) / np.sqrt([0.2, 0.8]).sum()
    np.testing.assert_allclose(share.predictions, np.tile(tempered, (3, 1)))


# --- the protocol end to end -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def soft_runs(digits):
    parties, proxy, _ = digits
    return {
        "selective": SelectiveFD(mlp(), **FAST, **SELECTOR).fit(parties, proxy),
        "fedmd": FedMD(mlp(), **FAST).fit(parties, proxy),
        "independent": IndependentLearning(mlp(), rounds=6, local_steps=3, random_state=0).fit(parties),
    }


def test_selection_beats_unselected_distillation_and_independent_learning(digits, soft_runs) -> None:
    _, _, (X_test, y_test) = digits
    scores = {name: run.client_scores(X_test, y_test).mean() for name, run in soft_runs.items()}
    assert scores["independent"] < 0.15  # one class per client: chance level
    assert scores["selective"] > scores["fedmd"] + 0.3
    assert scores["selective"] > 0.6
    selective = soft_runs["selective"]
    # Clients share only the proxy digits of their own class, roughly: about a tenth of the pairs.
    assert 0.04 < np.mean(selective.history_["shared_fraction"]) < 0.25
    assert soft_runs["fedmd"].history_["shared_fraction"] == [1.0] * 6
    assert len(selective.selectors_) == 10 and selective.n_rounds_ == 6


def test_predict_uses_the_chosen_client_model(digits, soft_runs) -> None:
    _, _, (X_test, y_test) = digits
    model = soft_runs["selective"]
    np.testing.assert_array_equal(model.predict(X_test), model.models_[0].predict(X_test))
    assert model.score(X_test, y_test) == pytest.approx(model.client_scores(X_test, y_test)[0])
    other = model.set_params(client=3)
    try:
        np.testing.assert_allclose(other.predict_proba(X_test), model.models_[3].predict_proba(X_test))
    finally:
        model.set_params(client=0)


def test_no_privacy_ledger_says_no_noise_and_names_the_selectors(soft_runs) -> None:
    ledger = soft_runs["selective"].ledger_
    assert ledger.units == ()
    texts = ledger.unaccounted
    assert any("no noise is added at all" in text for text in texts)
    assert any("client-side selectors" in text and "without noise" in text for text in texts)
    assert any("client 0's own" in text for text in texts)
    assert all(entry.kind == "unaccounted" for entry in ledger.entries)
    assert not any("selectors" in text for text in soft_runs["fedmd"].ledger_.unaccounted)
    assert any("nothing is shared" in text for text in soft_runs["independent"].ledger_.unaccounted)


def test_without_the_client_selector_and_server_filter_it_is_fedmd(digits, soft_runs) -> None:
    """The ablation's "none": Selective-FD with neither selector runs FedMD's protocol exactly."""
    parties, proxy, (X_test, _) = digits
    none = SelectiveFD(mlp(), tau_client=None, tau_server=2.0, **FAST).fit(parties, proxy)
    np.testing.assert_array_equal(none.predict_proba(X_test), soft_runs["fedmd"].predict_proba(X_test))
    assert none.selectors_ == [None] * 10
    assert not any("client-side selectors" in text for text in none.ledger_.unaccounted)


def test_server_selector_alone_filters_full_shares(digits) -> None:
    """The ablation's "server only": every client shares every example; the server drops unconfident ones."""
    parties, proxy, _ = digits
    server_only = SelectiveFD(mlp(), tau_client=None, tau_server=0.5, **FAST).fit(parties, proxy)
    assert server_only.history_["shared_fraction"] == [1.0] * FAST["rounds"]
    assert max(server_only.history_["kept"]) < FAST["proxy_batch"]


def test_hard_labels_without_privacy(digits) -> None:
    parties, proxy, (X_test, y_test) = digits
    model = SelectiveFD(mlp(), labels="hard", **FAST, **SELECTOR).fit(parties, proxy)
    assert model.client_scores(X_test, y_test).mean() > 0.5
    assert model.history_["kept"][-1] > 0


def _release_row(model, unit: str, analysis: str = "tight"):
    """The ledger's row for its one accounted release (Selective-FD's own client model and selectors leave the
    public's ε infinite: the row is that release accounted alone)."""
    report = model.ledger_.account(delta=1e-5, unit=unit, analysis=analysis)
    [row] = report.mechanisms
    return row


def test_randomized_response_ledger_equals_account(digits) -> None:
    parties, proxy, (X_test, y_test) = digits
    settings = dict(FAST, rounds=3, proxy_batch=50)
    model = SelectiveFD(mlp(), labels="hard", privacy="rr", epsilon_per_round=100.0, **settings, **SELECTOR)
    model.fit(parties, proxy)
    expected = RandomizedResponse(10, epsilon=100.0, labels_per_report=50, reports=3)
    assert expected.keep_probability == pytest.approx((np.expm1(2.0)) / (np.expm1(2.0) + 10))
    for unit in ("party", "example"):
        for analysis in ("tight", "classic"):
            from_ledger = _release_row(model, unit, analysis)
            assert from_ledger.epsilon == pytest.approx(account(expected, delta=1e-5, analysis=analysis).epsilon,
                                                        rel=1e-9)
            assert not from_ledger.data_dependent
    assert privfed.account(expected, delta=1e-5).epsilon < 3 * 100.0  # composed better than ε·T
    report = model.ledger_.account(delta=1e-5)
    assert report.epsilon == math.inf  # the selectors' choices and the client's own model are covered by nothing
    assert any("client-side selectors" in note for note in report.notes)
    assert not any("no noise" in text for text in model.ledger_.unaccounted)
    assert model.client_scores(X_test, y_test).mean() > 0.1


def test_gnmax_ledger_equals_account_on_the_votes(digits) -> None:
    parties, proxy, _ = digits
    model = SelectiveFD(mlp(), labels="hard", privacy="gnmax", sigma=2.0,
                        **dict(FAST, rounds=3), **dict(SELECTOR, tau_server=2.0)).fit(parties, proxy)
    votes = model.evidence_["server_votes"]
    assert votes.shape[1] == 10 and 0 < len(votes) <= 3 * FAST["proxy_batch"]
    assert votes.sum(axis=1).min() >= 1 and votes.sum(axis=1).max() <= 10  # one vote per sharing client
    for unit in ("party", "example"):
        mechanism = GaussianNoisyMax(votes, 2.0, 1, unit=unit)
        direct = account(mechanism, delta=1e-5, analysis="classic")
        from_ledger = _release_row(model, unit, "classic")
        assert from_ledger.epsilon == pytest.approx(direct.epsilon, rel=1e-9)
        assert from_ledger.data_dependent
        # Tight analysis: both take the smaller of the data-dependent RDP bound and the data-independent PLD.
        tight = _release_row(model, unit)
        assert tight.epsilon == pytest.approx(account(mechanism, delta=1e-5).epsilon, rel=1e-9)
        orders = np.asarray(model.ledger_.account(delta=1e-5, unit=unit).orders)
        assert tight.epsilon <= rdp_to_epsilon(orders, mechanism.rdp(orders), 1e-5, "tight")[0] * (1 + 1e-9)
    # A server-side selector reads the noisy top count: the votes are then accounted data-independently.
    filtered = SelectiveFD(mlp(), labels="hard", privacy="gnmax", sigma=2.0,
                           **dict(FAST, rounds=1), **dict(SELECTOR, tau_server=1.0)).fit(parties, proxy)
    row = _release_row(filtered, "party")
    assert row.kind == "withheld_votes_noisy_max" and not row.data_dependent
    assert "server_votes" not in filtered.evidence_


def test_confident_gnmax_ledger_charges_gnmax_only_on_what_cleared_the_threshold(digits) -> None:
    parties, proxy, _ = digits
    settings = dict(labels="hard", privacy="confident-gnmax", sigma=2.0, threshold=6.0, sigma_threshold=2.0)
    # noise_seed: one fixed draw of the threshold noise, so that the run is one where some examples clear it
    model = SelectiveFD(mlp(), **settings, **dict(FAST, rounds=3), **dict(SELECTOR, tau_server=2.0),
                        noise_seed=0).fit(parties, proxy)
    votes = model.evidence_["server_votes"]
    answered = next(e for e in model.ledger_.entries if "Confident GNMax" in (e.note or "")).analyses[
        "party"].parameters["num_answered"]
    assert 0 < answered < len(votes)  # the threshold step dropped some shared examples
    everything = ConfidentGNMax(votes, threshold=6.0, sigma_threshold=2.0, sigma=2.0, unit="party")
    report = _release_row(model, "party")
    assert report.epsilon_data_independent < account(everything, delta=1e-5).epsilon_data_independent
    with pytest.raises(ValueError, match="threshold applies to privacy='confident-gnmax' only"):
        SelectiveFD(mlp(), labels="hard", privacy="gnmax", sigma=2.0, threshold=6.0).fit(parties, proxy)
    with pytest.raises(ValueError, match="needs sigma_threshold"):
        SelectiveFD(mlp(), labels="hard", privacy="confident-gnmax", sigma=2.0, threshold=6.0).fit(parties, proxy)


def test_fedmd_with_randomized_response_has_no_selector_entry(digits) -> None:
    parties, proxy, _ = digits
    model = FedMD(mlp(), labels="hard", privacy="rr", epsilon_per_round=30.0, **dict(FAST, rounds=2, proxy_batch=30))
    model.fit(parties, proxy)
    assert model.history_["shared_fraction"] == [1.0, 1.0]
    expected = RandomizedResponse(10, epsilon=30.0, labels_per_report=30, reports=2)
    assert _release_row(model, "party").epsilon == pytest.approx(account(expected, delta=1e-5).epsilon)
    assert not any("selectors" in text for text in model.ledger_.unaccounted)
    # The labels are noised on each client: the coordinator sees nothing in clear but the schema exchange.
    coordinator = model.ledger_.account(delta=1e-5, observer="coordinator")
    assert len(coordinator.uncovered) == 1 and "schema exchange" in coordinator.uncovered[0]


def test_scikit_learn_models_are_refitted_each_round(digits) -> None:
    parties, proxy, (X_test, y_test) = digits
    settings = dict(rounds=3, proxy_batch=150, random_state=0)
    model = SelectiveFD(LogisticRegression(max_iter=300), labels="soft", **settings, **SELECTOR).fit(parties, proxy)
    assert all(isinstance(m, FittedClassifier) for m in model.models_)
    alone = IndependentLearning(LogisticRegression(max_iter=300), rounds=3, random_state=0).fit(parties)
    assert alone.client_scores(X_test, y_test).mean() < 0.15
    assert model.client_scores(X_test, y_test).mean() > 0.5
    assert model.predict_proba(X_test).shape == (len(X_test), 10)


def test_heterogeneous_client_models(digits) -> None:
    parties, proxy, (X_test, y_test) = digits
    models = [mlp() if c % 2 else DecisionTreeClassifier(max_depth=6) for c in range(10)]
    fitted = SelectiveFD(models, **dict(FAST, rounds=3), **SELECTOR).fit(parties, proxy)
    assert isinstance(fitted.models_[0], FittedClassifier) and isinstance(fitted.models_[1], TorchMLP)
    assert fitted.client_scores(X_test, y_test).mean() > 0.2
    with pytest.raises(ValueError, match="one per client"):
        SelectiveFD(models[:3], **FAST).fit(parties, proxy)


def test_same_random_state_same_models_and_two_jobs_agree(digits) -> None:
    parties, proxy, (X_test, _) = digits
    settings = dict(FAST, rounds=2)
    first = SelectiveFD(mlp(), **settings, **SELECTOR).fit(parties, proxy)
    second = SelectiveFD(mlp(), **settings, **SELECTOR).fit(parties, proxy)
    parallel = SelectiveFD(mlp(), n_jobs=2, **settings, **SELECTOR).fit(parties, proxy)
    for other in (second, parallel):
        for a, b in zip(first.models_, other.models_):
            np.testing.assert_array_equal(a.predict_proba(X_test), b.predict_proba(X_test))
        assert first.history_ == other.history_


def test_callback_sees_every_round(digits) -> None:
    parties, proxy, _ = digits
    seen = []
    SelectiveFD(mlp(), callback=lambda model, r: seen.append((r, len(model.models_))),
                **dict(FAST, rounds=3), **SELECTOR).fit(parties, proxy)
    assert seen == [(0, 10), (1, 10), (2, 10)]


def test_bundle_of_a_client_model_carries_the_unaccounted_selector(digits, soft_runs, tmp_path) -> None:
    _, _, (X_test, _) = digits
    model = soft_runs["selective"]
    path = privfed.save_bundle(model.models_[0], tmp_path / "client0", ledger=model.ledger_)
    loaded, ledger = privfed.load_bundle(path)
    np.testing.assert_allclose(loaded.predict_proba(X_test), model.models_[0].predict_proba(X_test), rtol=1e-6)
    assert any("client-side selectors" in text for text in ledger.unaccounted)
    assert "client-side selectors" in (path / "MODEL_CARD.md").read_text()


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        ({"labels": "logits"}, ValueError, "labels"),
        ({"privacy": "laplace"}, ValueError, "privacy"),
        ({"privacy": "rr"}, ValueError, "labels='hard'"),
        ({"privacy": "rr", "labels": "hard"}, ValueError, "epsilon_per_round"),
        ({"privacy": "gnmax", "labels": "hard"}, ValueError, "sigma"),
        ({"epsilon_per_round": 1.0}, ValueError, "epsilon_per_round"),
        ({"sigma": 1.0}, ValueError, "sigma"),
        ({"tau_client": 1.0}, ValueError, "tau_client"),
        ({"tau_server": -0.1}, ValueError, "tau_server"),
        ({"kernel_width": 0.0}, ValueError, "kernel_width"),
        ({"rounds": 0}, ValueError, "rounds"),
        ({"proxy_batch": 0}, ValueError, "proxy_batch"),
        ({"temperature": 0.0}, ValueError, "temperature"),
        ({"client": 10}, ValueError, "client"),
        ({"n_jobs": 0}, ValueError, "n_jobs"),
        ({"callback": 3}, TypeError, "callback"),
        ({"validation_fraction": 1.0}, ValueError, "validation_fraction"),
    ],
)
def test_bad_parameters_fail_before_any_training(digits, settings, error, message) -> None:
    parties, proxy, _ = digits
    with pytest.raises(error, match=message):
        SelectiveFD(mlp(), **settings).fit(parties, proxy)


def test_bad_data_fails_with_a_named_argument(digits) -> None:
    parties, proxy, _ = digits
    with pytest.raises(ValueError, match="proxy set"):
        SelectiveFD(mlp()).fit(parties)
    with pytest.raises(ValueError, match="public has features"):
        FedMD(mlp()).fit(parties, proxy[:, :10])
    with pytest.raises(TypeError, match="model"):
        SelectiveFD("mlp").fit(parties, proxy)
    with pytest.raises(ValueError, match="single class"):
        SelectiveFD(mlp()).fit([parties[0]], proxy)


def test_estimators_are_importable_from_privfed() -> None:
    assert privfed.SelectiveFD is SelectiveFD and privfed.FedMD is FedMD
    assert privfed.IndependentLearning is IndependentLearning
    assert privfed.KuLSIF.__name__ == "KuLSIF" and privfed.DensityRatioSelector.__name__ == "DensityRatioSelector"


def test_the_preflight_check_warns_when_gnmax_noise_drowns_the_clients_votes(digits) -> None:
    """σ = 30 on at most 10 votes (one per client) with 10 classes: near chance, said before the first round."""
    parties, proxy, _ = digits
    model = SelectiveFD(mlp(), labels="hard", privacy="gnmax", sigma=30.0, **dict(FAST, rounds=1), **SELECTOR)
    with pytest.warns(UserWarning, match=r"Selective-FD pre-flight: each proxy example has at most 10 votes \(one per "
                                         r"client\) and gets Gaussian noise of standard deviation 30 \(sigma\); even a "
                                         r"unanimous vote is answered correctly only \d+% .*NEAR CHANCE"):
        model.fit(parties, proxy)
