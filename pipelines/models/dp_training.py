"""DP-SGD training of a torch network through Opacus (used by the torch adapters when ``dp=`` is set).

One training call (:func:`run_dp_epochs`) refuses layers DP-SGD cannot train
(:func:`check_dp_module`), plans its release before the first step
(:func:`plan_release`: σ, q and the steps, as a :class:`~privfed.accounting.DPSGD`)
and runs exactly that release with Opacus's per-example gradients and ``DPOptimizer``
(:func:`train_dp_sgd`), its Poisson sampling and Gaussian noise drawn from a
:class:`~privfed.accounting.NoiseSource` (:func:`dpsgd_noise_source`: secret unless ``noise_seed=`` asks
otherwise). A torch estimator keeps the releases of its training calls (:func:`record_dp_release`,
:func:`forget_dp_releases`).

Opacus is imported here, inside the functions, so that neither ``import privfed``
nor a non-private torch model loads it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from ...accounting.dpsgd import DPSGD, compose_dpsgd, dpsgd_noise_multiplier
from ...accounting.noise_source import NoiseSource
from ..protocol.run_parameters import record_draw
from .dp_config import DPConfig

__all__ = [
    "DP_RELEASE_ATTRIBUTES",
    "check_dp_module",
    "dpsgd_noise_source",
    "forget_dp_releases",
    "plan_release",
    "poisson_batches",
    "record_dp_release",
    "run_dp_epochs",
    "train_dp_sgd",
]

#: A torch estimator's fitted attributes that describe its network's DP-SGD training.
DP_RELEASE_ATTRIBUTES = ("dp_releases_", "dp_mechanism_", "dp_noise_")


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
        assert config.target_epsilon is not None  # DPConfig sets one of noise_multiplier and target_epsilon
        sigma = dpsgd_noise_multiplier(
            target_epsilon=config.target_epsilon, delta=config.delta, sample_rate=sample_rate, steps=steps
        )
    return DPSGD(sigma, sample_rate, steps)


def poisson_batches(n: int, sample_rate: float, steps: int, generator: np.random.Generator) -> Iterator[np.ndarray]:
    """``steps`` Poisson batches of ``range(n)``: each example kept independently with probability ``sample_rate``.

    The draws come from ``generator`` (a :class:`~privfed.accounting.NoiseSource`'s: secret by default), one
    uniform per example and step, as Opacus's ``UniformWithReplacementSampler`` draws from its torch generator.
    A batch may be empty; the step still runs (and adds noise).
    """
    for _ in range(steps):
        yield np.flatnonzero(generator.random(n) < sample_rate)


def _secret_noise_optimizer(optimizer: torch.optim.Optimizer, *, release: DPSGD, max_grad_norm: float,
                            expected_batch_size: float, generator: np.random.Generator) -> torch.optim.Optimizer:
    """Opacus's ``DPOptimizer`` over ``optimizer`` whose Gaussian noise is drawn from ``generator``.

    Opacus draws the noise with ``torch.normal`` from a torch generator (a Mersenne Twister or Philox
    stream, predictable from its seed); its ``secure_mode`` swaps in ``torchcsprng``, which has no build for
    torch 2.x. Only the draw changes here: the noise of every parameter, N(0, σ²C²) on the clipped sum,
    comes from one ``standard_normal`` call on ``generator`` (float32, the parameters' precision), moved to
    the parameters' device; clipping, the sum and the division by B stay Opacus's.
    """
    from opacus.optimizers import DPOptimizer
    from opacus.optimizers.optimizer import _check_processed_flag, _mark_as_processed

    class SecretNoiseDPOptimizer(DPOptimizer):
        def add_noise(self) -> None:
            std = self.noise_multiplier * self.max_grad_norm
            sums = [p.summed_grad for p in self.params]
            for summed in sums:
                _check_processed_flag(summed)
            draws = torch.from_numpy(generator.standard_normal(sum(s.numel() for s in sums), dtype=np.float32))
            draws = draws.to(sums[0].device) * std
            for p, summed, noise in zip(self.params, sums, torch.split(draws, [s.numel() for s in sums])):
                p.grad = (summed + noise.view_as(summed).to(device=summed.device, dtype=summed.dtype)).view_as(p)
                _mark_as_processed(summed)

    return SecretNoiseDPOptimizer(optimizer, noise_multiplier=release.noise_multiplier, max_grad_norm=max_grad_norm,
                                  expected_batch_size=float(expected_batch_size))


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
    noise: NoiseSource,
    expected_batch_size: float | None = None,
) -> list[float]:
    """Run ``release`` (its σ, q and steps) through Opacus; return the mean loss of each epoch.

    The batches are Poisson samples at rate q (:func:`poisson_batches`, ⌊1/q⌋ per epoch as
    Opacus's ``DPDataLoader``, empty batches included); the network is Opacus's ``GradSampleModule``
    (per-example gradients) and the optimizer Opacus's ``DPOptimizer`` (per-example clipping to
    ``max_grad_norm``, Gaussian noise of standard deviation σ·C on the sum, divided by the expected
    batch size B = ``expected_batch_size``, public; default q·n, which depends on the private n).
    Both the sampling and the noise are drawn from ``noise.generator`` (:class:`~privfed.accounting.NoiseSource`:
    secret unless the caller seeded it), never from torch's generators, which follow ``random_state``.
    The network keeps its own parameters (Opacus's hooks are removed after).
    """
    from opacus import GradSampleModule

    n = len(inputs)
    steps_per_epoch = DPConfig.steps_per_epoch(release.sample_rate)
    if steps_per_epoch * epochs != release.steps:
        raise RuntimeError(f"Poisson sampling runs {steps_per_epoch} steps per epoch; the release counts "
                           f"{release.steps} over {epochs} epochs")
    private_module = GradSampleModule(module)
    private_optimizer = _secret_noise_optimizer(
        optimizer, release=release, max_grad_norm=max_grad_norm, generator=noise.generator,
        expected_batch_size=release.sample_rate * n if expected_batch_size is None else expected_batch_size)
    sample_rate = release.sample_rate
    record_draw("DP-SGD training", "dp-sgd", noise_multiplier=float(getattr(private_optimizer, "noise_multiplier")),
                sample_rate=sample_rate)
    losses = []
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            private_module.train()
            for _ in range(epochs):
                total, count = 0.0, 0
                for batch in poisson_batches(n, sample_rate, steps_per_epoch, noise.generator):
                    index = torch.from_numpy(batch).to(inputs.device)
                    batch_inputs, batch_targets = inputs[index], targets[index]
                    private_optimizer.zero_grad()
                    outputs = private_module(batch_inputs)
                    if len(batch):
                        batch_loss = loss_fn(outputs, batch_targets)
                        total, count = total + float(batch_loss.detach()) * len(batch), count + len(batch)
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
    noise: NoiseSource,
    owner: str,
) -> tuple[DPSGD, list[float]]:
    """One DP-SGD training call of ``epochs`` epochs; return its release and the mean loss of each epoch.

    The network is checked (:func:`check_dp_module`, ``owner`` names the estimator) and the
    release planned (:func:`plan_release`) before the first step; :func:`train_dp_sgd` then
    runs it, normalising by ``config``'s expected batch size (``batch_size`` when unset), its
    sampling and noise drawn from ``noise``.
    """
    check_dp_module(module, owner)
    release = plan_release(config, n=len(inputs), batch_size=batch_size, epochs=epochs)
    losses = train_dp_sgd(module, optimizer, inputs, targets, loss_fn, release=release,
                          max_grad_norm=config.max_grad_norm, epochs=epochs, noise=noise,
                          expected_batch_size=config.resolve_expected_batch_size(batch_size))
    return release, losses


def dpsgd_noise_source(noise_seed: int | None, *, calls_done: int) -> NoiseSource:
    """The source of one DP-SGD training call's sampling and noise: secret (``noise_seed=None``), or derived from
    ``noise_seed`` and the number of DP-SGD calls the network has run so far (so that the calls of one network
    never repeat a draw)."""
    if noise_seed is None:
        return NoiseSource.secret()
    return NoiseSource.seeded(cast(int, NoiseSource.seeded(noise_seed).child_seeds(calls_done + 1)[-1]))


def record_dp_release(estimator: Any, release: DPSGD, noise: NoiseSource) -> None:
    """Append a training call's ``release`` and where its noise came from to ``estimator``'s DP-SGD record.

    ``dp_releases_`` gains ``release``, ``dp_noise_`` the ``noise`` source's provenance, and ``dp_mechanism_``
    becomes the composition of all the releases.
    """
    estimator.dp_releases_ = (*getattr(estimator, "dp_releases_", ()), release)
    estimator.dp_mechanism_ = compose_dpsgd(estimator.dp_releases_)
    estimator.dp_noise_ = (*getattr(estimator, "dp_noise_", ()), noise.provenance())


def forget_dp_releases(estimator: Any) -> None:
    """Drop ``estimator``'s DP-SGD record (:data:`DP_RELEASE_ATTRIBUTES`): a new network, or one trained without
    DP-SGD."""
    for name in DP_RELEASE_ATTRIBUTES:
        if hasattr(estimator, name):
            delattr(estimator, name)
