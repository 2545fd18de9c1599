"""DP-SGD training of the torch adapters through Opacus (DPConfig, dp_mechanism_)."""

import sys

import numpy as np
import pytest

pytest.importorskip("opacus")
import torch  # noqa: E402
from sklearn.base import clone  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from torch import nn  # noqa: E402

import privfed  # noqa: E402
from privfed import DPSGD, DPConfig, TorchClassifier, TorchCNN, TorchMLP, account  # noqa: E402

DELTA = 1e-5


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return (X[:600] / 16).astype(np.float32), y[:600]


def config(**overrides):
    return DPConfig(**{"noise_multiplier": 1.0, "max_grad_norm": 1.0, "delta": DELTA, **overrides})


def test_dp_config_validation():
    with pytest.raises(ValueError, match="exactly one of noise_multiplier and target_epsilon"):
        DPConfig(max_grad_norm=1.0, delta=DELTA)
    with pytest.raises(ValueError, match="exactly one"):
        DPConfig(noise_multiplier=1.0, target_epsilon=2.0, max_grad_norm=1.0, delta=DELTA)
    with pytest.raises(ValueError, match="max_grad_norm"):
        DPConfig(noise_multiplier=1.0, max_grad_norm=0.0, delta=DELTA)
    with pytest.raises(ValueError, match="delta"):
        DPConfig(noise_multiplier=1.0, max_grad_norm=1.0, delta=1.5)
    with pytest.raises(ValueError, match="sample_rate"):
        DPConfig(noise_multiplier=1.0, max_grad_norm=1.0, delta=DELTA, sample_rate=0.0)
    with pytest.raises(TypeError):
        DPConfig(1.0, None, 1.0, DELTA)  # keyword-only


def test_dp_mlp_trains_and_exposes_its_exact_release(digits):
    X, y = digits
    model = TorchMLP(hidden=(32,), epochs=3, batch_size=60, lr=0.05, optimizer="sgd", random_state=0,
                     dp=config()).fit(X, y)
    q = 60 / 600
    assert isinstance(model.dp_mechanism_, DPSGD) and len(model.dp_releases_) == 1
    release = model.dp_mechanism_
    assert (release.noise_multiplier, release.sample_rate, release.steps) == (1.0, q, 3 * 10)
    assert account(release, delta=DELTA).epsilon == account(DPSGD(1.0, q, 30), delta=DELTA).epsilon
    assert model.score(X, y) > 0.3  # learns despite the (secret) noise: chance 0.1; 12 fits scored 0.46-0.64
    assert len(model.loss_curve_) == 3


def test_epsilon_matches_opacus_accountant(digits):
    from opacus.accountants import RDPAccountant

    X, y = digits
    model = TorchMLP(hidden=(16,), epochs=2, batch_size=60, random_state=0, dp=config(noise_multiplier=1.3)).fit(X, y)
    accountant = RDPAccountant()
    accountant.history = [(1.3, 0.1, model.dp_mechanism_.steps)]
    opacus_epsilon = accountant.get_epsilon(delta=DELTA)
    ours = account(model.dp_mechanism_, delta=DELTA)
    # privfed reports the smaller of its RDP and PLD bounds; Opacus's RDP accountant uses a coarser order grid.
    assert ours.epsilon <= opacus_epsilon * 1.001
    assert ours.epsilon > 0.5 * opacus_epsilon


def test_target_epsilon_is_met_per_privfed_accounting(digits):
    X, y = digits
    model = TorchMLP(hidden=(16,), epochs=2, batch_size=60, random_state=0,
                     dp=config(noise_multiplier=None, target_epsilon=2.0)).fit(X, y)
    epsilon = account(model.dp_mechanism_, delta=DELTA).epsilon
    assert 1.5 < epsilon <= 2.0
    looser = DPSGD(model.dp_mechanism_.noise_multiplier * 0.95, 0.1, 20)
    assert looser.epsilon(privfed.accounting.TIGHT_ORDERS, DELTA, analysis="tight")[0] > 2.0  # calibrated, not padded


def test_warm_starts_compose(digits):
    X, y = digits
    model = TorchMLP(hidden=(16,), epochs=1, batch_size=60, random_state=0, dp=config())
    model.partial_fit(X, y, classes=np.arange(10))
    model.partial_fit(X, y)
    assert len(model.dp_releases_) == 2 and model.dp_mechanism_.steps == 20
    model.set_params(dp=config(noise_multiplier=2.0))
    model.fit_soft(X, np.eye(10)[y], classes=np.arange(10), warm_start=True)
    assert model.dp_mechanism_.kind == "sequential_composition"
    expected = account([DPSGD(1.0, 0.1, 20), DPSGD(2.0, 0.1, 10)], delta=DELTA).epsilon
    assert account(model.dp_mechanism_, delta=DELTA).epsilon == pytest.approx(expected)
    model.set_params(dp=None).partial_fit(X, y)  # non-private training: no guarantee left
    assert not hasattr(model, "dp_mechanism_")
    model.set_params(dp=config()).fit(X, y)  # a fresh network starts a fresh tuple
    assert len(model.dp_releases_) == 1


