"""``MODEL_CARD.md``: a model's privacy ledger rendered for people.

The card is generated from the ledger and says what the model is, which releases
of private data it depends on, the (ε, δ) spent per unit (both analyses,
data-dependent or not), what is *not* covered, a standard privacy statement
(:mod:`privfed.bundle.privacy_statement`), and how to verify all of it.
It is documentation, not evidence: verification always goes through ``MANIFEST.json``
and ``ledger.json``. What the ledger does not know — evaluation metrics, the data
sets used (names, shapes, fingerprints) and the intended use — comes from the
bundle's ``card.json`` (``save_bundle(..., metrics=, data=, intended_use=)``), so
the card can be re-rendered from covered files and compared byte for byte
(``privfed audit``'s card check).

A card whose ledger's noise was seeded (``noise_seed=``) or not recorded says so on its first line
(:func:`noise_notice`): seeded, every ε on it is ∞ for whoever holds the bundle. ``random_state`` appears only under
"reproducibility": it controls splits and initialisation, never the noise.

The card does not print the bundle digest (the sha256 of ``MANIFEST.json``,
which covers the card itself): ``privfed audit`` and ``privfed.bundle_digest``
print it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from privfed.accounting.fingerprint import data_fingerprint
from privfed.accounting.ledger import Ledger
from privfed.accounting.mechanism import relation_for_unit
from privfed.accounting.noise_source import NOISE_SECRET, NOISE_SEEDED, noise_provenance_problem
from privfed.accounting.observers import OBSERVERS, describe_observer
from privfed.accounting.report import round_up
from privfed.bundle.privacy_statement import render_privacy_statement, uncovered_label, uncovered_releases
from privfed.evaluation import accuracy_line

__all__ = ["CARD_DATA_FILE", "card_data_document", "noise_notice", "render_model_card"]

#: The bundle file holding what the card states beyond the ledger.
CARD_DATA_FILE = "card.json"


#: The fields of an :class:`~privfed.accounting.auditing.AuditResult` the card records.
AUDIT_FIELDS = ("epsilon_lower", "claimed_epsilon", "violation", "num_guesses", "num_correct", "num_canaries",
                "delta", "confidence", "unit", "threat_model")


def _audit_record(result: object) -> dict[str, Any] | None:
    """The card's record of an empirical audit (``privfed.empirical_audit`` / ``privfed.audit_release``)."""
    from privfed.accounting.auditing import AuditResult

    if result is None:
        return None
    if not isinstance(result, AuditResult):
        raise TypeError(f"audit_result must be the AuditResult of privfed.empirical_audit or privfed.audit_release, "
                        f"or None; got {type(result).__name__}")
    record: dict[str, Any] = {name: getattr(result, name) for name in AUDIT_FIELDS}
    record["design"] = str(result.details.get("design", "custom"))
    ledger_epsilon = result.details.get("ledger_epsilon")
    record["ledger_epsilon"] = None if ledger_epsilon is None else float(ledger_epsilon)
    # The f-DP estimate on the same guesses (Mahloujifar, Melis, Chaudhuri): μ, and the ε at the audit's δ that a
    # Gaussian trade-off curve of that μ has (NaN where there is none, e.g. δ = 0: recorded as None).
    record["gdp_mu_lower"] = float(result.gdp_mu_lower)
    record["gdp_epsilon_lower"] = None if math.isnan(result.gdp_epsilon_lower) else float(result.gdp_epsilon_lower)
    for name in ("epsilon_lower", "claimed_epsilon", "ledger_epsilon", "gdp_epsilon_lower"):  # JSON has no infinity
        if record[name] is not None and math.isinf(record[name]):
            record[name] = "inf"
    return record


