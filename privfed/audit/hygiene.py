"""Claim hygiene: warnings about privacy claims whose numbers may be right but whose reading is not.

Each check takes a :class:`Statement` — the claim under audit, normalised from a
bundle's ledger or a claims file, with privfed's own recomputation beside it — and
returns a :class:`~privfed.audit.report.Check` whose ``meaning`` says in one
sentence what a warning means for someone who is not a DP expert. The reasoning
behind every threshold is in ``docs/audit.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privfed.accounting.mechanism import UNITS
from privfed.accounting.report import PrivacyReport
from privfed.audit.report import AuditInputError, Check, format_epsilon

__all__ = ["LARGE_EPSILON", "LARGE_PUBLIC_SET", "SETTINGS", "Release", "Statement", "hygiene_checks",
           "parse_protected_units", "resolve_protected_units"]

#: Above this ε a guarantee is called weak (e^10 ≈ 22,000: an attacker's odds may grow that much).
LARGE_EPSILON = 10.0
#: A quantized-noise ensemble released over at least this many public examples is flagged as vacuous.
LARGE_PUBLIC_SET = 1000
SETTINGS: tuple[str, ...] = ("federated", "centralized", "unknown")


@dataclass(frozen=True)
class Release:
    """One accounted release as the hygiene checks see it (public facts only)."""

    kind: str
    unit: str
    num_queries: int
    data_dependent: bool
    parameters: Mapping[str, Any]


@dataclass(frozen=True)
class Statement:
    """A privacy claim and privfed's recomputation of it.

    Attributes
    ----------
    unit:
        The headline unit of the claim (``"party"`` or ``"example"``).
    delta:
        The claim's δ (``None``: no δ stated, so no (ε, δ) claim).
    epsilon:
        The stated ε for ``unit`` (``None``: no number stated).
    reports:
        privfed's recomputed report per unit (tight analysis, at ``delta``).
    releases, unaccounted:
        What was released with and without a mechanism.
    setting:
        ``"federated"``, ``"centralized"`` or ``"unknown"``.
    protected_units:
        Unit → how many such units the data holds (parties, examples), where known.
    protected_units_source:
        Where those counts came from (shown in the table).
    rounds:
        For a per-round claim, the number of rounds the stated ε was spent in (else ``None``).
    data_dependent_claim:
        Whether the claim states that its ε was computed from the private data.
    """

    unit: str
    delta: float | None
    epsilon: float | None
    reports: Mapping[str, PrivacyReport]
    releases: tuple[Release, ...]
    unaccounted: tuple[str, ...]
    setting: str = "unknown"
    protected_units: Mapping[str, int] = field(default_factory=dict)
    protected_units_source: str = ""
    rounds: int | None = None
    data_dependent_claim: bool = False

    @property
    def total_epsilon(self) -> float | None:
        """The ε the model actually has for the headline unit: privfed's recomputation, else the stated ε."""
        report = self.reports.get(self.unit)
        return report.epsilon if report is not None else self.epsilon


_PLURALS = {"party": "parties", "example": "examples"}


def parse_protected_units(value: object) -> dict[str, int]:
    """The protected-unit counts given to the audit or in a claims file: an integer (the claim's unit) or unit → count.

    An integer is returned under the key ``"*"`` (the claim's unit, resolved by :func:`resolve_protected_units`).

    Raises
    ------
    AuditInputError
        ``value`` is neither, or names an unknown unit or a count below 1.
    """
    if value is None:
        return {}
    if isinstance(value, Mapping):
        items = dict(value)
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        items = {"*": int(value)}
    else:
        raise AuditInputError(f"protected_units must be a positive integer or a mapping unit → count, got {value!r}")
    for unit, count in items.items():
        if unit not in (*UNITS, "*"):
            raise AuditInputError(f"protected_units' unit must be one of {UNITS}, got {unit!r}")
        if not isinstance(count, (int, np.integer)) or isinstance(count, bool) or count < 1:
            raise AuditInputError(f"protected_units[{unit!r}] must be a positive integer, got {count!r}")
    return {unit: int(count) for unit, count in items.items()}


