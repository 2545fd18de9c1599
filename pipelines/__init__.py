"""Federated knowledge-transfer pipelines: partitioning, model adapters, FedKT, FedKD, PrivateKT, Selective-FD."""

from __future__ import annotations

from importlib import import_module
from typing import Any

from ._random import spawn_seeds
from .datasets import (
    DATASET_NAMES,
    BenchmarkDataset,
    FederatedSplit,
    federated_split,
    load_dataset,
    read_idx,
)
from .dp_config import DPConfig
from .executor import Executor, JoblibExecutor, PartyTask, SerialExecutor, run_party_tasks
from .partition import (
    dirichlet_partition,
    homogeneous_partition,
    keyed_teacher_subsets,
    label_mixture_partition,
    split_indices,
    teacher_subsets,
)
from .reference_rows import load_reference_rows, reference_rows_split

# Estimators (and the table reader) load lazily, so that `import pipelines` imports neither torch, scikit-learn
# nor pandas.
_LAZY = {
    "KerasInitialised": "torch_models",
    "TorchCNN": "torch_models",
    "TorchClassifier": "torch_models",
    "TorchMLP": "torch_models",
    "CentralizedPATE": "fedkt",
    "FedKT": "fedkt",
    "Solo": "fedkt",
    "FedKD": "fedkd",
    "PrivateKT": "privatekt",
    "DensityRatioSelector": "kulsif",
    "DPDensityRatioSelector": "dp_selector",
    "KuLSIF": "kulsif",
    "FedMD": "selective_fd",
    "IndependentLearning": "selective_fd",
    "SelectiveFD": "selective_fd",
    "PartyData": "party_tables",
    "load_parties": "party_tables",
    "train_copies": "batched_training",
    "batching_pays": "batched_training",
}

__all__ = [
    "DATASET_NAMES",
    "BenchmarkDataset",
    "DPConfig",
    "Executor",
    "FederatedSplit",
    "JoblibExecutor",
    "PartyTask",
    "SerialExecutor",
    "dirichlet_partition",
    "federated_split",
    "homogeneous_partition",
    "label_mixture_partition",
    "load_dataset",
    "load_reference_rows",
    "read_idx",
    "reference_rows_split",
    "run_party_tasks",
    "spawn_seeds",
    "split_indices",
    "teacher_subsets",
    "keyed_teacher_subsets",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'pipelines' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
