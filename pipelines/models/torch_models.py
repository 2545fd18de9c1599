"""FedKT's networks as ready-made torch classifiers, and Keras's initialisation for any network.

- :class:`TorchMLP` is the paper's MLP (784-100-100-10 on MNIST, ReLU).
- :class:`TorchCNN` is the paper's small CNN (two 5×5 convolutions with 6 and
  16 channels, each followed by ReLU and 2×2 max pooling, then 120-84-C fully
  connected layers with ReLU).
- :class:`KerasInitialised` wraps a ``module_fn`` so that its network starts as
  Keras's layers do.

Both networks are :class:`~pipelines.models.torch_classifier.TorchClassifier`
subclasses that build their network from their own hyper-parameters, so their
saved form (``get_safe_state``) rebuilds without user code; they register
themselves for ``TorchClassifier.from_safe_state``. ``privfed.pipelines`` loads
``TorchClassifier`` from here, so that the classes its ``from_safe_state`` may
rebuild are always defined.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import torch
from torch import nn

from ...accounting._checks import check_int_at_least
from .dp_config import DPConfig
from .torch_classifier import InputSize, TorchClassifier
from .torch_serialisation import register_safe_state_class

__all__ = ["KerasInitialised", "TorchCNN", "TorchMLP"]


def _check_int_tuple(name: str, value: object, *, length: int | None = None) -> tuple[int, ...]:
    """Return ``value`` as a tuple of positive ints (of the given length, if any)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a sequence of integers >= 1, got {value!r}")
    sizes = tuple(check_int_at_least(f"{name}[{i}]", size, 1) for i, size in enumerate(value))
    if length is not None and len(sizes) != length:
        raise ValueError(f"{name} must hold exactly {length} integers >= 1, got {value!r}")
    return sizes


class KerasInitialised:
    """``module_fn`` with Keras's default initialisation, for networks ported from Keras code.

    ``TorchClassifier(KerasInitialised(module_fn))`` builds ``module_fn``'s network, then gives every
    ``nn.Linear`` and ``nn.Conv1d/2d/3d`` layer Glorot-uniform weights (``U(−a, a)``, ``a = √(6 / (fan_in +
    fan_out))``) and zero biases, as Keras's ``Dense`` and ``Conv`` layers start; torch's default is
    Kaiming-uniform with ``a = √5`` and uniform biases (``U(−1/√fan_in, 1/√fan_in)``), about half the scale for
    these layers. It matters for plain SGD on little data: PrivateKT's global network, fine-tuned with SGD on a
    buffer of a few dozen labels, stays at chance with torch's initialisation and learns with Keras's
    (``docs/results.md``, *Why privfed's PrivateKT curve lay below the authors'*). The weights are drawn from
    torch's generator, which the classifier seeds with ``random_state``.

    It names itself after the wrapped function (``keras_initialised_<name>``, in the function's module), so
    fingerprints and saved states describe which network was built; it pickles when ``module_fn`` does.
    """

    def __init__(self, module_fn: Callable[[InputSize, int], nn.Module]) -> None:
        if not callable(module_fn):
            raise TypeError(
                f"module_fn must be a callable (input_size, n_classes) -> torch.nn.Module, got {module_fn!r}")
        self.module_fn = module_fn
        name = getattr(module_fn, "__name__", type(module_fn).__name__)
        self.__module__ = getattr(module_fn, "__module__", None) or "?"
        self.__name__ = self.__qualname__ = f"keras_initialised_{name}"

    def __call__(self, input_size: InputSize, n_classes: int) -> nn.Module:
        module = self.module_fn(input_size, n_classes)
        for layer in module.modules() if isinstance(module, nn.Module) else ():
            if isinstance(layer, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)):
                nn.init.xavier_uniform_(layer.weight)
                if layer.bias is not None:
                    nn.init.zeros_(layer.bias)
        return module

    def __repr__(self) -> str:
        return f"KerasInitialised({self.module_fn!r})"


