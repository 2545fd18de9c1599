"""FedKT with distributed Skellam noise over Flower's own SecAgg+: the same fit as in process, and dropouts.

The first tests drive the real ServerApp (``run_server``, which runs ``SecAggPlusWorkflow``) and the real
ClientApp (under ``secaggplus_mod``) over the in-process grid of ``test_federation``; the last runs Flower's
Ray simulation engine (``privfed.federation.simulate``).
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from privfed.pipelines.fedkt.estimator import FedKT
from sklearn.tree import DecisionTreeClassifier
from test_federation import LocalGrid

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("flwr") is None, reason="flwr is not installed: pip install 'privfed[federation]'"
)


class CopyingGrid(LocalGrid):
    """The in-process grid, each message delivered as a copy (a real Grid serialises it; SecAgg+'s workflow sends
    one content object to every node and ``secaggplus_mod`` edits what it receives)."""

    def send_and_receive(self, messages, *, timeout=None):
        import copy

        return super().send_and_receive([copy.deepcopy(message) for message in messages], timeout=timeout)


class DroppingGrid(CopyingGrid):
    """Node ``node`` takes its task and answers SecAgg+ up to ``from_stage``, then is gone (by default: after the
    key sharing, before sending its masked vector)."""

    def __init__(self, paths, node, from_stage="collect_masked_vectors"):
        super().__init__(paths)
        self.node = node
        stages = ("setup", "share_keys", "collect_masked_vectors", "unmask")
        self.stages = stages[stages.index(from_stage):]

    def send_and_receive(self, messages, *, timeout=None):
        from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key

        def dropped(message):
            configs = message.content.config_records.get(RECORD_KEY_CONFIGS, {})
            return message.metadata.dst_node_id == self.node and configs.get(Key.STAGE) in self.stages

        return super().send_and_receive([m for m in messages if not dropped(m)], timeout=timeout)


def secure(**changes) -> FedKT:
    """The secure FedKT under test; reproducible noise (noise_seed) so that a Flower run can equal a fit."""
    settings = dict(n_teachers=3, query_fraction=0.5, random_state=5, privacy="L1", aggregator="skellam",
                    secure_aggregation=True, sigma=4.0, noise_seed=9)
    return FedKT(DecisionTreeClassifier(max_depth=6), **{**settings, **changes})


def releases(model: FedKT) -> list[dict]:
    """The ledger's release entries as recorded (their analyses: ε curves, parameters, observers)."""
    return [(entry["observers"], entry["analyses"]) for entry in model.ledger_.to_dict()["entries"]
            if entry["kind"] == "release"]


def assert_same_secure_fit(flower: FedKT, local: FedKT, X_test: np.ndarray) -> None:
    np.testing.assert_array_equal(flower.predict(X_test), local.predict(X_test))
    assert [e.note for e in flower.ledger_.entries] == [e.note for e in local.ledger_.entries]
    # The ε of a seeded run is ∞ (the noise is reproducible): compare what each release was accounted at.
    assert releases(flower) == releases(local)
    # Over SecAgg+, a party's train reply carries nothing of its votes (its histogram travels masked).
    assert "fedkt-noisy-votes" not in flower.bandwidth_ and "fedkt-votes" not in flower.bandwidth_


def test_secaggplus_over_the_apps_reproduces_fit(federation, task_identity) -> None:
    from privfed.federation.server_app import ServerJob, run_server

    parties, paths, public, (X_test, _) = federation
    local = secure().fit(parties, public)
    grid = CopyingGrid(paths)
    sent_types = []
    original = grid.send_and_receive

    def recording(messages, *, timeout=None):
        sent_types.extend(m.metadata.message_type for m in messages)
        return original(messages, timeout=timeout)

    grid.send_and_receive = recording
    flower = run_server(grid, ServerJob(secure(), public, num_supernodes=3, timeout=5))
    assert_same_secure_fit(flower, local, X_test)
    # schema, the tasks, then SecAgg+'s four stages to every party
    assert sent_types.count("train") == 3 + 4 * 3


