"""FedKT end to end on scikit-learn's digits, and its building blocks."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from privfed.accounting import LaplaceNoisyMax, Ledger, account, compose_parallel
from privfed.pipelines import dirichlet_partition
from privfed.pipelines.fedkt.estimator import CentralizedPATE, FedKT, Solo, query_count
from privfed.pipelines.protocol.voting import break_ties_at_random, consistent_votes, noisy_labels, prediction_votes
from sklearn.datasets import load_digits
from sklearn.ensemble import RandomForestClassifier
from sklearn.tree import DecisionTreeClassifier

import privfed


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(y))
    X, y = X[order], y[order]
    train, public, test = slice(0, 1100), slice(1100, 1500), slice(1500, None)
    parts = dirichlet_partition(y[train], 5, 1.0, min_size=40, random_state=0)
    parties = [(X[train][idx], y[train][idx]) for idx in parts]
    return parties, X[public], (X[test], y[test])


def tree():
    return DecisionTreeClassifier(max_depth=10)


# --- voting ---------------------------------------------------------------------------------------
def test_consistent_voting_counts_a_party_only_when_its_students_agree() -> None:
    predictions = np.array(
        [
            [[0, 1, 2], [0, 1, 1]],  # party 0: agrees on queries 0 and 1
            [[0, 2, 2], [0, 2, 2]],  # party 1: agrees everywhere
            [[1, 1, 0], [2, 1, 0]],  # party 2: agrees on queries 1 and 2
        ]
    )
    votes = consistent_votes(predictions, 3)
    np.testing.assert_array_equal(votes, [[4, 0, 0], [0, 4, 2], [2, 0, 2]])
    np.testing.assert_array_equal(prediction_votes(predictions.reshape(-1, 3), 3).sum(axis=1), [6, 6, 6])


def test_ties_are_broken_uniformly_not_toward_the_lowest_class() -> None:
    rng = np.random.default_rng(1)
    labels = break_ties_at_random(np.tile([3, 5, 5, 1], (4000, 1)), rng)
    assert set(np.unique(labels)) == {1, 2}
    assert abs(np.mean(labels == 1) - 0.5) < 0.03
    assert (noisy_labels(np.array([[9, 0], [0, 9]]), rng) == [0, 1]).all()


def test_query_count_is_a_ceiling_of_the_public_fraction() -> None:
    assert query_count(0.01, 8141) == 82 and query_count(0.01, 8100) == 81 and query_count(1.0, 7) == 7


# --- the algorithm ----------------------------------------------------------------------------------
def test_l0_beats_solo_on_digits(digits) -> None:
    parties, public, (X_test, y_test) = digits
    fedkt = FedKT(tree(), RandomForestClassifier(n_estimators=30), random_state=0).fit(parties, public)
    solo = Solo(tree(), random_state=0).fit(parties)
    assert fedkt.score(X_test, y_test) > solo.score(X_test, y_test) + 0.1
    assert fedkt.score(X_test, y_test) > 0.8
    assert fedkt.ledger_.unaccounted and "no differential-privacy guarantee" in fedkt.ledger_.unaccounted[0]
    assert fedkt.n_queries_answered_ == len(public)


def test_l1_ledger_equals_account_on_the_evidence(digits) -> None:
    parties, public, (X_test, y_test) = digits
    model = FedKT(tree(), n_partitions=2, n_teachers=3, privacy="L1", gamma=1.0, query_fraction=0.25, random_state=3)
    model.fit(parties, public)
    votes = model.evidence_["server_votes"]
    assert votes.shape == (query_count(0.25, len(public)), 10) == (model.n_queries_answered_, 10)
    # A party contributes 0 or s = 2 votes per query.
    assert votes.sum(axis=1).max() <= 2 * len(parties) and (votes % 2 == 0).all()
    for unit in ("party", "example"):
        for analysis in ("tight", "classic"):
            from_ledger = model.ledger_.account(delta=1e-5, analysis=analysis, unit=unit)
            direct = account(LaplaceNoisyMax(votes, 1.0, 2, unit=unit), delta=1e-5, analysis=analysis)
            assert from_ledger.epsilon == pytest.approx(direct.epsilon, rel=1e-9)
    assert any("students" in text for text in model.ledger_.unaccounted)
    assert model.score(X_test, y_test) > 0.3  # ten classes: well above chance despite the noise


def test_l2_accounts_parallel_composition_over_parties(digits) -> None:
    parties, public, _ = digits
    model = FedKT(tree(), n_partitions=2, n_teachers=3, privacy="L2", gamma=0.5, local_query_fraction=0.1,
                  query_fraction=0.5, random_state=4)
    model.fit(parties, public)
    n_local = query_count(0.1, len(public))
    assert model.n_local_queries_answered_ == [n_local] * len(parties)
    # The votes never leave the parties: the party-side noisy max is accounted by its data-independent bound.
    placeholder = np.zeros((2 * n_local, 10), dtype=np.int64)
    expected = {
        "example": compose_parallel([LaplaceNoisyMax(placeholder, 0.5, 1, unit="example")] * len(parties)),
        "party": compose_parallel([LaplaceNoisyMax(placeholder, 0.5, 3, unit="party")] * len(parties)),
    }
    for unit, mechanism in expected.items():
        report = model.ledger_.account(delta=1e-5, unit=unit)
        assert not report.data_dependent
        assert report.epsilon == pytest.approx(account(mechanism, delta=1e-5).epsilon_data_independent, rel=1e-9)
    assert model.ledger_.account(delta=1e-5).unit == "example"
    assert model.evidence_ == {}


def test_budget_filter_stops_at_the_last_affordable_query(digits) -> None:
    parties, public, _ = digits
    target = 3.0
    model = FedKT(tree(), n_partitions=1, n_teachers=3, privacy="L1", gamma=0.1, target_epsilon=target, random_state=5)
    model.fit(parties, public)
    n = model.n_queries_answered_
    assert 0 < n < len(public)
    votes = model.evidence_["server_votes"]
    assert len(votes) == n
    spent = model.ledger_.account(delta=1e-5, unit="party")
    assert spent.epsilon <= target
    # One more query would have passed the budget (the filter is on the data-independent bound by default).
    one_more = LaplaceNoisyMax(np.vstack([votes, votes[:1]]), 0.1, 1, unit="party")
    assert account(one_more, delta=1e-5).epsilon_data_independent > target


def test_same_random_state_and_noise_seed_give_the_same_model(digits) -> None:
    """Reproducible noise is an opt-in (noise_seed): the same model, and a ledger whose ε is ∞ for its holders."""
    parties, public, (X_test, _) = digits
    settings = dict(n_teachers=3, privacy="L1", gamma=0.3, query_fraction=0.5, random_state=11, noise_seed=4)
    first = FedKT(tree(), **settings).fit(parties, public)
    second = FedKT(tree(), **settings).fit(parties, public)
    np.testing.assert_array_equal(first.predict(X_test), second.predict(X_test))
    np.testing.assert_array_equal(first.evidence_["server_votes"], second.evidence_["server_votes"])
    assert first.ledger_.account(delta=1e-5).epsilon == second.ledger_.account(delta=1e-5).epsilon == np.inf


def test_two_jobs_give_the_same_model_as_one(digits) -> None:
    parties, public, (X_test, _) = digits
    settings = dict(n_teachers=2, n_partitions=1, query_fraction=0.3, random_state=2)
    serial = FedKT(tree(), **settings).fit(parties, public)
    parallel = FedKT(tree(), n_jobs=2, **settings).fit(parties, public)
    np.testing.assert_array_equal(serial.predict(X_test), parallel.predict(X_test))


def test_centralized_pate_pools_the_parties(digits) -> None:
    parties, public, (X_test, y_test) = digits
    model = CentralizedPATE(tree(), n_partitions=1, n_teachers=5, random_state=0).fit(parties, public)
    assert len(model.students_) == 1 and model.score(X_test, y_test) > 0.7


def test_predict_proba_columns_follow_classes(digits) -> None:
    parties, public, (X_test, _) = digits
    model = FedKT(tree(), RandomForestClassifier(n_estimators=10), n_teachers=2, random_state=0).fit(parties, public)
    proba = model.predict_proba(X_test)
    assert proba.shape == (len(X_test), 10)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(model.classes_[proba.argmax(axis=1)], model.predict(X_test))


def test_ledger_json_round_trip_keeps_the_totals(digits) -> None:
    parties, public, _ = digits
    model = FedKT(tree(), n_teachers=2, privacy="L1", gamma=0.2, query_fraction=0.2, random_state=0).fit(
        parties, public
    )
    text = model.ledger_.to_json()
    assert Ledger.from_json(text).account(delta=1e-5).epsilon == model.ledger_.account(delta=1e-5).epsilon
    assert "server_votes" not in text and json.loads(text)


# --- bad input and small parties -----------------------------------------------------------------
def test_small_party_is_detected_before_training(digits) -> None:
    parties, public, _ = digits
    small = [*parties, (parties[0][0][:3], parties[0][1][:3])]
    with pytest.raises(ValueError, match=r"party 5 holds 3 examples, fewer than n_teachers=5"):
        FedKT(tree(), n_teachers=5).fit(small, public)
    model = FedKT(tree(), n_teachers=5, small_parties="fewer-teachers", privacy="L2", gamma=0.5,
                  local_query_fraction=0.05, random_state=0).fit(small, public)
    members = model.ledger_.entries[0].analyses["party"].parameters["members"]
    assert [m["parameters"]["votes_per_unit"] for m in members][-1] == 3


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"privacy": "L3"}, "privacy"),
        ({"privacy": "L1"}, "gamma"),
        ({"privacy": "L1", "gamma": -1.0}, "gamma"),
        ({"gamma": 0.1}, "L0"),
        ({"query_fraction": 0.0}, "query_fraction"),
        ({"local_query_fraction": 1.5}, "local_query_fraction"),
        ({"n_partitions": 0}, "n_partitions"),
        ({"delta": 1.0}, "delta"),
        ({"accounting": "optimistic"}, "accounting"),
    ],
)
def test_bad_parameters_fail_at_fit_before_training(digits, settings, message) -> None:
    parties, public, _ = digits
    with pytest.raises(ValueError, match=message):
        FedKT(tree(), **settings).fit(parties, public)


def test_bad_data_fails_with_a_named_argument(digits) -> None:
    parties, public, _ = digits
    with pytest.raises(ValueError, match="parties"):
        FedKT(tree()).fit([], public)
    with pytest.raises(ValueError, match="public has features"):
        FedKT(tree()).fit(parties, public[:, :10])
    with pytest.raises(TypeError, match="teacher"):
        FedKT("tree").fit(parties, public)


def test_fedkt_is_importable_from_privfed() -> None:
    assert privfed.FedKT is FedKT and privfed.Solo is Solo and privfed.CentralizedPATE is CentralizedPATE


# --- model families and bundles -------------------------------------------------------------------
def test_xgboost_students_and_final_model(digits) -> None:
    from xgboost import XGBClassifier

    parties, public, (X_test, y_test) = digits
    booster = XGBClassifier(n_estimators=20, max_depth=3, learning_rate=0.3, n_jobs=1)
    model = FedKT(tree(), booster, n_teachers=3, privacy="L1", gamma=1.0, random_state=0).fit(parties, public)
    assert type(model.final_model_).__name__ == "XGBClassifier"
    assert model.score(X_test, y_test) > 0.5


def test_torch_mlp_everywhere(tmp_path) -> None:
    import torch
    from privfed.pipelines import TorchMLP

    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    parts = dirichlet_partition(y[:1000], 3, 5.0, min_size=100, random_state=1)
    parties = [(X[:1000][idx], y[:1000][idx]) for idx in parts]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        mlp = TorchMLP(hidden=(32,), epochs=15, batch_size=32, lr=3e-3)
        model = FedKT(mlp, n_partitions=1, n_teachers=2, privacy="L2", gamma=1.0, random_state=0)
        model.fit(parties, X[1000:1400])
    finally:
        torch.set_num_threads(threads)
    assert model.score(X[1400:], y[1400:]) > 0.6
    assert type(model.final_model_).__name__ == "TorchMLP"
    loaded, ledger = privfed.load_bundle(privfed.save_bundle(model, tmp_path / "bundle"))
    np.testing.assert_array_equal(loaded.predict(X[1400:]), model.predict(X[1400:]))
    assert ledger.account(delta=1e-5).epsilon == model.ledger_.account(delta=1e-5).epsilon


@pytest.mark.parametrize("family", ["forest", "xgboost"])
def test_fitted_fedkt_saves_a_bundle_that_reloads_and_recomputes(digits, tmp_path, family) -> None:
    from xgboost import XGBClassifier

    parties, public, (X_test, _) = digits
    final = RandomForestClassifier(n_estimators=10) if family == "forest" else XGBClassifier(n_estimators=10, n_jobs=1)
    model = FedKT(tree(), final, n_teachers=2, privacy="L1", gamma=1.0, query_fraction=0.5, random_state=0)
    model.fit(parties, public)
    path = privfed.save_bundle(model, tmp_path / "bundle", evidence=model.ledger_.evidence())
    loaded, ledger = privfed.load_bundle(path)
    np.testing.assert_array_equal(loaded.predict(X_test), model.predict(X_test))
    assert ledger.account(delta=1e-5).epsilon == model.ledger_.account(delta=1e-5).epsilon
    assert (path / "MODEL_CARD.md").read_text().count("party") > 0


def test_l2_budget_binds_the_example_level_only(digits) -> None:
    parties, public, _ = digits
    model = FedKT(tree(), n_partitions=1, n_teachers=3, privacy="L2", gamma=0.2, target_epsilon=2.0, random_state=0)
    model.fit(parties, public)
    assert 0 < min(model.n_local_queries_answered_) < len(public)
    report = model.ledger_.account(delta=1e-5)
    assert report.unit == "example" and report.epsilon_data_independent <= 2.0
    assert report.other_units["party"].epsilon > 2.0  # recorded, not budgeted


@pytest.mark.parametrize("privacy", ["L1", "L2"])
def test_gaussian_aggregator_is_accounted_with_gnmax(digits, privacy) -> None:
    from privfed.accounting import GaussianNoisyMax, WithheldVotesNoisyMax

    parties, public, (X_test, y_test) = digits
    model = FedKT(tree(), n_partitions=1, n_teachers=3, privacy=privacy, aggregator="gaussian", sigma=0.5,
                  query_fraction=0.3, local_query_fraction=0.1, random_state=0).fit(parties, public)
    if privacy == "L1":
        expected = GaussianNoisyMax(model.evidence_["server_votes"], 0.5, 1, unit="party")
    else:  # the party-side votes stay home: data-independent GNMax per party
        expected = compose_parallel([
            WithheldVotesNoisyMax("gaussian", 0.5, num_answered=n, num_classes=10, unit="example")
            for n in model.n_local_queries_answered_
        ])
    report = model.ledger_.account(delta=1e-5)
    assert report.mechanisms[0].kind == ("gaussian_noisy_max" if privacy == "L1" else "parallel_composition")
    assert report.epsilon == pytest.approx(account(expected, delta=1e-5).epsilon, rel=1e-9)
    assert model.score(X_test, y_test) > 0.3


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"privacy": "L1", "aggregator": "gaussian"}, "sigma is required"),
        ({"privacy": "L1", "aggregator": "gaussian", "sigma": 1.0, "gamma": 0.1}, "gamma does not apply"),
        ({"privacy": "L1", "gamma": 0.1, "sigma": 1.0}, "sigma does not apply"),
        ({"privacy": "L1", "aggregator": "median", "gamma": 0.1}, "aggregator"),
    ],
)
def test_aggregator_parameters_are_checked(digits, settings, message) -> None:
    parties, public, _ = digits
    with pytest.raises(ValueError, match=message):
        FedKT(tree(), **settings).fit(parties, public)


# --------------------------------------------------------------------------- Confident GNMax aggregator (L1)
def _confident(**settings):
    from sklearn.linear_model import LogisticRegression

    return FedKT(LogisticRegression(max_iter=300), n_partitions=1, n_teachers=1, privacy="L1",
                 aggregator="confident-gnmax", sigma=10.0, threshold=30.0, sigma_threshold=15.0, query_fraction=0.4,
                 random_state=0, **settings)


@pytest.fixture(scope="module")
def forty_parties():
    X, y = load_digits(return_X_y=True)
    return privfed.federated_split(X / 16, y, n_parties=40, beta="homogeneous", public_size=500, test_size=300,
                                   random_state=0)


def test_confident_gnmax_answers_only_what_clears_the_threshold_and_accounts_both_steps(forty_parties, tmp_path):
    split = forty_parties
    with warnings.catch_warnings(record=True) as caught:  # few answers per class, but accurate: no false alarm
        warnings.simplefilter("always")
        model = _confident().fit(split.parties, split.X_public)
    assert not [w for w in caught if "near chance" in str(w.message).lower()], [str(w.message) for w in caught]
    votes = model.evidence_["server_votes"]
    entry = model.ledger_.entries[0].analyses["party"]
    answered = entry.parameters["num_answered"]
    assert model.n_queries_answered_ == answered < len(votes)  # some queries got ⊥
    assert model.score(split.X_test, split.y_test) > 0.5
    # The ledger's ε is ConfidentGNMax's: the threshold step on every query, GNMax on the answered ones only.
    asked_everything = privfed.ConfidentGNMax(votes, threshold=30.0, sigma_threshold=15.0, sigma=10.0,
                                              votes_per_unit=1, unit="party")
    report = model.ledger_.account(unit="party")
    assert report.epsilon_data_independent < account(asked_everything, delta=1e-5).epsilon_data_independent
    # A bundle saved without the private votes still loads: its public view knows how many were answered.
    privfed.save_bundle(model, tmp_path / "bundle")
    _, ledger = privfed.load_bundle(tmp_path / "bundle")
    assert ledger.account(unit="party").epsilon_data_independent == pytest.approx(report.epsilon_data_independent)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"aggregator": "laplace", "gamma": 0.1, "sigma": None}, "threshold applies to aggregator='confident-gnmax'"),
        ({"privacy": "L2"}, "needs privacy='L1'"),
        ({"sigma_threshold": None}, "sigma_threshold is required"),
        ({"threshold": -1.0}, "threshold"),
    ],
)
def test_confident_gnmax_settings_are_checked_before_training(forty_parties, settings, message):
    model = _confident()
    model.set_params(**settings)
    with pytest.raises(ValueError, match=message):
        model.fit(forty_parties.parties, forty_parties.X_public)
