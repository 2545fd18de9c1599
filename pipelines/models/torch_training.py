"""Training a torch network in mini-batches: the trainer behind
:class:`~pipelines.models.torch_classifier.TorchClassifier`.

The estimator validates its inputs and keeps the fitted state; everything that
touches the network while it learns or predicts lives here:

- where it runs (:func:`resolve_device`) and how torch is seeded
  (:func:`torch_seed`, :func:`continuation_seed`, :func:`seeded_torch`; DP-SGD's sampling and noise
  never draw from these: they come from a :class:`~privfed.accounting.NoiseSource`);
- the losses (cross-entropy on hard labels, :func:`soft_loss` for distillation)
  and their targets (:func:`check_soft_targets`, :func:`check_target_classes`);
- building a network and checking its output (:func:`new_network`);
- the optimisation itself (:func:`train_epochs`): shuffled mini-batches with
  ``torch.optim.Adam`` or ``SGD``, or, with ``dp=``, DP-SGD through Opacus
  (:func:`~pipelines.models.dp_training.run_dp_epochs`), continuing the optimizer state a
  previous call left;
- prediction in bounded chunks (:func:`network_logits`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from sklearn.utils import check_random_state
from torch import nn
from torch.nn import functional

from ...accounting._checks import check_choice, check_positive_finite
from ...accounting.dpsgd import DPSGD
from ...accounting.noise_source import NoiseSource
from .dp_config import DPConfig
from .dp_training import run_dp_epochs

__all__ = [
    "INFERENCE_BATCH",
    "LossFunction",
    "TrainingRun",
    "TrainingSettings",
    "check_soft_targets",
    "check_target_classes",
    "continuation_seed",
    "network_logits",
    "new_network",
    "resolve_device",
    "seeded_torch",
    "soft_loss",
    "torch_seed",
    "train_epochs",
]

# Rows per forward pass at prediction time: large enough that Python overhead is
# negligible, small enough that a CNN's activations on 28×28 images stay ~100 MB.
INFERENCE_BATCH = 4096

#: ``loss(logits, targets)``: the mean loss of a batch, as a scalar tensor.
LossFunction = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


# ------------------------------------------------------------------ device and seeds
def resolve_device(device: object) -> torch.device:
    """Return the torch device for ``device``: CUDA if available when None, else CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be None, a string such as 'cpu' or 'cuda:0', or a torch.device; got {device!r}")
    try:
        resolved = torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"device must name a torch device such as 'cpu' or 'cuda:0'; got {device!r}") from error
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={device!r} but CUDA is not available on this machine; use device='cpu' or None")
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise ValueError(
                f"device={device!r} but only {torch.cuda.device_count()} CUDA device(s) are visible"
            )
    return resolved


def torch_seed(random_state: int | np.random.RandomState | None) -> int:
    """The seed of one training call (torch's generators and the shuffle), drawn from ``random_state``."""
    return int(check_random_state(random_state).randint(np.iinfo(np.int32).max))


def continuation_seed(random_state: int | np.random.RandomState | None, *, epochs_done: int) -> int:
    """The seed of a ``partial_fit`` call: ``random_state``'s and the number of epochs run so far, mixed."""
    base = torch_seed(random_state)
    return int(np.random.SeedSequence([base, epochs_done]).generate_state(1)[0] >> 1)


@contextmanager
def seeded_torch(device: torch.device, seed: int) -> Iterator[None]:
    """Seed torch's generators (CPU, and ``device`` if CUDA) inside, restoring the caller's state after."""
    cuda_devices = []
    if device.type == "cuda":
        cuda_devices = [device.index if device.index is not None else torch.cuda.current_device()]
    with torch.random.fork_rng(devices=cuda_devices):
        torch.manual_seed(seed)
        yield


# ------------------------------------------------------------------ losses and targets
def soft_loss(loss: str, *, temperature: float) -> LossFunction:
    """The distillation loss of ``fit_soft`` (validated): ``T²·KL`` on probabilities, or L2 / L1 on logits."""
    check_choice("loss", loss, ("kl", "l2", "l1"))
    temperature = check_positive_finite("temperature", temperature)
    if loss != "kl" and temperature != 1.0:
        raise ValueError(f"temperature only applies to loss='kl'; got temperature={temperature!r} with loss={loss!r}")
    if loss != "kl":
        return functional.mse_loss if loss == "l2" else functional.l1_loss

    def kl_loss(logits: torch.Tensor, probabilities: torch.Tensor) -> torch.Tensor:
        log_student = functional.log_softmax(logits / temperature, dim=1)
        return functional.kl_div(log_student, probabilities, reduction="batchmean") * temperature**2

    return kl_loss


