"""A finite ε against the coordinator (issue 43, part A): the public label set, FedKD's secure sum, Selective-FD.

Each test plays the coordinator: it collects every message a run puts on the wire (in process, every
message goes through its wire form) and checks what it can learn from them, and the ledger's ε per observer.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from privfed.accounting import account
from privfed.accounting.skellam import SkellamMechanism
from privfed.pipelines.data.party_schema import WITHHELD_SIZE
from privfed.pipelines.fedkd.estimator import FedKD
from privfed.pipelines.fedkd.secure import level_sensitivity
from privfed.pipelines.privatekt.estimator import PrivateKT
from privfed.pipelines.protocol.messages import WireMessage
from privfed.pipelines.protocol.secure_sum import add_skellam_share
from sklearn.linear_model import LogisticRegression
from sklearn.tree import DecisionTreeClassifier

from tests.conftest import digits_federation

CLASSES = np.arange(10)
SCHEMA = "the schema exchange"


@pytest.fixture(scope="module")
def digits():
    parties, public, test = digits_federation(3)
    return parties, public[:60], test


@pytest.fixture
def wire(monkeypatch):
    """Every message of the run, in the form it travels in (what a coordinator could read)."""
    sent = []
    original = WireMessage.to_record

    def recorded(message):
        record = original(message)
        sent.append(record)
        return record

    monkeypatch.setattr(WireMessage, "to_record", recorded)
    return sent


def assert_nothing_tells_a_party_size_or_labels(records, parties) -> None:
    """No party's size, label set or class counts in any message."""
    schemas = [record for record in records if record.kind == "party-schema"]
    assert len(schemas) >= len(parties)  # (a traffic count may serialise them again)
    for record in schemas:
        assert record.scalars["n_examples"] == WITHHELD_SIZE
        np.testing.assert_array_equal(record.arrays["classes"], CLASSES)
    for record in records:
        assert not record.arrays.get("class_counts", np.zeros(1)).any(), record.kind
        assert record.scalars.get("parameter_count", -1) == -1, record.kind


def schema_entries(ledger) -> list[str]:
    return [text for text in ledger.unaccounted if SCHEMA in text]


# --- 1. the public label set ----------------------------------------------------------------------------
def test_fedkd_with_public_classes_sends_no_size_labels_or_counts(digits, wire) -> None:
    parties, public, _ = digits
    model = FedKD(LogisticRegression(max_iter=200), DecisionTreeClassifier(max_depth=6), gamma=0.5, clip=5.0,
                  classes=CLASSES, random_state=0).fit(parties, public)
    assert_nothing_tells_a_party_size_or_labels(wire, parties)
    assert model.weighting_ == "uniform"  # "auto" with a public label set: no class counts travel
    assert schema_entries(model.ledger_) == []
    assert model.bandwidth_.parameter_counts == (None,) * len(parties)
    # The plain FedKD coordinator still sees the logits before the server's noise: ∞, for that reason only.
    report = model.ledger_.account(observer="coordinator")
    assert math.isinf(report.epsilon) and len(report.uncovered) == 1
    assert "before noise is added" in report.uncovered[0]


def test_fedkd_without_public_classes_records_the_schema_exchange(digits) -> None:
    parties, public, _ = digits
    model = FedKD(LogisticRegression(max_iter=200), DecisionTreeClassifier(max_depth=6), gamma=0.5, clip=5.0,
                  random_state=0).fit(parties, public)
    assert len(schema_entries(model.ledger_)) == 1
    assert model.weighting_ == "class-count"


def test_privatekt_with_public_classes_gives_the_coordinator_a_finite_epsilon(digits, wire) -> None:
    parties, public, _ = digits
    model = PrivateKT(DecisionTreeClassifier(max_depth=5), rounds=2, queries_per_round=5, self_training_size=40,
                      buffer_rounds=2, classes=CLASSES, random_state=0).fit(parties, public)
    assert_nothing_tells_a_party_size_or_labels(wire, parties)
    assert schema_entries(model.ledger_) == []
    coordinator = model.ledger_.account(observer="coordinator")
    assert math.isfinite(coordinator.epsilon) and coordinator.uncovered == ()
    assert coordinator.epsilon == pytest.approx(model.ledger_.account(observer="public").epsilon)
    default = PrivateKT(DecisionTreeClassifier(max_depth=5), rounds=2, queries_per_round=5, self_training_size=40,
                        buffer_rounds=2, random_state=0).fit(parties, public)
    assert len(schema_entries(default.ledger_)) == 1
    assert math.isinf(default.ledger_.account(observer="coordinator").epsilon)


def test_a_label_outside_the_public_classes_is_refused_on_the_party(digits) -> None:
    parties, public, _ = digits
    with pytest.raises(ValueError, match="within the public classes"):
        PrivateKT(DecisionTreeClassifier(), rounds=1, self_training_size=40, classes=np.arange(5)).fit(parties, public)
    with pytest.raises(ValueError, match="classes must be a 1-D array of at least 2 distinct labels"):
        FedKD(LogisticRegression(), DecisionTreeClassifier(), classes=[3]).fit(parties, public)
    with pytest.raises(ValueError, match="classes applies to single-label parties"):
        FedKD(LogisticRegression(), DecisionTreeClassifier(), multilabel=True, classes=CLASSES).fit(parties, public)


