"""FedKD: one-shot distillation from a quantized, noisy, class-weighted logit ensemble.

Gong, Sharma, Karanam, Wu, Chen, Doermann, Innanje, "Preserving privacy in
federated learning with ensemble cross-domain knowledge distillation", AAAI 2022,
Algorithm 1 (here "FedKD"). Each party trains a local model of any architecture
on its own data, computes its logits on the unlabeled public set **once**,
quantizes them (Eq. 5, Q(z; S) on the public range [−Z, Z]) and sends them with
its class counts. The server weights each party's logits per class by its share
of that class (Eq. 3, ω_k^c = N_k^c / Σ_k N_k^c), sums them, adds Laplace(1/γ)
noise per public example and class (Eq. 4), and distills its own model on the
public set from that noisy ensemble (Eq. 6–7). No model parameter leaves a party.

**Logits.** What a party sends for a public example x, over the C classes:

* a model whose ``decision_function`` returns one column per class it was
  fitted on (multinomial linear models): those scores;
* a :class:`~pipelines.torch_models.TorchClassifier`: ``predict_log_proba``
  (its logits up to a per-example constant, in every case including two classes);
* any other classifier with ``predict_proba`` (forests, boosting, k-NN):
  log-probabilities, ``log(max(p, 1e-6))`` — the floor keeps them finite.

Each row is then centred (its mean over the classes the model knows is
subtracted). That changes no softmax, and it is the zero-mean form under which
L2 distance between logits is the τ → ∞ limit of the distillation loss (Hinton,
Vinyals, Dean 2015, §2.1), the form FedKD's Eq. 7 uses. A class a party never
saw gets the bottom of the range, −Z (with class-count weights its weight is 0
anyway). Multi-label (``multilabel=True``): one sigmoid logit per label,
``decision_function`` when it has one column per label, else
``log(p / (1 − p))`` of the positive probability with p clipped to [1e-6, 1 − 1e-6];
no centring.

**Privacy.** The release is :class:`privfed.accounting.QuantizedLaplaceEnsemble`: per
public example the C-vector Σ_k ω_k^c Q(z^{ck}) + Lap(1/γ). Its ε is party-level
(one party's whole data set replaced) and equally example-level; it covers the
noisy ensemble and everything computed from it (the server model). It does not
cover what the server sees before adding noise (every party's quantized logits:
the server is trusted), nor the per-party class counts sent in clear for ω; the
ledger records both as unaccounted. FedKD draws the noise once per public
example and class here (cached); its code redraws it for every batch, which
multiplies the cost by the number of epochs — available as
``redraw_noise_per_batch=True`` and charged as ``draws_per_example``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import expit, softmax
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.utils.validation import check_is_fitted

from ..accounting import Ledger, Mechanism, QuantizedLaplaceEnsemble, class_count_weights
from ..accounting._checks import (
    check_choice,
    check_delta,
    check_int_at_least,
    check_positive_finite,
)
from ..accounting.fingerprint import data_fingerprint
from ._dp_ledger import receive_trainings, record_local_training
from ._models import fit_classifier, with_seed
from ._random import as_seed_sequence, spawn_seeds
from .executor import PartyTask, run_party_tasks
from .fedkd_steps import (
    PROBABILITY_FLOOR,
    FedKDLogits,
    FedKDPartyOutcome,
    FedKDTask,
    _is_torch_classifier,
    _positive_probabilities,
    fedkd_party_step,
    party_logits,
    party_message,
    receive_fedkd_replies,
)
from .messages import DEFAULT_MAX_BYTES
from .party_data import check_parties, party_classes
from .party_schema import record_schema_exchange
from .preflight import warn_if_noise_drowns_votes
from .progress import check_progress

__all__ = ["PROBABILITY_FLOOR", "BandwidthReport", "FedKD", "NoisyLogitEnsemble", "party_logits", "party_message"]

WEIGHTINGS = ("auto", "class-count", "uniform")
LOSSES = ("l2", "l1", "kl")
#: Bytes of one value sent unquantized (float32) and of one class count (int32).
FLOAT_BYTES = 4
COUNT_BYTES = 4


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


QUANTIZERS = ("public", "paper")


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


# --- the estimator -----------------------------------------------------------------------------------------
def _party_step(task: PartyTask) -> FedKDPartyOutcome:
    """One party's work in the in-process run (a joblib task): the party step on its own data."""
    X, y, message, local_model = task.data
    return fedkd_party_step(message, X, y, local_model=local_model, party=f"party {task.index}")


