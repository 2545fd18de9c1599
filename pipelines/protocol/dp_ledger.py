"""Recording the parties' DP-SGD training in a pipeline's ledger (shared by the four pipelines).

A pipeline whose local models are DP-trained (``dp=``) records their training as
one ``"training"`` ledger entry: each party's DP-SGD releases composed
sequentially (rounds, or the overlapping teacher partitions of FedKT), then in
parallel over parties, whose data are disjoint. Releases computed only from those
models and public data are recorded with ``derived_from_training=True``; the
ledger then reports the smaller valid bound (see ``Ledger.account``).

A party's training travels to the server as a :class:`DPTrainingReport`: the
parameters (σ, q, steps) of each of its DP-SGD releases and how they compose,
never the models. The server rebuilds the same mechanism (:func:`receive_trainings`),
so a federated run's ledger holds exactly the entry of the in-process run.

Those parameters reach the coordinator and the public ledger, so they must not
depend on a party's data: a pipeline's DP-SGD runs at a configured, public
sampling rate (:func:`require_public_sample_rate`; q = batch_size / n would give
away each party's size n), which also fixes the steps (epochs · ⌊1/q⌋). Its
sampling and noise come from the party's own :class:`~privfed.accounting.NoiseSource`;
:func:`pipeline_noise_source` makes the pipeline's root source (which the ledger
records) seeded whenever a model asks for reproducible DP-SGD noise, so that the
ledger then says every ε is ∞ for its holders.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import numpy as np

from ...accounting import DPSGD, Ledger, Mechanism, compose_parallel, compose_sequential
from ...accounting.noise_source import NoiseSource, check_noise_seed
from ...accounting.parallel import ParallelComposition
from ...accounting.sequential import SequentialComposition
from .messages import ArraySpec, MessageError, Record, WireMessage

__all__ = ["DPTrainingReport", "pipeline_noise_source", "receive_trainings", "record_local_training",
           "require_public_sample_rate", "training_report", "without_trainings"]


def require_public_sample_rate(model: Any, role: str) -> None:
    """Refuse a DP-trained ``model`` (``role`` names it, e.g. ``"FedKT teacher"``) whose DP-SGD sampling rate is
    not configured: inside a pipeline q travels to the coordinator and into the public ledger, and the default
    q = batch_size / n would give away the party's private size n (and with it the steps and a calibrated σ).
    Models without ``dp=`` pass."""
    config = getattr(model, "dp", None)
    if config is not None and not config.public_sample_rate:
        raise ValueError(
            f"{role} {type(model).__name__} has dp=DPConfig(sample_rate=None): inside a pipeline its sampling rate "
            "q = batch_size / n would reveal each party's private size n to the coordinator and the ledger; set "
            "DPConfig(sample_rate=...) to a public rate in (0, 1]")


def pipeline_noise_source(noise_seed: int | None, models: Sequence[Any]) -> NoiseSource:
    """The pipeline's root :class:`~privfed.accounting.NoiseSource` (record it: ``ledger.record_noise_source``).

    Secret unless asked: seeded from the estimator's ``noise_seed`` when it has one, else from the first of
    ``models`` (the pipeline's model prototypes) that has its own ``noise_seed`` (reproducible DP-SGD noise),
    so that a ledger never calls secret the noise of a model someone seeded. The parties' models then get
    their seeds from this root (``root.child_seeds``, handed over by ``with_noise_seed``), which replace the
    prototypes' own.
    """
    if noise_seed is None:
        noise_seed = next((model.noise_seed for model in models if getattr(model, "noise_seed", None) is not None),
                          None)
    noise_seed = check_noise_seed(noise_seed)
    return NoiseSource.secret() if noise_seed is None else NoiseSource.seeded(noise_seed)


def effective_noise_seed(estimator: Any) -> int | None:
    """The seed of a pipeline estimator's noise: its own ``noise_seed``, else that of the first model prototype among
    its parameters that has one (:func:`pipeline_noise_source`); None (secret noise) when nobody set one."""
    models = [value for value in estimator.get_params(deep=False).values() if hasattr(value, "get_params")]
    source = pipeline_noise_source(getattr(estimator, "noise_seed", None), models)
    return source.provenance().get("noise_seed")


@dataclass(frozen=True, eq=False)
class DPTrainingReport(WireMessage):
    """Party → server: the parameters of the party's DP-SGD releases, one array entry per release.

    ``grouped=False``: one release (a local model's training). ``grouped=True``: the releases of group
    g (``group``, 0, 1, ... in order; FedKT's partitions) run in parallel on disjoint data, and the
    groups run in sequence on the same data — the composition
    ``compose_sequential([compose_parallel(group 0), compose_parallel(group 1), ...])``.
    """

    KIND: ClassVar[str] = "dp-training"
    ARRAYS: ClassVar = {
        "noise_multiplier": ArraySpec("f", 1), "sample_rate": ArraySpec("f", 1),
        "steps": ArraySpec("iu", 1), "group": ArraySpec("iu", 1),
    }

    noise_multiplier: np.ndarray
    sample_rate: np.ndarray
    steps: np.ndarray
    group: np.ndarray
    grouped: bool


def _as_dpsgd(mechanism: Mechanism) -> DPSGD:
    if not isinstance(mechanism, DPSGD) or mechanism.unit != "example":
        raise TypeError(f"a party's DP training must be example-level DPSGD releases, got {type(mechanism).__name__}")
    return mechanism


def training_report(training: Mechanism | None) -> DPTrainingReport | None:
    """The message describing a party's composed DP-SGD ``training`` (None: the party's models are not all DP)."""
    if training is None:
        return None
    if isinstance(training, SequentialComposition) and all(
            isinstance(member, ParallelComposition) for member in training.mechanisms):
        releases = [(group, _as_dpsgd(m)) for group, member in enumerate(training.mechanisms)
                    for m in cast(ParallelComposition, member).mechanisms]
        grouped = True
    else:
        releases, grouped = [(0, _as_dpsgd(training))], False
    return DPTrainingReport(
        noise_multiplier=np.array([m.noise_multiplier for _, m in releases], dtype=float),
        sample_rate=np.array([m.sample_rate for _, m in releases], dtype=float),
        steps=np.array([m.steps for _, m in releases], dtype=np.int64),
        group=np.array([group for group, _ in releases], dtype=np.int64),
        grouped=grouped,
    )


def _training_mechanism(report: DPTrainingReport, sender: str) -> Mechanism:
    """The composed DP-SGD mechanism a report describes; :class:`MessageError` names ``sender`` if it is invalid."""
    where = f"{sender} sent a malformed {DPTrainingReport.KIND!r} message"
    n = len(report.steps)
    if not n or any(len(a) != n for a in (report.noise_multiplier, report.sample_rate, report.group)):
        raise MessageError(f"{where}: its four arrays must have one equal, non-zero length")
    groups = report.group
    if report.grouped:
        if groups[0] != 0 or (np.diff(groups) < 0).any() or (np.diff(groups) > 1).any():
            raise MessageError(f"{where}: group must run 0, 1, ... without gaps, got {groups.tolist()}")
    elif n != 1 or groups[0] != 0:
        raise MessageError(f"{where}: an ungrouped report holds one release in group 0, got {n}")
    try:
        releases = [DPSGD(float(sigma), float(q), int(steps))
                    for sigma, q, steps in zip(report.noise_multiplier, report.sample_rate, report.steps)]
    except (TypeError, ValueError) as error:
        raise MessageError(f"{where}: {error}") from error
    if not report.grouped:
        return releases[0]
    return compose_sequential(
        compose_parallel([r for r, g in zip(releases, groups) if g == group]) for group in range(int(groups[-1]) + 1)
    )


def _check_against_model(report: DPTrainingReport, model: Any, sender: str, epochs: int | None = None) -> None:
    """A report must match the DP configuration the party was asked to train with (``model.dp``, ``model.epochs``).

    Checked: the model has ``dp=`` at all; σ (when the configuration fixes it; a ``target_epsilon``
    configuration derives σ per training call from q and the steps, which is not recomputed here); q (when
    fixed); and steps = epochs · ⌊1/q⌋ (Opacus's Poisson epochs; ``epochs`` when given, else the model's).
    A configuration without a public q is refused (:func:`require_public_sample_rate`).
    """
    where = f"{sender} sent a {DPTrainingReport.KIND!r} message that does not match its DP configuration"
    config = getattr(model, "dp", None)
    if config is None:
        raise MessageError(
            f"{where}: its model {type(model).__name__} has no dp= (it was not asked to train with DP-SGD)")
    require_public_sample_rate(model, f"{sender}'s DP-trained model")
    if config.noise_multiplier is not None and not (report.noise_multiplier == config.noise_multiplier).all():
        raise MessageError(f"{where}: noise_multiplier {sorted(set(report.noise_multiplier.tolist()))}, "
                           f"configured {config.noise_multiplier}")
    if config.sample_rate is not None and not (report.sample_rate == config.sample_rate).all():
        raise MessageError(f"{where}: sample_rate {sorted(set(report.sample_rate.tolist()))}, "
                           f"configured {config.sample_rate}")
    epochs = getattr(model, "epochs", None) if epochs is None else epochs
    if isinstance(epochs, int) and (report.sample_rate > 0).all():
        expected = [epochs * config.steps_per_epoch(float(q)) for q in report.sample_rate]
        if report.steps.tolist() != expected:
            raise MessageError(f"{where}: steps {report.steps.tolist()}, expected epochs × ⌊1/q⌋ = {expected}")


def receive_trainings(records: Sequence[Sequence[Record]], names: Sequence[str], *, max_bytes: int,
                      models: Sequence[Any] | None = None, epochs: int | None = None) -> list[Mechanism | None]:
    """Each party's DP training from the records it sent (None where it sent no report); validated on receipt.

    ``models`` (one per party): the unfitted model whose configuration the party's releases must match
    (:func:`_check_against_model`); FedKT's teacher, FedKD's local model, PrivateKT's global model (local epochs).
    ``epochs``: the Poisson epochs the party ran in all, when not the model's ``epochs`` (Selective-FD: one
    per round, composed into one release).
    """
    trainings: list[Mechanism | None] = []
    for index, (sent, name) in enumerate(zip(records, names)):
        reports = [record for record in sent if record.kind == DPTrainingReport.KIND]
        if len(reports) > 1:
            raise MessageError(f"{name} sent {len(reports)} {DPTrainingReport.KIND!r} messages, expected at most one")
        if not reports:
            trainings.append(None)
            continue
        report = DPTrainingReport.from_record(reports[0], sender=name, max_bytes=max_bytes)
        mechanism = _training_mechanism(report, name)
        if models is not None:
            _check_against_model(report, models[index], name, epochs)
        trainings.append(mechanism)
    return trainings


def without_trainings(records: Sequence[Record]) -> list[Record]:
    """The records a party sent, less its DP training report (read by :func:`receive_trainings`)."""
    return [record for record in records if record.kind != DPTrainingReport.KIND]


def record_local_training(ledger: Ledger, releases_per_party: Sequence[Mechanism | None], *, what: str) -> bool:
    """Record the parties' DP training; return True when every party's models are DP-trained.

    ``releases_per_party[i]`` is party i's composed DP-SGD mechanism (example level),
    or None when some model of that party was trained without DP. Nothing is recorded
    when no party trained with DP (the ledger then reports the aggregation bound alone).
    """
    trained = [release for release in releases_per_party if release is not None]
    if not trained:
        return False
    ledger.record_training(
        compose_parallel(trained),
        note=(
            f"{what}: DP-SGD of {len(trained)} of {len(releases_per_party)} parties' local models (example level, "
            "add/remove one example; Poisson sampling), each party's trainings composed sequentially, parallel "
            "composition over parties (disjoint data); the models themselves are not released"
        ),
    )
    return len(trained) == len(releases_per_party)
