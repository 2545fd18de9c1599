"""bench/privatekt.py's --round-speed modes run the clients' step as PrivateKT does, and agree with each other."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from privfed.pipelines.privatekt_steps import privatekt_tasks  # noqa: E402
from privfed.pipelines.torch_models import TorchMLP  # noqa: E402

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
