"""FedKT, FedKD and Selective-FD on Flower: the ServerApp and ClientApp against fit, faults, bad input, and Ray.

Most tests drive the real ServerApp code (``run_server``) and the real ClientApp over an in-process
grid (no Ray, no sockets: seconds); two tests (FedKT L1, Selective-FD) run ``simulate`` on Flower's Ray
simulation engine with three SuperNodes (about 25–60 s each, most of it Ray's start).
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from privfed.pipelines.fedkt.estimator import FedKT
from privfed.pipelines.fedkt.steps import FedKTVotes
from privfed.pipelines.protocol.messages import MessageError
from sklearn.tree import DecisionTreeClassifier

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("flwr") is None, reason="flwr is not installed: pip install 'privfed[federation]'"
)


class LocalGrid:
    """A Flower Grid in this process: each message goes to the real ClientApp with its node's Context."""

    def __init__(self, paths, *, silent=None, tamper=None):
        from flwr.app import Context, RecordDict

        from privfed.federation.client_app import make_client_app

        self.client = make_client_app()
        # Node ids in reverse party order: the server must order parties by their reported index.
        self.contexts = {
            100 - index: Context(0, 100 - index, {"data-path": str(path), "party-index": index}, RecordDict(), {})
            for index, path in enumerate(paths)
        }
        self.silent, self.tamper = silent or {}, tamper  # silent: node -> message type it never answers

    def get_node_ids(self):
        return list(self.contexts)

    def send_and_receive(self, messages, *, timeout=None):
        from flwr.app import Error

        replies = []
        for message in messages:
            node = message.metadata.dst_node_id
            if message.metadata.message_type == self.silent.get(node):
                continue
            try:
                reply = self.client(message, self.contexts[node])
            except Exception as error:  # the SuperNode turns a failing ClientApp into an error reply
                reply = message.__class__(Error(code=0, reason=str(error)), reply_to=message)
            replies.append(self.tamper(message, reply) if self.tamper else reply)
        return replies


def fedkt(privacy: str, **changes) -> FedKT:
    """FedKT with reproducible noise (noise_seed), so that a Flower run can equal a fit."""
    settings = dict(n_teachers=3, query_fraction=0.5, random_state=5, noise_seed=9)
    if privacy == "L1":
        settings.update(gamma=0.5)
    if privacy == "L2":
        settings.update(gamma=0.5, local_query_fraction=0.2)
    return FedKT(DecisionTreeClassifier(max_depth=6), privacy=privacy, **{**settings, **changes})


def assert_same_fit(flower: FedKT, local: FedKT, X_test: np.ndarray) -> None:
    np.testing.assert_array_equal(flower.predict(X_test), local.predict(X_test))
    assert [e.description for e in flower.ledger_.entries] == [e.description for e in local.ledger_.entries]
    for unit in local.ledger_.units:
        assert flower.ledger_.account(delta=1e-5, unit=unit).epsilon == pytest.approx(
            local.ledger_.account(delta=1e-5, unit=unit).epsilon, abs=1e-12
        )
    assert flower.bandwidth_ == local.bandwidth_
    assert sorted(flower.evidence_) == sorted(local.evidence_)


@pytest.mark.parametrize("privacy", ["L0", "L1", "L2"])
def test_server_and_client_apps_reproduce_fit(federation, task_identity, privacy, tmp_path) -> None:
    from privfed.federation.server_app import ServerJob, run_server

    parties, paths, public, (X_test, _) = federation
    local = fedkt(privacy).fit(parties, public)
    job = ServerJob(fedkt(privacy), public, num_supernodes=3, timeout=5, output_bundle=str(tmp_path / "bundle"))
    flower = run_server(LocalGrid(paths), job)
    assert_same_fit(flower, local, X_test)
    assert not hasattr(flower, "students_")  # the students stay on the parties
    import privfed

    model, ledger = privfed.load_bundle(tmp_path / "bundle")
    np.testing.assert_array_equal(model.predict(X_test), local.predict(X_test))
    assert [e.description for e in ledger.entries] == [e.description for e in local.ledger_.entries]


