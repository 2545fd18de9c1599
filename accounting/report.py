"""What an accountant returns: :class:`PrivacyReport` and its per-mechanism rows."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from .mechanism import describe_relations

if TYPE_CHECKING:
    from .tradeoff import PrivacyProfile

__all__ = ["DeferredEvent", "MechanismReport", "PrivacyReport", "replace_report", "round_up"]

_ANALYSIS_TEXT = {
    "classic": "classic analysis (the papers' moments accountant, conversion ε = min_λ (α(λ) + ln(1/δ))/λ)",
    "tight": "tight analysis (privfed's best valid RDP bound, dp-accounting's RDP→(ε,δ) conversion)",
}


_METHOD_TEXT = {
    "pld": "tight analysis (privacy loss distribution through dp-accounting, tighter than RDP here)",
    "pure": "tight analysis (basic composition of pure ε-DP, tighter than RDP and PLD here)",
    "smooth_sensitivity": "sanitised data-dependent ε: PATE 2018 smooth-sensitivity release, GNSS cost included",
}


def round_up(value: float, digits: int = 4) -> str:
    """Format ``value`` with ``digits`` significant digits, never rounding down.

    Printed ε values are upper bounds, so the printed number must not be smaller
    than the computed one.
    """
    if not math.isfinite(value):
        return "inf" if value > 0 else str(value)
    if value == 0:
        return "0"
    exponent = math.floor(math.log10(abs(value)))
    scale = 10.0 ** (digits - 1 - exponent)
    rounded = math.ceil(value * scale) / scale
    if rounded < value:  # floating-point division can land one ulp low
        rounded = math.nextafter(rounded, math.inf)
    return f"{rounded:.{max(digits - 1 - exponent, 0)}f}" if -4 <= exponent < 6 else f"{rounded:.{digits - 1}e}"


def _below(epsilon: float, epsilon_data_independent: float) -> bool:
    """Whether a data-dependent ε is below the data-independent one by more than floating-point error."""
    return epsilon < epsilon_data_independent * (1 - 1e-12)


@dataclass(frozen=True)
class MechanismReport:
    """One mechanism's share of a composition, accounted on its own."""

    kind: str
    unit: str
    parameters: Mapping[str, Any]
    num_queries: int
    data_dependent: bool
    epsilon: float
    order: float
    epsilon_data_independent: float
    pure_epsilon: float | None
    method: str = "rdp"
    #: The neighbouring relations the mechanism's analysis covers (sorted names from
    #: :data:`~privfed.accounting.mechanism.RELATIONS`); ``None`` where not stated (reports built before).
    relations: tuple[str, ...] | None = None

    @property
    def epsilon_is_data_dependent(self) -> bool:
        """Whether :attr:`epsilon` depends on private data (:attr:`PrivacyReport.epsilon_is_data_dependent`)."""
        return _below(self.epsilon, self.epsilon_data_independent) and self.data_dependent

    def __repr__(self) -> str:
        dependence = "DATA-DEPENDENT" if self.epsilon_is_data_dependent else "data-independent"
        relations = "" if self.relations is None else f", relations = {list(self.relations)}"
        return (
            f"MechanismReport({self.kind}, {self.num_queries} queries, unit = {self.unit!r}{relations}, "
            f"ε = {round_up(self.epsilon)}, {dependence})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "unit": self.unit,
            "parameters": dict(self.parameters),
            "num_queries": self.num_queries,
            "data_dependent": self.data_dependent,
            "epsilon": self.epsilon,
            "order": self.order,
            "epsilon_data_independent": self.epsilon_data_independent,
            "pure_epsilon": self.pure_epsilon,
            "method": self.method,
            "relations": None if self.relations is None else list(self.relations),
        }


@dataclass(frozen=True)
class DeferredEvent:
    """A report's dp-accounting event given as ``build(*arguments)``, built the first time
    :attr:`PrivacyReport.dp_event` is read: a report whose event nobody reads (an audit's totals, a ledger's ε)
    never imports dp-accounting, whose event classes the event is made of (its package import loads
    ``scipy.signal`` and ``scipy.stats``: over a CPU second in a fresh process)."""

    build: Callable[..., Any]
    arguments: tuple[Any, ...] = ()


