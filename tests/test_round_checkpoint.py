"""Round checkpoints: an interrupted PrivateKT run resumes to the result of an uninterrupted one (with a noise_seed;
with secret noise, to another draw of the same mechanism, and no checkpoint holds a noise source)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier

torch = pytest.importorskip("torch")

from privfed.pipelines.models.dp_config import DPConfig  # noqa: E402
from privfed.pipelines.models.torch_models import TorchMLP  # noqa: E402
from privfed.pipelines.privatekt import server as privatekt_server  # noqa: E402
from privfed.pipelines.privatekt.estimator import PrivateKT  # noqa: E402
from privfed.pipelines.protocol.checkpoint import RoundCheckpoint, run_fingerprint  # noqa: E402

from tests.conftest import digits_federation  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def digits():
    return digits_federation(8)


def run(**options) -> PrivateKT:
    settings = dict(epsilon_per_round=20.0, queries_per_round=10, buffer_rounds=2, self_training_size=40, rounds=4,
                    client_fraction=0.5, local_epochs=2, random_state=3, noise_seed=11)
    return PrivateKT(TorchMLP(hidden=(32,), lr=1e-2, batch_size=32, random_state=0), **{**settings, **options})


def interrupt_in_round(monkeypatch, round_number: int) -> None:
    """Make the server's update of ``round_number`` raise, as a killed process would stop there."""
    calls = {"n": 0}
    original = privatekt_server.server_update

    def update(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == round_number:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(privatekt_server, "server_update", update)


def assert_same_run(resumed: PrivateKT, whole: PrivateKT, X_test: np.ndarray) -> None:
    np.testing.assert_array_equal(resumed.predict_proba(X_test), whole.predict_proba(X_test))
    assert resumed.history_ == whole.history_
    np.testing.assert_array_equal(resumed.participation_, whole.participation_)
    assert resumed.bandwidth_ == whole.bandwidth_
    assert resumed.ledger_.account().epsilon == whole.ledger_.account().epsilon


DP_SGD = DPConfig(noise_multiplier=1.0, max_grad_norm=1.0, delta=1e-5, sample_rate=0.1)


@pytest.mark.parametrize("dp", [None, DP_SGD], ids=["plain", "dp-sgd"])
def test_interrupted_run_resumes_to_the_uninterrupted_result(digits, tmp_path, monkeypatch, dp):
    if dp is not None:
        pytest.importorskip("opacus")
    parties, public, (X_test, y_test) = digits
    options = {} if dp is None else {"batch_clients": False, "rounds": 3}
    whole = run(**options)
    whole.model.set_params(dp=dp)
    whole.fit(parties, public, eval_set=(X_test, y_test))
    path = tmp_path / "run.npz"
    with monkeypatch.context() as patched:
        interrupt_in_round(patched, 3 if dp is None else 2)
        with pytest.raises(KeyboardInterrupt):
            first = run(**options)
            first.model.set_params(dp=dp)
            first.fit(parties, public, eval_set=(X_test, y_test), checkpoint=path)
    resumed = run(**options)
    resumed.model.set_params(dp=dp)
    resumed.fit(parties, public, eval_set=(X_test, y_test), checkpoint=path)
    assert_same_run(resumed, whole, X_test)
    # a finished run's checkpoint: nothing left to do, the same model again
    again = run(**options)
    again.model.set_params(dp=dp)
    assert_same_run(again.fit(parties, public, eval_set=(X_test, y_test), checkpoint=path), whole, X_test)


def test_a_resumed_secret_noise_run_finishes_with_fresh_noise_and_no_noise_state_is_saved(digits, tmp_path,
                                                                                         monkeypatch):
    parties, public, (X_test, _) = digits
    path = tmp_path / "run.npz"
    with monkeypatch.context() as patched:
        interrupt_in_round(patched, 3)
        with pytest.raises(KeyboardInterrupt):
            run(noise_seed=None).fit(parties, public, checkpoint=path)
    with np.load(path, allow_pickle=False) as stored:
        names = " ".join(stored.files).lower()
        state = " ".join(str(stored[name]) for name in stored.files if stored[name].dtype.kind == "U").lower()
    assert "noise" not in names and "noise" not in state and "aescounter" not in state
    resumed = run(noise_seed=None).fit(parties, public, checkpoint=path)
    assert resumed.ledger_.noise["source"] == "secret" and np.isfinite(resumed.ledger_.account().epsilon)
    assert resumed.participation_.sum() == 4 * 4 and resumed.predict_proba(X_test).shape == (len(X_test), 10)
    with pytest.raises(ValueError, match="belongs to another run"):  # the noise seed is part of the run
        run(noise_seed=12).fit(parties, public, checkpoint=path)


def test_checkpoint_holds_only_plain_arrays_and_json(digits, tmp_path):
    parties, public, _ = digits
    path = tmp_path / "run.npz"
    run(rounds=2).fit(parties, public, checkpoint=path)
    with np.load(path, allow_pickle=False) as stored:  # would raise on any pickled object
        assert all(stored[name].dtype.kind in "biufU" for name in stored.files)
        assert "global_parameters" in stored.files
    assert not list(tmp_path.glob("*.tmp.npz"))


def test_checkpoint_of_another_run_is_refused(digits, tmp_path):
    parties, public, _ = digits
    path = tmp_path / "run.npz"
    run(rounds=2).fit(parties, public, checkpoint=path)
    with pytest.raises(ValueError, match="belongs to another run"):
        run(rounds=2, epsilon_per_round=10.0).fit(parties, public, checkpoint=path)
    with pytest.raises(ValueError, match="belongs to another run"):
        run(rounds=2).fit(parties, public[:-1], checkpoint=path)


@pytest.mark.parametrize(("path", "message"), [
    ("run.json", "ending in .npz"), ("missing/run.npz", "does not exist"),
])
def test_bad_checkpoint_path_fails_before_training(digits, tmp_path, path, message):
    parties, public, _ = digits
    with pytest.raises(ValueError, match=message):
        run().fit(parties, public, checkpoint=tmp_path / path)


def test_foreign_file_is_not_taken_for_a_checkpoint(digits, tmp_path):
    parties, public, _ = digits
    path = tmp_path / "run.npz"
    np.savez(path, weights=np.zeros(3))
    with pytest.raises(ValueError, match="not a privfed round checkpoint"):
        run().fit(parties, public, checkpoint=path)


def test_scikit_learn_global_model_cannot_be_checkpointed(digits, tmp_path):
    parties, public, _ = digits
    model = PrivateKT(DecisionTreeClassifier(max_depth=4), queries_per_round=10, self_training_size=20, rounds=2)
    with pytest.raises(ValueError, match="checkpoint needs a TorchClassifier"):
        model.fit(parties, public, checkpoint=tmp_path / "run.npz")
    assert not (tmp_path / "run.npz").exists()


def test_object_arrays_are_never_saved(tmp_path):
    checkpoint = RoundCheckpoint.at(tmp_path / "c.npz", "f")
    with pytest.raises(TypeError, match="numeric"):
        checkpoint.save({}, {"x": np.array([{"a": 1}], dtype=object)})
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["__header__", "allow_pickle"])
def test_array_names_numpy_would_not_store_are_refused(tmp_path, name):
    # np.savez takes an array named allow_pickle for its own keyword and silently drops it.
    checkpoint = RoundCheckpoint.at(tmp_path / "c.npz", "f")
    with pytest.raises(ValueError, match="allow_pickle"):
        checkpoint.save({}, {name: np.zeros(3)})
    assert not list(tmp_path.iterdir())


def test_fingerprint_names_functions_not_their_addresses():
    def make():
        def module_fn(input_size, n_classes):  # a new function object, at a new address, each call
            raise AssertionError
        return module_fn

    first = run_fingerprint({"fn": make(), "x": 1.0}, [np.arange(3)])
    assert first == run_fingerprint({"fn": make(), "x": 1.0}, [np.arange(3)])
    assert first != run_fingerprint({"fn": make(), "x": 2.0}, [np.arange(3)])
    assert first != run_fingerprint({"fn": make(), "x": 1.0}, [np.arange(4)])