def test_l2_with_public_classes_over_the_apps_tells_the_coordinator_nothing_un_noised(federation, task_identity):
    """FedKT(classes=...): the schema query carries the public label set, every party withholds its size and labels,
    and the coordinator's ε is finite and equals the public's, as in fit."""
    from privfed.federation.server_app import ServerJob, run_server

    parties, paths, public, (X_test, _) = federation
    classes = sorted({int(label) for _, y in parties for label in y})
    local = fedkt("L2", classes=classes).fit(parties, public)
    flower = run_server(LocalGrid(paths), ServerJob(fedkt("L2", classes=classes), public, num_supernodes=3, timeout=5))
    assert_same_fit(flower, local, X_test)
    secret = dict(classes=classes, noise_seed=None)  # a seeded run's ε is ∞ for every observer: check a default one
    for model in (run_server(LocalGrid(paths), ServerJob(fedkt("L2", **secret), public, num_supernodes=3, timeout=5)),
                  fedkt("L2", **secret).fit(parties, public)):
        coordinator = model.ledger_.account(delta=1e-5, observer="coordinator")
        assert not coordinator.uncovered and coordinator.epsilon == model.ledger_.account(delta=1e-5).epsilon
    assert flower.bandwidth_["party-schema"] == local.bandwidth_["party-schema"]


def test_the_server_bundle_keeps_private_evidence_home_unless_asked(federation, task_identity, tmp_path) -> None:
    """save_bundle's default: no evidence.npz; ship-evidence=true writes it, with a warning and on the card."""
    import privfed
    from privfed.federation.server_app import SHIP_EVIDENCE_WARNING, ServerJob, job_from_config, run_server

    _, paths, public, _ = federation
    run_server(LocalGrid(paths), ServerJob(fedkt("L1"), public, num_supernodes=3, timeout=5,
                                           output_bundle=str(tmp_path / "default")))
    assert not (tmp_path / "default" / "evidence.npz").exists()
    assert "private evidence" not in (tmp_path / "default" / "MODEL_CARD.md").read_text()
    with pytest.warns(UserWarning, match="give that file to auditors only"):
        run_server(LocalGrid(paths), ServerJob(fedkt("L1"), public, num_supernodes=3, timeout=5,
                                               output_bundle=str(tmp_path / "shipped"), ship_evidence=True))
    _, ledger = privfed.load_bundle(tmp_path / "shipped")
    assert (tmp_path / "shipped" / "evidence.npz").exists() and ledger.evidence()
    assert "**Warning: this bundle ships private evidence.**" in (tmp_path / "shipped" / "MODEL_CARD.md").read_text()
    assert "auditors only" in SHIP_EVIDENCE_WARNING
    config = {"public-path": str(paths[0]).replace("site-0", "public")}
    assert job_from_config(config).ship_evidence is False
    assert job_from_config({**config, "ship-evidence": True}).ship_evidence is True
    with pytest.raises(ValueError, match="ship-evidence must be true or false, got 'yes'"):
        job_from_config({**config, "ship-evidence": "yes"})


def test_fedkd_over_the_apps_reproduces_fit(federation, task_identity) -> None:
    from privfed.pipelines.fedkd.estimator import FedKD
    from sklearn.linear_model import LogisticRegression

    from privfed.federation.server_app import ServerJob, run_server

    parties, paths, public, (X_test, _) = federation

    def fedkd() -> FedKD:
        return FedKD(LogisticRegression(max_iter=200), DecisionTreeClassifier(max_depth=8), gamma=1.0, random_state=2,
                     noise_seed=6)

    local = fedkd().fit(parties, public)
    flower = run_server(LocalGrid(paths), ServerJob(fedkd(), public, num_supernodes=3, timeout=5))
    np.testing.assert_array_equal(flower.predict(X_test), local.predict(X_test))
    np.testing.assert_array_equal(flower.noisy_ensemble_, local.noisy_ensemble_)
    assert flower.ledger_.account(delta=1e-5).epsilon == local.ledger_.account(delta=1e-5).epsilon
    assert [e.description for e in flower.ledger_.entries] == [e.description for e in local.ledger_.entries]
    assert flower.bandwidth_ == local.bandwidth_


