"""Each silo's own budget, enforced in its party steps: charged before the data is touched, or a refusal."""

from __future__ import annotations

import numpy as np
import pytest
from privfed.pipelines.fedkt import estimator as fedkt_module
from privfed.pipelines.fedkt.estimator import FedKT
from privfed.pipelines.privatekt import estimator as privatekt_module
from privfed.pipelines.privatekt.estimator import PrivateKT
from privfed.pipelines.protocol.silo_gate import BudgetRefusal, RefusedRunError
from sklearn.datasets import load_digits
from sklearn.tree import DecisionTreeClassifier

import privfed

#: The study's public label set (digits): a silo's budget refuses a study without one (the schema step would
#: send its size and labels in the clear).
CLASSES = np.arange(10)

pytestmark = pytest.mark.filterwarnings("ignore:.*(NEAR CHANCE|little to learn):UserWarning")


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    parties = [(X[i:900:3], y[i:900:3]) for i in range(3)]
    return parties, X[900:1100]


def budgets(tmp_path, epsilons):
    return [privfed.SiloBudget(tmp_path / f"silo{i}.jsonl", epsilon=e, delta=1e-5) for i, e in enumerate(epsilons)]


def fedkt_l2(**kwargs):
    return FedKT(DecisionTreeClassifier(max_depth=6), n_partitions=2, n_teachers=2, privacy="L2", gamma=0.5,
                 local_query_fraction=0.1, query_fraction=0.5, classes=CLASSES, random_state=0, **kwargs)


def test_fedkt_silo_over_budget_refuses_before_its_data_is_touched(digits, tmp_path, monkeypatch) -> None:
    parties, public = digits
    ran = []
    step = fedkt_module.fedkt_party_step
    monkeypatch.setattr(fedkt_module, "fedkt_party_step",
                        lambda task, X, y, **kw: ran.append(kw["party"]) or step(task, X, y, **kw))
    silos = budgets(tmp_path, [1000.0, 0.5, 1000.0])
    model = fedkt_l2().fit(parties, public, budgets=silos, study="icu-2027")
    assert ran == ["party 0", "party 2"]  # the refusing silo never ran its step
    assert [(r.party, r.round) for r in model.refused_] == [(1, 1)]
    assert "exceed" in model.refused_[0].reason or "budget" in model.refused_[0].reason
    assert model.students_[1] == [] and model.party_votes_[1] is None
    assert len(model.n_local_queries_answered_) == 2
    # The ledger files record the charges that happened, and only those.
    assert silos[1].charges == ()
    for silo in (silos[0], silos[2]):
        (charge,) = silo.charges
        assert (charge.study, charge.pipeline) == ("icu-2027", "fedkt")
        assert charge.mechanism["kind"] == "withheld_votes_noisy_max"
        assert silo.spent() > 0


def test_refusal_carries_no_data_derived_content() -> None:
    record = BudgetRefusal("fedkt: over budget").to_record()
    assert dict(record.arrays) == {} and set(record.scalars) == {"reason"}


def test_fedkt_every_silo_refusing_raises_naming_them(digits, tmp_path) -> None:
    parties, public = digits
    with pytest.raises(RefusedRunError, match=r"party 0 \(round 1\).*party 1 \(round 1\).*party 2"):
        fedkt_l2().fit(parties, public, budgets=budgets(tmp_path, [0.5] * 3))


def test_fedkt_l1_is_refused_by_a_silo_with_a_budget(digits, tmp_path) -> None:
    parties, public = digits
    silos = [None, privfed.SiloBudget(tmp_path / "silo.jsonl", epsilon=1000.0, delta=1e-5), None]
    model = FedKT(DecisionTreeClassifier(max_depth=6), n_partitions=2, n_teachers=2, privacy="L1", gamma=0.5,
                  query_fraction=0.5, classes=CLASSES, random_state=0).fit(parties, public, budgets=silos)
    assert [r.party for r in model.refused_] == [1] and "un-noised" in model.refused_[0].reason
    assert silos[1].charges == ()


