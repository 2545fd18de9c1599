"""Selective-FD (and FedMD, independent learning) as party steps and server steps over explicit messages.

The exchange, after the schema exchange of :mod:`privfed.pipelines.data.party_schema`:

1. server → party, once, :class:`SelectiveFDSetup`: the proxy (public) set, the classes, the party's
   seed (and, under the ``noise_seed=`` opt-in only, its noise seed) and the protocol's client-side settings
   (local and distillation steps, hard or soft labels, temperature, randomized response's keep probability, the
   client-side selector's hyper-parameters). The party seeds its model and fits its client-side selector on its
   own data (:func:`setup_client`): the raw-data KuLSIF selector, or the differentially private one
   (:mod:`~privfed.pipelines.selective_fd.dp_selector`), whose only use of the data is one Gaussian-noised sum.
2. every round, server → party, :class:`SelectiveFDRound`: the positions of the round's proxy batch in
   the proxy set and the party's seed for the round (and, under the opt-in only, its noise seed for the round).
   The party trains (``local_steps`` mini-batches, or a refit), predicts the batch, applies its selector and,
   under ``privacy="rr"``, randomized response (:func:`share_step`) — all on the party — and replies
3. party → server, :class:`SelectiveFDShare`: the share mask over the batch and its (perturbed)
   predictions on the shared examples only. Nothing is sent for an example it withholds.
4. server: :func:`server_round` aggregates (:func:`aggregate_predictions`), applies its selector
   (:func:`confident_examples`) or its noisy argmax (GNMax, Confident GNMax), then
   server → party, :class:`SelectiveFDEnsemble`: the kept positions, their targets and the party's
   seed; the party distils (:func:`distill_step`).
5. after the last round, only when a client model trains with DP-SGD: party → server, its ``dp-training``
   report (:func:`training_step`: σ, q and steps of its rounds' DP-SGD composed), which the server checks
   against the model's DP configuration and records in the ledger.

Independent learning runs steps 1–2 with nothing shared (empty replies). The server's round loop,
history and ledger are :class:`~privfed.pipelines.selective_fd.server.FDServer`, which ``fit`` drives over
:class:`LocalClients` (the party steps in this process, through the executor) and the Flower app over its
SuperNodes: the same steps, the same messages.

A party's state between rounds (:class:`FDClient`) is its model, its fitted selector, its selector's
score of each proxy example drawn so far, for models refitted every round the proxy examples it has
distilled from and the seed of its last fit, and for DP-SGD-trained models its rounds' releases.
:func:`client_state` turns it into records of arrays and scalars (torch weights and optimizer state as
arrays, the selector's fitted arrays — no pickle) and :func:`restore_client` rebuilds it exactly; a
refitted scikit-learn model is refitted from its seed.

Randomness. Every draw a guarantee relies on is made by the party or the server that adds it, from a
:class:`~privfed.accounting.NoiseSource` it builds itself from the message's ``noise_seed`` — None by default, so a
fresh secret source (:meth:`NoiseSource.for_task`): the DP selector's Gaussian noise (setup), randomized
response's coins and the DP-SGD noise and Poisson sampling of each round's local training (round), the server's
GNMax noise (:func:`server_round`). The ``seed`` fields (from ``random_state``) seed what no guarantee relies on:
model initialisation, the selectors' public draws, mini-batch order, refit seeds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
from privfed.accounting import DPSGD, RandomizedResponse, compose_dpsgd, randomized_response_estimate
from privfed.accounting.documents import parse_json
from privfed.accounting.mechanism import Mechanism
from privfed.accounting.noise_source import NoiseSource

from ..data.party_data import class_codes
from ..models.fitting import fit_classifier, is_dp_trained, with_noise_seed, with_seed
from ..protocol.dp_ledger import training_report
from ..protocol.executor import PartyTask, run_party_tasks
from ..protocol.messages import ArraySpec, MessageError, Record, WireMessage
from ..protocol.run_parameters import record_draw
from ..protocol.silo_gate import BudgetRefusal, Refusal, RefusedRunError, admit
from ..protocol.voting import break_ties_at_random
from .dp_selector import DPDensityRatioSelector, selector_mechanism
from .kulsif import DensityRatioSelector

__all__ = [
    "SERVER_NOISE_MODES",
    "STATE_KIND",
    "FDClient",
    "FDProtocol",
    "LocalClients",
    "RoundOutcome",
    "SelectiveFDEnsemble",
    "SelectiveFDRound",
    "SelectiveFDSetup",
    "SelectiveFDShare",
    "aggregate_predictions",
    "client_from_state",
    "client_state",
    "confident_examples",
    "continues_training",
    "planned_publish_release",
    "planned_round_release",
    "planned_setup_release",
    "distill_step",
    "randomized_codes",
    "receive_shares",
    "restore_client",
    "server_round",
    "setup_client",
    "setup_messages",
    "share_step",
    "training_rows",
    "training_step",
]

#: Modes in which the server releases noisy argmaxes of the clients' hard-label votes.
SERVER_NOISE_MODES = ("gnmax", "confident-gnmax")
#: The kind of the record :func:`client_state` stores beside the setup message.
STATE_KIND = "selective-fd-client-state"


# --- the client's randomized response ---------------------------------------------------------------
def randomized_codes(codes: np.ndarray, keep_probability: float, n_classes: int, coins: np.random.Generator
                     ) -> np.ndarray:
    """Randomized response on class codes: each kept w.p. ``keep_probability``, else a uniform class (``coins``:
    the client's secret noise generator)."""
    replaced = coins.random(len(codes)) >= keep_probability
    return np.where(replaced, coins.integers(n_classes, size=len(codes)), codes)


# --- the server's two selection steps (pure functions) ----------------------------------------------
def aggregate_predictions(predictions: np.ndarray, shared: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per example, the equally weighted mean of the predictions of the clients that shared it.

    Parameters
    ----------
    predictions : ndarray of shape (clients, examples, classes)
        Each client's class probabilities (one-hot rows for hard labels).
    shared : bool ndarray of shape (clients, examples)
        Which client shared which example.

    Returns
    -------
    ensemble : ndarray of shape (examples, classes)
        The mean over sharing clients; rows of examples nobody shared are 0.
    sharers : ndarray of shape (examples,)
        How many clients shared each example.
    """
    predictions = np.asarray(predictions, dtype=float)
    shared = np.asarray(shared, dtype=bool)
    if predictions.ndim != 3 or shared.shape != predictions.shape[:2]:
        raise ValueError(
            f"predictions must have shape (clients, examples, classes) and shared (clients, examples); "
            f"got {predictions.shape} and {shared.shape}"
        )
    sharers = shared.sum(axis=0)
    total = np.einsum("ce,cek->ek", shared.astype(float), predictions)
    return total / np.maximum(sharers, 1)[:, None], sharers


def confident_examples(ensemble: np.ndarray, tau_server: float) -> np.ndarray:
    """The server-side selector: keep x where max_c e_c(x) ≥ 1 − τ_server/2.

    Equivalently ‖e(x) − onehot(argmax e(x))‖₁ = 2(1 − max_c e_c(x)) ≤ τ_server;
    τ_server = 2 keeps every example, τ_server = 0 only unanimous ones.
    """
    tau_server = float(tau_server)
    if not 0.0 <= tau_server <= 2.0:
        raise ValueError(f"tau_server must be in [0, 2], got {tau_server!r}")
    return np.asarray(ensemble, dtype=float).max(axis=1) >= 1.0 - tau_server / 2.0 - 1e-12


def training_rows(n: int, steps: int, batch_size: int, rng: np.random.Generator) -> np.ndarray:
    """Row indices for exactly ``steps`` mini-batches of ``batch_size``: shuffled passes over n rows, cut to length."""
    needed = steps * batch_size
    passes = math.ceil(needed / n)
    return np.concatenate([rng.permutation(n) for _ in range(passes)])[:needed]


# --- the run's settings (server side) -----------------------------------------------------------------
@dataclass(frozen=True)
class FDProtocol:
    """The validated settings of one run (the estimator's ``_protocol``); the server's, read-only."""

    rounds: int
    local_steps: int
    distill_steps: int
    proxy_batch: int
    labels: str
    temperature: float
    selector: DensityRatioSelector | DPDensityRatioSelector | None
    tau_server: float
    privacy: str | None
    epsilon_per_round: float | None
    sigma: float | None
    shares: bool
    name: str
    threshold: float | None = None  # Confident GNMax's T (privacy="confident-gnmax")
    sigma_threshold: float | None = None  # and its σ₁


# --- messages -----------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class SelectiveFDSetup(WireMessage):
    """Server → party, once: the proxy set, the classes, the party's seed and the client-side settings.

    ``keep_probability`` is randomized response's β (NaN: no randomized response); ``selects`` says
    whether the party fits a client-side selector, with ``quantile`` (τ_client), ``validation_fraction``,
    ``kernel_width`` (``"median"`` or a number), ``regularization``, ``n_auxiliary``, ``max_known``;
    ``selector_noise`` is the DP selector's σ (:class:`~privfed.pipelines.selective_fd.dp_selector.DPDensityRatioSelector`,
    with ``n_frequencies``; NaN: the raw-data KuLSIF selector). ``noise_seed`` (None, the default, is left out
    of the record): the seed of the party's DP-selector noise, only under the estimator's ``noise_seed=`` opt-in.
    """

    KIND: ClassVar[str] = "selective-fd-setup"
    ARRAYS: ClassVar = {"proxy": ArraySpec("iuf", None), "classes": ArraySpec("iufbU", 1)}

    proxy: np.ndarray
    classes: np.ndarray
    seed: int
    local_steps: int
    distill_steps: int
    labels: str
    temperature: float
    shares: bool
    keep_probability: float
    selects: bool
    quantile: float
    validation_fraction: float
    kernel_width: str
    regularization: float
    n_auxiliary: int
    max_known: int
    selector_noise: float = math.nan
    n_frequencies: int = 0
    noise_seed: int | None = None


@dataclass(frozen=True, eq=False)
class SelectiveFDRound(WireMessage):
    """Server → party, each round: positions of the proxy batch in the proxy set, the party's seed.

    ``noise_seed`` (None, the default, is left out of the record): the seed of the round's randomized-response
    coins and DP-SGD noise, only under the estimator's ``noise_seed=`` opt-in.
    """

    KIND: ClassVar[str] = "selective-fd-round"
    ARRAYS: ClassVar = {"batch": ArraySpec("iu", 1)}

    batch: np.ndarray
    seed: int
    noise_seed: int | None = None


@dataclass(frozen=True, eq=False)
class SelectiveFDShare(WireMessage):
    """Party → server: which batch examples it shares (batch,), and its predictions on those only.

    Soft labels: tempered probabilities, shape (shared, C). Hard labels: class codes, shape (shared,)
    (after randomized response under ``privacy="rr"``).
    """

    KIND: ClassVar[str] = "selective-fd-share"
    ARRAYS: ClassVar = {"shared": ArraySpec("b", 1), "predictions": ArraySpec("iuf", None)}

    shared: np.ndarray
    predictions: np.ndarray


@dataclass(frozen=True, eq=False)
class SelectiveFDEnsemble(WireMessage):
    """Server → party: the kept positions in the proxy set, their targets ((k, C) soft or (k,) codes), a seed."""

    KIND: ClassVar[str] = "selective-fd-ensemble"
    ARRAYS: ClassVar = {"rows": ArraySpec("iu", 1), "targets": ArraySpec("iuf", None)}

    rows: np.ndarray
    targets: np.ndarray
    seed: int


def setup_messages(
    protocol: FDProtocol, classes: np.ndarray, proxy: np.ndarray | None, seeds: Sequence[int],
    keep_probability: float | None, *, noise_seeds: Sequence[int | None] | None = None,
) -> list[SelectiveFDSetup]:
    """One :class:`SelectiveFDSetup` per party (``seeds``: one per party; ``noise_seeds``: one per party, None
    each by default — every party draws its noise from its own secret source)."""
    selector = protocol.selector
    selector_settings: dict[str, Any] = dict(selects=False, quantile=0.0, validation_fraction=0.0,
                                             kernel_width="median", regularization=0.0, n_auxiliary=0, max_known=0)
    if selector is not None:
        selector_settings = dict(
            selects=True, quantile=float(selector.quantile),
            kernel_width=str(selector.kernel_width) if selector.kernel_width == "median"
            else repr(float(selector.kernel_width)),
            regularization=float(selector.regularization), n_auxiliary=int(selector.n_auxiliary),
        )
        if isinstance(selector, DPDensityRatioSelector):
            selector_settings.update(validation_fraction=0.0, max_known=0,
                                     selector_noise=float(selector.noise_multiplier),
                                     n_frequencies=int(selector.n_frequencies))
        else:
            selector_settings.update(validation_fraction=float(selector.validation_fraction),
                                     max_known=int(selector.max_known))
    proxy = np.zeros((0, 0)) if proxy is None else proxy
    return [
        SelectiveFDSetup(
            proxy=proxy, classes=classes, seed=int(seed), local_steps=protocol.local_steps,
            distill_steps=protocol.distill_steps, labels=protocol.labels, temperature=protocol.temperature,
            shares=protocol.shares, keep_probability=math.nan if keep_probability is None else float(keep_probability),
            noise_seed=noise_seed, **selector_settings,
        )
        for seed, noise_seed in zip(seeds, [None] * len(seeds) if noise_seeds is None else noise_seeds, strict=True)
    ]


# --- what a party's replies cost its silo's budget (public parameters only, before its data is touched) ---
def planned_setup_release(setup: SelectiveFDSetup) -> Mechanism | str | None:
    """What the setup step releases: the DP selector's one Gaussian-noised sum (example level; its share masks
    in every round are post-processing of it), nothing without a client-side selector (None), or the reason no
    silo can charge it (the raw-data KuLSIF selector releases its decisions without noise)."""
    if not setup.shares or not setup.selects:
        return None
    if math.isnan(setup.selector_noise):
        return ("Selective-FD's raw-data KuLSIF selector releases which proxy examples the party shares without "
                "noise: no bound a silo could charge (use the DP selector, dp_selector=True)")
    return selector_mechanism(setup.selector_noise)


def _one_round_of_dp_sgd(local_model: Any) -> DPSGD | None:
    """The DP-SGD release of one round's local training (one Poisson epoch) from the model's public configuration;
    None when the model does not train with DP-SGD at a public sample rate."""
    config = getattr(local_model, "dp", None)
    if not continues_training(local_model) or config is None or not config.public_sample_rate:
        return None
    from ..models.dp_training import plan_release  # torch: imported only for a DP-trained (torch) model

    return plan_release(config, n=1, batch_size=local_model.batch_size, epochs=1)


def planned_round_release(setup: SelectiveFDSetup, message: SelectiveFDRound, *, local_model: Any
                          ) -> Mechanism | str | None:
    """What the party's reply to a round message releases, from the setup's and the round's public parameters
    and its own model's configuration.

    Under randomized response (``keep_probability`` < 1) the round's report: K-ary randomized response of the
    batch's labels, party level (it bounds the labels whatever model computed them; the share mask is the
    selector's, charged at setup). Otherwise the predictions reach the coordinator in the clear and only the
    round's DP-SGD training bounds them (example level); the reason no silo can charge the round when the model
    does not train with DP-SGD. Nothing (None) when nothing is shared (independent learning).
    """
    if not setup.shares:
        return None
    if not math.isnan(setup.keep_probability):
        if setup.keep_probability >= 1.0:
            return "Selective-FD with keep probability 1 sends the labels un-randomized: no bound a silo could charge"
        return RandomizedResponse(len(setup.classes), keep_probability=setup.keep_probability,
                                  labels_per_report=max(1, len(message.batch)), unit="party")
    training = _one_round_of_dp_sgd(local_model)
    if training is None:
        return ("Selective-FD sends the coordinator the party's predictions without randomized response, and its "
                "model is not DP-trained with a public sample_rate: no bound for the coordinator")
    return training


def planned_publish_release(setup: SelectiveFDSetup, *, local_model: Any, trainings: Sequence[DPSGD]
                            ) -> Mechanism | str | None:
    """What sending the party's model to be published releases, its rounds' DP-SGD ``trainings`` (their public
    parameters) done: nothing new (None) when every round was charged its DP-SGD training (the model is
    post-processing of it), the trainings composed otherwise, or the reason no silo can charge a model trained
    without DP-SGD."""
    if _one_round_of_dp_sgd(local_model) is None:
        return "the published model is trained on the party's data without DP-SGD: no bound a silo could charge"
    if not trainings or (setup.shares and math.isnan(setup.keep_probability)):
        return None
    return compose_dpsgd(trainings)


# --- the party: its state and its steps ---------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class FDClient:
    """One party's private state between rounds (never sent to the server)."""

    setup: SelectiveFDSetup
    X: np.ndarray
    y: np.ndarray  # class codes 0..C-1
    prototype: Any  # the unfitted, seeded model
    model: Any = None  # a partial-fit estimator, a FittedClassifier, or None before the first fit
    selector: DensityRatioSelector | DPDensityRatioSelector | None = None
    proxy_scores: np.ndarray | None = None  # the selector's r̂ of each proxy example, NaN until first drawn
    distilled_rows: np.ndarray | None = None  # refitted models: positions of every distilled proxy example
    distilled_codes: np.ndarray | None = None  # and their hard labels
    fit_seed: int | None = None  # refitted models: the seed of the last fit
    trainings: tuple[Any, ...] = ()  # DP-trained models: the DP-SGD release of each round's local training


def continues_training(model: Any) -> bool:
    """Whether ``model`` keeps training across rounds (``partial_fit`` and ``partial_fit_soft``)."""
    return callable(getattr(model, "partial_fit", None)) and callable(getattr(model, "partial_fit_soft", None))


def _unfitted_selector(setup: SelectiveFDSetup, feature_map: Callable | None, seed: int
                       ) -> DensityRatioSelector | DPDensityRatioSelector:
    width = setup.kernel_width if setup.kernel_width == "median" else float(setup.kernel_width)
    if not math.isnan(setup.selector_noise):
        return DPDensityRatioSelector(
            quantile=setup.quantile, noise_multiplier=setup.selector_noise, n_frequencies=setup.n_frequencies,
            kernel_width=width, regularization=setup.regularization, n_auxiliary=setup.n_auxiliary,
            feature_map=feature_map, random_state=seed, noise_seed=setup.noise_seed,
        )
    return DensityRatioSelector(
        quantile=setup.quantile, validation_fraction=setup.validation_fraction, feature_map=feature_map,
        kernel_width=width, regularization=setup.regularization, n_auxiliary=setup.n_auxiliary,
        max_known=setup.max_known, random_state=seed,
    )


def _new_client(setup: SelectiveFDSetup, X: np.ndarray, y: np.ndarray, local_model: Any, party: str
                ) -> tuple[FDClient, int]:
    """The client before any fit (codes checked against the classes), and its selector's seed."""
    codes = class_codes(setup.classes, y, party=party)
    selector_seed, model_seed = (int(s.generate_state(1)[0]) for s in np.random.SeedSequence(setup.seed).spawn(2))
    client = FDClient(setup=setup, X=X, y=codes, prototype=with_seed(local_model, model_seed))
    return client, selector_seed


def setup_client(
    setup: SelectiveFDSetup, X: np.ndarray, y: np.ndarray, *, local_model: Any,
    feature_map: Callable[[np.ndarray], np.ndarray] | None = None, party: str = "party",
) -> FDClient:
    """Party step 1: seed the model and fit the client-side selector on the party's own data (the DP selector:
    one Gaussian-noised sum of its data, then the public proxy set only)."""
    client, selector_seed = _new_client(setup, X, y, local_model, party)
    if not setup.selects:
        return client
    selector = _unfitted_selector(setup, feature_map, selector_seed)
    selector = (selector.fit(X, public=setup.proxy) if isinstance(selector, DPDensityRatioSelector)
                else selector.fit(X))
    return replace(client, selector=selector, proxy_scores=np.full(len(setup.proxy), np.nan))


def _refit(client: FDClient, seed: int) -> Any:
    """A from-scratch fit on the local data plus the distilled proxy examples (non-continuing models)."""
    X, y = client.X, client.y
    if client.distilled_rows is not None:
        X = np.concatenate([X, client.setup.proxy[client.distilled_rows]])
        y = np.concatenate([y, client.distilled_codes])
    return fit_classifier(client.prototype, X, y, n_classes=len(client.setup.classes), seed=seed)


def share_step(client: FDClient, message: SelectiveFDRound) -> tuple[FDClient, SelectiveFDShare | None]:
    """Party step 2: local training, then (when the protocol shares) the selected, perturbed predictions.

    The round's randomized-response coins and DP-SGD noise come from the party's own sources (secret unless the
    message carries a ``noise_seed``); ``message.seed`` orders the mini-batches and seeds refits.
    """
    setup, classes = client.setup, client.setup.classes
    rng = np.random.default_rng(message.seed)
    coins_seed, training_noise_seed = NoiseSource.for_task(message.noise_seed).child_seeds(2)
    if continues_training(client.prototype) and is_dp_trained(client.prototype):
        # DP-SGD: one Poisson-sampled epoch over the whole local data (rows drawn with repeats would make one
        # example count several times); its release joins the client's record.
        model = with_noise_seed(client.prototype if client.model is None else client.model, training_noise_seed)
        model.partial_fit(client.X, classes[client.y], classes=classes)
        client = replace(client, trainings=(*client.trainings, model.dp_releases_[-1]))
    elif continues_training(client.prototype):
        model = client.prototype if client.model is None else client.model
        rows = training_rows(len(client.y), setup.local_steps, model.batch_size, rng)
        model.partial_fit(client.X[rows], classes[client.y[rows]], classes=classes)
    elif client.model is None:  # refitted models: fitted on the first round, then after each distillation
        seed = int(rng.integers(2**31))
        client = replace(client, fit_seed=seed)
        model = _refit(client, seed)
    else:
        model = client.model
    client = replace(client, model=model)
    if not setup.shares:
        return client, None

    X_batch = setup.proxy[message.batch]
    probabilities = np.asarray(model.predict_proba(X_batch), dtype=float)
    if client.selector is None:
        shared = np.ones(len(X_batch), dtype=bool)
    else:  # r̂ is computed once per proxy example, the first time the server draws it
        assert client.proxy_scores is not None  # set with the selector
        scores = client.proxy_scores.copy()
        batch_scores = scores[message.batch]
        new = np.isnan(batch_scores)
        if new.any():
            batch_scores[new] = client.selector.score_samples(X_batch[new])
        scores[message.batch] = batch_scores
        shared = batch_scores > client.selector.threshold_
        client = replace(client, proxy_scores=scores)
    if setup.labels == "soft":
        tempered = probabilities ** (1.0 / setup.temperature)
        return client, SelectiveFDShare(shared, (tempered / tempered.sum(axis=1, keepdims=True))[shared])
    codes = probabilities.argmax(axis=1)
    if not math.isnan(setup.keep_probability):
        coins = NoiseSource.for_task(coins_seed).generator
        record_draw("Selective-FD client randomized response", "randomized-response",
                    keep_probability=setup.keep_probability, num_classes=len(classes))
        codes = randomized_codes(codes, setup.keep_probability, len(classes), coins)
    return client, SelectiveFDShare(shared, codes[shared].astype(np.int64))


def distill_step(client: FDClient, message: SelectiveFDEnsemble) -> FDClient:
    """Party step 3: distil from the server's ensemble on the proxy examples it returned."""
    setup, classes = client.setup, client.setup.classes
    rng = np.random.default_rng(message.seed)
    X_distill, targets = setup.proxy[message.rows], message.targets
    if continues_training(client.prototype):
        model = client.model
        dp = model.get_params().get("dp")
        if dp is not None:  # public examples, targets from the clients' (DP) predictions: no DP-SGD needed
            model.set_params(dp=None)
        rows = training_rows(len(X_distill), setup.distill_steps, model.batch_size, rng)
        if setup.labels == "soft":
            model.partial_fit_soft(X_distill[rows], targets[rows], temperature=setup.temperature, classes=classes)
        else:
            model.partial_fit(X_distill[rows], classes[targets[rows]], classes=classes)
        return replace(client, model=model.set_params(dp=dp) if dp is not None else model)
    hard = targets if targets.ndim == 1 else targets.argmax(axis=1)
    previous_rows = message.rows[:0] if client.distilled_rows is None else client.distilled_rows
    previous_codes = hard[:0] if client.distilled_codes is None else client.distilled_codes
    seed = int(rng.integers(2**31))
    client = replace(client, distilled_rows=np.concatenate([previous_rows, message.rows]),
                     distilled_codes=np.concatenate([previous_codes, hard]), fit_seed=seed)
    return replace(client, model=_refit(client, seed))


def training_step(client: FDClient) -> list[Record]:
    """Party step 5 (DP-SGD-trained models only): the party's ``dp-training`` report — the parameters of its
    rounds' DP-SGD releases composed, never the model — or nothing when its model trains without DP-SGD."""
    report = training_report(compose_dpsgd(client.trainings) if client.trainings else None)
    return [] if report is None else [report.to_record()]


# --- a party's state as records (a Flower SuperNode keeps no object between messages) ---------------
def client_state(client: FDClient) -> list[Record]:
    """The party's state as records of arrays and scalars: its setup message and its state record.

    Torch models: the safe state's weights (``model.<name>``) and JSON spec, and the optimizer's state
    (``optimizer.<index>.<name>``). Refitted models: the distilled positions, their labels and the last
    fit's seed (the model is refitted from them). DP-SGD-trained models also keep the release of every
    round's local training (``dp-trainings``: their parameters as JSON), which the ledger composes.
    """
    arrays: dict[str, np.ndarray] = {}
    scalars: dict[str, int | float | str | bool] = {
        "model-spec": "", "fit-seed": -1,
        "dp-trainings": json.dumps([release.parameters() for release in client.trainings]),
    }
    if client.selector is not None:
        arrays.update({f"selector.{k}": v for k, v in client.selector.fitted_arrays().items()})
        assert client.proxy_scores is not None  # set with the selector
        arrays["proxy-scores"] = client.proxy_scores
    if client.distilled_rows is not None:
        assert client.distilled_codes is not None  # set with the rows
        arrays["distilled-rows"], arrays["distilled-codes"] = client.distilled_rows, client.distilled_codes
    if client.fit_seed is not None:
        scalars["fit-seed"] = client.fit_seed
    if client.model is not None and continues_training(client.prototype):
        spec, tensors = client.model.get_safe_state()
        scalars["model-spec"] = json.dumps(spec)
        arrays.update({f"model.{k}": v for k, v in tensors.items()})
        arrays.update({f"optimizer.{k}": v for k, v in client.model.get_optimizer_state().items()})
    return [client.setup.to_record(), Record(STATE_KIND, arrays, scalars)]


def restore_client(
    records: Sequence[Record], X: np.ndarray, y: np.ndarray, *, local_model: Any,
    feature_map: Callable[[np.ndarray], np.ndarray] | None = None, party: str = "party",
) -> FDClient:
    """The :class:`FDClient` that :func:`client_state` stored (the party's data and model spec given again)."""
    by_kind = {record.kind: record for record in records}
    if set(by_kind) != {SelectiveFDSetup.KIND, STATE_KIND}:
        raise ValueError(f"{party} has no Selective-FD state (records {sorted(by_kind)}): "
                         "the setup step must come first")
    setup = SelectiveFDSetup.from_record(by_kind[SelectiveFDSetup.KIND], sender=f"{party}'s own stored state")
    return client_from_state(setup, by_kind[STATE_KIND], X, y, local_model=local_model, feature_map=feature_map,
                             party=party)


def client_from_state(
    setup: SelectiveFDSetup, state: Record, X: np.ndarray, y: np.ndarray, *, local_model: Any,
    feature_map: Callable[[np.ndarray], np.ndarray] | None = None, party: str = "party",
) -> FDClient:
    """The :class:`FDClient` of ``setup`` whose between-rounds state :func:`client_state` stored in ``state``."""
    arrays, scalars = state.arrays, state.scalars
    client, selector_seed = _new_client(setup, X, y, local_model, party)
    if setup.selects:
        selector = _unfitted_selector(setup, feature_map, selector_seed).with_fitted_arrays(
            {k.removeprefix("selector."): v for k, v in arrays.items() if k.startswith("selector.")})
        client = replace(client, selector=selector, proxy_scores=np.array(arrays["proxy-scores"], dtype=float))
    if "distilled-rows" in arrays:
        client = replace(client, distilled_rows=np.asarray(arrays["distilled-rows"]),
                         distilled_codes=np.asarray(arrays["distilled-codes"]))
    trainings = parse_json(str(scalars.get("dp-trainings", "[]")), f"{party}'s dp-trainings")
    if trainings and not is_dp_trained(client.prototype):
        raise ValueError(f"{party}'s stored state holds DP-SGD releases, but its model does not train with DP-SGD")
    client = replace(client, trainings=tuple(DPSGD(**release) for release in trainings))
    if int(scalars["fit-seed"]) >= 0:
        client = replace(client, fit_seed=int(scalars["fit-seed"]))
        assert client.fit_seed is not None
        client = replace(client, model=_refit(client, client.fit_seed))
    if scalars["model-spec"]:
        tensors = {k.removeprefix("model."): v for k, v in arrays.items() if k.startswith("model.")}
        model = type(client.prototype).from_safe_state(parse_json(str(scalars["model-spec"]), f"{party}'s model-spec"),
                                                       tensors)
        model.set_optimizer_state({k.removeprefix("optimizer."): v for k, v in arrays.items()
                                   if k.startswith("optimizer.")})
        client = replace(client, model=model)
    return client


# --- the server's steps -------------------------------------------------------------------------------
def receive_shares(
    rounds: Sequence[SelectiveFDRound], records: Sequence[Sequence[Record]], names: Sequence[str], *,
    n_classes: int, labels: str, shares: bool, max_bytes: int,
) -> list[SelectiveFDShare | None]:
    """Validate each party's reply to its round message; :class:`MessageError` names the first bad party."""
    replies: list[SelectiveFDShare | None] = []
    for message, sent, name in zip(rounds, records, names):
        if not shares:
            if len(sent):
                raise MessageError(f"{name} sent {len(sent)} messages where nothing is shared")
            replies.append(None)
            continue
        if len(sent) != 1:
            raise MessageError(f"{name} sent {len(sent)} messages, expected one {SelectiveFDShare.KIND!r}")
        share = SelectiveFDShare.from_record(sent[0], sender=name, shapes={"shared": (len(message.batch),)},
                                             max_bytes=max_bytes)
        n_shared = int(share.shared.sum())
        predictions = share.predictions
        where = f"{name} sent a malformed {SelectiveFDShare.KIND!r} message"
        if labels == "soft":
            if predictions.shape != (n_shared, n_classes) or predictions.dtype.kind != "f":
                raise MessageError(f"{where}: predictions of shape {predictions.shape} and dtype {predictions.dtype}, "
                                   f"expected probabilities of shape ({n_shared}, {n_classes})")
            if not (np.isfinite(predictions).all() and (predictions >= 0).all()
                    and np.allclose(predictions.sum(axis=1), 1.0, atol=1e-6)):
                raise MessageError(f"{where}: predictions are not probability rows (non-negative, summing to 1)")
        elif (predictions.shape != (n_shared,) or predictions.dtype.kind not in "iu"
              or predictions.min(initial=0) < 0 or predictions.max(initial=0) >= n_classes):
            raise MessageError(f"{where}: predictions of shape {predictions.shape} and dtype {predictions.dtype}, "
                               f"expected ({n_shared},) class codes in 0..{n_classes - 1}")
        replies.append(share)
    return replies


@dataclass(frozen=True, eq=False)
class RoundOutcome:
    """The server's result of one round: what it sends back, and what its history and ledger record."""

    kept: np.ndarray  # positions in the batch
    targets: np.ndarray  # (kept, C) distributions (soft) or (kept,) class codes (hard)
    shared: np.ndarray  # (clients, batch) share masks
    sharers: np.ndarray  # (batch,) clients that shared each example
    released: tuple[np.ndarray, np.ndarray] | None  # GNMax: (vote histograms answered, cleared the threshold)


def server_round(
    shares: Sequence[SelectiveFDShare], n_classes: int, protocol: FDProtocol, keep_probability: float | None,
    rng: np.random.Generator, *, noise: NoiseSource | None = None,
) -> RoundOutcome:
    """Aggregate, select and label one batch (the server's step of a round).

    ``noise`` is the source of the server's GNMax (and Confident GNMax threshold) noise — None: a fresh secret
    one; ``rng`` breaks ties between randomized-response estimates (post-processing, no guarantee relies on it).
    """
    shared = np.stack([share.shared for share in shares])
    if protocol.labels == "soft":
        predictions = np.zeros((*shared.shape, n_classes))
        for client_predictions, share in zip(predictions, shares):
            client_predictions[share.shared] = share.predictions
        ensemble, sharers = aggregate_predictions(predictions, shared)
        kept = np.flatnonzero((sharers > 0) & confident_examples(ensemble, protocol.tau_server))
        return RoundOutcome(kept, ensemble[kept], shared, sharers, None)
    votes = np.zeros((shared.shape[1], n_classes), dtype=np.int64)
    for share in shares:
        votes[np.flatnonzero(share.shared), share.predictions] += 1
    sharers = votes.sum(axis=1)
    answered = np.flatnonzero(sharers > 0)
    released = None
    if protocol.privacy in SERVER_NOISE_MODES:
        assert protocol.sigma is not None  # GNMax's σ is set (FDProtocol)
        record_draw("Selective-FD server GNMax", "gaussian", sigma=protocol.sigma)
        if protocol.privacy == "confident-gnmax":
            assert protocol.sigma_threshold is not None  # Confident GNMax's σ₁ is set (FDProtocol)
            record_draw("Selective-FD server threshold step", "gaussian-threshold", sigma=protocol.sigma_threshold)
        gaussian = (NoiseSource.secret() if noise is None else noise).generator
        released_votes = votes[answered]
        passed = np.ones(len(answered), dtype=bool)
        if protocol.privacy == "confident-gnmax":  # PATE 2018 Algorithm 1: the threshold step first
            assert protocol.sigma_threshold is not None and protocol.threshold is not None
            top = released_votes.max(axis=1) + gaussian.normal(0.0, protocol.sigma_threshold, size=len(answered))
            passed = top >= protocol.threshold
        released = (released_votes, passed)
        noisy = released_votes + gaussian.normal(0.0, protocol.sigma, size=released_votes.shape)
        labels, confidence = noisy.argmax(axis=1), noisy.max(axis=1) / sharers[answered]
        confidence = np.where(passed, confidence, -np.inf)  # ⊥: not answered
    else:
        counts = votes[answered].astype(float)
        if keep_probability is not None:
            counts = randomized_response_estimate(votes[answered], keep_probability=keep_probability)
        labels = break_ties_at_random(counts, rng)
        confidence = counts.max(axis=1) / sharers[answered]
    confident = confidence >= 1.0 - protocol.tau_server / 2.0 - 1e-12
    return RoundOutcome(answered[confident], labels[confident], shared, sharers, released)


# --- the in-process transport: every party's steps in this process ------------------------------------
def _setup_task(task: PartyTask) -> FDClient:
    X, y, message, local_model, feature_map = task.data
    return setup_client(message, X, y, local_model=local_model, feature_map=feature_map, party=f"party {task.index}")


def _restore_task(task: PartyTask) -> FDClient:
    message, state, X, y, local_model, feature_map = task.data
    return client_from_state(message, state, X, y, local_model=local_model, feature_map=feature_map,
                             party=f"party {task.index}")


def _share_task(task: PartyTask) -> tuple[FDClient, SelectiveFDShare | None]:
    return share_step(*task.data)


def _distill_task(task: PartyTask) -> FDClient:
    return distill_step(*task.data)


class LocalClients:
    """The parties of an in-process run: their states in memory, their steps through the executor.

    The server's round loop talks to the parties through four calls — :meth:`setup` and :meth:`share`
    (returning the records each party sent), :meth:`distill`, :meth:`final_models` — which the Flower
    app implements over its SuperNodes. A message of None is not sent (the party stopped taking part).

    ``budgets`` (one :class:`~privfed.SiloBudget` or None per party): before a party's setup, round or publish
    step reads its data, the step's planned release (:func:`planned_setup_release`, :func:`planned_round_release`,
    :func:`planned_publish_release`) is charged to its budget under ``study``; a party whose silo refuses sends
    its :class:`~privfed.pipelines.protocol.silo_gate.BudgetRefusal` alone and its step does not run.
    """

    def __init__(self, parties: Sequence[tuple[np.ndarray, np.ndarray]], local_models: Sequence[Any], *,
                 feature_map: Callable | None, n_jobs: int, budgets: Sequence[Any] | None = None,
                 study: str = "", pipeline: str = "selective-fd") -> None:
        self.parties, self.local_models = list(parties), list(local_models)
        self.feature_map, self.n_jobs = feature_map, n_jobs
        self.budgets = list(budgets) if budgets is not None else [None] * len(self.parties)
        self.study, self.pipeline = study, pipeline
        self.clients: list[FDClient | None] = []

    def _run(self, fn: Callable, data: list) -> list:
        return run_party_tasks(fn, data, config=None, random_state=0, n_jobs=self.n_jobs, progress=False)

    def _gate(self, party: int, release: Mechanism | str | None) -> list[Record] | None:
        """The refusal party ``party`` sends instead of its step's reply (None: charged, or nothing to charge)."""
        refusal = admit(self.budgets[party], release, study=self.study, pipeline=self.pipeline)
        return None if refusal is None else [refusal.to_record()]

    def setup(self, messages: Sequence[SelectiveFDSetup]) -> list[list[Record]]:
        refusals = [self._gate(p, planned_setup_release(m)) if self.budgets[p] is not None else None
                    for p, m in enumerate(messages)]
        admitted = [p for p, refusal in enumerate(refusals) if refusal is None]
        fitted = self._run(_setup_task, [(*self.parties[p], messages[p], self.local_models[p], self.feature_map)
                                         for p in admitted])
        self.clients = [None] * len(messages)
        for p, client in zip(admitted, fitted):
            self.clients[p] = client
        return [refusal or [] for refusal in refusals]

    def share(self, messages: Sequence[SelectiveFDRound | None], round_index: int) -> list[list[Record]]:
        sent: list[list[Record]] = [[] for _ in messages]
        running = []
        for p, message in enumerate(messages):
            client = self.clients[p]
            if message is None or client is None:
                continue
            if self.budgets[p] is not None:
                refusal = self._gate(p, planned_round_release(client.setup, message,
                                                              local_model=self.local_models[p]))
                if refusal is not None:
                    sent[p] = refusal
                    continue
            running.append(p)
        outputs = self._run(_share_task, [(self.clients[p], messages[p]) for p in running])
        for p, (client, share) in zip(running, outputs):
            self.clients[p] = client
            sent[p] = [] if share is None else [share.to_record()]
        return sent

    def distill(self, messages: Sequence[SelectiveFDEnsemble | None], round_index: int) -> None:
        running = [p for p, message in enumerate(messages) if message is not None and self.clients[p] is not None]
        for p, client in zip(running, self._run(_distill_task, [(self.clients[p], messages[p]) for p in running])):
            self.clients[p] = client

    def models(self) -> list[Any]:
        """Every party's current model (the in-process run holds them all; None for a party refused at setup)."""
        return [None if client is None else client.model for client in self.clients]

    def final_models(self, client: int) -> tuple[list[Any], dict[str, list[int]]]:
        """Every party's model, and the bytes of what crossed the wire to publish them (nothing here); the
        refusal of the publishing party's silo as a :class:`~privfed.pipelines.protocol.silo_gate.RefusedRunError`."""
        if self.budgets[client] is not None:
            party = self.clients[client]
            if party is None:
                raise RefusedRunError([Refusal(client, "its silo refused the setup: it has no model")],
                                      f"client {client}'s model cannot be published")
            refusal = self._gate(client, planned_publish_release(party.setup, local_model=self.local_models[client],
                                                                 trainings=party.trainings))
            if refusal is not None:
                reason = BudgetRefusal.from_record(refusal[0], sender=f"party {client}").reason
                raise RefusedRunError([Refusal(client, reason)], f"client {client}'s model cannot be published")
        return self.models(), {}

    def states(self) -> list[Record]:
        """Every party's between-rounds state (:func:`client_state`'s state record), for a round checkpoint
        (budgets, and so refused parties, are never combined with a checkpoint: ``fit`` refuses that)."""
        if any(client is None for client in self.clients):
            raise RuntimeError("a round checkpoint holds every party's state; a party refused at setup has none")
        return [client_state(client)[1] for client in self.clients if client is not None]

    def restore(self, messages: Sequence[SelectiveFDSetup], states: Sequence[Record]) -> None:
        """Instead of :meth:`setup`: the parties as :meth:`states` left them, under the same setup messages."""
        self.clients = self._run(_restore_task, [(message, state, X, y, model, self.feature_map)
                                                 for (X, y), message, state, model
                                                 in zip(self.parties, messages, states, self.local_models)])

    def selectors(self) -> list[DensityRatioSelector | DPDensityRatioSelector | None]:
        return [None if client is None else client.selector for client in self.clients]

    def trainings(self) -> list[list[Record]]:
        """Every party's ``dp-training`` report (:func:`training_step`; empty for a model without DP-SGD or a party
        refused at setup)."""
        return [[] if client is None else training_step(client) for client in self.clients]

