"""White-box gradient canaries for privfed's DP-SGD (Nasr et al. 2023; the design of jax_privacy's auditing).

The black-box DP-SGD audit (canary examples, the final model's loss) reaches a small fraction of the
accounted ε. DP-SGD's accounting covers every noisy gradient it releases, so an auditor who sees those
(white box) can audit the claim itself. Here, in one training run of privfed's own DP-SGD
(:func:`~privfed.pipelines.models.dp_training.run_dp_epochs`: Opacus's per-example clipping and sum, privfed's
secret-noise ``DPOptimizer`` subclass, its Poisson sampling of the real examples):

* canary i is a *Dirac gradient*: C·e_{j_i}, norm C (a clipped per-example gradient at the clipping norm,
  the worst case the analysis covers) on its own coordinate j_i of the network's parameters, distinct for
  every canary and chosen before the run, where a few batches of the real data have the smallest gradients at the
  initial network (so that the data drown the canaries least);
* an included canary joins each step's batch independently with the configured rate q (the auditor's
  Poisson draw, standing for the sampler's); its gradient is added to Opacus's clipped per-example sum
  (``summed_grad``) before the noise, so the privatized gradient carries it exactly as it would carry an
  example's;
* the auditor reads each step's privatized gradient as the optimizer receives it (a step pre-hook on the
  wrapped optimizer), at the canaries' coordinates, in units of C of the sum: z_t = g_t[j_i]·B/C;
* the score is the log-likelihood ratio of "included" for that sequence under the stated mechanism,
  Σ_t log(1 − q + q·exp((z_t − m_i − ½)/σ²)), with m_i the median of z over the steps (it removes the slowly
  varying share of the real examples' gradients at that coordinate; the canary is in only a fraction q of steps).

The claim is the ledger's DP-SGD ε of the run (example level): one canary is one example of norm C. What this
does not audit: the Poisson sampling of the real examples (the canary's inclusion is drawn by the auditor) and
the per-example clipping of real gradients (a canary arrives clipped).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from torch.nn import functional

from privfed.accounting import NoiseSource, account
from privfed.audit.mechanism_canaries import CanaryDesign, choose_guesses
from privfed.pipelines.models.dp_training import plan_release, run_dp_epochs
from privfed.pipelines.models.torch_training import new_network, resolve_device, seeded_torch

__all__ = ["dpsgd_gradient_design", "gradient_canary_scores"]


def gradient_canary_scores(z: np.ndarray, *, sample_rate: float, noise_multiplier: float) -> np.ndarray:
    """The score of each canary from its coordinate's privatized gradients z (steps × canaries, units of C).

    Σ_t log(1 − q + q·exp((z_t − median_t z − ½)/σ²)): the log-likelihood ratio of "in" against "out" of
    the stated mechanism (a Gaussian of standard deviation σ per step, shifted by 1 in a fraction q of steps).
    """
    z = np.asarray(z, dtype=float)
    centred = z - np.median(z, axis=0, keepdims=True)
    q, sigma = float(sample_rate), float(noise_multiplier)
    return np.logaddexp(np.log1p(-q), np.log(q) + (centred - 0.5) / sigma**2).sum(axis=0)


#: Batches of the real data whose gradients pick the canaries' coordinates (before the run).
PROBE_BATCHES = 10


def _quiet_coordinates(network: torch.nn.Module, X: np.ndarray, encoded: np.ndarray, count: int, *, batch_size: int,
                       rng: np.random.Generator) -> np.ndarray:
    """The ``count`` coordinates where the real examples' gradients are smallest (largest |gradient| over a few
    random batches at the initial network; ties at random): there a canary's shift is least drowned by the data.

    Chosen from the data and the initial network, before any coin: the audit's bound stays valid."""
    params = list(network.parameters())
    loudest = np.zeros(sum(p.numel() for p in params))
    for _ in range(PROBE_BATCHES):
        batch = rng.choice(len(X), size=min(batch_size, len(X)), replace=False)
        network.zero_grad()
        functional.cross_entropy(network(torch.from_numpy(X[batch])), torch.from_numpy(encoded[batch]),
                                 reduction="sum").backward()
        loudest = np.maximum(loudest, torch.cat([p.grad.reshape(-1) for p in params]).abs().cpu().numpy())
    network.zero_grad()
    return np.lexsort((rng.random(len(loudest)), loudest))[:count]


