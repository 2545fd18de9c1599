"""The attacks on FedKD's and PrivateKT's noise, played as the observers would (issue 40).

* FedKD: the public holds ``ledger.json``. It tries to regenerate the server's Laplace noise from what the
  ledger records (``random_state``, as privfed derived the noise from it before 0.2, and the noise seed when
  one is recorded).
* PrivateKT: the coordinator holds every task it sent and every report it received. It tries to regenerate
  each client's randomized-response coins from them (the task's ``seed``, from which the coins used to be
  drawn, and its ``noise_seed`` when it carries one): with the coins it knows which reported labels are the
  client's true predictions.

Both fail on a default run (secret noise, drawn where it is added) and succeed with ``noise_seed=``, where the
ledger says every ε is ∞. Two default fits with one ``random_state`` share the parties' models and the
sampling, never the noise.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math

import numpy as np
import pytest
from privfed.accounting import NoiseSource
from privfed.pipelines.fedkd import estimator as fedkd_module
from privfed.pipelines.fedkd.estimator import FedKD, party_logits, party_message
from privfed.pipelines.fedkd.steps import FedKDTask
from privfed.pipelines.models.fitting import fit_classifier
from privfed.pipelines.privatekt import estimator as privatekt_module
from privfed.pipelines.privatekt.estimator import PrivateKT
from privfed.pipelines.privatekt.steps import PrivateKTReport, PrivateKTTask
from privfed.pipelines.protocol.messages import MessageError
from sklearn.linear_model import LogisticRegression
from sklearn.tree import DecisionTreeClassifier

from tests.conftest import digits_federation

GAMMA = 0.5


@pytest.fixture(scope="module")
def digits():
    return digits_federation(3)


# --- FedKD: the public regenerates the server's noise from ledger.json ----------------------------------------
def fedkd_noise_candidates(document: dict, shape: tuple[int, int], gamma: float) -> list[np.ndarray]:
    """Every Laplace noise array the holder of ``ledger.json`` can derive for a FedKD run of this ``shape``."""
    candidates = []
    random_state = document["seeds"].get("random_state")
    if random_state is not None:  # privfed before 0.2: the server's stream was the second child of random_state
        server_stream = np.random.SeedSequence(random_state).spawn(2)[1]
        candidates += [np.random.default_rng(server_stream).laplace(0.0, 1 / gamma, shape),
                       np.random.default_rng(random_state).laplace(0.0, 1 / gamma, shape)]
    if (document.get("noise") or {}).get("source") == "seeded":  # the server's source: child 0 of the recorded root
        server = NoiseSource.seeded(NoiseSource.seeded(document["noise"]["noise_seed"]).child_seeds(1)[0])
        candidates.append(server.generator.laplace(0.0, 1 / gamma, shape))
    return candidates


@pytest.fixture(scope="module")
def fedkd_inputs(digits):
    """The parties' logits on the public set and their class counts, computed once."""
    parties, public, _ = digits
    fitted = [fit_classifier(LogisticRegression(max_iter=200), X, y, n_classes=10, seed=i)
              for i, (X, y) in enumerate(parties)]
    logits = [party_logits(f, public, clip=4.0) for f in fitted]
    counts = np.stack([np.bincount(y, minlength=10) for _, y in parties])
    return logits, counts, public


@pytest.mark.parametrize("noise_seed", [None, 17], ids=["secret", "noise_seed"])
def test_fedkd_server_noise_is_regenerated_from_the_ledger_only_with_a_noise_seed(fedkd_inputs, noise_seed):
    logits, counts, public = fedkd_inputs
    model = FedKD(None, DecisionTreeClassifier(max_depth=5), gamma=GAMMA, clip=4.0, quantization_scale=20,
                  random_state=5, noise_seed=noise_seed).fit_logits(logits, counts, public)
    sent = [party_message(z, clip=4.0, quantization_scale=20) for z in logits]
    noise = model.noisy_ensemble_ - np.einsum("kc,knc->nc", model.weights_, sent)  # what the server added
    document = json.loads(model.ledger_.to_json())  # everything the public holds besides the model
    regenerated = [np.allclose(candidate, noise, rtol=0, atol=1e-9)
                   for candidate in fedkd_noise_candidates(document, noise.shape, GAMMA)]
    if noise_seed is None:
        assert not any(regenerated) and document["noise"]["source"] == "secret"
        assert document["seeds"] == {"random_state": 5}  # random_state is still recorded: it no longer seeds noise
        assert math.isfinite(model.ledger_.account().epsilon)
    else:
        assert regenerated[-1] and not any(regenerated[:-1])
        assert model.ledger_.account().epsilon == math.inf
        assert any("NOISE NOT SECRET" in note for note in model.ledger_.unaccounted)


