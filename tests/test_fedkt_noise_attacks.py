"""The attacks on FedKT's noise (issue 40), run against the code: regenerate the noise from what an observer holds.

Each attacker knows the code (which generator draws what, in which order) and every integer in what it holds —
the coordinator its tasks and the ledger, the public the ledger's JSON alone — and tries each integer as the seed
of each way privfed has derived noise: today's ``NoiseSource`` and its children, and the pre-issue-40 derivations
from ``random_state`` (a ``SeedSequence`` child, or the seed itself). It is also handed the un-noised votes (an
in-process run holds them), the strongest position: all it lacks is the noise. By default every attempt fails;
with ``noise_seed`` the attack succeeds — and the ledger then says ε = ∞.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator

import numpy as np
import privfed.pipelines.fedkt.estimator as fedkt_module
import privfed.pipelines.fedkt.steps as steps_module
import pytest
from privfed.accounting import NoiseSource
from privfed.pipelines.fedkt.estimator import FedKT
from privfed.pipelines.protocol.voting import consistent_votes
from sklearn.datasets import load_digits
from sklearn.tree import DecisionTreeClassifier

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # near-chance noise on purpose: pre-flight warns


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    parties = [(X[i:1000:4], y[i:1000:4]) for i in range(4)]
    return parties, X[1000:1300]


def fedkt(**settings) -> FedKT:
    return FedKT(DecisionTreeClassifier(max_depth=6), n_teachers=3, query_fraction=0.4, random_state=3, **settings)


def integers(document: object) -> Iterator[int]:
    """Every non-negative integer anywhere in a JSON-like document (the attacker's seed candidates)."""
    if isinstance(document, bool):
        return
    if isinstance(document, int) and document >= 0:
        yield document
    elif isinstance(document, dict):
        for value in document.values():
            yield from integers(value)
    elif isinstance(document, (list, tuple)):
        for value in document:
            yield from integers(value)


#: The ways privfed has turned a seed into a noise generator: today's sources, and the derivations before issue 40.
DERIVATIONS: dict[str, Callable[[int], np.random.Generator]] = {
    "NoiseSource.seeded(seed)": lambda seed: NoiseSource.seeded(seed).generator,
    "its first child (the FedKT server's)": lambda seed: NoiseSource.seeded(
        NoiseSource.seeded(seed).child_seeds(1)[0]).generator,
    "default_rng(seed)": np.random.default_rng,
    "default_rng(SeedSequence(seed).spawn(1)[0]) (a party's Skellam share before issue 40)":
        lambda seed: np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0]),
    "default_rng(SeedSequence(seed).spawn(2)[1]) (FedKT's server noise before issue 40)":
        lambda seed: np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[1]),
}


def record(monkeypatch) -> dict:
    """Spy on a fit: the tasks the coordinator sends, the vote sum it receives, every noisy argmax's output."""
    seen: dict = {"labels": []}
    make_tasks, secure_sum, noisy_labels = fedkt_module.fedkt_tasks, fedkt_module.secure_sum, steps_module.noisy_labels

    def tasks(*args, **options):
        seen["tasks"] = make_tasks(*args, **options)
        return seen["tasks"]

    def summed(*args, **options):
        seen["sum"] = secure_sum(*args, **options)
        return seen["sum"]

    def labels(votes, rng, **noise):
        released = noisy_labels(votes, rng, **noise)
        if noise:
            seen["labels"].append((np.asarray(votes), noise, released))
        return released

    monkeypatch.setattr(fedkt_module, "fedkt_tasks", tasks)
    monkeypatch.setattr(fedkt_module, "secure_sum", summed)
    monkeypatch.setattr(steps_module, "noisy_labels", labels)
    return seen


def laplace_labels(generator: np.random.Generator, votes: np.ndarray, gamma: float) -> np.ndarray:
    return np.argmax(votes + generator.laplace(0.0, 1.0 / gamma, size=votes.shape), axis=1)


def party_stream_agreement(seed: int, party: list, gamma: float, n_teachers: int) -> float:
    """FedKT-L2's noise as a party drew it before issue 40: from its task's seed, after the teacher key (32 bytes)
    and one seed per teacher of every partition, each partition's noise followed by its student's seed."""
    rng = np.random.default_rng(seed)
    rng.bytes(32)
    for _ in party:
        rng.integers(2**31, size=n_teachers)
    agree = []
    for votes, _, labels in party:
        agree.append(laplace_labels(rng, votes, gamma) == labels)
        rng.integers(2**31)
    return float(np.mean(np.concatenate(agree)))