def test_a_default_run_sends_nothing_noise_related_and_its_coordinator_epsilon_assumes_collusion(federation,
                                                                                               task_identity):
    """noise_seed=None: no task carries a noise seed (each party draws its Skellam share secretly), and the
    coordinator's ε is computed against it colluding with the two other parties (one share σ²/3 left)."""
    from privfed.federation.server_app import ServerJob, run_server

    _, paths, public, _ = federation
    grid, scalars = CopyingGrid(paths), {}
    original = grid.send_and_receive

    def recording(messages, *, timeout=None):  # every privfed record's scalars, in both directions
        replies = original(messages, timeout=timeout)
        for message in [*messages, *replies]:
            for key, value in message.content.items():
                if key.endswith(".scalars"):
                    scalars.setdefault(key, []).append(dict(value))
        return replies

    grid.send_and_receive = recording
    flower = run_server(grid, ServerJob(secure(noise_seed=None), public, num_supernodes=3, timeout=5))
    assert len(scalars["fedkt-task.scalars"]) == 3
    assert not [key for key, sent in scalars.items() for record in sent if "noise_seed" in record]
    assert flower.ledger_.noise["source"] == "secret" and flower.ledger_.seeds == {"random_state": 5}
    [(_, to_public), (_, to_coordinator)] = releases(flower)
    assert to_public["party"]["parameters"]["variance"] == pytest.approx(16.0)
    assert to_coordinator["party"]["parameters"]["variance"] == pytest.approx(16.0 / 3)
    coordinator = [e for e in flower.ledger_.entries if e.kind == "release"][-1].note
    assert "assumes the coordinator colludes with at most 2 of the 3 parties" in coordinator
    assert "secure aggregation by Flower's SecAgg+" in coordinator
    public_epsilon = flower.ledger_.account(1e-5).epsilon
    assert np.isfinite(public_epsilon) and flower.ledger_.account(1e-5, observer="coordinator").epsilon > public_epsilon


def test_a_party_dropping_within_the_threshold_is_accounted_at_the_realised_variance(federation, task_identity):
    """Party 2 never answers: the two others' noisy histograms are summed; the ledger records variance σ²·2/3."""
    import privfed.pipelines.fedkt.estimator as fedkt_module
    from privfed.pipelines.fedkt.secure import FedKTVoteSum
    from privfed.pipelines.fedkt.server import fedkt_server_step

    from privfed.federation.server_app import ServerJob, run_server

    parties, paths, public, (X_test, _) = federation
    captured = {}
    original = fedkt_module.secure_sum

    def drop_party_2(tasks, sent, names, *, max_bytes, n_parties=None):
        full = original(tasks[:2], sent[:2], names[:2], max_bytes=max_bytes, n_parties=n_parties)
        captured["sum"] = FedKTVoteSum(full.vote_sum, n_parties=3, n_contributors=2)
        return captured["sum"]

    fedkt_module.secure_sum = drop_party_2
    try:
        local = secure().fit(parties, public)
    finally:
        fedkt_module.secure_sum = original
    # node ids are 100 - party index: party 2 is node 98, which drops out inside SecAgg+ (after the key sharing)
    flower = run_server(DroppingGrid(paths, 98), ServerJob(secure(), public, num_supernodes=3, timeout=5))
    assert_same_secure_fit(flower, local, X_test)
    # or before it (it never takes its task): the same sum and the same ledger
    early = run_server(CopyingGrid(paths, silent={98: "train"}), ServerJob(secure(), public, num_supernodes=3,
                                                                          timeout=5))
    assert_same_secure_fit(early, local, X_test)
    note = [entry for entry in flower.ledger_.entries if entry.kind == "release"][-1].note
    assert "sum of 2 of 3 parties" in note and "1 dropped out" in note
    full = secure().fit(parties, public)
    variance = [analyses["party"]["parameters"]["variance"] for observers, analyses in releases(flower)]
    full_variance = [analyses["party"]["parameters"]["variance"] for observers, analyses in releases(full)]
    assert variance == pytest.approx([16.0 * 2 / 3, 16.0 / 3]) and full_variance == pytest.approx([16.0, 16.0 / 3])
    assert fedkt_server_step is not None and captured["sum"].n_contributors == 2


