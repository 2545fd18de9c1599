"""FedKT-L1 with distributed Skellam noise under secure aggregation (aggregator="skellam", secure_aggregation=True)."""

import math

import numpy as np
import pytest
from privfed.pipelines.fedkt.secure import (
    FedKTNoisyVotes,
    FedKTVoteSum,
    secure_party_outcome,
    secure_value_bound,
)
from privfed.pipelines.fedkt.server import fedkt_server_step
from privfed.pipelines.fedkt.steps import FedKTTask, FedKTVotes
from privfed.pipelines.protocol.voting import consistent_votes
from sklearn.datasets import load_digits
from sklearn.tree import DecisionTreeClassifier

import privfed


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    parties = [(X[i:1200:4], y[i:1200:4]) for i in range(4)]
    return parties, X[1200:1500], X[1500:], y[1500:]


def _secure(**overrides):
    settings = {"privacy": "L1", "aggregator": "skellam", "secure_aggregation": True, "sigma": 3.0,
                "query_fraction": 0.4, "random_state": 0, **overrides}
    return privfed.FedKT(DecisionTreeClassifier(max_depth=8), **settings)


def test_ledger_records_the_skellam_release_of_the_vote_sum(digits):
    parties, public, X_test, y_test = digits
    model = _secure().fit(parties, public)
    n_queries = math.ceil(0.4 * len(public))
    assert model.n_queries_answered_ == n_queries
    expected = privfed.SkellamMechanism(9.0, l1_sensitivity=4.0, l2_sensitivity=2 * math.sqrt(2), count=n_queries,
                                        coordinate_sensitivity=2, moved_coordinates=2, unit="party")
    for unit in ("party", "example"):
        report = model.ledger_.account(1e-5, unit=unit)
        assert report.epsilon == pytest.approx(privfed.account(expected, delta=1e-5).epsilon, rel=1e-12)
        assert math.isfinite(report.epsilon)
    # Nothing un-noised left the parties: only their noisy histograms (and the schema) crossed the wire.
    assert set(model.bandwidth_) == {"party-schema", "fedkt-noisy-votes"}
    assert model.score(X_test, y_test) > 0.2  # it learns something (10 classes)


def test_the_server_step_sees_only_the_sum(digits, monkeypatch):
    """fit's server step receives a FedKTVoteSum equal to the sum of the parties' noisy histograms."""
    import privfed.pipelines.fedkt.estimator as fedkt_module

    seen = {}
    original_sum, original_step = fedkt_module.secure_sum, fedkt_module.fedkt_server_step

    def spy_sum(tasks, sent, names, **options):
        seen["sent"] = sent
        return original_sum(tasks, sent, names, **options)

    def spy_step(model, replies, *args, **options):
        seen["replies"] = replies
        return original_step(model, replies, *args, **options)

    monkeypatch.setattr(fedkt_module, "secure_sum", spy_sum)
    monkeypatch.setattr(fedkt_module, "fedkt_server_step", spy_step)
    parties, public, _, _ = digits
    _secure().fit(parties, public)
    assert isinstance(seen["replies"], FedKTVoteSum)
    kinds = {record.kind for sent in seen["sent"] for record in sent}
    assert kinds == {FedKTNoisyVotes.KIND}
    total = sum(next(r for r in sent if r.kind == FedKTNoisyVotes.KIND).arrays["noisy_votes"] for sent in seen["sent"])
    np.testing.assert_array_equal(seen["replies"].vote_sum, total)
    assert (seen["replies"].n_parties, seen["replies"].n_contributors) == (4, 4)


def _task(share_variance, n_final=400, classes=3, s=2):
    return FedKTTask(queries=np.zeros((n_final, 1)), classes=np.arange(classes), n_local_queries=n_final,
                     n_final_queries=n_final, n_partitions=s, n_teachers=3, seed=7, party_noise="skellam",
                     noise_scale=share_variance, target_epsilon=math.nan, delta=1e-5)


