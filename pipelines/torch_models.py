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
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import numpy as np
import torch
from scipy.special import log_softmax, softmax
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array, check_is_fitted, check_X_y, validate_data
from torch import nn
from torch.nn import functional

from ..accounting._checks import check_choice, check_int_at_least, check_positive_finite, check_probability
from ..accounting.dpsgd import DPSGD, compose_dpsgd
from .dp_config import DPConfig

__all__ = ["KerasInitialised", "TorchCNN", "TorchClassifier", "TorchMLP"]

SAFE_STATE_FORMAT = "privfed.torch_classifier"
SAFE_STATE_VERSION = 1

# Rows per forward pass at prediction time: large enough that Python overhead is
# negligible, small enough that a CNN's activations on 28×28 images stay ~100 MB.
_INFERENCE_BATCH = 4096

InputSize = int | tuple[int, ...]


def _check_nonnegative_finite(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number >= 0, got {value!r}")
    if not (math.isfinite(value) and value >= 0):
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


def _check_output_shape(module: nn.Module, example: torch.Tensor, n_classes: int) -> None:
    """Require the network to map one example to ``n_classes`` logits (checked in eval mode)."""
    module.eval()
    with torch.no_grad():
        shape = tuple(module(example).shape)
    if shape != (1, n_classes):
        raise ValueError(
            f"the network must return logits of shape (batch, {n_classes}); "
            f"for a batch of shape {tuple(example.shape)} it returned shape {shape}"
        )


def _resolve_device(device: object) -> torch.device:
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
        module (dropout). With a fixed int, ``fit`` is deterministic on CPU.
    verbose : bool, default=False
        Print the mean training loss after each epoch.
    dp : DPConfig or None, default=None
        Train with DP-SGD through Opacus (:class:`~privfed.pipelines.dp_config.DPConfig`):
        Poisson sampling, per-example clipping, Gaussian noise. Each training call
        (``fit``, ``fit_soft``, ``partial_fit``, ``partial_fit_soft``) is one DP-SGD
        release on the data it is given. A network with layers DP-SGD cannot train
        (BatchNorm) is refused before training.

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
        _resolve_device(self.device)
        check_random_state(self.random_state)
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
        X = check_array(X, allow_nd=True, dtype=np.float32)
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
        self._train(X, classes, torch.from_numpy(encoded.astype(np.int64)), functional.cross_entropy)
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
        loss_fn = _soft_loss(loss, temperature)
        if not isinstance(warm_start, bool):
            raise TypeError(f"warm_start must be True or False, got {warm_start!r}")
        self._check_training_parameters()
        X, targets = validate_data(self, X, targets, allow_nd=True, dtype=np.float32, multi_output=True)
        targets = _check_soft_targets(targets, loss)
        classes = _check_target_classes(np.arange(targets.shape[1]) if classes is None else classes, targets.shape[1])
        order = np.argsort(classes, kind="stable")
        targets = torch.from_numpy(np.ascontiguousarray(targets[:, order]))
        if warm_start and hasattr(self, "module_"):
            self._train_further(X, classes[order], targets, loss_fn)
        else:
            self._train(X, classes[order], targets, loss_fn)
        return self

    def _train_further(
        self,
        X: np.ndarray,
        classes: np.ndarray,
        targets: torch.Tensor,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> None:
        """``epochs`` more epochs of the fitted network with a fresh optimizer (``fit_soft(warm_start=True)``)."""
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
        seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        with _seeded_torch(self.device_, seed):
            self.loss_curve_ = []
            self._optimizer_state = None
            self._run_epochs(self.module_, X, targets, loss_fn, self.epochs, seed, self.device_)

    def _train(
        self,
        X: np.ndarray,
        classes: np.ndarray,
        targets: torch.Tensor,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> None:
        """Build a network for ``classes`` and fit it to ``targets`` with ``loss_fn`` for ``epochs`` epochs.

        The fitted attributes are replaced only once the new network has been built
        and checked, so a refused network leaves a previous fit intact.
        """
        device = _resolve_device(self.device)
        seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        with _seeded_torch(device, seed):
            module = self._new_module(X, classes, device)
            self.classes_ = classes
            self._record_input_shape(X)
            self.loss_curve_ = []
            self._optimizer_state = None
            self._forget_dp_releases()
            self._run_epochs(module, X, targets, loss_fn, self.epochs, seed, device)
        self.module_ = module.eval()
        self.device_ = device

    def _new_module(self, X: np.ndarray, classes: np.ndarray, device: torch.device) -> nn.Module:
        """A freshly initialised network for examples shaped like ``X`` (under the caller's torch seed)."""
        input_shape = tuple(int(size) for size in X.shape[1:])
        module = self._build_module(input_shape, len(classes)).to(device)
        _check_output_shape(
            module, torch.from_numpy(np.require(X[:1], requirements=["C", "W"])).to(device), len(classes)
        )
        return module

    def _run_epochs(
        self,
        module: nn.Module,
        X: np.ndarray,
        targets: torch.Tensor,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        epochs: int,
        seed: int,
        device: torch.device,
    ) -> None:
        """Mini-batch training from the optimizer state kept by the previous call (fresh after ``fit``)."""
        inputs = torch.from_numpy(np.require(X, requirements=["C", "W"])).to(device)
        optimizer = self._make_optimizer(module)
        if self._optimizer_state is not None:
            optimizer.load_state_dict(self._optimizer_state)
        targets = targets.to(device)
        if self.dp is not None:
            self._run_dp_epochs(module, optimizer, inputs, targets, loss_fn, epochs, seed)
            return
        self._forget_dp_releases()
        shuffle = torch.Generator().manual_seed(seed)
        module.train()
        for epoch in range(epochs):
            order = torch.randperm(len(inputs), generator=shuffle).to(device)
            total = torch.zeros((), device=device)
            for start in range(0, len(inputs), self.batch_size):
                batch = order[start : start + self.batch_size]
                optimizer.zero_grad()
                batch_loss = loss_fn(module(inputs[batch]), targets[batch])
                batch_loss.backward()
                optimizer.step()
                total += batch_loss.detach() * len(batch)
            self.loss_curve_.append(float(total) / len(inputs))
            if self.verbose:
                print(f"{type(self).__name__} epoch {len(self.loss_curve_)}: loss {self.loss_curve_[-1]:.4f}")
        self._optimizer_state = optimizer.state_dict()
        module.eval()

    def _forget_dp_releases(self) -> None:
        """Drop ``dp_releases_``/``dp_mechanism_``: a new network, or one trained without DP-SGD."""
        for name in ("dp_releases_", "dp_mechanism_"):
            if hasattr(self, name):
                delattr(self, name)

    def _run_dp_epochs(
        self,
        module: nn.Module,
        optimizer: torch.optim.Optimizer,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        epochs: int,
        seed: int,
    ) -> None:
        """DP-SGD epochs through Opacus (``dp``); the release is planned and checked before the first step."""
        from .dp_training import check_dp_module, plan_release, train_dp_sgd

        check_dp_module(module, type(self).__name__)
        release = plan_release(self.dp, n=len(inputs), batch_size=self.batch_size, epochs=epochs)
        losses = train_dp_sgd(module, optimizer, inputs, targets, loss_fn, release=release,
                              max_grad_norm=self.dp.max_grad_norm, epochs=epochs, seed=seed,
                              expected_batch_size=self.dp.resolve_expected_batch_size(self.batch_size))
        self.loss_curve_.extend(losses)
        if self.verbose:
            print(f"{type(self).__name__} DP-SGD: {release}, last epoch's loss {losses[-1]:.4f}")
        self._optimizer_state = optimizer.state_dict()
        self.dp_releases_ = (*getattr(self, "dp_releases_", ()), release)
        self.dp_mechanism_ = compose_dpsgd(self.dp_releases_)

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
            self._start_partial_fit(X, np.unique(np.asarray(classes)))
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
        loss_fn = _soft_loss(loss, temperature)
        first = not hasattr(self, "module_")
        if first:
            self._check_training_parameters()
        X, targets = self._validate_partial_fit_data(X, targets, first, multi_output=True)
        targets = _check_soft_targets(targets, loss)
        if classes is None:
            classes = np.arange(targets.shape[1]) if first else self.classes_
        classes = _check_target_classes(classes, targets.shape[1])
        order = np.argsort(classes, kind="stable")
        if first:
            self._start_partial_fit(X, classes[order])
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
        if X.shape[1:] != self.input_shape_:
            raise ValueError(
                f"X has examples of shape {X.shape[1:]}, but {type(self).__name__} was fitted on shape "
                f"{self.input_shape_}"
            )
        return X, y

    def _start_partial_fit(self, X: np.ndarray, classes: np.ndarray) -> None:
        """Build the network of a first ``partial_fit`` call."""
        device = _resolve_device(self.device)
        seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        with _seeded_torch(device, seed):
            module = self._new_module(X, classes, device)
        self.classes_ = classes
        self._record_input_shape(X)
        self.loss_curve_ = []
        self._optimizer_state = None
        self._forget_dp_releases()
        self.module_ = module.eval()
        self.device_ = device

    def _continue(
        self, X: np.ndarray, targets: torch.Tensor, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    ) -> None:
        """One more epoch on the current network, seeded by ``random_state`` and the epoch count."""
        if not hasattr(self, "_optimizer_state"):
            self._optimizer_state = None  # a network from from_safe_state: the optimizer starts afresh
        base = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        seed = int(np.random.SeedSequence([base, len(self.loss_curve_)]).generate_state(1)[0] >> 1)
        with _seeded_torch(self.device_, seed):
            self._run_epochs(self.module_, X, targets, loss_fn, 1, seed, self.device_)

    def _make_optimizer(self, module: nn.Module) -> torch.optim.Optimizer:
        if self.optimizer == "adam":
            return torch.optim.Adam(module.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        return torch.optim.SGD(module.parameters(), lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)

    def get_optimizer_state(self) -> dict[str, np.ndarray]:
        """The optimizer's state that :meth:`partial_fit` continues from, as named arrays (no pickle).

        ``"<parameter index>.<name>"`` → array (Adam's ``step``, ``exp_avg``, ``exp_avg_sq``; SGD's
        ``momentum_buffer``); empty before the first step or after :meth:`fit`. With
        :meth:`get_safe_state` it is everything a continued training needs: a federated client that
        keeps no object between rounds (a Flower SuperNode) stores both as arrays.
        """
        check_is_fitted(self)
        state = getattr(self, "_optimizer_state", None) or {"state": {}}
        return {f"{index}.{name}": value.detach().cpu().numpy().copy()
                for index, entries in state["state"].items() for name, value in entries.items()
                if isinstance(value, torch.Tensor)}

    def set_optimizer_state(self, arrays: Mapping[str, np.ndarray]) -> TorchClassifier:
        """Restore :meth:`get_optimizer_state`'s arrays (the hyper-parameters come from the estimator's own)."""
        check_is_fitted(self)
        state: dict[int, dict[str, torch.Tensor]] = {}
        for key, value in arrays.items():
            index, _, name = str(key).partition(".")
            if not index.isdigit() or not name:
                raise ValueError(f"optimizer state key {key!r} must be '<parameter index>.<name>'")
            state.setdefault(int(index), {})[name] = torch.from_numpy(np.array(value))
        groups = self._make_optimizer(self.module_).state_dict()["param_groups"]
        self._optimizer_state = {"state": state, "param_groups": groups} if state else None
        return self

    # -------------------------------------------------------------- prediction
    def _logits(self, X: Any) -> np.ndarray:
        X = self._validate_X(X)
        chunks = []
        with torch.inference_mode():
            for start in range(0, len(X), _INFERENCE_BATCH):
                batch = torch.from_numpy(np.require(X[start : start + _INFERENCE_BATCH], requirements=["C", "W"]))
                batch = batch.to(self.device_)
                chunks.append(self.module_(batch).cpu().numpy())
        return np.concatenate(chunks).astype(np.float64)

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
        check_is_fitted(self)
        params = self.get_params(deep=False)
        module_fn = params.pop("module_fn", None)
        spec: dict[str, Any] = {
            "format": SAFE_STATE_FORMAT,
            "format_version": SAFE_STATE_VERSION,
            "class": type(self).__name__,
            "params": {name: _json_param(name, value) for name, value in params.items()},
            "classes": _json_classes(self.classes_),
            "classes_dtype": self.classes_.dtype.str,
            "input_shape": list(self.input_shape_),
            "n_features_in": self.n_features_in_,
            "loss_curve": [float(loss) for loss in self.loss_curve_],
            "architecture": str(self.module_),
            "torch_version": torch.__version__,
        }
        if module_fn is not None:
            spec["module_fn"] = f"{getattr(module_fn, '__module__', '?')}.{getattr(module_fn, '__qualname__', '?')}"
        if hasattr(self, "feature_names_in_"):
            spec["feature_names_in"] = [str(name) for name in self.feature_names_in_]
        if hasattr(self, "dp_releases_"):
            spec["dp_releases"] = [release.parameters() for release in self.dp_releases_]
        tensors = {name: tensor.detach().cpu().numpy().copy() for name, tensor in self.module_.state_dict().items()}
        return spec, tensors

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
        target = _class_for_spec(cls, spec)
        params = {name: tuple(value) if isinstance(value, list) else value for name, value in spec["params"].items()}
        params.setdefault("dp", None)  # states saved before DP-SGD training existed
        if isinstance(params.get("dp"), Mapping):
            params["dp"] = DPConfig(**params["dp"])
        expected = set(target._get_param_names()) - {"module_fn"}
        if set(params) != expected:
            raise ValueError(
                f"spec['params'] for {target.__name__} must have exactly the keys {sorted(expected)}; "
                f"missing {sorted(expected - set(params))}, unexpected {sorted(set(params) - expected)}"
            )
        if "module_fn" in target._get_param_names():
            if module_fn is None:
                raise ValueError(
                    f"this {target.__name__} was built by a user module_fn "
                    f"({spec.get('module_fn', 'unknown')}), which is not stored; pass module_fn= to rebuild it"
                )
            estimator = target(module_fn, **params)
        else:
            if module_fn is not None:
                raise ValueError(f"{target.__name__} rebuilds its network from spec; module_fn must be None")
            estimator = target(**params)
        estimator._check_architecture()
        estimator.classes_ = _classes_from_spec(spec)
        estimator._record_input_shape(np.empty((0, *_int_list("input_shape", spec["input_shape"]))))
        if estimator.n_features_in_ != spec["n_features_in"]:
            raise ValueError(
                f"spec['n_features_in'] = {spec['n_features_in']!r} does not match input_shape {spec['input_shape']}"
            )
        if "feature_names_in" in spec:
            estimator.feature_names_in_ = np.asarray(spec["feature_names_in"], dtype=object)
        estimator.loss_curve_ = [float(loss) for loss in spec["loss_curve"]]
        if spec.get("dp_releases"):
            estimator.dp_releases_ = tuple(DPSGD(**release) for release in spec["dp_releases"])
            estimator.dp_mechanism_ = compose_dpsgd(estimator.dp_releases_)
        device = _resolve_device(estimator.device)
        with torch.random.fork_rng(devices=[]):
            module = estimator._build_module(estimator.input_shape_, len(estimator.classes_))
        module.load_state_dict(_state_dict_from_arrays(module, tensors), strict=True)
        estimator.module_ = module.to(device).eval()
        estimator.device_ = device
        return estimator


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
    epochs, batch_size, lr, optimizer, momentum, weight_decay, device, random_state, verbose, dp
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
    epochs, batch_size, lr, optimizer, momentum, weight_decay, device, random_state, verbose, dp
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


@contextmanager
def _seeded_torch(device: torch.device, seed: int) -> Iterator[None]:
    """Seed torch's generators (CPU, and ``device`` if CUDA) inside, restoring the caller's state after."""
    cuda_devices = []
    if device.type == "cuda":
        cuda_devices = [device.index if device.index is not None else torch.cuda.current_device()]
    with torch.random.fork_rng(devices=cuda_devices):
        torch.manual_seed(seed)
        yield


def _soft_loss(loss: str, temperature: float) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The distillation loss of :meth:`TorchClassifier.fit_soft` (validated)."""
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


def _check_soft_targets(targets: Any, loss: str) -> np.ndarray:
    targets = np.asarray(targets, dtype=np.float32)
    if targets.ndim != 2 or targets.shape[1] < 2:
        raise ValueError(f"targets must have shape (n_samples, n_classes) with n_classes >= 2, got {targets.shape}")
    if loss == "kl" and (targets.min() < 0 or not np.allclose(targets.sum(axis=1), 1.0, atol=1e-4)):
        raise ValueError("targets must be class probabilities for loss='kl' (rows >= 0 summing to 1)")
    return targets


def _check_target_classes(classes: Any, n_columns: int) -> np.ndarray:
    classes = np.asarray(classes)
    if classes.ndim != 1 or len(classes) != n_columns or len(np.unique(classes)) != len(classes):
        raise ValueError(f"classes must hold {n_columns} distinct labels, one per target column; got {classes!r}")
    return classes


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
        return input_shape  # type: ignore[return-value]
    raise ValueError(f"TorchCNN needs examples of shape (d,), (H, W) or (C, H, W); got {input_shape}")


# ------------------------------------------------------------- safe-state helpers
_SAFE_CLASSES: dict[str, type[TorchClassifier]] = {
    estimator_class.__name__: estimator_class for estimator_class in (TorchClassifier, TorchMLP, TorchCNN)
}
_SPEC_KEYS = ("format", "format_version", "class", "params", "classes", "classes_dtype", "input_shape",
              "n_features_in", "loss_curve")


def _json_param(name: str, value: object) -> Any:
    """A hyper-parameter as a JSON value (tuples as lists, devices as strings)."""
    if isinstance(value, np.random.RandomState):
        return None
    if isinstance(value, DPConfig):
        return value.to_dict()
    if isinstance(value, torch.device):
        return str(value)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (tuple, list)):
        return [_json_param(name, item) for item in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"hyper-parameter {name}={value!r} cannot be written to a safe state (not JSON-able)")


def _json_classes(classes: np.ndarray) -> list[Any]:
    if classes.dtype.kind not in "biufUO" or (
        classes.dtype.kind == "O" and not all(isinstance(label, str) for label in classes)
    ):
        raise TypeError(f"classes_ of dtype {classes.dtype} cannot be written to a safe state; use int or str labels")
    return classes.tolist()


def _classes_from_spec(spec: Mapping[str, Any]) -> np.ndarray:
    dtype = np.dtype(spec["classes_dtype"])
    if dtype.kind not in "biufUO":
        raise ValueError(f"spec['classes_dtype'] must be a bool, int, float or str dtype, got {dtype}")
    classes = np.asarray(spec["classes"], dtype=dtype)
    if classes.ndim != 1 or len(classes) < 2:
        raise ValueError(f"spec['classes'] must list at least 2 class labels, got {spec['classes']!r}")
    return classes


def _int_list(name: str, values: object) -> tuple[int, ...]:
    if not isinstance(values, list) or not values:
        raise ValueError(f"spec[{name!r}] must be a non-empty list of integers >= 1, got {values!r}")
    return tuple(check_int_at_least(f"spec[{name!r}]", value, 1) for value in values)


def _class_for_spec(cls: type[TorchClassifier], spec: Mapping[str, Any]) -> type[TorchClassifier]:
    if not isinstance(spec, Mapping):
        raise TypeError(f"spec must be a mapping, got {type(spec).__name__}")
    missing = [key for key in _SPEC_KEYS if key not in spec]
    if missing:
        raise ValueError(f"spec is missing the keys {missing}")
    if spec["format"] != SAFE_STATE_FORMAT:
        raise ValueError(f"spec['format'] must be {SAFE_STATE_FORMAT!r}, got {spec['format']!r}")
    if spec["format_version"] != SAFE_STATE_VERSION:
        raise ValueError(
            f"spec['format_version'] {spec['format_version']!r} is not supported (this privfed reads "
            f"version {SAFE_STATE_VERSION})"
        )
    name = spec["class"]
    target = cls if name == cls.__name__ else _SAFE_CLASSES.get(name)
    if target is None or not issubclass(target, cls):
        raise ValueError(f"spec['class'] is {name!r}, which {cls.__name__}.from_safe_state cannot load")
    if not isinstance(spec["params"], Mapping):
        raise ValueError(f"spec['params'] must be a mapping, got {type(spec['params']).__name__}")
    return target


def _state_dict_from_arrays(module: nn.Module, tensors: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """Check ``tensors`` against the module's state dict (names, shapes, dtypes) and convert them."""
    expected = module.state_dict()
    missing, unexpected = sorted(expected.keys() - tensors.keys()), sorted(tensors.keys() - expected.keys())
    if missing or unexpected:
        raise ValueError(f"tensors do not match the network: missing {missing}, unexpected {unexpected}")
    state = {}
    for name, reference in expected.items():
        array = tensors[name]
        if not isinstance(array, np.ndarray):
            raise TypeError(f"tensors[{name!r}] must be a numpy array, got {type(array).__name__}")
        tensor = torch.from_numpy(np.array(array, copy=True))
        if tensor.shape != reference.shape or tensor.dtype != reference.dtype:
            raise ValueError(
                f"tensors[{name!r}] has shape {tuple(tensor.shape)} and dtype {tensor.dtype}; the network expects "
                f"{tuple(reference.shape)} and {reference.dtype}"
            )
        state[name] = tensor
    return state
