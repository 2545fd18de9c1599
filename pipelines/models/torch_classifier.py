"""A torch network as a scikit-learn classifier, with a pickle-free saved form.

FedKT (Li, He and Song, IJCAI 2021) treats teachers, students and the final
model as black boxes with ``fit`` and ``predict``; :class:`TorchClassifier` lets a
plain-torch network play any of those roles beside scikit-learn and XGBoost
models. It wraps any ``module_fn(input_size, n_classes) -> torch.nn.Module`` and
trains it with cross-entropy on hard labels (``fit``) or on soft targets for
distillation (``fit_soft``), continues it (``partial_fit``, ``partial_fit_soft``)
and saves itself as ``get_safe_state() -> (spec, tensors)``: a JSON-able ``spec``
and a ``dict`` of numpy arrays (the module's state dict), loaded with
``from_safe_state(spec, tensors)``; no pickle is involved. The paper's networks,
:class:`~pipelines.models.torch_models.TorchMLP` and
:class:`~pipelines.models.torch_models.TorchCNN`, are its subclasses.

The estimator validates its parameters and holds the fitted state; its inputs
are checked by :mod:`pipelines.models.torch_inputs` and the work is done by
:mod:`pipelines.models.torch_training` (the training loop, devices, seeds,
losses, prediction), :mod:`pipelines.models.dp_training` (DP-SGD through Opacus
and its record of releases) and :mod:`pipelines.models.torch_serialisation` (the
saved form).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

import numpy as np
import torch
from scipy.special import log_softmax, softmax
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data
from torch import nn
from torch.nn import functional

from ...accounting._checks import check_choice, check_int_at_least, check_positive_finite, check_probability
from ...accounting.noise_source import NoiseSource, check_noise_seed
from .dp_config import DPConfig
from .dp_training import dpsgd_noise_source, forget_dp_releases, record_dp_release
from .torch_inputs import (
    check_fitted_X,
    check_nonnegative_finite,
    check_partial_fit_classes,
    check_partial_fit_data,
    check_warm_start,
)
from .torch_serialisation import (
    load_safe_state,
    optimizer_state_arrays,
    optimizer_state_from_arrays,
    register_safe_state_class,
    safe_state,
)
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

__all__ = ["InputSize", "TorchClassifier"]

#: What ``module_fn`` is given: the number of features, or the per-example shape of multi-dimensional examples.
InputSize = int | tuple[int, ...]


@register_safe_state_class
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
        check_nonnegative_finite("weight_decay", self.weight_decay)
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
            check_warm_start(self, X, classes[order])
            self.loss_curve_: list[float] = []
            self._optimizer_state: dict[str, Any] | None = None
            self._train_further(X, targets, loss_fn, epochs=self.epochs, seed=torch_seed(self.random_state))
        else:
            self._fresh_network(X, classes[order], (targets, loss_fn))
        return self

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
            forget_dp_releases(self)
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
            forget_dp_releases(self)
        noise = None if self.dp is None else self._noise_source()
        run = train_epochs(module, X, targets, loss_fn, settings=self._training_settings(), epochs=epochs,
                           seed=seed, device=device, optimizer_state=self._optimizer_state,
                           owner=type(self).__name__, epochs_done=len(self.loss_curve_), noise=noise)
        self.loss_curve_.extend(run.losses)
        self._optimizer_state = run.optimizer_state
        if run.release is not None:
            assert noise is not None  # a DP-SGD release comes from a DP run
            record_dp_release(self, run.release, noise)

    def _noise_source(self) -> NoiseSource:
        """The source of this DP-SGD call's sampling and noise (:func:`~.dp_training.dpsgd_noise_source`)."""
        return dpsgd_noise_source(check_noise_seed(self.noise_seed), calls_done=len(getattr(self, "dp_releases_", ())))

    def _training_settings(self) -> TrainingSettings:
        return TrainingSettings(batch_size=self.batch_size, optimizer=self.optimizer, lr=self.lr,
                                momentum=self.momentum, weight_decay=self.weight_decay, dp=self.dp,
                                verbose=self.verbose)

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
        first = not hasattr(self, "module_")
        if first:
            self._check_training_parameters()
        check_partial_fit_classes(self, classes, first=first)
        X, y = check_partial_fit_data(self, X, y, first)
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
        X, targets = check_partial_fit_data(self, X, targets, first, multi_output=True)
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
        X = check_fitted_X(self, X)  # checks that the estimator is fitted
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
            ``cls`` or a registered subclass of it: ``TorchMLP``, ``TorchCNN``).
        tensors : mapping of str to numpy.ndarray
            The network's state dict; names, shapes and dtypes must match exactly.
        module_fn : callable, optional
            Required for a plain :class:`TorchClassifier` (its network is user code and
            is not stored); must be None for :class:`~pipelines.models.torch_models.TorchMLP`
            and :class:`~pipelines.models.torch_models.TorchCNN`, which rebuild their
            networks from ``spec``.

        Returns
        -------
        TorchClassifier
            A fitted estimator that predicts exactly as the saved one did on the same
            device.
        """
        return load_safe_state(cls, spec, tensors, module_fn=module_fn)
