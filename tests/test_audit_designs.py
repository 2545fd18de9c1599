"""Mechanism-level and gradient canary audits (``empirical_audit(design=...)``): each reaches most of a correct
claim, and each refutes the claim when the noise code carries a planted bug (the bug patched in by monkeypatch,
as bench/mutations plants it in the file)."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from privfed.accounting.auditing import max_lower_bound
from sklearn.datasets import load_digits
from sklearn.tree import DecisionTreeClassifier

from privfed import DPConfig, FedKT, PrivateKT, TorchMLP
from privfed.audit.empirical_pipelines import empirical_audit
from privfed.audit.gradient_canaries import gradient_canary_scores
from privfed.audit.mechanism_canaries import choose_guesses


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return [(X[i:400:4], y[i:400:4]) for i in range(4)], X[400:600]


def _privatekt(epsilon: float) -> PrivateKT:
    return PrivateKT(DecisionTreeClassifier(), epsilon_per_round=epsilon, queries_per_round=2, rounds=2,
                     self_training_size=100, random_state=0)


def _fedkt(gamma: float) -> FedKT:
    return FedKT(DecisionTreeClassifier(), n_partitions=2, n_teachers=3, privacy="L1", gamma=gamma, random_state=0)


def _dpsgd(target_epsilon: float) -> TorchMLP:  # 3 epochs of 5 Poisson steps
    return TorchMLP(hidden=(8,), epochs=3, batch_size=16, lr=0.1, optimizer="sgd", random_state=0,
                    dp=DPConfig(target_epsilon=target_epsilon, max_grad_norm=1.0, delta=1e-5, sample_rate=0.2))


def test_privatekt_reports_reach_most_of_a_correct_claim(digits):
    result = empirical_audit(_privatekt(5.0), *digits, num_canaries=4000, random_state=0, design="mechanism")
    assert result.details["design"] == "privatekt-reports" and result.unit == "party" and result.delta == 0.0
    assert result.claimed_epsilon == pytest.approx(5.0, abs=1e-3)
    assert result.guess_counts_tried == (result.num_guesses,)  # fixed in advance: no confidence split
    assert 0.6 * 5.0 < result.epsilon_lower and result.can_refute
    assert 0.6 * 5.0 < result.expected_lower_bound < 5.0 and result.expected_lower_bound_sd > 0


def test_privatekt_reports_refute_a_keep_probability_bug(digits, monkeypatch):
    from privfed.audit import mechanism_canaries as canaries

    original = canaries.perturb_labels

    def counted_twice(labels, *, keep_probability, num_classes, rng):  # bench/mutations/10
        return original(labels, keep_probability=keep_probability + (1 - keep_probability) / num_classes,
                        num_classes=num_classes, rng=rng)

    monkeypatch.setattr(canaries, "perturb_labels", counted_twice)
    result = empirical_audit(_privatekt(2.0), *digits, num_canaries=4000, random_state=0, design="mechanism")
    assert result.violation and result.epsilon_lower > result.expected_lower_bound + 3 * result.expected_lower_bound_sd


def test_fedkt_server_noisy_max_reaches_half_a_correct_claim(digits):
    result = empirical_audit(_fedkt(1.0), *digits, num_canaries=4000, random_state=0, design="mechanism")
    assert result.details["design"] == "fedkt-l1-queries" and result.unit == "party"
    assert result.claimed_epsilon == pytest.approx(4.0) and result.delta == 0.0  # 2sγ, pure
    assert 0.5 * 4.0 < result.epsilon_lower <= 4.0 and not result.violation


def test_fedkt_server_gaussian_noisy_max_is_audited_at_the_claims_delta(digits):
    model = FedKT(DecisionTreeClassifier(), n_partitions=2, n_teachers=3, privacy="L1", aggregator="gaussian",
                  sigma=4.0, random_state=0)
    result = empirical_audit(model, *digits, num_canaries=4000, random_state=0, design="mechanism")
    assert result.details["design"] == "fedkt-l1-queries" and result.delta == 1e-5  # no pure ε: (ε, δ) claim
    assert 0 < result.epsilon_lower < result.claimed_epsilon and result.can_refute and not result.violation


@pytest.mark.slow  # two DP-SGD runs and their PLD accounting (imports dp-accounting, Opacus): ~40 s
def test_gradient_canaries_refute_noise_divided_by_the_batch_size(digits, monkeypatch):
    import privfed.pipelines.models.dp_training as dp_training

    original = dp_training._secret_noise_optimizer

    def over_batch_size(optimizer, **kwargs):  # bench/mutations/13: σC/B instead of σC
        private = original(optimizer, **kwargs)
        private.noise_multiplier /= kwargs["expected_batch_size"]
        return private

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        correct = empirical_audit(_dpsgd(1.0), *digits, num_canaries=300, random_state=0, design="gradient",
                                  expected_repeats=2)
        monkeypatch.setattr(dp_training, "_secret_noise_optimizer", over_batch_size)
        broken = empirical_audit(_dpsgd(1.0), *digits, num_canaries=300, random_state=0, design="gradient",
                                 expected_repeats=0)
    assert correct.details["design"] == "dpsgd-gradient" and correct.unit == "example"
    assert correct.can_refute and not correct.violation and math.isfinite(correct.expected_lower_bound)
    assert broken.violation and broken.epsilon_lower > 1.0


def test_gradient_canary_score_is_the_likelihood_ratio():
    z = np.array([[0.0, 2.0], [1.0, -1.0], [3.0, 0.5]])
    centred = z - np.median(z, axis=0)
    assert gradient_canary_scores(z, sample_rate=1 - 1e-12, noise_multiplier=2.0) == pytest.approx(
        ((centred - 0.5) / 4.0).sum(axis=0), abs=1e-9)
    low_q = gradient_canary_scores(z, sample_rate=0.1, noise_multiplier=1.0)
    assert low_q[0] == pytest.approx(sum(np.log(0.9 + 0.1 * np.exp(c - 0.5)) for c in centred[:, 0]))


def test_guess_count_chosen_can_refute_the_claim():
    rng = np.random.default_rng(0)

    def coin(included, generator):  # an uninformative mechanism: no count does better than another
        return generator.random(len(included))

    r, _ = choose_guesses(coin, 1000, delta=0.0, confidence=0.95, rng=rng, claim=4.0)
    assert max_lower_bound(1000, num_guesses=r) > 4.0


@pytest.mark.parametrize("estimator, design", [(_fedkt(1.0), "gradient"), (_dpsgd(2.0), "mechanism"),
                                               (_privatekt(1.0), "bogus")])
def test_design_must_fit_the_estimator(digits, estimator, design):
    with pytest.raises(ValueError, match="design"):
        empirical_audit(estimator, *digits, num_canaries=10, design=design)


def test_the_cli_runs_a_mechanism_design_and_prints_the_expected_bound(tmp_path, capsys):
    from privfed.reports.config import ConfigError

    from privfed.audit.config import load_audit_config
    from privfed.cli import main

    example = (Path(__file__).resolve().parents[1] / "examples" / "audit_fedkt_l1.toml").read_text()
    config = tmp_path / "audit.toml"
    config.write_text(example.replace("num_canaries = 400", 'num_canaries = 2000\ndesign = "mechanism"'))
    assert load_audit_config(config).design == "mechanism"
    assert main(["audit", "--empirical", str(config)]) == 0
    printed = capsys.readouterr().out
    assert "fedkt-l1-queries" in printed and "from the stated mechanism on the same canaries" in printed
    config.write_text(example.replace("num_canaries = 400", 'num_canaries = 400\ndesign = "white-box"'))
    with pytest.raises(ConfigError, match="audit.design"):
        load_audit_config(config)
