"""Round checkpoints of Selective-FD and its baselines: an interrupted run resumes to the uninterrupted result.

The runs that add noise (GNMax, DP-SGD clients) opt in to reproducible noise (``noise_seed``): only then is a
resumed run bit-identical. A run with secret noise (the default) resumes with fresh secret noise, and its
checkpoint holds no noise generator's state.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.tree import DecisionTreeClassifier

torch = pytest.importorskip("torch")

from privfed.pipelines.models.dp_config import DPConfig  # noqa: E402
from privfed.pipelines.models.torch_models import TorchMLP  # noqa: E402
from privfed.pipelines.selective_fd.baselines import FedMD, IndependentLearning  # noqa: E402
from privfed.pipelines.selective_fd.estimator import SelectiveFD  # noqa: E402
from privfed.pipelines.selective_fd.local_clients import LocalClients  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FAST = dict(rounds=4, local_steps=2, distill_steps=5, proxy_batch=100, random_state=0)
SELECTOR = dict(n_auxiliary=100, max_known=100, tau_server=1.5)


@pytest.fixture(scope="module")
def digits():
    """Five clients of two classes each (of 800 training digits); 300 proxy digits, the rest for testing."""
    X, y = load_digits(return_X_y=True)
    order = np.random.default_rng(1).permutation(len(y))
    X, y = X[order] / 16.0, y[order]
    train, proxy, test = slice(0, 800), slice(800, 1100), slice(1100, None)
    parties = [(X[train][y[train] // 2 == c], y[train][y[train] // 2 == c]) for c in range(5)]
    return parties, X[proxy], (X[test], y[test])


def mlp(**options):
    return TorchMLP(hidden=(16,), lr=1e-2, batch_size=32, **options)


RUNS = {
    "selective-fd, soft, torch": lambda: SelectiveFD(mlp(), **FAST, **SELECTOR),
    "selective-fd, hard, gnmax": lambda: SelectiveFD(mlp(), labels="hard", privacy="gnmax", sigma=1.0,
                                                     noise_seed=5, **FAST, **SELECTOR),
    "selective-fd, soft, dp-sgd clients": lambda: SelectiveFD(
        mlp(dp=DPConfig(noise_multiplier=1.0, max_grad_norm=1.0, delta=1e-5, sample_rate=0.1)), noise_seed=6,
        **FAST, **SELECTOR),
    "fedmd, refitted trees": lambda: FedMD(DecisionTreeClassifier(max_depth=4), **FAST),
    "independent": lambda: IndependentLearning(mlp(), **{k: v for k, v in FAST.items() if k != "distill_steps"
                                                        and k != "proxy_batch"}),
}


def interrupt_in_round(monkeypatch, round_number: int) -> None:
    """Make the parties' share step of ``round_number`` raise, as a killed process would stop there."""
    calls = {"n": 0}
    original = LocalClients.share

    def share(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == round_number:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(LocalClients, "share", share)


def assert_same_run(resumed, whole, X_test: np.ndarray) -> None:
    for resumed_model, whole_model in zip(resumed.models_, whole.models_):
        np.testing.assert_array_equal(resumed_model.predict_proba(X_test), whole_model.predict_proba(X_test))
    assert resumed.history_ == whole.history_
    assert resumed.bandwidth_ == whole.bandwidth_
    assert resumed.ledger_.account().epsilon == whole.ledger_.account().epsilon
    assert entry_contents(resumed.ledger_) == entry_contents(whole.ledger_)


def entry_contents(ledger) -> list[tuple]:
    """Each entry's kind, description and analyses (DP-SGD trainings included), without the evidence
    commitments, which are salted afresh by every run."""
    return [(entry.kind, entry.description, {unit: replace(analysis, evidence_sha256=None)
                                             for unit, analysis in entry.analyses.items()})
            for entry in ledger.entries]


@pytest.mark.parametrize("name", RUNS)
def test_interrupted_run_resumes_to_the_uninterrupted_result(digits, tmp_path, monkeypatch, name):
    parties, proxy, (X_test, _) = digits
    public = None if name == "independent" else proxy
    whole = RUNS[name]().fit(parties, public)
    path = tmp_path / "run.npz"
    with monkeypatch.context() as patched:
        interrupt_in_round(patched, 3)
        with pytest.raises(KeyboardInterrupt):
            RUNS[name]().fit(parties, public, checkpoint=path)
    resumed = RUNS[name]().fit(parties, public, checkpoint=path)
    assert_same_run(resumed, whole, X_test)
    # a finished run's checkpoint: nothing left to do, the same models again
    assert_same_run(RUNS[name]().fit(parties, public, checkpoint=path), whole, X_test)


def test_the_checkpoint_is_what_resumes_the_run(digits, tmp_path, monkeypatch):
    """A checkpoint whose clients' weights are changed resumes to another result: the state is really read."""
    parties, proxy, (X_test, _) = digits
    path = tmp_path / "run.npz"
    with monkeypatch.context() as patched:
        interrupt_in_round(patched, 3)
        with pytest.raises(KeyboardInterrupt):
            RUNS["selective-fd, soft, torch"]().fit(parties, proxy, checkpoint=path)
    with np.load(path, allow_pickle=False) as stored:
        arrays = {name: stored[name] for name in stored.files}
    assert all(array.dtype.kind in "biufU" for array in arrays.values())
    weights = [name for name in arrays if name.startswith("client.") and ".model." in name]
    assert weights
    resumed = RUNS["selective-fd, soft, torch"]().fit(parties, proxy, checkpoint=path)
    for name in weights:
        arrays[name] = np.zeros_like(arrays[name])
    np.savez(path, **arrays)
    tampered = RUNS["selective-fd, soft, torch"]().fit(parties, proxy, checkpoint=path)
    assert not np.array_equal(tampered.predict_proba(X_test), resumed.predict_proba(X_test))


def test_checkpoint_of_another_run_is_refused(digits, tmp_path):
    parties, proxy, _ = digits
    path = tmp_path / "run.npz"
    SelectiveFD(mlp(), **{**FAST, "rounds": 1}, **SELECTOR).fit(parties, proxy, checkpoint=path)
    with pytest.raises(ValueError, match="belongs to another run"):
        SelectiveFD(mlp(), **{**FAST, "rounds": 1}, **{**SELECTOR, "tau_server": 1.0}).fit(
            parties, proxy, checkpoint=path)
    with pytest.raises(ValueError, match="belongs to another run"):
        SelectiveFD(mlp(), **{**FAST, "rounds": 1}, **SELECTOR).fit(parties, proxy[:-1], checkpoint=path)


def test_dp_sgd_clients_keep_every_rounds_release_across_a_resume(digits, tmp_path, monkeypatch):
    """The resumed run's ledger composes the DP-SGD releases of the rounds before the interruption too."""
    parties, proxy, _ = digits
    path = tmp_path / "run.npz"
    run = RUNS["selective-fd, soft, dp-sgd clients"]
    with monkeypatch.context() as patched:
        interrupt_in_round(patched, 3)
        with pytest.raises(KeyboardInterrupt):
            run().fit(parties, proxy, checkpoint=path)
    resumed = run().fit(parties, proxy, checkpoint=path)
    (training,) = [entry for entry in resumed.ledger_.entries if entry.kind == "training"]
    members = training.analyses["example"].parameters["members"]
    assert len(members) == len(parties)
    # 4 rounds of one Poisson epoch, ⌊1/q⌋ steps each
    for member in members:
        rate = member["parameters"]["sample_rate"]
        assert member["parameters"]["steps"] == FAST["rounds"] * int(1 / rate)


def test_a_secret_noise_run_resumes_with_fresh_noise_and_its_checkpoint_holds_no_noise_state(digits, tmp_path,
                                                                                              monkeypatch):
    """GNMax with secret noise (the default): the checkpoint's only generator state is random_state's (the
    proxy batches), so the resumed rounds draw the same proxy batches and fresh secret noise."""
    parties, proxy, _ = digits

    def run():
        return SelectiveFD(mlp(), labels="hard", privacy="gnmax", sigma=1.0, **{**FAST, "rounds": 3}, **SELECTOR)

    path = tmp_path / "run.npz"
    with monkeypatch.context() as patched:
        interrupt_in_round(patched, 3)
        with pytest.raises(KeyboardInterrupt):
            run().fit(parties, proxy, checkpoint=path)
    with np.load(path, allow_pickle=False) as stored:
        text = " ".join(str(stored[name]) for name in stored.files if stored[name].dtype.kind == "U")
    # random_state's generators (PCG64) only: no secret generator's state, no noise seed (the models' is None)
    assert "PCG64" in text and "AESCounter" not in text and "noise_seed" in text
    assert not re.search(r'noise_seed\\*": [0-9]', text)  # the models' noise_seed is null (JSON within JSON)
    resumed = run().fit(parties, proxy, checkpoint=path)
    whole = run().fit(parties, proxy)
    assert resumed.n_rounds_ == whole.n_rounds_ == 3
    assert resumed.ledger_.noise["source"] == whole.ledger_.noise["source"] == "secret"
    # the same proxy batches and selectors, hence the same examples answered and the same (data-independent) ε
    assert resumed.history_["sharers_per_example"] == whole.history_["sharers_per_example"]
    assert resumed.ledger_.account().epsilon == whole.ledger_.account().epsilon
