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
* a :class:`~pipelines.models.torch_models.TorchClassifier`: ``predict_log_proba``
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

**The coordinator's view.** ``aggregator="skellam", secure_aggregation=True, sigma=σ`` removes the
trusted server: each party adds its Skellam share to its integer logit levels and the coordinator
receives only their noisy sum (:mod:`privfed.pipelines.fedkd.secure`; over Flower through SecAgg+), so the same
Skellam mechanism bounds the coordinator (at the shares of the parties not colluding with it, ``collusion``)
and the public. ``classes=`` (the public label set) makes every party
withhold its size and labels in the schema exchange, its class counts (``weighting="auto"`` is then
uniform) and its model's parameter count. With both (and a DP-SGD sampling rate that does not depend on
the party's size, ``DPConfig(sample_rate=...)``, if the local models are DP-trained), nothing reaches
the coordinator un-noised.

**Randomness.** The server draws the Laplace noise (every draw, redraws included) from its own
:class:`~privfed.accounting.NoiseSource`: secret (AES-CTR keyed from the server's OS entropy), never
derived from ``random_state``, sent or recorded. A DP-trained local model draws its DP-SGD noise from the
party's own source. ``random_state`` sets what no guarantee relies on: the local models' and the server
model's initialisation and shuffles. ``noise_seed=`` makes the noise reproducible, for tests and
reproductions only: the ledger then records the seed and every ε is ∞ for its holders.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from ...accounting import NoiseSource
from ...accounting.noise_source import check_noise_seed
from ...accounting.silo_budget import SiloBudget
from ..data.party_data import check_multilabel_parties, check_parties
from ..data.party_schema import local_schema_exchange
from ..protocol.dp_ledger import effective_noise_seed, receive_trainings
from ..protocol.executor import PartyTask, run_party_tasks
from ..protocol.messages import DEFAULT_MAX_BYTES
from ..protocol.run_parameters import records_run_parameters
from ..protocol.seeds import as_seed_sequence
from ..protocol.silo_gate import BudgetRefusal, RefusedRunError, admit, check_budgets, refusals_in, study_name
from .secure import FedKDLevelSum, secure_level_sum
from .server import (
    BandwidthReport,
    FedKDFit,
    NoisyLogitEnsemble,
    check_fedkd_settings,
    fedkd_server_step,
    paper_quantized,
)
from .steps import (
    PROBABILITY_FLOOR,
    FedKDLogits,
    FedKDPartyOutcome,
    _positive_probabilities,
    fedkd_party_step,
    fedkd_planned_release,
    fedkd_tasks,
    is_torch_classifier,
    local_models,
    logit_replies,
    party_logits,
    party_message,
    party_noise_seeds,
    receive_fedkd_replies,
)

__all__ = [
    "PROBABILITY_FLOOR", "BandwidthReport", "FedKD", "NoisyLogitEnsemble", "paper_quantized", "party_logits",
    "party_message",
]


def _party_step(task: PartyTask) -> FedKDPartyOutcome | BudgetRefusal:
    """One party's work in the in-process run (a joblib task): its silo's budget charged first (or a refusal),
    then the party step on its own data."""
    X, y, message, local_model, budget, study = task.data
    if budget is not None:
        refusal = admit(budget, fedkd_planned_release(message, local_model=local_model), study=study,
                        pipeline="fedkd")
        if refusal is not None:
            return refusal
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
        Distilled on the public set. A :class:`~pipelines.models.torch_models.TorchClassifier`
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
        Laplace noise of scale 1/γ per public example and class, added by the server. None adds no
        noise (no guarantee; recorded as such); it must be None with ``aggregator="skellam"``.
    aggregator : {"laplace", "skellam"}, default="laplace"
        ``"laplace"``: the server adds Laplace(1/γ) to the weighted sum it computes (it sees every
        party's quantized logits first). ``"skellam"`` (with ``secure_aggregation=True``, ``sigma``,
        ``gamma=None``): each party adds its share of Skellam noise to its integer logit levels and
        only the noisy sum reaches the server; uniform weights (:mod:`privfed.pipelines.fedkd.secure`).
        Over Flower the sum is Flower's SecAgg+ (``privfed.federation.secure_aggregation``, as for FedKT).
    secure_aggregation : bool, default=False
        True exactly when ``aggregator="skellam"``.
    sigma : float, default=None
        The Skellam noise's standard deviation in grid steps (Z/S each) on the sum of the parties'
        levels; required with ``aggregator="skellam"``, refused otherwise.
    collusion : int, default=None
        With ``secure_aggregation=True`` only: the number c of parties assumed to collude with the coordinator,
        in 0..n − 1. The colluders subtract their own Skellam shares, so the coordinator's ε is computed at the
        variance of the other contributors' shares; the public's at every contributor's. None: the worst
        coalition, every other party (c = n − 1), which leaves a party only its own share σ²/n (as FedKT's
        ``collusion``; :mod:`privfed.pipelines.protocol.secure_sum`).
    clip : float or None, default=10.0
        Z, the public bound the logits are clipped to before quantization (FedKD
        takes z_max from the data, which voids the guarantee; here Z is fixed in
        advance). None (only without noise) leaves the logits unclipped.
    weighting : {"auto", "class-count", "uniform"}, default="auto"
        ω_k^c = N_k^c / Σ_k N_k^c (FedKD Eq. 3; the counts are sent to the coordinator in
        clear and the mechanism's sensitivity is 2ZC), or public weights 1/K (sensitivity
        2ZC/K; the parties send no class counts). ``"auto"``: uniform when every local
        model is DP-trained (``dp=``), so that the DP-SGD bound covers everything the
        coordinator and the public see, under secure aggregation, or with ``classes=``;
        class-count otherwise (the paper's). The weighting used is ``weighting_``.
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
    classes : array-like, default=None
        The federation's public label set (single-label only). Given, every party checks its labels against
        it and withholds its size and labels from the coordinator (the schema exchange then leaves the
        ledger), sends no class counts (unless ``weighting="class-count"`` asks for them) and no parameter
        count (``bandwidth_``'s FedAvg comparison is then None). None: the classes are the union of the
        parties' labels, and the coordinator learns each party's size and labels (recorded in the ledger).
    random_state : int, default=None
        Seeds what no guarantee relies on: the local and server models' initialisation and shuffles.
    noise_seed : int or None, default=None
        None (the default): the server's Laplace noise and the parties' DP-SGD noise come from secret
        sources, drawn where they are added. An int makes that noise reproducible (with ``random_state``,
        the whole run), for tests and reproductions only: the ledger records the seed and every ε of it
        is ∞ for its holders.
    n_jobs : int, default=1
        Parties trained in parallel (joblib).
    progress : bool or None, default=None
        A progress bar over the parties' training: ``None`` on a terminal only, ``True`` always,
        ``False`` never (see :mod:`privfed.pipelines.protocol.progress`).

    Attributes
    ----------
    classes_ : ndarray
        Labels seen in the parties' data, or ``classes`` when given (multi-label: ``arange(L)``).
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
    refused_ : list of Refusal
        The parties whose silo budgets (``fit(..., budgets=...)``) refused, with their reasons; they sent nothing.

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
        aggregator: str = "laplace",
        secure_aggregation: bool = False,
        sigma: float | None = None,
        collusion: int | None = None,
        clip: float | None = 10.0,
        weighting: str = "auto",
        loss: str = "l2",
        temperature: float | None = None,
        distill_epochs: int | None = None,
        batch_size: int | None = None,
        multilabel: bool = False,
        redraw_noise_per_batch: bool = False,
        delta: float = 1e-5,
        classes: Any = None,
        random_state: int | None = None,
        noise_seed: int | None = None,
        n_jobs: int = 1,
        progress: bool | None = None,
    ) -> None:
        self.local_model = local_model
        self.server_model = server_model
        self.quantization_scale = quantization_scale
        self.quantizer = quantizer
        self.gamma = gamma
        self.aggregator = aggregator
        self.secure_aggregation = secure_aggregation
        self.sigma = sigma
        self.collusion = collusion
        self.clip = clip
        self.weighting = weighting
        self.loss = loss
        self.temperature = temperature
        self.distill_epochs = distill_epochs
        self.batch_size = batch_size
        self.multilabel = multilabel
        self.redraw_noise_per_batch = redraw_noise_per_batch
        self.delta = delta
        self.classes = classes
        self.random_state = random_state
        self.noise_seed = noise_seed
        self.n_jobs = n_jobs
        self.progress = progress

    def _validate(self) -> None:
        """Check the hyper-parameters (``privfed.federation`` calls this before starting anything)."""
        check_fedkd_settings(self)
        check_noise_seed(self.noise_seed)

    def _noise_source(self) -> NoiseSource:
        """The run's root noise source: secret, or seeded by ``noise_seed`` (shared with ``privfed.federation``)."""
        return NoiseSource.for_task(effective_noise_seed(self))

    # --- fitting ----------------------------------------------------------------------------------------
    @records_run_parameters
    def fit(self, parties: Sequence[tuple[np.ndarray, np.ndarray]], public: np.ndarray, *,
            budgets: Sequence[SiloBudget | None] | None = None, study: str | None = None) -> FedKD:
        """Run FedKD on the parties' private data and the unlabeled public set.

        A driver over the party step of :mod:`privfed.pipelines.fedkd.steps` and the server step of
        :mod:`privfed.pipelines.fedkd.server`: every message goes through its wire form, exactly as in a
        Flower run (``privfed.federation``).

        ``budgets``: one :class:`~privfed.SiloBudget` (or None) per party. A party with a budget charges its
        reply's release (:func:`~privfed.pipelines.fedkd.steps.fedkd_planned_release`: its local model's DP-SGD;
        under secure aggregation its own Skellam share)
        under ``study`` (default ``"FedKD fit"``) before touching its data, or refuses (listed in ``refused_``);
        the others go on, and a run every party refused raises
        :class:`~privfed.pipelines.protocol.silo_gate.RefusedRunError`.
        """
        self._validate()
        budgets = check_budgets(budgets, len(parties), public_classes=self.classes)
        schemas = None
        if self.multilabel:
            parties, public = check_multilabel_parties(parties, public)
            self.classes_ = np.arange(parties[0][1].shape[1])
        else:
            parties, public = check_parties(parties, public)
            _, schemas, self.classes_ = local_schema_exchange(parties, public.shape[1:], public_classes=self.classes)
        models = local_models(self, len(parties))
        seed_sequence = as_seed_sequence(self.random_state)
        party_seeds, server_seeds = seed_sequence.spawn(2)
        noise = self._noise_source()
        tasks = fedkd_tasks(self, public, self.classes_, party_seeds, len(parties),
                            noise_seeds=party_noise_seeds(noise, len(parties)))
        study = study_name(study, "FedKD")
        answers: list[FedKDPartyOutcome | BudgetRefusal] = run_party_tasks(
            _party_step, [(X, y, task, m, budget, study)
                          for (X, y), task, m, budget in zip(parties, tasks, models, budgets)], config=None,
            random_state=party_seeds, n_jobs=self.n_jobs, progress=self.progress,
        )
        self.refused_ = refusals_in([[a.to_record()] if isinstance(a, BudgetRefusal) else [] for a in answers])
        kept = [index for index, answer in enumerate(answers) if not isinstance(answer, BudgetRefusal)]
        if not kept:
            raise RefusedRunError(self.refused_, "FedKD cannot run: no party took part")
        outcomes: list[FedKDPartyOutcome] = [answers[index] for index in kept]  # type: ignore[misc]
        tasks, models = [tasks[index] for index in kept], [models[index] for index in kept]
        if schemas is not None:
            schemas = [schemas[index] for index in kept]
        names = [f"party {index}" for index in kept]
        sent = [[message.to_record() for message in outcome.sent()] for outcome in outcomes]
        replies: list[FedKDLogits] | FedKDLevelSum
        if self.secure_aggregation:  # the server step sees only the sum of the parties' noisy levels
            replies = secure_level_sum(tasks, sent, names, max_bytes=DEFAULT_MAX_BYTES, n_parties=len(parties))
        else:
            replies = receive_fedkd_replies(tasks, sent, names, max_bytes=DEFAULT_MAX_BYTES)
        trainings = receive_trainings(sent, names, max_bytes=DEFAULT_MAX_BYTES, models=models)
        return self._set_fitted(fedkd_server_step(self, replies, public, server_seeds,
                                                  int(cast(int, seed_sequence.entropy)), trainings, noise=noise,
                                                  schemas=schemas))

    @records_run_parameters
    def fit_logits(self, party_logits: Sequence[np.ndarray], class_counts: np.ndarray, public: np.ndarray, *,
                   classes: np.ndarray | None = None, parameter_counts: Sequence[int | None] | None = None) -> FedKD:
        """Run FedKD from the parties' logits on the public set, computed elsewhere (a federated runtime, a cache).

        Each party's logits (its :func:`party_logits` output, shape (n_public, C)) are
        clipped and quantized here as the party would before sending
        (:func:`party_message`), then the server runs exactly as in :meth:`fit`; with
        the same ``random_state`` and ``noise_seed`` the noise and the server model are those of :meth:`fit`.

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
        if self.secure_aggregation:
            raise ValueError("fit_logits quantizes the parties' logits on the server; secure_aggregation=True needs "
                             "fit (each party adds its Skellam share before anything leaves it)")
        public = np.asarray(public)
        self.classes_, results = logit_replies(self, party_logits, class_counts, public, classes=classes,
                                               parameter_counts=parameter_counts)
        seed_sequence = as_seed_sequence(self.random_state)
        return self._set_fitted(fedkd_server_step(self, results, public, seed_sequence.spawn(2)[1],
                                                  int(cast(int, seed_sequence.entropy)), noise=self._noise_source()))

    def _set_fitted(self, fitted: FedKDFit) -> FedKD:
        """Set the fitted attributes from the server step's result (shared with ``privfed.federation``)."""
        self.weighting_, self.z_max_, self.weights_ = fitted.weighting, fitted.z_max, fitted.weights
        self.server_model_, self.server_classes_ = fitted.server_model, fitted.server_classes
        self.distillation_, self.noisy_ensemble_ = fitted.distillation, fitted.noisy_ensemble
        self.draws_per_example_, self.bandwidth_ = fitted.draws_per_example, fitted.bandwidth
        self.ledger_, self.epsilon_ = fitted.ledger, fitted.epsilon
        self.evidence_: dict[str, np.ndarray] = {}
        return self

    # --- prediction -------------------------------------------------------------------------------------
    def _server_scores(self, X: np.ndarray) -> np.ndarray:
        """Multi-label server outputs: sigmoid logits (fit_soft server) or positive probabilities."""
        if is_torch_classifier(self.server_model_):
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
