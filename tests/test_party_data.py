"""Bad party data and public sets: one clear ValueError naming the argument, before any training starts."""

from __future__ import annotations

import numpy as np
import pytest
from privfed.pipelines import FedKD, FedKT, FedMD, IndependentLearning, PrivateKT, SelectiveFD, Solo
from privfed.pipelines.data.party_data import check_parties, check_party_data, party_classes
from privfed.pipelines.fedkt.estimator import CentralizedPATE
from sklearn.base import BaseEstimator, ClassifierMixin


class Untrainable(ClassifierMixin, BaseEstimator):
    """A classifier whose training fails loudly: a test passes only if validation refused the data first."""

    def fit(self, X, y):
        raise AssertionError("training started before the data was validated")

    def predict(self, X):  # pragma: no cover - never reached
        raise AssertionError

    def predict_proba(self, X):  # pragma: no cover - never reached
        raise AssertionError

    def decision_function(self, X):  # pragma: no cover - never reached
        raise AssertionError


RNG = np.random.default_rng(0)
X_GOOD = RNG.normal(size=(40, 3))
Y_GOOD = np.arange(40) % 3
PUBLIC = RNG.normal(size=(30, 3))
GOOD = [(X_GOOD[:20], Y_GOOD[:20]), (X_GOOD[20:], Y_GOOD[20:])]

BAD_INPUTS = {
    "all-NaN public": (GOOD, np.full((30, 3), np.nan), "public holds no value at all"),
    "infinite public": (GOOD, np.where(np.eye(30, 3) > 0, np.inf, PUBLIC), "public holds infinite values"),
    "string X": ([(X_GOOD[:20].astype(str), Y_GOOD[:20]), GOOD[1]], PUBLIC, r"parties\[0\] X must hold numbers"),
    "text in an object X": (
        [GOOD[0], (np.array([["a", 1, 2]] * 20, dtype=object), Y_GOOD[20:])], PUBLIC,
        r"parties\[1\] X must hold numbers, it holds text \(e.g. 'a'\)",
    ),
    "string public": (GOOD, PUBLIC.astype(str), "public must hold numbers"),
    "mixed labels in one party": (
        [(X_GOOD[:20], [0, "a"] * 10), GOOD[1]], PUBLIC, r"parties\[0\] y mixes label types: 0 \(number\) and 'a'",
    ),
    "mixed labels across parties": (
        [(X_GOOD[:20], Y_GOOD[:20].astype(str)), GOOD[1]], PUBLIC,
        r"parties\[1\] y holds numbers but parties\[0\] y holds strings",
    ),
    "a missing label": ([(X_GOOD[:20], [None] + ["a"] * 19), GOOD[1]], PUBLIC, r"parties\[0\] y has missing labels"),
    "a NaN label": (
        [(X_GOOD[:20], np.r_[np.nan, Y_GOOD[1:20]]), GOOD[1]], PUBLIC, r"parties\[0\] y has missing labels",
    ),
    "one class everywhere": (
        [(X_GOOD[:20], np.zeros(20, int)), (X_GOOD[20:], np.zeros(20, int))], PUBLIC,
        "single class 0 across all parties",
    ),
}

PIPELINES = {
    "FedKT": lambda: FedKT(Untrainable(), n_teachers=2),
    "CentralizedPATE": lambda: CentralizedPATE(Untrainable(), n_teachers=2),
    "Solo": lambda: Solo(Untrainable()),
    "FedKD": lambda: FedKD(Untrainable(), Untrainable()),
    "PrivateKT": lambda: PrivateKT(Untrainable(), rounds=1, queries_per_round=5, epsilon_per_round=1.0,
                                   self_training_size=0),
    "SelectiveFD": lambda: SelectiveFD(Untrainable(), rounds=1, proxy_batch=10),
    "FedMD": lambda: FedMD(Untrainable(), rounds=1, proxy_batch=10),
    "IndependentLearning": lambda: IndependentLearning(Untrainable(), rounds=1),
}


#: Pipelines that take no public set are not asked about a bad one.
NO_PUBLIC_SET = ("Solo", "IndependentLearning")


@pytest.mark.parametrize(
    ("pipeline", "case"),
    [(pipeline, case) for pipeline in PIPELINES for case in BAD_INPUTS
     if not (pipeline in NO_PUBLIC_SET and "public" in case)],
)
def test_bad_data_is_refused_before_training(pipeline, case):
    parties, public, message = BAD_INPUTS[case]
    with pytest.raises(ValueError, match=message):
        PIPELINES[pipeline]().fit(parties, public)


def test_good_data_passes_unchanged_and_object_numbers_become_numbers():
    parties, public = check_parties(GOOD, PUBLIC)
    assert all(np.array_equal(X, X0) and np.array_equal(y, y0) for (X, y), (X0, y0) in zip(parties, GOOD))
    assert public is not None and public.shape == PUBLIC.shape
    (X, y), = check_party_data([(X_GOOD[:4].astype(object), np.array([1, 2, 1, 2], dtype=object))])
    assert X.dtype == float and y.dtype.kind == "i"
    (_, y), = check_party_data([(X_GOOD[:2], ["b", "a"])])
    assert party_classes([(X_GOOD[:2], y)]).tolist() == ["a", "b"]


def test_some_missing_features_are_allowed_for_models_that_handle_them():
    X = X_GOOD[:20].copy()
    X[0, 0] = np.nan
    (checked, _), = check_party_data([(X, Y_GOOD[:20])])
    assert np.isnan(checked[0, 0])


@pytest.mark.parametrize(
    ("privacy", "what"), [("L1", "a single server query"), ("L2", "party 0 to answer a single local query")],
)
def test_a_budget_too_small_for_one_answer_is_refused_before_training(privacy, what):
    model = FedKT(Untrainable(), n_teachers=2, privacy=privacy, gamma=0.5, target_epsilon=1e-3)
    with pytest.raises(ValueError, match=f"target_epsilon=0.001 does not allow {what}, even a unanimous one"):
        model.fit(GOOD, PUBLIC)