def test_budgets_must_match_the_parties(digits) -> None:
    parties, public = digits
    with pytest.raises(ValueError, match="one SiloBudget or None per party"):
        fedkt_l2().fit(parties, public, budgets=[None])


def privatekt(**kwargs):
    return PrivateKT(DecisionTreeClassifier(max_depth=6), epsilon_per_round=2.0, queries_per_round=20,
                     buffer_rounds=4, self_training_size=40, rounds=4, client_fraction=1.0, classes=CLASSES,
                     random_state=0, **kwargs)


def test_privatekt_silo_stops_at_the_round_that_would_exceed(digits, tmp_path, monkeypatch) -> None:
    parties, public = digits
    ran = []
    step = privatekt_module.privatekt_party_step
    monkeypatch.setattr(privatekt_module, "privatekt_party_step",
                        lambda task, X, y, **kw: ran.append(kw["party"]) or step(task, X, y, **kw))
    silos = budgets(tmp_path, [1000.0, 1.8, 1000.0])
    model = privatekt().fit(parties, public, budgets=silos, study="icu-2027")
    # The filter's ε after 1, 2, 3 rounds is 1.20, 1.66, 2.01: party 1's budget of 1.8 refuses round 3, then it stops.
    assert [(r.party, r.round) for r in model.refused_] == [(1, 3)]
    assert ran.count("party 1") == 2 and ran.count("party 0") == ran.count("party 2") == 4
    assert model.participation_.tolist() == [4, 2, 4]
    assert [c.mechanism["kind"] for c in silos[1].charges] == ["randomized_response"] * 2
    assert len(silos[0].charges) == 4 and 1.6 < silos[1].spent() <= 1.8


def test_privatekt_every_client_stopping_raises(digits, tmp_path) -> None:
    parties, public = digits
    with pytest.raises(RefusedRunError, match="every client has stopped.*party 0 \\(round 1\\)"):
        privatekt().fit(parties, public, budgets=budgets(tmp_path, [1.0] * 3))


def test_fedkd_silo_charges_its_models_dp_sgd_or_refuses(tmp_path, one_torch_thread) -> None:
    pytest.importorskip("opacus")
    from conftest import digits_federation

    parties, public, _ = digits_federation(3)
    dp = privfed.DPConfig(noise_multiplier=1.0, max_grad_norm=1.0, delta=1e-5, sample_rate=0.1)

    def mlp(dp=dp):
        return privfed.TorchMLP(hidden=(16,), epochs=1, batch_size=32, lr=0.05, optimizer="sgd", dp=dp)

    silos = budgets(tmp_path, [1000.0, 0.5, 1000.0])
    model = privfed.FedKD([mlp(), mlp(), mlp(dp=None)], mlp(dp=None), gamma=1.0, clip=4.0, quantization_scale=20,
                          weighting="uniform", classes=CLASSES, random_state=0).fit(parties, public, budgets=silos)
    # Party 1's DP-SGD does not fit ε = 0.5; party 2's model is not DP-trained: its logits would reach the
    # coordinator un-noised. Only party 0 took part, charged its training's public parameters.
    assert [r.party for r in model.refused_] == [1, 2] and "not DP-trained" in model.refused_[1].reason
    (charge,) = silos[0].charges
    assert charge.mechanism["kind"] == "dpsgd" and charge.mechanism["parameters"]["steps"] == 10
    assert silos[1].charges == silos[2].charges == ()
    assert model.predict(public[:5]).shape == (5,)  # the run went on with party 0


def rr_fd(tau_client=None, **kwargs):
    return privfed.SelectiveFD(DecisionTreeClassifier(max_depth=4), rounds=3, proxy_batch=40, labels="hard",
                               privacy="rr", epsilon_per_round=1.0, tau_client=tau_client, classes=CLASSES,
                               random_state=0, **kwargs)


