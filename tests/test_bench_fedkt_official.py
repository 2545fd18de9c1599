"""bench/fedkt_official_side_by_side.py: the noise's effect computed from noiseless votes, and the final-model refits.

The expected flip probability is checked against drawn Laplace noise; the refits against labels whose outcome is
known (one class: the constant model; the true labels of separable rows: every test row right).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import fedkt_official_side_by_side as side_by_side  # noqa: E402  (bench/fedkt_official_side_by_side.py)


@pytest.mark.parametrize("margin", [1, 5, 10, 30])
def test_the_flip_probability_is_what_laplace_noise_on_both_counts_does(margin):
    scale, draws = 10.0, 400_000
    generator = np.random.default_rng(margin)
    noisy = np.array([margin, 0.0]) + generator.laplace(0.0, scale, size=(draws, 2))
    flipped = float(np.mean(noisy[:, 1] > noisy[:, 0]))
    assert side_by_side.flip_probability(np.array([margin]), scale)[0] == pytest.approx(flipped, abs=0.003)


def test_noise_effect_counts_ties_as_coin_flips_and_wide_margins_as_kept():
    votes = np.array([[50, 0], [0, 50], [25, 25], [0, 50]])
    truth = np.array([0, 1, 0, 0])  # the last vote is wrong with a wide margin: its noisy label stays wrong
    effect = side_by_side.noise_effect(votes, truth, scale=1.0)
    assert effect["expected_noisy_label_accuracy"] == pytest.approx(100 * (1 + 1 + 0.5 + 0) / 4, abs=1e-6)
    assert effect["expected_flipped_share"] == pytest.approx(100 * 0.5 / 4, abs=1e-6)
    assert effect["margin_mean"] == pytest.approx(37.5)
    assert effect["margin_at_most_scale"] == pytest.approx(25.0)


def test_refits_give_the_constant_model_for_one_class_and_learn_separable_true_labels():
    X = np.linspace(0, 1, 40, dtype=np.float32)[:, None]
    truth = (X[:, 0] > 0.5).astype(np.int64)
    unanimous_wrong = np.tile([50, 0], (40, 1))  # every vote for class 0
    result = side_by_side.refits("codrna-l1", unanimous_wrong, X, truth, X, truth, scale=1e-3, draws=2)
    assert result["true"] == result["true_base0.5"] == 100.0
    assert result["noiseless"] == result["noisy_mean"] == pytest.approx(100 * np.mean(truth == 0))
    assert result["noisy_sd"] == 0.0