@register_safe_state_class
class TorchMLP(TorchClassifier):
    """FedKT's multi-layer perceptron: fully connected layers with ReLU.

    The input size and the number of classes are read from the data at ``fit``;
    examples of any shape are flattened. ``hidden=(100, 100)`` on MNIST gives the
    paper's 784-100-100-10 network; ``hidden=()`` gives multinomial logistic
    regression.

    Parameters
    ----------
    hidden : sequence of int, default=(100, 100)
        Widths of the hidden layers.
    epochs, batch_size, lr, optimizer, momentum, weight_decay, device, random_state, verbose, dp, noise_seed
        As in :class:`TorchClassifier`.

    Examples
    --------
    >>> from sklearn.datasets import load_digits
    >>> X, y = load_digits(return_X_y=True)
    >>> model = TorchMLP(epochs=5, random_state=0).fit(X / 16, y)
    >>> model.predict_proba(X[:2] / 16).shape
    (2, 10)
    """

    def __init__(
        self,
        hidden: Sequence[int] = (100, 100),
        *,
        epochs: int = 10,
        batch_size: int = 64,
        lr: float = 1e-3,
        optimizer: Literal["adam", "sgd"] = "adam",
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        device: str | torch.device | None = None,
        random_state: int | np.random.RandomState | None = None,
        verbose: bool = False,
        dp: DPConfig | None = None,
        noise_seed: int | None = None,
    ) -> None:
        self.hidden = hidden
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.optimizer = optimizer
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.device = device
        self.random_state = random_state
        self.verbose = verbose
        self.dp = dp
        self.noise_seed = noise_seed

    def _check_architecture(self) -> None:
        _check_int_tuple("hidden", self.hidden)

    def _build_module(self, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
        widths = (math.prod(input_shape), *_check_int_tuple("hidden", self.hidden))
        layers: list[nn.Module] = [nn.Flatten()]
        for width_in, width_out in zip(widths[:-1], widths[1:]):
            layers += [nn.Linear(width_in, width_out), nn.ReLU()]
        layers.append(nn.Linear(widths[-1], n_classes))
        return nn.Sequential(*layers)


@register_safe_state_class
class TorchCNN(TorchClassifier):
    """FedKT's small CNN: two 5×5 convolutions with 2×2 max pooling, then a ReLU MLP.

    conv(5×5, ``conv_channels[0]``) → ReLU → max-pool 2×2 → conv(5×5,
    ``conv_channels[1]``) → ReLU → max-pool 2×2 → fully connected ``hidden`` layers
    with ReLU → one logit per class. The defaults are the paper's 6 and 16 channels
    and 120-84 hidden units.

    Accepted inputs (the layout is read at ``fit`` and must be the same at predict):

    - ``(n, H, W)``: single-channel images;
    - ``(n, C, H, W)``: channels first, as torch expects (channels-last arrays must
      be transposed by the caller);
    - ``(n, d)`` with ``d`` a perfect square: flattened single-channel square images
      (784 → 28×28 for MNIST, 64 → 8×8 for scikit-learn's ``load_digits``).

    With ``padding=0`` (the paper's) images must be at least 16×16; 8×8 digits need
    ``padding=2``.

    Parameters
    ----------
    conv_channels : pair of int, default=(6, 16)
        Output channels of the two convolutions.
    hidden : sequence of int, default=(120, 84)
        Widths of the fully connected hidden layers.
    padding : int, default=0
        Zero padding of each convolution.
    epochs, batch_size, lr, optimizer, momentum, weight_decay, device, random_state, verbose, dp, noise_seed
        As in :class:`TorchClassifier`.
    """

    def __init__(
        self,
        conv_channels: Sequence[int] = (6, 16),
        hidden: Sequence[int] = (120, 84),
        *,
        padding: int = 0,
        epochs: int = 10,
        batch_size: int = 64,
        lr: float = 1e-3,
        optimizer: Literal["adam", "sgd"] = "adam",
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        device: str | torch.device | None = None,
        random_state: int | np.random.RandomState | None = None,
        verbose: bool = False,
        dp: DPConfig | None = None,
        noise_seed: int | None = None,
    ) -> None:
        self.conv_channels = conv_channels
        self.hidden = hidden
        self.padding = padding
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.optimizer = optimizer
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.device = device
        self.random_state = random_state
        self.verbose = verbose
        self.dp = dp
        self.noise_seed = noise_seed

    def _check_architecture(self) -> None:
        _check_int_tuple("conv_channels", self.conv_channels, length=2)
        _check_int_tuple("hidden", self.hidden)
        check_int_at_least("padding", self.padding, 0)

    def _build_module(self, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
        channels, height, width = _image_shape(input_shape)
        first, second = _check_int_tuple("conv_channels", self.conv_channels, length=2)
        feature_height, feature_width = self._feature_side(height), self._feature_side(width)
        if min(feature_height, feature_width) < 1:
            raise ValueError(
                f"TorchCNN: images of {height}×{width} are too small for two 5×5 convolutions with 2×2 pooling "
                f"at padding={self.padding}; use larger images or padding=2 (enough for 8×8)"
            )
        widths = (second * feature_height * feature_width, *_check_int_tuple("hidden", self.hidden))
        layers: list[nn.Module] = [
            nn.Flatten(),
            nn.Unflatten(1, (channels, height, width)),
            nn.Conv2d(channels, first, kernel_size=5, padding=self.padding),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(first, second, kernel_size=5, padding=self.padding),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
        ]
        for width_in, width_out in zip(widths[:-1], widths[1:]):
            layers += [nn.Linear(width_in, width_out), nn.ReLU()]
        layers.append(nn.Linear(widths[-1], n_classes))
        return nn.Sequential(*layers)

    def _feature_side(self, side: int) -> int:
        """Side length after the two conv + pool stages (0 if the image is too small)."""
        for _ in range(2):
            side = side + 2 * self.padding - 4
            if side < 2:
                return 0
            side //= 2
        return side


def _image_shape(input_shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(channels, height, width) of TorchCNN's inputs from the per-example shape."""
    if len(input_shape) == 1:
        side = math.isqrt(input_shape[0])
        if side * side != input_shape[0]:
            raise ValueError(
                f"TorchCNN got flat examples of {input_shape[0]} features, not a square single-channel image; "
                "pass X as (n, H, W) or (n, C, H, W)"
            )
        return 1, side, side
    if len(input_shape) == 2:
        return 1, *input_shape
    if len(input_shape) == 3:
        return input_shape
    raise ValueError(f"TorchCNN needs examples of shape (d,), (H, W) or (C, H, W); got {input_shape}")
