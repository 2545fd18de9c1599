"""Selective-FD's server over a run (and FedMD's, independent learning's): setup, rounds, checkpoints, ledger.

The server sends every party its :class:`~privfed.pipelines.selective_fd.steps.SelectiveFDSetup`, then
each round draws the proxy batch, collects the parties' shares
(:func:`~privfed.pipelines.selective_fd.aggregation.receive_shares`), aggregates and selects them
(:func:`~privfed.pipelines.selective_fd.aggregation.server_round`) and returns the ensemble for distillation.
After the last round it collects the published model and the parties' DP-SGD reports and records the
ledger (:func:`fd_ledger`). :class:`FDServer` holds the server's state between rounds and saves and
restores it for round checkpoints. The parties are reached through a ``clients`` object with the calls
of :class:`~privfed.pipelines.selective_fd.local_clients.LocalClients` (the party steps in this process), which
the Flower app implements over its SuperNodes; ``SelectiveFD.fit`` and the Flower app drive the same
:class:`FDServer` round by round.

Randomness. ``random_state`` seeds the parties' ``seed`` fields and the server's proxy batches and tie-breaks:
nothing a guarantee relies on. The noise is drawn by whoever adds it from a
:class:`~privfed.accounting.NoiseSource` (:class:`NoiseSeeds`): by default every party and the server build fresh
secret sources and no message carries anything noise-related; with ``noise_seed`` (tests and reproductions) the
server derives one seed per party and draw from it and sends them in the messages, and the ledger records the
seed and says that every ε is ∞ for its holders. A round checkpoint stores no noise state: the server's
generator state it keeps (``rng``) is ``random_state``'s, and a resumed run derives the remaining rounds' noise
seeds again from ``noise_seed`` (bit-identical to the uninterrupted run) or, by default, draws the remaining rounds'
noise from fresh secret sources (the same protocol, not the same noise).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from ...accounting import (
    ConfidentGNMax,
    GaussianNoisyMax,
    Ledger,
    RandomizedResponse,
    WithheldVotesNoisyMax,
)
from ...accounting.fingerprint import data_fingerprint
from ...accounting.mechanism import Mechanism
from ...accounting.noise_source import NoiseSource
from ..data.party_schema import PartySchema, record_schema_exchange
from ..models.fitting import is_dp_trained
from ..protocol.checkpoint import RoundCheckpoint
from ..protocol.dp_ledger import receive_trainings, record_local_training
from ..protocol.messages import Record, Traffic, record_sizes
from ..protocol.preflight import warn_if_noise_drowns_votes
from ..protocol.seeds import as_seed_sequence, spawn_seeds
from ..protocol.silo_gate import RefusalLog, refusals_in
from .aggregation import receive_shares, server_round
from .dp_selector import DPDensityRatioSelector, selector_mechanism
from .steps import (
    STATE_KIND,
    FDProtocol,
    SelectiveFDEnsemble,
    SelectiveFDRound,
    SelectiveFDShare,
    setup_messages,
)

__all__ = ["FDFit", "FDServer", "NoiseSeeds", "fd_ledger"]


@dataclass(frozen=True)
class NoiseSeeds:
    """The noise seeds of a run, from its root :class:`~privfed.accounting.NoiseSource`: all None for a secret root
    (every party and the server draw their own noise), else derived from the seed by position (nothing drawn).

    ``setups[p]``: party p's DP-selector noise; ``rounds[r][p]``: party p's randomized-response coins and DP-SGD
    noise in round r; ``server[r]``: the server's GNMax noise in round r.
    """

    setups: list[int | None]
    rounds: list[list[int | None]]
    server: list[int | None]

    @classmethod
    def of(cls, root: NoiseSource, *, n_parties: int, rounds: int) -> NoiseSeeds:
        setups, per_round, server = root.child_seeds(3)
        return cls(setups=NoiseSource.for_task(setups).child_seeds(n_parties),
                   rounds=[NoiseSource.for_task(seed).child_seeds(n_parties)
                           for seed in NoiseSource.for_task(per_round).child_seeds(rounds)],
                   server=NoiseSource.for_task(server).child_seeds(rounds))


@dataclass(frozen=True, eq=False)
class FDFit:
    """The run's result: the fitted attributes of a Selective-FD, FedMD or independent-learning estimator."""

    models: list[Any]
    n_rounds: int
    bandwidth: dict[str, list[int]]
    ledger: Ledger
    evidence: dict[str, np.ndarray]


