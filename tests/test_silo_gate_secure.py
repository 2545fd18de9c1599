"""A silo's budget under secure aggregation: each party charges its own Skellam share (the coordinator colluding with
every other party), an upper bound on what the run's ledger records for it whoever contributes; an over-budget silo
refuses and the run goes on without it, its share absent from the sum and from the accounting."""

from __future__ import annotations

import math

import numpy as np
import pytest
from privfed.pipelines.fedkd import estimator as fedkd_module
from privfed.pipelines.fedkd.secure import own_share_release as fedkd_own_share
from privfed.pipelines.fedkt import estimator as fedkt_module
from privfed.pipelines.fedkt.secure import own_share_release as fedkt_own_share
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.tree import DecisionTreeClassifier

import privfed

pytestmark = pytest.mark.filterwarnings("ignore:.*(NEAR CHANCE|little to learn|drown).*:UserWarning")

DELTA = 1e-5


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    parties = [(X[i:900:3], y[i:900:3]) for i in range(3)]
    return parties, X[900:1000]


def budgets(tmp_path, epsilons, unit="example"):
    return [privfed.SiloBudget(tmp_path / f"silo{i}.jsonl", epsilon=e, delta=DELTA, unit=unit)
            for i, e in enumerate(epsilons)]


def secure_fedkt(**kwargs):
    return privfed.FedKT(DecisionTreeClassifier(max_depth=4), n_partitions=2, n_teachers=2, privacy="L1",
                         aggregator="skellam", secure_aggregation=True, sigma=40.0, query_fraction=0.2,
                         classes=np.arange(10), random_state=0, **kwargs)


def secure_fedkd(**kwargs):
    return privfed.FedKD(LogisticRegression(max_iter=100), DecisionTreeClassifier(max_depth=4), gamma=None,
                         aggregator="skellam", secure_aggregation=True, sigma=40.0, clip=4.0, quantization_scale=1,
                         classes=np.arange(10), random_state=0, **kwargs)


def skellam_variances(model):
    """The party-level Skellam entries' variances, by the one observer each is recorded for."""
    return {observer: entry.analyses["party"].parameters["variance"] for entry in model.ledger_.entries
            if entry.kind == "release" and entry.analyses.get("party") and entry.analyses["party"].kind == "skellam"
            for observer in entry.observers}


def ledger_epsilons(model, unit):
    return {observer: model.ledger_.account(DELTA, unit=unit, observer=observer).epsilon
            for observer in ("coordinator", "public")}


@pytest.mark.parametrize("unit", ["example", "party"])
@pytest.mark.parametrize("collusion", [None, 0])
def test_fedkt_secure_silo_charges_its_own_share_at_least_what_the_ledger_records(digits, tmp_path, unit,
                                                                                 collusion) -> None:
    parties, public = digits
    silos = budgets(tmp_path, [1000.0] * 3, unit=unit)
    model = secure_fedkt(collusion=collusion).fit(parties, public, budgets=silos, study="icu-2027")
    assert model.refused_ == []
    recorded = ledger_epsilons(model, unit)
    assert all(math.isfinite(e) and e > 0 for e in recorded.values())
    for silo in silos:
        (charge,) = silo.charges
        assert charge.mechanism["kind"] == "skellam" and charge.mechanism["unit"] == "party"
        parameters = charge.mechanism["parameters"]
        # Its own share σ²/n on each final query's histogram, one party moving s = 2 votes at 2 counts.
        assert parameters["variance"] == pytest.approx(40.0 ** 2 / 3)
        assert parameters["count"] == model.n_queries_answered_ and parameters["l1_sensitivity"] == 4.0
        for observer, epsilon in recorded.items():
            assert silo.spent(observer=observer) >= epsilon
    # The charge is the coordinator's entry under full collusion, at any δ the silo's filter would convert at.
    own = fedkt_own_share(_fedkt_task(model, n_parties=3))
    if collusion is None:
        assert privfed.account(own, delta=DELTA).epsilon == pytest.approx(recorded["coordinator"], rel=1e-6)
    else:  # colluding with none, the coordinator sees every share: the charge over-counts, as a bound may
        assert privfed.account(own, delta=DELTA).epsilon > recorded["coordinator"]