def test_two_parties_dropping_halt_secaggplus_and_nothing_is_written(federation, task_identity, tmp_path):
    from privfed.pipelines.protocol.messages import MessageError

    from privfed.federation.server_app import ServerJob, run_server

    _, paths, public, _ = federation
    job = ServerJob(secure(), public, num_supernodes=3, timeout=5, output_bundle=str(tmp_path / "bundle"))
    with pytest.raises((MessageError, ValueError), match="at least 2 parties|threshold"):
        run_server(CopyingGrid(paths, silent={98: "train", 99: "train"}), job)
    assert not (tmp_path / "bundle").exists()


@pytest.mark.parametrize("stage", ["setup", "share_keys"])
def test_flower_1_41_secaggplus_cannot_lose_a_party_before_its_key_shares_are_out(federation, task_identity,
                                                                                 tmp_path, stage):
    """A limitation of Flower 1.41's SecAggPlusWorkflow, not of privfed: a node lost in stage 0 or 1 stays among
    the sampled nodes, so the unmask stage asks the survivors for key shares of it that they never received
    (``secaggplus_mod._unmask``: ``KeyError``); the protocol halts. privfed stops without writing anything."""
    from privfed.pipelines.protocol.messages import MessageError

    from privfed.federation.server_app import ServerJob, run_server

    _, paths, public, _ = federation
    job = ServerJob(secure(), public, num_supernodes=3, timeout=5, output_bundle=str(tmp_path / "bundle"))
    with pytest.raises(MessageError, match="SecAgg\\+ halted"):
        run_server(DroppingGrid(paths, 98, from_stage=stage), job)
    assert not (tmp_path / "bundle").exists()


@pytest.mark.slow
def test_secaggplus_on_the_ray_simulation_equals_fit(federation) -> None:
    from privfed.federation import simulate

    parties, paths, public, (X_test, _) = federation
    local = secure().fit(parties, public)
    flower = simulate(secure(random_state=None), paths, public, timeout=120, random_state=5)
    assert_same_secure_fit(flower, local, X_test)


def test_twelve_parties_share_with_a_logarithmic_window_and_three_may_drop(tmp_path, task_identity):
    """12 parties: each shares with the 8 nearest of its shuffled ring (num_shares 9, threshold 6, not all 11
    others); the sum equals fit's, and with 3 parties gone at the masked-vectors stage it is the 9 others' sum."""
    from conftest import digits_federation
    from flower_sites import write_sites
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage

    from privfed.federation.server_app import ServerJob, run_server

    parties, public, (X_test, _) = digits_federation(12)
    paths = write_sites(tmp_path, parties, public)
    grid, keys_sent = CopyingGrid(paths), []
    original = grid.send_and_receive

    def recording(messages, *, timeout=None):
        for message in messages:
            configs = message.content.config_records.get(RECORD_KEY_CONFIGS, {})
            if configs.get(Key.STAGE) == Stage.SETUP:
                keys_sent.append((configs[Key.SHARE_NUMBER], configs[Key.THRESHOLD]))
            elif configs.get(Key.STAGE) == Stage.SHARE_KEYS:
                keys_sent.append(len(configs) - 1)  # one public-key pair per window member, and the stage
        return original(messages, timeout=timeout)

    grid.send_and_receive = recording
    settings = dict(n_teachers=2, query_fraction=0.25, n_partitions=1)
    flower = run_server(grid, ServerJob(secure(**settings), public, num_supernodes=12, timeout=5))
    assert_same_secure_fit(flower, secure(**settings).fit(parties, public), X_test)
    assert keys_sent == [(9, 6)] * 12 + [9] * 12

    class ThreeDropping(CopyingGrid):
        def send_and_receive(self, messages, *, timeout=None):
            def dropped(message):
                configs = message.content.config_records.get(RECORD_KEY_CONFIGS, {})
                return message.metadata.dst_node_id in (89, 93, 97) and configs.get(Key.STAGE) in (
                    Stage.COLLECT_MASKED_VECTORS, Stage.UNMASK)

            return super().send_and_receive([m for m in messages if not dropped(m)], timeout=timeout)

    survived = run_server(ThreeDropping(paths), ServerJob(secure(**settings), public, num_supernodes=12, timeout=5))
    note = [entry for entry in survived.ledger_.entries if entry.kind == "release"][-1].note
    assert "sum of 9 of 12 parties" in note and "3 dropped out" in note
