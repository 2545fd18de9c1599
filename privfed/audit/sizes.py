"""Size-revealing parameters: public ledger values derived from private sizes or labels (``docs/audit.md#sizes``).

A bundle's ledger is public, and so is every parameter it records. A parameter computed from a party's private
data is a release no mechanism covers: under add/remove neighbours a training-set size differs between
neighbours, and a value derived from it makes the ε that treats it as public ∞. The check scans every accounted
entry's parameters (compositions included) and the ledger's own fields for the values privfed's pipelines can
derive from private data:

* a **sample rate** that is no configured rate (DP-SGD's ``sample_rate``, a dp-accounting event's
  ``sampling_probability``): without ``DPConfig(sample_rate=)`` a pipeline trains
  with q = batch_size / n, n the party's training-set size, and records q (and the steps epochs · ⌊1/q⌋ that
  follow from it). The ledger does not record where q came from, so the check reads the value itself: a rate
  that is not a decimal of at most :data:`CONFIGURED_DIGITS` significant digits is a ratio no one configures,
  ``b / n``. (A size that makes b / n a short decimal — 64 / 1000 — is not caught.)
* a **data-dependent stopping point**: with ``budget_basis="data_dependent"`` and a target, the number of answered
  queries (every entry's ``num_queries``) depends on the private votes.

A finding passes when the ledger records it as a release no mechanism covers, seen by the public (an
``unaccounted`` entry whose description names it: :data:`RATE_WORDS`, :data:`STOPPING_WORDS`); it fails
otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from fractions import Fraction

from privfed.accounting.ledger import Ledger
from privfed.audit.report import Check

__all__ = ["CONFIGURED_DIGITS", "RATE_WORDS", "STOPPING_WORDS", "size_check", "size_findings"]

#: A sample rate with at most this many significant decimal digits reads as configured (0.01, 0.064, 0.0256).
CONFIGURED_DIGITS = 4
#: An unaccounted entry naming one of these records the sample rate's release (case-insensitive).
RATE_WORDS = ("sample rate", "sampling rate", "sample_rate")
#: An unaccounted entry naming one of these records the data-dependent stopping point's release.
STOPPING_WORDS = ("stopping point", "answered queries")

#: The parameters that hold a subsampling rate: privfed's DP-SGD records, dp-accounting's Poisson-sampled events.
_RATE_KEYS = ("sample_rate", "sampling_probability")
_NAME = "size-revealing parameters"
_SECTION = "sizes"


def _sampling_rates(value: object) -> Iterator[float]:
    """Every sampling rate in a record: DP-SGD's ``sample_rate`` and a dp-accounting event's
    ``sampling_probability``, at any depth (compositions' ``members``, nested events)."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key in _RATE_KEYS and isinstance(item, float):
                yield item
            else:
                yield from _sampling_rates(item)
    elif isinstance(value, list):
        for item in value:
            yield from _sampling_rates(item)


def _configured(rate: float) -> bool:
    return float(f"{rate:.{CONFIGURED_DIGITS}g}") == rate


def _recorded_as_unaccounted(ledger: Ledger, words: tuple[str, ...]) -> str | None:
    """The description of a public unaccounted entry naming one of ``words``, or None."""
    for entry in ledger.entries:
        if entry.kind == "unaccounted" and "public" in entry.observers and any(
                word in entry.description.lower() for word in words):
            return entry.description
    return None


def size_findings(ledger: Ledger, target_epsilon: Mapping[str, float] | None = None
                  ) -> tuple[list[str], list[str], int]:
    """(uncovered findings, findings the ledger records as unaccounted, sampling rates scanned).

    ``target_epsilon``: the budget the ledger records (default ``ledger.target_epsilon``; the audit passes the
    document's, as it reads the ledger without its budget to check the totals separately).
    """
    derived_rates: dict[float, list[str]] = {}
    scanned = 0
    for entry in ledger.entries:
        for member in entry.analyses.values():
            for rate in _sampling_rates(member.record()):
                scanned += 1
                if 0 < rate < 1 and not _configured(rate):
                    where = f"entry {entry.index} ({entry.kind})"
                    places = derived_rates.setdefault(rate, [])
                    if where not in places:
                        places.append(where)
    findings: list[tuple[str, tuple[str, ...]]] = []
    for rate, places in derived_rates.items():
        ratio = Fraction(rate).limit_denominator(10**7)
        findings.append((f"sample rate q = {rate:.6g} ({', '.join(places)}) is no configured rate: it is "
                         f"{ratio.numerator}/{ratio.denominator}, batch_size / n for a training-set size n (a multiple "
                         f"of {ratio.denominator}), so q and the steps epochs · ⌊1/q⌋ reveal the party's private "
                         "size (no DPConfig(sample_rate=))", RATE_WORDS))
    targets = ledger.target_epsilon if target_epsilon is None else target_epsilon
    if ledger.budget_basis == "data_dependent" and targets:
        findings.append(("the budget filter compared the data-dependent ε, so where it stopped — the number of "
                         "answered queries every entry records — depends on the private votes", STOPPING_WORDS))
    uncovered, recorded = [], []
    for finding, words in findings:
        description = _recorded_as_unaccounted(ledger, words)
        if description is None:
            uncovered.append(finding)
        else:
            recorded.append(f"{finding}; recorded as unaccounted: {description}")
    return uncovered, recorded, scanned


def size_check(ledger: Ledger, target_epsilon: Mapping[str, float] | None = None) -> Check:
    """The size-revealing parameters check of ``ledger`` (FAIL when a finding is not recorded as unaccounted)."""
    uncovered, recorded, scanned = size_findings(ledger, target_epsilon)
    if uncovered:
        return Check(_NAME, "fail", "; ".join(uncovered + recorded),
                     "the public ledger holds a number computed from a party's private data that no mechanism "
                     "covers, so the ε that treats it as public does not hold (it is ∞ for whoever reads it).",
                     _SECTION)
    if recorded:
        return Check(_NAME, "pass", "; ".join(recorded))
    rates = f"{scanned} sample rate(s), each a configured decimal" if scanned else "no sample rate"
    return Check(_NAME, "pass", f"every entry's parameters and the ledger's fields scanned: {rates}, no "
                 "data-dependent stopping point")