def check_soft_targets(targets: Any, loss: str) -> np.ndarray:
    """``targets`` as float32 of shape (n, n_classes >= 2); class probabilities for ``loss="kl"``."""
    targets = np.asarray(targets, dtype=np.float32)
    if targets.ndim != 2 or targets.shape[1] < 2:
        raise ValueError(f"targets must have shape (n_samples, n_classes) with n_classes >= 2, got {targets.shape}")
    if loss == "kl" and (targets.min() < 0 or not np.allclose(targets.sum(axis=1), 1.0, atol=1e-4)):
        raise ValueError("targets must be class probabilities for loss='kl' (rows >= 0 summing to 1)")
    return targets


def check_target_classes(classes: Any, n_columns: int) -> np.ndarray:
    """``classes`` as an array of ``n_columns`` distinct labels, one per target column."""
    classes = np.asarray(classes)
    if classes.ndim != 1 or len(classes) != n_columns or len(np.unique(classes)) != len(classes):
        raise ValueError(f"classes must hold {n_columns} distinct labels, one per target column; got {classes!r}")
    return classes


# ------------------------------------------------------------------ the network
def _as_tensor(X: np.ndarray) -> torch.Tensor:
    """A tensor sharing (or, if needed, copying into) C-contiguous, writable memory with ``X``."""
    return torch.from_numpy(np.require(X, requirements=["C", "W"]))


def new_network(
    build: Callable[[tuple[int, ...], int], nn.Module], X: np.ndarray, *, n_classes: int, device: torch.device
) -> nn.Module:
    """``build(input_shape, n_classes)`` on ``device``, checked to map one row of ``X`` to ``n_classes`` logits.

    Called under the caller's torch seed (the initialisation draws from it). The check runs in
    evaluation mode.
    """
    module = build(tuple(int(size) for size in X.shape[1:]), n_classes).to(device)
    example = _as_tensor(X[:1]).to(device)
    module.eval()
    with torch.no_grad():
        shape = tuple(module(example).shape)
    if shape != (1, n_classes):
        raise ValueError(
            f"the network must return logits of shape (batch, {n_classes}); "
            f"for a batch of shape {tuple(example.shape)} it returned shape {shape}"
        )
    return module


def network_logits(module: nn.Module, X: np.ndarray, *, device: torch.device) -> np.ndarray:
    """The network's logits on float32 ``X`` as float64, computed in chunks of :data:`INFERENCE_BATCH` rows."""
    chunks = []
    with torch.inference_mode():
        for start in range(0, len(X), INFERENCE_BATCH):
            chunks.append(module(_as_tensor(X[start : start + INFERENCE_BATCH]).to(device)).cpu().numpy())
    return np.concatenate(chunks).astype(np.float64)