class _Plain:
    def __init__(self, predictions):
        self.votes = FedKTVotes(predictions, 1, 3, 0, 0)
        self.students = ()
        self.teacher_votes = np.zeros((1, 1, 10), dtype=np.int64)
        self.teacher_training = None


def test_each_party_adds_its_share_of_the_variance():
    rng = np.random.default_rng(0)
    predictions = rng.integers(0, 3, size=(2, 400))
    predictions[1, :200] = predictions[0, :200]  # half the queries consistent
    task = _task(share_variance=5.0)
    outcome = secure_party_outcome(task, _Plain(predictions), party="party 0")
    noise = outcome.noisy_votes.noisy_votes - consistent_votes(predictions[None], 3)
    assert noise.dtype.kind == "i"
    # 1,200 draws: the sample variance's relative sd is about 0.043, so rel=0.2 is 4.6 sd (rel=0.1 failed ~2 %).
    assert abs(noise.mean()) < 0.25 and noise.var() == pytest.approx(5.0, rel=0.2)
    assert [m.KIND for m in outcome.sent()] == [FedKTNoisyVotes.KIND]  # no predictions, no gap counts
    assert np.abs(outcome.noisy_votes.noisy_votes).max() <= secure_value_bound(2, 5.0)


@pytest.mark.parametrize("share", [0.0, -1.0, math.nan])
def test_a_party_refuses_a_task_without_a_noise_share(share):
    from privfed.pipelines.protocol.messages import MessageError

    with pytest.raises(MessageError, match="Skellam share with variance"):
        secure_party_outcome(_task(share_variance=share), _Plain(np.zeros((2, 400), dtype=np.int64)), party="p")


@pytest.mark.filterwarnings("ignore:FedKT. only 50 server queries")
def test_dropouts_account_the_realised_variance(digits):
    parties, public, _, _ = digits
    model = _secure()
    model._validate()
    n_queries, classes = 50, np.arange(10)
    vote_sum = np.zeros((n_queries, 10), dtype=np.int64)
    vote_sum[np.arange(n_queries), np.arange(n_queries) % 10] = 8
    seeds = np.random.SeedSequence(0)
    results = {}
    for contributors in (4, 3):
        fitted = fedkt_server_step(model.set_params(query_fraction=n_queries / len(public)),
                                   FedKTVoteSum(vote_sum, 4, contributors), classes, public, seeds, seeds.spawn(1)[0])
        seen_by_public, coordinator = [e for e in fitted.ledger.to_dict()["entries"] if e["kind"] == "release"]
        results[contributors] = fitted.ledger.account(1e-5, unit="party").epsilon
        assert seen_by_public["observers"] == ["public"] and coordinator["observers"] == ["coordinator"]
        assert seen_by_public["analyses"]["party"]["parameters"]["variance"] == pytest.approx(9.0 * contributors / 4)
        # Against the coordinator and the other parties (collusion=None: all of them), only the target's own share.
        assert coordinator["analyses"]["party"]["parameters"]["variance"] == pytest.approx(9.0 / 4)
        assert ("dropped out" in seen_by_public["note"]) == (contributors < 4)
    realised = privfed.SkellamMechanism(9.0 * 3 / 4, l1_sensitivity=4.0, l2_sensitivity=2 * math.sqrt(2),
                                        count=n_queries, coordinate_sensitivity=2, moved_coordinates=2, unit="party")
    expected = privfed.account(realised, delta=1e-5).epsilon
    assert results[3] == pytest.approx(expected, rel=1e-12)
    assert results[3] > results[4]


