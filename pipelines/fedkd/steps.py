"""FedKD's party step and its messages (FedKD Algorithm 1, lines 2–5).

The exchange, after the schema exchange of :mod:`privfed.pipelines.data.party_schema`:

1. server → party, :class:`FedKDTask`: the public set, the classes, the public clip bound Z and the
   quantization scale S, the party's seed (model initialisation only) and, only when the run opted in to
   reproducible noise (``noise_seed=``), the seed of the party's noise (its DP-SGD noise, if DP-trained);
2. party → server, :class:`FedKDLogits`: the party's clipped, quantized logits on the public set, its
   class counts (in clear, for the class-count weights; recorded as unaccounted) and its model's
   parameter count (for the FedAvg comparison of ``bandwidth_``; withheld, −1, when the run was given the
   public label set ``classes=``: a model's size can depend on the labels it saw). Under secure aggregation
   (``aggregator="skellam"``) the party sends instead its quantized logits as integer levels plus its Skellam
   share, :class:`~privfed.pipelines.fedkd.secure.FedKDNoisyLevels`, and nothing else.

No model parameter leaves a party. The server makes the tasks (:func:`fedkd_tasks`, after
:func:`local_models` has checked the parties' models) and checks the replies
(:func:`receive_fedkd_replies`); its step on them is :func:`~privfed.pipelines.fedkd.server.fedkd_server_step`
(weights, ensemble, noise, distillation, ledger). ``FedKD.fit`` and the Flower app run these very functions
on the same messages.

How the logits are formed (decision scores, log-probabilities, centring, multi-label) is
described in :mod:`privfed.pipelines.fedkd.estimator`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ...accounting import Mechanism, NoiseSource, quantize_logits
from ..data.party_data import class_codes
from ..models.fitting import (
    FittedClassifier,
    dp_release,
    fit_classifier,
    is_torch_classifier,
    with_noise_seed,
    with_seed,
)
from ..protocol.dp_ledger import training_report, without_trainings
from ..protocol.messages import ArraySpec, MessageError, Record, WireMessage
from ..protocol.preflight import warn_if_noise_drowns_votes
from ..protocol.run_parameters import record_draw
from ..protocol.secure_sum import add_skellam_share, check_collusion, skellam_share_variance
from ..protocol.seeds import spawn_seeds
from .secure import FedKDNoisyLevels, own_share_release

__all__ = [
    "FedKDPartyOutcome",
    "PROBABILITY_FLOOR",
    "FedKDLogits",
    "FedKDTask",
    "fedkd_party_step",
    "fedkd_planned_release",
    "fedkd_tasks",
    "local_models",
    "logit_replies",
    "party_noise_seeds",
    "parameter_count",
    "party_logits",
    "party_scale",
    "party_message",
    "receive_fedkd_replies",
    "resolved_weighting",
    "SECURE_AGGREGATOR",
]

#: Probabilities are floored here before taking logs, so that logits stay finite.
PROBABILITY_FLOOR = 1e-6
#: The aggregator whose noise the parties add themselves, in Skellam shares summed under secure aggregation.
SECURE_AGGREGATOR = "skellam"


# --- messages -------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class FedKDTask(WireMessage):
    """Server → party: the public set, classes (multi-label: ``arange(L)``), Z (NaN: none), S (0: none), seed,
    whether to send class counts (only for class-count weighting; otherwise the party sends zeros), whether to
    send its model's parameter count (not with a public label set), the party's noise seed and, under secure
    aggregation, the variance of its Skellam share (σ²/n, in grid steps; None: no secure aggregation).

    ``seed`` derives from ``random_state`` and sets the local model's initialisation only. ``noise_seed`` is
    None (absent from the wire) unless the run opted in to reproducible noise: the party then draws its
    DP-SGD noise from its own secret source (:meth:`~privfed.accounting.NoiseSource.for_task`).
    """

    KIND: ClassVar[str] = "fedkd-task"
    ARRAYS: ClassVar = {"public": ArraySpec("iuf", None), "classes": ArraySpec("iufbU", 1)}

    public: np.ndarray
    classes: np.ndarray
    multilabel: bool
    clip: float
    quantization_scale: int
    seed: int
    send_class_counts: bool
    send_parameter_count: bool = True
    noise_seed: int | None = None
    skellam_share_variance: float | None = None


@dataclass(frozen=True, eq=False)
class FedKDLogits(WireMessage):
    """Party → server: quantized logits (n_public, C), class counts (C,), parameter count (−1: none)."""

    KIND: ClassVar[str] = "fedkd-logits"
    ARRAYS: ClassVar = {"quantized_logits": ArraySpec("f", 2), "class_counts": ArraySpec("iu", 1)}

    quantized_logits: np.ndarray
    class_counts: np.ndarray
    parameter_count: int


# --- the parties' logits ------------------------------------------------------------------------------
def _single_label_scores(model: Any, X: np.ndarray, n_known: int) -> np.ndarray:
    """Raw per-class scores of a fitted model over the ``n_known`` classes it was fitted on."""
    if is_torch_classifier(model):
        return model.predict_log_proba(X)
    if hasattr(model, "decision_function"):
        scores = np.asarray(model.decision_function(X), dtype=float)
        if scores.ndim == 2 and scores.shape[1] == n_known:
            return scores
    if not hasattr(model, "predict_proba"):
        raise TypeError(f"{type(model).__name__} has neither a per-class decision_function nor predict_proba")
    return np.log(np.maximum(np.asarray(model.predict_proba(X), dtype=float), PROBABILITY_FLOOR))


def _positive_probabilities(model: Any, X: np.ndarray, n_labels: int) -> np.ndarray:
    """P(label = 1) for each label, from ``predict_proba``'s (n, L) array or its list of per-label arrays."""
    proba = model.predict_proba(X)
    if isinstance(proba, np.ndarray) and proba.shape == (len(X), n_labels):
        return proba.astype(float)
    if not isinstance(proba, list) or len(proba) != n_labels:
        raise TypeError(
            f"{type(model).__name__}.predict_proba must return an (n, {n_labels}) array or a list of "
            f"{n_labels} per-label arrays for multilabel=True"
        )
    columns = []
    for label, (classes, label_proba) in enumerate(zip(model.classes_, proba)):
        classes = np.asarray(classes)
        if not set(classes.tolist()) <= {0, 1}:
            raise ValueError(f"label {label} must take values 0 and 1, the model saw {classes.tolist()}")
        positive = np.flatnonzero(classes == 1)
        columns.append(label_proba[:, positive[0]] if len(positive) else np.zeros(len(X)))
    return np.stack(columns, axis=1)