def chance_agreement(released: list[tuple[np.ndarray, np.ndarray]], gamma: float) -> float:
    """How often labels drawn with fresh independent noise agree with the released ones (mean of 50 draws)."""
    rng = np.random.default_rng(0)
    return float(np.mean([np.mean(np.concatenate([laplace_labels(rng, votes, gamma) == labels
                                                  for votes, labels in released])) for _ in range(50)]))


def assert_no_better_than_chance(agreement: dict, chance: float, n_labels: int) -> None:
    """The best attempt's agreement stays within 4.5 binomial standard deviations of fresh noise's (a regenerated
    noise agrees on every label; the best of ~100 wrong guesses exceeds this bound with probability < 10⁻³)."""
    bound = chance + 4.5 * math.sqrt(chance * (1 - chance) / n_labels)
    best = max(agreement, key=agreement.get)
    assert agreement[best] < bound, f"{best} agrees on {agreement[best]:.3f} of the labels (chance {chance:.3f})"


# --- (a) secure aggregation: the coordinator subtracts every party's Skellam share -------------------------
@pytest.mark.parametrize("noise_seed", [None, 21])
def test_the_coordinator_cannot_subtract_the_skellam_shares_of_a_default_run(digits, monkeypatch, noise_seed):
    parties, public = digits
    seen = record(monkeypatch)
    model = fedkt(privacy="L1", aggregator="skellam", secure_aggregation=True, sigma=3.0, classes=list(range(10)),
                  noise_seed=noise_seed).fit(parties, public)
    tasks, vote_sum = seen["tasks"], seen["sum"].vote_sum
    X_final = public[: tasks[0].n_final_queries]
    exact = consistent_votes(np.stack([[s.predict(X_final) for s in students] for students in model.students_]), 10)
    ledger = json.loads(model.ledger_.to_json())
    shape, rate = vote_sum.shape, tasks[0].noise_scale / 2

    def share(generator):
        return generator.poisson(rate, shape) - generator.poisson(rate, shape)

    # Each party's candidate seeds: the integers of its own task (the same field of every task) and of the ledger.
    fields = sorted({name for task in tasks for name, value in task.to_record().scalars.items()
                     if isinstance(value, int) and not isinstance(value, bool)})
    attempts = [[task.to_record().scalars.get(name) for task in tasks] for name in fields]
    attempts += [[value] * len(tasks) for value in set(integers(ledger))]
    recovered = {}
    for derive_name, derive in DERIVATIONS.items():
        for seeds in attempts:
            if all(isinstance(seed, int) and 0 <= seed < 2**63 for seed in seeds):
                residual = vote_sum - sum(share(derive(seed)) for seed in seeds)
                recovered[derive_name, tuple(seeds)] = float(np.mean(residual == exact))
    best = max(recovered.values())
    if noise_seed is None:
        assert not any("noise_seed" in task.to_record().scalars for task in tasks)
        assert best < 0.5  # a wrong guess leaves noise of variance 2σ² on every count; σ² = 9
        assert math.isfinite(model.ledger_.account(1e-5, observer="coordinator").epsilon)
    else:  # the seeds are in the tasks: every share regenerated, the un-noised sum recovered, and the ledger says ∞
        assert best == 1.0
        assert model.ledger_.account(1e-5, observer="coordinator").epsilon == math.inf
        assert model.ledger_.account(1e-5).epsilon == math.inf


# --- (b) FedKT-L2: the coordinator regenerates a party's noisy teacher labels ----------------------------
@pytest.mark.parametrize("noise_seed", [None, 5])
def test_the_coordinator_cannot_regenerate_a_partys_l2_noise(digits, monkeypatch, noise_seed):
    parties, public = digits
    seen = record(monkeypatch)
    gamma = 0.2
    model = fedkt(privacy="L2", gamma=gamma, local_query_fraction=0.4, classes=list(range(10)),
                  noise_seed=noise_seed).fit(parties, public)
    tasks, ledger = seen["tasks"], json.loads(model.ledger_.to_json())
    s = tasks[0].n_partitions
    released = [seen["labels"][party * s:(party + 1) * s] for party in range(len(parties))]  # each party's s argmaxes
    candidates = {seed for seed in set(integers(ledger)) | set(integers([dict(t.to_record().scalars) for t in tasks]))
                  if seed < 2**63}
    for party, task in zip(released, tasks):
        agreement = {}
        for derive_name, derive in DERIVATIONS.items():
            for seed in candidates:
                generator = derive(seed)
                agreement[derive_name, seed] = np.mean(np.concatenate(
                    [laplace_labels(generator, votes, gamma) == labels for votes, _, labels in party]))
        for seed in candidates:
            agreement["the party step's stream (before issue 40)", seed] = party_stream_agreement(
                seed, party, gamma, task.n_teachers)
        if noise_seed is None:
            assert task.noise_seed is None
            votes_and_labels = [(votes, labels) for votes, _, labels in party]
            assert_no_better_than_chance(agreement, chance_agreement(votes_and_labels, gamma),
                                         sum(len(labels) for _, labels in votes_and_labels))
        else:
            assert agreement["NoiseSource.seeded(seed)", task.noise_seed] == 1.0
    assert (model.ledger_.account(1e-5, observer="coordinator").epsilon == math.inf) == (noise_seed is not None)