class FedKD(ClassifierMixin, BaseEstimator):
    """FedKD: parties send quantized logits on public data once; the server distills a noisy weighted ensemble.

    Parameters
    ----------
    local_model : estimator or list of estimators
        The parties' classifier (cloned per party), or one per party (heterogeneous
        models). Each needs ``fit`` and ``predict_proba`` (or a per-class
        ``decision_function``); see the module docstring for its logits.
    server_model : estimator
        Distilled on the public set. A :class:`~pipelines.torch_models.TorchClassifier`
        learns the noisy ensemble itself (``fit_soft`` with ``loss``). Any other
        scikit-learn classifier has no soft-target training: it is fitted on the
        argmax of the noisy ensemble (multi-label: its positive entries) — hard
        pseudo-labels, recorded in ``distillation_``.
    quantization_scale : int or None, default=200
        S: logits are rounded to a grid of step Z/S in [−Z, Z] (FedKD Eq. 5, with a
        public Z). None sends them unquantized (only without noise: the noiseless
        baseline).
    quantizer : {"public", "paper"}, default="public"
        ``"public"``: the grid above (2S + 1 levels, rounding, public range).
        ``"paper"``: FedKD's Eq. 4 as printed — step 2·z_max/S, rounding up, z_max the
        largest |logit| over every party's (clipped) logits (:func:`paper_quantized`;
        S + 1 levels, so the paper's S = 400 has privfed's step at S = 200). z_max is
        data-dependent and shared with the parties; the ledger records it as
        unaccounted. With noise the logits are clipped to the public Z first, so the
        ε still rests on Z (on Z·2⌈S/2⌉/S for odd S), never on z_max. ``z_max_`` holds the value.
    gamma : float or None, default=1.0
        Laplace noise of scale 1/γ per public example and class. None adds no noise
        (no guarantee; recorded as such).
    clip : float or None, default=10.0
        Z, the public bound the logits are clipped to before quantization (FedKD
        takes z_max from the data, which voids the guarantee; here Z is fixed in
        advance). None (only without noise) leaves the logits unclipped.
    weighting : {"auto", "class-count", "uniform"}, default="auto"
        ω_k^c = N_k^c / Σ_k N_k^c (FedKD Eq. 3; the counts are sent to the coordinator in
        clear and the mechanism's sensitivity is 2ZC), or public weights 1/K (sensitivity
        2ZC/K; the parties send no class counts). ``"auto"``: uniform when every local
        model is DP-trained (``dp=``), so that the DP-SGD bound covers everything the
        coordinator and the public see; class-count otherwise (the paper's). The weighting
        used is ``weighting_``.
    loss : {"l2", "l1", "kl"}, default="l2"
        Distillation loss of a ``fit_soft`` server: L2 between logits (FedKD Eq. 7,
        the τ → ∞ form), L1 (FedKD's code default), or KL between softmaxes at
        ``temperature``. Multi-label: l2 or l1.
    temperature : float, default=None
        Softmax temperature, with ``loss="kl"`` only (None means 1).
    distill_epochs, batch_size : int, default=None
        Override the ``fit_soft`` server model's ``epochs`` and ``batch_size``.
    multilabel : bool, default=False
        Parties hold (n, L) 0/1 label indicators; sigmoid logits, class counts are
        counts of positives; predictions are (n, L) indicators.
    redraw_noise_per_batch : bool, default=False
        Draw fresh noise every epoch of distillation (each example is in one batch
        per epoch), as FedKD's code does; the ledger charges ``distill_epochs``
        draws per example. Needs a ``fit_soft`` server.
    delta : float, default=1e-5
        δ of the ε reported in ``epsilon_``.
    random_state : int, default=None
    n_jobs : int, default=1
        Parties trained in parallel (joblib).
    progress : bool or None, default=None
        A progress bar over the parties' training: ``None`` on a terminal only, ``True`` always,
        ``False`` never (see :mod:`privfed.pipelines.progress`).

    Attributes
    ----------
    classes_ : ndarray
        Labels seen in the parties' data (multi-label: ``arange(L)``).
    server_model_ : estimator
        The distilled server model (fit_soft server: its columns are ``classes_`` indices).
    noisy_ensemble_ : ndarray of shape (n_public, C)
        The released noisy ensemble (the last draw when redrawn).
    weights_ : ndarray of shape (K, C)
        ω_k^c.
    draws_per_example_ : int
        Noise draws per public example charged in the ledger.
    distillation_ : str
        How the server model learned from the ensemble.
    bandwidth_ : BandwidthReport
        Bytes per party, and FedAvg's for comparison (``bandwidth_.fedavg_bytes(R)``).
    ledger_ : accounting.Ledger
    evidence_ : dict of ndarray
        Empty: the mechanism's ε does not depend on the data.
    epsilon_ : float
        Party-level ε at ``delta`` (tight analysis; ∞ without noise).
    z_max_ : float or None
        With ``quantizer="paper"``: the data-dependent z_max that set the grid; None otherwise.

    Examples
    --------
    >>> from sklearn.datasets import load_digits
    >>> from sklearn.ensemble import RandomForestClassifier
    >>> from sklearn.tree import DecisionTreeClassifier
    >>> X, y = load_digits(return_X_y=True)
    >>> parties = [(X[i:1200:4], y[i:1200:4]) for i in range(4)]
    >>> model = FedKD(RandomForestClassifier(n_estimators=20), DecisionTreeClassifier(max_depth=8),
    ...               gamma=0.05, clip=5.0, random_state=0).fit(parties, X[1200:1500])
    >>> model.ledger_.account(delta=1e-5).unit
    'party'
    """

    def __init__(
        self,
        local_model: Any,
        server_model: Any,
        *,
        quantization_scale: int | None = 200,
        quantizer: str = "public",
        gamma: float | None = 1.0,
        clip: float | None = 10.0,
        weighting: str = "auto",
        loss: str = "l2",
        temperature: float | None = None,
        distill_epochs: int | None = None,
        batch_size: int | None = None,
        multilabel: bool = False,
        redraw_noise_per_batch: bool = False,
        delta: float = 1e-5,
        random_state: int | None = None,
        n_jobs: int = 1,
        progress: bool | None = None,
    ) -> None:
        self.local_model = local_model
        self.server_model = server_model
        self.quantization_scale = quantization_scale
        self.quantizer = quantizer
        self.gamma = gamma
        self.clip = clip
        self.weighting = weighting
        self.loss = loss
        self.temperature = temperature
        self.distill_epochs = distill_epochs
        self.batch_size = batch_size
        self.multilabel = multilabel
        self.redraw_noise_per_batch = redraw_noise_per_batch
        self.delta = delta
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.progress = progress

    # --- validation --------------------------------------------------------------------------------------
    def _resolved_weighting(self, n_parties: int) -> str:
        """``weighting``, with ``"auto"`` resolved: uniform when every local model is configured for DP training."""
        if self.weighting != "auto":
            return self.weighting
        models = self.local_model if isinstance(self.local_model, (list, tuple)) else [self.local_model]
        dp_trained = all(getattr(model, "dp", None) is not None for model in models)
        return "uniform" if dp_trained else "class-count"

    def _local_models(self, n_parties: int) -> list[Any]:
        models = (
            list(self.local_model) if isinstance(self.local_model, (list, tuple)) else [self.local_model] * n_parties
        )
        if len(models) != n_parties:
            raise ValueError(f"local_model is a list of {len(models)} models; give one per party ({n_parties}) or one")
        for index, model in enumerate(models):
            if not (hasattr(model, "fit") and hasattr(model, "get_params")
                    and (hasattr(model, "predict_proba") or hasattr(model, "decision_function"))):
                raise TypeError(
                    f"local_model[{index}] must be a scikit-learn-style classifier with fit and predict_proba "
                    f"(or decision_function), got {model!r}"
                )
            if self.multilabel and _is_torch_classifier(model):
                raise TypeError(
                    f"local_model[{index}] is a {type(model).__name__}, which trains on single labels only; "
                    "multilabel=True needs scikit-learn classifiers that accept (n, L) indicator targets"
                )
        return models

    def _validate(self) -> None:
        server = self.server_model
        if not (hasattr(server, "fit") and hasattr(server, "predict") and hasattr(server, "get_params")):
            raise TypeError(f"server_model must be a scikit-learn-style classifier (fit, predict), got {server!r}")
        soft = _is_torch_classifier(server)
        check_choice("weighting", self.weighting, WEIGHTINGS)
        check_choice("quantizer", self.quantizer, QUANTIZERS)
        if self.quantizer == "paper" and self.quantization_scale is None:
            raise ValueError("quantizer='paper' quantizes with S levels: give quantization_scale >= 1, got None")
        check_delta(self.delta)
        check_choice("loss", self.loss, LOSSES)
        check_progress(self.progress)
        for name in ("multilabel", "redraw_noise_per_batch"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.gamma is not None:
            check_positive_finite("gamma", self.gamma)
        if self.quantization_scale is not None:
            check_int_at_least("quantization_scale", self.quantization_scale, 1)
        if self.clip is not None:
            check_positive_finite("clip", self.clip)
        if self.gamma is not None and (self.clip is None or self.quantization_scale is None):
            raise ValueError(
                "with noise (gamma set) the logits must be clipped to a public bound and quantized: give clip > 0 "
                f"and quantization_scale >= 1 (got clip={self.clip!r}, "
                f"quantization_scale={self.quantization_scale!r}); "
                "None is for the noiseless baseline only"
            )
        if self.loss == "kl":
            if self.multilabel:
                raise ValueError("loss='kl' compares softmaxes; multilabel=True needs loss='l2' or 'l1'")
            if self.temperature is not None:
                check_positive_finite("temperature", self.temperature)
        elif self.temperature is not None:
            raise ValueError(
                f"temperature applies to loss='kl' only; got temperature={self.temperature!r} with loss={self.loss!r}"
            )
        for name in ("distill_epochs", "batch_size"):
            if getattr(self, name) is not None:
                check_int_at_least(name, getattr(self, name), 1)
                if not soft:
                    raise ValueError(
                        f"{name} applies to a server model with fit_soft (a TorchClassifier); "
                        f"got {type(server).__name__}"
                    )
        if self.redraw_noise_per_batch:
            if not soft:
                raise ValueError("redraw_noise_per_batch=True needs a server model with fit_soft (a TorchClassifier)")
            if self.gamma is None:
                raise ValueError("redraw_noise_per_batch=True needs noise (gamma)")

    def _check_multilabel_parties(self, parties: object, public: object) -> tuple[list, np.ndarray]:
        checked = []
        if isinstance(parties, (str, bytes)) or not isinstance(parties, Sequence) or len(parties) == 0:
            raise ValueError(f"parties must be a non-empty sequence of (X, Y) pairs, got {type(parties).__name__}")
        for index, party in enumerate(parties):
            X, Y = np.asarray(party[0]), np.asarray(party[1])
            if X.ndim < 2 or Y.ndim != 2 or len(X) != len(Y) or Y.shape[1] < 2 or not np.isin(Y, (0, 1)).all():
                raise ValueError(
                    f"parties[{index}] must hold X of shape (n, features...) and a 0/1 indicator Y of shape "
                    f"(n, L >= 2) with multilabel=True; got X {X.shape} and Y {Y.shape}"
                )
            if checked and Y.shape[1] != checked[0][1].shape[1]:
                raise ValueError(f"parties[{index}] has {Y.shape[1]} labels, parties[0] has {checked[0][1].shape[1]}")
            checked.append((X, Y.astype(np.int64)))
        _, public = check_parties([(X, np.zeros(len(X))) for X, _ in checked], public)
        return checked, public

    # --- fitting ----------------------------------------------------------------------------------------
    def fit(self, parties: Sequence[tuple[np.ndarray, np.ndarray]], public: np.ndarray) -> FedKD:
        """Run FedKD on the parties' private data and the unlabeled public set."""
        self._validate()
        if self.multilabel:
            parties, public = self._check_multilabel_parties(parties, public)
            n_outputs = parties[0][1].shape[1]
            self.classes_ = np.arange(n_outputs)
        else:
            parties, public = check_parties(parties, public)
            self.classes_ = party_classes(parties)
            n_outputs = len(self.classes_)
        models = self._local_models(len(parties))

        seed_sequence = as_seed_sequence(self.random_state)
        party_seeds, server_seeds = seed_sequence.spawn(2)
        tasks = self._party_tasks(public, party_seeds, len(parties))
        outcomes: list[FedKDPartyOutcome] = run_party_tasks(
            _party_step, [(X, y, task, m) for (X, y), task, m in zip(parties, tasks, models)], config=None,
            random_state=party_seeds, n_jobs=self.n_jobs, progress=self.progress,
        )
        names = [f"party {index}" for index in range(len(parties))]
        sent = [[message.to_record() for message in outcome.sent()] for outcome in outcomes]
        replies = receive_fedkd_replies(tasks, sent, names, max_bytes=DEFAULT_MAX_BYTES)
        return self._fit_server(replies, public, server_seeds, int(seed_sequence.entropy),
                                receive_trainings(sent, names, max_bytes=DEFAULT_MAX_BYTES, models=models))

    def _party_tasks(self, public: np.ndarray, party_seeds: np.random.SeedSequence, n_parties: int) -> list[FedKDTask]:
        """One :class:`~privfed.pipelines.fedkd_steps.FedKDTask` per party (shared with ``privfed.federation``)."""
        if self.gamma is not None and not self.multilabel:  # pre-flight: the best margin is 2Z (+Z against −Z)
            warn_if_noise_drowns_votes(
                "FedKD", votes=2 * float(self.clip), n_classes=len(self.classes_), aggregator="laplace",
                scale=1 / float(self.gamma),
                what=f"each public example's ensemble has a top-class margin of at most {2 * float(self.clip):g} "
                     f"(logits clipped to ±{float(self.clip):g})",
                advice="add less noise (a larger gamma) or a larger clip")
        return [
            FedKDTask(
                public=public,
                classes=np.arange(len(self.classes_)) if self.multilabel else self.classes_,
                multilabel=bool(self.multilabel),
                clip=math.nan if self.clip is None else float(self.clip),
                quantization_scale=0 if self._party_scale() is None else int(self._party_scale()),
                seed=int(seed),
                send_class_counts=self._resolved_weighting(n_parties) == "class-count",
            )
            for seed in spawn_seeds(party_seeds, n_parties)
        ]

    def fit_logits(self, party_logits: Sequence[np.ndarray], class_counts: np.ndarray, public: np.ndarray, *,
                   classes: np.ndarray | None = None, parameter_counts: Sequence[int | None] | None = None) -> FedKD:
        """Run FedKD from the parties' logits on the public set, computed elsewhere (a federated runtime, a cache).

        Each party's logits (its :func:`party_logits` output, shape (n_public, C)) are
        clipped and quantized here as the party would before sending
        (:func:`party_message`), then the server runs exactly as in :meth:`fit`; with
        the same ``random_state`` the noise and the server model are those of :meth:`fit`.

        Parameters
        ----------
        party_logits : sequence of ndarray of shape (n_public, C)
        class_counts : ndarray of shape (n_parties, C)
            N_k^c (positives per label with ``multilabel=True``).
        public : ndarray
        classes : ndarray of shape (C,), default=None
            The label of each column (``arange(C)`` when None).
        parameter_counts : sequence, default=None
            Each party's model size, for the FedAvg comparison in ``bandwidth_``.
        """
        self._validate()
        public = np.asarray(public)
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
        self.classes_ = np.arange(n_outputs) if classes is None else np.asarray(classes)
        if len(self.classes_) != n_outputs:
            raise ValueError(f"classes must hold {n_outputs} labels, one per logit column; got {len(self.classes_)}")
        sizes = parameter_counts if parameter_counts is not None else [None] * len(logits)
        results = [
            FedKDLogits(party_message(z, clip=self.clip, quantization_scale=self._party_scale()), c,
                        -1 if size is None else size)
            for z, c, size in zip(logits, counts, sizes)
        ]
        seed_sequence = as_seed_sequence(self.random_state)
        return self._fit_server(results, public, seed_sequence.spawn(2)[1], int(seed_sequence.entropy))

    def _party_scale(self) -> int | None:
        """S for the party's own quantization: None with the paper's quantizer (the server-set grid comes later)."""
        return self.quantization_scale if self.quantizer == "public" else None

    def _levels(self) -> int:
        """Grid points a quantized logit can take: 2S + 1 (step Z/S on [−Z, Z]) or S + 1 (the paper's Eq. 4)."""
        return 2 * self.quantization_scale + 1 if self.quantizer == "public" else self.quantization_scale + 1

    def _fit_server(self, results: list[FedKDLogits], public: np.ndarray, server_seeds: np.random.SeedSequence,
                    seed: int, trainings: list[Mechanism | None] | None = None) -> FedKD:
        """Server side (Algorithm 1, lines 6–12): weights, ensemble, noise, distillation, ledger, bandwidth."""
        counts = np.stack([r.class_counts for r in results])
        n_parties, n_outputs = counts.shape
        self.weighting_ = self._resolved_weighting(n_parties)
        self.z_max_ = None
        if self.quantizer == "paper":
            quantized, self.z_max_ = paper_quantized([r.quantized_logits for r in results],
                                                     quantization_scale=self.quantization_scale)
            results = [FedKDLogits(z, r.class_counts, r.parameter_count) for z, r in zip(quantized, results)]
        self.weights_ = (class_count_weights(counts) if self.weighting_ == "class-count"
                         else np.full((n_parties, n_outputs), 1.0 / n_parties))
        ensemble = np.einsum("kc,knc->nc", self.weights_, np.stack([r.quantized_logits for r in results]))
        server_rng = np.random.default_rng(server_seeds)
        noisy = NoisyLogitEnsemble(ensemble, gamma=self.gamma, rng=server_rng, redraw=self.redraw_noise_per_batch)
        self._distill(noisy, public, server_rng)
        self.noisy_ensemble_ = noisy.latest
        self.draws_per_example_ = noisy.draws
        self.bandwidth_ = BandwidthReport(
            n_public=len(public),
            n_outputs=n_outputs,
            bits_per_value=(32 if self.quantization_scale is None
                            else math.ceil(math.log2(self._levels()))),
            class_count_bytes=n_outputs * COUNT_BYTES if self.weighting_ == "class-count" else 0,
            parameter_counts=tuple(None if r.parameter_count < 0 else r.parameter_count for r in results),
        )
        self.ledger_ = self._ledger(public, n_parties, n_outputs, seed, trainings or [None] * n_parties)
        self.evidence_: dict[str, np.ndarray] = {}
        self.epsilon_ = self.ledger_.account(delta=self.delta).epsilon if self.gamma is not None else math.inf
        return self

    def _distill(self, noisy: NoisyLogitEnsemble, public: np.ndarray, rng: np.random.Generator) -> None:
        """Train the server model on the public set from the noisy ensemble (FedKD Algorithm 1, lines 8–12)."""
        server = clone(self.server_model)
        if _is_torch_classifier(server):
            overrides = {"epochs": self.distill_epochs, "batch_size": self.batch_size}
            server.set_params(**{k: v for k, v in overrides.items() if v is not None})
            if "random_state" in server.get_params(deep=False):
                server.set_params(random_state=int(rng.integers(2**31)))
            temperature = 1.0 if self.temperature is None else float(self.temperature)
            classes = np.arange(noisy.n_outputs)

            def fit_on(targets: np.ndarray, warm_start: bool) -> None:
                if self.loss == "kl":
                    server.fit_soft(public, softmax(targets / temperature, axis=1), loss="kl",
                                    temperature=temperature, classes=classes, warm_start=warm_start)
                else:
                    server.fit_soft(public, targets, loss=self.loss, classes=classes, warm_start=warm_start)

            if self.redraw_noise_per_batch:
                epochs = server.get_params()["epochs"]
                server.set_params(epochs=1)
                for epoch in range(epochs):
                    fit_on(noisy.read(), warm_start=epoch > 0)
                server.set_params(epochs=epochs)
            else:
                fit_on(noisy.read(), warm_start=False)
            self.server_model_ = server
            self.server_classes_ = classes
            self.distillation_ = f"soft targets: fit_soft(loss={self.loss!r}" + (
                f", temperature={temperature:g})" if self.loss == "kl" else ")")
            return
        targets = noisy.read()
        if self.multilabel:
            self.server_model_ = with_seed(server, int(rng.integers(2**31))).fit(public, (targets > 0).astype(np.int64))
            self.server_classes_ = np.arange(targets.shape[1])
            self.distillation_ = (
                "hard pseudo-labels: the noisy ensemble's positive entries (server model has no fit_soft)"
            )
            return
        fitted = fit_classifier(server, public, targets.argmax(axis=1), n_classes=targets.shape[1],
                                seed=int(rng.integers(2**31)))
        if fitted.estimator is None:
            raise ValueError("the noisy ensemble's argmax holds a single class: the server model cannot be trained")
        self.server_model_ = fitted.estimator
        self.server_classes_ = fitted.classes
        self.distillation_ = "hard pseudo-labels: argmax of the noisy ensemble (server model has no fit_soft)"

    # --- accounting -------------------------------------------------------------------------------------
    def _ledger(self, public: np.ndarray, n_parties: int, n_outputs: int, seed: int,
                trainings: list[Mechanism | None]) -> Ledger:
        """The releases; with DP-trained local models also their training, which every release but the class
        counts is derived from (logits of the DP models on public data, their noisy ensemble, the server model)."""
        ledger = Ledger(
            delta=self.delta,
            primary_unit="party",
            seeds={"random_state": seed},
            public_data_sha256=data_fingerprint({"public": public}),
            description=(
                f"FedKD server model: {n_parties} parties, {len(public)} public examples, "
                f"S = {self.quantization_scale} ({self.quantizer} quantizer), "
                f"γ = {self.gamma}, Z = {self.clip}, {self.weighting_} weights, "
                f"{type(self.server_model).__name__} server"
            ),
        )
        derived = record_local_training(ledger, trainings, what="FedKD local models")
        # Class-count weights are computed from the raw labels: the ensemble is then not post-processing of the
        # DP training alone (its own mechanism still covers it, whatever the weights).
        class_count = self.weighting_ == "class-count"
        if self.gamma is None:
            ledger.record_unaccounted("FedKD without noise (gamma=None): the ensemble is released as it is; "
                                      "no guarantee", derived_from_training=derived and not class_count)
        else:
            weights = None if class_count else self.weights_
            # The paper's grid keeps values within z_max·2⌈S/2⌉/S, z_max <= Z (clipped first): a public bound.
            bound = float(self.clip) * (1.0 if self.quantizer == "public"
                                        else 2 * math.ceil(self.quantization_scale / 2) / self.quantization_scale)
            release = {
                unit: QuantizedLaplaceEnsemble(
                    n_outputs, bound, float(self.gamma), len(public), weights=weights,
                    quantization_scale=int(self.quantization_scale), draws_per_example=self.draws_per_example_,
                    unit=unit,
                )
                for unit in ("party", "example")
            }
            ledger.record(
                release,
                note=(
                    f"noisy {self.weighting_}-weighted ensemble of quantized logits on {len(public)} public examples, "
                    f"Laplace scale 1/γ = {1 / self.gamma:g}, {self.draws_per_example_} draw(s) per example; "
                    "example level = party level (one example may change a whole local model)"
                ),
                derived_from_training=derived and not class_count,
            )
            ledger.record_unaccounted(
                "FedKD: each party's quantized logits reach the coordinator before noise is added; the guarantee "
                "covers the noisy ensemble and the server model (the public), not the coordinator's view",
                derived_from_training=derived, observers=("coordinator",),
            )
        if self.quantizer == "paper":
            ledger.record_unaccounted(
                "FedKD: the paper's quantizer (Eq. 4) takes z_max = max |logit| over every party's logits on the "
                "public set, computed by the coordinator and shared with every party to set the grid of step "
                "2·z_max/S: a data-dependent value that no mechanism covers (the parties see it too; the ledger "
                "does not publish it)"
                + ("" if self.gamma is None else f"; the public's ε rests on the public clip Z = {self.clip:g} "
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
        record_schema_exchange(ledger)
        return ledger

    # --- prediction -------------------------------------------------------------------------------------
    def _server_scores(self, X: np.ndarray) -> np.ndarray:
        """Multi-label server outputs: sigmoid logits (fit_soft server) or positive probabilities."""
        if _is_torch_classifier(self.server_model_):
            return expit(self.server_model_._logits(X))
        return _positive_probabilities(self.server_model_, X, len(self.classes_))

    @property
    def final_model_(self) -> Any:
        """The distilled server model (what ``privfed.save_bundle(model, path)`` publishes)."""
        return self.server_model_

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Labels predicted by the server model ((n, L) indicators with ``multilabel=True``)."""
        check_is_fitted(self, "server_model_")
        X = np.asarray(X)
        if self.multilabel:
            return (self._server_scores(X) > 0.5).astype(np.int64)
        codes = np.asarray(self.server_model_.predict(X), dtype=np.int64)
        return self.classes_[self.server_classes_[codes]]

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Class probabilities in ``classes_`` order (multi-label: P(label = 1) per label)."""
        check_is_fitted(self, "server_model_")
        X = np.asarray(X)
        if self.multilabel:
            return self._server_scores(X)
        proba = np.zeros((len(X), len(self.classes_)))
        proba[:, self.server_classes_] = self.server_model_.predict_proba(X)
        return proba
