"""Federated knowledge-transfer pipelines: partitioning, model adapters, FedKT, FedKD, PrivateKT, Selective-FD."""

from pipelines._random import spawn_seeds
from pipelines.datasets import DATASET_NAMES, BenchmarkDataset, FederatedSplit, federated_split, load_dataset, read_idx
from pipelines.executor import Executor, JoblibExecutor, PartyTask, SerialExecutor, run_party_tasks
from pipelines.partition import dirichlet_partition, homogeneous_partition, split_indices, teacher_subsets

__all__ = [
    "DATASET_NAMES",
    "BenchmarkDataset",
    "Executor",
    "FederatedSplit",
    "JoblibExecutor",
    "PartyTask",
    "SerialExecutor",
    "dirichlet_partition",
    "federated_split",
    "homogeneous_partition",
    "load_dataset",
    "read_idx",
    "run_party_tasks",
    "spawn_seeds",
    "split_indices",
    "teacher_subsets",
]