def resolve_protected_units(
    given: dict[str, int], headline: str, fallback: Mapping[str, int], source: str
) -> tuple[dict[str, int], str]:
    """(counts, where they came from): those ``given`` to the audit win over the ``fallback`` read from ``source``."""
    if given:
        counts = {headline: given["*"]} if "*" in given else given
        return counts, "given to the audit"
    return dict(fallback), source


def _data_dependence(statement: Statement) -> Check:
    name = "data-dependent ε"
    meaning = ("the published ε was computed from the private votes, so the number itself reveals something about "
               "the training data and is not covered by any guarantee; the data-independent ε is the safe figure "
               "to publish.")
    report = statement.reports.get(statement.unit)
    if report is not None and report.epsilon_is_data_dependent:
        return Check(name, "warn",
                     f"{statement.unit}-level ε = {format_epsilon(report.epsilon)} is data-dependent "
                     f"(data-independent ε = {format_epsilon(report.epsilon_data_independent)}); no "
                     "smooth-sensitivity release (PATE 2018) was used",
                     meaning, "data-dependent-epsilon")
    if statement.data_dependent_claim:
        return Check(name, "warn", "the claims file states its ε was computed from the private data, with no "
                     "smooth-sensitivity release (PATE 2018)", meaning, "data-dependent-epsilon")
    if report is not None and report.data_dependent:
        return Check(name, "pass", f"the data-dependent ε equals the data-independent ε "
                     f"({format_epsilon(report.epsilon_data_independent)}): the number holds for every data set")
    return Check(name, "pass", "the ε does not depend on the private data")


def _unaccounted(statement: Statement) -> Check:
    if not statement.unaccounted:
        return Check("unaccounted releases", "pass", "every release is covered by a mechanism")
    listed = "; ".join(statement.unaccounted)
    return Check("unaccounted releases", "warn", f"{len(statement.unaccounted)} release(s) with no guarantee: {listed}",
                 "some information leaves the parties without any privacy protection, and the ε says nothing about it.",
                 "unaccounted-releases")


def _composition(statement: Statement) -> Check:
    if statement.rounds is None:
        return Check("composition", "pass", "the ε composes every accounted release (none is stated per round)")
    report = statement.reports.get(statement.unit)
    total = format_epsilon(report.epsilon if report else None)
    return Check("composition", "warn",
                 f"ε = {format_epsilon(statement.epsilon)} is stated per round, without composition over the "
                 f"{statement.rounds} rounds; composed, privfed gives ε = {total} ({statement.unit} level, "
                 f"δ = {statement.delta:g})",
                 "privacy loss adds up every time the same data are used again, so a per-round ε understates what the "
                 "finished model reveals.", "per-round-epsilon")


def _unit(statement: Statement) -> Check:
    name = "protected unit"
    units = set(statement.reports)
    if not units:
        return Check(name, "pass", "no accounted release, so no unit is protected")
    if statement.setting == "federated" and units == {"example"}:
        return Check(name, "warn", "a federated model with an example-level ε only (one training record protected), "
                     "no party-level ε", "in federated learning a party contributes many records; protecting one "
                     "record says little about a party's whole data set, whose ε may be many times larger.",
                     "protected-unit")
    if statement.setting == "federated" and units == {"party"}:
        return Check(name, "warn", "a federated model with a party-level ε only; no example-level ε is stated",
                     "a party-level ε protects each party's whole data set, and so each person whose records all sit "
                     "in one party; a person with records in several parties is protected less, and the usual "
                     "per-person (example-level) figure is missing.", "protected-unit")
    if statement.setting == "centralized" and "party" in units:
        return Check(name, "warn", "a party-level ε for a model trained by a single data holder",
                     "with one data holder there is only one party, so a party-level guarantee protects nobody "
                     "individually; the example-level ε is the meaningful one.", "protected-unit")
    if statement.setting == "unknown":
        return Check(name, "pass", f"{' and '.join(sorted(units))} level (setting not stated)")
    return Check(name, "pass", f"{' and '.join(sorted(units))} level, {statement.setting} setting")