def test_multilabel_fedkd_over_the_apps_reproduces_fit(federation, task_identity, tmp_path) -> None:
    """FedKD with multilabel=True: each site's npz holds an (n, L) 0/1 y; the parties send L logits per example."""
    from privfed.pipelines.fedkd.estimator import FedKD
    from sklearn.ensemble import RandomForestClassifier

    from privfed.federation.server_app import ServerJob, run_server

    parties, _, public, (X_test, _) = federation

    def labels(y):
        return np.stack([y % 2 == 0, y >= 5, np.isin(y, (0, 3, 6, 9))], axis=1).astype(int)

    multi = [(X, labels(y)) for X, y in parties]
    paths = []
    for index, (X, Y) in enumerate(multi):
        paths.append(tmp_path / f"multi-{index}.npz")
        np.savez(paths[-1], X=X, y=Y.astype(bool) if index == 1 else Y)  # any 0/1 dtype on a site

    def fedkd() -> FedKD:
        return FedKD(RandomForestClassifier(n_estimators=10), DecisionTreeClassifier(max_depth=6), gamma=1.0,
                     clip=4.0, quantization_scale=20, multilabel=True, random_state=3, noise_seed=6)

    local = fedkd().fit(multi, public)
    flower = run_server(LocalGrid(paths), ServerJob(fedkd(), public, num_supernodes=3, timeout=10))
    assert flower.noisy_ensemble_.shape == (len(public), 3)
    np.testing.assert_array_equal(flower.noisy_ensemble_, local.noisy_ensemble_)
    np.testing.assert_array_equal(flower.predict(X_test), local.predict(X_test))
    assert flower.ledger_.account(delta=1e-5).epsilon == local.ledger_.account(delta=1e-5).epsilon
    assert [e.description for e in flower.ledger_.entries] == [e.description for e in local.ledger_.entries]
    assert flower.bandwidth_ == local.bandwidth_
    np.savez(paths[2], X=multi[2][0], y=multi[2][1][:, :2])
    with pytest.raises(MessageError, match=r"party 2 \(node 98\) has 2 labels, party 0 \(node 100\) has 3"):
        run_server(LocalGrid(paths), ServerJob(fedkd(), public, num_supernodes=3, timeout=10))


def dp_mlp(dp=True):
    from privfed import DPConfig, TorchMLP

    config = DPConfig(noise_multiplier=1.0, max_grad_norm=1.0, delta=1e-5, sample_rate=0.1) if dp else None
    return TorchMLP(hidden=(8,), epochs=1, batch_size=32, lr=0.05, optimizer="sgd", dp=config)


def assert_same_dp_ledger(flower, local) -> None:
    """Same entries, the training entry included, and the same ε per unit for both bounds."""
    assert [(e.kind, e.description) for e in flower.ledger_.entries] == [
        (e.kind, e.description) for e in local.ledger_.entries]
    assert "training" in [e.kind for e in local.ledger_.entries]
    for unit in local.ledger_.units:
        ours, theirs = flower.ledger_.account(unit=unit), local.ledger_.account(unit=unit)
        assert ours.source == theirs.source and set(ours.alternatives) == set(theirs.alternatives)
        assert ours.epsilon == pytest.approx(theirs.epsilon, abs=1e-12)
        for name, bound in theirs.alternatives.items():
            assert ours.alternatives[name].epsilon == pytest.approx(bound.epsilon, abs=1e-12)


def test_dp_sgd_training_is_recorded_as_fit_records_it(federation, task_identity, one_torch_thread) -> None:
    """DP-SGD teachers (FedKT L1) and local models (FedKD): the DPConfig travels in the spec, each party
    reports its releases' parameters, and the server's ledger equals fit's."""
    pytest.importorskip("opacus")
    from privfed.pipelines.fedkd.estimator import FedKD

    from privfed.federation.server_app import ServerJob, run_server

    parties, paths, public, (X_test, _) = federation

    def fedkt_dp() -> FedKT:
        return FedKT(dp_mlp(), dp_mlp(dp=False), n_partitions=2, n_teachers=2, privacy="L1", gamma=0.05,
                     query_fraction=0.25, random_state=0, noise_seed=9)

    local = fedkt_dp().fit(parties, public)
    flower = run_server(LocalGrid(paths), ServerJob(fedkt_dp(), public, num_supernodes=3, timeout=30))
    assert_same_dp_ledger(flower, local)
    # noise_seed makes every ε ∞ (the seed is recorded), so the DP-SGD bound is named among the two, not chosen
    assert {"dpsgd", "aggregation"} == {(report := local.ledger_.account(unit="example")).source, *report.alternatives}
    np.testing.assert_array_equal(flower.predict(X_test), local.predict(X_test))
    assert flower.bandwidth_ == local.bandwidth_ and len(flower.bandwidth_["dp-training"]) == 3

    def fedkd_dp() -> FedKD:
        return FedKD(dp_mlp(), dp_mlp(dp=False), gamma=1.0, clip=4.0, quantization_scale=20, weighting="uniform",
                     random_state=0, noise_seed=6)

    local = fedkd_dp().fit(parties, public)
    flower = run_server(LocalGrid(paths), ServerJob(fedkd_dp(), public, num_supernodes=3, timeout=30))
    assert_same_dp_ledger(flower, local)
    np.testing.assert_array_equal(flower.noisy_ensemble_, local.noisy_ensemble_)


