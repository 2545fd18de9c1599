"""Noise provenance: could whoever holds the bundle regenerate its noise? (``docs/audit.md#noise-provenance``).

Every ε assumes that its observer cannot predict the noise. The ledger records where the noise came from
(``ledger.noise``, schema 3: :meth:`~privfed.accounting.ledger.Ledger.record_noise_source`):

* ``{"source": "secret", ...}``: drawn by whoever added it from a secure generator keyed from its own OS entropy,
  never recorded — PASS;
* ``{"source": "seeded", "noise_seed": N, ...}``: reproducible from the recorded seed (tests, reproductions) —
  FAIL as a release: whoever holds the bundle regenerates every draw, so every ε is ∞ for them;
* not recorded, in a ledger saved before privfed recorded it (schema ≤ 2) with a recorded seed: every noise draw
  of those versions derived from ``random_state``, which ``ledger.seeds`` holds — FAIL, for the same reason;
* not recorded otherwise (a ledger written by hand, whose noise privfed did not draw) — WARN: nothing says
  whether it was secret (PASS when the ledger records no noised release at all).

A failure or warning is also the audit's headline (:func:`noise_headline`), printed above the table.
"""

from __future__ import annotations

from privfed.accounting.ledger import Ledger
from privfed.accounting.noise_source import NOISE_SECRET, noise_provenance_problem
from privfed.audit.report import Check

__all__ = ["noise_headline", "noise_provenance_check"]

_NAME = "noise provenance"
_SECTION = "noise-provenance"
_REGENERABLE = ("whoever holds this bundle can regenerate the noise, so no ε of it holds against them: the "
                "numbers describe a test or a reproduction, not a private release.")


def noise_provenance_check(ledger: Ledger, schema_version: int) -> Check:
    """Where ``ledger``'s noise came from, judged as a release (``schema_version``: the ledger file's)."""
    noise = ledger.noise
    if isinstance(noise, dict) and noise.get("source") == NOISE_SECRET:
        return Check(_NAME, "pass", f"secret: {noise.get('generator', 'generator not named')}")
    if noise is not None:
        return Check(_NAME, "fail", str(noise_provenance_problem(noise)), _REGENERABLE, _SECTION)
    if not any(entry.kind in ("release", "training") for entry in ledger.entries):
        return Check(_NAME, "pass", "no noised release or training is recorded: there is no noise to regenerate")
    if schema_version <= 2 and ledger.seeds:
        seeds = ", ".join(f"{name} = {value}" for name, value in ledger.seeds.items())
        return Check(_NAME, "fail", f"saved before noise was secret (ledger schema {schema_version}, recorded seeds: "
                     f"{seeds}): {noise_provenance_problem(None)}", _REGENERABLE, _SECTION)
    return Check(_NAME, "warn", "not recorded: the ledger does not say where its noise came from (a ledger written "
                 "outside privfed's pipelines), so privfed cannot say whether it was secret",
                 "the ε holds only if nobody but whoever added the noise could predict it, and nothing here shows "
                 "that.", _SECTION)


def noise_headline(check: Check) -> str:
    """The line printed above the verdict table when the noise provenance check does not pass ("" when it does)."""
    if check.status == "fail":
        finding = check.detail[0].upper() + check.detail[1:]
        return f"NOT A PRIVATE RELEASE: every ε below is ∞ for whoever holds this bundle. {finding}."
    if check.status == "warn":
        return ("NOISE PROVENANCE NOT RECORDED: every ε below assumes noise that nobody but whoever added it could "
                "predict, and nothing in this bundle shows that it was.")
    return ""