class FDServer:
    """The server's side of a Selective-FD (FedMD, independent-learning) run over ``clients``.

    Parameters
    ----------
    protocol : FDProtocol
        The run's validated settings.
    classes : ndarray
        The federation's classes.
    public : ndarray or None
        The proxy set (None when nothing is shared).
    schemas : sequence of PartySchema
        The parties' schemas (their exchange is counted in the traffic).
    names : sequence of str
        The parties' names, for error messages.
    models : sequence of estimators
        Each party's unfitted model (their DP configuration is checked against the parties' reports).
    client : int
        The party whose model the run publishes.
    delta : float
        The ledger's δ.
    random_state : int or None
        Seeds what no guarantee relies on (the parties' seeds, the proxy batches, tie-breaks).
    max_bytes : int
        The largest record a party may send.
    checkpoint : RoundCheckpoint, default=None
        With in-process clients only: the run continues after the rounds it saved (:meth:`start`).
    noise_seed : int or None, default=None
        None: every party and the server draw their noise from their own secret sources. An int (tests and
        reproductions): all noise derives from it (:class:`NoiseSeeds`), and the ledger says every ε is ∞.
    """

    def __init__(self, protocol: FDProtocol, classes: np.ndarray, public: np.ndarray | None,
                 schemas: Sequence[PartySchema], names: Sequence[str], *, models: Sequence[Any], client: int,
                 delta: float, random_state: Any, max_bytes: int, checkpoint: RoundCheckpoint | None = None,
                 noise_seed: int | None = None) -> None:
        self.protocol, self.classes, self.public, self.names = protocol, classes, public, names
        self.models, self.client, self.delta, self.max_bytes = list(models), client, delta, max_bytes
        n_parties, n_classes = len(schemas), len(classes)
        if protocol.privacy in ("gnmax", "confident-gnmax"):  # pre-flight: every client shares and agrees
            assert protocol.sigma is not None  # GNMax's σ is set (FDProtocol)
            warn_if_noise_drowns_votes(
                protocol.name, votes=n_parties, n_classes=n_classes, aggregator="gaussian", scale=float(protocol.sigma),
                what=f"each proxy example has at most {n_parties} votes (one per client)",
                advice="add less noise (a smaller sigma) or more clients")
        self._saved = checkpoint.load() if checkpoint is not None else None
        self.seed_sequence = (np.random.SeedSequence(int(self._saved[0]["entropy"])) if self._saved is not None
                              else as_seed_sequence(random_state))
        setup_seeds, round_seeds, server_seeds = self.seed_sequence.spawn(3)
        self.server_rng = np.random.default_rng(server_seeds)
        self.noise_source = NoiseSource.for_task(noise_seed)
        self.noise_seeds = NoiseSeeds.of(self.noise_source, n_parties=n_parties, rounds=protocol.rounds)
        self.batch = min(protocol.proxy_batch, len(cast(np.ndarray, public))) if protocol.shares else 0
        self.keep_probability = None
        if protocol.privacy == "rr":
            self.keep_probability = RandomizedResponse(
                n_classes, epsilon=protocol.epsilon_per_round, labels_per_report=self.batch
            ).keep_probability
        self.setups = setup_messages(protocol, classes, public if protocol.shares else None,
                                     spawn_seeds(setup_seeds, n_parties), self.keep_probability,
                                     noise_seeds=self.noise_seeds.setups)
        self.history: dict[str, list[float]] = {"shared_fraction": [], "sharers_per_example": [], "kept": []}
        self.released_votes: list[tuple[np.ndarray, np.ndarray]] = []
        self.traffic = Traffic.of([[s.to_record()] for s in schemas])
        self.schemas = list(schemas)  # what the schema exchange told the coordinator (the ledger records it)
        self.rounds_done = 0
        self._round_seeds = round_seeds.spawn(protocol.rounds)
        self.refusals = RefusalLog(n_parties, protocol.name)

    def start(self, clients: Any) -> None:
        """Set the parties up (setup messages), or put the checkpoint's state back into them and the server.

        A party whose silo refuses (its reply a budget refusal alone) takes no further part: it is sent nothing
        more and counts as sharing no example (:attr:`refusals`)."""
        if self._saved is None:
            self.refusals.round = 1
            self._note_refusals(clients.setup(self.setups))
        else:
            self._restore(self._saved, clients)

    def _note_refusals(self, sent: Sequence[Sequence[Record]]) -> set[int]:
        """Add the refusals among the parties' replies to :attr:`refusals`; return the parties that refused."""
        refused = refusals_in(sent, self.names, round=self.refusals.round)
        for refusal in refused:
            self.refusals.add(refusal.party, refusal.reason)
        return {refusal.party for refusal in refused}

    def _active(self, messages: Sequence[Any]) -> list[Any]:
        """``messages`` with None for the parties that stopped taking part."""
        stopped = self.refusals.stopped
        return [None if party in stopped else message for party, message in enumerate(messages)]

    def round(self, round_index: int, clients: Any) -> None:
        """One round: draw the proxy batch, collect the shares, aggregate and select, send the ensemble back."""
        protocol, n_parties = self.protocol, len(self.setups)
        share_seeds, distill_seeds = self._round_seeds[round_index].spawn(2)
        indices = (np.sort(self.server_rng.choice(len(cast(np.ndarray, self.public)), size=self.batch,
                                                  replace=False)) if self.batch
                   else np.zeros(0, dtype=np.int64))
        messages = [SelectiveFDRound(indices, seed, noise_seed) for seed, noise_seed
                    in zip(spawn_seeds(share_seeds, n_parties), self.noise_seeds.rounds[round_index])]
        self.refusals.round = round_index + 1
        records = [list(party_records) for party_records in clients.share(self._active(messages), round_index)]
        self.traffic.add(records)
        self._note_refusals(records)
        empty = (SelectiveFDShare(np.zeros(len(indices), dtype=bool),
                                  np.zeros((0, len(self.classes))) if protocol.labels == "soft"
                                  else np.zeros(0, dtype=np.int64)).to_record(),) if protocol.shares else ()
        records = [list(empty) if party in self.refusals.stopped else sent for party, sent in enumerate(records)]
        shares = receive_shares(messages, records, self.names, n_classes=len(self.classes), labels=protocol.labels,
                                shares=protocol.shares, max_bytes=self.max_bytes)
        if protocol.shares:
            outcome = server_round(cast(list[SelectiveFDShare], shares), len(self.classes), protocol,
                                   self.keep_probability, self.server_rng,
                                   noise=NoiseSource.for_task(self.noise_seeds.server[round_index]))
            if outcome.released is not None:
                self.released_votes.append(outcome.released)
            self.history["shared_fraction"].append(float(outcome.shared.mean()))
            self.history["sharers_per_example"].append(float(outcome.sharers.mean()))
            self.history["kept"].append(float(len(outcome.kept)))
            if len(outcome.kept):
                clients.distill(self._active([SelectiveFDEnsemble(indices[outcome.kept], outcome.targets, seed)
                                              for seed in spawn_seeds(distill_seeds, n_parties)]), round_index)
        self.rounds_done = round_index + 1

    def finish(self, clients: Any) -> FDFit:
        """After the last round: the published model(s), the parties' DP-SGD reports, the bandwidth, the ledger."""
        models, published = clients.final_models(self.client)
        trainings, reported = self._receive_trainings(clients)
        ledger, evidence = fd_ledger(self.protocol, n_classes=len(self.classes), public=self.public,
                                     batch=self.batch, released_votes=self.released_votes, trainings=trainings,
                                     models=self.models, client=self.client, delta=self.delta,
                                     seed=int(cast(int, self.seed_sequence.entropy)), noise=self.noise_source,
                                     schemas=self.schemas)
        return FDFit(models=models, n_rounds=self.protocol.rounds,
                     bandwidth={**self.traffic.totals(), **published, **reported}, ledger=ledger, evidence=evidence)

    def _receive_trainings(self, clients: Any) -> tuple[list[Any], dict[str, list[int]]]:
        """Each party's DP-SGD training from its ``dp-training`` report (None: not DP-trained), checked against
        its model's DP configuration (one Poisson epoch per round), and the reports' bytes; not asked for when
        no model is DP-trained."""
        if not any(is_dp_trained(model) for model in self.models):
            return [None] * len(self.names), {}
        reports = clients.trainings()
        stopped_at = {refusal.party: refusal.round for refusal in self.refusals.refused}
        trainings = [receive_trainings([sent], [name], max_bytes=self.max_bytes, models=[model],
                                       epochs=stopped_at.get(party, self.protocol.rounds + 1) - 1)[0]
                     for party, (sent, name, model) in enumerate(zip(reports, self.names, self.models))]
        return trainings, record_sizes(reports)

    # --- checkpoints ---------------------------------------------------------------------------------
    def state(self, clients: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The run's state after the rounds done (the parties' from ``clients``), for a round checkpoint."""
        states = clients.states()
        arrays = self.traffic.arrays()
        for index, (votes, passed) in enumerate(self.released_votes):
            arrays[f"released.{index}.votes"], arrays[f"released.{index}.passed"] = votes, passed
        for party, record in enumerate(states):
            arrays.update({f"client.{party}.{name}": value for name, value in record.arrays.items()})
        state = {"rounds_done": self.rounds_done, "entropy": str(self.seed_sequence.entropy),
                 "rng": self.server_rng.bit_generator.state, "history": self.history,
                 "released": len(self.released_votes), "clients": [dict(record.scalars) for record in states]}
        return state, arrays

    def _restore(self, saved: tuple[dict[str, Any], dict[str, np.ndarray]], clients: Any) -> None:
        """Put a checkpoint's state back, into the server and (under the same setup messages) into ``clients``."""
        state, arrays = saved
        self.server_rng.bit_generator.state = state["rng"]
        self.history = state["history"]
        self.released_votes = [(arrays[f"released.{index}.votes"], arrays[f"released.{index}.passed"])
                               for index in range(state["released"])]
        self.traffic = Traffic.from_arrays(arrays)
        records = []
        for party, scalars in enumerate(state["clients"]):
            prefix = f"client.{party}."
            records.append(Record(STATE_KIND, {name.removeprefix(prefix): value for name, value in arrays.items()
                                               if name.startswith(prefix)}, scalars))
        clients.restore(self.setups, records)
        self.rounds_done = int(state["rounds_done"])