def forge_dp_training(field: str, value: float, *, message_type: str, node: int = 99):
    """A LocalGrid tamper: in node ``node``'s replies to ``message_type``, set the dp-training report's ``field``."""
    from flwr.app import Message

    from privfed.federation.task import from_recorddict, to_recorddict

    def tamper(message, reply):
        if message.metadata.dst_node_id != node or message.metadata.message_type != message_type:
            return reply
        records, _ = from_recorddict(reply.content, sender="test")
        for record in records:
            if record.kind == "dp-training":
                record.arrays[field][:] = value
        return Message(to_recorddict(records), reply_to=message)

    return tamper


def test_a_forged_dp_training_report_is_refused_naming_the_party(federation, task_identity, one_torch_thread) -> None:
    pytest.importorskip("opacus")
    from flwr.app import Message

    from privfed.federation.server_app import ServerJob, run_server
    from privfed.federation.task import from_recorddict, to_recorddict

    _, paths, public, _ = federation

    def noise(value):
        return forge_dp_training("noise_multiplier", value, message_type="train")

    def job():
        return ServerJob(FedKT(dp_mlp(), dp_mlp(dp=False), n_partitions=1, n_teachers=2, privacy="L0",
                               query_fraction=0.25, random_state=0), public, num_supernodes=3, timeout=30)

    with pytest.raises(MessageError, match=r"party 1 \(node 99\) sent a malformed 'dp-training' message: "
                                           "noise_multiplier"):
        run_server(LocalGrid(paths, tamper=noise(0.0)), job())
    # A valid σ, but more noise than the party was configured with (it would claim a smaller ε): refused too.
    with pytest.raises(MessageError, match=r"party 1 \(node 99\) sent a 'dp-training' message that does not match "
                                           r"its DP configuration: noise_multiplier \[5.0\], configured 1.0"):
        run_server(LocalGrid(paths, tamper=noise(5.0)), job())

    def claim_dp(message, reply):  # a party of a non-DP federation claims DP-SGD training
        if message.metadata.dst_node_id != 98 or message.metadata.message_type != "train":
            return reply
        from privfed.accounting import DPSGD
        from privfed.pipelines.protocol.dp_ledger import training_report

        records, _ = from_recorddict(reply.content, sender="test")
        return Message(to_recorddict([*records, training_report(DPSGD(1.0, 0.1, 10)).to_record()]), reply_to=message)

    with pytest.raises(MessageError, match=r"party 2 \(node 98\) .* its model DecisionTreeClassifier has no dp="):
        run_server(LocalGrid(paths, tamper=claim_dp), ServerJob(fedkt("L0"), public, num_supernodes=3, timeout=30))


def test_a_selective_fd_party_claiming_fewer_dp_sgd_steps_is_refused(federation, task_identity,
                                                                     one_torch_thread) -> None:
    """A party whose dp-training report claims fewer steps than rounds × ⌊1/q⌋ (a smaller ε) is refused."""
    pytest.importorskip("opacus")
    from privfed.federation.server_app import ServerJob, run_server

    _, paths, public, _ = federation
    fewer_steps = forge_dp_training("steps", 1, message_type="train.selective_fd")
    with pytest.raises(MessageError, match=r"party 1 \(node 99\) sent a 'dp-training' message that does not match "
                                           r"its DP configuration: steps \[1\], expected epochs × ⌊1/q⌋"):
        run_server(LocalGrid(paths, tamper=fewer_steps), ServerJob(selective_fd_dp(), public, num_supernodes=3,
                                                                   timeout=30))


def test_a_silent_party_stops_the_run_and_nothing_is_written(federation, task_identity, tmp_path) -> None:
    from privfed.federation.server_app import FederationError, ServerJob, run_server

    _, paths, public, _ = federation
    job = ServerJob(fedkt("L1"), public, num_supernodes=3, timeout=1, output_bundle=str(tmp_path / "bundle"))
    # The in-process grid returns at once without the silent reply: the message gives the time actually waited.
    with pytest.raises(FederationError, match=r"party 1 \(node 99\) did not reply to the train step after 0\.\d s "
                                              r"\(timeout=1 s: Flower reported it unreachable"):
        run_server(LocalGrid(paths, silent={99: "train"}), job)
    with pytest.raises(FederationError, match=r"node 98 did not reply to the schema step"):
        run_server(LocalGrid(paths, silent={98: "query.schema"}), job)
    with pytest.raises(FederationError, match=r"only 3 of 4 SuperNodes connected after 0\.[3-9] s \(timeout=0.3 s\)"):
        run_server(LocalGrid(paths), ServerJob(fedkt("L1"), public, num_supernodes=4, timeout=0.3))
    assert not (tmp_path / "bundle").exists()