def party_logits(fitted: FittedClassifier | Any, X: np.ndarray, *, clip: float | None, multilabel: bool = False,
                 n_outputs: int | None = None) -> np.ndarray:
    """A fitted local model's logits on ``X``, shape (n, C): see the module docstring for the definition.

    Parameters
    ----------
    fitted : FittedClassifier or estimator
        Single-label: a :class:`~pipelines.models.fitting.FittedClassifier` (its ``classes``
        say which global classes the model knows). Multi-label: the fitted estimator.
    X : ndarray
        The public examples.
    clip : float or None
        Z: classes the model never saw get −Z (−``log(1/floor)`` when None).
    multilabel : bool, default=False
    n_outputs : int, optional
        The number of labels (multi-label only).
    """
    if multilabel:
        if n_outputs is None:
            raise TypeError("party_logits: multilabel=True needs n_outputs (the number of labels), got None")
        if hasattr(fitted, "decision_function"):
            scores = np.asarray(fitted.decision_function(X), dtype=float)
            if scores.shape == (len(X), n_outputs):
                return scores
        p = np.clip(_positive_probabilities(fitted, X, n_outputs), PROBABILITY_FLOOR, 1.0 - PROBABILITY_FLOOR)
        return np.log(p) - np.log1p(-p)
    bottom = -(clip if clip is not None else -math.log(PROBABILITY_FLOOR))
    logits = np.full((len(X), fitted.n_classes), bottom)
    if fitted.estimator is None:  # a party holding one class
        logits[:, fitted.classes[0]] = 0.0
        return logits
    scores = _single_label_scores(fitted.estimator, X, len(fitted.classes))
    logits[:, fitted.classes] = scores - scores.mean(axis=1, keepdims=True)
    return logits


def party_message(logits: np.ndarray, *, clip: float | None, quantization_scale: int | None) -> np.ndarray:
    """What a party sends: its logits clipped to [−Z, Z] and quantized, Q(z; S) (FedKD Eq. 5 with a public Z).

    ``quantization_scale=None`` only clips; ``clip=None`` (noiseless baseline) sends the logits as they are.
    """
    if clip is not None and quantization_scale is not None:
        return quantize_logits(logits, clip=clip, quantization_scale=quantization_scale)
    if clip is not None:
        return np.clip(logits, -clip, clip)
    return np.asarray(logits, dtype=float)


