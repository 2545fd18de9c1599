"""FedKD's server step (Algorithm 1, lines 6–12): weights, ensemble, noise, distillation, ledger, bandwidth.

The server receives each party's :class:`~privfed.pipelines.fedkd.steps.FedKDLogits` (its clipped,
quantized logits on the public set and, with class-count weighting, its class counts), weights them
per class (FedKD Eq. 3), sums them, adds Laplace(1/γ) noise per public example and class
(:class:`NoisyLogitEnsemble`, Eq. 4) and distils its own model on the public set from that noisy ensemble
(Eq. 6–7). Under secure aggregation (``aggregator="skellam"``, :mod:`privfed.pipelines.fedkd.secure`) it
receives only the sum of the parties' noisy integer levels, a :class:`~privfed.pipelines.fedkd.secure.FedKDLevelSum`,
and its ensemble is that sum on the logit scale over the n parties, with no noise of its own. The Laplace noise
comes from the server's own :class:`~privfed.accounting.NoiseSource`
(:func:`server_noise_source`: secret unless the run opted in with ``noise_seed=``), never from
``random_state``, which keeps setting the distillation's initialisation and shuffles.
:func:`fedkd_server_step` does all of it and returns the fitted attributes as a
:class:`FedKDFit`; ``FedKD.fit``, ``FedKD.fit_logits`` and the Flower app (``privfed.federation``) run it
on the same messages. :func:`check_fedkd_settings` validates the estimator's settings before any of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import softmax
from sklearn.base import clone

from ...accounting import Ledger, Mechanism, NoiseSource, QuantizedLaplaceEnsemble, class_count_weights
from ...accounting._checks import check_choice, check_delta, check_int_at_least, check_positive_finite
from ...accounting.fingerprint import data_fingerprint
from ..data.party_schema import PartySchema, check_public_classes, record_schema_exchange
from ..models.fitting import fit_classifier, is_torch_classifier, with_seed
from ..protocol.dp_ledger import record_local_training
from ..protocol.progress import check_progress
from ..protocol.run_parameters import record_draw
from ..protocol.secure_sum import colluding_parties, honest_contributors, secure_value_bound, skellam_share_variance
from .secure import FedKDLevelSum, skellam_logit_releases
from .steps import SECURE_AGGREGATOR, FedKDLogits, resolved_weighting

__all__ = [
    "COUNT_BYTES",
    "FLOAT_BYTES",
    "LOSSES",
    "QUANTIZERS",
    "AGGREGATORS",
    "WEIGHTINGS",
    "BandwidthReport",
    "FedKDFit",
    "NoisyLogitEnsemble",
    "check_fedkd_settings",
    "fedkd_server_step",
    "paper_quantized",
    "server_noise_source",
]

WEIGHTINGS = ("auto", "class-count", "uniform")
LOSSES = ("l2", "l1", "kl")
QUANTIZERS = ("public", "paper")
AGGREGATORS = ("laplace", SECURE_AGGREGATOR)
#: Bytes of one value sent unquantized (float32) and of one class count (int32).
FLOAT_BYTES = 4
COUNT_BYTES = 4


def check_fedkd_settings(model: Any) -> None:
    """Validate the FedKD estimator ``model``'s settings (server model, quantizer, noise, loss, distillation)."""
    server = model.server_model
    if not (hasattr(server, "fit") and hasattr(server, "predict") and hasattr(server, "get_params")):
        raise TypeError(f"server_model must be a scikit-learn-style classifier (fit, predict), got {server!r}")
    soft = is_torch_classifier(server)
    check_choice("weighting", model.weighting, WEIGHTINGS)
    check_choice("quantizer", model.quantizer, QUANTIZERS)
    if model.quantizer == "paper" and model.quantization_scale is None:
        raise ValueError("quantizer='paper' quantizes with S levels: give quantization_scale >= 1, got None")
    check_delta(model.delta)
    check_choice("loss", model.loss, LOSSES)
    check_progress(model.progress)
    for name in ("multilabel", "redraw_noise_per_batch"):
        if not isinstance(getattr(model, name), bool):
            raise TypeError(f"{name} must be True or False, got {getattr(model, name)!r}")
    if model.gamma is not None:
        check_positive_finite("gamma", model.gamma)
    if model.quantization_scale is not None:
        check_int_at_least("quantization_scale", model.quantization_scale, 1)
    if model.clip is not None:
        check_positive_finite("clip", model.clip)
    if model.gamma is not None and (model.clip is None or model.quantization_scale is None):
        raise ValueError(
            "with noise (gamma set) the logits must be clipped to a public bound and quantized: give clip > 0 "
            f"and quantization_scale >= 1 (got clip={model.clip!r}, "
            f"quantization_scale={model.quantization_scale!r}); "
            "None is for the noiseless baseline only"
        )
    if model.loss == "kl":
        if model.multilabel:
            raise ValueError("loss='kl' compares softmaxes; multilabel=True needs loss='l2' or 'l1'")
        if model.temperature is not None:
            check_positive_finite("temperature", model.temperature)
    elif model.temperature is not None:
        raise ValueError(
            f"temperature applies to loss='kl' only; got temperature={model.temperature!r} with loss={model.loss!r}"
        )
    for name in ("distill_epochs", "batch_size"):
        if getattr(model, name) is not None:
            check_int_at_least(name, getattr(model, name), 1)
            if not soft:
                raise ValueError(
                    f"{name} applies to a server model with fit_soft (a TorchClassifier); "
                    f"got {type(server).__name__}"
                )
    if model.redraw_noise_per_batch:
        if not soft:
            raise ValueError("redraw_noise_per_batch=True needs a server model with fit_soft (a TorchClassifier)")
        if model.gamma is None:
            raise ValueError("redraw_noise_per_batch=True needs noise (gamma)")
    check_public_classes(model.classes)
    if model.classes is not None and model.multilabel:
        raise ValueError("classes applies to single-label parties; with multilabel=True the labels are the "
                         f"indices 0..L-1 already, got classes={model.classes!r}")
    _check_secure_settings(model)


