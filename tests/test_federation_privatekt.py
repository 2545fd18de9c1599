"""PrivateKT on Flower: the ServerApp and ClientApp against fit, dropouts, bad replies, and the Ray simulation.

As in ``test_federation.py``, most tests drive the real ServerApp code (``run_server``) and the real
ClientApp over an in-process grid (seconds); one test runs ``simulate`` on Ray with three SuperNodes.
Dropouts are tested here with that in-process grid (a node that stops replying: no reply within the
timeout; a node the SuperLink reports NODE_UNAVAILABLE), and in deployment mode, by killing a
SuperNode process, in ``test_federation_privatekt_deployment.py``.
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from privfed.accounting import RandomizedResponse, account, compose_parallel
from privfed.pipelines.privatekt.estimator import PrivateKT
from privfed.pipelines.privatekt.steps import PrivateKTReport
from privfed.pipelines.protocol.messages import MessageError
from sklearn.tree import DecisionTreeClassifier
from test_federation import LocalGrid

import privfed

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("flwr") is None,
                       reason="flwr is not installed: pip install 'privfed[federation]'"),
    pytest.mark.usefixtures("one_torch_thread"),
]


def privatekt(model=None, **changes) -> PrivateKT:
    settings = dict(epsilon_per_round=20.0, queries_per_round=10, buffer_rounds=4, self_training_size=30, rounds=3,
                    client_fraction=0.67, local_epochs=2, random_state=3, batch_clients=False)
    return PrivateKT(DecisionTreeClassifier(max_depth=6) if model is None else model, **{**settings, **changes})


def torch_mlp():
    from privfed.pipelines.models.torch_models import TorchMLP

    return TorchMLP(hidden=(16,), lr=1e-2, batch_size=32, random_state=0)


class RecordingGrid(LocalGrid):
    """LocalGrid that records which nodes got a train message per round, and can make nodes drop out.

    ``answers[node]``: train messages the node answers before it goes silent; ``unavailable``: nodes whose
    train messages come back as Flower's NODE_UNAVAILABLE error (the SuperLink lost them).
    """

    def __init__(self, paths, *, answers=None, unavailable=(), **options):
        super().__init__(paths, **options)
        self.answers, self.unavailable, self.train_rounds = dict(answers or {}), set(unavailable), []
        self.task_scalars: list[set[str]] = []  # the scalar names of every privatekt-task sent

    def send_and_receive(self, messages, *, timeout=None):
        from flwr.app import Error

        trains = [m for m in messages if m.metadata.message_type == "train"]
        if trains:
            self.train_rounds.append(sorted(m.metadata.dst_node_id for m in trains))
            self.task_scalars += [set(m.content["privatekt-task.scalars"]) for m in trains]
        delivered, errors = [], []
        for message in messages:
            node = message.metadata.dst_node_id
            if message.metadata.message_type == "train" and node in self.unavailable:
                errors.append(message.__class__(Error(code=5, reason="node unavailable"), reply_to=message))
            elif message.metadata.message_type == "train" and node in self.answers:
                self.answers[node] -= 1
                if self.answers[node] >= 0:
                    delivered.append(message)
            else:
                delivered.append(message)
        return super().send_and_receive(delivered, timeout=timeout) + errors


def run(grid, estimator, public, tmp_path=None):
    from privfed.federation.server_app import ServerJob, run_server

    bundle = None if tmp_path is None else str(tmp_path / "bundle")
    return run_server(grid, ServerJob(estimator, public, num_supernodes=3, timeout=5, output_bundle=bundle))


@pytest.mark.parametrize("model", [None, torch_mlp], ids=["tree", "torch"])
def test_server_and_client_apps_reproduce_fit(federation, task_identity, model, tmp_path) -> None:  # noqa: F811
    parties, paths, public, (X_test, y_test) = federation
    local = privatekt(None if model is None else model(), noise_seed=5).fit(parties, public)
    grid = RecordingGrid(paths)
    flower = run(grid, privatekt(None if model is None else model(), noise_seed=5), public, tmp_path)
    # Same process, same steps, same seeds, same noise seed: bit-identical (sequential clients, as
    # batch_clients=False); each task carried its client's noise seed, and the ledger says every ε is ∞.
    assert all("noise_seed" in scalars for scalars in grid.task_scalars)
    assert flower.ledger_.noise == local.ledger_.noise and flower.ledger_.noise["noise_seed"] == 5
    np.testing.assert_array_equal(flower.predict_proba(X_test), local.predict_proba(X_test))
    np.testing.assert_array_equal(flower.participation_, local.participation_)
    assert flower.ledger_.account(delta=1e-5).epsilon == local.ledger_.account(delta=1e-5).epsilon
    assert [e.note for e in flower.ledger_.entries] == [e.note for e in local.ledger_.entries]
    assert flower.bandwidth_ == local.bandwidth_ and flower.dropouts_ == [] and flower.history_ == local.history_
    # Only the sampled clients get a message: 2 of 3 per round (nodes 100, 99, 98 are parties 0, 1, 2).
    assert [len(nodes) for nodes in grid.train_rounds] == [2, 2, 2]
    sampled = np.zeros(3, dtype=int)
    for nodes in grid.train_rounds:
        sampled[[100 - node for node in nodes]] += 1
    np.testing.assert_array_equal(sampled, flower.participation_)
    # What went down: the K queries (and, for the torch model from round 2 on, its float32 parameters).
    query_bytes = 10 * public.shape[1] * public.itemsize
    down = np.asarray(flower.bandwidth_["privatekt-task"])
    assert (down >= sampled * query_bytes).all()
    if model is not None:
        parameters = sum(p.numel() for p in flower.global_model_.module_.parameters())
        assert down.sum() >= 4 * parameters * 4  # rounds 2 and 3, two clients each, 4 bytes per weight
    assert flower.bandwidth_["privatekt-report"] == [int(t) * 10 * 8 for t in flower.participation_]
    loaded, ledger = privfed.load_bundle(tmp_path / "bundle")
    np.testing.assert_array_equal(loaded.predict(X_test), flower.global_model_.predict(X_test))


def test_a_client_that_stops_replying_is_dropped_and_the_run_continues(federation, task_identity,  # noqa: F811
                                                                        tmp_path) -> None:
    parties, paths, public, (X_test, y_test) = federation
    grid = RecordingGrid(paths, answers={99: 0}, unavailable={98})  # party 1 silent, party 2 gone from the start
    flower = run(grid, privatekt(rounds=4), public, tmp_path)
    # Secret noise (the default): no task carries anything noise-related; each client draws its own coins.
    assert grid.task_scalars and not any("noise_seed" in scalars for scalars in grid.task_scalars)
    assert flower.ledger_.noise["source"] == "secret"
    sampled = np.zeros(3, dtype=int)
    for nodes in grid.train_rounds:
        sampled[[100 - node for node in nodes]] += 1
    dropped = [(d["party"], d["round"]) for d in flower.dropouts_]
    expected = [(f"party {p} (node {100 - p})", r + 1) for r, nodes in enumerate(grid.train_rounds)
                for p in (1, 2) if 100 - p in nodes]
    assert dropped == expected and len(dropped) >= 2
    # Only delivered reports count: party 0 every round it was sampled, parties 1 and 2 never.
    np.testing.assert_array_equal(flower.participation_, [sampled[0], 0, 0])
    assert [h["clients"] for h in flower.history_] == [int(100 in nodes) for nodes in grid.train_rounds]
    releases = [RandomizedResponse(10, epsilon=20.0, labels_per_report=10, reports=int(sampled[0]))]
    assert flower.ledger_.account(delta=1e-5).epsilon == pytest.approx(
        account(compose_parallel(releases), delta=1e-5).epsilon, rel=1e-12)
    assert flower.bandwidth_["privatekt-report"][1:] == [0, 0]
    # The ledger (and so the bundle and its model card) names every dropout; the JSON round trip keeps it.
    note = [e for e in flower.ledger_.entries if e.kind == "release"][-1].note
    assert f"DROPOUTS ({len(dropped)})" in note and "party 1 (node 99) in round" in note
    loaded_model, ledger = privfed.load_bundle(tmp_path / "bundle")
    assert [e for e in ledger.entries if e.kind == "release"][-1].note == note
    assert "party 1 (node 99) in round" in (tmp_path / "bundle" / "MODEL_CARD.md").read_text()
    assert json.loads(ledger.to_json())["description"] == json.loads(flower.ledger_.to_json())["description"]


def test_a_round_without_reports_adds_nothing(federation, task_identity) -> None:  # noqa: F811
    _, paths, public, _ = federation
    grid = RecordingGrid(paths, answers={100: 1, 99: 1, 98: 1})  # every party answers once, then goes silent
    flower = run(grid, privatekt(rounds=4, client_fraction=0.34), public)  # one client per round
    assert [h["clients"] for h in flower.history_][-1] == 0
    buffers = [h["buffer_examples"] for h in flower.history_]
    assert all(h["buffer_examples"] == buffers[i - 1] for i, h in enumerate(flower.history_) if not h["clients"])
    assert int(flower.participation_.sum()) == sum(h["clients"] for h in flower.history_)
    assert len(flower.dropouts_) == 4 - int(flower.participation_.sum())


def test_a_malformed_report_stops_the_run_naming_the_party(federation, task_identity, tmp_path) -> None:  # noqa: F811
    from flwr.app import Message

    from privfed.federation.task import from_recorddict, to_recorddict

    _, paths, public, _ = federation

    def out_of_range(message, reply):
        if message.metadata.message_type != "train":
            return reply
        records, _ = from_recorddict(reply.content, sender="test")
        report = PrivateKTReport.from_record(records[0], sender="test")
        forged = PrivateKTReport(report.labels + 10)
        return Message(to_recorddict([forged.to_record()]), reply_to=message)

    with pytest.raises(MessageError, match=r"party \d \(node \d+\) sent a malformed 'privatekt-report' message: "
                                           r"labels outside \[0, 10\)"):
        run(RecordingGrid(paths, tamper=out_of_range), privatekt(), public, tmp_path)
    assert not (tmp_path / "bundle").exists()


def test_a_report_claiming_dp_training_it_was_not_asked_for_is_refused() -> None:
    from privfed.accounting import DPSGD
    from privfed.pipelines.privatekt.steps import privatekt_tasks, receive_privatekt_replies
    from privfed.pipelines.protocol.dp_ledger import training_report

    (task,) = privatekt_tasks(queries=np.zeros((4, 3)), classes=np.arange(3), parameters=np.zeros(0, np.float32),
                              keep_probability=0.5, local_epochs=1, init_seed=0,
                              round_seed=np.random.SeedSequence(0), n_clients=1)
    report = PrivateKTReport(np.zeros(4, dtype=np.int64)).to_record()
    claimed = training_report(DPSGD(1.0, 0.1, 50)).to_record()
    for model in (torch_mlp(), DecisionTreeClassifier()):  # neither has dp=
        with pytest.raises(MessageError, match="party 0 sent a 'dp-training' message that does not match its DP "
                                               r"configuration: .* \(it was not asked to train with DP-SGD\)"):
            receive_privatekt_replies([task], [[report, claimed]], ["party 0"], max_bytes=10_000, model=model)
        assert receive_privatekt_replies([task], [[report]], ["party 0"], max_bytes=10_000, model=model)[1] == [None]


def test_a_task_with_the_wrong_number_of_parameters_is_refused_by_the_client(federation) -> None:
    from privfed.pipelines.privatekt.steps import privatekt_party_step, privatekt_tasks

    parties, _, public, _ = federation
    X, y = parties[0]
    (task,) = privatekt_tasks(queries=public[:5], classes=np.arange(10), parameters=np.zeros(7, dtype=np.float32),
                              keep_probability=0.5, local_epochs=1, init_seed=0,
                              round_seed=np.random.SeedSequence(0), n_clients=1)
    with pytest.raises(MessageError, match="parameters hold 7 values, the TorchMLP network has"):
        privatekt_party_step(task, X, y, model=torch_mlp(), party="party 0")


def test_run_config_builds_privatekt() -> None:
    from privfed.federation.task import estimator_from_config

    model = estimator_from_config({"algorithm": "privatekt", "model": "sklearn.tree.DecisionTreeClassifier",
                                   "model-params": '{"max_depth": 4}', "rounds": 7, "epsilon-per-round": 2.5,
                                   "queries-per-round": 3, "random-state": 4})
    assert isinstance(model, PrivateKT) and model.model.max_depth == 4
    assert (model.rounds, model.epsilon_per_round, model.queries_per_round, model.random_state) == (7, 2.5, 3, 4)
    assert model.buffer_rounds == PrivateKT(None).buffer_rounds
    assert model.fine_tune_batch_size is None
    torch_model = estimator_from_config({"algorithm": "privatekt", "model": "privfed.TorchMLP",
                                         "model-params": '{"hidden": [8]}', "fine-tune-batch-size": 50})
    assert torch_model.fine_tune_batch_size == 50


@pytest.mark.slow
def test_simulation_on_ray_matches_fit(federation) -> None:
    """PrivateKT on Flower's simulation engine, three SuperNodes: same ledger ε, same accuracy (scikit-learn model)."""
    from privfed.federation import simulate

    parties, paths, public, (X_test, y_test) = federation
    local = privatekt(noise_seed=5).fit(parties, public)
    flower = simulate(privatekt(random_state=None, noise_seed=5), paths, public, timeout=120, random_state=3)
    assert flower.dropouts_ == []
    np.testing.assert_array_equal(flower.participation_, local.participation_)
    for unit in local.ledger_.units:
        assert flower.ledger_.account(delta=1e-5, unit=unit).epsilon == pytest.approx(
            local.ledger_.account(delta=1e-5, unit=unit).epsilon, abs=1e-12)
    assert abs(flower.score(X_test, y_test) - local.score(X_test, y_test)) <= 0.05
    assert flower.bandwidth_ == local.bandwidth_
    # A decision tree trains deterministically in any process: the run is the same one.
    np.testing.assert_array_equal(flower.predict(X_test), local.predict(X_test))


