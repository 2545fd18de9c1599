"""Selective-FD's noise is secret: tests that ARE the attacks of issue 40.

The coordinator records every message it sends (setup, round, ensemble) and every reply, and holds the ledger;
from all of it, it tries to regenerate a party's randomized-response coins, a party's DP-selector noise and the
server's GNMax noise — the way the parties and the server drew them before privfed drew noise from a secret
source (from the ``seed`` fields and ``random_state``), and the way they draw it under the ``noise_seed`` opt-in.
By default every attempt fails; with ``noise_seed`` the regeneration succeeds, and the ledger says every ε is ∞.
"""

from __future__ import annotations

import numpy as np
import privfed.pipelines.selective_fd.driver as selective_fd_driver
import pytest
from privfed.accounting import DPSGD, NoiseSource
from privfed.pipelines.protocol.seeds import as_seed_sequence
from privfed.pipelines.selective_fd.baselines import FedMD, IndependentLearning
from privfed.pipelines.selective_fd.dp_selector import DPDensityRatioSelector, random_fourier_features
from privfed.pipelines.selective_fd.estimator import SelectiveFD
from privfed.pipelines.selective_fd.local_clients import LocalClients
from privfed.pipelines.selective_fd.server import NoiseSeeds
from privfed.pipelines.selective_fd.steps import (
    SelectiveFDRound,
    SelectiveFDSetup,
    SelectiveFDShare,
    setup_client,
    share_step,
)
from sklearn.base import BaseEstimator
from sklearn.datasets import load_digits
from sklearn.tree import DecisionTreeClassifier

N_CLASSES = 10
SMALL = dict(rounds=2, proxy_batch=60, labels="hard", random_state=3)


@pytest.fixture(scope="module")
def digits():
    """Three clients of 150 digits each, 200 proxy digits."""
    X, y = load_digits(return_X_y=True)
    order = np.random.default_rng(2).permutation(len(y))
    X, y = X[order] / 16.0, y[order]
    parties = [(X[150 * p:150 * (p + 1)], y[150 * p:150 * (p + 1)]) for p in range(3)]
    return parties, X[450:650]


class Coordinator:
    """What the coordinator holds: every message it sent and every reply, in order."""

    def __init__(self) -> None:
        self.setups: list[SelectiveFDSetup] = []
        self.rounds: list[list[SelectiveFDRound]] = []
        self.replies: list[list[SelectiveFDShare]] = []
        self.ensembles: list[list] = []


def fit_watched(estimator, digits, monkeypatch) -> Coordinator:
    """Fit ``estimator`` in process while recording what crosses the wire (the parties' steps are unchanged)."""
    seen = Coordinator()

    class Watched(LocalClients):
        def setup(self, messages):
            seen.setups = [SelectiveFDSetup.from_record(m.to_record(), sender="t") for m in messages]
            return super().setup(messages)

        def share(self, messages, round_index):
            seen.rounds.append([SelectiveFDRound.from_record(m.to_record(), sender="t") for m in messages])
            records = super().share(messages, round_index)
            seen.replies.append([SelectiveFDShare.from_record(r[0], sender="t") for r in records])
            return records

        def distill(self, messages, round_index):
            seen.ensembles.append(list(messages))
            super().distill(messages, round_index)

    monkeypatch.setattr(selective_fd_driver, "LocalClients", Watched)
    parties, proxy = digits
    estimator.fit(parties, proxy)
    return seen


# --- randomized response's coins (party side) ---------------------------------------------------------
def rr_coin_candidates(message: SelectiveFDRound, random_state: int) -> list[np.random.Generator]:
    """Every generator the coordinator can build from what it holds: the message's noise seed as the party uses
    it, the message's seed as the party used it before (after its first round's refit seed, or not), and the
    ledger's random_state."""
    after_refit_seed = np.random.default_rng(message.seed)
    after_refit_seed.integers(2**31)
    candidates = [np.random.default_rng(message.seed), after_refit_seed, np.random.default_rng(random_state)]
    if message.noise_seed is not None:
        coins_seed, _ = NoiseSource.for_task(message.noise_seed).child_seeds(2)
        candidates.append(NoiseSource.seeded(coins_seed).generator)
    return candidates


def coins_explain_the_reply(coins: np.random.Generator, reply: SelectiveFDShare, keep_probability: float) -> bool:
    """Whether the regenerated coins explain the reply: wherever they say "replaced", the reply holds their
    replacement label (the attacker then also knows that every other shared label is the party's true one)."""
    n = len(reply.shared)
    replaced = (coins.random(n) >= keep_probability)[reply.shared]
    replacement = coins.integers(N_CLASSES, size=n)[reply.shared]
    return bool(np.array_equal(reply.predictions[replaced], replacement[replaced]))