def _check_secure_settings(model: Any) -> None:
    """Secure aggregation with distributed Skellam noise: its keywords go together, on the public integer grid."""
    check_choice("aggregator", model.aggregator, AGGREGATORS)
    if not isinstance(model.secure_aggregation, bool):
        raise TypeError(f"secure_aggregation must be a bool, got {model.secure_aggregation!r}")
    if model.secure_aggregation != (model.aggregator == SECURE_AGGREGATOR):
        raise ValueError(
            "secure_aggregation=True and aggregator='skellam' go together (the parties add the Skellam noise in "
            f"shares, which only a secure sum keeps private); got secure_aggregation={model.secure_aggregation!r}, "
            f"aggregator={model.aggregator!r}")
    if not model.secure_aggregation:
        if model.sigma is not None:
            raise ValueError(f"sigma applies to aggregator='skellam' only; got sigma={model.sigma!r} with "
                             f"aggregator={model.aggregator!r}")
        if model.collusion is not None:
            raise ValueError(f"collusion applies to secure_aggregation=True only (the parties colluding with the "
                             f"coordinator against secure aggregation); got collusion={model.collusion!r}")
        return
    if model.collusion is not None:
        check_int_at_least("collusion", model.collusion, 0)
    if model.sigma is None:
        raise ValueError("sigma is required with aggregator='skellam' (the Skellam noise's standard deviation, in "
                         "grid steps Z/S), got None")
    check_positive_finite("sigma", model.sigma)
    refusals = (
        (model.gamma is not None, f"gamma={model.gamma!r}", "gamma=None (the parties' Skellam shares are the noise)"),
        (model.clip is None or model.quantization_scale is None,
         f"clip={model.clip!r}, quantization_scale={model.quantization_scale!r}",
         "clip > 0 and quantization_scale >= 1 (the integer grid the shares are added on)"),
        (model.quantizer != "public", f"quantizer={model.quantizer!r}",
         "quantizer='public' (the paper's grid is set from the parties' logits after they are sent)"),
        (model.weighting == "class-count", "weighting='class-count'",
         "weighting='uniform' or 'auto' (class counts would travel in clear)"),
        (model.redraw_noise_per_batch, "redraw_noise_per_batch=True", "redraw_noise_per_batch=False (the sum is "
         "released once)"),
    )
    for refused, given, needed in refusals:
        if refused:
            raise ValueError(f"secure_aggregation=True needs {needed}; got {given}")


