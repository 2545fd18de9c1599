"""Train copies of one torch network on several clients' data in one batched computation.

PrivateKT's selected clients each continue training a copy of the global network
on their own data (``fit_soft(..., warm_start=True)``), one after another. The
copies share an architecture, so their parameters can be stacked along a leading
"copy" axis and every optimisation step of all copies computed at once:
``torch.func.vmap`` over ``torch.func.grad`` of ``torch.func.functional_call``
(one forward and backward pass over a batch of copies × examples), then the
optimizer's own functional update (``torch.optim.adam.adam`` /
``torch.optim.sgd.sgd``) on every active copy's parameters.

**Same result as one after another.** Each copy follows exactly the schedule
:meth:`TorchClassifier.fit_soft` would give it: its seed from its
``random_state``, its own shuffle (a ``torch.Generator`` with that seed), its own
mini-batches (the last one of an epoch smaller), a fresh optimizer with its own
state and step count. Copies with fewer examples finish earlier; a copy is
updated only at the steps where it has a batch (its state is left untouched
otherwise), and a short batch is padded with masked rows that add nothing to its
loss. Without randomness inside the network (dropout) the stacked result equals
sequential training up to floating-point rounding (``tests/test_batched_training.py``);
with dropout, each copy draws its own masks (``vmap(randomness="different")``),
so the result is equal in distribution but not draw for draw.

Networks with buffers (batch normalisation's running statistics) are refused, and so is an
estimator with ``dp=``: the copies train without clipping or noise, so DP-SGD copies train one at
a time (``fit_soft``).

**When it pays** (:func:`batching_pays`). Batching removes per-call overhead; it does not
reduce the arithmetic. On a CPU a convolutional network's step is dominated by the
convolution and pooling kernels, and the stacked copies run as one grouped convolution
that the CPU kernels do no faster than the copies one by one. ``bench/privatekt.py
--round-speed`` (batched and one after another in the same run, 40 clients, 2-core CPU;
docs/results.md, *PrivateKT round speed*) measured the clients' step ×1.17 for FedKT's small
CNN, ×0.74 (slower) for the PrivateKT authors' CNN and ×1.84 for an MLP. On a CUDA device
batching is expected to pay (one batched step of small copies costs about one copy's);
that is not measured here.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.nn import functional
from torch.optim.adam import adam
from torch.optim.sgd import sgd

from ...accounting._checks import check_choice
from .torch_classifier import TorchClassifier
from .torch_training import INFERENCE_BATCH, new_network, resolve_device, seeded_torch, torch_seed

__all__ = ["StackedNetworks", "batching_pays", "train_copies"]

_CONVOLUTIONS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)


def batching_pays(estimator: TorchClassifier, X: np.ndarray, classes: np.ndarray) -> bool:
    """Whether :func:`train_copies` is expected to be faster than training the copies one after another.

    True on a CUDA device, and on a CPU for a network without convolutions; False for a
    convolutional network on a CPU (see the module's docstring for the measurements). The
    network is built once for examples shaped like ``X`` (its initialisation under a fixed
    seed, torch's own random state left as it was) only to look at its layers.
    """
    device = resolve_device(estimator.device)
    if device.type == "cuda":
        return True
    with seeded_torch(device, 0):
        module = new_network(estimator._build_module, np.asarray(X[:1], dtype=np.float32), n_classes=len(classes),
                             device=device)
    return not any(isinstance(layer, _CONVOLUTIONS) for layer in module.modules())


def _per_example_loss(loss: str, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``fit_soft``'s loss per example (summed over classes; the mean over a batch is taken by the caller)."""
    if loss == "kl":
        return functional.kl_div(functional.log_softmax(logits, dim=-1), targets, reduction="none").sum(-1)
    difference = logits - targets
    per_value = difference * difference if loss == "l2" else difference.abs()
    return per_value.mean(-1)  # mse_loss / l1_loss average over the classes too


@dataclass(frozen=True, eq=False)
class StackedNetworks:
    """Trained copies of one network: parameters stacked along a leading axis of ``n_copies``.

    Attributes
    ----------
    module : torch.nn.Module
        The architecture (its own parameters are not used).
    parameters : dict of str to Tensor
        Each parameter with a leading axis of ``n_copies``.
    classes : ndarray
        The label of each output column.
    device : torch.device
    """

    module: nn.Module
    parameters: dict[str, torch.Tensor]
    classes: np.ndarray
    device: torch.device

    @property
    def n_copies(self) -> int:
        """How many copies are stacked."""
        return next(iter(self.parameters.values())).shape[0]

    def logits(self, X: np.ndarray) -> np.ndarray:
        """Every copy's logits on the same inputs, shape (n_copies, n, n_classes)."""
        self.module.eval()
        inputs = torch.from_numpy(np.require(np.asarray(X, dtype=np.float32), requirements=["C", "W"]))

        def one(parameters: dict[str, torch.Tensor], batch: torch.Tensor) -> torch.Tensor:
            return functional_call(self.module, parameters, (batch,))

        chunks = []
        with torch.inference_mode():
            for start in range(0, len(inputs), INFERENCE_BATCH):
                batch = inputs[start : start + INFERENCE_BATCH].to(self.device)
                chunks.append(vmap(one, in_dims=(0, None))(self.parameters, batch).cpu().numpy())
        return np.concatenate(chunks, axis=1).astype(np.float64)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Every copy's predicted labels (largest logit, the first on ties), shape (n_copies, n)."""
        return self.classes[np.argmax(self.logits(X), axis=2)]


def _start(estimator: TorchClassifier, X: np.ndarray, classes: np.ndarray, seeds: Sequence[int],
           ) -> tuple[nn.Module, list[dict[str, torch.Tensor]], torch.device]:
    """The starting parameters of every copy: the fitted network's, or a fresh one per copy's seed."""
    if hasattr(estimator, "module_"):
        if not np.array_equal(np.asarray(estimator.classes_), classes):
            raise ValueError(
                f"the fitted network has classes {estimator.classes_.tolist()!r}, got {classes.tolist()!r}")
        module = copy.deepcopy(estimator.module_)
        start = {name: value.detach() for name, value in module.named_parameters()}
        return module, [start] * len(seeds), estimator.device_
    device = resolve_device(estimator.device)
    starts: list[dict[str, torch.Tensor]] = []  # seeds: one per copy, at least one (train_copies)
    for seed in seeds:
        with seeded_torch(device, seed):
            module = new_network(estimator._build_module, X, n_classes=len(classes), device=device)
        starts.append({name: value.detach().clone() for name, value in module.named_parameters()})
    return module, starts, device


def train_copies(
    estimator: TorchClassifier,
    datasets: Sequence[tuple[np.ndarray, np.ndarray]],
    *,
    random_states: Sequence[int],
    classes: np.ndarray,
    loss: str = "kl",
) -> StackedNetworks:
    """Train one copy of ``estimator`` per data set, all in one batched computation.

    Copy ``i`` ends where ``copy.deepcopy(estimator).set_params(random_state=random_states[i])
    .fit_soft(X_i, T_i, loss=loss, classes=classes, warm_start=True)`` would: it continues
    the fitted network (or builds a fresh one from its seed when ``estimator`` is unfitted)
    for ``estimator.epochs`` epochs of ``estimator.batch_size`` with a fresh optimizer.

    Parameters
    ----------
    estimator : TorchClassifier
        The network to copy, with its training parameters (epochs, batch size, optimizer).
    datasets : sequence of (X, targets)
        Each copy's inputs and soft targets, shape (n_i, n_classes) (class probabilities
        for ``loss="kl"``, logits for ``"l2"``/``"l1"``).
    random_states : sequence of int
        One per copy, as ``fit_soft`` would receive it.
    classes : ndarray of shape (n_classes,)
        Sorted labels of the target columns.
    loss : {"kl", "l2", "l1"}, default="kl"
        As in ``fit_soft`` (temperature 1).

    Returns
    -------
    StackedNetworks
    """
    check_choice("loss", loss, ("kl", "l2", "l1"))
    if not isinstance(estimator, TorchClassifier):
        raise TypeError(f"estimator must be a TorchClassifier, got {type(estimator).__name__}")
    if estimator.dp is not None:
        raise ValueError(f"estimator has dp={estimator.dp!r}: train_copies trains without DP-SGD (no clipping, no "
                         "noise); train DP-SGD copies one at a time with fit_soft")
    if len(datasets) == 0 or len(random_states) != len(datasets):
        raise ValueError(
            f"give one random_state per data set and at least one data set; got {len(datasets)} data sets and "
            f"{len(random_states)} random_states"
        )
    estimator._check_training_parameters()
    classes = np.asarray(classes)
    inputs = [np.require(np.asarray(X, dtype=np.float32), requirements=["C"]) for X, _ in datasets]
    targets = [np.asarray(T, dtype=np.float32) for _, T in datasets]
    for index, (X, T) in enumerate(zip(inputs, targets)):
        if len(X) == 0 or T.shape != (len(X), len(classes)):
            raise ValueError(f"datasets[{index}] must hold n >= 1 inputs and targets of shape (n, {len(classes)}); "
                             f"got {len(X)} inputs and targets of shape {T.shape}")
    seeds = [torch_seed(state) for state in random_states]
    module, starts, device = _start(estimator, inputs[0], classes, seeds)
    if any(True for _ in module.buffers()):
        raise ValueError("train_copies supports networks without buffers (no batch normalisation)")
    parameters = {name: torch.stack([start[name] for start in starts]).to(device) for name in starts[0]}
    names = list(parameters)
    _run_stacked_epochs(estimator, module, parameters, names, inputs, targets, seeds, loss, device)
    module.eval()
    return StackedNetworks(module, parameters, classes, device)


def _schedules(sizes: Sequence[int], seeds: Sequence[int], epochs: int, batch_size: int) -> list[list[torch.Tensor]]:
    """Each copy's mini-batches in order, as :func:`~pipelines.models.torch_training.train_epochs` draws them."""
    schedules = []
    for size, seed in zip(sizes, seeds):
        shuffle = torch.Generator().manual_seed(seed)
        batches = []
        for _ in range(epochs):
            order = torch.randperm(size, generator=shuffle)
            batches += [order[start : start + batch_size] for start in range(0, size, batch_size)]
        schedules.append(batches)
    return schedules


def _run_stacked_epochs(estimator: TorchClassifier, module: nn.Module, parameters: dict[str, torch.Tensor],
                        names: list[str], inputs: list[np.ndarray], targets: list[np.ndarray], seeds: Sequence[int],
                        loss: str, device: torch.device) -> None:
    batch_size = int(estimator.batch_size)
    schedules = _schedules([len(X) for X in inputs], seeds, int(estimator.epochs), batch_size)
    n_copies = len(inputs)
    X_all = [torch.from_numpy(X) for X in inputs]
    T_all = [torch.from_numpy(T) for T in targets]
    # Optimizer state per copy and parameter (views into stacked tensors, updated in place).
    views = [[parameters[name][copy_] for name in names] for copy_ in range(n_copies)]
    if estimator.optimizer == "adam":
        first = {name: torch.zeros_like(value) for name, value in parameters.items()}
        second = {name: torch.zeros_like(value) for name, value in parameters.items()}
        steps = [[torch.tensor(0.0) for _ in names] for _ in range(n_copies)]
    else:
        buffers: list[list[torch.Tensor | None]] = [[None for _ in names] for _ in range(n_copies)]

    def copy_loss(params: dict[str, torch.Tensor], x: torch.Tensor, t: torch.Tensor,
                  mask: torch.Tensor) -> torch.Tensor:
        per_example = _per_example_loss(loss, functional_call(module, params, (x,)), t)
        return (per_example * mask).sum() / mask.sum()

    gradients_of = vmap(grad(copy_loss), randomness="different")
    module.train()
    for step in range(max(len(schedule) for schedule in schedules)):
        active = [copy_ for copy_ in range(n_copies) if step < len(schedules[copy_])]
        x = torch.zeros((len(active), batch_size, *inputs[0].shape[1:]), dtype=torch.float32)
        t = torch.zeros((len(active), batch_size, targets[0].shape[1]), dtype=torch.float32)
        mask = torch.zeros((len(active), batch_size), dtype=torch.float32)
        for row, copy_ in enumerate(active):
            batch = schedules[copy_][step]
            x[row, : len(batch)] = X_all[copy_][batch]
            t[row, : len(batch)] = T_all[copy_][batch]
            mask[row, : len(batch)] = 1.0
        selected = parameters if len(active) == n_copies else {
            name: value[active] for name, value in parameters.items()}
        gradients = gradients_of(selected, x.to(device), t.to(device), mask.to(device))
        with torch.no_grad():
            params = [views[copy_][j] for copy_ in active for j in range(len(names))]
            grads = [gradients[name][row] for row in range(len(active)) for name in names]
            if estimator.optimizer == "adam":
                adam(params, grads,
                     [first[name][copy_] for copy_ in active for name in names],
                     [second[name][copy_] for copy_ in active for name in names],
                     [], [steps[copy_][j] for copy_ in active for j in range(len(names))],
                     foreach=True, amsgrad=False, beta1=0.9, beta2=0.999, lr=float(estimator.lr),
                     weight_decay=float(estimator.weight_decay), eps=1e-8, maximize=False)
            else:
                momentum_buffers = [buffers[copy_][j] for copy_ in active for j in range(len(names))]
                sgd(params, grads, momentum_buffers, foreach=True, weight_decay=float(estimator.weight_decay),
                    momentum=float(estimator.momentum), lr=float(estimator.lr), dampening=0.0, nesterov=False,
                    maximize=False)
                for position, (copy_, j) in enumerate((c, j) for c in active for j in range(len(names))):
                    buffers[copy_][j] = momentum_buffers[position]