# ------------------------------------------------------------------ optimisation
@dataclass(frozen=True, slots=True)
class TrainingSettings:
    """How a network is optimised: the estimator's training hyper-parameters (validated by the estimator).

    Attributes
    ----------
    batch_size : int
        Examples per step (without DP-SGD; with it, Poisson batches of expected size ``q·n``).
    optimizer : {"adam", "sgd"}
        ``torch.optim.Adam``, or ``torch.optim.SGD`` with ``momentum``.
    lr, momentum, weight_decay : float
        Passed to the optimizer (Adam ignores ``momentum``).
    dp : DPConfig or None
        Train with DP-SGD through Opacus.
    verbose : bool
        Print each epoch's mean loss (without DP-SGD) or the release and its last loss (with it).
    """

    batch_size: int
    optimizer: Literal["adam", "sgd"]
    lr: float
    momentum: float
    weight_decay: float
    dp: DPConfig | None
    verbose: bool

    def make_optimizer(self, module: nn.Module) -> torch.optim.Optimizer:
        """A fresh optimizer over ``module``'s parameters."""
        if self.optimizer == "adam":
            return torch.optim.Adam(module.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        return torch.optim.SGD(module.parameters(), lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)


@dataclass(frozen=True, slots=True)
class TrainingRun:
    """What one call of :func:`train_epochs` did.

    Attributes
    ----------
    losses : list of float
        The mean training loss of each epoch.
    optimizer_state : dict
        The optimizer's ``state_dict()`` after the last step, for the next call to continue from.
    release : DPSGD or None
        With DP-SGD, the release that ran (its exact σ, q and steps); None without.
    """

    losses: list[float]
    optimizer_state: dict[str, Any]
    release: DPSGD | None


def train_epochs(
    module: nn.Module,
    X: np.ndarray,
    targets: torch.Tensor,
    loss_fn: LossFunction,
    *,
    settings: TrainingSettings,
    epochs: int,
    seed: int,
    device: torch.device,
    optimizer_state: dict[str, Any] | None,
    owner: str,
    epochs_done: int,
    noise: NoiseSource | None = None,
) -> TrainingRun:
    """Train ``module`` on ``(X, targets)`` for ``epochs`` epochs; leave it in evaluation mode.

    Without DP-SGD each epoch visits the examples once, in an order drawn from a
    ``torch.Generator`` seeded with ``seed``, in batches of ``settings.batch_size`` (the
    last one smaller); randomness inside the network (dropout) draws from torch's global
    generator, which the caller seeds (:func:`seeded_torch`). With ``settings.dp`` the
    epochs are Poisson batches drawn from ``noise`` (:func:`~pipelines.models.dp_training.run_dp_epochs`).

    Parameters
    ----------
    module : torch.nn.Module
        The network, on ``device``; trained in place.
    X : ndarray of float32, shape (n_samples, *input_shape)
    targets : Tensor of shape (n_samples,) or (n_samples, n_classes)
        What ``loss_fn`` compares the logits with (class codes, probabilities or logits).
    loss_fn : callable
        ``loss_fn(logits, targets)``, the mean loss of a batch.
    settings : TrainingSettings
        The optimizer, its hyper-parameters, the batch size, ``dp`` and ``verbose``.
    epochs : int
        Passes over the data.
    seed : int
        Seeds the shuffle (without DP-SGD; DP-SGD's sampling and noise draw from ``noise``).
    device : torch.device
        Where ``module`` lives; the data are moved there.
    optimizer_state : dict or None
        A previous call's :attr:`TrainingRun.optimizer_state` to continue from; None for a
        fresh optimizer.
    owner : str
        The estimator's name, for messages.
    epochs_done : int
        Epochs the network has run before this call (the verbose output numbers epochs on
        from it).
    noise : NoiseSource, optional
        With ``settings.dp``: the source of DP-SGD's Poisson sampling and Gaussian noise (default: a fresh
        secret one).

    Returns
    -------
    TrainingRun
    """
    inputs = _as_tensor(X).to(device)
    optimizer = settings.make_optimizer(module)
    if optimizer_state is not None:
        optimizer.load_state_dict(optimizer_state)
    targets = targets.to(device)
    if settings.dp is not None:
        release, losses = run_dp_epochs(module, optimizer, inputs, targets, loss_fn, config=settings.dp,
                                        batch_size=settings.batch_size, epochs=epochs, owner=owner,
                                        noise=NoiseSource.secret() if noise is None else noise)
        if settings.verbose:
            print(f"{owner} DP-SGD: {release}, last epoch's loss {losses[-1]:.4f}")
        return TrainingRun(losses, optimizer.state_dict(), release)
    shuffle = torch.Generator().manual_seed(seed)
    losses = []
    module.train()
    for _ in range(epochs):
        order = torch.randperm(len(inputs), generator=shuffle).to(device)
        total = torch.zeros((), device=device)
        for start in range(0, len(inputs), settings.batch_size):
            batch = order[start : start + settings.batch_size]
            optimizer.zero_grad()
            batch_loss = loss_fn(module(inputs[batch]), targets[batch])
            batch_loss.backward()
            optimizer.step()
            total += batch_loss.detach() * len(batch)
        losses.append(float(total) / len(inputs))
        if settings.verbose:
            print(f"{owner} epoch {epochs_done + len(losses)}: loss {losses[-1]:.4f}")
    module.eval()
    return TrainingRun(losses, optimizer.state_dict(), None)