def parameter_count(model: Any) -> int | None:
    """Numbers a FedAvg round would send for this model: torch parameters, or sklearn coefficient arrays.

    None where there is nothing to send: no model (a party holding one class trains none) or no parameter
    vector (e.g. a forest).
    """
    if model is None:
        return None
    module = getattr(model, "module_", None)
    if module is not None:
        return int(sum(parameter.numel() for parameter in module.parameters()))
    arrays = [*getattr(model, "coefs_", []), *getattr(model, "intercepts_", [])]
    if not arrays and hasattr(model, "coef_"):
        arrays = [model.coef_, np.atleast_1d(getattr(model, "intercept_", []))]
    return int(sum(np.size(array) for array in arrays)) if arrays else None


# --- the party step -------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class FedKDPartyOutcome:
    """A party step's result: its logits message (plain, or its noisy levels under secure aggregation), and its
    local model's DP-SGD (None: not DP-trained)."""

    logits: FedKDLogits | FedKDNoisyLevels
    training: Mechanism | None = None

    def sent(self) -> list[WireMessage]:
        """The logits, and the local model's DP-SGD parameters when it is DP-trained."""
        training = training_report(self.training)
        return [self.logits] if training is None else [self.logits, training]


def fedkd_planned_release(task: FedKDTask, *, local_model: Any) -> Mechanism | str:
    """What a party's FedKD reply is accounted under, from the task's public parameters and its own model's
    configuration (before its data is touched): under secure aggregation its own Skellam share on its quantized
    logit levels (:func:`~privfed.pipelines.fedkd.secure.own_share_release`); otherwise its local model's DP-SGD, of
    which the logits are post-processing; else the reason no silo can charge it (un-noised logits or class counts
    reach the coordinator)."""
    if task.skellam_share_variance is not None:
        return own_share_release(task)
    if task.send_class_counts:
        return "FedKD with class-count weights sends the coordinator the party's class counts in clear: no bound"
    config = getattr(local_model, "dp", None)
    if config is None or not config.public_sample_rate:
        return ("FedKD sends the coordinator the local model's logits before any noise, and the local model is not "
                "DP-trained with a public sample_rate: no bound for the coordinator")
    from ..models.dp_training import plan_release  # torch: imported only for a DP-trained (torch) model

    # With a configured q the training-set size only checks δ < 1/n (the party's own fit checks its real n).
    return plan_release(config, n=1, batch_size=local_model.batch_size, epochs=local_model.epochs)


def fedkd_party_step(
    task: FedKDTask, X: np.ndarray, y: np.ndarray, *, local_model: Any, party: str
) -> FedKDPartyOutcome:
    """Party side of FedKD: train the local model, send its quantized logits on the public set once.

    ``y`` holds the party's original labels (multi-label: its (n, L) 0/1 indicators). A DP-trained local
    model draws its noise from the party's own source: secret unless the task carries a ``noise_seed``; so does
    the Skellam share under secure aggregation (from an independent child of that source).
    """
    n_outputs = len(task.classes)
    clip = None if math.isnan(task.clip) else task.clip
    scale = task.quantization_scale or None
    local_model = with_noise_seed(with_seed(local_model, task.seed), task.noise_seed)
    if task.multilabel:
        y = np.asarray(y).astype(np.int64)  # 0/1 indicators (checked by the schema step), as fit passes them
        model = local_model.fit(X, y)
        logits = party_logits(model, task.public, clip=clip, multilabel=True, n_outputs=n_outputs)
        counts = y.sum(axis=0).astype(np.int64)
    else:
        codes = class_codes(task.classes, y, party=party)
        fitted = fit_classifier(local_model, X, codes, n_classes=n_outputs, seed=task.seed)
        model = fitted.estimator
        logits = party_logits(fitted, task.public, clip=clip)
        counts = np.bincount(codes, minlength=n_outputs)
    size = parameter_count(model) if task.send_parameter_count else None
    if not task.send_class_counts:  # uniform weights: the counts would be an un-noised statistic for nothing
        counts = np.zeros_like(counts)
    quantized = party_message(logits, clip=clip, quantization_scale=scale)
    if task.skellam_share_variance is not None:  # secure aggregation: integer levels plus the party's share only
        if clip is None or scale is None:
            raise MessageError(f"the server asked {party} for a Skellam share without a public grid (clip "
                               f"{task.clip!r}, quantization scale {task.quantization_scale!r})")
        levels = np.rint(quantized * scale / clip).astype(np.int64)
        share = NoiseSource.for_task(task.noise_seed).spawn(1)[0]  # independent of the DP-SGD noise's stream
        record_draw(f"FedKD {party}'s Skellam share", "skellam-share", variance=task.skellam_share_variance)
        noisy = add_skellam_share(levels, task.skellam_share_variance, value_bound=scale,
                                  generator=share.generator, party=party)
        return FedKDPartyOutcome(FedKDNoisyLevels(noisy), dp_release(model))
    return FedKDPartyOutcome(FedKDLogits(quantized, counts.astype(np.int64), -1 if size is None else size),
                             dp_release(model))