# --- the ledger -------------------------------------------------------------------------------------
def fd_ledger(protocol: FDProtocol, *, n_classes: int, public: np.ndarray | None, batch: int,
              released_votes: list[tuple[np.ndarray, np.ndarray]], trainings: list[Any], models: Sequence[Any],
              client: int, delta: float, seed: int, noise: NoiseSource | None = None,
              schemas: Sequence[PartySchema] | None = None) -> tuple[Ledger, dict[str, np.ndarray]]:
    """The run's ledger and private evidence (``server_votes`` under GNMax's data-dependent analysis).

    ``seed`` is ``random_state``'s (recorded); ``noise`` the run's root noise source (recorded by kind, with its
    seed when seeded, which makes every ε ∞; None: not recorded, so the ledger's noise provenance is unknown);
    ``schemas`` the parties' schemas as the server received them (None: sizes and labels were sent; the exchange
    is recorded unless every party withheld them).

    The releases; with DP-SGD local models also their training, which the shared predictions, the server's
    labels and the client's model are derived from — not the selectors: the raw-data ones are unaccounted, the
    DP ones are their own (example-level Gaussian) mechanism.
    """
    n_clients = len(models)
    names = sorted({type(model).__name__ for model in models})
    description = f"{protocol.name}: model of client {client} of {n_clients}, {protocol.rounds} rounds"
    if protocol.shares:
        description += f", {batch} proxy examples per round, {protocol.labels} labels, privacy={protocol.privacy!r}"
    ledger = Ledger(
        delta=delta,
        primary_unit="party",
        seeds={"random_state": seed},
        public_data_sha256=None if public is None else data_fingerprint({"public": public}),
        description=f"{description}; client models: {', '.join(names)}",
    )
    if noise is not None:
        ledger.record_noise_source(noise)
    evidence: dict[str, np.ndarray] = {}
    derived = record_local_training(ledger, trainings, what=f"{protocol.name} clients' local training "
                                    f"({protocol.rounds} rounds, one DP-SGD epoch each)")
    if not protocol.shares:
        ledger.record_unaccounted(
            f"{protocol.name}: nothing is shared; client {client}'s model is trained on its own data "
            "without noise and has no differential-privacy guarantee for it",
            derived_from_training=derived, observers=("public",),
        )
        record_schema_exchange(ledger, schemas)
        return ledger, evidence
    if protocol.privacy is None:
        ledger.record_unaccounted(
            f"{protocol.name} with privacy=None: no noise is added at all; every shared prediction is released in "
            "the clear and there is no differential-privacy guarantee",
            derived_from_training=derived,
        )
    elif protocol.privacy == "rr":
        # Every client runs the same mechanism on its own (disjoint) data: the parallel composition
        # (per-order maximum) is that mechanism itself, recorded once so that its PLD applies.
        per_client = {
            unit: RandomizedResponse(n_classes, epsilon=protocol.epsilon_per_round, labels_per_report=batch,
                                     reports=protocol.rounds, unit=unit)
            for unit in ("party", "example")
        }
        ledger.record(
            per_client,
            note=(
                "k-ary randomized response on every hard label a client shares: "
                f"ε = {protocol.epsilon_per_round:g} "
                f"per client per round over up to {batch} labels (keep probability "
                f"{per_client['party'].keep_probability:.6g}), {protocol.rounds} rounds composed; the same "
                f"mechanism on each of {n_clients} clients' disjoint data (parallel composition)"
            ),
            derived_from_training=derived,
        )
    else:
        _record_server_noise(ledger, evidence, protocol, n_classes, released_votes, derived)
    if isinstance(protocol.selector, DPDensityRatioSelector):
        selector = protocol.selector
        ledger.record(
            {"example": selector_mechanism(selector.noise_multiplier)},
            note=(
                f"{protocol.name} client-side DP selectors: each client's one Gaussian-noised sum of the "
                f"random Fourier features ({2 * selector.n_frequencies}, each of ℓ2 norm 1: sensitivity 1 under "
                f"add/remove of one example) of its data, noise σ = {selector.noise_multiplier:.6g} (the Gaussian "
                "mechanism, "
                "accounted as one full-batch DP-SGD step); its share masks in every round are post-processing of "
                f"that sum and the public proxy set; the same mechanism on each of {n_clients} clients' disjoint "
                "data (parallel composition); not analysed at party level"
            ),
        )
    elif protocol.selector is not None:
        ledger.record_unaccounted(
            f"{protocol.name} client-side selectors: which proxy examples each client shares in each of "
            f"{protocol.rounds} rounds (KuLSIF density ratio above a quantile τ_client = "
            f"{protocol.selector.quantile:g} of its own data), hence how many clients voted on each example, is "
            "released without noise"
        )
    ledger.record_unaccounted(
        f"the model is client {client}'s own, trained on its raw data: the ε protects the other clients' "
        f"data against whoever holds this model, not client {client}'s",
        derived_from_training=derived, observers=("public",),
    )
    record_schema_exchange(ledger, schemas)
    return ledger, evidence