def test_a_wrongly_shaped_reply_is_refused_naming_the_party(federation, task_identity, tmp_path) -> None:
    from flwr.app import Message

    from privfed.federation.server_app import ServerJob, run_server
    from privfed.federation.task import from_recorddict, to_recorddict

    _, paths, public, _ = federation

    def truncate_predictions(message, reply):
        if message.metadata.dst_node_id != 98 or message.metadata.message_type != "train":
            return reply
        records, _ = from_recorddict(reply.content, sender="test")
        votes = FedKTVotes.from_record(records[0], sender="test")
        forged = FedKTVotes(votes.predictions[:, :-1], votes.n_local_answered, votes.n_teachers, 0, 0)
        return Message(to_recorddict([forged.to_record()]), reply_to=message)

    job = ServerJob(fedkt("L0"), public, num_supernodes=3, timeout=5, output_bundle=str(tmp_path / "bundle"))
    with pytest.raises(MessageError, match=r"party 2 \(node 98\) sent a malformed 'fedkt-votes' message: predictions"):
        run_server(LocalGrid(paths, tamper=truncate_predictions), job)
    assert not (tmp_path / "bundle").exists()


def test_schema_mismatch_is_reported_before_training(federation, task_identity, tmp_path) -> None:
    from privfed.federation.server_app import ServerJob, run_server

    parties, paths, public, _ = federation
    narrow = tmp_path / "narrow.npz"
    np.savez(narrow, X=parties[1][0][:, :60], y=parties[1][1])
    job = ServerJob(fedkt("L0"), public, num_supernodes=3, timeout=5)
    with pytest.raises(MessageError, match=r"party 1 \(node 99\) has features of shape \(60,\), the public set has"):
        run_server(LocalGrid([paths[0], narrow, paths[2]]), job)


def test_a_failing_party_is_named(federation, task_identity, tmp_path) -> None:
    from privfed.federation.server_app import FederationError, ServerJob, run_server

    _, paths, public, _ = federation
    job = ServerJob(fedkt("L0"), public, num_supernodes=3, timeout=5)
    with pytest.raises(FederationError, match=r"node 98 failed at the schema step: data-path .* not a file"):
        run_server(LocalGrid([paths[0], paths[1], tmp_path / "absent.npz"]), job)


def test_model_specs_carry_hyper_parameters_and_refuse_untrusted_classes() -> None:
    from privfed.federation.task import build_model, model_spec

    rebuilt = build_model(model_spec(DecisionTreeClassifier(max_depth=6, criterion="entropy")))
    assert isinstance(rebuilt, DecisionTreeClassifier) and rebuilt.get_params()["criterion"] == "entropy"
    with pytest.raises(ValueError, match="'os.system' is outside the trusted packages"):
        build_model('{"class": "os.system", "params": {}}')
    from privfed import DPConfig, TorchMLP

    dp = DPConfig(target_epsilon=2.0, max_grad_norm=0.5, delta=1e-6, sample_rate=0.1)
    assert build_model(model_spec(TorchMLP(hidden=(8,), dp=dp))).dp == dp  # a DPConfig travels as its fields
    with pytest.raises(ValueError, match="the only object a spec carries is"):
        build_model('{"class": "privfed.pipelines.models.torch_models.TorchMLP", "params": {"dp": {"os": "system"}}}')
    with pytest.raises(TypeError, match="parameter estimator=DecisionTreeClassifier"):
        from sklearn.ensemble import BaggingClassifier

        model_spec(BaggingClassifier(DecisionTreeClassifier()), name="teacher")


# --- Selective-FD, FedMD, independent learning: stateful parties over several rounds -------------------
def selective_fd(**changes):
    from privfed.pipelines.models.torch_models import TorchMLP
    from privfed.pipelines.selective_fd.estimator import SelectiveFD

    settings = dict(rounds=2, local_steps=2, distill_steps=4, proxy_batch=80, n_auxiliary=60, max_known=60,
                    tau_server=1.5, random_state=3)
    return SelectiveFD(TorchMLP(hidden=(16,), lr=1e-2, batch_size=32), **{**settings, **changes})