# --- the server's noisy ensemble ----------------------------------------------------------------------
class NoisyLogitEnsemble:
    """The server's release a_c = Σ_k ω_k^c Q(z^{ck}; S) + Lap(1/γ) (FedKD Eq. 4), noise drawn once and cached.

    Parameters
    ----------
    ensemble : ndarray of shape (n_public, C)
        The weighted sum of the parties' quantized logits (noise-free; server-private).
    gamma : float or None
        Laplace noise of scale 1/γ; None adds none.
    rng : numpy Generator
        The noise's generator: the server's :class:`~privfed.accounting.NoiseSource`'s ``generator``
        (:func:`server_noise_source`), never one derived from ``random_state``.
    redraw : bool, default=False
        False: the noise is drawn on the first :meth:`read` and every later read
        returns the same array (one draw per example and class). True: every read
        draws fresh noise (FedKD's code, per batch), and :attr:`draws` counts the
        reads, which the ledger charges as ``draws_per_example``.
    """

    def __init__(self, ensemble: np.ndarray, *, gamma: float | None, rng: np.random.Generator, redraw: bool = False):
        self._ensemble = np.asarray(ensemble, dtype=float)
        self._gamma = gamma
        self._rng = rng
        self._redraw = redraw
        self.latest: np.ndarray | None = None
        self.draws = 0

    @property
    def n_outputs(self) -> int:
        """C, the classes (or labels) per example."""
        return self._ensemble.shape[1]

    def read(self) -> np.ndarray:
        """The noisy ensemble (n_public, C): the cached draw, or a fresh one with ``redraw=True``."""
        if self.latest is None or self._redraw:
            noise = 0.0 if self._gamma is None else self._rng.laplace(0.0, 1.0 / self._gamma, self._ensemble.shape)
            self.latest = self._ensemble + noise
            self.latest.setflags(write=False)
            self.draws += 1
        return self.latest


def server_noise_source(noise: NoiseSource) -> NoiseSource:
    """The server's noise source: child 0 of the run's root source ``noise`` (the parties' are children
    1..n, :func:`~privfed.pipelines.fedkd.steps.party_noise_seeds`); a fresh secret source for a secret root."""
    return NoiseSource.for_task(noise.child_seeds(1)[0])


# --- bandwidth ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BandwidthReport:
    """Bytes each party uploads in FedKD, beside what FedAvg would upload for the same local model (FedKD Table 1).

    FedKD: |public| × C logits at ``bits_per_value`` bits (⌈log₂(2S + 1)⌉ for S
    quantization steps each side of 0, 32 unquantized), packed, plus C class counts
    (int32) with class-count weighting; once. FedAvg: the model's parameters as
    float32, uploaded once per round (downloads not counted, for either).
    """

    n_public: int
    n_outputs: int
    bits_per_value: int
    class_count_bytes: int
    parameter_counts: tuple[int | None, ...]

    @property
    def logit_bytes(self) -> int:
        """Bytes of one party's quantized logits, packed at ``bits_per_value`` bits."""
        return math.ceil(self.n_public * self.n_outputs * self.bits_per_value / 8)

    @property
    def bytes_per_party(self) -> int:
        """FedKD's total upload per party: logits plus class counts."""
        return self.logit_bytes + self.class_count_bytes

    def fedavg_bytes(self, rounds: int) -> list[int | None]:
        """Per party: parameters × 4 bytes × ``rounds`` (None where the model has no parameter vector,
        e.g. a forest)."""
        rounds = check_int_at_least("rounds", rounds, 1)
        return [None if count is None else count * FLOAT_BYTES * rounds for count in self.parameter_counts]