def test_dp_sgd_clients_on_flower_reproduce_fit(federation, task_identity) -> None:  # noqa: F811
    """The DPConfig travels in the model spec; each client's release comes back as its round's ``dp-training``."""
    from privfed import DPConfig

    parties, paths, public, (X_test, _) = federation

    def dp_mlp():
        return torch_mlp().set_params(dp=DPConfig(noise_multiplier=1.1, max_grad_norm=1.0, delta=1e-5, sample_rate=0.1))

    local = privatekt(dp_mlp(), rounds=2, noise_seed=5).fit(parties, public)
    flower = run(RecordingGrid(paths), privatekt(dp_mlp(), rounds=2, noise_seed=5), public)
    np.testing.assert_array_equal(flower.predict_proba(X_test), local.predict_proba(X_test))
    stamps = {"created", "recorded", "sha256", "previous_sha256", "head_sha256"}  # times, and hashes over them

    def contents(model):
        document = json.loads(model.ledger_.to_json())
        return ({k: v for k, v in document.items() if k not in stamps | {"entries"}},
                [{k: v for k, v in entry.items() if k not in stamps} for entry in document["entries"]])

    assert contents(flower) == contents(local)  # the same entries: mechanisms, analyses, notes
    assert flower.bandwidth_ == local.bandwidth_
    # One message per round a client joined, of one release: σ, q, steps, group (8 bytes each) and `grouped` (8).
    assert flower.bandwidth_["dp-training"] == [int(t) * 40 for t in flower.participation_]
    assert "DP-SGD" in " ".join(e.note for e in flower.ledger_.entries)