def test_cnn_clone_and_safe_state(digits):
    X, y = digits
    prototype = TorchCNN(hidden=(32,), padding=2, epochs=1, batch_size=60, random_state=0, dp=config())
    model = clone(prototype).fit(X, y)
    assert model.get_params()["dp"] == prototype.dp
    spec, tensors = model.get_safe_state()
    restored = TorchCNN.from_safe_state(spec, tensors)
    assert restored.dp == model.dp and restored.dp_mechanism_.describe() == model.dp_mechanism_.describe()
    assert restored.dp_noise_ == model.dp_noise_ and restored.dp_noise_[0]["source"] == "secret"
    del spec["dp_noise"]  # saved before privfed recorded it: the noise then followed random_state
    assert TorchCNN.from_safe_state(spec, tensors).dp_noise_ == (None,)
    np.testing.assert_array_equal(restored.predict(X), model.predict(X))


@pytest.mark.parametrize(
    "dp, match",
    [
        (config(delta=1 / 500), r"delta=0.002 must be < 1/n"),
        (config(noise_multiplier=None, target_epsilon=1e-9, sample_rate=1.0), "cannot be reached by DP-SGD"),
    ],
)
def test_bad_input_fails_before_training(digits, dp, match):
    X, y = digits
    model = TorchMLP(hidden=(8,), epochs=1, random_state=0, dp=dp)
    with pytest.raises(ValueError, match=match):
        model.fit(X, y)
    assert not hasattr(model, "dp_mechanism_")


def test_batchnorm_is_refused_naming_the_layer(digits):
    X, y = digits
    model = TorchClassifier(lambda d, c: nn.Sequential(nn.Linear(d, 8), nn.BatchNorm1d(8), nn.Linear(8, c)),
                            epochs=1, dp=config())
    with pytest.raises(ValueError, match=r"layer\(s\) 1 \(BatchNorm1d\)"):
        model.fit(X, y)
    with pytest.raises(TypeError, match="dp must be None or a privfed.DPConfig"):
        TorchMLP(dp={"noise_multiplier": 1.0}).fit(X, y)


def test_dp_training_repeats_with_a_noise_seed_and_shares_only_the_initialisation_without(digits):
    X, y = digits
    make = lambda **kw: TorchMLP(hidden=(8,), epochs=1, batch_size=60, random_state=3, dp=config(), **kw)  # noqa: E731
    seeded = make(noise_seed=11).fit(X, y)
    np.testing.assert_array_equal(clone(seeded).fit(X, y).predict_proba(X), seeded.predict_proba(X))
    assert seeded.dp_noise_[0]["source"] == "seeded"
    first, second = make().fit(X, y), make().fit(X, y)  # secret noise and sampling: each fit draws its own
    assert first.dp_noise_[0]["source"] == "secret" and "noise_seed" not in first.dp_noise_[0]
    assert not np.array_equal(first.predict_proba(X), second.predict_proba(X))


def test_importing_privfed_loads_neither_torch_nor_opacus():
    import subprocess

    code = (
        "import sys, privfed, privfed.pipelines; privfed.DPConfig; "
        "print('torch' in sys.modules, 'opacus' in sys.modules)"
    )
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.split() == ["False", "False"]
    assert torch is not None


def test_safe_state_written_before_dp_existed_still_loads(digits):
    X, y = digits
    model = TorchMLP(hidden=(8,), epochs=1, random_state=0).fit(X, y)
    spec, tensors = model.get_safe_state()
    del spec["params"]["dp"], spec["params"]["noise_seed"]
    restored = TorchMLP.from_safe_state(spec, tensors)
    assert restored.dp is None and restored.noise_seed is None
    np.testing.assert_array_equal(restored.predict(X), model.predict(X))


def test_public_sample_rate_makes_every_dp_sgd_parameter_public(digits, monkeypatch):
    """With sample_rate (and expected_batch_size) configured, q, steps, σ and the normaliser B do not depend on the
    private training-set size: neighbours (n and n − 1 examples) run the same release with the same B."""
    import warnings

    from privfed.pipelines.models import dp_training

    seen = []
    original = dp_training.train_dp_sgd

    def spy(*args, **kwargs):
        seen.append(kwargs["expected_batch_size"])
        return original(*args, **kwargs)

    monkeypatch.setattr(dp_training, "train_dp_sgd", spy)
    X, y = digits
    dp = config(noise_multiplier=None, target_epsilon=2.0, sample_rate=0.1, expected_batch_size=48)
    releases = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a public rate: no warning
        for rows in (600, 599):
            model = TorchMLP(hidden=(16,), epochs=1, batch_size=60, random_state=0, dp=dp).fit(X[:rows], y[:rows])
            releases.append(model.dp_mechanism_)
    assert releases[0].parameters() == releases[1].parameters()
    assert (releases[0].sample_rate, releases[0].steps) == (0.1, 10)
    assert seen == [48, 48]
    # Without expected_batch_size, B is the model's (public) batch_size, not q·n.
    TorchMLP(hidden=(16,), epochs=1, batch_size=60, random_state=0,
             dp=config(sample_rate=0.1)).fit(X[:599], y[:599])
    assert seen[-1] == 60
    with pytest.raises(ValueError, match="expected_batch_size"):
        config(expected_batch_size=0)


def test_a_rate_derived_from_the_private_size_warns(digits):
    X, y = digits
    with pytest.warns(UserWarning, match="derived from the private training-set size n"):
        TorchMLP(hidden=(16,), epochs=1, batch_size=60, random_state=0, dp=config()).fit(X, y)