def selective_fd_dp(**changes):
    """Selective-FD whose client models train with DP-SGD (one Poisson epoch per round), its noise seeded."""
    return selective_fd(**changes).set_params(model=dp_mlp(), noise_seed=11)


def fedmd_rr(**changes):
    from privfed.pipelines.selective_fd.baselines import FedMD
    from sklearn.linear_model import LogisticRegression

    settings = dict(rounds=2, proxy_batch=80, labels="hard", privacy="rr", epsilon_per_round=4.0, random_state=4,
                    noise_seed=12)
    model = changes.pop("model", LogisticRegression(max_iter=200))
    return FedMD(model, **{**settings, **changes})


def assert_same_distillation(flower, local, X_test) -> None:
    """Same published model, history, ledger (entries, ε to 1e-12, unaccounted) and protocol bandwidth as fit."""
    client = local.client
    np.testing.assert_array_equal(flower.predict_proba(X_test), local.predict_proba(X_test))
    assert flower.history_ == local.history_
    assert [e.description for e in flower.ledger_.entries] == [e.description for e in local.ledger_.entries]
    assert flower.ledger_.unaccounted == local.ledger_.unaccounted
    for unit in local.ledger_.units:
        assert flower.ledger_.account(delta=1e-5, unit=unit).epsilon == pytest.approx(
            local.ledger_.account(delta=1e-5, unit=unit).epsilon, abs=1e-12
        )
    assert [e.analyses for e in flower.ledger_.entries if e.kind == "training"] == \
        [e.analyses for e in local.ledger_.entries if e.kind == "training"]
    published = flower.bandwidth_.pop("published-model")
    assert flower.bandwidth_ == local.bandwidth_ and published[client] > 0 and sum(published) == published[client]
    assert [m is None for m in flower.models_] == [i != client for i in range(len(local.models_))]


@pytest.mark.parametrize("make", [selective_fd, selective_fd_dp, fedmd_rr],
                         ids=["selective-fd-torch-soft", "selective-fd-dp-sgd", "fedmd-sklearn-rr"])
def test_selective_fd_over_the_apps_reproduces_fit(federation, task_identity, make, tmp_path) -> None:
    from threadpoolctl import threadpool_limits

    from privfed.federation.server_app import ServerJob, run_server

    torch = pytest.importorskip("torch")
    parties, paths, public, (X_test, _) = federation
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(1):
            local = make(client=1).fit(parties, public)
            # A bundle holds scikit-learn estimators, not the FittedClassifier wrapper of a refitted client model.
            bundle = str(tmp_path / "b") if make is not fedmd_rr else None
            job = ServerJob(make(client=1), public, num_supernodes=3, timeout=5, output_bundle=bundle)
            flower = run_server(LocalGrid(paths), job)
    finally:
        torch.set_num_threads(threads)
    assert_same_distillation(flower, local, X_test)
    assert "selective-fd-share" in local.bandwidth_ and len(local.bandwidth_["selective-fd-share"]) == 3
    # the parties' DP-SGD reports: one per party, counted in the bandwidth, only when the models train with DP-SGD
    assert ("dp-training" in local.bandwidth_) == (make is selective_fd_dp)
    if make is selective_fd_dp:
        (training,) = [e for e in flower.ledger_.entries if e.kind == "training"]
        assert len(training.analyses["example"].parameters["members"]) == 3
    if bundle:
        import privfed

        model, ledger = privfed.load_bundle(bundle)
        np.testing.assert_array_equal(model.predict(X_test), local.predict(X_test))
        assert [e.description for e in ledger.entries] == [e.description for e in local.ledger_.entries]