def _record_server_noise(ledger: Ledger, evidence: dict[str, np.ndarray], protocol: FDProtocol, n_classes: int,
                         released_votes: list[tuple[np.ndarray, np.ndarray]], derived: bool) -> None:
    """Record the server's noisy argmaxes (GNMax or Confident GNMax) of the clients' hard-label votes."""
    votes = (np.concatenate([v for v, _ in released_votes]) if released_votes
             else np.zeros((0, n_classes), dtype=np.int64))
    if len(votes) == 0:
        raise ValueError("no client shared any proxy example: nothing was released by GNMax; "
                         "raise tau_client's share or the proxy batch")
    assert protocol.sigma is not None  # GNMax's σ is set (FDProtocol)
    release: dict[str, Mechanism]
    if protocol.privacy == "confident-gnmax":
        assert protocol.threshold is not None and protocol.sigma_threshold is not None
        passed = np.concatenate([p for _, p in released_votes])
        release = {unit: ConfidentGNMax(votes, threshold=protocol.threshold,
                                        sigma_threshold=protocol.sigma_threshold, sigma=protocol.sigma,
                                        votes_per_unit=1, answered=passed, unit=unit)
                   for unit in ("party", "example")}
        how = (f"Confident GNMax (threshold T = {protocol.threshold:g} with σ₁ = {protocol.sigma_threshold:g}, "
               f"then N(0, σ²) per count, σ = {protocol.sigma:g} votes): {int(passed.sum())} of {len(votes)} "
               "shared examples cleared the threshold")
    elif protocol.tau_server < 2.0:
        # The server-side selector reads the noisy top count, beyond the noisy argmax: PATE 2018's
        # data-dependent bound does not cover it; the Gaussian mechanism on the whole histogram does.
        release = {unit: WithheldVotesNoisyMax("gaussian", protocol.sigma, num_answered=len(votes),
                                               num_classes=n_classes, unit=unit)
                   for unit in ("party", "example")}
        how = (f"GNMax (N(0, σ²) per count, σ = {protocol.sigma:g} votes): {len(votes)} examples answered, "
               f"accounted data-independently (the Gaussian mechanism on every vote histogram) because the "
               f"server-side selector (tau_server = {protocol.tau_server:g}) reads the noisy top count")
    else:
        release = {unit: GaussianNoisyMax(votes, protocol.sigma, 1, unit=unit) for unit in ("party", "example")}
        how = f"GNMax (N(0, σ²) per count, σ = {protocol.sigma:g} votes): {len(votes)} examples answered"
    ledger.record(
        release,
        note=(
            f"server {how} on the clients' hard-label votes (one client moves at most one vote per example, "
            f"k = 1) over {protocol.rounds} rounds"
        ),
        derived_from_training=derived,
    )
    if release["party"].evidence():
        evidence["server_votes"] = votes
    ledger.record_unaccounted(
        "the clients' hard labels reach the coordinator before it adds noise to their vote counts; the "
        "guarantee covers the noisy answers (the public), not the coordinator's view",
        derived_from_training=derived, observers=("coordinator",),
    )
    if protocol.tau_server < 2.0 and protocol.privacy == "confident-gnmax":
        ledger.record_unaccounted(
            f"the server-side selector (tau_server = {protocol.tau_server:g}) reads the noisy top vote count, "
            "beyond the noisy argmax: PATE 2018's data-dependent ε does not cover it; the data-independent "
            "ε (the Gaussian mechanism on the whole vote histogram) does",
            derived_from_training=derived,
        )