def test_two_default_fedkd_fits_share_the_parties_models_but_not_the_noise(digits, monkeypatch):
    parties, public, _ = digits
    seen = []
    receive = fedkd_module.receive_fedkd_replies

    def recording(tasks, records, names, **options):  # the coordinator's view: the tasks it sent, the replies
        seen.append(([task.to_record() for task in tasks], receive(tasks, records, names, **options)))
        return seen[-1][1]

    monkeypatch.setattr(fedkd_module, "receive_fedkd_replies", recording)
    runs = [FedKD(LogisticRegression(max_iter=200), DecisionTreeClassifier(max_depth=5), gamma=GAMMA, clip=4.0,
                  quantization_scale=20, random_state=1, noise_seed=noise_seed).fit(parties, public)
            for noise_seed in (None, None, 3, 3)]
    (tasks_a, replies_a), (tasks_b, replies_b) = seen[:2]
    for a, b in zip(replies_a, replies_b):  # same random_state: the same local models, the same quantized logits
        np.testing.assert_array_equal(a.quantized_logits, b.quantized_logits)
    assert [t.scalars for t in tasks_a] == [t.scalars for t in tasks_b]
    assert not any("noise_seed" in t.scalars for t in tasks_a)  # secret noise: nothing noise-related is sent
    assert not np.isin(runs[0].noisy_ensemble_, runs[1].noisy_ensemble_).any()  # the server's noise is fresh
    tasks_seeded, _ = seen[2]
    seeds = [t.scalars["noise_seed"] for t in tasks_seeded]
    assert len(set(seeds)) == len(parties)  # each party its own noise seed (its DP-SGD noise, if DP-trained)
    assert seeds == NoiseSource.seeded(3).child_seeds(len(parties) + 1)[1:]
    np.testing.assert_array_equal(runs[2].noisy_ensemble_, runs[3].noisy_ensemble_)
    np.testing.assert_array_equal(runs[2].predict(public), runs[3].predict(public))


def test_the_noise_seed_is_on_the_wire_only_when_set():
    task = FedKDTask(public=np.zeros((2, 3)), classes=np.arange(2), multilabel=False, clip=1.0, quantization_scale=2,
                     seed=4, send_class_counts=True)
    record = task.to_record()
    assert "noise_seed" not in record.scalars and FedKDTask.from_record(record, sender="server").noise_seed is None
    seeded = dataclasses.replace(task, noise_seed=2**62).to_record()
    assert FedKDTask.from_record(seeded, sender="server").noise_seed == 2**62
    seeded.scalars["noise_seed"] = "7"
    with pytest.raises(MessageError, match="server sent a malformed 'fedkd-task' message: noise_seed = '7' is not a"):
        FedKDTask.from_record(seeded, sender="server")
    seeded.scalars["surprise"] = 1
    with pytest.raises(MessageError, match=r"scalars .*, expected exactly .* \(optional: \[[^]]*'noise_seed'"):
        FedKDTask.from_record(seeded, sender="server")
    del seeded.scalars["surprise"], seeded.scalars["seed"]
    with pytest.raises(MessageError, match="expected exactly"):  # a required scalar is still required
        FedKDTask.from_record(seeded, sender="server")