def test_selective_fd_charges_each_round_and_a_silo_stops_at_the_round_that_would_exceed(
        digits, tmp_path, monkeypatch) -> None:
    import privfed.pipelines.selective_fd.local_clients as selective_fd_clients

    parties, public = digits
    ran = []
    step = selective_fd_clients.share_step
    monkeypatch.setattr(selective_fd_clients, "share_step",
                        lambda client, message: ran.append(client.setup.seed) or step(client, message))
    silos = [None, *budgets(tmp_path, [1000.0, 0.5])]
    model = rr_fd().fit(parties, public, budgets=silos, study="icu-2027")
    # ε0 = 1 per round over 40 labels (randomized response, party level): the filter's ε after 1, 2 rounds is
    # 0.40, 0.57, so a budget of 0.5 fits one round, not two.
    assert [(r.party, r.round) for r in model.refused_] == [(2, 2)]
    assert "refused" in model.refused_[0].reason and "0.5" in model.refused_[0].reason
    assert len(ran) == 3 + 3 + 1  # party 2's step ran in round 1 only
    assert model.participation_.tolist() == [3, 3, 1]
    assert [c.mechanism["kind"] for c in silos[1].charges] == ["randomized_response"] * 3
    assert {(c.study, c.pipeline) for c in silos[1].charges} == {("icu-2027", "selective-fd")}
    assert silos[1].charges[0].mechanism["parameters"]["labels_per_report"] == 40
    assert len(silos[2].charges) == 1 and silos[2].spent() <= 0.5
    assert model.predict(public[:5]).shape == (5,)


def test_selective_fd_refuses_the_raw_data_selector_at_setup(digits, tmp_path) -> None:
    parties, public = digits
    silos = [None, *budgets(tmp_path, [1000.0, 1000.0])]
    model = rr_fd(tau_client=0.25).fit(parties, public, budgets=[None, silos[1], None])
    assert [(r.party, r.round) for r in model.refused_] == [(1, 1)] and "KuLSIF" in model.refused_[0].reason
    assert silos[1].charges == ()  # the setup never ran: nothing charged, the data never read
    assert model.selectors_[1] is None


@pytest.mark.parametrize("estimator", ["FedMD", "IndependentLearning"])
def test_fedmd_and_independent_learning_charge_where_they_release(digits, tmp_path, estimator) -> None:
    parties, public = digits
    silos = budgets(tmp_path, [1000.0, 1000.0])
    model = getattr(privfed, estimator)(DecisionTreeClassifier(max_depth=4), rounds=2, classes=CLASSES, random_state=0)
    model.fit(parties, public, budgets=[None, silos[1], None])
    if estimator == "FedMD":  # predictions in the clear from a model without DP-SGD: no bound, refused at round 1
        assert [(r.party, r.round) for r in model.refused_] == [(1, 1)] and "DP-trained" in model.refused_[0].reason
    else:  # nothing leaves a party that does not publish: nothing charged, nothing refused
        assert model.refused_ == []
    assert silos[1].charges == ()
    with pytest.raises(RefusedRunError, match="client 0's model cannot be published.*without DP-SGD"):
        getattr(privfed, estimator)(DecisionTreeClassifier(max_depth=4), rounds=2, classes=CLASSES,
                                    random_state=0).fit(
            parties, public, budgets=[silos[0], None, None])


def test_selective_fd_budgets_and_checkpoint_are_not_combined(digits, tmp_path) -> None:
    parties, public = digits
    with pytest.raises(ValueError, match="checkpoint cannot be combined with budgets"):
        rr_fd().fit(parties, public, budgets=budgets(tmp_path, [1.0, 1.0, 1.0]), checkpoint=tmp_path / "c.npz")


