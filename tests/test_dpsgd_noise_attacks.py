"""DP-SGD's sampling and noise are secret: the attacks that regenerate them, and the checks that they are there.

Before privfed drew DP-SGD's randomness from a :class:`~privfed.NoiseSource`, Opacus's Poisson sampler was
seeded with ``torch_seed(random_state)`` and its noise generator with that seed + 1: whoever knew
``random_state`` (the coordinator sends it in every task, the ledger records it) and the data retrained the
model bit for bit, so knew every noise draw (the test this file replaces asserted exactly that determinism).
"""

import math
import warnings

import numpy as np
import pytest

pytest.importorskip("opacus")
from privfed.accounting.registry import mechanism_from_record  # noqa: E402
from privfed.pipelines.models.dp_training import poisson_batches  # noqa: E402
from privfed.pipelines.models.torch_training import torch_seed  # noqa: E402
from privfed.pipelines.protocol.dp_ledger import (  # noqa: E402
    pipeline_noise_source,
    receive_trainings,
    require_public_sample_rate,
    training_report,
)
from scipy import stats  # noqa: E402
from sklearn.base import clone  # noqa: E402

from privfed import DPSGD, DPConfig, FedKD, Ledger, NoiseSource, TorchMLP  # noqa: E402

DELTA = 1e-5


@pytest.fixture(scope="module", autouse=True)
def one_thread(one_torch_thread):
    yield


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 12)).astype(np.float32)
    return X, (X[:, 0] + 0.5 * X[:, 1] > 0).astype(np.int64)


def dp_config(**overrides):
    return DPConfig(**{"noise_multiplier": 1.0, "max_grad_norm": 1.0, "delta": DELTA, "sample_rate": 0.1,
                       **overrides})


def parameters(model):
    return np.concatenate([p.detach().cpu().numpy().ravel() for p in model.module_.parameters()])


def model(**options):
    return TorchMLP(**{"hidden": (16,), "epochs": 1, "batch_size": 20, "lr": 0.1, "optimizer": "sgd",
                       "random_state": 7, "dp": dp_config(), **options})


def test_everything_the_coordinator_holds_does_not_regenerate_the_training_by_default(data):
    """The attacker holds the data, every hyper-parameter and every seed a run records or sends (random_state,
    the torch seed derived from it, that seed + 1, which Opacus's generators got before), and retrains: no
    candidate reproduces the trained parameters. With noise_seed, the seed's holder reproduces them exactly."""
    X, y = data
    victim = model().fit(X, y)
    target = parameters(victim)
    assert not np.array_equal(parameters(clone(victim).fit(X, y)), target)  # retraining as it ran
    recorded = {7, torch_seed(7), torch_seed(7) + 1}
    for seed in recorded:
        assert not np.array_equal(parameters(clone(victim).set_params(noise_seed=seed).fit(X, y)), target)
    seeded = model(noise_seed=2024).fit(X, y)
    np.testing.assert_array_equal(parameters(clone(seeded).fit(X, y)), parameters(seeded))
    assert seeded.dp_noise_[0]["source"] == "seeded" and victim.dp_noise_[0] == NoiseSource.secret().provenance()


def test_two_default_fits_share_the_initialisation_but_not_the_noise(data):
    X, y = data
    tiny = dict(lr=1e-9)  # the parameters stay within ~1e-8 of the initialisation
    first, second = parameters(model(**tiny).fit(X, y)), parameters(model(**tiny).fit(X, y))
    other_init = parameters(model(**tiny, random_state=8).fit(X, y))
    assert 0 < np.abs(first - second).max() < 1e-6 < np.abs(first - other_init).max()