@pytest.mark.parametrize("noise_seed", [None, 17])
def test_the_coordinator_regenerates_rr_coins_only_under_the_noise_seed_opt_in(digits, monkeypatch, noise_seed):
    model = FedMD(DecisionTreeClassifier(max_depth=4), privacy="rr", epsilon_per_round=30.0, noise_seed=noise_seed,
                  **SMALL)
    seen = fit_watched(model, digits, monkeypatch)
    keep = seen.setups[0].keep_probability
    assert 0 < keep < 0.5  # most labels are replaced: a wrong guess of the coins is caught at once
    explained = [[any(coins_explain_the_reply(coins, reply, keep) for coins in rr_coin_candidates(message, 3))
                  for message, reply in zip(messages, replies)]
                 for messages, replies in zip(seen.rounds, seen.replies)]
    ledger = model.ledger_
    assert ledger.seeds == {"random_state": 3}
    if noise_seed is None:
        assert not any(map(any, explained))
        assert ledger.noise["source"] == "secret" and not any("NOISE NOT SECRET" in t for t in ledger.unaccounted)
        assert all("noise_seed" not in m.to_record().scalars for m in [*seen.setups, *sum(seen.rounds, [])])
    else:
        assert all(map(all, explained))
        assert ledger.noise == {**ledger.noise, "source": "seeded", "noise_seed": noise_seed}
        assert any("NOISE NOT SECRET" in text for text in ledger.unaccounted)
        # the ledger alone gives every party's noise seed of every round
        derived = NoiseSeeds.of(NoiseSource.seeded(ledger.noise["noise_seed"]), n_parties=3, rounds=2)
        assert derived.rounds == [[m.noise_seed for m in messages] for messages in seen.rounds]


# --- the DP selector's noise (party side) -------------------------------------------------------------
@pytest.mark.parametrize("noise_seed", [None, 23])
def test_the_dp_selectors_noise_cannot_be_stripped_from_its_release_by_default(digits, monkeypatch, noise_seed):
    """Even given a party's release S̃, the coordinator replays the party's selector fit from its setup message
    (the seed gives the frequencies exactly) but not the noise, unless the run opted in to ``noise_seed``."""
    parties, proxy = digits
    model = SelectiveFD(DecisionTreeClassifier(max_depth=4), dp_selector=True, n_auxiliary=100,
                        dp_selector_frequencies=16, noise_seed=noise_seed, **{**SMALL, "rounds": 1})
    seen = fit_watched(model, digits, monkeypatch)
    for (X, _), setup, party_selector in zip(parties, seen.setups, model.selectors_):
        selector_seed = int(np.random.SeedSequence(setup.seed).spawn(2)[0].generate_state(1)[0])
        replay = DPDensityRatioSelector(
            quantile=setup.quantile, noise_multiplier=setup.selector_noise, n_frequencies=setup.n_frequencies,
            kernel_width=setup.kernel_width, regularization=setup.regularization, n_auxiliary=setup.n_auxiliary,
            random_state=selector_seed, noise_seed=setup.noise_seed,
        ).fit(proxy[:1], public=setup.proxy)
        np.testing.assert_array_equal(replay.frequencies_, party_selector.frequencies_)
        noise = replay.noisy_sum_ - random_fourier_features(proxy[:1], replay.frequencies_).sum(axis=0)
        error = party_selector.noisy_sum_ - noise - random_fourier_features(X, replay.frequencies_).sum(axis=0)
        if noise_seed is None:
            assert np.abs(error).max() > setup.selector_noise  # the noise (σ ≈ 4.8 per coordinate) remains
        else:
            np.testing.assert_allclose(error, 0.0, atol=1e-9)


# --- the server's GNMax noise -------------------------------------------------------------------------
@pytest.mark.parametrize("noise_seed", [None, 29])
def test_the_ledger_holder_regenerates_gnmax_noise_only_under_the_noise_seed_opt_in(digits, monkeypatch, noise_seed):
    """Given the true vote histograms (the strongest ledger holder), regenerated noise must reproduce every label
    the server returned: by default neither the pre-fix server generator (from random_state) nor anything else
    does; with ``noise_seed`` the ledger's seed does."""
    sigma = 3.0
    model = FedMD(DecisionTreeClassifier(max_depth=4), privacy="gnmax", sigma=sigma, noise_seed=noise_seed, **SMALL)
    seen = fit_watched(model, digits, monkeypatch)
    votes = model.evidence_["server_votes"].reshape(2, SMALL["proxy_batch"], N_CLASSES)  # FedMD: all answered
    old_server = np.random.default_rng(as_seed_sequence(model.ledger_.seeds["random_state"]).spawn(3)[2])

    def labels_reproduced(noise: np.ndarray, round_index: int) -> bool:
        batch, ensemble = seen.rounds[round_index][0].batch, seen.ensembles[round_index][0]
        labels = (votes[round_index] + noise).argmax(axis=1)
        return bool(np.array_equal(labels[np.searchsorted(batch, ensemble.rows)], ensemble.targets))

    reproduced = []
    for round_index in range(2):
        old_server.choice(len(digits[1]), size=SMALL["proxy_batch"], replace=False)  # the proxy batch
        attempts = [old_server.normal(0.0, sigma, size=(SMALL["proxy_batch"], N_CLASSES))]
        if model.ledger_.noise.get("noise_seed") is not None:
            seeds = NoiseSeeds.of(NoiseSource.seeded(model.ledger_.noise["noise_seed"]), n_parties=3, rounds=2)
            attempts.append(NoiseSource.for_task(seeds.server[round_index]).generator.normal(
                0.0, sigma, size=(SMALL["proxy_batch"], N_CLASSES)))
        reproduced.append(any(labels_reproduced(noise, round_index) for noise in attempts))
    assert reproduced == [noise_seed is not None] * 2
    assert model.ledger_.noise["source"] == ("secret" if noise_seed is None else "seeded")
    assert any("NOISE NOT SECRET" in text for text in model.ledger_.unaccounted) == (noise_seed is not None)