def test_selective_fd_party_state_survives_as_arrays(federation) -> None:
    """A party's state stored as records and rebuilt continues exactly as the one kept in memory."""
    from privfed.pipelines.models.torch_models import TorchMLP
    from privfed.pipelines.selective_fd.steps import (
        SelectiveFDEnsemble,
        SelectiveFDRound,
        client_state,
        distill_step,
        restore_client,
        setup_client,
        setup_messages,
        share_step,
    )

    torch = pytest.importorskip("torch")
    parties, _, public, _ = federation
    X, y = parties[0]
    model = selective_fd()
    setup = setup_messages(model._protocol(), np.arange(10), public, [7], None)[0]
    local_model = TorchMLP(hidden=(8,), batch_size=16)
    client = setup_client(setup, X, y, local_model=local_model)
    client, _ = share_step(client, SelectiveFDRound(np.arange(50), 1))
    client = distill_step(client, SelectiveFDEnsemble(np.arange(10), np.eye(10)[np.arange(10) % 10], 2))
    stored = client_state(client)
    assert all(a.dtype != object for record in stored for a in record.arrays.values())
    rebuilt = restore_client(stored, X, y, local_model=local_model)
    torch.set_num_threads(1)
    kept, rebuilt_share = share_step(client, SelectiveFDRound(np.arange(50, 120), 3))[1], \
        share_step(rebuilt, SelectiveFDRound(np.arange(50, 120), 3))[1]
    np.testing.assert_array_equal(kept.shared, rebuilt_share.shared)
    np.testing.assert_array_equal(kept.predictions, rebuilt_share.predictions)


def test_a_malformed_selective_fd_share_is_refused_naming_the_party(federation, task_identity, tmp_path) -> None:
    from flwr.app import Message
    from privfed.pipelines.selective_fd.steps import SelectiveFDShare

    from privfed.federation.server_app import FederationError, ServerJob, run_server
    from privfed.federation.task import from_recorddict, to_recorddict

    _, paths, public, _ = federation

    def out_of_range_labels(message, reply):
        if message.metadata.dst_node_id != 99 or message.metadata.message_type != "train.selective_fd":
            return reply
        records, _ = from_recorddict(reply.content, sender="test")
        if not records or records[0].kind != SelectiveFDShare.KIND:
            return reply
        share = SelectiveFDShare.from_record(records[0], sender="test")
        forged = SelectiveFDShare(share.shared, share.predictions + 10)
        return Message(to_recorddict([forged.to_record()]), reply_to=message)

    job = ServerJob(fedmd_rr(), public, num_supernodes=3, timeout=5, output_bundle=str(tmp_path / "bundle"))
    with pytest.raises(ValueError, match="client 0's model LogisticRegression is refitted every round"):
        run_server(LocalGrid(paths), job)
    from privfed.pipelines.models.torch_models import TorchMLP

    job = ServerJob(fedmd_rr(model=TorchMLP(hidden=(8,), batch_size=32)), public, num_supernodes=3, timeout=5,
                    output_bundle=str(tmp_path / "bundle"))
    with pytest.raises(MessageError, match=r"party 1 \(node 99\) sent a malformed 'selective-fd-share' message: "
                                           r"predictions .* class codes in 0..9"):
        run_server(LocalGrid(paths, tamper=out_of_range_labels), job)
    with pytest.raises(FederationError, match=r"party 2 \(node 98\) did not reply to the setup step"):
        run_server(LocalGrid(paths, silent={98: "train.selective_fd"}), job)
    assert not (tmp_path / "bundle").exists()


@pytest.mark.slow
def test_simulation_on_ray_equals_fit_for_l1(federation) -> None:
    """The CI check of issue 14: FedKT L1 on digits, three SuperNodes on Flower's simulation engine."""
    from privfed.federation import simulate

    parties, paths, public, (X_test, _) = federation
    local = fedkt("L1").fit(parties, public)
    flower = simulate(fedkt("L1", random_state=None), paths, public, timeout=120, random_state=5)
    assert_same_fit(flower, local, X_test)


@pytest.mark.slow
def test_selective_fd_simulation_on_ray_matches_fit(federation) -> None:
    """Selective-FD (KuLSIF selectors, server GNMax) on three Ray SuperNodes: the ledger and accuracy of fit."""
    from privfed.pipelines.selective_fd.estimator import SelectiveFD
    from sklearn.linear_model import LogisticRegression

    from privfed.federation import simulate

    parties, paths, public, (X_test, y_test) = federation

    def make():
        return SelectiveFD(LogisticRegression(max_iter=200), rounds=2, proxy_batch=80, labels="hard", privacy="gnmax",
                           sigma=2.0, n_auxiliary=60, max_known=60, tau_server=2.0, random_state=6, noise_seed=13)

    local = make().fit(parties, public)
    flower = simulate(make(), paths, public, timeout=180)
    for unit in local.ledger_.units:
        assert flower.ledger_.account(delta=1e-5, unit=unit).epsilon == pytest.approx(
            local.ledger_.account(delta=1e-5, unit=unit).epsilon, abs=1e-12
        )
    assert flower.ledger_.unaccounted == local.ledger_.unaccounted
    assert abs(flower.score(X_test, y_test) - local.score(X_test, y_test)) <= 0.05


