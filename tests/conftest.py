"""Shared helpers: the reference values in ``../shared/oracles`` beside the checkout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# Property tests: enough examples to find counterexamples, no per-example deadline (the machine is shared).
settings.register_profile("privfed", max_examples=40, deadline=None)
settings.load_profile("privfed")

ORACLES = Path(__file__).resolve().parents[1].parent / "shared" / "oracles"

#: Tests that compare with the reference values are skipped, with this reason, where the folder is absent.
requires_oracles = pytest.mark.skipif(
    not ORACLES.is_dir(), reason=f"reference values {ORACLES} are not beside this checkout"
)


def load_oracle(name: str) -> Any:
    """The parsed ``../shared/oracles/<name>`` (use in tests marked :data:`requires_oracles`)."""
    with (ORACLES / name).open() as handle:
        return json.load(handle)


def oracle_cases(name: str, section: str | None = None) -> list:
    """Cases of an oracle file for ``pytest.mark.parametrize`` (empty when the folder is absent)."""
    if not (ORACLES / name).is_file():
        return []
    data = load_oracle(name)
    return data if section is None else data[section]


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny networks train fastest on one thread, and the test machine's two cores are shared."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def digits_federation(n_parties: int) -> tuple[list, Any, tuple[Any, Any]]:
    """scikit-learn's digits scaled to [0, 1]: Dirichlet(1) parties over 1,100 rows, 400 public, the rest test."""
    import numpy as np
    from privfed.pipelines import dirichlet_partition
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    order = np.random.default_rng(0).permutation(len(y))
    X, y = X[order], y[order]
    parts = dirichlet_partition(y[:1100], n_parties, 1.0, min_size=40, random_state=0)
    parties = [(X[:1100][idx], y[:1100][idx]) for idx in parts]
    return parties, X[1100:1500], (X[1500:], y[1500:])


@pytest.fixture
def task_identity():
    """Messages are created inside a ServerApp run, which sets Flower's task identity; set one here."""
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    yield
    TaskIdentity.run_id = TaskIdentity.node_id = TaskIdentity.task_id = None


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    """Three digits parties, each in its own npz file (as three sites would hold them): the Flower tests' sites.

    Modules whose tests need another federation define their own ``federation`` fixture, which overrides this one.
    """
    from flower_sites import write_sites

    parties, public, test = digits_federation(3)
    return parties, write_sites(tmp_path_factory.mktemp("sites"), parties, public), public, test
