"""Relations and assumptions: what each observer's ε is stated under (``docs/audit.md#assumptions``).

An ε is a guarantee for one neighbouring relation (add/remove, replace-one, …) and only under its assumptions (no
collusion between the coordinator and some parties, a trusted shuffler, honest execution). The check prints, for
every observer and unit of the ledger, the relation(s) and the assumptions its ε rests on: the observer's
defaults (:data:`~privfed.accounting.observers.DEFAULT_ASSUMPTIONS`, named by their first words) and those its
report states (e.g. the coalition a secure sum's coordinator entry assumes). It warns when a report covers no
neighbouring relation.
"""

from __future__ import annotations

from privfed.accounting.ledger import Ledger
from privfed.accounting.observers import DEFAULT_ASSUMPTIONS, OBSERVERS
from privfed.accounting.report import PrivacyReport
from privfed.audit.report import Check

__all__ = ["assumptions_check"]

_NAME = "relations and assumptions"


def _texts(value: object) -> tuple[str, ...]:
    """A report field that may be one string, several, or absent, as a tuple of strings."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(str(item) for item in value)


def _stated(report: PrivacyReport) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(relations, assumptions) a report states (``relations`` where it lists several, else its ``relation``)."""
    relations = _texts(getattr(report, "relations", None)) or _texts(report.relation)
    return relations, _texts(getattr(report, "assumptions", None))


def assumptions_check(ledger: Ledger) -> Check | None:
    """The relation(s) and assumptions of every observer's ε (None when the ledger states no ε)."""
    if ledger.delta is None or not ledger.units:
        return None
    stated: dict[tuple[tuple[str, ...], tuple[str, ...]], list[str]] = {}
    for observer in OBSERVERS:
        for unit in ledger.units:
            try:
                report = ledger.account(unit=unit, observer=observer, analysis=ledger.analysis)
            except (ValueError, TypeError, KeyError, ArithmeticError) as error:  # an entry without this analysis
                return Check(_NAME, "warn", f"not read: the {observer}'s {unit}-level report cannot be computed: "
                             f"{str(error).splitlines()[0] if str(error) else type(error).__name__}",
                             "the ledger's reports, and so what they assume, could not be read.", "assumptions")
            relations, assumptions = _stated(report)
            defaults = tuple(text.split(":")[0] for text in DEFAULT_ASSUMPTIONS[observer])
            stated.setdefault((relations, defaults + assumptions), []).append(f"{observer}, {unit}")
    parts = [f"{'; '.join(who)}: relation {' / '.join(relations) or 'none covered'}; assumes: "
             f"{'; '.join(assumptions)}" for (relations, assumptions), who in stated.items()]
    if any(not relations for relations, _ in stated):
        return Check(_NAME, "warn", " | ".join(parts),
                     "an ε is a guarantee for a neighbouring relation; where the composed releases share none, the "
                     "number covers no single notion of neighbouring data sets.", "assumptions")
    return Check(_NAME, "pass", " | ".join(parts))