@pytest.mark.parametrize("collusion,honest", [(None, 1), (3, 1), (1, 3), (0, 4)])
def test_the_coordinators_epsilon_assumes_collusion_with_c_parties(digits, collusion, honest):
    """The colluders subtract their own shares: the coordinator's entry keeps the honest contributors' variance,
    (4 − c)·σ²/4 of σ² = 9 (None: the three others collude, the target keeps its own share); the public's all."""
    parties, public, _, _ = digits
    model = _secure(collusion=collusion, classes=list(range(10))).fit(parties, public)
    to_public, to_coordinator = [e for e in model.ledger_.entries if e.kind == "release"]
    assert to_public.observers == ("public",) and to_coordinator.observers == ("coordinator",)
    entries = {e["note"]: e for e in model.ledger_.to_dict()["entries"]}
    assert entries[to_public.note]["analyses"]["party"]["parameters"]["variance"] == pytest.approx(9.0)
    coordinator_variance = entries[to_coordinator.note]["analyses"]["party"]["parameters"]["variance"]
    assert coordinator_variance == pytest.approx(9.0 * honest / 4)
    colluders = 3 if collusion is None else collusion
    assert (f"assumes the coordinator colludes with at most {colluders} of the 4 parties" in to_coordinator.note
            and "secure aggregation by Flower's SecAgg+" in to_coordinator.note)
    coordinator, public_report = (model.ledger_.account(1e-5, observer=o) for o in ("coordinator", "public"))
    assert not coordinator.uncovered and math.isfinite(coordinator.epsilon)
    assert (coordinator.epsilon == pytest.approx(public_report.epsilon)) == (honest == 4)
    assert coordinator.epsilon >= public_report.epsilon


@pytest.mark.parametrize("overrides,message", [
    ({"collusion": 4}, r"collusion must be a number of parties colluding with the coordinator in 0\.\.3 \(the "
                       r"other parties of 4\), got 4"),
    ({"collusion": -1}, "collusion"),
    ({"collusion": 1.5}, "collusion"),
    ({"collusion": 1, "secure_aggregation": False, "aggregator": "laplace", "sigma": None, "gamma": 0.5},
     "collusion applies to secure_aggregation=True only"),

    ({"privacy": "L0", "sigma": None}, "secure_aggregation=True needs privacy='L1'"),
    ({"privacy": "L2"}, "secure_aggregation=True needs privacy='L1'"),
    ({"accounting": "paper"}, "needs accounting='conservative'"),
    ({"consistent_voting": False}, "needs consistent_voting=True"),
    ({"target_epsilon": 5.0}, "needs target_epsilon=None"),
    ({"aggregator": "gaussian"}, "secure_aggregation=True and aggregator='skellam' go together"),
    ({"secure_aggregation": False}, "secure_aggregation=True and aggregator='skellam' go together"),
    ({"sigma": None}, "sigma is required"),
    ({"secure_aggregation": 1}, "secure_aggregation must be a bool"),
])
def test_bad_settings_are_refused_before_any_training(digits, overrides, message):
    parties, public, _, _ = digits
    with pytest.raises((ValueError, TypeError), match=message) as error:
        _secure(**overrides).fit(parties, public)
    assert "\n" not in str(error.value)


def test_the_coordinators_epsilon_states_its_collusion_assumption() -> None:
    """The structured assumptions of the coordinator's Skellam entry reach its report (issue 40 item 6)."""
    from sklearn.datasets import load_digits
    from sklearn.tree import DecisionTreeClassifier

    import privfed

    X, y = load_digits(return_X_y=True)
    split = privfed.federated_split(X / 16, y, n_parties=4, beta="homogeneous", public_size=200, test_size=100,
                                    random_state=0)
    model = privfed.FedKT(DecisionTreeClassifier(max_depth=4), n_partitions=1, n_teachers=1, privacy="L1",
                          aggregator="skellam", secure_aggregation=True, sigma=3.0, query_fraction=0.3,
                          collusion=2, random_state=0).fit(split.parties, split.X_public)
    coordinator = model.ledger_.account(1e-5, observer="coordinator")
    assert "the coordinator colludes with at most 2 of the 4 parties" in coordinator.assumptions
    assert "colludes" in str(coordinator)
    assert not any("colludes" in a for a in model.ledger_.account(1e-5, observer="public").assumptions)