# --- the server's steps around the party step ------------------------------------------------------------
def resolved_weighting(model: Any) -> str:
    """The estimator ``model``'s ``weighting``, with ``"auto"`` resolved: uniform under secure aggregation, with a
    public label set (``classes=``: the counts would tell the coordinator each party's labels and size) or when
    every local model is configured for DP training; class-count otherwise."""
    if model.weighting != "auto":
        return model.weighting
    if model.secure_aggregation or model.classes is not None:
        return "uniform"
    models = model.local_model if isinstance(model.local_model, (list, tuple)) else [model.local_model]
    dp_trained = all(getattr(local, "dp", None) is not None for local in models)
    return "uniform" if dp_trained else "class-count"


def local_models(model: Any, n_parties: int) -> list[Any]:
    """The estimator ``model``'s local model of each party (one shared prototype, or one per party), checked."""
    models = (
        list(model.local_model) if isinstance(model.local_model, (list, tuple)) else [model.local_model] * n_parties
    )
    if len(models) != n_parties:
        raise ValueError(f"local_model is a list of {len(models)} models; give one per party ({n_parties}) or one")
    for index, local in enumerate(models):
        if not (hasattr(local, "fit") and hasattr(local, "get_params")
                and (hasattr(local, "predict_proba") or hasattr(local, "decision_function"))):
            raise TypeError(
                f"local_model[{index}] must be a scikit-learn-style classifier with fit and predict_proba "
                f"(or decision_function), got {local!r}"
            )
        if model.multilabel and is_torch_classifier(local):
            raise TypeError(
                f"local_model[{index}] is a {type(local).__name__}, which trains on single labels only; "
                "multilabel=True needs scikit-learn classifiers that accept (n, L) indicator targets"
            )
    return models


def party_scale(model: Any) -> int | None:
    """S for the party's own quantization: None with the paper's quantizer (the server-set grid comes later)."""
    return model.quantization_scale if model.quantizer == "public" else None


def party_noise_seeds(noise: NoiseSource, n_parties: int) -> list[int | None]:
    """The parties' noise seeds for their tasks: children 1..n of the run's root source ``noise`` (child 0 is
    the server's, :func:`~privfed.pipelines.fedkd.server.server_noise_source`); all None for a secret root."""
    return noise.child_seeds(n_parties + 1)[1:]


def fedkd_tasks(model: Any, public: np.ndarray, classes: np.ndarray, party_seeds: np.random.SeedSequence,
                n_parties: int, *, noise_seeds: Sequence[int | None] | None = None) -> list[FedKDTask]:
    """One :class:`FedKDTask` per party, from the validated estimator ``model`` and the federation's ``classes``.

    ``noise_seeds`` (:func:`party_noise_seeds`; None: secret noise for every party) go into the tasks.
    Refuses a ``collusion`` beyond n − 1 parties; warns first when the noise drowns even the best top-class margin
    (single-label only; :mod:`.preflight`).
    """
    check_collusion(model, n_parties)
    if model.gamma is not None and not model.multilabel:  # pre-flight: the best margin is 2Z (+Z against −Z)
        warn_if_noise_drowns_votes(
            "FedKD", votes=2 * float(model.clip), n_classes=len(classes), aggregator="laplace",
            scale=1 / float(model.gamma),
            what=f"each public example's ensemble has a top-class margin of at most {2 * float(model.clip):g} "
                 f"(logits clipped to ±{float(model.clip):g})",
            advice="add less noise (a larger gamma) or a larger clip")
    scale = party_scale(model)
    share = skellam_share_variance(model.sigma, n_parties) if model.secure_aggregation else None
    noise_seeds = [None] * n_parties if noise_seeds is None else list(noise_seeds)
    if len(noise_seeds) != n_parties:
        raise ValueError(f"noise_seeds must hold one seed (or None) per party ({n_parties}), got {len(noise_seeds)}")
    return [
        FedKDTask(
            public=public,
            classes=np.arange(len(classes)) if model.multilabel else classes,
            multilabel=bool(model.multilabel),
            clip=math.nan if model.clip is None else float(model.clip),
            quantization_scale=0 if scale is None else int(scale),
            seed=int(seed),
            send_class_counts=resolved_weighting(model) == "class-count",
            send_parameter_count=model.classes is None and not model.secure_aggregation,
            noise_seed=noise_seed,
            skellam_share_variance=share,
        )
        for seed, noise_seed in zip(spawn_seeds(party_seeds, n_parties), noise_seeds)
    ]