def paper_quantized(messages: Sequence[np.ndarray], *, quantization_scale: int) -> tuple[list[np.ndarray], float]:
    """FedKD's own quantizer (Gong et al. 2022, Eq. 4), with z_max taken from the parties' logits.

        z_max = max_{i,c,k} |z_i^{ck}|,    Q(z; S) = ⌈S·z / (2·z_max)⌉ · 2·z_max / S,

    a grid of step 2·z_max/S (privfed's default quantizer has step Z/S on the public range, so
    the paper's S is about twice privfed's for the same step). ``messages`` are the parties'
    logits as they would send them unquantized (already clipped to the public Z when there is
    one, so z_max ≤ Z). Every value lands in [−z_max, z_max·2⌈S/2⌉/S]. z_max depends on every
    party's data and is shared with all of them to set the grid: a data-dependent release that
    no mechanism covers (the ledger records it as unaccounted). Returns the quantized logits and z_max.
    """
    z_max = max(float(np.max(np.abs(z))) for z in messages)
    if z_max == 0.0:
        return [np.zeros_like(z, dtype=float) for z in messages], z_max
    scale = quantization_scale
    # ⌈S·z/(2 z_max)⌉ for |z| <= z_max lies in [−⌊S/2⌋, ⌈S/2⌉]; the clip only absorbs floating-point rounding.
    levels = [np.clip(np.ceil(scale * np.asarray(z, dtype=float) / (2.0 * z_max)), -(scale // 2), -(-scale // 2))
              for z in messages]
    return [level * (2.0 * z_max / scale) for level in levels], z_max


# --- the server step ------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class FedKDFit:
    """The server step's result: the fitted attributes of a FedKD estimator (named as they are there, less ``_``)."""

    weighting: str
    z_max: float | None
    weights: np.ndarray
    server_model: Any
    server_classes: np.ndarray
    distillation: str
    noisy_ensemble: np.ndarray
    draws_per_example: int
    bandwidth: BandwidthReport
    ledger: Ledger
    epsilon: float


def fedkd_server_step(model: Any, results: list[FedKDLogits] | FedKDLevelSum, public: np.ndarray,
                      server_seeds: np.random.SeedSequence, seed: int,
                      trainings: list[Mechanism | None] | None = None, *,
                      noise: NoiseSource | None = None, schemas: Sequence[PartySchema] | None = None) -> FedKDFit:
    """Server side of FedKD for the validated estimator ``model`` (Algorithm 1, lines 6–12).

    Parameters
    ----------
    model : FedKD
        The estimator whose settings the server runs (it is not modified).
    results : list of FedKDLogits or FedKDLevelSum
        The parties' replies, in party order; under secure aggregation, the sum of their noisy levels.
    public : ndarray
        The public set the logits are computed on.
    server_seeds : SeedSequence
        The server's ``random_state`` stream (the distillation's initialisation and shuffles; never noise).
    seed : int
        The run's ``random_state`` entropy, recorded in the ledger.
    trainings : list of Mechanism or None, default=None
        Each party's local DP-SGD training (None: not DP-trained), from its ``dp-training`` report.
    noise : NoiseSource, default=None
        The run's root noise source (the one whose children seeded the parties' tasks); the server draws
        from its child :func:`server_noise_source`, and the ledger records the root. None: a secret one.
    schemas : sequence of PartySchema, default=None
        The parties' schemas as the server received them (None: the exchange sent sizes and labels, as for
        ``fit_logits``); the ledger records the exchange unless every party withheld them.
    """
    noise = NoiseSource.secret() if noise is None else noise
    if isinstance(results, FedKDLevelSum):
        return _secure_server_step(model, results, public, server_seeds, seed, trainings, noise=noise,
                                   schemas=schemas)
    counts = np.stack([r.class_counts for r in results])
    n_parties, n_outputs = counts.shape
    weighting = resolved_weighting(model)
    z_max = None
    if model.quantizer == "paper":
        quantized, z_max = paper_quantized([r.quantized_logits for r in results],
                                           quantization_scale=model.quantization_scale)
        results = [FedKDLogits(z, r.class_counts, r.parameter_count) for z, r in zip(quantized, results)]
    weights = (class_count_weights(counts) if weighting == "class-count"
               else np.full((n_parties, n_outputs), 1.0 / n_parties))
    ensemble = np.einsum("kc,knc->nc", weights, np.stack([r.quantized_logits for r in results]))
    server_rng = np.random.default_rng(server_seeds)
    gamma = model.gamma
    if gamma is not None:
        record_draw("FedKD server ensemble noise", "laplace", scale=1.0 / gamma)
    noisy = NoisyLogitEnsemble(ensemble, gamma=gamma, rng=server_noise_source(noise).generator,
                               redraw=model.redraw_noise_per_batch)
    server_model, server_classes, distillation = _distill(model, noisy, public, server_rng)
    bandwidth = BandwidthReport(
        n_public=len(public),
        n_outputs=n_outputs,
        bits_per_value=32 if model.quantization_scale is None else math.ceil(math.log2(_levels(model))),
        class_count_bytes=n_outputs * COUNT_BYTES if weighting == "class-count" else 0,
        parameter_counts=tuple(None if r.parameter_count < 0 else r.parameter_count for r in results),
    )
    ledger = _ledger(model, public, n_parties, n_outputs, seed, trainings or [None] * n_parties,
                     weighting=weighting, weights=weights, draws_per_example=noisy.draws, noise=noise, schemas=schemas)
    assert noisy.latest is not None  # the distillation read the noisy ensemble (epochs >= 1)
    return FedKDFit(
        weighting=weighting, z_max=z_max, weights=weights, server_model=server_model, server_classes=server_classes,
        distillation=distillation, noisy_ensemble=noisy.latest, draws_per_example=noisy.draws, bandwidth=bandwidth,
        ledger=ledger, epsilon=ledger.account(delta=model.delta).epsilon if model.gamma is not None else math.inf,
    )


def _secure_server_step(model: Any, level_sum: FedKDLevelSum, public: np.ndarray,
                        server_seeds: np.random.SeedSequence, seed: int, trainings: list[Mechanism | None] | None,
                        *, noise: NoiseSource, schemas: Sequence[PartySchema] | None) -> FedKDFit:
    """The server step on the securely aggregated noisy levels: ensemble = (Z/S)·sum/n (uniform weights), no
    server noise; the ledger's release is the Skellam mechanism (:mod:`privfed.pipelines.fedkd.secure`)."""
    n_parties = level_sum.n_parties
    n_outputs = level_sum.level_sum.shape[1]
    ensemble = level_sum.level_sum * (float(model.clip) / model.quantization_scale) / n_parties
    noisy = NoisyLogitEnsemble(ensemble, gamma=None, rng=server_noise_source(noise).generator)
    server_model, server_classes, distillation = _distill(model, noisy, public, np.random.default_rng(server_seeds))
    bound = secure_value_bound(model.quantization_scale, skellam_share_variance(model.sigma, n_parties))
    bandwidth = BandwidthReport(n_public=len(public), n_outputs=n_outputs,
                                bits_per_value=math.ceil(math.log2(2 * bound + 1)), class_count_bytes=0,
                                parameter_counts=(None,) * n_parties)
    weights = np.full((n_parties, n_outputs), 1.0 / n_parties)
    ledger = _ledger(model, public, n_parties, n_outputs, seed, trainings or [None] * n_parties,
                     weighting="uniform", weights=weights, draws_per_example=1, noise=noise, schemas=schemas,
                     level_sum=level_sum)
    assert noisy.latest is not None  # the distillation read the noisy ensemble (epochs >= 1)
    return FedKDFit(
        weighting="uniform", z_max=None, weights=weights, server_model=server_model, server_classes=server_classes,
        distillation=distillation, noisy_ensemble=noisy.latest, draws_per_example=1, bandwidth=bandwidth,
        ledger=ledger, epsilon=ledger.account(delta=model.delta).epsilon,
    )


def _levels(model: Any) -> int:
    """Grid points a quantized logit can take: 2S + 1 (step Z/S on [−Z, Z]) or S + 1 (the paper's Eq. 4)."""
    return 2 * model.quantization_scale + 1 if model.quantizer == "public" else model.quantization_scale + 1


def _distill(model: Any, noisy: NoisyLogitEnsemble, public: np.ndarray, rng: np.random.Generator
             ) -> tuple[Any, np.ndarray, str]:
    """Train the server model on the public set from the noisy ensemble (FedKD Algorithm 1, lines 8–12).

    Returns the fitted server model, the class codes its outputs stand for, and how it learned.
    """
    server = clone(model.server_model)
    if is_torch_classifier(server):
        overrides = {"epochs": model.distill_epochs, "batch_size": model.batch_size}
        server.set_params(**{k: v for k, v in overrides.items() if v is not None})
        if "random_state" in server.get_params(deep=False):
            server.set_params(random_state=int(rng.integers(2**31)))
        temperature = 1.0 if model.temperature is None else float(model.temperature)
        classes = np.arange(noisy.n_outputs)

        def fit_on(targets: np.ndarray, warm_start: bool) -> None:
            if model.loss == "kl":
                server.fit_soft(public, softmax(targets / temperature, axis=1), loss="kl",
                                temperature=temperature, classes=classes, warm_start=warm_start)
            else:
                server.fit_soft(public, targets, loss=model.loss, classes=classes, warm_start=warm_start)

        if model.redraw_noise_per_batch:
            epochs = server.get_params()["epochs"]
            server.set_params(epochs=1)
            for epoch in range(epochs):
                fit_on(noisy.read(), warm_start=epoch > 0)
            server.set_params(epochs=epochs)
        else:
            fit_on(noisy.read(), warm_start=False)
        return server, classes, f"soft targets: fit_soft(loss={model.loss!r}" + (
            f", temperature={temperature:g})" if model.loss == "kl" else ")")
    targets = noisy.read()
    if model.multilabel:
        fitted = with_seed(server, int(rng.integers(2**31))).fit(public, (targets > 0).astype(np.int64))
        return fitted, np.arange(targets.shape[1]), (
            "hard pseudo-labels: the noisy ensemble's positive entries (server model has no fit_soft)")
    fitted = fit_classifier(server, public, targets.argmax(axis=1), n_classes=targets.shape[1],
                            seed=int(rng.integers(2**31)))
    if fitted.estimator is None:
        raise ValueError("the noisy ensemble's argmax holds a single class: the server model cannot be trained")
    return fitted.estimator, fitted.classes, (
        "hard pseudo-labels: argmax of the noisy ensemble (server model has no fit_soft)")


# --- accounting -----------------------------------------------------------------------------------------
def _ledger(model: Any, public: np.ndarray, n_parties: int, n_outputs: int, seed: int,
            trainings: list[Mechanism | None], *, weighting: str, weights: np.ndarray,
            draws_per_example: int, noise: NoiseSource, schemas: Sequence[PartySchema] | None,
            level_sum: FedKDLevelSum | None = None) -> Ledger:
    """The releases; with DP-trained local models also their training, which every release but the class
    counts is derived from (logits of the DP models on public data, their noisy ensemble, the server model).
    ``level_sum``: the securely aggregated noisy levels, whose Skellam release both observers see."""
    ledger = Ledger(
        delta=model.delta,
        primary_unit="party",
        seeds={"random_state": seed},
        public_data_sha256=data_fingerprint({"public": public}),
        description=(
            f"FedKD server model: {n_parties} parties, {len(public)} public examples, "
            f"S = {model.quantization_scale} ({model.quantizer} quantizer), "
            + (f"Skellam σ = {model.sigma} grid steps under secure aggregation" if level_sum is not None
               else f"γ = {model.gamma}")
            + f", Z = {model.clip}, {weighting} weights, {type(model.server_model).__name__} server"
        ),
    )
    derived = record_local_training(ledger, trainings, what="FedKD local models")
    if level_sum is not None:
        releases = skellam_logit_releases(model, level_sum)
        what = (
            f"secure aggregation of the parties' quantized logit levels on {len(public)} public examples "
            f"(S = {model.quantization_scale}, Z = {model.clip:g}), each with its Skellam share "
            f"(σ²/n = {skellam_share_variance(model.sigma, n_parties):g} grid steps²); the coordinator receives "
            f"only the sum of {level_sum.n_contributors} of {n_parties} parties' levels, carrying Skellam noise "
            f"of realised variance {releases['party'].variance:g}; uniform weights 1/n; one party moves each of "
            f"its {n_outputs} levels by at most 2S per public example (ℓ1 2SC, ℓ2 2S√C); example level = party "
            "level (one example may change a whole local model)"
        )
        ledger.record(releases, note=f"{what}; the public sees the server model distilled from it (post-processing)",
                      derived_from_training=derived, observers=("public",))
        colluders, honest = colluding_parties(model, n_parties), honest_contributors(model, level_sum)
        guarded = skellam_logit_releases(model, level_sum, contributors=honest)
        ledger.record(
            guarded,
            note=(f"{what}; against the coordinator: assumes the coordinator colludes with at most {colluders} of "
                  f"the {n_parties} parties (the colluders subtract their own shares, leaving "
                  + ("the target's own share" if honest == 1 else f"the shares of {honest} honest contributors")
                  + f", variance {guarded['party'].variance:g})"),
            derived_from_training=derived, observers=("coordinator",),
            assumptions=(
                f"the coordinator colludes with at most {colluders} of the {n_parties} parties",
                "secure aggregation reveals only the sum of the shares to the coordinator (Flower's SecAgg+ over "
                "the network; in process, a function standing in for it)",
            ),
        )
        record_schema_exchange(ledger, schemas)
        ledger.record_noise_source(noise)
        return ledger
    # Class-count weights are computed from the raw labels: the ensemble is then not post-processing of the
    # DP training alone (its own mechanism still covers it, whatever the weights).
    class_count = weighting == "class-count"
    if model.gamma is None:
        ledger.record_unaccounted("FedKD without noise (gamma=None): the ensemble is released as it is; "
                                  "no guarantee", derived_from_training=derived and not class_count)
    else:
        # The paper's grid keeps values within z_max·2⌈S/2⌉/S, z_max <= Z (clipped first): a public bound.
        bound = float(model.clip) * (1.0 if model.quantizer == "public"
                                     else 2 * math.ceil(model.quantization_scale / 2) / model.quantization_scale)
        release = {
            unit: QuantizedLaplaceEnsemble(
                n_outputs, bound, float(model.gamma), len(public), weights=None if class_count else weights,
                quantization_scale=int(model.quantization_scale), draws_per_example=draws_per_example,
                unit=unit,
            )
            for unit in ("party", "example")
        }
        ledger.record(
            release,
            note=(
                f"noisy {weighting}-weighted ensemble of quantized logits on {len(public)} public examples, "
                f"Laplace scale 1/γ = {1 / model.gamma:g}, {draws_per_example} draw(s) per example; "
                "example level = party level (one example may change a whole local model)"
            ),
            derived_from_training=derived and not class_count,
        )
        ledger.record_unaccounted(
            "FedKD: each party's quantized logits reach the coordinator before noise is added; the guarantee "
            "covers the noisy ensemble and the server model (the public), not the coordinator's view",
            derived_from_training=derived, observers=("coordinator",),
        )
    if model.quantizer == "paper":
        ledger.record_unaccounted(
            "FedKD: the paper's quantizer (Eq. 4) takes z_max = max |logit| over every party's logits on the "
            "public set, computed by the coordinator and shared with every party to set the grid of step "
            "2·z_max/S: a data-dependent value that no mechanism covers (the parties see it too; the ledger "
            "does not publish it)"
            + ("" if model.gamma is None else f"; the public's ε rests on the public clip Z = {model.clip:g} "
               "applied first, not on z_max"),
            derived_from_training=derived,  # max |logit| of the (DP-trained) models on public data
            observers=("coordinator",),
        )
    if class_count:
        ledger.record_unaccounted(
            f"FedKD: per-party class counts N_k^c ({n_parties} × {n_outputs} integers) are sent to the coordinator "
            "in clear to compute the weights ω; no mechanism covers them (weighting='uniform' sends none)",
            observers=("coordinator",),
        )
    record_schema_exchange(ledger, schemas)
    ledger.record_noise_source(noise)
    return ledger
