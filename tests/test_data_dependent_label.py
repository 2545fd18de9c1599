"""DATA-DEPENDENT labels an ε only where the figure depends on private data (issue 45, item 9).

An analysis that uses the private votes gives the smaller of its data-dependent and data-independent bounds; where
the data-dependent one is not smaller (tied votes, or ε = ∞) the figure printed is the data-independent ε, the same
for every data set, and is labelled so."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import privfed
from privfed.federation.summary import run_summary, summary_lines


def _report(votes):
    return privfed.account(privfed.LaplaceNoisyMax(np.tile(votes, (20, 1)), gamma=1.0, votes_per_unit=1,
                                                   unit="example"), delta=1e-5)


def test_a_figure_computed_from_the_votes_is_labelled_data_dependent():
    report = _report([50, 0, 0])  # a clear winner: the data-dependent bound is far below the data-independent one
    assert report.epsilon < report.epsilon_data_independent and report.epsilon_is_data_dependent
    assert "DATA-DEPENDENT: this ε was computed from the private votes" in report.summary()
    assert "DATA-DEPENDENT, data-independent ε = 34.31" in repr(report)
    assert repr(report.mechanisms[0]).endswith("DATA-DEPENDENT)")


def test_a_figure_equal_to_the_data_independent_epsilon_is_not_labelled_data_dependent():
    report = _report([1, 1, 1])  # tied votes: the data-dependent bound gains nothing
    assert report.data_dependent and report.epsilon == report.epsilon_data_independent  # the analysis used votes
    assert not report.epsilon_is_data_dependent
    for text in (report.summary(), repr(report), repr(report.mechanisms[0])):
        assert "DATA-DEPENDENT" not in text and "data-independent" in text, text


@pytest.fixture(scope="module")
def seeded_l1():
    """FedKT L1 with seeded noise: every ε is ∞, the same whatever the data."""
    from sklearn.datasets import load_digits
    from sklearn.tree import DecisionTreeClassifier

    X, y = load_digits(return_X_y=True)
    parties = [(X[i:400:4], y[i:400:4]) for i in range(4)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return privfed.FedKT(DecisionTreeClassifier(max_depth=4), n_partitions=1, privacy="L1", gamma=0.5,
                             query_fraction=0.4, random_state=0, noise_seed=0).fit(parties, X[400:600])


def test_infinity_is_never_labelled_data_dependent(seeded_l1):
    report = seeded_l1.ledger_.account()
    assert report.data_dependent and report.epsilon == report.epsilon_data_independent == np.inf
    lines = summary_lines(run_summary(seeded_l1, parties=["party 0"], bundle=None, metrics=None))
    epsilon_lines = [line for line in lines if line.startswith("epsilon (")]
    assert len(epsilon_lines) == 4 and all(line.endswith("): inf") for line in epsilon_lines), lines
    from privfed.bundle.model_card import render_model_card

    card = render_model_card(seeded_l1.ledger_)
    assert "**yes**" not in card  # no "data-dependent? yes" beside an ∞ that holds for every data set