def test_a_dp_client_must_send_its_one_matching_release() -> None:
    from privfed.accounting import DPSGD, compose_parallel, compose_sequential
    from privfed.pipelines.privatekt.steps import privatekt_tasks, receive_privatekt_replies
    from privfed.pipelines.protocol.dp_ledger import training_report

    from privfed import DPConfig

    (task,) = privatekt_tasks(queries=np.zeros((4, 3)), classes=np.arange(3), parameters=np.zeros(0, np.float32),
                              keep_probability=0.5, local_epochs=2, init_seed=0,
                              round_seed=np.random.SeedSequence(0), n_clients=1)
    model = torch_mlp().set_params(dp=DPConfig(noise_multiplier=1.1, max_grad_norm=1.0, delta=1e-5, sample_rate=0.1))
    report = PrivateKTReport(np.zeros(4, dtype=np.int64)).to_record()

    def receive(*sent):
        return receive_privatekt_replies([task], [[report, *sent]], ["party 0"], max_bytes=10_000, model=model)

    _, (release,) = receive(training_report(DPSGD(1.1, 0.1, 20)).to_record())  # 2 local epochs of ⌊1/q⌋ = 10 steps
    assert (release.noise_multiplier, release.sample_rate, release.steps) == (1.1, 0.1, 20)
    with pytest.raises(MessageError, match="party 0 sent no 'dp-training' message for the DP-SGD training"):
        receive()
    with pytest.raises(MessageError, match=r"party 0 sent a 'dp-training' message .*: noise_multiplier \[0.5\]"):
        receive(training_report(DPSGD(0.5, 0.1, 20)).to_record())
    with pytest.raises(MessageError, match=r"party 0 sent a 'dp-training' message .*: steps \[10\], expected"):
        receive(training_report(DPSGD(1.1, 0.1, 10)).to_record())
    grouped = compose_sequential([compose_parallel([DPSGD(1.1, 0.1, 20)])] * 2)
    with pytest.raises(MessageError, match="party 0 sent a 'dp-training' message of several releases, expected one"):
        receive(training_report(grouped).to_record())
