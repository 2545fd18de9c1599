"""Federated knowledge-transfer pipelines: partitioning, model adapters, FedKT, FedKD, PrivateKT, Selective-FD."""

from __future__ import annotations

from typing import Any

# The torch adapters load lazily so that `import pipelines` does not import torch.
_TORCH_MODELS = ("TorchCNN", "TorchClassifier", "TorchMLP")

__all__ = [*_TORCH_MODELS]


def __getattr__(name: str) -> Any:
    if name in _TORCH_MODELS:
        from pipelines import torch_models

        return getattr(torch_models, name)
    raise AttributeError(f"module 'pipelines' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