def test_noise_seed_is_a_parameter_clone_and_set_params_carry(data):
    estimator = model(noise_seed=5)
    assert estimator.get_params()["noise_seed"] == 5 and clone(estimator).noise_seed == 5
    assert estimator.set_params(noise_seed=None).noise_seed is None
    X, y = data
    for bad, error in ((-1, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(error, match="noise_seed must be None"):
            model(noise_seed=bad).fit(X, y)


def test_each_dp_sgd_call_of_a_seeded_network_draws_afresh(data):
    """Continued training (partial_fit) with one noise_seed never repeats the previous call's draws."""
    X, y = data
    trained = model(noise_seed=9).fit(X, y)
    trained.partial_fit(X, y)
    first, second = trained.dp_noise_
    assert first["noise_seed"] != second["noise_seed"]


def test_poisson_batches_keep_each_example_independently_with_probability_q():
    n, q, steps = 500, 0.05, 400
    batches = list(poisson_batches(n, q, steps, NoiseSource.secret().generator))
    sizes = np.array([len(batch) for batch in batches])
    assert len(batches) == steps and all(np.all(np.diff(batch) > 0) for batch in batches)
    # batch sizes are Binomial(n, q): mean 25, sd 4.87; tolerances are 5 standard errors
    assert abs(sizes.mean() - n * q) < 5 * math.sqrt(n * q * (1 - q) / steps)
    assert abs(sizes.var() / (n * q * (1 - q)) - 1) < 5 * math.sqrt(2 / steps)
    counts = np.bincount(np.concatenate(batches), minlength=n)  # each example: Binomial(steps, q)
    assert stats.chisquare(counts).pvalue > 1e-4
    seeded = [list(poisson_batches(n, q, 3, NoiseSource.seeded(4).generator)) for _ in range(2)]
    assert all(np.array_equal(a, b) for a, b in zip(*seeded))


@pytest.mark.parametrize("noise_seeds", [(1, 2), (None, None)], ids=["seeded", "secret"])
def test_the_noise_is_there_at_the_scale_the_release_claims(data, noise_seeds):
    """White box: q = 1 (every example in the one step's batch), plain SGD, one step, so two fits with one
    random_state share the initialisation and the clipped gradient sum and differ only by the noise:
    θ₁ − θ₂ = −lr·(σC/B)·(z₁ − z₂), z ~ N(0, I). Over the 962 parameters the spread, divided by
    lr·σ·C/B·√2, has standard deviation 1 within 15% (6.5 standard errors; a noise off by a factor √2 fails)
    and is normal (KS test)."""
    X, y = data
    lr, sigma, clip, batch = 0.1, 2.0, 0.5, 50
    config = dp_config(noise_multiplier=sigma, max_grad_norm=clip, sample_rate=1.0, expected_batch_size=batch)
    make = lambda seed: model(hidden=(64,), lr=lr, momentum=0.0, dp=config, noise_seed=seed)  # noqa: E731
    fits = [make(seed).fit(X, y) for seed in noise_seeds]
    assert fits[0].dp_mechanism_.steps == 1
    standardised = (parameters(fits[0]) - parameters(fits[1])) / (lr * sigma * clip / batch * math.sqrt(2))
    assert len(standardised) == 962
    assert abs(standardised.std() - 1) < 0.15 and abs(standardised.mean()) < 0.25
    assert stats.kstest(standardised, "norm").pvalue > 1e-4


def test_a_model_with_its_own_noise_seed_makes_the_pipeline_ledger_say_every_epsilon_is_infinite():
    """pipeline_noise_source: the root source a pipeline records is seeded whenever one of its models asks for
    reproducible DP-SGD noise, so the ledger never calls that noise secret."""
    assert not pipeline_noise_source(None, [model(), TorchMLP()]).reproducible
    assert pipeline_noise_source(3, [model()]).provenance()["noise_seed"] == 3
    root = pipeline_noise_source(None, [TorchMLP(), model(noise_seed=42)])
    assert root.reproducible and root.provenance()["noise_seed"] == 42
    ledger = Ledger(delta=DELTA)
    ledger.record_noise_source(root)
    assert ledger.noise["source"] == "seeded"
    assert any("noise_seed=42" in description for description in ledger.unaccounted)


def test_a_pipeline_refuses_a_sample_rate_derived_from_a_partys_private_size(data):
    """Issue 40, item 5. Without DPConfig(sample_rate=) a DP-SGD release's q is batch_size / n: the q a party
    reported (and the ledger recorded) gave its size exactly. Pipelines now refuse that configuration before
    training; with a public rate the recorded release is the same whatever the party's size."""
    X, y = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the standalone model warns that q is private
        standalone = model(dp=dp_config(sample_rate=None)).fit(X[:150], y[:150])
    assert round(20 / standalone.dp_mechanism_.sample_rate) == 150  # the size, read off the release
    with pytest.raises(ValueError, match=r"DPConfig\(sample_rate=\.\.\.\)"):
        require_public_sample_rate(model(dp=dp_config(sample_rate=None)), "FedKD local model")
    require_public_sample_rate(model(), "FedKD local model")
    require_public_sample_rate(TorchMLP(), "FedKD local model")  # no dp=: nothing to check
    # the coordinator refuses it too, for the pipelines whose parties train outside fit_classifier (PrivateKT)
    report = training_report(DPSGD(1.0, 20 / 150, 7)).to_record()
    with pytest.raises(ValueError, match=r"party 0's DP-trained model TorchMLP has dp=DPConfig\(sample_rate=None\)"):
        receive_trainings([[report]], ["party 0"], max_bytes=10_000, models=[model(dp=dp_config(sample_rate=None))])
    parties = [(X[:60], y[:60]), (X[60:150], y[60:150])]
    with pytest.raises(ValueError, match=r"sample_rate=None\): inside a pipeline"):
        FedKD(model(dp=dp_config(sample_rate=None)), model(dp=None), random_state=0).fit(parties, X[150:])
    fitted = FedKD(model(), model(dp=None), random_state=0).fit(parties, X[150:])
    (entry,) = [entry for entry in fitted.ledger_.entries if entry.kind == "training"]
    training = mechanism_from_record(entry.analyses["example"].record())
    assert [(m.sample_rate, m.steps) for m in training.mechanisms] == [(0.1, 10), (0.1, 10)]  # sizes 60 and 90


@pytest.mark.parametrize("pipeline", ["fedkt", "fedkd", "privatekt", "selective-fd"])
def test_a_model_seeded_by_the_user_makes_every_pipeline_seeded(pipeline):
    """A prototype's own noise_seed is the pipeline's (effective_noise_seed): no ledger calls its noise secret."""
    from privfed.pipelines.fedkd.estimator import FedKD
    from privfed.pipelines.fedkt.estimator import FedKT
    from privfed.pipelines.privatekt.estimator import PrivateKT
    from privfed.pipelines.protocol.dp_ledger import effective_noise_seed
    from privfed.pipelines.selective_fd.estimator import SelectiveFD

    model = TorchMLP((4,), noise_seed=21)
    estimator = {"fedkt": lambda: FedKT(model, privacy="L1", gamma=0.1),
                 "fedkd": lambda: FedKD(model, model, gamma=1.0, clip=4.0),
                 "privatekt": lambda: PrivateKT(model),
                 "selective-fd": lambda: SelectiveFD(model)}[pipeline]()
    assert effective_noise_seed(estimator) == 21
    assert effective_noise_seed(estimator.set_params(noise_seed=4)) == 4
    assert effective_noise_seed(estimator.set_params(noise_seed=None, **{
        name: TorchMLP((4,)) for name, value in estimator.get_params(deep=False).items()
        if isinstance(value, TorchMLP)})) is None