def logit_replies(model: Any, party_logits: Sequence[np.ndarray], class_counts: np.ndarray, public: np.ndarray, *,
                  classes: np.ndarray | None, parameter_counts: Sequence[int | None] | None
                  ) -> tuple[np.ndarray, list[FedKDLogits]]:
    """The replies the parties would send for logits computed elsewhere (``FedKD.fit_logits``), and the classes.

    Each party's logits (shape (n_public, C)) are clipped and quantized by :func:`party_message` with the
    estimator ``model``'s settings; ``classes`` (``arange(C)`` when None) labels the columns.
    """
    logits = [np.asarray(z, dtype=float) for z in party_logits]
    counts = np.asarray(class_counts)
    if not logits or any(z.ndim != 2 or z.shape != logits[0].shape or len(z) != len(public) for z in logits):
        raise ValueError(
            f"party_logits must be a non-empty list of arrays of one shape ({len(public)} public examples, C); "
            f"got shapes {[z.shape for z in logits]}"
        )
    n_outputs = logits[0].shape[1]
    if counts.shape != (len(logits), n_outputs):
        raise ValueError(f"class_counts must have shape ({len(logits)}, {n_outputs}), got {counts.shape}")
    classes = np.arange(n_outputs) if classes is None else np.asarray(classes)
    if len(classes) != n_outputs:
        raise ValueError(f"classes must hold {n_outputs} labels, one per logit column; got {len(classes)}")
    sizes = parameter_counts if parameter_counts is not None else [None] * len(logits)
    return classes, [
        FedKDLogits(party_message(z, clip=model.clip, quantization_scale=party_scale(model)), c,
                    -1 if size is None else size)
        for z, c, size in zip(logits, counts, sizes)
    ]


def receive_fedkd_replies(
    tasks: Sequence[FedKDTask], records: Sequence[Sequence[Record]], names: Sequence[str], *, max_bytes: int
) -> list[FedKDLogits]:
    """Validate each party's reply against its task; :class:`MessageError` names the first bad party.

    A party's ``dp-training`` report is left to :func:`~pipelines.protocol.dp_ledger.receive_trainings`.
    """
    replies = []
    for task, sent, name in zip(tasks, records, names):
        sent = without_trainings(sent)
        if len(sent) != 1:
            raise MessageError(f"{name} sent {len(sent)} messages, expected one 'fedkd-logits'")
        shape = (len(task.public), len(task.classes))
        message = FedKDLogits.from_record(
            sent[0], sender=name, shapes={"quantized_logits": shape, "class_counts": shape[1:]}, max_bytes=max_bytes
        )
        logits = message.quantized_logits
        bound = math.inf if math.isnan(task.clip) else task.clip
        if not np.isfinite(logits).all() or np.abs(logits).max(initial=0.0) > bound + 1e-9:
            raise MessageError(f"{name} sent a malformed 'fedkd-logits' message: logits outside [−{bound}, {bound}]")
        if message.class_counts.min(initial=0) < 0 or message.parameter_count < -1:
            raise MessageError(f"{name} sent a malformed 'fedkd-logits' message: negative class counts or size")
        if not task.send_class_counts and message.class_counts.any():
            raise MessageError(f"{name} sent class counts the task did not ask for (uniform weighting)")
        replies.append(message)
    return replies
