"""Continued training of the torch adapters: partial_fit and partial_fit_soft (CPU, seconds)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from privfed.pipelines.models.torch_models import TorchCNN, TorchMLP  # noqa: E402
from scipy.special import softmax  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return train_test_split(X / 16.0, y, test_size=0.3, random_state=0, stratify=y)


def first_layer(model) -> np.ndarray:
    return next(model.module_.parameters()).detach().numpy().copy()


def test_partial_fit_learns_over_calls_and_keeps_one_network(digits):
    X_train, X_test, y_train, y_test = digits
    model = TorchMLP(hidden=(32,), lr=3e-3, random_state=0)
    model.partial_fit(X_train, y_train, classes=np.arange(10))
    network = model.module_
    after_one = model.score(X_test, y_test)
    for _ in range(7):
        model.partial_fit(X_train, y_train)
    assert model.module_ is network  # continued, not rebuilt
    assert len(model.loss_curve_) == 8 and model.loss_curve_[-1] < model.loss_curve_[0]
    assert model.score(X_test, y_test) > max(0.9, after_one)


def test_a_single_class_batch_is_fine_once_the_classes_are_known(digits):
    X_train, _, y_train, _ = digits
    model = TorchMLP(hidden=(8,), random_state=0)
    threes = y_train == 3
    model.partial_fit(X_train[threes], y_train[threes], classes=np.arange(10))
    assert model.classes_.tolist() == list(range(10))
    assert model.predict_proba(X_train[:5]).shape == (5, 10)
    model.partial_fit(X_train[~threes][:50], y_train[~threes][:50])  # other labels, same classes


def test_partial_fit_continues_a_network_trained_by_fit(digits):
    X_train, X_test, y_train, y_test = digits
    fitted = TorchMLP(hidden=(32,), epochs=5, random_state=0).fit(X_train, y_train)
    before, accuracy_before = first_layer(fitted), fitted.score(X_test, y_test)
    fresh = first_layer(TorchMLP(hidden=(32,), epochs=1, random_state=1).fit(X_train, y_train))
    fitted.partial_fit(X_train[:64], y_train[:64])
    moved = np.abs(first_layer(fitted) - before).max()
    assert 0 < moved < 0.1 * np.abs(fresh - before).max()  # a small step from the fitted weights
    assert accuracy_before > 0.7 and abs(fitted.score(X_test, y_test) - accuracy_before) < 0.05


def test_calls_are_deterministic_and_survive_pickling(digits):
    """Two estimators with one random_state and one call sequence agree, even if one is pickled between calls."""
    X_train, _, y_train, _ = digits
    first = TorchMLP(hidden=(16,), random_state=5)
    second = TorchMLP(hidden=(16,), random_state=5)
    for model in (first, second):
        model.partial_fit(X_train[:200], y_train[:200], classes=np.arange(10))
    second = pickle.loads(pickle.dumps(second))  # as joblib's processes do
    for model in (first, second):
        model.partial_fit(X_train[200:400], y_train[200:400])
        model.partial_fit_soft(X_train[:100], np.full((100, 10), 0.1))
    np.testing.assert_array_equal(first_layer(first), first_layer(second))
    # Later calls are seeded differently from earlier ones (another shuffle order).
    third = TorchMLP(hidden=(16,), random_state=5).partial_fit(X_train[:200], y_train[:200], classes=np.arange(10))
    third.partial_fit(X_train[:200], y_train[:200])
    repeat = TorchMLP(hidden=(16,), random_state=5).partial_fit(X_train[:200], y_train[:200], classes=np.arange(10))
    repeat.partial_fit(X_train[:200], y_train[:200])
    np.testing.assert_array_equal(first_layer(third), first_layer(repeat))


def test_adam_state_is_carried_between_calls(digits):
    """The second call continues Adam's moments: a fresh optimizer on the same weights moves them differently."""
    X_train, _, y_train, _ = digits
    model = TorchMLP(hidden=(16,), random_state=0).partial_fit(X_train[:128], y_train[:128], classes=np.arange(10))
    restarted = pickle.loads(pickle.dumps(model))
    restarted._optimizer_state = None
    model.partial_fit(X_train[:128], y_train[:128])
    restarted.partial_fit(X_train[:128], y_train[:128])
    assert not np.allclose(first_layer(model), first_layer(restarted))