def card_data_document(*, metrics: object, data: object, intended_use: object,
                       audit_result: object = None, refused: object = None) -> dict[str, Any]:
    """``card.json``'s content, validated: metrics name → finite number, data name → description, intended use,
    the empirical audit's result when one was run, and — for a pipeline fitted with silo budgets — the parties
    whose silos refused (``refused``: the estimator's ``refused_``; every other party took part)."""
    if metrics is not None and not isinstance(metrics, Mapping):
        raise TypeError(f"metrics must be a mapping name → number (e.g. {{'accuracy': 0.91}}) or None, got "
                        f"{type(metrics).__name__}")
    checked_metrics = None
    if metrics is not None:
        checked_metrics = {}
        for name, value in metrics.items():
            if not isinstance(name, str) or isinstance(value, bool) or not isinstance(value, numbers.Real) \
                    or not math.isfinite(value):
                raise ValueError(f"metrics must map names to finite numbers, got {name!r}: {value!r}")
            checked_metrics[name] = float(value)
    if data is not None and not isinstance(data, Mapping):
        raise TypeError(f"data must be a mapping name → array or description (e.g. {{'public': X_public}}) or None, "
                        f"got {type(data).__name__}")
    described = {}
    for name, value in (data or {}).items():
        if not isinstance(name, str):
            raise TypeError(f"data's names must be strings, got {name!r}")
        if isinstance(value, str):
            described[name] = {"description": value}
            continue
        array = np.asarray(value)
        if array.dtype == object:
            raise TypeError(f"data[{name!r}] must be a numeric array or a string description, got dtype object")
        described[name] = {"shape": list(array.shape), "dtype": array.dtype.str,
                           "sha256": data_fingerprint({name: array})}
    if intended_use is not None and not isinstance(intended_use, str):
        raise TypeError(f"intended_use must be a string or None, got {type(intended_use).__name__}")
    document = {"type": "privfed.card", "schema_version": 1, "metrics": checked_metrics, "data": described,
                "intended_use": intended_use}
    audit = _audit_record(audit_result)
    if audit is not None:
        document["empirical_audit"] = audit
    if refused is not None:
        document["refused_silos"] = [{"party": int(r.party), "round": int(r.round), "reason": str(r.reason)}
                                     for r in refused]  # type: ignore[attr-defined]
    return document


def _epsilon_lines(ledger: Ledger) -> list[str]:
    if not ledger.units:
        return ["**No release of private data is recorded: this model carries no differential-privacy guarantee "
                "from privfed** (either it used no private data, or its releases were not recorded)."]
    if ledger.delta is None:
        return ["No δ was recorded with this ledger, so no (ε, δ) total is stated; call "
                "`ledger.account(delta=...)` to compute one."]
    lines = [f"Totals against the public (the released model and published outputs), recomputed from the recorded "
             f"RDP curves at δ = {ledger.delta:g}; units are never composed together. ε values are upper bounds, "
             "rounded up; ∞ where a release no mechanism covers is seen.", "",
             "| unit | analysis | ε | data-independent ε | data-dependent? | optimal order |",
             "|---|---|---|---|---|---|"]
    dependent = False
    for unit in ledger.units:
        for analysis in ("tight", "classic"):
            try:
                report = ledger.account(analysis=analysis, unit=unit)
            except ValueError as error:  # an entry without a curve for this analysis
                lines.append(f"| {unit} | {analysis} | not available: {error} | | | |")
                continue
            dependent = dependent or report.epsilon_is_data_dependent
            lines.append(
                f"| {unit} | {analysis} | {_epsilon_text(report.epsilon)} | "
                f"{_epsilon_text(report.epsilon_data_independent)} "
                f"| {'**yes**' if report.epsilon_is_data_dependent else 'no'} | {report.order:g} |"
            )
    if dependent:
        lines += ["", "**Data-dependent ε**: computed from the private votes, so the number itself depends on "
                      "private data and is not protected; the data-independent ε holds whatever the data."]
    lines += ["", "Neighbouring relations:", *[f"- {relation_for_unit(unit, ledger.relations(unit))}"
                                                for unit in ledger.units]]
    lines += ["", *_observer_lines(ledger)]
    return lines