class _EventField:
    """The descriptor behind :attr:`PrivacyReport.dp_event` (a dataclass field): a :class:`DeferredEvent` given
    for it is built on the first read, then kept; any other value is kept as given."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._key = f"_{name}"

    def __get__(self, report: Any, owner: type | None = None) -> Any:
        if report is None:
            return self
        value = report.__dict__.get(self._key)
        if isinstance(value, DeferredEvent):
            value = report.__dict__[self._key] = value.build(*value.arguments)
        return value

    def __set__(self, report: Any, value: Any) -> None:
        report.__dict__[self._key] = None if value is self else value  # the field's default (this descriptor): None


def replace_report(report: PrivacyReport, **changes: Any) -> PrivacyReport:
    """``dataclasses.replace(report, **changes)`` that carries an event not built yet (:class:`DeferredEvent`)
    without building it (``dataclasses.replace`` reads every field)."""
    changes.setdefault("dp_event", report.__dict__.get("_dp_event"))
    return dataclasses.replace(report, **changes)


@dataclass(frozen=True)
class PrivacyReport:
    """An (ε, δ) guarantee with everything needed to read it correctly.

    Attributes
    ----------
    epsilon, delta:
        The guarantee. ε is an upper bound; :meth:`__str__` rounds it up. The one
        exception is ``method="smooth_sensitivity"`` (:func:`release_epsilon`): a
        sanitised estimate, printed "ε ≈ … (ESTIMATE, not an upper bound)".
    order:
        The Rényi order α at which the conversion was optimal.
    orders, rdp, log_moments:
        The composed curve per order: RDP ε(α) and the papers' log-moments
        α(λ) = λ · RDP(α) with λ = α − 1.
    data_dependent:
        ``True`` when the analysis used private statistics (vote counts). Whether the ε printed depends
        on them is :attr:`epsilon_is_data_dependent`: where the data-dependent bound is not smaller, ε is
        the data-independent one (∞ included) and holds for every data set.
    epsilon_data_independent:
        ε from the same analysis using only data-independent bounds; safe to publish.
    analysis, conversion:
        ``"classic"`` or ``"tight"``, and a description of the conversion.
    unit, relation:
        The protected unit (``"example"`` or ``"party"``) and, in words, the neighbouring relation
        ε is stated for: the relations every composed mechanism's analysis covers.
    relations:
        The same as names (sorted, from :data:`~privfed.accounting.mechanism.RELATIONS`): the
        intersection over the composed mechanisms; empty when they share none, so that no relation is
        covered (:meth:`summary` says so); ``None`` when not stated.
    assumptions:
        What ε assumes beyond the analysis (honest execution, no collusion of the coordinator with
        parties, a trusted shuffler, …): the union of the assumptions recorded with the ledger entries
        this ε composes (:meth:`privfed.Ledger.record`); every observer's default assumptions are in
        :mod:`~privfed.accounting.observers`.
    dp_event:
        A dp-accounting event whose privacy loss distribution bounds every composed mechanism's
        data-independent loss (for :func:`~privfed.account`, the one the PLD bound is computed from; a ledger
        falls back to :func:`~privfed.accounting.interop.data_independent_event` for a mechanism without its
        own), or ``None`` where some mechanism has none. :meth:`tradeoff` and :attr:`gdp_mu` use it. May be given
        as a :class:`DeferredEvent`, built when first read (a ledger's reports are).
    rdp_data_independent:
        The composed data-independent RDP curve (on ``orders``); :meth:`tradeoff` uses it where there is no
        ``dp_event``. Empty for reports built before it was recorded (``rdp`` then stands in).
    mechanisms:
        Per-mechanism breakdown, each accounted alone under the same analysis.
    notes:
        Anything a reader must know (unaccounted releases, caveats).
    other_units:
        Reports for the other protected units of the same releases (a ledger's
        totals per unit); never composed with this one. Each prints as one line.
    method:
        Which accountant gave ``epsilon``: ``"rdp"`` (the curve above, converted at
        ``order``), ``"pld"`` (dp-accounting's privacy loss distribution of the
        mechanisms' events, tighter here) or ``"pure"`` (basic composition of the
        mechanisms' pure ε-DP guarantees, tighter here); for the last two ``order``
        is the RDP optimum, for information only.
    source:
        Which bound of a ledger gave ``epsilon``: ``"aggregation"`` (the composition of
        the released mechanisms themselves) or ``"dpsgd"`` (the DP training of the
        models the releases are derived from, composed with any accounted release not
        derived from them: everything else is post-processing). See
        ``docs/accounting.md``.
    alternatives:
        The other valid bound for the same releases (source → its report), e.g.
        ``{"dpsgd": ...}`` when the aggregation bound was reported; never composed with this one.
    uncovered:
        The releases of a ledger that no mechanism covers for this unit and observer: those
        recorded as unaccounted and those analysed under another unit only. A ledger then
        reports ``epsilon = math.inf`` (the notes give the accounted releases' ε, which is not a
        guarantee); :meth:`summary` says so on its one line.
    observer:
        Who the guarantee is stated against (:data:`~privfed.accounting.observers.OBSERVERS`):
        ``"public"`` (the released model and published outputs) or ``"coordinator"`` (every
        message the server receives); ``None`` for a mechanism accounted on its own.

    Beyond ε(δ): :meth:`tradeoff` gives the best membership attack's true-positive rate at given
    false-positive rates, :attr:`gdp_mu` the Gaussian-DP μ, :meth:`privacy_profile` δ(ε) itself
    (:mod:`~privfed.accounting.tradeoff`); :attr:`tradeoff_basis` says which accountant they come from.

    ``str(report)`` is :meth:`summary`; ``repr(report)`` is one line (ε, δ, unit,
    analysis, data-dependence), so that printing a report, a list of reports or
    ``report.other_units`` stays short. The RDP curves are reached on request:
    ``report.orders``, ``report.rdp``, ``report.log_moments`` (or :meth:`curves`),
    and :meth:`to_dict` holds everything.
    """

    epsilon: float
    delta: float
    order: float
    orders: tuple[float, ...]
    rdp: tuple[float, ...]
    log_moments: tuple[float, ...]
    data_dependent: bool
    epsilon_data_independent: float
    analysis: str
    conversion: str
    unit: str | None
    relation: str | None
    mechanisms: tuple[MechanismReport, ...] = ()
    notes: tuple[str, ...] = field(default=())
    other_units: Mapping[str, "PrivacyReport"] = field(default_factory=dict)
    method: str = "rdp"
    source: str = "aggregation"
    alternatives: Mapping[str, "PrivacyReport"] = field(default_factory=dict)
    uncovered: tuple[str, ...] = ()
    observer: str | None = None
    relations: tuple[str, ...] | None = None
    assumptions: tuple[str, ...] = ()
    dp_event: Any = field(default=_EventField(), compare=False)
    rdp_data_independent: tuple[float, ...] = field(default=(), compare=False)

    @cached_property
    def _profile(self) -> PrivacyProfile | None:
        from .tradeoff import pld_profile, rdp_profile  # dp-accounting and SciPy: only where a profile is asked for

        if not math.isfinite(self.epsilon) or self.uncovered:
            return None
        profile = None if self.dp_event is None else pld_profile(
            self.dp_event, epsilon_hint=self.epsilon_data_independent)
        return profile if profile is not None else rdp_profile(self.orders, self.rdp_data_independent or self.rdp)

    def privacy_profile(self) -> PrivacyProfile | None:
        """δ(ε) on a grid of ε ≥ 0 (:class:`~privfed.accounting.tradeoff.PrivacyProfile`); ``None`` when ε = ∞."""
        return self._profile

    @property
    def tradeoff_basis(self) -> str:
        """Where :meth:`tradeoff` and :attr:`gdp_mu` come from, in words.

        ``"pld"``: the privacy loss distribution of :attr:`dp_event` (data-independent, tight);
        ``"rdp"``: the data-independent RDP curve, no PLD (valid, looser); ``"rdp (DATA-DEPENDENT curve)"`` where
        only the data-dependent curve was recorded;
        ``"none"``: ε = ∞, no bound: an attacker may reach a true-positive rate of 1.
        """
        profile = self._profile
        if profile is None:
            return "none"
        if profile.basis == "rdp" and self.data_dependent and not self.rdp_data_independent:
            return "rdp (DATA-DEPENDENT curve)"
        return profile.basis

    def tradeoff(self, false_positive_rates: Any) -> np.ndarray:
        """The best attack's true-positive rate at each false-positive rate: an upper bound for any attack
        telling whether one unit's data was used (1 − f(α), f the trade-off function; Dong, Roth & Su 2022).

        Computed from the PLD of :attr:`dp_event` where there is one, else from the RDP curve (valid, looser):
        :attr:`tradeoff_basis` says which. Where ε = ∞ every rate is 1.

        Examples
        --------
        >>> import dp_accounting, privfed
        >>> report = privfed.account(dp_accounting.GaussianDpEvent(2.0), delta=1e-5)
        >>> report.tradeoff([0.01]).round(3).tolist(), round(report.gdp_mu, 3)
        ([0.034], 0.505)
        """
        from .tradeoff import check_false_positive_rates

        rates = check_false_positive_rates(false_positive_rates)
        profile = self._profile
        if profile is None:
            return np.where(rates > 0.0, 1.0, 0.0)
        return profile.true_positive_rates(rates)

    @property
    def gdp_mu(self) -> float | None:
        """The smallest μ for which the releases are μ-Gaussian DP (Dong, Roth & Su, Cor. 2.13) up to an additive δ of
        10⁻¹⁰ (:data:`~privfed.accounting.tradeoff.GDP_DELTA_SLACK`), from the PLD;
        ``None`` where there is no PLD (:attr:`tradeoff_basis` is not ``"pld"``), ε = ∞ or no μ ≤ 64 fits."""
        profile = self._profile
        return None if profile is None else profile.gdp_mu()

    @property
    def epsilon_is_data_dependent(self) -> bool:
        """Whether :attr:`epsilon` itself depends on private data, and so must be labelled DATA-DEPENDENT.

        True only where the analysis used private statistics (:attr:`data_dependent`) and its ε is below
        :attr:`epsilon_data_independent` (by more than floating-point error); an ε equal to the
        data-independent one (∞ included) is that number, the same for every data set.
        """
        return _below(self.epsilon, self.epsilon_data_independent) and self.data_dependent

    def summary(self) -> str:
        """One line: ε, δ, unit, analysis, whether ε is data-dependent, the relation analysed, the assumptions,
        and whether some release is not covered."""
        unit = f"{self.unit}-level DP" if self.unit else "no mechanism"
        if self.observer is not None:
            unit += f" against the {self.observer}"
        analysis = _METHOD_TEXT.get(self.method, _ANALYSIS_TEXT[self.analysis])
        estimate = self.method == "smooth_sensitivity"
        figure = f"ε ≈ {round_up(self.epsilon)} (ESTIMATE, not an upper bound)" if estimate else (
            f"ε = {round_up(self.epsilon)}")
        text = f"{figure}, δ = {self.delta:g} ({unit}; {analysis}"
        if self.source == "dpsgd":
            text += "; bound: DP-SGD training of the models every release is derived from"
        if estimate:
            text += (
                "; SANITISED: a noisy estimate of the data-dependent bound, safe to publish; worst-case "
                f"data-independent ε = {round_up(self.epsilon_data_independent)}"
            )
        elif self.epsilon_is_data_dependent:
            text += (
                "; DATA-DEPENDENT: this ε was computed from the private votes and is itself private; "
                f"data-independent ε = {round_up(self.epsilon_data_independent)}"
            )
        else:
            text += "; data-independent"
        if self.relations is not None and self.unit is not None:
            who = "example" if self.unit == "example" else "party's data"
            text += (f"; neighbours: one {who} {describe_relations(self.relations)}" if self.relations else
                     "; NO NEIGHBOURING RELATION COVERED: the releases composed share no analysed relation")
        if self.assumptions:
            text += "; assumes: " + "; ".join(self.assumptions)
        if self.uncovered:
            text += (f"; ε = inf: {len(self.uncovered)} release(s) seen without any mechanism covering them, "
                     "listed in report.uncovered")
        return text + ")"

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        analysis = f"{self.analysis}, PLD" if self.method == "pld" else self.analysis
        dependence = (
            f"DATA-DEPENDENT, data-independent ε = {round_up(self.epsilon_data_independent)}"
            if self.epsilon_is_data_dependent else "data-independent"
        )
        observer = "" if self.observer is None else f", observer = {self.observer!r}"
        figure = (f"ε ≈ {round_up(self.epsilon)} (ESTIMATE)" if self.method == "smooth_sensitivity"
                  else f"ε = {round_up(self.epsilon)}")
        return (
            f"PrivacyReport({figure}, δ = {self.delta:g}, unit = {self.unit!r}{observer}, "
            f"analysis = {analysis!r}, {dependence})"
        )

    def curves(self) -> dict[str, tuple[float, ...]]:
        """The composed curves per Rényi order: ``{"orders": α, "rdp": ε(α), "log_moments": α(λ)}``."""
        return {"orders": self.orders, "rdp": self.rdp, "log_moments": self.log_moments}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dictionary (plain floats, lists and strings)."""
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "order": self.order,
            "unit": self.unit,
            "relation": self.relation,
            "analysis": self.analysis,
            "conversion": self.conversion,
            "data_dependent": self.data_dependent,
            "epsilon_data_independent": self.epsilon_data_independent,
            "orders": list(self.orders),
            "rdp": list(self.rdp),
            "log_moments": list(self.log_moments),
            "mechanisms": [m.to_dict() for m in self.mechanisms],
            "notes": list(self.notes),
            "other_units": {unit: report.to_dict() for unit, report in self.other_units.items()},
            "method": self.method,
            "source": self.source,
            "alternatives": {source: report.to_dict() for source, report in self.alternatives.items()},
            "uncovered": list(self.uncovered),
            "observer": self.observer,
            "relations": None if self.relations is None else list(self.relations),
            "assumptions": list(self.assumptions),
            "summary": self.summary(),
        }
