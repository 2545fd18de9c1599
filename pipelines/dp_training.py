"""DP-SGD training of a torch network through Opacus (used by the torch adapters when ``dp=`` is set).

One training call (:func:`run_dp_epochs`) refuses layers DP-SGD cannot train
(:func:`check_dp_module`), plans its release before the first step
(:func:`plan_release`: σ, q and the steps, as a :class:`~privfed.accounting.DPSGD`)
and runs exactly that release with Opacus's ``PrivacyEngine`` (:func:`train_dp_sgd`).

Opacus is imported here, inside the functions, so that neither ``import privfed``
nor a non-private torch model loads it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch import nn

from ..accounting.dpsgd import DPSGD, dpsgd_noise_multiplier
from .dp_config import DPConfig

__all__ = ["check_dp_module", "plan_release", "run_dp_epochs", "train_dp_sgd"]


def check_dp_module(module: nn.Module, owner: str) -> None:
    """Refuse a network with layers DP-SGD cannot train (Opacus's ``ModuleValidator``), naming them.

    BatchNorm is the usual one: it mixes the examples of a batch, so per-example
    gradients (and their clipping) are not defined.
    """
    from opacus.validators import ModuleValidator

    module.train()  # Opacus validates a network in training mode
    errors = ModuleValidator.validate(module, strict=False)
    if errors:
        offending = sorted({f"{name or '<root>'} ({type(layer).__name__})" for name, layer in module.named_modules()
                            if ModuleValidator.validate(layer, strict=False) and not list(layer.children())})
        raise ValueError(
            f"{owner} with dp= cannot be trained with DP-SGD: layer(s) {', '.join(offending) or '?'} are not supported "
            f"by Opacus ({'; '.join(str(error).split('.')[0] for error in errors)}). Replace BatchNorm by GroupNorm or "
            "LayerNorm (opacus.validators.ModuleValidator.fix does it)"
        )


#: Said when q is derived from the private training-set size (``DPConfig.sample_rate`` unset).
PRIVATE_RATE_WARNING = (
    "DPConfig.sample_rate is not set: the sampling rate q = batch_size / n, and with it the steps and a calibrated "
    "σ, are derived from the private training-set size n, which differs between add/remove neighbours; the "
    "DP-SGD guarantee then treats n as public. Set DPConfig(sample_rate=...) to make every DP-SGD parameter public "
    "(docs/models.md)"
)


def plan_release(config: DPConfig, *, n: int, batch_size: int, epochs: int) -> DPSGD:
    """The DP-SGD release of one training call of ``epochs`` epochs on ``n`` examples (checked before training).

    Warns (``UserWarning``) when q is derived from n rather than configured.
    """
    sample_rate = config.resolve_sample_rate(n, batch_size)
    if not config.public_sample_rate:
        warnings.warn(PRIVATE_RATE_WARNING, UserWarning, stacklevel=3)
    steps = epochs * config.steps_per_epoch(sample_rate)
    sigma = config.noise_multiplier
    if sigma is None:
        sigma = dpsgd_noise_multiplier(
            target_epsilon=config.target_epsilon, delta=config.delta, sample_rate=sample_rate, steps=steps
        )
    return DPSGD(sigma, sample_rate, steps)


def train_dp_sgd(
    module: nn.Module,
    optimizer: torch.optim.Optimizer,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    *,
    release: DPSGD,
    max_grad_norm: float,
    epochs: int,
    seed: int,
    expected_batch_size: float | None = None,
) -> list[float]:
    """Run ``release`` (its σ, q and steps) with Opacus's ``PrivacyEngine``; return the mean loss of each epoch.

    The batches are Opacus's ``DPDataLoader`` (Poisson sampling at rate q, ⌊1/q⌋
    batches per epoch, empty batches included); the optimizer is Opacus's
    ``DPOptimizer`` (per-example clipping to ``max_grad_norm``, Gaussian noise of
    standard deviation σ·C on the sum, divided by the expected batch size B =
    ``expected_batch_size``, public; default q·n, which depends on the private n).
    The network keeps its own parameters (Opacus's hooks are removed after).
    """
    from opacus import PrivacyEngine
    from opacus.data_loader import DPDataLoader

    n = len(inputs)
    dataset = torch.utils.data.TensorDataset(inputs, targets)
    loader = DPDataLoader(dataset, sample_rate=release.sample_rate,
                          generator=torch.Generator(device="cpu").manual_seed(seed))
    steps_per_epoch = len(loader)
    if steps_per_epoch * epochs != release.steps:
        raise RuntimeError(f"Opacus's loader runs {steps_per_epoch} steps per epoch; the release counts "
                           f"{release.steps} over {epochs} epochs")
    with warnings.catch_warnings():  # secure_mode is off: documented in docs/models.md
        warnings.filterwarnings("ignore", message="Secure RNG turned off")
        engine = PrivacyEngine(accountant="rdp")
    private_module, private_optimizer, loader = engine.make_private(
        module=module, optimizer=optimizer, data_loader=loader, noise_multiplier=release.noise_multiplier,
        max_grad_norm=max_grad_norm, poisson_sampling=False,
        noise_generator=torch.Generator(device=inputs.device).manual_seed(seed + 1),
    )
    private_optimizer.expected_batch_size = (release.sample_rate * n if expected_batch_size is None
                                             else float(expected_batch_size))
    losses = []
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            private_module.train()
            for _ in range(epochs):
                total, count = 0.0, 0
                for batch_inputs, batch_targets in loader:
                    private_optimizer.zero_grad()
                    outputs = private_module(batch_inputs)
                    if len(batch_inputs):
                        batch_loss = loss_fn(outputs, batch_targets)
                        total, count = total + float(batch_loss.detach()) * len(batch_inputs), count + len(batch_inputs)
                    else:  # an empty Poisson batch: the step still adds noise (the release counts it)
                        batch_loss = outputs.sum() * 0.0
                    batch_loss.backward()
                    private_optimizer.step()
                losses.append(total / count if count else float("nan"))
    finally:
        private_module._close()
    module.eval()
    return losses



def run_dp_epochs(
    module: nn.Module,
    optimizer: torch.optim.Optimizer,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    *,
    config: DPConfig,
    batch_size: int,
    epochs: int,
    seed: int,
    owner: str,
) -> tuple[DPSGD, list[float]]:
    """One DP-SGD training call of ``epochs`` epochs; return its release and the mean loss of each epoch.

    The network is checked (:func:`check_dp_module`, ``owner`` names the estimator) and the
    release planned (:func:`plan_release`) before the first step; :func:`train_dp_sgd` then
    runs it, normalising by ``config``'s expected batch size (``batch_size`` when unset).
    """
    check_dp_module(module, owner)
    release = plan_release(config, n=len(inputs), batch_size=batch_size, epochs=epochs)
    losses = train_dp_sgd(module, optimizer, inputs, targets, loss_fn, release=release,
                          max_grad_norm=config.max_grad_norm, epochs=epochs, seed=seed,
                          expected_batch_size=config.resolve_expected_batch_size(batch_size))
    return release, losses