@pytest.mark.slow  # DP-SGD and the DP selector: about 35 s on the shared 2 cores
def test_selective_fd_dp_models_charge_the_dp_selector_once_and_each_rounds_dp_sgd(digits, tmp_path,
                                                                                   one_torch_thread) -> None:
    pytest.importorskip("opacus")
    parties, public = digits
    dp = privfed.DPConfig(noise_multiplier=1.0, max_grad_norm=1.0, delta=1e-3, sample_rate=0.5)
    silos = [None, *budgets(tmp_path, [1000.0, 1000.0])]
    model = privfed.SelectiveFD(privfed.TorchMLP(hidden=(16,), batch_size=32, lr=0.05, optimizer="sgd", dp=dp),
                                rounds=2, proxy_batch=40, local_steps=2, distill_steps=2, client=1, classes=CLASSES,
                                random_state=0)
    model.fit([(X / 16, y) for X, y in parties], public[:100] / 16, budgets=silos)
    assert model.refused_ == []
    charges = silos[1].charges
    # Setup: the DP selector's Gaussian sum (one full-batch step); each round: one Poisson epoch of DP-SGD, whose
    # predictions reach the coordinator in the clear; publishing client 1's model adds nothing (post-processing).
    assert [(c.mechanism["kind"], c.mechanism["parameters"]["sample_rate"], c.mechanism["parameters"]["steps"])
            for c in charges] == [("dpsgd", 1.0, 1), ("dpsgd", 0.5, 2), ("dpsgd", 0.5, 2)]
    assert charges[0].mechanism["parameters"]["noise_multiplier"] == model.selectors_[1].noise_multiplier
    assert len(silos[2].charges) == 3


def public_classes_withheld(estimator):
    """Each pipeline taking ``budgets=``, without its public label set (``classes``)."""
    tree = DecisionTreeClassifier(max_depth=4)
    return {
        "FedKT": lambda: FedKT(tree, n_partitions=1, n_teachers=2, privacy="L2", gamma=0.5, random_state=0),
        "FedKD": lambda: privfed.FedKD(tree, tree, gamma=1.0, clip=4.0, quantization_scale=20, random_state=0),
        "PrivateKT": lambda: PrivateKT(tree, epsilon_per_round=2.0, queries_per_round=20, buffer_rounds=4,
                                       self_training_size=40, rounds=1, client_fraction=1.0, random_state=0),
        "SelectiveFD": lambda: privfed.SelectiveFD(tree, rounds=1, proxy_batch=40, labels="hard", privacy="rr",
                                                   epsilon_per_round=1.0, tau_client=None, random_state=0),
        "FedMD": lambda: privfed.FedMD(tree, rounds=1, random_state=0),
        "IndependentLearning": lambda: privfed.IndependentLearning(tree, rounds=1, random_state=0),
    }[estimator]()


@pytest.mark.parametrize("estimator", ["FedKT", "FedKD", "PrivateKT", "SelectiveFD", "FedMD", "IndependentLearning"])
def test_a_budget_refuses_a_study_without_public_classes_before_any_party_describes_its_data(
        digits, tmp_path, monkeypatch, estimator) -> None:
    # The attack: without classes= the schema step hands the coordinator each party's size and label set in the
    # clear (ε = ∞). The guard: fit refuses before any party describes its data, and nothing is charged.
    from privfed.pipelines.data import party_schema

    parties, public = digits
    described = []

    def spy(X, y, **kwargs):
        described.append(len(y))
        raise LookupError("a party described its data")

    monkeypatch.setattr(party_schema, "describe_party", spy)
    monkeypatch.setattr(fedkt_module, "describe_party", spy)
    silo = privfed.SiloBudget(tmp_path / "silo.jsonl", epsilon=1000.0, delta=1e-5)
    ledger = (tmp_path / "silo.jsonl").read_bytes()
    with pytest.raises(ValueError, match="^budgets need classes=: .*size and label set.*ε = ∞") as refused:
        public_classes_withheld(estimator).fit(parties, public, budgets=[silo, None, None], study="icu-2027")
    assert "\n" not in str(refused.value)
    assert described == []  # no party's schema was built: its size and labels went nowhere
    assert silo.spent() == 0 and silo.charges == () and (tmp_path / "silo.jsonl").read_bytes() == ledger
    # The spy sees the schema step of the same study without budgets (where the parties do describe their data).
    with pytest.raises(LookupError, match="a party described its data"):
        public_classes_withheld(estimator).fit(parties, public)
    assert described