def test_partial_fit_soft_distils_a_teacher(digits):
    X_train, X_test, y_train, _ = digits
    teacher = TorchMLP(hidden=(64,), epochs=20, random_state=0).fit(X_train, y_train)
    targets = teacher.predict_proba(X_train)
    student = TorchCNN(padding=2, random_state=0)
    student.partial_fit_soft(X_train, targets, temperature=2.0, classes=teacher.classes_)
    for _ in range(9):
        student.partial_fit_soft(X_train, targets, temperature=2.0)
    assert np.mean(student.predict(X_test) == teacher.predict(X_test)) > 0.85


def test_partial_fit_soft_reorders_columns_to_classes():
    X = np.random.default_rng(0).normal(size=(40, 3)).astype(np.float32)
    model = TorchMLP(hidden=(4,), random_state=0)
    model.partial_fit(X, np.array(["a", "b", "c", "a"] * 10), classes=["a", "b", "c"])
    before = first_layer(model)
    targets = softmax(np.random.default_rng(1).normal(size=(40, 3)), axis=1)
    permuted = model.__class__(hidden=(4,), random_state=0)
    permuted.partial_fit(X, np.array(["a", "b", "c", "a"] * 10), classes=["a", "b", "c"])
    model.partial_fit_soft(X, targets, classes=["a", "b", "c"])
    permuted.partial_fit_soft(X, targets[:, [2, 0, 1]], classes=["c", "a", "b"])
    assert not np.array_equal(first_layer(model), before)
    np.testing.assert_allclose(first_layer(model), first_layer(permuted), rtol=1e-6)


def test_partial_fit_refuses_what_it_cannot_continue(digits):
    X_train, _, y_train, _ = digits
    with pytest.raises(ValueError, match="classes must be passed on the first call"):
        TorchMLP().partial_fit(X_train, y_train)
    with pytest.raises(ValueError, match="at least 2 labels"):
        TorchMLP().partial_fit(X_train[:3], np.zeros(3), classes=[0])
    with pytest.raises(ValueError, match="lr"):
        TorchMLP(lr=-1.0).partial_fit(X_train, y_train, classes=np.arange(10))
    model = TorchMLP(hidden=(4,), random_state=0).partial_fit(X_train, y_train % 5, classes=np.arange(5))
    with pytest.raises(ValueError, match=r"outside classes_"):
        model.partial_fit(X_train[:10], np.full(10, 7))
    with pytest.raises(ValueError, match="differs from classes_"):
        model.partial_fit(X_train[:10], y_train[:10] % 5, classes=np.arange(6))
    with pytest.raises(ValueError, match="features"):
        model.partial_fit(X_train[:10, :20], y_train[:10] % 5)
    with pytest.raises(ValueError, match="permutation of classes_"):
        model.partial_fit_soft(X_train[:10], np.full((10, 5), 0.2), classes=[0, 1, 2, 3, 9])
    with pytest.raises(ValueError, match="probabilities"):
        model.partial_fit_soft(X_train[:10], np.full((10, 5), 0.5))


def test_image_shapes_are_checked_on_later_calls():
    images = np.random.default_rng(0).random((20, 1, 16, 16)).astype(np.float32)
    model = TorchCNN(random_state=0).partial_fit(images, np.arange(20) % 2, classes=[0, 1])
    model.partial_fit(images[:4], [0, 1, 0, 1])
    with pytest.raises(ValueError, match="examples of shape"):
        model.partial_fit(images[:4, :, :12, :12], [0, 1, 0, 1])
