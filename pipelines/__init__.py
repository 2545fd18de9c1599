"""Federated knowledge-transfer pipelines: partitioning, model adapters, FedKT, FedKD, PrivateKT, Selective-FD.

The sub-packages, each importing only those listed before it (``tests/test_import_graph.py``): ``protocol`` (wire
messages, the party-task executor, checkpoints, voting, the secure sum, the silo gate); ``data`` (datasets,
partitions, party tables, the schema exchange); ``models`` (model adapters and DP-SGD); then one folder per
pipeline, ``fedkt``, ``fedkd``, ``privatekt`` and ``selective_fd``, which never import one another. Above
``privfed.accounting``, below ``privfed.reports`` and the face: nothing here imports either. Every public name is
importable from here; the estimators and torch adapters load on first use (``_LAZY``).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .data.datasets import (
    DATASET_NAMES,
    BenchmarkDataset,
    FederatedSplit,
    federated_split,
    load_dataset,
    read_idx,
)
from .data.partition import (
    dirichlet_partition,
    homogeneous_partition,
    keyed_teacher_subsets,
    label_mixture_partition,
    split_indices,
    teacher_subsets,
)
from .data.reference_rows import load_reference_rows, reference_rows_split
from .models.dp_config import DPConfig
from .protocol.executor import Executor, JoblibExecutor, PartyTask, SerialExecutor, run_party_tasks
from .protocol.seeds import spawn_seeds

# Estimators (and the table reader) load lazily, so that `import pipelines` imports neither torch, scikit-learn
# nor pandas. TorchClassifier (defined in models.torch_classifier) loads through models.torch_models, which
# registers the TorchMLP and TorchCNN that its from_safe_state may rebuild.
_LAZY = {
    "KerasInitialised": "models.torch_models",
    "TorchCNN": "models.torch_models",
    "TorchClassifier": "models.torch_models",
    "TorchMLP": "models.torch_models",
    "CentralizedPATE": "fedkt.estimator",
    "FedKT": "fedkt.estimator",
    "Solo": "fedkt.estimator",
    "FedKD": "fedkd.estimator",
    "PrivateKT": "privatekt.estimator",
    "DensityRatioSelector": "selective_fd.kulsif",
    "DPDensityRatioSelector": "selective_fd.dp_selector",
    "KuLSIF": "selective_fd.kulsif",
    "FedMD": "selective_fd.baselines",
    "IndependentLearning": "selective_fd.baselines",
    "SelectiveFD": "selective_fd.estimator",
    "PartyData": "data.party_tables",
    "load_parties": "data.party_tables",
    "train_copies": "models.batched_training",
    "batching_pays": "models.batched_training",
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