def _observer_lines(ledger: Ledger) -> list[str]:
    """The ε per observer table (tight analysis): who sees what, and what no mechanism covers for them."""
    lines = ["### ε per observer", "",
             "Each observer's ε composes the releases it sees (tight analysis, rounded up); ∞ where it sees a release "
             "no mechanism covers.", "",
             *[f"- {describe_observer(observer)}" for observer in OBSERVERS], "",
             "| observer | unit | ε | data-independent ε | data-dependent? | not covered |",
             "|---|---|---|---|---|---|"]
    labels = {text: uncovered_label(index) for index, text in enumerate(uncovered_releases(ledger))}
    for report in ledger.observer_table(analysis="tight"):
        lines.append(f"| {report.observer} | {report.unit} | {_epsilon_text(report.epsilon)} | "
                     f"{_epsilon_text(report.epsilon_data_independent)} | "
                     f"{'**yes**' if report.epsilon_is_data_dependent else 'no'} | "
                     f"{', '.join(labels.get(text, text) for text in report.uncovered) or 'nothing'} |")
    return lines


def _epsilon_text(epsilon: float) -> str:
    return "∞" if epsilon == math.inf else round_up(epsilon)


def _release_lines(ledger: Ledger) -> list[str]:
    releases = [entry for entry in ledger.entries if entry.kind == "release"]
    if not releases:
        return ["No accounted release is recorded."]
    lines = ["| # | unit | mechanism | queries | data-dependent | seen by | key parameters | note |",
             "|---|---|---|---|---|---|---|---|"]
    for entry in releases:
        for unit, member in entry.analyses.items():
            parameters = ", ".join(
                f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}"
                for key, value in member.parameters.items()
                if isinstance(value, (int, float, str))
            )
            lines.append(f"| {entry.index} | {unit} | `{member.kind}` | {member.num_queries} | "
                         f"{'yes' if member.data_dependent else 'no'} | {', '.join(entry.observers)} | {parameters} "
                         f"| {entry.note} |")
    return lines


def _card_lines(card: Mapping[str, Any]) -> list[str]:
    lines = ["## Intended use", "", card.get("intended_use") or "Not stated by the publisher.", ""]
    lines += ["## Evaluation", ""]
    metrics = card.get("metrics")
    if metrics:
        lines += ["| metric | value |", "|---|---|", *[f"| {name} | {value:.6g} |" for name, value in metrics.items()]]
        verdict = accuracy_line(metrics)
        lines += ["", f"**{verdict[0].upper()}{verdict[1:]}.**" if verdict else
                  "Reported by the publisher; privfed did not compute these numbers."]
    else:
        lines += ["Not evaluated: no metrics were recorded with this bundle."]
    lines += ["", "## Data", ""]
    data = card.get("data") or {}
    if not data:
        lines += ["No data description was given."]
    for name, entry in data.items():
        if "description" in entry:
            lines.append(f"- `{name}`: {entry['description']}")
        else:
            lines.append(f"- `{name}`: shape {tuple(entry['shape'])}, dtype `{entry['dtype']}`, fingerprint "
                         f"`{entry['sha256']}` (privfed.accounting.fingerprint.data_fingerprint)")
    if "refused_silos" in card:
        lines += ["", "## Parties", "", *([f"- party {r['party']} refused at round {r['round']} (its silo's budget): "
                                          f"{r['reason']}" for r in card["refused_silos"]]
                                        or ["Every party took part; no silo's budget refused."])]
        if card["refused_silos"]:
            lines.append("- every other party took part")
    return [*lines, "", *_audit_lines(card.get("empirical_audit"))]