def test_simulate_refuses_bad_arguments_before_starting_anything(federation) -> None:
    from privfed.pipelines.selective_fd.baselines import FedMD

    from privfed.federation import simulate

    parties, paths, public, _ = federation
    with pytest.raises(TypeError,
                       match="estimator must be a privfed FedKT, FedKD, PrivateKT, SelectiveFD, .* got Decision"):
        simulate(DecisionTreeClassifier(), parties, public)
    with pytest.raises(ValueError, match="callback runs in-process only"):
        simulate(FedMD(DecisionTreeClassifier(), callback=print), parties, public)
    with pytest.raises(ValueError, match="num_supernodes must be None or len\\(parties\\) = 3, got 5"):
        simulate(fedkt("L0"), paths, public, num_supernodes=5)
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds or None, got -1"):
        simulate(fedkt("L0"), parties, public, timeout=-1)
    with pytest.raises(ValueError, match=r"parties\[1\] = .*site.xlsx' must be an existing file"):
        simulate(fedkt("L0"), [paths[0], "site.xlsx"], public)


def test_a_configured_test_file_gives_the_accuracy_and_says_near_chance(federation, task_identity, tmp_path,
                                                                       capsys) -> None:
    """test-path: the run prints accuracy against the majority-class rate; the card says "near chance" plainly."""
    from privfed.federation.server_app import ServerJob, job_from_config, run_server

    parties, paths, public, (X_test, y_test) = federation
    np.savez(tmp_path / "test.npz", X=X_test, y=y_test)
    config = {"public-path": str(paths[0]).replace("site-0", "public"), "test-path": str(tmp_path / "test.npz")}
    test = job_from_config(config).test
    np.testing.assert_array_equal(test[1], y_test)
    for name, gamma in (("useful", 2.0), ("useless", 0.02)):
        run_server(LocalGrid(paths), ServerJob(fedkt("L1", gamma=gamma), public, num_supernodes=3, timeout=5,
                                               output_bundle=str(tmp_path / name), test=test))
        printed = capsys.readouterr().out
        card = (tmp_path / name / "MODEL_CARD.md").read_text()
        model = fedkt("L1", gamma=gamma).fit(parties, public)
        accuracy = np.mean(model.predict(X_test) == y_test)
        assert f"test accuracy {accuracy:.3f} on {len(y_test):,} test examples" in printed
        assert f"| test_accuracy | {accuracy:.6g} |" in card
        assert ("NEAR CHANCE" in printed) == ("NEAR CHANCE" in card) == (name == "useless"), (printed, accuracy)
    with pytest.raises(ValueError, match="test-path .*must hold arrays 'X' and 'y'"):
        job_from_config({**config, "test-path": config["public-path"]})


def test_simulate_drops_only_flowers_run_simulation_deprecation_notice(caplog) -> None:
    """privfed calls run_simulation on purpose (docs/federation.md): its deprecation notice is not privfed's
    users' concern; every other Flower record passes."""
    import logging

    from privfed.federation.simulation import _without_run_simulation_deprecation

    logger = logging.getLogger("flwr")
    with caplog.at_level(logging.WARNING, logger="flwr"), _without_run_simulation_deprecation():
        logger.warning("DEPRECATED FEATURE: %s", "The `run_simulation` function is deprecated and will be removed")
        logger.warning("a SuperNode is slow")
    assert [record.getMessage() for record in caplog.records] == ["a SuperNode is slow"]
    logger.warning("DEPRECATED FEATURE: The `run_simulation` function is deprecated")  # outside simulate: shown
    assert len(caplog.records) == 2


def test_the_run_config_keeps_noise_secret_unless_noise_seed_is_set() -> None:
    """``noise-seed`` (−1: secret, the default) and FedKT's ``collusion`` reach every estimator (issue 40)."""
    from privfed.federation.task import estimator_from_config

    for algorithm in ("fedkt", "fedkd", "privatekt", "selective-fd"):
        assert estimator_from_config({"algorithm": algorithm}).noise_seed is None
        assert estimator_from_config({"algorithm": algorithm, "noise-seed": 7}).noise_seed == 7
    assert estimator_from_config({"collusion": 2}).collusion == 2
    assert estimator_from_config({"collusion": -1}).collusion is None
