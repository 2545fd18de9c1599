"""Ledgers that dp-accounting, Opacus and Flower can read and write.

* **Export** (:func:`data_independent_event`, :func:`ledger_dp_event`): every
  privfed mechanism as a dp-accounting ``DpEvent`` whose RDP (and PLD) bounds the
  mechanism's *data-independent* privacy loss. Data-dependent releases (noisy max
  over private votes) are exported as their data-independent bound; a mechanism
  with no dp-accounting event that bounds it (smooth-sensitivity releases, a
  data-derived clip) and every release the guarantee does not cover become
  ``NonPrivateDpEvent`` (ε = ∞), never something smaller.
* **Import** (:func:`opacus_mechanism`, :func:`flower_mechanism`): an Opacus
  accountant's history (σ, q, steps) as privfed's :class:`~accounting.dpsgd.DPSGD`,
  Flower's ``RdpAccountant`` state (DP-FedAvg, client level) as a
  :class:`~accounting.dp_event_release.DpEventRelease` of exactly the events
  Flower's backend composes.

Neither Opacus nor Flower is imported here (the accounting core depends on
numpy, scipy and dp-accounting only): their objects are read through their
documented state (``history``, ``state_dict()``), duck-typed.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import dp_accounting

from ._checks import check_choice
from .confident_gnmax import ConfidentGNMax
from .documents import MAX_DECLARED_EVENTS, MAX_DECLARED_RECORDS, parse_json
from .dp_event_release import DpEventRelease
from .dpsgd import DPSGD, compose_dpsgd
from .laplace_noisy_max import LaplaceNoisyMax
from .mechanism import UNITS, Mechanism
from .observers import check_observer
from .parallel import ParallelComposition
from .registry import PublicVoteView, public_mechanism_from_record
from .sequential import SequentialComposition
from .shuffling import ShuffledRandomizedResponse
from .withheld_votes import WithheldVotesNoisyMax

__all__ = ["BOUNDS", "data_independent_event", "flower_mechanism", "ledger_dp_event", "opacus_mechanism",
           "tradeoff_event"]

#: Which of a ledger's bounds :func:`ledger_dp_event` exports (see :meth:`Ledger.account`).
BOUNDS: tuple[str, ...] = ("aggregation", "dpsgd")
#: Flower's accountant state schema this module reads (flwr 1.41 ``RdpAccountant.state_dict()``).
FLOWER_STATE_SCHEMA = 1
_FLOWER_SAMPLING = ("poisson", "without-replacement", "no-amplification")


def _self_composed(event: dp_accounting.DpEvent, count: int) -> dp_accounting.DpEvent:
    if count == 1:
        return event
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return dp_accounting.SelfComposedDpEvent(event.event, event.count * count)
    return dp_accounting.SelfComposedDpEvent(event, count)


def _composed(events: list[dp_accounting.DpEvent]) -> dp_accounting.DpEvent:
    if any(isinstance(event, dp_accounting.NonPrivateDpEvent) for event in events):
        return dp_accounting.NonPrivateDpEvent()
    return events[0] if len(events) == 1 else dp_accounting.ComposedDpEvent(events)


def _parallel(events: list[dp_accounting.DpEvent]) -> dp_accounting.DpEvent:
    """One event bounding every one of ``events`` where one dominates, else their sequential composition.

    Self-compositions of one event dominate each other by count (RDP and PLD only grow with it).
    """
    bases = [(e.event, e.count) if isinstance(e, dp_accounting.SelfComposedDpEvent) else (e, 1) for e in events]
    if all(base == bases[0][0] for base, _ in bases):
        return _self_composed(bases[0][0], max(count for _, count in bases))
    return _composed(events)


def data_independent_event(mechanism: Mechanism) -> dp_accounting.DpEvent:
    """A dp-accounting event whose privacy loss bounds ``mechanism``'s data-independent loss, for its unit.

    * the mechanism's own :meth:`~Mechanism.dp_event` where it has one (DP-SGD,
      Gaussian noisy max's histogram, randomized response, …);
    * Laplace noisy max: the noisy histogram, two ``LaplaceDpEvent(1/(kγ))`` per
      query (k the data-independent votes per unit): the curve privfed's tight
      analysis bounds every query by;
    * Confident GNMax: the threshold step's ``GaussianDpEvent(σ₁/k)`` per query and
      the answering step's ``GaussianDpEvent(σ/(√2k))`` per answered query;
    * DP-SGD analysed for replace-one: ``GaussianDpEvent(σ/2)`` per step, the replaced
      example's clipped gradient moving the noisy sum by at most 2C whatever was sampled
      (dp-accounting's own sampled-Gaussian event is add-or-remove-one only): valid under
      either relation, without the subsampling amplification;
    * shuffled randomized response: binary randomized response at the local ε₀,
      once per round (any ε₀-LDP report is dominated by it; shuffling is
      post-processing): valid, without the shuffling amplification;
    * sequential compositions: the composed events; parallel compositions: the
      largest self-composition when every member self-composes one event (the
      maximum over members, exactly), else the members composed sequentially (a
      valid, looser bound: dp-accounting has no parallel-composition event);
    * anything else: ``NonPrivateDpEvent`` (ε = ∞): there is no dp-accounting event
      that bounds it (a documented gap, see ``docs/interoperability.md``).
    """
    if not isinstance(mechanism, Mechanism):
        raise TypeError(f"mechanism must be a privfed Mechanism, got {type(mechanism).__name__}")
    if isinstance(mechanism, WithheldVotesNoisyMax):  # the per-query noisy max, composed over the answers
        return data_independent_event(mechanism.public_view())
    if isinstance(mechanism, PublicVoteView):
        return _self_composed(data_independent_event(mechanism.one_query), mechanism.count)
    if isinstance(mechanism, SequentialComposition):
        return _composed([data_independent_event(member) for member in mechanism.mechanisms])
    if isinstance(mechanism, ParallelComposition):
        return _parallel([data_independent_event(member) for member in mechanism.mechanisms])
    if isinstance(mechanism, LaplaceNoisyMax):
        per_vote = dp_accounting.LaplaceDpEvent(1.0 / (mechanism.public_votes_per_unit * mechanism.gamma))
        return dp_accounting.SelfComposedDpEvent(per_vote, 2 * mechanism.num_queries)
    if isinstance(mechanism, ConfidentGNMax):
        k = mechanism.public_votes_per_unit
        events = [_self_composed(dp_accounting.GaussianDpEvent(mechanism.sigma_threshold / k), mechanism.num_queries)]
        if mechanism.num_answered:
            events.append(_self_composed(dp_accounting.GaussianDpEvent(mechanism.sigma / (math.sqrt(2.0) * k)),
                                         mechanism.num_answered))
        return _composed(events)
    if isinstance(mechanism, DPSGD) and mechanism.neighboring_relation == "replace_one":
        return _self_composed(dp_accounting.GaussianDpEvent(mechanism.noise_multiplier / 2.0), mechanism.steps)
    if isinstance(mechanism, ShuffledRandomizedResponse):
        binary = dp_accounting.RandomizedResponseDpEvent(2.0 / (math.exp(mechanism.epsilon_local) + 1.0), 2)
        return _self_composed(binary, mechanism.reports)
    event = mechanism.dp_event()
    return dp_accounting.NonPrivateDpEvent() if event is None else event


def tradeoff_event(mechanisms: list[Mechanism]) -> dp_accounting.DpEvent | None:
    """One data-independent event whose privacy loss distribution bounds the composition of ``mechanisms``: each
    member's own :meth:`~Mechanism.dp_event` (the PLD bound's), else :func:`data_independent_event`; ``None``
    where some member has neither (the trade-off curve then comes from the RDP curve,
    :meth:`~accounting.report.PrivacyReport.tradeoff`)."""
    events = [m.dp_event() or data_independent_event(m) for m in mechanisms]
    if not events or any(isinstance(event, dp_accounting.NonPrivateDpEvent) for event in events):
        return None
    return events[0] if len(events) == 1 else dp_accounting.ComposedDpEvent(events)


def ledger_dp_event(ledger: Any, *, unit: str, bound: str = "aggregation",
                    observer: str = "public") -> dp_accounting.DpEvent:
    """The ledger's releases for ``unit`` that ``observer`` sees as one dp-accounting event (see
    :meth:`Ledger.to_dp_event`)."""
    unit = check_choice("unit", unit, UNITS)
    bound = check_choice("bound", bound, BOUNDS)
    observer = check_observer(observer)
    events = []
    for entry in ledger.entries:
        if bound == "aggregation" and entry.kind == "training":
            continue
        if entry.kind != "training" and not entry.seen_by(observer):
            continue
        if bound == "dpsgd" and entry.kind != "training" and entry.derived_from_training:
            continue
        if entry.kind == "unaccounted" and not entry.leaves_uncovered(unit):
            continue
        if entry.kind == "unaccounted" or unit not in entry.analyses:
            events.append(dp_accounting.NonPrivateDpEvent())
            continue
        mechanism, _ = public_mechanism_from_record(entry.analyses[unit].record())
        events.append(data_independent_event(mechanism))
    return _composed(events) if events else dp_accounting.NoOpDpEvent()


def _real(value: object, where: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not low < float(value) <= high:
        raise ValueError(f"{where} must be a number in ({low:g}, {high:g}], got {value!r}")
    return float(value)


def _integer(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{where} must be an integer >= 1, got {value!r}")
    return int(value)


def opacus_mechanism(accountant: Any, *, unit: str = "example") -> Mechanism:
    """An Opacus accountant's history as privfed's DP-SGD mechanism.

    ``accountant`` is an Opacus accountant (``RDPAccountant``, ``PRVAccountant``,
    ``GaussianAccountant``: anything with a ``history`` list) or its
    ``state_dict()``. Each history entry ``(noise_multiplier, sample_rate, steps)``
    is a :class:`DPSGD` run; runs compose sequentially (:func:`compose_dpsgd`).
    privfed recomputes the ε itself, whatever accountant Opacus used. The
    guarantee is DP-SGD's under Poisson sampling (Opacus's default); it does not
    hold for a data loader that did not sample so.
    """
    unit = check_choice("unit", unit, UNITS)
    history = accountant.get("history") if isinstance(accountant, Mapping) else getattr(accountant, "history", None)
    if not isinstance(history, (list, tuple)):
        raise TypeError(f"accountant must be an Opacus accountant or its state_dict() (with a 'history' list), "
                        f"got {type(accountant).__name__}")
    if not history:
        raise ValueError("accountant's history is empty: the Opacus accountant has seen no training step")
    if len(history) > MAX_DECLARED_EVENTS:
        raise ValueError(f"accountant's history lists {len(history)} runs; privfed accounts at most "
                         f"{MAX_DECLARED_EVENTS} (Opacus merges consecutive steps of one noise and rate into one run)")
    runs = []
    for index, step in enumerate(history):
        where = f"accountant.history[{index}]"
        if not isinstance(step, (list, tuple)) or len(step) != 3:
            raise ValueError(f"{where} must be (noise_multiplier, sample_rate, steps), got {step!r:.80}")
        sigma, rate, steps = step
        runs.append(DPSGD(_real(sigma, f"{where}'s noise_multiplier", 0.0, math.inf),
                          _real(rate, f"{where}'s sample_rate", 0.0, 1.0),
                          _integer(steps, f"{where}'s steps"), unit=unit))
    return compose_dpsgd(runs)


def _flower_state(state_or_accountant: Any) -> Mapping[str, Any]:
    if isinstance(state_or_accountant, (str, bytes)):
        # Duplicate keys (a reader would keep the last: another ε) and NaN/Infinity are refused in one line.
        state_or_accountant = parse_json(state_or_accountant, "state_or_accountant", finite=True)
    if not isinstance(state_or_accountant, Mapping):
        state_dict = getattr(state_or_accountant, "state_dict", None)
        if not callable(state_dict):
            raise TypeError("state_or_accountant must be a Flower RdpAccountant, its state_dict() or that dict's "
                            f"JSON text, got {type(state_or_accountant).__name__}")
        state_or_accountant = state_dict()
    if state_or_accountant.get("schema_version") != FLOWER_STATE_SCHEMA or state_or_accountant.get("backend") != "rdp":
        raise ValueError(f"state must be a Flower RdpAccountant state (schema_version {FLOWER_STATE_SCHEMA}, backend "
                         f"'rdp'), got schema_version={state_or_accountant.get('schema_version')!r}, "
                         f"backend={state_or_accountant.get('backend')!r}")
    return state_or_accountant


def flower_mechanism(state_or_accountant: Any, *, unit: str = "party") -> DpEventRelease:
    """Flower's ``RdpAccountant`` (flwr ≥ 1.41, DP-FedAvg) as the dp-accounting events its backend composed.

    Each recorded composition ``{"event": {noise_multiplier, sample_size,
    population_size}, "count"}`` becomes, as Flower's backend builds it, a
    Gaussian event ``GaussianDpEvent(σ)`` — Poisson-sampled at rate
    sample_size/population_size (add-or-remove-one), sampled without replacement
    (replace-one), or not amplified — self-composed ``count`` times; consecutive
    compositions of the same event (one per round, as Flower's DP strategies
    compose them) are merged into one self-composition. The unit is Flower's: one
    client's whole contribution (``"party"``).
    """
    unit = check_choice("unit", unit, UNITS)
    state = _flower_state(state_or_accountant)
    config = state.get("config")
    if not isinstance(config, Mapping):
        raise ValueError(f"state.config must be an object, got {config!r:.80}")
    sampling = check_choice("state.config.sampling_method", config.get("sampling_method"), _FLOWER_SAMPLING)
    named = config.get("neighboring_relation")
    relations = {"add-or-remove-one": "add_or_remove_one", "replace-one": "replace_one"}
    relation = relations.get(named) if isinstance(named, str) else None
    if relation is None:
        raise ValueError(f"state.config.neighboring_relation must be 'add-or-remove-one' or 'replace-one', got "
                         f"{named!r}")
    compositions = state.get("compositions")
    if not isinstance(compositions, list) or not compositions:
        raise ValueError("state.compositions must be a non-empty list: the Flower accountant composed no round")
    if len(compositions) > MAX_DECLARED_RECORDS:
        raise ValueError(f"state.compositions lists {len(compositions)} compositions; privfed reads at most "
                         f"{MAX_DECLARED_RECORDS}")
    events: list[tuple[dp_accounting.DpEvent, int]] = []
    for index, composition in enumerate(compositions):
        where = f"state.compositions[{index}]"
        event = composition.get("event") if isinstance(composition, Mapping) else None
        if not isinstance(event, Mapping):
            raise ValueError(f"{where}.event must be an object, got {event!r:.80}")
        population = _integer(event.get("population_size"), f"{where}.event.population_size")
        sample = _integer(event.get("sample_size"), f"{where}.event.sample_size")
        if sample > population:
            raise ValueError(f"{where}.event.sample_size = {sample} exceeds population_size = {population}")
        gaussian = dp_accounting.GaussianDpEvent(_real(event.get("noise_multiplier"),
                                                       f"{where}.event.noise_multiplier", 0.0, math.inf))
        if sampling == "poisson":
            gaussian = dp_accounting.PoissonSampledDpEvent(sample / population, gaussian)
        elif sampling == "without-replacement":
            gaussian = dp_accounting.SampledWithoutReplacementDpEvent(population, sample, gaussian)
        count = _integer(composition.get("count"), f"{where}.count")
        if events and events[-1][0] == gaussian:  # Flower's strategies compose one round at a time
            events[-1] = (gaussian, events[-1][1] + count)
        else:
            events.append((gaussian, count))
            if len(events) > MAX_DECLARED_EVENTS:
                raise ValueError(f"state.compositions holds more than {MAX_DECLARED_EVENTS} distinct events; privfed "
                                 "accounts at most that many (each is a privacy-loss distribution to build)")
    return DpEventRelease(_composed([_self_composed(event, count) for event, count in events]), relation=relation,
                          unit=unit)
