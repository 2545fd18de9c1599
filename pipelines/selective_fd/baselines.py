"""The baselines of Selective-FD: FedMD (no selector) and independent learning (nothing shared).

Both run Selective-FD's protocol (:class:`~privfed.pipelines.selective_fd.driver._FederatedDistillation`) with other
settings: :class:`FedMD` shares every prediction, :class:`IndependentLearning` trains each client alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...accounting._checks import check_delta
from .driver import _check_distillation, _FederatedDistillation
from .steps import FDProtocol

__all__ = ["FedMD", "IndependentLearning"]


class FedMD(_FederatedDistillation):
    """The unselected federated-distillation baseline: every client shares every prediction (FedMD-style).

    Selective-FD's protocol with neither selector (Li & Wang, "FedMD: heterogenous
    federated learning via model distillation", 2019, as the Selective-FD paper runs
    it): each round the server averages all clients' predictions on a random proxy
    batch and every client distils from the average. Parameters, attributes and
    privacy modes as in :class:`~privfed.pipelines.selective_fd.estimator.SelectiveFD`.
    """

    _estimator_name = "FedMD"

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
        return FDProtocol(
            rounds=self.rounds, local_steps=self.local_steps, distill_steps=self.distill_steps,
            proxy_batch=self.proxy_batch, labels=self.labels, temperature=float(self.temperature), selector=None,
            tau_server=2.0, privacy=self.privacy, epsilon_per_round=self.epsilon_per_round, sigma=self.sigma,
            shares=True, name=self._estimator_name, threshold=self.threshold, sigma_threshold=self.sigma_threshold,
        )


class IndependentLearning(_FederatedDistillation):
    """Each client trains alone: ``rounds`` × ``local_steps`` mini-batches on its own data, nothing shared.

    The lower baseline of federated distillation, at the same round count. Models
    that cannot continue training are fitted once. ``fit(parties, public=None)``
    ignores ``public``. The ledger records that nothing is shared and that the model
    has no guarantee for its own client.
    ``progress`` shows a bar over the rounds and ``noise_seed`` (None: secret) is the DP-SGD client models' noise, as
    in :class:`~privfed.pipelines.selective_fd.estimator.SelectiveFD`.
    """

    _estimator_name = "Independent learning"

    def __init__(
        self,
        model: Any,
        *,
        rounds: int = 10,
        local_steps: int = 10,
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
        check_delta(self.delta)
        return FDProtocol(
            rounds=self.rounds, local_steps=self.local_steps, distill_steps=1, proxy_batch=1, labels="hard",
            temperature=1.0, selector=None, tau_server=2.0, privacy=None, epsilon_per_round=None, sigma=None,
            shares=False, name=self._estimator_name,
        )
