"""A bug planted on purpose in a copy of a pipeline step: every arithmetic check passes, the empirical audit fails.

The bug: FedKT's server-side noisy vote (the Laplace noisy argmax of :mod:`privfed.pipelines.protocol.voting`) is
replaced by a copy written for votes *averaged* over the parties and applied to summed votes, which divides
the noise scale 1/γ by the number of parties twice. The ledger still records γ — its arithmetic is right
about the mechanism it was told about, so ``Ledger.verify`` and ``privfed.audit`` pass — while the labels the
final model learns carry 4× less noise than accounted (2 parties). Only an audit of the released labels sees it.
"""

from __future__ import annotations

import numpy as np
import pytest
from privfed.pipelines.fedkt import steps as fedkt_steps
from privfed.pipelines.protocol.voting import noisy_labels
from sklearn.datasets import make_classification
from sklearn.tree import DecisionTreeClassifier

from privfed import FedKT, audit, empirical_audit, save_bundle

N_PARTIES = 2


def _noisy_labels_divided_by_parties_twice(votes, rng, *, gamma=None, sigma=None):
    """The buggy copy: Laplace scale 1/γ / parties / parties (un-noised votes, the teachers', as before)."""
    if gamma is None:
        return noisy_labels(votes, rng, sigma=sigma)
    votes = np.asarray(votes, dtype=float)
    scale = 1.0 / gamma / N_PARTIES / N_PARTIES
    return np.argmax(votes + rng.laplace(0.0, scale, size=votes.shape), axis=1)


@pytest.fixture(scope="module")
def federation():
    X, y = make_classification(n_samples=1600, n_features=8, n_informative=5, n_classes=2, random_state=3)
    parties = [(X[i * 300:(i + 1) * 300], y[i * 300:(i + 1) * 300]) for i in range(N_PARTIES)]
    return parties, X[600:1400]


def _model() -> FedKT:
    return FedKT(DecisionTreeClassifier(max_depth=4), n_partitions=2, n_teachers=3, privacy="L1", gamma=0.25,
                 random_state=0)


def test_the_audit_flags_the_planted_bug_while_the_arithmetic_checks_pass(federation, monkeypatch, tmp_path):
    parties, public = federation
    monkeypatch.setattr(fedkt_steps, "noisy_labels", _noisy_labels_divided_by_parties_twice)

    fitted = _model().fit(parties, public)
    assert fitted.ledger_.verify() > 0  # the recorded curves rebuild exactly from their parameters
    report = audit(save_bundle(fitted.final_model_, tmp_path / "bundle", fitted.ledger_))
    assert report.passed and not report.failed  # privfed's audit of the bundle finds nothing wrong

    result = empirical_audit(_model(), parties, public, num_canaries=800, random_state=0)
    # Claimed for one canary's query: 2kγ = 1 (k = s = 2); the labels really carry the noise of γ = 1, whose one
    # binary label at a tie moved by 2 votes has ε = 1.86.
    assert result.claimed_epsilon == pytest.approx(1.0, rel=1e-6)
    assert result.violation and result.epsilon_lower > 1.2


def test_the_same_audit_of_the_correct_step_finds_no_violation(federation):
    parties, public = federation
    result = empirical_audit(_model(), parties, public, num_canaries=800, random_state=0)
    assert result.claimed_epsilon == pytest.approx(1.0, rel=1e-6)
    assert not result.violation and result.epsilon_lower < 0.7


def test_the_command_line_exits_1_on_the_planted_bug(monkeypatch, capsys):
    from pathlib import Path

    from privfed.cli.main import main

    monkeypatch.setattr(fedkt_steps, "noisy_labels", _noisy_labels_divided_by_parties_twice)
    config = Path(__file__).resolve().parents[1] / "examples" / "audit_fedkt_l1.toml"
    assert main(["audit", "--empirical", str(config)]) == 1
    assert "verdict       FAIL: the lower bound exceeds the claim" in capsys.readouterr().out