def dpsgd_gradient_design(model: Any, parties: list, num_canaries: int, *, delta: float, confidence: float,
                          rng: np.random.Generator) -> CanaryDesign:
    """Dirac gradient canaries in one DP-SGD training run of ``model`` (a ``TorchClassifier`` with ``dp=``) on the
    first party's data (module docstring)."""
    X, y = parties[0]
    X = np.asarray(X, dtype=np.float32)
    classes, encoded = np.unique(np.asarray(y), return_inverse=True)
    config = model.dp
    plan = plan_release(config, n=len(X), batch_size=model.batch_size, epochs=model.epochs)
    q, sigma, steps = plan.sample_rate, plan.noise_multiplier, plan.steps
    scale = config.resolve_expected_batch_size(model.batch_size) / config.max_grad_norm  # gradient → units of C
    device = resolve_device(model.device)
    with seeded_torch(device, int(rng.integers(2**31))):
        network = new_network(model._build_module, X, n_classes=len(classes), device=device)
    sizes = [p.numel() for p in network.parameters()]
    if num_canaries > sum(sizes):
        raise ValueError(f"num_canaries must be at most the network's {sum(sizes)} parameters (one coordinate per "
                         f"gradient canary), got {num_canaries}")
    coordinates = _quiet_coordinates(network, X, encoded, num_canaries, batch_size=model.batch_size, rng=rng)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    sampled = rng.random((steps, num_canaries)) < q  # each canary's Poisson draws, step by step

    def stated(included: np.ndarray, generator: np.random.Generator) -> np.ndarray:
        z = (sampled & included).astype(float) + generator.normal(0.0, sigma, sampled.shape)
        return gradient_canary_scores(z, sample_rate=q, noise_multiplier=sigma)

    def release(included: np.ndarray) -> np.ndarray:
        module = copy.deepcopy(network)
        params = list(module.parameters())
        optimizer = model._training_settings().make_optimizer(module)
        observed: list[np.ndarray] = []

        def record(*_: Any) -> None:  # the privatized, scaled gradient, as the optimizer receives it
            flat = torch.cat([p.grad.detach().reshape(-1) for p in params]).cpu().numpy()
            observed.append(flat[coordinates])

        def loss_with_canaries(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            step = len(observed)  # called once per non-empty batch, before the step that records it
            present = coordinates[sampled[step] & included]
            for index, p in enumerate(params):
                mine = present[(present >= offsets[index]) & (present < offsets[index + 1])] - offsets[index]
                if len(mine):  # Opacus adds the clipped per-example sum to an existing summed_grad
                    canary = torch.zeros(p.numel(), dtype=p.dtype, device=p.device)
                    canary[torch.from_numpy(mine)] = float(config.max_grad_norm)
                    p.summed_grad = canary.view_as(p)
            return functional.cross_entropy(outputs, targets)

        handle = optimizer.register_step_pre_hook(record)
        try:
            run_dp_epochs(module, optimizer, torch.from_numpy(X).to(device),
                          torch.from_numpy(encoded.astype(np.int64)).to(device), loss_with_canaries, config=config,
                          batch_size=model.batch_size, epochs=model.epochs,
                          noise=NoiseSource.for_task(model.noise_seed), owner="the gradient-canary audit")
        finally:
            handle.remove()
        return gradient_canary_scores(np.stack(observed) * scale, sample_rate=q, noise_multiplier=sigma)

    claim = float(account(plan, delta=delta).epsilon)
    # Guesses are all *in*: a canary the Poisson draws never picked looks out whatever the noise, so low scores
    # say little (at 2 expected draws, 13 % of the included canaries are never drawn).
    num_guesses, _ = choose_guesses(stated, num_canaries, delta=delta, confidence=confidence, rng=rng, claim=claim,
                                    guess_in_only=True)
    return CanaryDesign(release, claim, {"steps": steps, "sample_rate": q, "noise_multiplier": sigma,
                                         "ledger": {"epsilon": claim}}, stated, num_guesses, guess_in_only=True)