# --- 2. FedKD over a secure sum with distributed Skellam noise --------------------------------------------
def test_level_sensitivity_is_one_party_moving_every_level_across_the_grid() -> None:
    scale, n_outputs = 3, 4
    move = level_sensitivity(scale, n_outputs)
    assert move == {"l1_sensitivity": 2 * scale * n_outputs, "l2_sensitivity": pytest.approx(2 * scale * 2.0),
                    "coordinate_sensitivity": 2 * scale, "moved_coordinates": n_outputs}
    rng = np.random.default_rng(0)
    levels = rng.integers(-scale, scale + 1, size=(2000, 2, n_outputs))  # pairs of level vectors on the grid
    diff = levels[:, 0] - levels[:, 1]
    assert np.abs(diff).sum(axis=1).max() <= move["l1_sensitivity"]
    assert np.sqrt((diff ** 2).sum(axis=1)).max() <= move["l2_sensitivity"] + 1e-12
    # ... and the bound is reached: a row of +S and −S levels against its mirror image.
    extreme = np.array([scale, -scale, scale, -scale])
    assert np.abs(extreme - -extreme).sum() == move["l1_sensitivity"]
    assert np.linalg.norm(extreme - -extreme) == pytest.approx(move["l2_sensitivity"])


def secure_fedkd(**options) -> FedKD:
    settings = {"gamma": None, "aggregator": "skellam", "secure_aggregation": True, "sigma": 12.0, "clip": 4.0,
                "quantization_scale": 2, "classes": CLASSES, "random_state": 0}
    return FedKD(LogisticRegression(max_iter=200), DecisionTreeClassifier(max_depth=6), **{**settings, **options})


def test_fedkd_secure_aggregation_gives_the_coordinator_only_the_noisy_sum(digits, wire) -> None:
    parties, public, _ = digits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = secure_fedkd().fit(parties, public)
    kinds = [record.kind for record in wire]
    assert "fedkd-logits" not in kinds and kinds.count("fedkd-noisy-levels") == len(parties)
    assert_nothing_tells_a_party_size_or_labels(wire, parties)
    def expected(variance):
        return account(SkellamMechanism(variance, unit="party", count=len(public), **level_sensitivity(2, 10)),
                       delta=model.delta).epsilon

    # The public: every share (σ²); the coordinator colluding with the 2 other parties: the target's own, σ²/3.
    for observer, variance in (("public", 12.0 ** 2), ("coordinator", 12.0 ** 2 / 3)):
        report = model.ledger_.account(observer=observer)
        assert report.uncovered == ()
        assert report.epsilon == pytest.approx(expected(variance), rel=1e-9)
    assert "the coordinator colludes with at most 2 of the 3 parties" in model.ledger_.account(
        observer="coordinator").assumptions
    assert model.ledger_.unaccounted == ()
    assert model.weighting_ == "uniform"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        honest = secure_fedkd(collusion=0).fit(parties, public)
    assert honest.ledger_.account(observer="coordinator").epsilon == pytest.approx(expected(12.0 ** 2), rel=1e-9)


def test_the_coordinator_cannot_regenerate_the_skellam_shares(digits, wire) -> None:
    """The attack: from the tasks (every seed the coordinator sent) rebuild the shares FedKT-style; it fails."""
    parties, public, _ = digits
    clean = FedKD(LogisticRegression(max_iter=200), DecisionTreeClassifier(max_depth=6), gamma=None, clip=4.0,
                  quantization_scale=2, classes=CLASSES, random_state=0).fit(parties, public)
    wire.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        secure = secure_fedkd().fit(parties, public)
    to_levels = len(parties) * 2 / 4.0  # n · S / Z
    noise = np.rint((secure.noisy_ensemble_ - clean.noisy_ensemble_) * to_levels).astype(np.int64)
    assert noise.any()
    tasks = [record for record in wire if record.kind == "fedkd-task"]
    assert all("noise_seed" not in task.scalars for task in tasks)
    rate = 12.0 ** 2 / len(parties) / 2
    guesses = []
    for seeds in ([task.scalars["seed"] for task in tasks], [0, 1, 2]):
        total = np.zeros_like(noise)
        for seed in seeds:
            rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
            total += rng.poisson(rate, noise.shape) - rng.poisson(rate, noise.shape)
        guesses.append(total)
    assert all((guess != noise).mean() > 0.5 for guess in guesses)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = secure_fedkd().fit(parties, public)  # same random_state, fresh secret shares
        seeded = [secure_fedkd(noise_seed=7).fit(parties, public).noisy_ensemble_ for _ in range(2)]
    assert not np.array_equal(again.noisy_ensemble_, secure.noisy_ensemble_)
    np.testing.assert_array_equal(*seeded)