def _size(statement: Statement) -> Check:
    epsilon = statement.total_epsilon
    if epsilon is None:
        return Check("size of ε", "warn", "no ε is stated or recomputable: the model claims no differential-privacy "
                     "guarantee", "nothing bounds what the model reveals about its training data.", "large-epsilon")
    if math.isinf(epsilon):
        return Check("size of ε", "warn", "ε is infinite: the model has no differential-privacy guarantee",
                     "nothing bounds what the model reveals about its training data.", "large-epsilon")
    if epsilon == 0:
        return Check("size of ε", "fail", f"ε = 0 ({statement.unit} level) is not a guarantee: a model trained on "
                     "private data reveals something about it, so no release of that data is recorded (a ledger "
                     "whose releases were removed or relabelled reads this way)",
                     "a zero ε is only proven for a model that depends on no private data; privfed cannot check that "
                     "from a ledger that records nothing.", "large-epsilon")
    if epsilon > LARGE_EPSILON:
        return Check("size of ε", "warn", f"ε = {format_epsilon(epsilon)} > {LARGE_EPSILON:g} ({statement.unit} "
                     "level): the guarantee is weak",
                     "an attacker's odds of telling whether someone's data was used may grow by "
                     f"a factor up to e^ε (e^{LARGE_EPSILON:g} ≈ 22,000), which protects little in practice.",
                     "large-epsilon")
    return Check("size of ε", "pass", f"ε = {format_epsilon(epsilon)} ≤ {LARGE_EPSILON:g} ({statement.unit} level)")


def _quantized_ensembles(statement: Statement) -> list[Check]:
    checks = []
    for release in statement.releases:
        if release.kind != "quantized_laplace_ensemble":
            continue
        per_answer = release.parameters.get("epsilon_per_query")
        if release.parameters.get("data_dependent_clip"):
            checks.append(Check("quantized-noise ensemble", "warn", "the clip bound of the quantized logits was taken "
                                "from the private logits (FedKD's z_max): there is no guarantee at all",
                                "the noise is calibrated to a quantity that itself depends on the private data, so "
                                "no ε holds.", "quantized-ensemble"))
        elif release.num_queries >= LARGE_PUBLIC_SET:
            checks.append(Check("quantized-noise ensemble", "warn",
                                f"noisy ensemble released on {release.num_queries} public examples (ε = "
                                f"{format_epsilon(per_answer)} each): the composed ε is vacuous",
                                "each public example's noisy answer costs privacy, and over a large public set the "
                                "costs add up to a number that guarantees nothing.", "quantized-ensemble"))
    return checks


def _delta(statement: Statement) -> Check:
    name = "δ against protected units"
    if statement.delta is None:
        return Check(name, "warn", "no δ is stated, so there is no (ε, δ) claim to check",
                     "without δ the ε cannot be read as a guarantee.", "delta")
    count = statement.protected_units.get(statement.unit)
    if count is None:
        return Check(name, "warn", f"δ = {statement.delta:g}; the number of protected {_PLURALS[statement.unit]} "
                     "is unknown, so δ < 1/n could not be checked (pass --protected-units N)",
                     "δ is the probability that the guarantee fails outright; it must be far below one over the number "
                     "of people (or parties) protected, and that could not be verified here.", "delta")
    if statement.delta >= 1.0 / count:
        # A size the auditor gave is a fact about the data: δ ≥ 1/n then fails. One read from a description warns.
        status = "fail" if statement.protected_units_source == "given to the audit" else "warn"
        return Check(name, status, f"δ = {statement.delta:g} ≥ 1/n = {1.0 / count:.3g} with n = {count} protected "
                     f"{_PLURALS[statement.unit]} ({statement.protected_units_source})",
                     "with δ this large a mechanism could reveal one of the protected parties or records completely "
                     "and still meet the claim.", "delta")
    return Check(name, "pass", f"δ = {statement.delta:g} < 1/n = {1.0 / count:.3g} "
                 f"(n = {count} {_PLURALS[statement.unit]}, {statement.protected_units_source})")


def hygiene_checks(statement: Statement) -> list[Check]:
    """The claim-hygiene checks of ``statement``, in table order."""
    return [
        _data_dependence(statement),
        _unaccounted(statement),
        _composition(statement),
        _unit(statement),
        _size(statement),
        *_quantized_ensembles(statement),
        _delta(statement),
    ]
