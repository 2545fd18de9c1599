"""FedKD with distributed Skellam noise over Flower's own SecAgg+ (the adapter FedKT uses): the same fit as in
process, a finite ε against the coordinator, and the attack — the coordinator holds only the sum.

The tests drive the real ServerApp (``run_server``, which runs ``SecAggPlusWorkflow``) and the real ClientApp
(under ``secaggplus_mod``) over the in-process grid of ``test_federation``; the last runs Flower's Ray simulation.
"""

from __future__ import annotations

import importlib.util
import math
import warnings

import numpy as np
import pytest
from privfed.pipelines.fedkd.estimator import FedKD
from sklearn.linear_model import LogisticRegression
from sklearn.tree import DecisionTreeClassifier
from test_federation_secure import CopyingGrid, DroppingGrid

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("flwr") is None, reason="flwr is not installed: pip install 'privfed[federation]'"
)

CLASSES = np.arange(10)


def secure(**changes) -> FedKD:
    """The secure FedKD under test; reproducible shares (noise_seed) so that a Flower run can equal a fit."""
    settings = {"gamma": None, "aggregator": "skellam", "secure_aggregation": True, "sigma": 12.0, "clip": 4.0,
                "quantization_scale": 2, "classes": CLASSES, "random_state": 0, "noise_seed": 3}
    return FedKD(LogisticRegression(max_iter=200), DecisionTreeClassifier(max_depth=6), **{**settings, **changes})


def releases(model: FedKD) -> list:
    return [(entry.get("observers"), entry["analyses"]) for entry in model.ledger_.to_dict()["entries"]
            if entry["kind"] == "release"]


def run(grid, model: FedKD, public) -> FedKD:
    from privfed.federation.server_app import ServerJob, run_server

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_server(grid, ServerJob(model, public, num_supernodes=3, timeout=5))


def fit(model: FedKD, parties, public) -> FedKD:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(parties, public)


def test_fedkd_secaggplus_over_the_apps_reproduces_fit(federation, task_identity) -> None:
    parties, paths, public, (X_test, _) = federation
    local = fit(secure(), parties, public)
    flower = run(CopyingGrid(paths), secure(), public)
    np.testing.assert_array_equal(flower.noisy_ensemble_, local.noisy_ensemble_)
    np.testing.assert_array_equal(flower.predict(X_test), local.predict(X_test))
    assert [e.note for e in flower.ledger_.entries] == [e.note for e in local.ledger_.entries]
    assert releases(flower) == releases(local)


def test_a_default_run_is_finite_for_both_observers_and_sends_no_noise_seed(federation, task_identity) -> None:
    _, paths, public, _ = federation
    grid, scalars = CopyingGrid(paths), []
    original = grid.send_and_receive

    def recording(messages, *, timeout=None):
        replies = original(messages, timeout=timeout)
        for message in [*messages, *replies]:
            scalars.extend(dict(value) for key, value in message.content.items() if key.endswith(".scalars"))
        return replies

    grid.send_and_receive = recording
    flower = run(grid, secure(noise_seed=None), public)
    assert not [record for record in scalars if "noise_seed" in record]
    assert flower.ledger_.noise["source"] == "secret"
    for observer in ("coordinator", "public"):
        for unit in ("party", "example"):
            report = flower.ledger_.account(observer=observer, unit=unit)
            assert math.isfinite(report.epsilon) and report.uncovered == (), (observer, unit)


def test_the_coordinator_receives_only_the_sum(federation, task_identity, monkeypatch) -> None:
    """The attack: every array the parties send the server, decoded as SecAgg+ encodes a vector (x ↦ x + B),
    is compared with each party's noisy levels: the masked vectors match a party's levels no better than chance,
    while the sum the server ends with is exactly the sum of the parties' noisy levels."""
    from flwr.common import bytes_to_ndarray
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key
    from privfed.pipelines.protocol.secure_sum import secure_value_bound

    from privfed.federation import secure_aggregation

    _, paths, public, _ = federation
    stored = []  # the ground truth: each party's noisy levels as it keeps them (never sent in clear)
    original_store = secure_aggregation.store_noisy_votes

    def keep(sent, state):
        stored.extend(np.asarray(m.noisy_levels) for m in sent if hasattr(m, "noisy_levels"))
        return original_store(sent, state)

    monkeypatch.setattr(secure_aggregation, "store_noisy_votes", keep)  # the ClientApp imports it per message
    grid, received = CopyingGrid(paths), []
    original = grid.send_and_receive

    def recording(messages, *, timeout=None):
        replies = original(messages, timeout=timeout)
        received.extend(replies)
        return replies

    grid.send_and_receive = recording
    flower = run(grid, secure(noise_seed=None), public)
    assert len(stored) == 3
    bound = secure_value_bound(2, 12.0 ** 2 / 3)
    # Nothing in clear: no privfed record of the train step holds levels or logits.
    kinds = {key.split(".")[0] for reply in received if reply.has_content() for key in reply.content.keys()}
    assert not kinds & {"fedkd-noisy-levels", "fedkd-logits"}
    masked = [[bytes_to_ndarray(b) for b in reply.content.config_records[RECORD_KEY_CONFIGS][Key.MASKED_PARAMETERS]]
              for reply in received if reply.has_content()
              and Key.MASKED_PARAMETERS in reply.content.config_records.get(RECORD_KEY_CONFIGS, {})]
    assert len(masked) == 3
    chance = 1.0 / (2 * bound + 1)
    for vectors in masked:
        decoded = vectors[-1].reshape(stored[0].shape).astype(np.int64) - bound
        for levels in stored:
            assert (decoded == levels).mean() < 20 * chance  # no party's levels in any masked vector
    level_sum = np.rint(flower.noisy_ensemble_ * 3 * 2 / 4.0).astype(np.int64)  # (Z/S)·sum/n inverted
    np.testing.assert_array_equal(level_sum, sum(stored))


def test_a_party_dropping_inside_secaggplus_is_accounted_at_the_realised_variance(federation, task_identity):
    _, paths, public, _ = federation
    flower = run(DroppingGrid(paths, 98), secure(), public)
    [(_, to_public), (_, to_coordinator)] = releases(flower)
    assert to_public["party"]["parameters"]["variance"] == pytest.approx(12.0 ** 2 * 2 / 3)
    assert to_coordinator["party"]["parameters"]["variance"] == pytest.approx(12.0 ** 2 / 3)  # 2 colluders
    assert "sum of 2 of 3 parties" in [e for e in flower.ledger_.entries if e.kind == "release"][-1].note


@pytest.mark.slow
def test_fedkd_secaggplus_on_the_ray_simulation_equals_fit(federation) -> None:
    from privfed.federation import simulate

    parties, paths, public, _ = federation
    local = fit(secure(), parties, public)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flower = simulate(secure(random_state=None), paths, public, timeout=120, random_state=0)
    np.testing.assert_array_equal(flower.noisy_ensemble_, local.noisy_ensemble_)
    assert releases(flower) == releases(local)
