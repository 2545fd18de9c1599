"""Pipeline audits: canaries through FedKT (L1 parties, L2 examples), PrivateKT's reports and DP-SGD training.

Each audit must stay below a correct pipeline's claim and reach a clearly positive bound where the canary
design is strong (FedKT-L1's canary parties, PrivateKT's canary clients), in one run of a few seconds.
"""

from __future__ import annotations

import json
import math
import warnings

import pytest
from sklearn.datasets import make_classification
from sklearn.tree import DecisionTreeClassifier

import privfed
from privfed import DPConfig, FedKT, PrivateKT, TorchMLP
from privfed.audit.empirical_pipelines import empirical_audit


@pytest.fixture(scope="module")
def federation():
    X, y = make_classification(n_samples=2400, n_features=8, n_informative=5, n_classes=2, random_state=0)
    parties = [(X[i * 200:(i + 1) * 200], y[i * 200:(i + 1) * 200]) for i in range(4)]
    return parties, X[800:1600]


def _fedkt_l1(gamma: float) -> FedKT:
    return FedKT(DecisionTreeClassifier(max_depth=4), n_partitions=2, n_teachers=3, privacy="L1", gamma=gamma,
                 random_state=0)


def _binary_label_epsilon(gamma: float, shift: int) -> float:
    """Exact ε of one Laplace noisy argmax of two tied counts when one party moves ``shift`` votes between them.

    The difference of two Laplace(b) draws exceeds d ≥ 0 with probability ½e^(−d/b)(1 + d/(2b)); the label is
    the runner-up with probability p = that at d = shift out, 1 − p in: ε = log((1 − p)/p).
    """
    b = 1 / gamma
    p = 0.5 * math.exp(-shift / b) * (1 + shift / (2 * b))
    return math.log((1 - p) / p)


def test_fedkt_l1_canary_parties_reach_the_noisy_label_epsilon_and_stay_below_the_claim(federation):
    parties, public = federation
    result = empirical_audit(_fedkt_l1(0.5), parties, public, num_canaries=800, random_state=0)
    assert (result.unit, result.details["design"], result.num_canaries, result.runs) == ("party", "fedkt-l1", 800, 1)
    # The ledger's claim for one canary's query: Laplace noisy max with k = s = 2 votes, 2kγ = 2.
    assert result.claimed_epsilon == pytest.approx(2.0, rel=1e-6)
    assert result.details["ledger_epsilon"] > 100 * result.claimed_epsilon  # 800 queries composed
    assert not result.violation
    # One binary label of a tie moved by 2 votes each way (replace-one): its exact ε is 0.96 at γ = 0.5.
    # The audit reaches a clear part of it, never more than the level allows (measured below for false alarms).
    assert 0.4 < result.epsilon_lower <= _binary_label_epsilon(0.5, 2) + 0.2
    assert "canary parties" in result.threat_model and result.details["seconds"] > 0


