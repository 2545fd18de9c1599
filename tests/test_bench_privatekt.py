"""bench/privatekt.py's --round-speed modes run the clients' step as PrivateKT does, and agree with each other;
its and bench/fedkd.py's --device and --client-epsilons options."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from privfed.pipelines.models.torch_models import TorchMLP  # noqa: E402
from privfed.pipelines.privatekt.steps import privatekt_tasks  # noqa: E402

from tests.conftest import digits_federation  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def bench():
    path = Path(__file__).resolve().parents[1] / "bench" / "privatekt.py"
    spec = importlib.util.spec_from_file_location("bench_privatekt", path)
    module = importlib.util.module_from_spec(spec)
    path_before = list(sys.path)
    try:
        spec.loader.exec_module(module)  # the script puts the checkout first on sys.path: put it back after
    finally:
        sys.path[:] = path_before
    return module


def test_every_round_speed_mode_reports_the_same_labels(bench):
    parties, public, _ = digits_federation(6)
    model = TorchMLP(hidden=(16,), batch_size=32, epochs=1, random_state=0)
    tasks = privatekt_tasks(queries=public[:20], classes=np.arange(10), parameters=np.zeros(0, dtype=np.float32),
                            keep_probability=1.0, local_epochs=2, init_seed=3,
                            round_seed=np.random.SeedSequence(7), n_clients=len(parties))
    labels = {mode: bench.clients_step(mode, parties, tasks, model) for mode in bench.ROUND_MODES}
    assert set(labels) == {"sequential", "sequential-2-processes", "batched"}
    for mode, reported in labels.items():
        assert reported.shape == (len(parties), 20), mode
        np.testing.assert_array_equal(reported, labels["sequential"], err_msg=mode)
    # keep probability 1: the reports are the clients' own predictions, which are not all one class
    assert len(np.unique(labels["sequential"])) > 1


def _script(name: str, *arguments: str, cwd: Path) -> subprocess.CompletedProcess:
    root = Path(__file__).resolve().parents[1]
    return subprocess.run([sys.executable, str(root / "bench" / name), *arguments], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(root)})


@pytest.mark.parametrize("name", ["privatekt.py", "fedkd.py"])
@pytest.mark.skipif(importlib.util.find_spec("torch") is not None and __import__("torch").cuda.is_available(),
                    reason="this machine has CUDA: --device cuda is valid here")
def test_device_cuda_without_cuda_is_refused_before_any_work(name, tmp_path):
    run = _script(name, "--device", "cuda", "--json", str(tmp_path / "out.json"), cwd=tmp_path)
    assert run.returncode == 2
    assert "--device cuda: CUDA is not available" in run.stderr
    assert not (tmp_path / "out.json").exists()


def test_client_epsilons_are_the_accountants_and_carry_their_provenance(tmp_path):
    from privfed.accounting import RandomizedResponse, account

    run = _script("privatekt.py", "--client-epsilons", "3", "1", "--json", str(tmp_path / "eps.json"), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    document = json.loads((tmp_path / "eps.json").read_text(encoding="utf-8"))
    assert [row["reports"] for row in document["rows"]] == [3, 1]
    for row in document["rows"]:
        release = RandomizedResponse(10, epsilon=5.0, labels_per_report=2, reports=row["reports"])
        assert row["basic"] == 5.0 * row["reports"] == release.pure_epsilon()
        assert row["tight"] == account(release, delta=1e-5).epsilon
    record = document["provenance"]
    assert record["command"].endswith("--client-epsilons 3 1 --json " + str(tmp_path / "eps.json"))
    assert record["device"] in ("cpu", "cuda") and record["settings"]["device"] == "auto"
    assert "load_end" in record and len(record["commit"]) == 40


def _tiny_image_set(path: Path, seed: int) -> None:
    """An .npz in the layout of ../shared/datasets' MNIST copies: 10 classes of 28×28 uint8 images, a bright
    row per class (learnable), 300 training and 100 test images."""
    rng = np.random.default_rng(seed)

    def draw(count: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.arange(count) % 10
        X = rng.integers(0, 60, size=(count, 28, 28), dtype=np.uint8)
        X[np.arange(count), 2 * y + 4, :] = 250
        return X, y.astype(np.int64)

    X, y = draw(300)
    X_test, y_test = draw(100)
    np.savez(path, X=X, y=y, X_test=X_test, y_test=y_test, class_names=np.array(list("0123456789")))


def test_fedkd_noise_grid_runs_figure_2_lefts_column_with_each_points_accountants_epsilon(tmp_path):
    """``bench/fedkd.py --grid noise`` (the paper's Fig. 2 left, one public-set size): the noiseless point, then
    S = 200 with γ = 0.1, 1 and 10, each row's ε the accountant's for its γ on that public set."""
    from privfed.accounting import QuantizedLaplaceEnsemble

    _tiny_image_set(tmp_path / "mnist.npz", 0)
    _tiny_image_set(tmp_path / "fashion_mnist.npz", 1)
    out = tmp_path / "noise.json"
    run = _script("fedkd.py", "--data", str(tmp_path), "--parties", "3", "--alphas", "1", "--public-size", "40",
                  "--local-epochs", "1", "--distill-epochs", "1", "--grid", "noise", "--publics", "in-domain",
                  "--device", "cpu", "--json", str(out), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    document = json.loads(out.read_text(encoding="utf-8"))
    rows = document["rows"]
    assert [(row["S"], row["gamma"]) for row in rows] == [(None, None), (200, 0.1), (200, 1.0), (200, 10.0)]
    assert all(row["public"] == "in-domain (MNIST)" and row["alpha"] == 1.0 for row in rows)
    assert rows[0]["epsilon_party_pure"] == float("inf")  # nobody noised the noiseless point: ε = ∞, never 0
    for row in rows[1:]:
        pure = QuantizedLaplaceEnsemble(10, 10.0, row["gamma"], 40, quantization_scale=200).pure_epsilon()
        assert row["epsilon_party_pure"] == pure
        assert 0 < row["epsilon_party_tight"] <= pure
    tight = [row["epsilon_party_tight"] for row in rows[1:]]
    assert tight == sorted(tight) and tight[0] < tight[-1]  # less noise (larger γ), larger ε
    assert document["settings"]["grid"] == "noise" and len(document["provenance"]["commit"]) == 40