def _audit_lines(audit: Mapping[str, Any] | None) -> list[str]:
    """The card's empirical-audit section; none without an audit (so that earlier bundles' cards render unchanged)."""
    if not audit:
        return []
    lines = ["## Empirical audit", ""]

    def number(value: Any, *, lower: bool) -> str:
        if value == "inf" or value is None:
            return str(value)
        return f"{math.floor(value * 1000) / 1000:.3f}" if lower else round_up(value)

    verdict = ("**violation**: the lower bound exceeds the claim" if audit["violation"]
               else "no violation found (a lower bound: it does not show that the claim holds)")
    lines += [f"One-run canary audit (Steinke, Nasr, Jagielski 2023) run by the publisher, design "
              f"`{audit['design']}`, {audit['unit']} level, {audit['num_canaries']} canaries; privfed did not "
              "rerun it.",
              "",
              f"- ε lower bound: {number(audit['epsilon_lower'], lower=True)} at {audit['confidence']:.0%} confidence "
              f"({audit['num_correct']} of {audit['num_guesses']} guesses right), rounded down",
              f"- claimed ε it was judged against: {number(audit['claimed_epsilon'], lower=False)} at "
              f"δ = {audit['delta']:g}"
              + ("" if audit.get("ledger_epsilon") is None else
                 f" (the audited run's whole ε: {number(audit['ledger_epsilon'], lower=False)})"),
              f"- verdict: {verdict}",
              *_gdp_line(audit, number),
              f"- threat model: {audit['threat_model'] or 'not stated'}",
              "- docs/audit.md#empirical-audits says why such a bound can sit far below the claim.", ""]
    return lines


def _gdp_line(audit: Mapping[str, Any], number: Any) -> list[str]:
    """The card's line for the f-DP estimate, when the audit recorded one (cards written before it have none)."""
    if "gdp_mu_lower" not in audit:
        return []
    epsilon = audit["gdp_epsilon_lower"]
    at_delta = ("no ε at this δ" if epsilon is None else
                f"ε ≥ {number(epsilon, lower=True)} at δ = {audit['delta']:g} only if the mechanism's trade-off "
                "curve is Gaussian")
    return [f"- f-DP estimate on the same guesses (Mahloujifar, Melis, Chaudhuri 2025): Gaussian-DP "
            f"μ ≥ {number(audit['gdp_mu_lower'], lower=True)}; {at_delta}; it decides no verdict"]


def noise_notice(noise: Mapping[str, Any] | None) -> str | None:
    """What a card says first when a ledger's ``noise`` does not support its ε (None when the noise was secret).

    ``noise`` is :attr:`Ledger.noise <privfed.accounting.ledger.Ledger.noise>`: seeded noise (``noise_seed=``) is
    reproducible by whoever holds the bundle; a ledger that does not record its noise may have been saved before
    privfed drew noise secretly (ledger schema ≤ 2), when every draw derived from the recorded ``random_state``.
    """
    problem = noise_provenance_problem(noise)
    if problem is None:
        return None
    if noise is None:
        return ("**NOISE PROVENANCE NOT RECORDED: this ledger does not say where its noise came from. Bundles saved "
                "before privfed drew noise from a secret source (ledger schema ≤ 2) derived every noise draw from "
                "the random_state they record: for them every ε below is ∞ for whoever holds the bundle.**")
    if noise.get("source") == NOISE_SEEDED:
        return (f"**NOT A PRIVATE RELEASE: noise reproducible from noise_seed={noise.get('noise_seed')}; every ε "
                "below is ∞ for whoever holds this bundle.**")
    return f"**NOT A PRIVATE RELEASE: {problem}; every ε below is ∞ for whoever holds this bundle.**"


def _noise_line(noise: Mapping[str, Any] | None) -> str:
    """The provenance section's line on the noise: where it came from, as the ledger records it."""
    if noise is None:
        return "- Noise: not recorded"
    if noise.get("source") == NOISE_SECRET:
        return f"- Noise: secret, drawn by whoever added it — {noise.get('generator', 'generator not named')}"
    return f"- Noise: {noise.get('source')} — {noise.get('generator', 'generator not named')}" + (
        f" (noise_seed={noise['noise_seed']}: not a private release)" if "noise_seed" in noise else "")


