"""Selective-FD: selective knowledge sharing in federated distillation.

Shao, Wu, Zhang, "Selective knowledge sharing for privacy-preserving federated
distillation without a good teacher", Nat. Commun. 15, 349 (2024). Every client
keeps a private data set and its own (possibly different) model. Each round:

1. every client trains on its own data (``local_steps`` mini-batch steps);
2. the server draws ``proxy_batch`` examples of the unlabeled proxy (public) set;
   every client predicts them and, through its *client-side selector*, shares its
   prediction only on the examples its KuLSIF density ratio deems in-distribution
   (:class:`~pipelines.selective_fd.kulsif.DensityRatioSelector`, threshold τ_client);
3. the server averages, per example, the predictions of the clients that shared
   (equal weights), and its *server-side selector* drops the examples whose
   ensemble confidence max_c e_c(x) is below 1 − τ_server/2 (that is, whose ℓ1
   distance to the one-hot of its argmax, 2(1 − max_c e_c), exceeds τ_server;
   τ_server = 2 keeps all);
4. the ensemble goes back to every client, which distils from it
   (``distill_steps`` steps): soft-target cross-entropy for ``labels="soft"``
   (KL to the ensemble at ``temperature``), cross-entropy on its argmax for
   ``labels="hard"``.

Its baselines (:mod:`~privfed.pipelines.selective_fd.baselines`):
:class:`~privfed.pipelines.selective_fd.baselines.FedMD` is the same protocol without either selector (every client
shares every prediction: Li & Wang, "FedMD", 2019, the paper's unselected baseline), and
:class:`~privfed.pipelines.selective_fd.baselines.IndependentLearning` trains each client alone for the same number
of rounds.

Privacy (beyond the paper, which has none). The guarantee covers what leaves a
client: its shared labels.

* ``privacy=None``: predictions are shared in the clear; no guarantee (recorded).
* ``privacy="rr"``: hard labels pass through k-ary randomized response before they
  are shared (:class:`~accounting.RandomizedResponse`): ``epsilon_per_round`` is the
  ε-LDP of one client's report of a round, spread over the ``proxy_batch`` labels it
  may send (each label ε/batch), composed over the rounds and in parallel over the
  clients (disjoint data); party level, and example level with the same number.
* ``privacy="gnmax"``: clients share hard labels in the clear with the *server*, which
  adds N(0, σ²) to every vote count and returns the noisy argmax
  (:class:`~accounting.GaussianNoisyMax`, PATE 2018): one client moves one vote per
  example (k = 1), so the release is (σ, k = 1) GNMax at party and example level,
  composed over every answered example of every round. The server is trusted.

The selector decisions (which examples each client shares, hence how many clients
voted on each) depend on the private data. The raw-data KuLSIF selector releases
them without noise: the ledger records them as an ``unaccounted`` entry. With
DP-SGD client models (``dp=``) the selectors are differentially private by default
(``dp_selector``; :mod:`~privfed.pipelines.selective_fd.dp_selector`): each client's only use of
its data for selecting is one Gaussian-noised sum of random features, recorded as
an example-level Gaussian mechanism, and its share masks are post-processing of it
and of the proxy set, so the example-level DP-SGD bound covers the whole run. The fitted model is one
client's (``client``), trained on that client's raw data: the ε protects the *other*
clients' data against whoever holds it, never the client's own (also recorded).

Models. TorchClassifier-family models (anything with ``partial_fit`` and
``partial_fit_soft``) keep training across rounds: exactly ``local_steps``
mini-batches on the local data and ``distill_steps`` on the returned ensemble per
round. Other scikit-learn classifiers cannot continue training, so they are refitted
from scratch each round on the local data plus every proxy example distilled so far
with its ensemble's hard label (a soft ensemble is reduced to its argmax);
``local_steps``, ``distill_steps`` and ``temperature`` do not apply to them.

Steps. The protocol is written as party steps over wire messages in :mod:`privfed.pipelines.selective_fd.steps`,
the server's step of a round in :mod:`privfed.pipelines.selective_fd.aggregation`, and the server's side of a run
(rounds, checkpoints, ledger) in :mod:`privfed.pipelines.selective_fd.server`; ``fit``
(:mod:`privfed.pipelines.selective_fd.driver`) drives them in this process, and ``privfed.federation`` runs the
same steps with each client on its own Flower SuperNode.

Prediction. ``predict`` uses one client's model (``client``, default 0), and
:meth:`client_scores` gives every client's accuracy (the paper reports their mean).
Not the average of all clients' models: in federated distillation models never leave
their clients (sharing them is what the protocol avoids), so no party holds such an
average, and it would carry every client's un-noised model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...accounting._checks import check_int_at_least, check_positive_finite, check_probability
from ..models.fitting import is_dp_trained
from .aggregation import confident_examples
from .dp_selector import DPDensityRatioSelector, selector_noise_multiplier
from .driver import _check_distillation, _FederatedDistillation
from .kulsif import DensityRatioSelector
from .steps import FDProtocol

__all__ = ["SelectiveFD"]


class SelectiveFD(_FederatedDistillation):
    """Selective-FD: federated distillation with client-side (KuLSIF) and server-side selectors.

    Parameters
    ----------
    model : estimator or sequence of estimators
        A classifier with ``fit``/``predict_proba`` cloned for every client, or one per
        client (heterogeneous models). TorchClassifier-family models continue training
        across rounds; other classifiers are refitted each round (see the module docstring).
    rounds : int, default=10
        Communication rounds.
    local_steps : int, default=10
        Mini-batches of local training per round (continuing models).
    distill_steps : int, default=10
        Mini-batches of distillation on the returned ensemble per round (continuing models).
    proxy_batch : int, default=512
        Proxy examples the server draws (without replacement) each round.
    labels : {"soft", "hard"}, default="soft"
        Share probabilities and distil with soft-target cross-entropy, or share argmax
        labels and distil with cross-entropy.
    temperature : float, default=1.0
        T: shared probabilities are softmax(z/T) (p^{1/T} renormalised) and distillation
        matches them at T.
    tau_client : float or None, default=0.25
        The client threshold's quantile of r̂ on held-out local data (in [0, 1)). None: no
        client-side selector (every client shares every proxy example; with ``tau_server`` < 2
        only the server-side selector acts — the paper's ablation).
    tau_server : float, default=1.0
        The server keeps an example if its ensemble's top class has at least 1 − τ/2 of
        the mass (τ in [0, 2]; 2 keeps all; the default needs a majority).
    kernel_width : float or "median", default="median"
        σ of KuLSIF's Gaussian kernel, in the units of the inputs (or of ``feature_map``).
    regularization : float, default=1e-3
        KuLSIF's λ.
    n_auxiliary : int, default=1000
        KuLSIF's uniform auxiliary samples.
    max_known : int, default=1000
        Known samples KuLSIF keeps per client (uniform subsample).
    validation_fraction : float, default=0.2
        Share of each client's data held out to set its threshold.
    feature_map : callable or None, default=None
        Features the selector works on (raw flattened inputs when None).
    dp_selector : bool or None, default=None
        Whether the client-side selectors are differentially private
        (:class:`~privfed.pipelines.selective_fd.dp_selector.DPDensityRatioSelector`: random-feature uLSIF of the
        client's density against the proxy set's, from one Gaussian-noised sum of the client's features; its
        threshold from the proxy set). None: when every client model trains with DP-SGD (``dp=``), else not. False: the
        raw-data KuLSIF selector (its decisions are then an unaccounted release). The DP selector uses
        ``tau_client``, ``kernel_width`` (``"median"``: over the proxy set) and ``n_auxiliary`` (proxy samples);
        ``regularization``, ``max_known``, ``validation_fraction`` are the raw-data selector's.
    dp_selector_epsilon : float, default=1.0
        The DP selector's ε at ``delta`` (example level): its Gaussian noise σ is calibrated to it.
    dp_selector_frequencies : int, default=128
        Random Fourier frequencies of the DP selector (twice as many features).
    dp_selector_regularization : float, default=1e-2
        λ of the DP selector's uLSIF.
    privacy : {None, "rr", "gnmax", "confident-gnmax"}, default=None
    epsilon_per_round : float, default=None
        ``privacy="rr"``: ε-LDP of one client's report of one round.
    sigma : float, default=None
        ``privacy="gnmax"`` or ``"confident-gnmax"``: the standard deviation of the Gaussian noise
        added to each vote count, in votes (one client = one vote per example).
    threshold, sigma_threshold : float, default=None
        ``privacy="confident-gnmax"`` (PATE 2018 Algorithm 1): the server answers a shared example only
        when its top vote count plus N(0, σ₁²) reaches ``threshold`` (both in votes), then by GNMax;
        accounted by ``ConfidentGNMax`` (every shared example pays the threshold step, the answered
        ones GNMax too).
    delta : float, default=1e-5
        The ledger's δ.
    classes : array-like, default=None
        The federation's public label set. Given, every client checks its labels against it and withholds its
        size and labels from the coordinator: the schema exchange then leaves the ledger. None: the classes
        are the union of the clients' labels, and the coordinator learns each client's size and labels
        (recorded in the ledger).
    client : int, default=0
        Whose model ``predict`` uses.
    callback : callable or None, default=None
        ``callback(estimator, round_index)`` after every round, with ``models_`` current
        (learning curves; the fitted model is the last round's, never the best one).
    random_state : int, default=None
        Seeds what no guarantee relies on: the selectors' data splits and public draws, model initialisation,
        mini-batch order, the proxy batches and tie-breaks.
    n_jobs : int, default=1
        Clients run in parallel (joblib) within a round.
    progress : bool or None, default=None
        A progress bar over the rounds: ``None`` on a terminal only, ``True`` always, ``False``
        never (see :mod:`privfed.pipelines.protocol.progress`).
    noise_seed : int or None, default=None
        None: every draw a guarantee relies on (randomized-response coins, DP-selector noise, DP-SGD noise and
        sampling, the server's GNMax noise) comes from a secret source of whoever adds it, never from
        ``random_state``, and nothing noise-related is in any message or the ledger. An int makes all of it
        reproducible (tests and reproductions): the seeds derived from it travel in the messages, and the
        ledger records it and says that every ε is ∞ for its holders.

    Attributes
    ----------
    classes_ : ndarray
    models_ : list
        Every client's fitted model (partial-fit estimators keep the data's labels;
        refitted models are FittedClassifier objects over class codes).
    selectors_ : list of DensityRatioSelector or DPDensityRatioSelector
        Every client's fitted selector.
    history_ : dict of lists
        Per round: ``shared_fraction`` (of client × example pairs), ``sharers_per_example``
        and ``kept`` (examples the server returned).
    ledger_ : accounting.Ledger
    evidence_ : dict of ndarray
        ``server_votes`` under GNMax (private).
    refused_ : list of Refusal
        The parties whose silo budgets (``fit(..., budgets=...)``) refused, with the round (1 for the setup) and
        their reasons; each stopped taking part there.
    participation_ : ndarray of int, shape (n_clients,)
        Rounds each party took part in (fewer for a party whose silo stopped it).

    Examples
    --------
    >>> from sklearn.datasets import load_digits
    >>> from pipelines.models.torch_models import TorchMLP
    >>> X, y = load_digits(return_X_y=True)
    >>> X = X / 16
    >>> parties = [(X[:1000][y[:1000] % 5 == c], y[:1000][y[:1000] % 5 == c]) for c in range(5)]
    >>> model = SelectiveFD(TorchMLP(hidden=(32,)), rounds=2, proxy_batch=100, random_state=0)
    >>> model = model.fit(parties, X[1000:1400])
    >>> any("no noise is added at all" in text for text in model.ledger_.unaccounted)
    True
    """

    _estimator_name = "Selective-FD"

    def __init__(
        self,
        model: Any,
        *,
        rounds: int = 10,
        local_steps: int = 10,
        distill_steps: int = 10,
        proxy_batch: int = 512,
        labels: str = "soft",
        temperature: float = 1.0,
        tau_client: float | None = 0.25,
        tau_server: float = 1.0,
        kernel_width: float | str = "median",
        regularization: float = 1e-3,
        n_auxiliary: int = 1000,
        max_known: int = 1000,
        validation_fraction: float = 0.2,
        feature_map: Callable[[np.ndarray], np.ndarray] | None = None,
        dp_selector: bool | None = None,
        dp_selector_epsilon: float = 1.0,
        dp_selector_frequencies: int = 128,
        dp_selector_regularization: float = 1e-2,
        privacy: str | None = None,
        epsilon_per_round: float | None = None,
        sigma: float | None = None,
        threshold: float | None = None,
        sigma_threshold: float | None = None,
        delta: float = 1e-5,
        classes: Any = None,
        client: int = 0,
        callback: Callable[[Any, int], None] | None = None,
        random_state: int | None = None,
        n_jobs: int = 1,
        progress: bool | None = None,
        noise_seed: int | None = None,
    ) -> None:
        self.model = model
        self.rounds = rounds
        self.local_steps = local_steps
        self.distill_steps = distill_steps
        self.proxy_batch = proxy_batch
        self.labels = labels
        self.temperature = temperature
        self.tau_client = tau_client
        self.tau_server = tau_server
        self.kernel_width = kernel_width
        self.regularization = regularization
        self.n_auxiliary = n_auxiliary
        self.max_known = max_known
        self.validation_fraction = validation_fraction
        self.feature_map = feature_map
        self.dp_selector = dp_selector
        self.dp_selector_epsilon = dp_selector_epsilon
        self.dp_selector_frequencies = dp_selector_frequencies
        self.dp_selector_regularization = dp_selector_regularization
        self.privacy = privacy
        self.epsilon_per_round = epsilon_per_round
        self.sigma = sigma
        self.threshold = threshold
        self.sigma_threshold = sigma_threshold
        self.delta = delta
        self.classes = classes
        self.client = client
        self.callback = callback
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.progress = progress
        self.noise_seed = noise_seed

    def _protocol(self) -> FDProtocol:
        self._check_common()
        _check_distillation(self)
        confident_examples(np.ones((1, 2)) / 2, self.tau_server)  # validates tau_server
        selector = None
        if self.dp_selector not in (None, True, False):
            raise TypeError(f"dp_selector must be None (DP when every client model has dp=), True or False, "
                            f"got {self.dp_selector!r}")
        check_positive_finite("dp_selector_epsilon", self.dp_selector_epsilon)
        check_int_at_least("dp_selector_frequencies", self.dp_selector_frequencies, 1)
        check_positive_finite("dp_selector_regularization", self.dp_selector_regularization)
        if self.dp_selector and self.tau_client is None:
            raise ValueError("dp_selector=True needs a client-side selector; got tau_client=None (no selector)")
        if self.tau_client is not None:
            check_probability("tau_client", self.tau_client, open_low=False, open_high=True)
            if self._private_selectors():
                selector = DPDensityRatioSelector(
                    quantile=self.tau_client,
                    noise_multiplier=selector_noise_multiplier(epsilon=self.dp_selector_epsilon, delta=self.delta),
                    n_frequencies=self.dp_selector_frequencies, kernel_width=self.kernel_width,
                    regularization=self.dp_selector_regularization, n_auxiliary=self.n_auxiliary,
                    feature_map=self.feature_map,
                )
                selector.validate()
            else:
                selector = DensityRatioSelector(
                    quantile=self.tau_client, validation_fraction=self.validation_fraction,
                    feature_map=self.feature_map, kernel_width=self.kernel_width, regularization=self.regularization,
                    n_auxiliary=self.n_auxiliary, max_known=self.max_known,
                )
                _validate_selector(selector)
        return FDProtocol(
            rounds=self.rounds, local_steps=self.local_steps, distill_steps=self.distill_steps,
            proxy_batch=self.proxy_batch, labels=self.labels, temperature=float(self.temperature), selector=selector,
            tau_server=float(self.tau_server), privacy=self.privacy, epsilon_per_round=self.epsilon_per_round,
            sigma=self.sigma, shares=True, name=self._estimator_name, threshold=self.threshold,
            sigma_threshold=self.sigma_threshold,
        )

    def _private_selectors(self) -> bool:
        """Whether the client-side selectors are the DP ones: ``dp_selector``, or by default whether every client
        model trains with DP-SGD."""
        if self.dp_selector is not None:
            return bool(self.dp_selector)
        models = self.model if isinstance(self.model, (list, tuple)) else [self.model]
        return all(is_dp_trained(model) for model in models)


def _validate_selector(selector: DensityRatioSelector) -> None:
    """Check the selector's settings before any work (the selector itself validates again in fit)."""
    from .kulsif import KuLSIF

    check_probability("validation_fraction", selector.validation_fraction)
    if selector.feature_map is not None and not callable(selector.feature_map):
        raise TypeError(f"feature_map must be None or a callable X -> features, got {selector.feature_map!r}")
    KuLSIF(kernel_width=selector.kernel_width, regularization=selector.regularization,
           n_auxiliary=selector.n_auxiliary, max_known=selector.max_known)._validate()