# --- reproducibility: random_state for everything else, noise only by opt-in ----------------------------
def test_two_default_fits_share_batches_and_seeds_but_not_noise(digits, monkeypatch):
    def run(**noise):
        return fit_watched(FedMD(DecisionTreeClassifier(max_depth=4), privacy="rr", epsilon_per_round=30.0,
                                 **SMALL, **noise), digits, monkeypatch)

    first, second = run(), run()
    for a, b in zip(first.rounds, second.rounds):
        assert [(m.batch.tolist(), m.seed) for m in a] == [(m.batch.tolist(), m.seed) for m in b]
    assert [m.seed for m in first.setups] == [m.seed for m in second.setups]
    assert any(not np.array_equal(a.predictions, b.predictions)
               for ra, rb in zip(first.replies, second.replies) for a, b in zip(ra, rb))
    seeded, again = run(noise_seed=5), run(noise_seed=5)
    for ra, rb in zip(seeded.replies, again.replies):
        for a, b in zip(ra, rb):
            np.testing.assert_array_equal(a.predictions, b.predictions)


def test_same_random_state_and_noise_seed_give_the_same_fit(digits):
    parties, proxy = digits
    fits = [FedMD(DecisionTreeClassifier(max_depth=4), privacy="gnmax", sigma=2.0, noise_seed=8, **SMALL)
            .fit(parties, proxy) for _ in range(2)]
    np.testing.assert_array_equal(fits[0].predict_proba(proxy), fits[1].predict_proba(proxy))
    assert fits[0].history_ == fits[1].history_


def test_an_absent_noise_seed_is_not_on_the_wire_and_a_present_one_round_trips():
    bare, seeded = SelectiveFDRound(np.arange(3), 1), SelectiveFDRound(np.arange(3), 1, 2**62)
    assert set(bare.to_record().scalars) == {"seed"}
    assert SelectiveFDRound.from_record(bare.to_record(), sender="s").noise_seed is None
    assert SelectiveFDRound.from_record(seeded.to_record(), sender="s").noise_seed == 2**62


@pytest.mark.parametrize("estimator", [SelectiveFD, FedMD, IndependentLearning])
def test_a_bad_noise_seed_is_refused_before_any_work(digits, estimator):
    parties, proxy = digits
    with pytest.raises(TypeError, match="noise_seed must be None .* got 1.5"):
        estimator(DecisionTreeClassifier(), noise_seed=1.5).fit(parties, proxy)


class NoisySGD(BaseEstimator):
    """A stand-in for a DP-SGD torch adapter with a ``noise_seed`` parameter: it records the seed of each epoch."""

    def __init__(self, dp="dp-sgd", noise_seed=None, random_state=None):
        self.dp, self.noise_seed, self.random_state = dp, noise_seed, random_state

    def partial_fit(self, X, y, classes=None):
        self.seen_ = [*getattr(self, "seen_", []), self.noise_seed]
        self.dp_releases_ = [*getattr(self, "dp_releases_", []), DPSGD(1.0, 0.1, 10)]
        return self

    def partial_fit_soft(self, X, targets, temperature=1.0, classes=None):
        return self

    def predict_proba(self, X):
        return np.full((len(X), N_CLASSES), 1.0 / N_CLASSES)


@pytest.mark.parametrize("noise_seed", [None, 2**40])
def test_a_dp_sgd_model_gets_the_rounds_noise_seed_only_under_the_opt_in(noise_seed):
    """Each round, the party hands its DP-SGD model the round's noise seed: None (the model's own secret source)
    by default, a seed derived from the round message's ``noise_seed`` under the opt-in."""
    setup = SelectiveFDSetup(
        proxy=np.zeros((5, 3)), classes=np.arange(N_CLASSES), seed=0, local_steps=1, distill_steps=1, labels="hard",
        temperature=1.0, shares=True, keep_probability=np.nan, selects=False, quantile=0.0,
        validation_fraction=0.0, kernel_width="median", regularization=0.0, n_auxiliary=0, max_known=0,
    )
    client = setup_client(setup, np.zeros((20, 3)), np.arange(20) % N_CLASSES, local_model=NoisySGD())
    for index in range(2):
        client, _ = share_step(client, SelectiveFDRound(np.arange(5), index, None if noise_seed is None
                                                        else noise_seed + index))
    expected = [None, None] if noise_seed is None else [
        NoiseSource.for_task(noise_seed + index).child_seeds(2)[1] for index in range(2)]
    assert client.model.seen_ == expected and len(client.trainings) == 2