def test_secure_fedkd_settings_are_checked(digits) -> None:
    parties, public, _ = digits
    for options, message in [
        ({"sigma": None}, "sigma is required with aggregator='skellam'"),
        ({"gamma": 1.0}, "secure_aggregation=True needs gamma=None"),
        ({"weighting": "class-count"}, "secure_aggregation=True needs weighting='uniform' or 'auto'"),
        ({"quantizer": "paper"}, "secure_aggregation=True needs quantizer='public'"),
        ({"secure_aggregation": False}, "secure_aggregation=True and aggregator='skellam' go together"),
        ({"collusion": 3}, r"collusion must be a number of parties colluding with the coordinator in 0\.\.2"),
        ({"collusion": -1}, "collusion"),
    ]:
        with pytest.raises(ValueError, match=message):
            secure_fedkd(**options).fit(parties, public)
    with pytest.raises(ValueError, match="sigma applies to aggregator='skellam' only"):
        FedKD(LogisticRegression(), DecisionTreeClassifier(), sigma=3.0).fit(parties, public)
    with pytest.raises(ValueError, match="collusion applies to secure_aggregation=True only"):
        FedKD(LogisticRegression(), DecisionTreeClassifier(), collusion=1).fit(parties, public)
    with pytest.raises(ValueError, match="fit_logits quantizes"):
        secure_fedkd().fit_logits([np.zeros((len(public), 10))] * 3, np.zeros((3, 10)), public)


def test_a_party_never_sends_its_levels_without_a_share() -> None:
    generator = np.random.default_rng(0)
    for variance in (0.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="share's variance must be finite and > 0"):
            add_skellam_share(np.zeros(3, dtype=np.int64), variance, value_bound=2, generator=generator, party="p")
    with pytest.raises(ValueError, match=r"integers within ±2"):
        add_skellam_share(np.array([3]), 1.0, value_bound=2, generator=generator, party="p")


# --- 3. Selective-FD's private configuration ----------------------------------------------------------------
def test_selective_fd_private_configuration_is_finite_for_both_observers(digits) -> None:
    pytest.importorskip("opacus")
    from privfed.pipelines.models.dp_config import DPConfig
    from privfed.pipelines.models.torch_models import TorchMLP
    from privfed.pipelines.selective_fd.estimator import SelectiveFD

    parties, public, _ = digits
    dp = DPConfig(noise_multiplier=1.0, max_grad_norm=1.0, delta=1e-5, sample_rate=0.2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = SelectiveFD(TorchMLP(hidden=(8,), epochs=1, random_state=0, dp=dp), rounds=1, local_steps=1,
                            distill_steps=1, proxy_batch=20, labels="hard", privacy="rr", epsilon_per_round=8.0,
                            dp_selector_frequencies=8, n_auxiliary=40, classes=CLASSES,
                            random_state=0).fit(parties, public)
    assert schema_entries(model.ledger_) == []
    for observer in ("coordinator", "public"):
        example = model.ledger_.account(observer=observer, unit="example")
        assert math.isfinite(example.epsilon) and example.uncovered == (), observer
        party = model.ledger_.account(observer=observer, unit="party")  # the DP selector: example level only
        assert math.isinf(party.epsilon)
        assert any("not at party level" in reason for reason in party.uncovered)


# --- over the Flower apps (an in-process grid) ------------------------------------------------------------
def test_fedkd_with_public_classes_over_the_apps_reproduces_fit(federation, task_identity) -> None:
    """The schema query carries the public label set; the Flower ledger equals fit's, without the schema entry.
    (FedKD's secure sum over SecAgg+: ``test_federation_secure_fedkd.py``.)"""
    pytest.importorskip("flwr")
    from privfed.federation.server_app import ServerJob, run_server
    from tests.test_federation import LocalGrid

    parties, paths, public, (X_test, _) = federation

    def fedkd() -> FedKD:
        return FedKD(LogisticRegression(max_iter=200), DecisionTreeClassifier(max_depth=6), gamma=1.0, clip=5.0,
                     classes=CLASSES, random_state=2, noise_seed=6)

    local = fedkd().fit(parties, public)
    flower = run_server(LocalGrid(paths), ServerJob(fedkd(), public, num_supernodes=3, timeout=5))
    np.testing.assert_array_equal(flower.noisy_ensemble_, local.noisy_ensemble_)
    assert [e.description for e in flower.ledger_.entries] == [e.description for e in local.ledger_.entries]
    assert schema_entries(flower.ledger_) == [] and flower.weighting_ == "uniform"


def test_a_party_refuses_a_share_without_a_public_grid(digits) -> None:
    from privfed.pipelines.fedkd.steps import FedKDTask, fedkd_party_step
    from privfed.pipelines.protocol.messages import MessageError

    parties, public, _ = digits
    task = FedKDTask(public=public, classes=CLASSES, multilabel=False, clip=math.nan, quantization_scale=0, seed=0,
                     send_class_counts=False, skellam_share_variance=4.0)
    with pytest.raises(MessageError, match="Skellam share without a public grid"):
        fedkd_party_step(task, *parties[0], local_model=LogisticRegression(max_iter=50), party="party 0")