def render_model_card(ledger: Ledger, *, card: Mapping[str, Any] | None = None) -> str:
    """Markdown model card of a bundle's ``ledger`` and ``card`` (the content of its ``card.json``).

    A ledger whose noise was seeded or not recorded gets :func:`noise_notice` as the card's first line.
    """
    model = ledger.model_fingerprint or {}
    notice = noise_notice(ledger.noise)
    lines = [] if notice is None else [notice, ""]
    lines += [f"# Model card: {ledger.description or model.get('class', 'privfed model')}", ""]
    if ledger.evidence_fingerprint:
        lines += ["> **Warning: this bundle ships private evidence.** `evidence.npz` holds private data (the vote "
                  "histograms behind the data-dependent ε), written on the publisher's explicit request. Give this "
                  "bundle to auditors only; publish a bundle saved without evidence (`save_bundle`'s default).", ""]
    lines += ["## The model", "",
              f"- Class: `{model.get('class', 'unknown')}` ({model.get('family', 'unknown')} family)",
              f"- Format: {model.get('format', 'unknown')} — a data format, loading it executes no code",
              f"- Files: {', '.join(f'`{name}`' for name in sorted(model.get('files', {})))}", ""]
    lines += _card_lines(card or {})
    lines += ["## Releases of private data it depends on", "", *_release_lines(ledger), ""]
    uncovered = uncovered_releases(ledger)
    unaccounted = [entry for entry in ledger.entries if entry.kind == "unaccounted"]
    if uncovered:  # the privacy statement below describes each, once
        labels = ", ".join(uncovered_label(index) for index in range(len(uncovered)))
        lines += ["### Not covered by any guarantee", "",
                  f"{len(uncovered)} release(s) ({labels}) reach an observer with no mechanism accounting for them; "
                  "an observer who sees one has ε = ∞ (unless it is post-processing of recorded DP training). Each "
                  "is described once, under \"not covered\" in the privacy statement below.", ""]
    elif unaccounted:  # no δ, so no statement: described here
        lines += ["### Not covered by any guarantee", "",
                  "These releases are recorded but no mechanism accounts for them; an observer who sees one has "
                  "ε = ∞ (unless it is post-processing of recorded DP training):",
                  "", *[f"- seen by {', '.join(entry.observers)}"
                        + ("" if entry.units is None else f" ({'/'.join(entry.units)} level)")
                        + f": {entry.description}" for entry in unaccounted], ""]
    lines += ["## Privacy guarantee", "", *_epsilon_lines(ledger), ""]
    if ledger.target_epsilon:
        targets = ", ".join(f"{unit}: ε ≤ {value:g}" for unit, value in ledger.target_epsilon.items())
        lines += [f"Budget enforced while training ({ledger.analysis} analysis, "
                  f"{ledger.budget_basis.replace('_', '-')} ε): {targets}.", ""]
    lines += render_privacy_statement(ledger).split("\n")
    software = ", ".join(f"{name} {version}" for name, version in ledger.software.items() if version)
    shipped = "`evidence.npz` (PRIVATE: for auditors only)" if ledger.evidence_fingerprint else "not shipped"
    lines += ["## Provenance", "",
              f"- Ledger created {ledger.created} with privfed {ledger.privfed_version}; {software}",
              _noise_line(ledger.noise),
              "- Reproducibility: splits and initialisation: "
              f"{', '.join(f'{k}={v}' for k, v in ledger.seeds.items()) or 'no seed recorded'}",
              f"- Public data sha256: `{ledger.public_data_sha256 or 'not recorded'}`",
              f"- Evidence: {shipped}",
              ""]
    lines += ["## How to verify", "",
              "1. The **bundle digest** is the sha256 of `MANIFEST.json`, which lists the size and sha256 of every "
              "other file of the bundle, this card included. `privfed audit BUNDLE` prints it; compare it with the "
              "digest the publisher announced through a channel you trust, or check the publisher's signature with "
              "`privfed audit BUNDLE --public-key KEY`. Without either, the hashes only catch accidents: whoever "
              "could edit the folder could have rewritten the manifest too.",
              "2. `model, ledger = privfed.load_bundle(path)` checks every file against the manifest and the ledger "
              "before loading anything, the chain of entries and the recorded totals, and rebuilds every entry's "
              "curves from its public parameters (data-dependent ones from `evidence.npz` when present).",
              "3. `ledger.account(unit=\"party\")` / `ledger.account(unit=\"example\")` recompute ε from the "
              "recorded curves; `observer=\"coordinator\"` gives the coordinator's.",
              ""]
    return "\n".join(lines)
