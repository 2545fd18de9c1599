"""Selective-FD's party steps (setup, share, distillation) and the messages of its exchange.

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
4. server: :func:`~privfed.pipelines.selective_fd.aggregation.server_round` aggregates the shares, applies its
   selector or its noisy argmax (GNMax, Confident GNMax), then
   server → party, :class:`SelectiveFDEnsemble`: the kept positions, their targets and the party's
   seed; the party distils (:func:`distill_step`).
5. after the last round, only when a client model trains with DP-SGD: party → server, its ``dp-training``
   report (:func:`training_step`: σ, q and steps of its rounds' DP-SGD composed), which the server checks
   against the model's DP configuration and records in the ledger.

Independent learning runs steps 1–2 with nothing shared (empty replies). The server's round loop,
history and ledger are :class:`~privfed.pipelines.selective_fd.server.FDServer`, which ``fit`` drives over
:class:`~privfed.pipelines.selective_fd.local_clients.LocalClients` (the party steps in this process) and the
Flower app over its SuperNodes: the same steps, the same messages.

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
GNMax noise (:func:`~privfed.pipelines.selective_fd.aggregation.server_round`). The ``seed`` fields (from
``random_state``) seed what no guarantee relies on: model initialisation, the selectors' public draws, mini-batch
order, refit seeds.
"""


from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from ...accounting import DPSGD, compose_dpsgd
from ...accounting.documents import parse_json
from ...accounting.noise_source import NoiseSource
from ..data.party_data import class_codes
from ..models.fitting import fit_classifier, is_dp_trained, with_noise_seed, with_seed
from ..protocol.dp_ledger import training_report
from ..protocol.messages import ArraySpec, Record, WireMessage
from ..protocol.run_parameters import record_draw
from .dp_selector import DPDensityRatioSelector
from .kulsif import DensityRatioSelector

__all__ = [
    "STATE_KIND",
    "FDClient",
    "FDProtocol",
    "SelectiveFDEnsemble",
    "SelectiveFDRound",
    "SelectiveFDSetup",
    "SelectiveFDShare",
    "client_from_state",
    "client_state",
    "continues_training",
    "distill_step",
    "randomized_codes",
    "restore_client",
    "setup_client",
    "setup_messages",
    "share_step",
    "training_rows",
    "training_step",
]

#: The kind of the record :func:`client_state` stores beside the setup message.
STATE_KIND = "selective-fd-client-state"


# --- the client's randomized response and mini-batches ---------------------------------------------
def randomized_codes(codes: np.ndarray, keep_probability: float, n_classes: int, coins: np.random.Generator
                     ) -> np.ndarray:
    """Randomized response on class codes: each kept w.p. ``keep_probability``, else a uniform class (``coins``:
    the client's secret noise generator)."""
    replaced = coins.random(len(codes)) >= keep_probability
    return np.where(replaced, coins.integers(n_classes, size=len(codes)), codes)


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
    ``selector_noise`` is the DP selector's σ
    (:class:`~privfed.pipelines.selective_fd.dp_selector.DPDensityRatioSelector`, with ``n_frequencies``; NaN: the
    raw-data KuLSIF selector). ``noise_seed`` (None, the default, is left out
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