def _fedkt_task(model, *, n_parties):
    """The public parameters of one party's secure FedKT task, as the fit sent them."""
    from privfed.pipelines.fedkt.steps import FedKTTask

    return FedKTTask(queries=np.zeros((1, 1)), classes=np.arange(10), n_local_queries=1,
                     n_final_queries=model.n_queries_answered_, n_partitions=2, n_teachers=2, seed=0,
                     party_noise="skellam", noise_scale=model.sigma ** 2 / n_parties, target_epsilon=math.nan,
                     delta=DELTA)


def test_fedkt_secure_over_budget_silo_refuses_and_the_sum_is_accounted_without_its_share(
        digits, tmp_path, monkeypatch) -> None:
    parties, public = digits
    ran = []
    step = fedkt_module.fedkt_party_step
    monkeypatch.setattr(fedkt_module, "fedkt_party_step",
                        lambda task, X, y, **kw: ran.append(kw["party"]) or step(task, X, y, **kw))
    silos = budgets(tmp_path, [1000.0, 0.1, 1000.0])
    model = secure_fedkt().fit(parties, public, budgets=silos)
    assert ran == ["party 0", "party 2"]  # the refusing silo never ran its step
    assert [(r.party, r.round) for r in model.refused_] == [(1, 1)] and "0.1" in model.refused_[0].reason
    assert silos[1].charges == ()
    # Two of three shares σ²/3 arrived: the public's release carries 2σ²/3, not σ² (the shares were sized for 3).
    assert skellam_variances(model) == {"public": pytest.approx(2 * 40.0 ** 2 / 3),
                                        "coordinator": pytest.approx(40.0 ** 2 / 3)}
    for silo in (silos[0], silos[2]):
        assert silo.spent(observer="coordinator") >= ledger_epsilons(model, "example")["coordinator"]


@pytest.mark.parametrize("unit", ["example", "party"])
def test_fedkd_secure_silo_charges_its_own_share_at_least_what_the_ledger_records(digits, tmp_path, unit) -> None:
    parties, public = digits
    silos = budgets(tmp_path, [1000.0] * 3, unit=unit)
    public = public[:40]
    model = secure_fedkd().fit(parties, public, budgets=silos)
    assert model.refused_ == []
    recorded = ledger_epsilons(model, unit)
    assert all(math.isfinite(e) and e > 0 for e in recorded.values())
    for silo in silos:
        (charge,) = silo.charges
        parameters = charge.mechanism["parameters"]
        assert charge.mechanism["kind"] == "skellam" and charge.mechanism["unit"] == "party"
        # Levels in [−S, S], S = 1: 2S on each of the C = 10 coordinates per public example, whatever the data.
        assert parameters["variance"] == pytest.approx(40.0 ** 2 / 3) and parameters["count"] == len(public)
        assert (parameters["l1_sensitivity"], parameters["coordinate_sensitivity"]) == (20.0, 2)
        for observer, epsilon in recorded.items():
            assert silo.spent(observer=observer) >= epsilon


def test_fedkd_secure_over_budget_silo_refuses_and_the_run_goes_on(digits, tmp_path, monkeypatch) -> None:
    parties, public = digits
    ran = []
    step = fedkd_module.fedkd_party_step
    monkeypatch.setattr(fedkd_module, "fedkd_party_step",
                        lambda task, X, y, **kw: ran.append(kw["party"]) or step(task, X, y, **kw))
    silos = budgets(tmp_path, [1000.0, 1000.0, 0.1])
    model = secure_fedkd().fit(parties, public[:40], budgets=silos)
    assert ran == ["party 0", "party 1"] and [r.party for r in model.refused_] == [2]
    assert silos[2].charges == ()
    assert skellam_variances(model) == {"public": pytest.approx(2 * 40.0 ** 2 / 3),
                                        "coordinator": pytest.approx(40.0 ** 2 / 3)}
    assert model.predict(public[:5]).shape == (5,)


def test_fedkd_secure_without_a_public_grid_is_refused_in_one_line() -> None:
    from privfed.pipelines.fedkd.steps import FedKDTask

    task = FedKDTask(public=np.zeros((3, 2)), classes=np.arange(2), multilabel=False, clip=math.nan,
                     quantization_scale=0, seed=0, send_class_counts=False, skellam_share_variance=1.0)
    assert "no public bound" in fedkd_own_share(task)
