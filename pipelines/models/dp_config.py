"""DPConfig: how a torch local model is trained with DP-SGD (Opacus)."""

from __future__ import annotations

import math
import numbers
from dataclasses import KW_ONLY, asdict, dataclass
from typing import Any

from ...accounting._checks import check_delta, check_int_at_least, check_positive_finite, check_probability

__all__ = ["DPConfig"]


@dataclass(frozen=True)
class DPConfig:
    """DP-SGD settings for :class:`~privfed.pipelines.models.torch_classifier.TorchClassifier` (``dp=``).

    Each training call (``fit``, ``fit_soft``, ``partial_fit``, ``partial_fit_soft``)
    runs DP-SGD through Opacus's ``PrivacyEngine`` (Abadi et al. 2016): every step
    includes each training example independently with probability q
    (``sample_rate``; Poisson sampling), clips each per-example gradient to ℓ2 norm
    C = ``max_grad_norm``, and adds N(0, σ²C²) to their sum, σ = ``noise_multiplier``;
    the noisy sum is divided by the expected batch size B. An epoch is ⌊1/q⌋ steps
    (Opacus's Poisson sampler). The call is one release, accounted as
    :class:`~privfed.accounting.DPSGD` ``(σ, q, steps)`` at example level under
    add/remove-one neighbouring.

    **Public parameters.** That accounting holds for neighbouring data sets run with
    the *same* q, steps, σ and B, so these must not depend on the private training
    set. Give ``sample_rate`` (q): then q, the steps (epochs · ⌊1/q⌋), σ (from
    ``target_epsilon``, q and the steps) and B (``expected_batch_size``, default the
    model's ``batch_size``) are all public. Without ``sample_rate``, q = batch_size / n
    is derived from the private size n (which changes under add/remove), as Opacus
    does: the guarantee then treats n as public, and training warns.

    Parameters
    ----------
    noise_multiplier : float, optional
        σ > 0. Exactly one of ``noise_multiplier`` and ``target_epsilon``.
    target_epsilon : float, optional
        ε per training call: σ is calibrated so that the ε ``privfed.account()`` reports
        for that call's DP-SGD run is in [0.97, 1] × target at ``delta``
        (:func:`~privfed.accounting.dpsgd.dpsgd_noise_multiplier`).
    max_grad_norm : float
        C > 0, the per-example clipping norm.
    delta : float
        δ in (0, 1) of ``target_epsilon``; a fit on n examples needs δ < 1/n.
    sample_rate : float, optional
        q in (0, 1], public; default ``min(1, batch_size / n)`` for n training examples
        (derived from the private n: training warns).
    expected_batch_size : int, optional
        B ≥ 1, the public normaliser of the noisy gradient sum (Opacus's
        ``expected_batch_size`` under Poisson sampling, about q·n); default the model's
        ``batch_size``.

    Examples
    --------
    >>> config = DPConfig(noise_multiplier=1.1, max_grad_norm=1.0, delta=1e-5, sample_rate=0.01)
    >>> config.public_sample_rate, config.resolve_expected_batch_size(64)
    (True, 64)
    """

    _: KW_ONLY
    noise_multiplier: float | None = None
    target_epsilon: float | None = None
    max_grad_norm: float
    delta: float
    sample_rate: float | None = None
    expected_batch_size: int | None = None

    def __post_init__(self) -> None:
        if (self.noise_multiplier is None) == (self.target_epsilon is None):
            raise ValueError(
                "DPConfig needs exactly one of noise_multiplier and target_epsilon; got "
                f"noise_multiplier={self.noise_multiplier!r}, target_epsilon={self.target_epsilon!r}"
            )
        for name in ("noise_multiplier", "target_epsilon"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, check_positive_finite(name, getattr(self, name)))
        object.__setattr__(self, "max_grad_norm", check_positive_finite("max_grad_norm", self.max_grad_norm))
        object.__setattr__(self, "delta", check_delta(self.delta))
        if self.sample_rate is not None:
            object.__setattr__(self, "sample_rate", check_probability("sample_rate", self.sample_rate, open_high=False))
        if self.expected_batch_size is not None:
            object.__setattr__(self, "expected_batch_size",
                               check_int_at_least("expected_batch_size", self.expected_batch_size, 1))

    @property
    def public_sample_rate(self) -> bool:
        """Whether q is configured (public), rather than derived from the private training-set size."""
        return self.sample_rate is not None

    def resolve_expected_batch_size(self, batch_size: int) -> int:
        """B, the public normaliser of the noisy gradient sum: ``expected_batch_size``, else ``batch_size``."""
        return self.expected_batch_size if self.expected_batch_size is not None else batch_size

    def resolve_sample_rate(self, n: int, batch_size: int) -> float:
        """q for a training call on ``n`` examples; refuses δ ≥ 1/n."""
        if not (isinstance(n, numbers.Integral) and n >= 1):
            raise ValueError(f"DP-SGD needs at least one training example, got n = {n!r}")
        if self.delta >= 1.0 / n:
            raise ValueError(
                f"DPConfig.delta={self.delta:g} must be < 1/n = {1.0 / n:.3g} for a training set of n = {n} examples "
                "(a δ that large allows releasing an example outright)"
            )
        return self.sample_rate if self.sample_rate is not None else min(1.0, batch_size / n)

    @staticmethod
    def steps_per_epoch(sample_rate: float) -> int:
        """⌊1/q⌋: the steps of one epoch under Opacus's Poisson sampler."""
        return max(1, math.floor(1.0 / sample_rate))

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON values (for a model's safe state)."""
        return asdict(self)