# --- (c) FedKT-L1: the public regenerates the server's noise from ledger.json alone ---------------------
@pytest.mark.parametrize("noise_seed", [None, 8])
def test_the_server_noise_of_a_default_run_cannot_be_regenerated_from_the_ledger(digits, monkeypatch, noise_seed):
    parties, public = digits
    seen = record(monkeypatch)
    gamma = 0.1
    model = fedkt(privacy="L1", gamma=gamma, noise_seed=noise_seed).set_params(query_fraction=1.0).fit(parties, public)
    [(votes, _, labels)] = seen["labels"]  # the server's noisy max; the attacker is even handed its votes
    ledger = json.loads(model.ledger_.to_json())
    agreement = {(name, seed): np.mean(laplace_labels(derive(seed), votes, gamma) == labels)
                 for name, derive in DERIVATIONS.items() for seed in set(integers(ledger)) if seed < 2**63}
    assert ledger["seeds"] == {"random_state": 3}
    if noise_seed is None:
        assert ledger["noise"]["source"] == "secret" and "noise_seed" not in ledger["noise"]
        assert_no_better_than_chance(agreement, chance_agreement([(votes, labels)], gamma), len(labels))
        assert math.isfinite(model.ledger_.account(1e-5).epsilon)
    else:
        assert agreement["its first child (the FedKT server's)", noise_seed] == 1.0
        assert model.ledger_.account(1e-5).epsilon == math.inf
        assert "NOISE NOT SECRET" in " ".join(model.ledger_.account(1e-5).uncovered)


# --- what random_state still controls, and the opt-in ----------------------------------------------------
def test_two_default_fits_share_teachers_and_partitions_but_not_noise(digits, monkeypatch):
    parties, public = digits
    runs = []
    for _ in range(2):
        seen = record(monkeypatch)
        runs.append((fedkt(privacy="L2", gamma=0.5, local_query_fraction=0.4).fit(parties, public), seen))
    (first, first_seen), (second, second_seen) = runs
    for mine, theirs in zip(first.party_votes_, second.party_votes_):  # same partitions, same teachers, same votes
        np.testing.assert_array_equal(mine, theirs)
    assert [t.seed for t in first_seen["tasks"]] == [t.seed for t in second_seen["tasks"]]
    first_labels = np.concatenate([labels for _, _, labels in first_seen["labels"]])
    second_labels = np.concatenate([labels for _, _, labels in second_seen["labels"]])
    assert not np.array_equal(first_labels, second_labels)  # the noise is fresh on every fit
    assert first.ledger_.noise["source"] == second.ledger_.noise["source"] == "secret"


def test_two_fits_with_one_random_state_and_noise_seed_are_identical(digits, monkeypatch):
    parties, public = digits
    runs = []
    for _ in range(2):
        seen = record(monkeypatch)
        runs.append((fedkt(privacy="L2", gamma=0.5, local_query_fraction=0.4, noise_seed=13).fit(parties, public),
                     seen))
    (first, first_seen), (second, second_seen) = runs
    for (_, _, mine), (_, _, theirs) in zip(first_seen["labels"], second_seen["labels"]):
        np.testing.assert_array_equal(mine, theirs)
    np.testing.assert_array_equal(first.predict(public), second.predict(public))
    seeds = [t.noise_seed for t in first_seen["tasks"]]
    assert seeds == [t.noise_seed for t in second_seen["tasks"]] and len(set(seeds)) == len(seeds)
    assert first.ledger_.noise == second.ledger_.noise == {**NoiseSource.seeded(13).provenance()}
    assert first.ledger_.seeds == {"random_state": 3}


@pytest.mark.parametrize("value,error,message", [
    (-1, ValueError, r"noise_seed must be None \(secret noise\) or an int in \[0, 2\*\*63\), got -1"),
    ("7", TypeError, "noise_seed must be None"),
])
def test_a_bad_noise_seed_is_refused_before_any_training(digits, value, error, message):
    parties, public = digits
    with pytest.raises(error, match=message):
        fedkt(privacy="L1", gamma=0.5, noise_seed=value).fit(parties, public)
    from privfed.pipelines.fedkt.estimator import Solo

    with pytest.raises(error, match=message):
        Solo(DecisionTreeClassifier(), noise_seed=value).fit(parties)
