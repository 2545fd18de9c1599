"""ε per observer for every pipeline: who sees what, and which observer's ε is finite (issue #31).

The table below is the contract: for each pipeline and privacy mode, whether the public's and the coordinator's
ε is finite, and why. "inf" means the observer sees a release that no mechanism covers (the reason names it);
the test checks both the value and that ``report.uncovered`` names the reason.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from conftest import digits_federation
from privfed.accounting import OBSERVERS
from sklearn.linear_model import LogisticRegression
from sklearn.tree import DecisionTreeClassifier

from privfed import (
    DPConfig,
    FedKD,
    FedKT,
    FedMD,
    IndependentLearning,
    PrivateKT,
    SelectiveFD,
    TorchMLP,
)

CLASSES = list(range(10))


def _fedkt(**options):
    return FedKT(LogisticRegression(max_iter=200), n_partitions=1, n_teachers=2, query_fraction=0.5,
                 local_query_fraction=0.5, random_state=0, **options)


def _mlp(**options):
    return TorchMLP(hidden=(16,), epochs=2, batch_size=64, lr=1e-2, random_state=0, **options)


_FD = dict(rounds=2, local_steps=2, distill_steps=5, proxy_batch=100, random_state=0)

#: (name, estimator factory, fit with public?, public: finite?, coordinator: finite?, what an infinite ε names:
#: one text for both observers, or (public's, coordinator's))
TABLE = [
    ("FedKT-L0", lambda: _fedkt(), True, False, False, "no noise is added anywhere"),
    ("FedKT-L1", lambda: _fedkt(privacy="L1", gamma=0.5), True, True, False, "students' predictions"),
    ("FedKT-L2", lambda: _fedkt(privacy="L2", gamma=0.5), True, True, False, "schema exchange"),
    ("FedKT-L2, public classes", lambda: _fedkt(privacy="L2", gamma=0.5, classes=CLASSES), True, True, True, ""),
    ("FedKT-L1, secure aggregation", lambda: _fedkt(privacy="L1", aggregator="skellam", secure_aggregation=True,
                                                    sigma=3.0), True, True, False, "schema exchange"),
    ("FedKT-L1, secure aggregation, public classes",
     lambda: _fedkt(privacy="L1", aggregator="skellam", secure_aggregation=True, sigma=3.0, classes=CLASSES),
     True, True, True, ""),
    ("FedKD", lambda: FedKD(LogisticRegression(max_iter=200), DecisionTreeClassifier(max_depth=6),
                            quantization_scale=20, random_state=0), True, True, False, "quantized logits"),
    ("FedKD, no noise", lambda: FedKD(LogisticRegression(max_iter=200), DecisionTreeClassifier(max_depth=6),
                                      gamma=None, quantization_scale=20, random_state=0), True, False, False,
     "without noise"),
    ("PrivateKT", lambda: PrivateKT(_mlp(), epsilon_per_round=4.0, queries_per_round=10, buffer_rounds=2,
                                    self_training_size=20, rounds=2, local_epochs=1, random_state=0),
     True, True, False, "schema exchange"),
    ("Selective-FD, no noise", lambda: SelectiveFD(_mlp(), n_auxiliary=60, max_known=60, **_FD), True, False, False,
     "no noise is added at all"),
    ("Selective-FD, GNMax", lambda: SelectiveFD(_mlp(), labels="hard", privacy="gnmax", sigma=2.0, tau_client=None,
                                                tau_server=2.0, **_FD),
     True, False, False, ("client 0's own", "before it adds noise")),
    ("FedMD", lambda: FedMD(_mlp(), **_FD), True, False, False, "no noise is added at all"),
    ("Independent learning", lambda: IndependentLearning(_mlp(), rounds=2, local_steps=2, random_state=0), False,
     False, False, ("nothing is shared", "schema exchange")),
]


@pytest.fixture(scope="module")
def federation():
    parties, public, _ = digits_federation(3)
    return parties, public


@pytest.mark.parametrize(("name", "make", "with_public", "public_finite", "coordinator_finite", "reason"), TABLE,
                         ids=[row[0] for row in TABLE])
def test_epsilon_per_observer(federation, one_torch_thread, name, make, with_public, public_finite,
                              coordinator_finite, reason):
    parties, public = federation
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small settings: FedKT warns that the final model has little to learn
        model = make().fit(parties, public) if with_public else make().fit(parties)
    reports = {observer: model.ledger_.account(delta=1e-5, observer=observer) for observer in OBSERVERS}
    reasons = dict(zip(OBSERVERS, (reason, reason) if isinstance(reason, str) else reason))
    for observer, finite in (("public", public_finite), ("coordinator", coordinator_finite)):
        report = reports[observer]
        assert report.observer == observer
        assert math.isfinite(report.epsilon) == finite, (name, observer, report.uncovered)
        if finite:
            assert not report.uncovered
        else:
            assert report.epsilon == math.inf
            assert any(reasons[observer] in text for text in report.uncovered), (name, observer, report.uncovered)
    # Post-processing: the public never gets a larger ε than the coordinator where it sees only what the
    # coordinator computes (every pipeline here but Selective-FD's own client model).
    if all(entry.seen_by("coordinator") for entry in model.ledger_.entries if entry.seen_by("public")):
        assert reports["public"].epsilon <= reports["coordinator"].epsilon


def test_fedkt_l2_sends_nothing_un_noised_and_its_coordinator_epsilon_is_its_noisy_max(federation):
    parties, public = federation
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = _fedkt(privacy="L2", gamma=0.5, classes=CLASSES).fit(parties, public)
    kinds = set(model.bandwidth_)
    assert kinds == {"party-schema", "fedkt-votes"}  # no evidence message
    coordinator = model.ledger_.account(delta=1e-5, unit="example", observer="coordinator")
    public_report = model.ledger_.account(delta=1e-5, unit="example")
    assert math.isfinite(coordinator.epsilon) and not coordinator.data_dependent
    assert coordinator.epsilon == public_report.epsilon
    assert [row.kind for row in coordinator.mechanisms] == ["parallel_composition"]
    assert model.evidence_ == {}  # nothing private was received, so nothing is kept
    # k = 1 covers one example added or removed (one keyed teacher per partition), not a replacement (two);
    # a whole party's k = t covers both.
    assert coordinator.relations == ("add_or_remove_one",) and "(added or removed)" in coordinator.relation
    party = model.ledger_.account(delta=1e-5, unit="party", observer="coordinator")
    assert party.relations == ("add_or_remove_one", "replace_one")


def test_fedkd_with_dp_local_models_reports_a_meaningful_example_level_epsilon_by_default(federation,
                                                                                        one_torch_thread):
    parties, public = federation
    dp = DPConfig(noise_multiplier=1.1, max_grad_norm=1.0, delta=1e-5, sample_rate=0.1)
    model = FedKD(_mlp(dp=dp), DecisionTreeClassifier(max_depth=6), quantization_scale=20, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(parties, public)
    assert model.weighting_ == "uniform"  # "auto" with DP-trained local models: no class counts are sent
    report = model.ledger_.account(delta=1e-5, unit="example")
    assert report.source == "dpsgd" and not report.uncovered and report.epsilon < 20
    # The coordinator sees the logits of the DP-trained models (post-processing) and, in clear, only the schema.
    coordinator = model.ledger_.account(delta=1e-5, unit="example", observer="coordinator")
    assert len(coordinator.uncovered) == 1 and "schema exchange" in coordinator.uncovered[0]


def test_account_states_the_observer_and_refuses_an_unknown_one():
    import privfed

    mechanism = privfed.LaplaceNoisyMax(np.array([[9, 1], [7, 3]]), 0.05)
    assert privfed.account(mechanism, delta=1e-5).observer is None
    assert privfed.account(mechanism, delta=1e-5, observer="coordinator").observer == "coordinator"
    with pytest.raises(ValueError, match="observer must be one of public, coordinator, got 'server'"):
        privfed.account(mechanism, delta=1e-5, observer="server")
