"""Torch networks as scikit-learn classifiers, with a pickle-free saved form.

FedKT (Li, He and Song, IJCAI 2021) treats teachers, students and the final
model as black boxes with ``fit`` and ``predict``; the classes here let a
plain-torch network play any of those roles beside scikit-learn and XGBoost
models:

- :class:`TorchClassifier` wraps any ``module_fn(input_size, n_classes) ->
  torch.nn.Module`` and trains it with cross-entropy on hard labels (``fit``)
  or on soft targets for distillation (``fit_soft``).
- :class:`TorchMLP` is the paper's MLP (784-100-100-10 on MNIST, ReLU).
- :class:`TorchCNN` is the paper's small CNN (two 5×5 convolutions with 6 and
  16 channels, each followed by ReLU and 2×2 max pooling, then 120-84-C fully
  connected layers with ReLU).

Every estimator saves itself as ``get_safe_state() -> (spec, tensors)``: a
JSON-able ``spec`` and a ``dict`` of numpy arrays (the module's state dict),
and loads with ``from_safe_state(spec, tensors)``; no pickle is involved.

The estimators validate their parameters and inputs and hold the fitted state;
the work is done by :mod:`pipelines.models.torch_training` (the training loop, devices,
seeds, losses, prediction), :mod:`pipelines.models.dp_training` (DP-SGD through Opacus)
and :mod:`pipelines.models.torch_serialisation` (the saved form).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, cast

import numpy as np
import torch
from privfed.accounting._checks import check_choice, check_int_at_least, check_positive_finite, check_probability
from privfed.accounting.dpsgd import compose_dpsgd
from privfed.accounting.noise_source import NoiseSource, check_noise_seed
from scipy.special import log_softmax, softmax
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array, check_is_fitted, check_X_y, validate_data
from torch import nn
from torch.nn import functional

from .dp_config import DPConfig
from .torch_serialisation import load_safe_state, optimizer_state_arrays, optimizer_state_from_arrays, safe_state
from .torch_training import (
    LossFunction,
    TrainingSettings,
    check_soft_targets,
    check_target_classes,
    continuation_seed,
    network_logits,
    new_network,
    resolve_device,
    seeded_torch,
    soft_loss,
    torch_seed,
    train_epochs,
)

__all__ = ["KerasInitialised", "TorchCNN", "TorchClassifier", "TorchMLP"]

InputSize = int | tuple[int, ...]


def _check_nonnegative_finite(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number >= 0, got {value!r}")
    if not (math.isfinite(value) and float(value) >= 0):
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return float(value)


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


class TorchClassifier(ClassifierMixin, BaseEstimator):
    """A torch network trained as a scikit-learn classifier.

    ``fit`` encodes the labels with ``np.unique`` (so any sortable labels work),
    builds the network with ``module_fn(input_size, n_classes)`` and trains it with
    cross-entropy on mini-batches. The network outputs one logit per class.

    Parameters
    ----------
    module_fn : callable
        ``module_fn(input_size, n_classes) -> torch.nn.Module``, called in ``fit``.
        ``input_size`` is the number of features (an int) when ``X`` is 2-D, and the
        per-example shape (a tuple, e.g. ``(1, 28, 28)``) when ``X`` has more
        dimensions. The module maps a float32 batch of that shape to logits of shape
        ``(batch, n_classes)``.
    epochs : int, default=10
        Passes over the training data.
    batch_size : int, default=64
        Examples per optimisation step (the last batch of an epoch may be smaller).
    lr : float, default=1e-3
        Learning rate.
    optimizer : {"adam", "sgd"}, default="adam"
        ``torch.optim.Adam`` or ``torch.optim.SGD`` (the latter with ``momentum``).
    momentum : float, default=0.9
        Momentum in [0, 1) for ``optimizer="sgd"``; ignored by Adam.
    weight_decay : float, default=0.0
        L2 penalty passed to the optimizer.
    device : str, torch.device or None, default=None
        Where to train and predict; None means CUDA when available, else CPU.
    random_state : int, numpy.random.RandomState or None, default=None
        Seeds the weight initialisation, the shuffling and any randomness inside the
        module (dropout). With a fixed int, ``fit`` is deterministic on CPU — with ``dp``,
        only when ``noise_seed`` is set too (DP-SGD's sampling and noise never follow it).
    verbose : bool, default=False
        Print the mean training loss after each epoch.
    dp : DPConfig or None, default=None
        Train with DP-SGD through Opacus (:class:`~privfed.pipelines.models.dp_config.DPConfig`):
        Poisson sampling, per-example clipping, Gaussian noise. Each training call
        (``fit``, ``fit_soft``, ``partial_fit``, ``partial_fit_soft``) is one DP-SGD
        release on the data it is given. A network with layers DP-SGD cannot train
        (BatchNorm) is refused before training.
    noise_seed : int or None, default=None
        Where DP-SGD's Poisson sampling and Gaussian noise come from. None: a fresh secret
        source per training call (:meth:`privfed.NoiseSource.secret`, keyed from this
        machine's OS entropy; nothing recorded can regenerate it). An int: a reproducible
        source derived from it and the number of DP-SGD calls so far
        (:meth:`privfed.NoiseSource.seeded`), for tests and reproductions only — whoever
        knows the seed regenerates the noise, so no ε holds against them (``dp_noise_``
        says so). ``random_state`` never reaches these draws; it keeps seeding the
        initialisation (and the shuffle without ``dp``). Ignored without ``dp``.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Sorted class labels.
    n_features_in_ : int
        Number of input values per example (the product of ``input_shape_``).
    input_shape_ : tuple of int
        Per-example shape of ``X`` seen in ``fit``.
    feature_names_in_ : ndarray of str
        Column names, only when ``X`` was a DataFrame with string column names.
    module_ : torch.nn.Module
        The trained network, in evaluation mode, on ``device_``.
    device_ : torch.device
        The device the network lives on.
    loss_curve_ : list of float
        Mean training loss of each epoch.
    dp_releases_ : tuple of DPSGD
        With ``dp``: one :class:`~privfed.accounting.DPSGD` per training call since the
        network was built (``fit`` and ``fit_soft`` without warm start begin a new
        tuple; warm starts and ``partial_fit`` calls append), with the exact σ,
        sampling rate q and number of steps that ran.
    dp_mechanism_ : Mechanism
        With ``dp``: the composition of ``dp_releases_`` (one ``DPSGD`` when they share
        σ and q, the steps added), so ``privfed.account(model.dp_mechanism_, delta=...)``
        is the example-level ε (add/remove one example) of the network's training —
        valid when every call trained on the same private data set; with different
        data sets per call, account each call's release on its own data. A training
        call without ``dp`` on a network that has these attributes deletes them (the
        network no longer has a DP-SGD guarantee).
    dp_noise_ : tuple of dict
        With ``dp``: where each release's sampling and noise came from, one
        :meth:`privfed.NoiseSource.provenance` per entry of ``dp_releases_``
        (``{"source": "secret", ...}``, or ``"seeded"`` with its ``noise_seed``); None for
        a release loaded from a state saved before privfed recorded it (its noise then
        derived from ``random_state``).

    Notes
    -----
    ``decision_function`` returns logits: shape ``(n, n_classes)`` for three or
    more classes; for two classes it follows scikit-learn and returns shape
    ``(n,)``, the logit difference ``z[:, 1] - z[:, 0]`` (the log-odds of
    ``classes_[1]``). ``predict_log_proba`` gives the full log-softmax in every case.
    ``fit`` takes no ``sample_weight``.

    Examples
    --------
    >>> from torch import nn
    >>> from sklearn.datasets import load_iris
    >>> X, y = load_iris(return_X_y=True)
    >>> model = TorchClassifier(lambda d, c: nn.Linear(d, c), epochs=50, lr=0.05, random_state=0)
    >>> model.fit(X, y).score(X, y) > 0.9
    True
    """

    def __init__(
        self,
        module_fn: Callable[[InputSize, int], nn.Module],
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
        self.module_fn = module_fn
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

    # ----------------------------------------------------------------- building
    def _check_architecture(self) -> None:
        """Validate the parameters that define the network (subclasses override)."""
        if not callable(self.module_fn):
            raise TypeError(
                f"module_fn must be a callable (input_size, n_classes) -> torch.nn.Module, got {self.module_fn!r}"
            )

    def _build_module(self, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
        """Return a freshly initialised network for examples of ``input_shape``."""
        input_size: InputSize = input_shape[0] if len(input_shape) == 1 else input_shape
        module = self.module_fn(input_size, n_classes)
        if not isinstance(module, nn.Module):
            raise TypeError(f"module_fn must return a torch.nn.Module, got {type(module).__name__}")
        return module

    def _check_training_parameters(self) -> None:
        check_int_at_least("epochs", self.epochs, 1)
        check_int_at_least("batch_size", self.batch_size, 1)
        check_positive_finite("lr", self.lr)
        check_choice("optimizer", self.optimizer, ("adam", "sgd"))
        check_probability("momentum", self.momentum, open_low=False, open_high=True)
        _check_nonnegative_finite("weight_decay", self.weight_decay)
        resolve_device(self.device)
        check_random_state(self.random_state)
        check_noise_seed(self.noise_seed)
        if self.dp is not None and not isinstance(self.dp, DPConfig):
            raise TypeError(f"dp must be None or a privfed.DPConfig, got {type(self.dp).__name__}: {self.dp!r}")
        self._check_architecture()

    # ------------------------------------------------------------------ inputs
    def _record_input_shape(self, X: np.ndarray) -> None:
        self.input_shape_ = tuple(int(size) for size in X.shape[1:])
        self.n_features_in_ = int(np.prod(self.input_shape_))

    def _validate_X(self, X: Any) -> np.ndarray:
        """Validate X for prediction: float32, with the per-example shape seen in ``fit``."""
        check_is_fitted(self)
        if len(self.input_shape_) == 1:
            return validate_data(self, X, reset=False, dtype=np.float32)
        return self._check_example_shape(check_array(X, allow_nd=True, dtype=np.float32))

    def _check_example_shape(self, X: np.ndarray) -> np.ndarray:
        """``X``, whose examples must have the shape seen in ``fit`` (for multi-dimensional examples)."""
        if X.shape[1:] != self.input_shape_:
            raise ValueError(
                f"X has examples of shape {X.shape[1:]}, but {type(self).__name__} was fitted on shape "
                f"{self.input_shape_}"
            )
        return X

    # ---------------------------------------------------------------- training
    def fit(self, X: Any, y: Any) -> TorchClassifier:
        """Train a fresh network on ``X`` with hard labels ``y`` (cross-entropy).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_samples, *input_shape)
        y : array-like of shape (n_samples,)
            Class labels; at least two distinct classes.

        Returns
        -------
        self
        """
        self._check_training_parameters()
        X, y = validate_data(self, X, y, allow_nd=True, dtype=np.float32)
        check_classification_targets(y)
        classes, encoded = np.unique(y, return_inverse=True)
        if classes.size < 2:
            raise ValueError(
                f"y has only one class ({classes[0]!r}); {type(self).__name__} needs at least 2 classes"
            )
        self._fresh_network(X, classes, (torch.from_numpy(encoded.astype(np.int64)), functional.cross_entropy))
        return self

    def fit_soft(
        self,
        X: Any,
        targets: Any,
        *,
        loss: Literal["kl", "l2", "l1"] = "kl",
        temperature: float = 1.0,
        classes: Any = None,
        warm_start: bool = False,
    ) -> TorchClassifier:
        """Train a network for ``epochs`` epochs to match soft targets (knowledge distillation).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_samples, *input_shape)
        targets : array-like of shape (n_samples, n_classes)
            With ``loss="kl"``: class probabilities (rows non-negative, summing to 1);
            the loss is ``T² · KL(targets ‖ softmax(z / T))`` averaged over examples
            (Hinton et al., 2015), ``T = temperature``. With ``loss="l2"`` or ``"l1"``:
            teacher logits, matched to the network's logits by mean squared or mean
            absolute error (``temperature`` must stay 1).
        loss : {"kl", "l2", "l1"}, default="kl"
        temperature : float, default=1.0
            Softmax temperature of the KL loss.
        classes : array-like of shape (n_classes,), default=None
            The label of each target column; ``np.arange(n_classes)`` when None.
            Stored sorted as ``classes_`` (the columns are permuted to match).
        warm_start : bool, default=False
            Continue the fitted network (same classes and input shape) for ``epochs``
            more epochs, with a fresh optimizer, instead of building a new one; an
            unfitted estimator builds one. PrivateKT's rounds use it. (``partial_fit_soft``
            instead runs one epoch per call and keeps the optimizer's state.)

        Returns
        -------
        self
        """
        loss_fn = soft_loss(loss, temperature=temperature)
        if not isinstance(warm_start, bool):
            raise TypeError(f"warm_start must be True or False, got {warm_start!r}")
        self._check_training_parameters()
        X, targets = validate_data(self, X, targets, allow_nd=True, dtype=np.float32, multi_output=True)
        targets = check_soft_targets(targets, loss)
        classes = check_target_classes(np.arange(targets.shape[1]) if classes is None else classes, targets.shape[1])
        order = np.argsort(classes, kind="stable")
        targets = torch.from_numpy(np.ascontiguousarray(targets[:, order]))
        if warm_start and hasattr(self, "module_"):
            self._check_warm_start(X, classes[order])
            self.loss_curve_: list[float] = []
            self._optimizer_state: dict[str, Any] | None = None
            self._train_further(X, targets, loss_fn, epochs=self.epochs, seed=torch_seed(self.random_state))
        else:
            self._fresh_network(X, classes[order], (targets, loss_fn))
        return self

    def _check_warm_start(self, X: np.ndarray, classes: np.ndarray) -> None:
        """A warm start continues the fitted network: the same classes and the same per-example shape."""
        if not np.array_equal(np.asarray(self.classes_), classes):
            raise ValueError(
                f"warm_start=True continues a network fitted on classes {self.classes_.tolist()!r}; "
                f"got classes {classes.tolist()!r}"
            )
        if tuple(X.shape[1:]) != self.input_shape_:
            raise ValueError(
                f"warm_start=True continues a network fitted on examples of shape {self.input_shape_}; "
                f"got shape {tuple(X.shape[1:])}"
            )

    def _fresh_network(
        self, X: np.ndarray, classes: np.ndarray, fit: tuple[torch.Tensor, LossFunction] | None = None
    ) -> None:
        """Build a network for ``classes`` and, given ``fit = (targets, loss_fn)``, train it for ``epochs`` epochs.

        The fitted attributes are replaced only once the new network has been built
        and checked, so a refused network leaves a previous fit intact.
        """
        device = resolve_device(self.device)
        seed = torch_seed(self.random_state)
        with seeded_torch(device, seed):
            module = new_network(self._build_module, X, n_classes=len(classes), device=device)
            self.classes_ = classes
            self._record_input_shape(X)
            self.loss_curve_ = []
            self._optimizer_state = None
            self._forget_dp_releases()
            if fit is not None:
                self._run_epochs(module, device, X, *fit, epochs=self.epochs, seed=seed)
        self.module_ = module.eval()
        self.device_ = device

    def _train_further(self, X: np.ndarray, targets: torch.Tensor, loss_fn: LossFunction, *, epochs: int,
                       seed: int) -> None:
        """``epochs`` more epochs of the fitted network, under ``seed``."""
        with seeded_torch(self.device_, seed):
            self._run_epochs(self.module_, self.device_, X, targets, loss_fn, epochs=epochs, seed=seed)

    def _run_epochs(self, module: nn.Module, device: torch.device, X: np.ndarray, targets: torch.Tensor,
                    loss_fn: LossFunction, *, epochs: int, seed: int) -> None:
        """Train from the optimizer state the previous call kept; record the losses and any DP-SGD release."""
        if self.dp is None:
            self._forget_dp_releases()
        noise = None if self.dp is None else self._noise_source()
        run = train_epochs(module, X, targets, loss_fn, settings=self._training_settings(), epochs=epochs,
                           seed=seed, device=device, optimizer_state=self._optimizer_state,
                           owner=type(self).__name__, epochs_done=len(self.loss_curve_), noise=noise)
        self.loss_curve_.extend(run.losses)
        self._optimizer_state = run.optimizer_state
        if run.release is not None:
            assert noise is not None  # a DP-SGD release comes from a DP run
            self.dp_releases_ = (*getattr(self, "dp_releases_", ()), run.release)
            self.dp_mechanism_ = compose_dpsgd(self.dp_releases_)
            self.dp_noise_ = (*getattr(self, "dp_noise_", ()), noise.provenance())

    def _noise_source(self) -> NoiseSource:
        """The source of this DP-SGD call's sampling and noise: secret, or derived from ``noise_seed`` and the
        number of DP-SGD calls so far (so that the calls of one network never repeat a draw)."""
        noise_seed = check_noise_seed(self.noise_seed)
        if noise_seed is None:
            return NoiseSource.secret()
        calls_done = len(getattr(self, "dp_releases_", ()))
        return NoiseSource.seeded(cast(int, NoiseSource.seeded(noise_seed).child_seeds(calls_done + 1)[-1]))

    def _training_settings(self) -> TrainingSettings:
        return TrainingSettings(batch_size=self.batch_size, optimizer=self.optimizer, lr=self.lr,
                                momentum=self.momentum, weight_decay=self.weight_decay, dp=self.dp,
                                verbose=self.verbose)

    def _forget_dp_releases(self) -> None:
        """Drop ``dp_releases_``/``dp_mechanism_``/``dp_noise_``: a new network, or one trained without DP-SGD."""
        for name in ("dp_releases_", "dp_mechanism_", "dp_noise_"):
            if hasattr(self, name):
                delattr(self, name)

    # ------------------------------------------------------- continued training
    def partial_fit(self, X: Any, y: Any, classes: Any = None) -> TorchClassifier:
        """One epoch of cross-entropy training on ``(X, y)``, continuing the current network.

        scikit-learn's ``partial_fit`` convention: the first call (on an unfitted
        estimator) builds the network for ``classes``, which must then list every
        label that will ever be seen (``y`` itself may hold a single class, as a
        federated client's data may); later calls continue the same network and
        the same optimizer state (Adam's moments), ignore ``epochs``, and refuse
        labels outside ``classes_``. A network trained by :meth:`fit` can be
        continued too (with a fresh optimizer). Each call's shuffling and dropout
        are seeded from ``random_state`` and the number of calls so far, so a
        sequence of calls with an int ``random_state`` is deterministic.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_samples, *input_shape)
        y : array-like of shape (n_samples,)
        classes : array-like of shape (n_classes,), default=None
            Required on the first call; optional afterwards (it must then equal ``classes_``).

        Returns
        -------
        self
        """
        first = self._check_partial_fit_classes(classes)
        X, y = self._validate_partial_fit_data(X, y, first)
        check_classification_targets(y)
        if first:
            self._fresh_network(X, np.unique(np.asarray(classes)))
        codes = np.searchsorted(self.classes_, y)
        unknown = (codes >= len(self.classes_)) | (self.classes_[np.minimum(codes, len(self.classes_) - 1)] != y)
        if unknown.any():
            raise ValueError(
                f"y holds labels {np.unique(y[unknown]).tolist()} outside classes_ {self.classes_.tolist()}; "
                "pass every label in classes= on the first call to partial_fit"
            )
        self._continue(X, torch.from_numpy(codes.astype(np.int64)), functional.cross_entropy)
        return self

    def partial_fit_soft(
        self,
        X: Any,
        targets: Any,
        *,
        loss: Literal["kl", "l2", "l1"] = "kl",
        temperature: float = 1.0,
        classes: Any = None,
    ) -> TorchClassifier:
        """One epoch of distillation on soft ``targets``, continuing the current network.

        As :meth:`fit_soft` for the loss and the targets (``classes`` labels the
        target columns, ``np.arange(n_columns)`` on a first call without it), and
        as :meth:`partial_fit` for continuing: on a fitted estimator ``classes``,
        if given, must be a permutation of ``classes_`` (the columns are reordered
        to match), and without it the columns are taken in ``classes_`` order.

        Returns
        -------
        self
        """
        loss_fn = soft_loss(loss, temperature=temperature)
        first = not hasattr(self, "module_")
        if first:
            self._check_training_parameters()
        X, targets = self._validate_partial_fit_data(X, targets, first, multi_output=True)
        targets = check_soft_targets(targets, loss)
        if classes is None:
            classes = np.arange(targets.shape[1]) if first else self.classes_
        classes = check_target_classes(classes, targets.shape[1])
        order = np.argsort(classes, kind="stable")
        if first:
            self._fresh_network(X, classes[order])
        elif not np.array_equal(classes[order], self.classes_):
            raise ValueError(f"classes {classes.tolist()} must be a permutation of classes_ {self.classes_.tolist()}")
        self._continue(X, torch.from_numpy(np.ascontiguousarray(targets[:, order])), loss_fn)
        return self

    def _check_partial_fit_classes(self, classes: Any) -> bool:
        """Whether this is a first call; validates the hyper-parameters and ``classes`` then."""
        if hasattr(self, "module_"):
            if classes is not None and not np.array_equal(np.unique(np.asarray(classes)), self.classes_):
                raise ValueError(
                    f"classes={np.asarray(classes).tolist()!r} differs from classes_ {self.classes_.tolist()} "
                    "of the first call to partial_fit"
                )
            return False
        self._check_training_parameters()
        if classes is None:
            raise ValueError("classes must be passed on the first call to partial_fit (every label to be seen)")
        if len(np.unique(np.asarray(classes))) < 2:
            raise ValueError(f"classes must hold at least 2 labels, got {np.asarray(classes).tolist()!r}")
        return True

    def _validate_partial_fit_data(
        self, X: Any, y: Any, first: bool, *, multi_output: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """X as float32 (with the per-example shape of the first call, after it) and y."""
        if first or len(self.input_shape_) == 1:
            return validate_data(
                self, X, y, allow_nd=True, dtype=np.float32, multi_output=multi_output, reset=first
            )
        X, y = check_X_y(X, y, allow_nd=True, dtype=np.float32, multi_output=multi_output)
        return self._check_example_shape(X), y

    def _continue(self, X: np.ndarray, targets: torch.Tensor, loss_fn: LossFunction) -> None:
        """One more epoch on the current network, seeded by ``random_state`` and the epoch count."""
        if not hasattr(self, "_optimizer_state"):
            self._optimizer_state = None  # a network from from_safe_state: the optimizer starts afresh
        seed = continuation_seed(self.random_state, epochs_done=len(self.loss_curve_))
        self._train_further(X, targets, loss_fn, epochs=1, seed=seed)

    def get_optimizer_state(self) -> dict[str, np.ndarray]:
        """The optimizer's state that :meth:`partial_fit` continues from, as named arrays (no pickle).

        ``"<parameter index>.<name>"`` → array (Adam's ``step``, ``exp_avg``, ``exp_avg_sq``; SGD's
        ``momentum_buffer``); empty before the first step or after :meth:`fit`. With
        :meth:`get_safe_state` it is everything a continued training needs: a federated client that
        keeps no object between rounds (a Flower SuperNode) stores both as arrays.
        """
        check_is_fitted(self)
        return optimizer_state_arrays(getattr(self, "_optimizer_state", None))

    def set_optimizer_state(self, arrays: Mapping[str, np.ndarray]) -> TorchClassifier:
        """Restore :meth:`get_optimizer_state`'s arrays (the hyper-parameters come from the estimator's own)."""
        check_is_fitted(self)
        groups = self._training_settings().make_optimizer(self.module_).state_dict()["param_groups"]
        self._optimizer_state = optimizer_state_from_arrays(arrays, param_groups=groups)
        return self

    # -------------------------------------------------------------- prediction
    def _logits(self, X: Any) -> np.ndarray:
        X = self._validate_X(X)  # checks that the estimator is fitted
        return network_logits(self.module_, X, device=self.device_)

    def decision_function(self, X: Any) -> np.ndarray:
        """Logits: shape (n, n_classes), or (n,) with the log-odds of ``classes_[1]`` for two classes."""
        logits = self._logits(X)
        return logits[:, 1] - logits[:, 0] if logits.shape[1] == 2 else logits

    def predict_log_proba(self, X: Any) -> np.ndarray:
        """Log-softmax of the logits, shape (n, n_classes)."""
        return log_softmax(self._logits(X), axis=1)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Softmax of the logits, shape (n, n_classes), columns in the order of ``classes_``."""
        return softmax(self._logits(X), axis=1)

    def predict(self, X: Any) -> np.ndarray:
        """The class of the largest logit (the first one on ties)."""
        logits = self._logits(X)
        return self.classes_[np.argmax(logits, axis=1)]

    # -------------------------------------------------------------- safe state
    def get_safe_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Return ``(spec, tensors)``: a JSON-able description and the network's weights.

        ``spec`` holds the format name and version, the class name, the
        hyper-parameters (``module_fn`` only as its qualified name, for information;
        a ``numpy.random.RandomState`` as None), ``classes`` with their numpy dtype,
        the input shape, the loss curve and a printout of the network. ``tensors``
        maps the module's state-dict names to numpy arrays (copies).
        """
        return safe_state(self)

    @classmethod
    def from_safe_state(
        cls,
        spec: Mapping[str, Any],
        tensors: Mapping[str, np.ndarray],
        module_fn: Callable[[InputSize, int], nn.Module] | None = None,
    ) -> TorchClassifier:
        """Rebuild a fitted estimator from :meth:`get_safe_state`'s output, without pickle.

        Parameters
        ----------
        spec : mapping
            The JSON-able description; ``spec["class"]`` picks the class (it must be
            ``cls`` or a subclass of it).
        tensors : mapping of str to numpy.ndarray
            The network's state dict; names, shapes and dtypes must match exactly.
        module_fn : callable, optional
            Required for a plain :class:`TorchClassifier` (its network is user code and
            is not stored); must be None for :class:`TorchMLP` and :class:`TorchCNN`,
            which rebuild their networks from ``spec``.

        Returns
        -------
        TorchClassifier
            A fitted estimator that predicts exactly as the saved one did on the same
            device.
        """
        return load_safe_state(cls, spec, tensors, module_fn=module_fn, loadable=_SAFE_CLASSES)


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


#: The classes ``TorchClassifier.from_safe_state`` loads by the name a spec records.
_SAFE_CLASSES: dict[str, type[TorchClassifier]] = {
    estimator_class.__name__: estimator_class for estimator_class in (TorchClassifier, TorchMLP, TorchCNN)
}