# --- PrivateKT: the coordinator regenerates the clients' coins from its tasks ------------------------------------
def coin_candidates(task: PrivateKTTask, n_labels: int, n_classes: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every (keep, replacement) pair of coins the coordinator can derive from a task it sent."""
    generators = []
    legacy = np.random.default_rng(task.seed)  # privfed before 0.2: the local model's seed, then the coins
    legacy.integers(2**31)
    generators.append(legacy)
    if task.noise_seed is not None:
        generators.append(NoiseSource.seeded(task.noise_seed).generator)
    return [(g.random(n_labels) < task.keep_probability, g.integers(0, n_classes, size=n_labels)) for g in generators]


def privatekt(noise_seed):
    return PrivateKT(DecisionTreeClassifier(max_depth=5), epsilon_per_round=2.0, queries_per_round=20, rounds=3,
                     self_training_size=0, client_fraction=0.67, random_state=4, noise_seed=noise_seed)


def coordinator_views(parties, public, monkeypatch, noise_seeds):
    """Per fit: the (task, report) pairs the coordinator sent and received, both through their wire form."""
    views: list[list] = []
    step = privatekt_module.privatekt_party_step

    def recording(task, X, y, **options):
        sent = step(task, X, y, **options)
        received = PrivateKTReport.from_record(sent[0].to_record(), sender=options["party"])
        views[-1].append((PrivateKTTask.from_record(task.to_record(), sender="server"), received))
        return sent

    monkeypatch.setattr(privatekt_module, "privatekt_party_step", recording)
    fits = []
    for noise_seed in noise_seeds:
        views.append([])
        fits.append(privatekt(noise_seed).fit(parties, public))
    return fits, views


@pytest.mark.parametrize("noise_seed", [None, 23], ids=["secret", "noise_seed"])
def test_privatekt_coins_are_regenerated_by_the_coordinator_only_with_a_noise_seed(digits, monkeypatch, noise_seed):
    parties, public, _ = digits
    (model,), (view,) = coordinator_views(parties, public, monkeypatch, [noise_seed])
    assert len(view) == 3 * 2
    best = []  # per candidate derivation: the share of replaced labels whose replacement it predicted
    for task, report in view:
        for index, (keep, replacement) in enumerate(coin_candidates(task, 20, 10)):
            replaced = ~keep
            if len(best) <= index:
                best.append([0, 0])
            best[index][0] += int((report.labels[replaced] == replacement[replaced]).sum())
            best[index][1] += int(replaced.sum())
    shares = [hits / total for hits, total in best]
    assert best[0][1] > 100  # β ≈ 0.01 here: nearly every label is a replacement
    if noise_seed is None:
        assert len(shares) == 1 and shares[0] < 0.3  # chance is 1/10: the task's seed no longer drives the coins
        assert model.ledger_.noise["source"] == "secret" and math.isfinite(model.ledger_.account().epsilon)
    else:
        assert shares[0] < 0.3 and shares[1] == 1.0  # the task's noise seed gives every coin away
        assert model.ledger_.account().epsilon == math.inf


def test_two_default_privatekt_fits_share_the_sampling_not_the_coins(digits, monkeypatch):
    parties, public, _ = digits
    fits, views = coordinator_views(parties, public, monkeypatch, [None, None, 9, 9])
    (first, second, seeded, again) = views
    n_round = 2  # clients per round: ⌊0.67 · 3⌋
    for (task_a, _), (task_b, _) in zip(first[:n_round], second[:n_round]):  # round 1: before any noisy label
        np.testing.assert_array_equal(task_a.queries, task_b.queries)
        assert (task_a.seed, task_a.init_seed, task_a.noise_seed) == (task_b.seed, task_b.init_seed, None)
    np.testing.assert_array_equal(fits[0].participation_, fits[1].participation_)  # the clients follow random_state
    assert fits[0].ledger_.account().epsilon == fits[1].ledger_.account().epsilon
    reports = [np.concatenate([report.labels for _, report in view]) for view in views]
    assert not np.array_equal(reports[0][:n_round * 20], reports[1][:n_round * 20])  # fresh secret coins
    np.testing.assert_array_equal(reports[2], reports[3])
    assert [task.noise_seed for task, _ in seeded] == [task.noise_seed for task, _ in again]
    assert len({task.noise_seed for task, _ in seeded}) == len(seeded)  # one seed per client and round
    np.testing.assert_array_equal(fits[2].predict(public), fits[3].predict(public))


def test_privatekt_empirical_audit_follows_the_noise_seed(digits):
    from privfed.audit.empirical_pipelines import empirical_audit

    parties, public, _ = digits

    def audit(noise_seed):
        model = PrivateKT(DecisionTreeClassifier(max_depth=3), epsilon_per_round=2.0, queries_per_round=2,
                          rounds=1, noise_seed=noise_seed)
        return empirical_audit(model, parties, public, num_canaries=60, random_state=0).epsilon_lower

    assert audit(4) == audit(4)


@pytest.mark.skipif(importlib.util.find_spec("flwr") is None, reason="flwr is not installed")
def test_fedkd_over_the_apps_sends_no_noise_seed_by_default(federation, task_identity):
    from test_federation import LocalGrid

    from privfed.federation.server_app import ServerJob, run_server

    class Recording(LocalGrid):
        def send_and_receive(self, messages, *, timeout=None):
            self.scalars = getattr(self, "scalars", []) + [
                set(m.content["fedkd-task.scalars"]) for m in messages if "fedkd-task.scalars" in m.content]
            return super().send_and_receive(messages, timeout=timeout)

    _, paths, public, _ = federation
    grid = Recording(paths)
    flower = run_server(grid, ServerJob(FedKD(LogisticRegression(max_iter=200), DecisionTreeClassifier(max_depth=5),
                                              gamma=GAMMA, random_state=2), public, num_supernodes=3, timeout=5))
    assert len(grid.scalars) == 3 and not any("noise_seed" in scalars for scalars in grid.scalars)
    assert flower.ledger_.noise["source"] == "secret" and math.isfinite(flower.ledger_.account().epsilon)