def test_fedkt_l2_example_canaries_run_and_stay_below_the_example_level_claim(federation):
    parties, public = federation
    model = FedKT(DecisionTreeClassifier(), n_partitions=2, n_teachers=3, privacy="L2", gamma=1.0,
                  local_query_fraction=0.4, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = empirical_audit(model, parties, public, num_canaries=200, random_state=0)
    assert (result.unit, result.details["design"]) == ("example", "fedkt-l2")
    assert result.claimed_epsilon == result.details["ledger_epsilon"] > 10
    assert not result.violation and result.epsilon_lower < 0.1 * result.claimed_epsilon


@pytest.mark.parametrize("epsilon", [2.0, 5.0])
def test_privatekt_canary_clients_audit_the_report_tightly(federation, epsilon):
    parties, public = federation
    model = PrivateKT(DecisionTreeClassifier(max_depth=3), epsilon_per_round=epsilon, queries_per_round=2, rounds=1)
    result = empirical_audit(model, parties, public, num_canaries=600, random_state=0)
    assert (result.unit, result.details["design"]) == ("party", "privatekt")
    assert result.claimed_epsilon == pytest.approx(epsilon, rel=1e-3)
    assert not result.violation and result.epsilon_lower >= 0.5 * epsilon


def test_privatekt_with_a_torch_model_trains_the_canary_clients_together(federation):
    parties, public = federation
    model = PrivateKT(TorchMLP(hidden=(16,), epochs=5), epsilon_per_round=5.0, queries_per_round=2, local_epochs=3)
    result = empirical_audit(model, parties, public, num_canaries=300, random_state=0)
    # Each canary client's network learns its one class well enough for its report to carry it.
    assert not result.violation and result.epsilon_lower > 0.5


def test_privatekt_audit_catches_a_report_randomized_with_too_little_noise(federation, monkeypatch):
    # A copy of the randomizer that keeps each label with the probability meant for a 3× larger ε.
    from privfed.accounting import randomized_response_keep_probability
    from privfed.pipelines.privatekt import steps as privatekt_steps

    original = privatekt_steps.perturb_labels

    def leaky(labels, *, keep_probability, num_classes, rng):
        epsilon = 2 * math.log(1 + num_classes * keep_probability / (1 - keep_probability))  # K = 2 labels
        keep = randomized_response_keep_probability(3 * epsilon, num_classes=num_classes, labels_per_report=2)
        return original(labels, keep_probability=keep, num_classes=num_classes, rng=rng)

    monkeypatch.setattr(privatekt_steps, "perturb_labels", leaky)
    parties, public = federation
    model = PrivateKT(DecisionTreeClassifier(max_depth=3), epsilon_per_round=1.0, queries_per_round=2, rounds=1)
    result = empirical_audit(model, parties, public, num_canaries=600, random_state=0)
    assert result.violation and result.epsilon_lower > 1.5


def test_dpsgd_black_box_canaries_stay_below_the_training_epsilon(federation):
    parties, public = federation
    model = TorchMLP(hidden=(16,), epochs=2, batch_size=32, lr=0.05, random_state=0,
                     dp=DPConfig(noise_multiplier=1.0, max_grad_norm=1.0, delta=1e-5))
    result = empirical_audit(model, parties[:1], public, num_canaries=60, random_state=0)
    assert (result.unit, result.details["design"]) == ("example", "dpsgd")
    assert result.claimed_epsilon == result.details["ledger_epsilon"] > 0
    assert not result.violation and "black-box" in result.threat_model


def test_public_name():
    assert privfed.empirical_audit is empirical_audit


@pytest.mark.parametrize(("estimator", "kwargs", "error", "match"), [
    (FedKT(DecisionTreeClassifier(), privacy="L0"), {}, ValueError, "L0"),
    (FedKT(DecisionTreeClassifier(), privacy="L1", gamma=0.1, target_epsilon=5.0), {}, ValueError, "target_epsilon"),
    (FedKT(DecisionTreeClassifier(), privacy="L1", gamma=0.1, consistent_voting=False), {}, ValueError,
     "consistent_voting"),
    (DecisionTreeClassifier(), {}, TypeError, "estimator"),
    (FedKT(DecisionTreeClassifier(), privacy="L1", gamma=0.1), {"num_canaries": 1}, ValueError, "num_canaries"),
    (FedKT(DecisionTreeClassifier(), privacy="L1", gamma=0.1), {"num_canaries": 10_000}, ValueError, "num_canaries"),
    (FedKT(DecisionTreeClassifier(), privacy="L1", gamma=0.1), {"confidence": 1.5}, ValueError, "confidence"),
])
def test_bad_input_is_refused_before_any_training(federation, estimator, kwargs, error, match):
    parties, public = federation
    with pytest.raises(error, match=match):
        empirical_audit(estimator, parties, public, **{"num_canaries": 10, **kwargs})


def test_the_docs_tables_are_the_rendering_of_the_committed_raw_results():
    import importlib.util
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("_bench_empirical_audit", root / "bench" / "empirical_audit.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    raw = json.loads((root / "bench" / "results" / "empirical_audit.json").read_text(encoding="utf-8"))
    rendered = bench.table(raw["rows"])
    for doc in ("results.md", "audit.md"):
        assert rendered in (root / "docs" / doc).read_text(encoding="utf-8"), doc
    statistics = raw["audit_release_statistics"]
    assert statistics["planted_bug_laplace_true3_claimed1_m1000"]["caught"] == 400
    assert statistics["false_alarm_rate_laplace_eps1_m1000"]["violations"] <= 0.05 * 400


def test_the_model_card_records_an_audit_and_the_bundle_still_audits(federation, tmp_path):
    from privfed import audit, save_bundle

    parties, public = federation
    result = empirical_audit(_fedkt_l1(0.5), parties, public, num_canaries=400, random_state=0)
    fitted = _fedkt_l1(0.5).fit(parties, public)
    bundle = save_bundle(fitted, tmp_path / "bundle", audit_result=result)
    card = (bundle / "MODEL_CARD.md").read_text(encoding="utf-8")
    recorded = json.loads((bundle / "card.json").read_text(encoding="utf-8"))["empirical_audit"]
    assert recorded["epsilon_lower"] == result.epsilon_lower and recorded["design"] == "fedkt-l1"
    assert "## Empirical audit" in card and f"{math.floor(result.epsilon_lower * 1000) / 1000:.3f} at 95%" in card
    from privfed.accounting.report import round_up

    # the Laplace noisy max is pure ε-DP: audited at δ = 0 against its pure ε
    assert f"claimed ε it was judged against: {round_up(result.claimed_epsilon)} at δ = 0" in card
    # the f-DP estimate on the same guesses: μ recorded, and no ε at δ = 0 (a Gaussian curve has none there)
    assert recorded["gdp_mu_lower"] == result.gdp_mu_lower and recorded["gdp_epsilon_lower"] is None
    assert f"Gaussian-DP μ ≥ {math.floor(result.gdp_mu_lower * 1000) / 1000:.3f}; no ε at this δ" in card
    report = audit(bundle)
    assert report.passed and not report.failed  # the card is still exactly the rendering of its covered files
    plain = (save_bundle(fitted, tmp_path / "plain") / "MODEL_CARD.md").read_text(encoding="utf-8")
    assert "Empirical audit" not in plain  # no section without an audit: earlier bundles' cards render unchanged
    with pytest.raises(TypeError, match="audit_result"):
        save_bundle(fitted, tmp_path / "bad", audit_result={"epsilon_lower": 1.0})


def test_fedkt_skellam_under_secure_aggregation_is_audited_through_the_parties_shares(federation):
    """The issue's false alarm (10 of 10): the audit drew no Skellam share and audited an un-noised argmax. The
    canary parties now add their shares with the parties' own code and the server sees only the sum."""
    parties, public = federation
    model = FedKT(DecisionTreeClassifier(max_depth=4), n_partitions=2, n_teachers=3, privacy="L1",
                  aggregator="skellam", secure_aggregation=True, sigma=4.0, random_state=0)
    results = [empirical_audit(model, parties, public, num_canaries=800, random_state=seed) for seed in range(3)]
    for result in results:
        assert result.details["design"] == "fedkt-l1" and result.delta == model.delta  # Skellam: not pure
        assert not result.violation and result.can_refute
    assert max(result.epsilon_lower for result in results) > 0  # the canaries still move the noisy labels
