"""What an audit returns: a table of checks, each pass, warn or fail, readable by a non-expert."""

from __future__ import annotations

import json
import math
import textwrap
from dataclasses import dataclass, field
from typing import Any

from privfed.accounting.report import round_up

__all__ = ["DOCS", "INTEGRITY_MEANING", "RECOMPUTE_MEANING", "STATUSES", "UNSAFE_MEANING", "AuditInputError",
           "AuditReport", "Check", "format_epsilon"]

#: The three verdicts of a check: ``fail`` makes the audit fail (exit code 1).
STATUSES: tuple[str, ...] = ("pass", "warn", "fail")
#: Where every warning and failure is explained at length.
DOCS = "docs/audit.md"

#: What a failed check means, for the kinds of check that several modules run: integrity, recomputation, safety.
INTEGRITY_MEANING = "the file or record was changed after it was written, so its privacy claims cannot be trusted."
RECOMPUTE_MEANING = ("privfed's own accountants, applied to the recorded or stated mechanism, give a different "
                     "(larger) privacy loss, so the figure is wrong, was edited, or rests on an analysis privfed "
                     "cannot confirm.")
UNSAFE_MEANING = ("opening this file would require a format that can run arbitrary code (such as pickle); privfed "
                  "refuses to open it.")


def format_epsilon(value: float | None) -> str:
    """An ε as the verdict table prints it: rounded up, never down (``"none"`` for no ε)."""
    return "none" if value is None else round_up(value)


class AuditInputError(ValueError):
    """The audit's input cannot be used at all (no such file, not a bundle, a malformed claims file): exit code 2."""


@dataclass(frozen=True)
class Check:
    """One line of the verdict table.

    Attributes
    ----------
    name:
        What was checked (``"model file"``, ``"entry 0"``, ``"unaccounted releases"``, …).
    status:
        ``"pass"``, ``"warn"`` or ``"fail"``.
    detail:
        The finding, with its numbers.
    meaning:
        For a warning or failure: what it means, in one sentence, for a reader who is not a DP expert.
    section:
        The anchor of the section of ``docs/audit.md`` that explains it.
    """

    name: str
    status: str
    detail: str
    meaning: str = ""
    section: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    @property
    def reference(self) -> str:
        """``docs/audit.md#section`` (or the document alone)."""
        return f"{DOCS}#{self.section}" if self.section else DOCS

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.name, "status": self.status, "detail": self.detail, "meaning": self.meaning,
                "reference": self.reference}


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    return value


@dataclass(frozen=True)
class AuditReport:
    """The verdict on a model and its privacy claims.

    Attributes
    ----------
    target:
        What was audited (a bundle directory, a model file and/or a claims file).
    checks:
        The verdict table, in the order the checks ran.
    claim:
        The privacy claim under audit: ``epsilon``, ``delta``, ``unit`` and where it came from.
    empirical:
        The empirical lower bound, when member and non-member samples were given.
    headline:
        What the reader must know before the table ("" when nothing): a bundle whose noise its holder can
        regenerate, or whose noise provenance is not recorded (:mod:`privfed.audit.provenance`).
    epsilons:
        ε per observer and unit, recomputed from the entries
        (:func:`privfed.audit.recomputation.epsilon_table`; {} when not computed): printed once, as one
        table with a row per observer, below the verdict table.
    """

    target: str
    checks: tuple[Check, ...]
    claim: dict[str, Any] = field(default_factory=dict)
    empirical: dict[str, Any] | None = None
    headline: str = ""
    epsilons: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if check.status == "fail")

    @property
    def warnings(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if check.status == "warn")

    @property
    def passed(self) -> bool:
        """True when no check failed (warnings allowed)."""
        return not self.failed

    @property
    def exit_code(self) -> int:
        """0 when nothing failed, 1 when a check failed."""
        return 0 if self.passed else 1

    def check(self, name: str) -> Check:
        """The first check called ``name``."""
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(f"no check named {name!r}; checks: {[c.name for c in self.checks]}")

    def verdict(self) -> str:
        if self.failed:
            return f"FAIL: {len(self.failed)} check(s) failed; the privacy claims should not be trusted as stated."
        if self.warnings:
            return (f"PASS with {len(self.warnings)} warning(s): the numbers check out; "
                    "read the warnings before relying on them.")
        return "PASS: every check passed."

    def table(self, *, width: int = 110) -> str:
        """The verdict table as plain text (what ``privfed audit`` prints)."""
        name_width = max([len("check")] + [len(c.name) for c in self.checks])
        detail_width = max(30, width - name_width - 10)
        wrap = textwrap.TextWrapper(detail_width, break_long_words=False, break_on_hyphens=False)
        lines = [f"privfed audit: {self.target}", ""]
        if self.headline:
            lines += [*textwrap.wrap(self.headline, width, break_long_words=False, break_on_hyphens=False), ""]
        lines.append(f"{'check'.ljust(name_width)}  status  detail")
        lines.append(f"{'-' * name_width}  ------  {'-' * detail_width}")
        indent = " " * (name_width + 10)
        for check in self.checks:
            detail = wrap.wrap(check.detail) or [""]
            lines.append(f"{check.name.ljust(name_width)}  {check.status.upper().ljust(6)}  {detail[0]}")
            lines.extend(indent + line for line in detail[1:])
            if check.status != "pass" and check.meaning:
                note = wrap.wrap(f"What this means: {check.meaning} See {check.reference}.")
                lines.extend(indent + line for line in note)
        lines += self._epsilon_lines()
        lines += ["", self.verdict()]
        return "\n".join(lines)

    def _epsilon_lines(self) -> list[str]:
        """The ε per observer table: a row per observer, a column per unit."""
        if not self.epsilons:
            return []
        units = self.epsilons["units"]
        rows = [["observer", *(f"ε ({unit} level)" for unit in units)]]
        rows += [[observer, *(by_unit[unit] for unit in units)]
                 for observer, by_unit in self.epsilons["observers"].items()]
        widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
        table = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
        table.insert(1, "  ".join("-" * width for width in widths))
        return ["", f"ε per observer, recomputed from the entries ({self.epsilons['analysis']} analysis, "
                    f"δ = {self.epsilons['delta']:g}; inf: an observer sees a release no mechanism covers):", *table]

    def to_dict(self) -> dict[str, Any]:
        return _json_safe({
            "type": "privfed.audit",
            "target": self.target,
            "headline": self.headline,
            "verdict": "fail" if self.failed else ("warn" if self.warnings else "pass"),
            "exit_code": self.exit_code,
            "claim": self.claim,
            "empirical": self.empirical,
            "checks": [check.to_dict() for check in self.checks],
            "epsilons": self.epsilons,
        })

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False, allow_nan=False)


def unsigned_headline(signing: Check, ledger: Any) -> str:
    """The line above the table of a bundle whose signature was not checked against the publisher's key.

    Without it, anyone who can edit the folder can reseal the ledger so that the coordinator's releases
    disappear from its observer table (the coordinator's ε becomes finite) and the bundle still passes
    every check: the one warning line would hide the most dangerous rewrite. "" for a signed bundle or
    an empty ledger.
    """
    if signing.status != "warn" or not len(ledger):
        return ""
    return ("UNSIGNED BUNDLE: its observer table (which releases the coordinator sees) and every ε below cannot be "
            "trusted — anyone who could edit the folder can have rewritten them and resealed it. Trust them only "
            "with the publisher's signature (--public-key) or a bundle digest published through a trusted channel.")
