"""Batched training of network copies equals training them one after another (fixed seeds, float tolerance)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from privfed.pipelines.models.batched_training import batching_pays, train_copies  # noqa: E402
from privfed.pipelines.models.dp_config import DPConfig  # noqa: E402
from privfed.pipelines.models.torch_models import TorchClassifier, TorchCNN, TorchMLP  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from torch import nn  # noqa: E402


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return (X / 16.0).astype(np.float32), y


def sequential(estimator, datasets, random_states, classes):
    models = []
    for (X, T), state in zip(datasets, random_states):
        local = copy.deepcopy(estimator).set_params(random_state=state)
        models.append(local.fit_soft(X, T, loss="kl", classes=classes, warm_start=True))
    return models


def client_data(X, y, sizes, seed=0):
    rng = np.random.default_rng(seed)
    rows = [rng.choice(len(y), size=size, replace=False) for size in sizes]
    return [(X[r], np.eye(10, dtype=np.float32)[y[r]]) for r in rows]


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_batched_equals_sequential_from_a_fitted_network(digits, optimizer):
    X, y = digits
    classes = np.arange(10)
    lr = 0.05 if optimizer == "sgd" else 1e-3
    global_ = TorchMLP(hidden=(32,), epochs=1, batch_size=32, optimizer=optimizer, lr=lr, random_state=0)
    global_.fit(X[:300], y[:300])
    global_.set_params(epochs=2)
    # different sizes: the smaller client finishes first, and its last batch of an epoch is short
    datasets = client_data(X, y, (70, 150, 33))
    states = [11, 12, 13]
    stacked = train_copies(global_, datasets, random_states=states, classes=classes)
    for index, model in enumerate(sequential(global_, datasets, states, classes)):
        for name, value in model.module_.named_parameters():
            np.testing.assert_allclose(stacked.parameters[name][index].numpy(), value.detach().numpy(),
                                       rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(stacked.predict(X[1000:1200])[index], model.predict(X[1000:1200]))
        np.testing.assert_allclose(stacked.logits(X[:50])[index], model._logits(X[:50]), rtol=1e-4, atol=1e-4)


def test_batched_equals_sequential_for_an_unfitted_cnn(digits):
    X, y = digits
    classes = np.arange(10)
    prototype = TorchCNN(conv_channels=(4, 8), hidden=(16,), padding=2, epochs=2, batch_size=16)
    datasets = client_data(X, y, (40, 57), seed=1)
    states = [5, 5]  # PrivateKT's first round: every client starts from the same seed
    stacked = train_copies(prototype, datasets, random_states=states, classes=classes)
    for index, model in enumerate(sequential(prototype, datasets, states, classes)):
        for name, value in model.module_.named_parameters():
            np.testing.assert_allclose(stacked.parameters[name][index].numpy(), value.detach().numpy(),
                                       rtol=1e-4, atol=1e-5)
    # the two copies saw different data, so they differ
    first = next(iter(stacked.parameters.values()))
    assert not torch.allclose(first[0], first[1])


def test_bad_arguments_are_refused(digits):
    X, y = digits
    prototype = TorchMLP(hidden=(8,), epochs=1)
    datasets = client_data(X, y, (20,))
    with pytest.raises(ValueError, match="one random_state per data set"):
        train_copies(prototype, datasets, random_states=[1, 2], classes=np.arange(10))
    with pytest.raises(ValueError, match="targets of shape"):
        train_copies(prototype, [(X[:5], np.zeros((5, 3)))], random_states=[1], classes=np.arange(10))
    with pytest.raises(TypeError, match="TorchClassifier"):
        train_copies(object(), datasets, random_states=[1], classes=np.arange(10))
    dp = DPConfig(noise_multiplier=1.0, max_grad_norm=1.0, delta=1e-5, sample_rate=0.1)
    with pytest.raises(ValueError, match="trains without DP-SGD"):  # never silently without its noise
        train_copies(prototype.set_params(dp=dp), datasets, random_states=[1], classes=np.arange(10))


def conv1d_network(n_features, n_classes):
    return nn.Sequential(nn.Unflatten(1, (1, n_features)), nn.Conv1d(1, 2, 3), nn.Flatten(),
                         nn.Linear(2 * (n_features - 2), n_classes))


def test_batching_pays_on_a_cpu_only_without_convolutions(digits):
    X, _ = digits
    classes = np.arange(10)
    assert batching_pays(TorchMLP(hidden=(8,), device="cpu"), X, classes)
    assert not batching_pays(TorchCNN(padding=2, device="cpu"), X, classes)
    assert not batching_pays(TorchClassifier(conv1d_network, device="cpu"), X, classes)
    # looking at the layers leaves torch's random state as it was
    before = torch.random.get_rng_state()
    batching_pays(TorchCNN(padding=2, device="cpu"), X, classes)
    assert torch.equal(before, torch.random.get_rng_state())


def test_batching_pays_on_cuda(digits, monkeypatch):
    from privfed.pipelines.models import batched_training

    monkeypatch.setattr(batched_training, "resolve_device", lambda device: torch.device("cuda"))
    X, _ = digits
    assert batching_pays(TorchCNN(padding=2), X, np.arange(10))
