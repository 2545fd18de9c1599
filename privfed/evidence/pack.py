"""Evidence packs: what a controller sends a regulator, checkable without privfed.

:func:`write_evidence_pack` turns a bundle into one folder (``docs/evidence.md``)::

    README.md / report.html   the guarantee per observer and unit, in words: ε(δ), the trade-off curve (the best
                              attack's true-positive rate at false-positive rates 0.001, 0.01, 0.1), Gaussian-DP μ,
                              the relation, the assumptions, and [empirical lower bound, upper bound] where an
                              empirical audit ran
    tradeoff.png              the trade-off curves (matplotlib, the ``reports`` extra; a table in the report without)
    deployment_facts.json     the machine-readable statement, in the tiers of OpenDP's DP Deployments Registry
    events.json               every ledger entry's data-independent ε and the dp-accounting event it is computed
                              from (dp-accounting's own ``to_named_tuple`` form), each report's composed event, and
                              the whole ledger per observer, unit and bound (``Ledger.to_dp_event``)
    profiles.json             δ(ε) per observer and unit, on the grid the trade-off curves come from
    audit.json                ``privfed audit`` of the bundle (the checks, as ``privfed audit --json`` prints them)
    empirical_audit.json      the empirical audit (from the bundle's card, or ``--audit-json``), when one ran
    ledger.json               the bundle's ledger, byte for byte (its sha256 is in deployment_facts.json)
    verify.py                 the standalone check (:mod:`privfed.evidence.verify_script`)
    publisher.pub, pack.sig   with a signing key: the pack signed with OpenSSF model signing (every file but
                              ``pack.sig``) and the public key to check it against

The pack is written to a fresh sibling folder and renamed into place.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dp_accounting
import numpy as np

from privfed.accounting import Ledger
from privfed.accounting._dp_accounting import pld_interval
from privfed.accounting.account import best_bound, pld_event
from privfed.accounting.conversion import rdp_to_epsilon
from privfed.accounting.dp_event_release import event_relation
from privfed.accounting.interop import BOUNDS, data_independent_event
from privfed.accounting.observers import OBSERVERS
from privfed.accounting.registry import public_mechanism_from_record
from privfed.accounting.report import PrivacyReport, round_up
from privfed.accounting.skellam import SkellamDpEvent, SkellamMechanism
from privfed.accounting.tradeoff import check_false_positive_rates

__all__ = ["DEFAULT_FALSE_POSITIVE_RATES", "PACK_SCHEMA", "event_document", "ledger_entry_epsilons",
           "write_evidence_pack"]

#: Version of the pack's machine-readable files.
PACK_SCHEMA = "privfed-evidence/1"
#: The false-positive rates the report tabulates the best attack's true-positive rate at.
DEFAULT_FALSE_POSITIVE_RATES = (0.001, 0.01, 0.1)
#: Where OpenDP's registry describes its tiers (the field groups deployment_facts.json follows).
REGISTRY_TIERS_URL = "https://registry.opendp.org/transparency-tiers"
#: The name the pack's signature file has inside the pack (excluded from what it signs).
PACK_SIGNATURE = "pack.sig"


def event_document(event: dp_accounting.DpEvent) -> dict[str, Any]:
    """``event`` in dp-accounting's own serialisable form (``DpEvent.to_named_tuple()``) as a JSON object:
    ``{"module_name", "class_name", <fields>}``, nested events as objects. privfed's Skellam leaf
    (:class:`~privfed.accounting.skellam.SkellamDpEvent`, which dp-accounting has no event for) in the same form,
    module ``privfed.accounting.skellam``, fields ``variance`` and ``shift``: ``verify.py`` builds its PLD."""
    if isinstance(event, SkellamDpEvent):
        return {"module_name": SkellamDpEvent.__module__, "class_name": SkellamDpEvent.__name__,
                "variance": float(event.variance), "shift": int(event.shift)}
    if isinstance(event, dp_accounting.SelfComposedDpEvent) and isinstance(event.event, SkellamDpEvent):
        return {"module_name": "dp_accounting.dp_event", "class_name": "SelfComposedDpEvent",
                "event": event_document(event.event), "count": int(event.count)}

    def plain(value: Any) -> Any:
        if hasattr(value, "_asdict"):
            return {key: plain(item) for key, item in value._asdict().items()}
        if isinstance(value, (list, tuple)):
            return [plain(item) for item in value]
        if isinstance(value, dp_accounting.NeighboringRelation):
            return value.name
        return value

    return plain(event.to_named_tuple())


def _pure_leaves_supported(event: dp_accounting.DpEvent) -> bool:
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return _pure_leaves_supported(event.event)
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return all(_pure_leaves_supported(member) for member in event.events)
    return isinstance(event, (dp_accounting.LaplaceDpEvent, dp_accounting.RandomizedResponseDpEvent))


def ledger_entry_epsilons(ledger: Ledger, delta: float) -> list[dict[str, Any]]:
    """Each entry's data-independent ε per unit analysed (tight analysis), with the event it is recomputed from.

    Each row: ``entry``, ``unit``, ``description``, ``kind``, ``epsilon`` (ε = ``"inf"`` for an unaccounted
    release), ``delta``, ``method`` (which accountant gave it: ``"pld"``, ``"rdp"`` or ``"pure"``), ``event``
    (dp-accounting's form), what the recomputation needs (``pld_interval``; ``orders`` and ``relation``), and
    ``recomputable`` with ``reason`` when the event cannot give the ε with dp-accounting alone.
    """
    rows: list[dict[str, Any]] = []
    for entry in ledger.entries:
        base = {"entry": entry.index, "description": entry.note or entry.description, "kind": entry.kind,
                "observers": list(entry.observers)}
        if entry.kind == "unaccounted":
            rows.append({**base, "unit": None, "epsilon": "inf", "delta": delta, "method": None, "event": None,
                         "recomputable": False,
                         "reason": "unaccounted release: no mechanism covers it, ε = ∞ (nothing to recompute)"})
            continue
        for unit, analysis in entry.analyses.items():
            mechanism, _ = public_mechanism_from_record(analysis.record())
            curve = analysis.curves.get("tight")
            if curve is None:
                rows.append({**base, "unit": unit, "epsilon": None, "delta": delta, "method": None, "event": None,
                             "recomputable": False, "reason": f"{analysis.kind} has no tight analysis recorded"})
                continue
            orders = np.asarray(curve.orders, dtype=float)
            independent = np.asarray(curve.rdp_data_independent, dtype=float)
            bound = best_bound([mechanism], orders, np.asarray(curve.rdp, dtype=float), independent, delta, "tight",
                               pure_epsilon=analysis.pure_epsilon)
            row = {**base, "unit": unit, "mechanism": analysis.kind, "data_dependent": analysis.data_dependent,
                   "epsilon": bound.epsilon_data_independent, "delta": delta,
                   "method": bound.method_data_independent}
            rows.append(row | _recomputation(mechanism, bound.method_data_independent, orders, independent, delta))
    return rows


def _recomputation(mechanism: Any, method: str, orders: np.ndarray, independent: np.ndarray,
                   delta: float) -> dict[str, Any]:
    """The event an ε is recomputed from and what the recomputation needs, or why it cannot be.

    A Skellam release also carries ``skellam_rdp``: its closed-form RDP bound's inputs and the ε privfed converts
    it to (``verify.py`` recomputes both); with ``method="rdp"`` that bound is the entry's ε.
    """
    skellam = _skellam_rdp(mechanism, orders, independent, delta) if isinstance(mechanism, SkellamMechanism) else {}
    if method == "rdp" and skellam:
        return {"event": None, "recomputable": True, **skellam}
    if method == "pld":
        hint = rdp_to_epsilon(orders, independent, delta, "tight")[0]
        event, hint = pld_event([mechanism], delta, epsilon_hint=hint)  # type: ignore[misc]
        if skellam and set(_privfed_leaves(event)) <= {SkellamDpEvent.__name__}:
            return {"event": event_document(event), "pld_interval": pld_interval(event, epsilon_hint=hint),
                    "recomputable": True, **skellam}
        if _has_privfed_leaf(event):
            return {"event": None, "recomputable": False,
                    "reason": f"its PLD has a leaf only privfed builds ({_privfed_leaf_names(event)}): "
                              "dp-accounting has no constructor for it"}
        return {"event": event_document(event), "pld_interval": pld_interval(event, epsilon_hint=hint),
                "recomputable": True}
    event = data_independent_event(mechanism)
    if isinstance(event, dp_accounting.NonPrivateDpEvent):
        return {"event": event_document(event), "recomputable": False,
                "reason": f"{mechanism.kind} has no dp-accounting event that bounds it (a data-dependent analysis, "
                          "e.g. smooth sensitivity); its ε is privfed's own"}
    if method == "pure":
        if not _pure_leaves_supported(event):
            return {"event": event_document(event), "recomputable": False,
                    "reason": "pure ε of an event with leaves other than Laplace and randomized response"}
        return {"event": event_document(event), "recomputable": True}
    try:
        relation = event_relation(event) or "add_or_remove_one"
    except TypeError as error:
        return {"event": event_document(event), "recomputable": False, "reason": str(error)}
    return {"event": event_document(event), "orders": [float(a) for a in orders], "relation": relation,
            "recomputable": True}


def _skellam_rdp(mechanism: SkellamMechanism, orders: np.ndarray, independent: np.ndarray,
                 delta: float) -> dict[str, Any]:
    """The inputs of a Skellam release's closed-form RDP bound (:meth:`SkellamMechanism.rdp`: variance, the capped
    sensitivities Δ₁ and Δ₂, count, the orders) and the ε privfed converts that curve to (dp-accounting's
    conversion, as for every RDP curve)."""
    l1, l2 = mechanism.sensitivities()
    return {"skellam_rdp": {"variance": float(mechanism.variance), "l1_sensitivity": float(l1),
                            "l2_sensitivity": float(l2), "count": int(mechanism.count),
                            "orders": [float(a) for a in orders],
                            "epsilon": float(rdp_to_epsilon(orders, independent, delta, "tight")[0])}}


def _privfed_leaves(event: dp_accounting.DpEvent) -> list[str]:
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return _privfed_leaves(event.event)
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return [name for member in event.events for name in _privfed_leaves(member)]
    return [] if type(event).__module__.startswith("dp_accounting") else [type(event).__name__]


def _has_privfed_leaf(event: dp_accounting.DpEvent) -> bool:
    return bool(_privfed_leaves(event))


def _privfed_leaf_names(event: dp_accounting.DpEvent) -> str:
    return ", ".join(sorted(set(_privfed_leaves(event))))


def _ledger_events(ledger: Ledger) -> list[dict[str, Any]]:
    """:meth:`~privfed.accounting.ledger.Ledger.to_dp_event` per observer, unit and bound: the whole ledger as one
    dp-accounting event each (``None`` with the reason where a leaf is privfed's own)."""
    documents = []
    for observer in OBSERVERS:
        for unit in ledger.units or (ledger.primary_unit,):
            for bound in BOUNDS:
                event = ledger.to_dp_event(unit=unit, bound=bound, observer=observer)
                leaves = _privfed_leaf_names(event)
                documents.append({"observer": observer, "unit": unit, "bound": bound,
                                  "event": None if leaves else event_document(event),
                                  **({"reason": f"privfed's own leaf ({leaves})"} if leaves else {})})
    return documents


def _report_row(report: PrivacyReport, rates: np.ndarray) -> dict[str, Any]:
    """One observer × unit: ε, δ, the trade-off at ``rates``, μ, and what they rest on."""
    tpr = report.tradeoff(rates)
    return {
        "observer": report.observer,
        "unit": report.unit,
        "epsilon": report.epsilon if math.isfinite(report.epsilon) else "inf",
        "delta": report.delta,
        "method": report.method,
        "source": report.source,
        "data_dependent": report.data_dependent,
        "epsilon_data_independent": (report.epsilon_data_independent
                                     if math.isfinite(report.epsilon_data_independent) else "inf"),
        "relation": report.relation,
        "relations": None if report.relations is None else list(report.relations),
        "assumptions": list(report.assumptions),
        "uncovered": list(report.uncovered),
        "tradeoff_basis": report.tradeoff_basis,
        "true_positive_rates": {f"{rate:g}": float(value) for rate, value in zip(rates, tpr)},
        "gdp_mu": report.gdp_mu,
        "summary": report.summary(),
        "event": None if report.dp_event is None or _has_privfed_leaf(report.dp_event)
        else event_document(report.dp_event),
    }


def _empirical_audit(card: dict[str, Any], audit_json: str | os.PathLike[str] | None) -> dict[str, Any] | None:
    """The empirical audit: ``--audit-json`` (``privfed audit --empirical ... --json``) or the bundle card's record."""
    if audit_json is not None:
        path = Path(audit_json)
        if not path.is_file():
            raise ValueError(f"audit_json {str(path)!r} does not exist")
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as error:
            raise ValueError(f"audit_json {str(path)!r} is not valid JSON: {error}") from None
        if not isinstance(document, dict) or "epsilon_lower" not in document or "unit" not in document:
            raise ValueError(f"audit_json {str(path)!r} must be the output of privfed audit --empirical ... --json "
                             "(an object with epsilon_lower and unit)")
        details = document.get("details") if isinstance(document.get("details"), dict) else {}
        return {**document, "design": document.get("design", details.get("design", "custom")),
                "source": f"--audit-json {path.name}"}
    record = card.get("empirical_audit")
    return None if record is None else {**record, "source": "the bundle's card.json"}


def _number(value: Any) -> float:
    return math.inf if value == "inf" else float(value)


def _two_sided(rows: list[dict[str, Any]], empirical: dict[str, Any] | None) -> dict[str, Any] | None:
    """[empirical lower bound, upper bound] for the audit's unit, against the public."""
    if empirical is None:
        return None
    upper = next((row for row in rows if row["unit"] == empirical["unit"] and row["observer"] == "public"), None)
    if upper is None:
        return None
    return {"unit": empirical["unit"], "observer": "public", "lower": _number(empirical["epsilon_lower"]),
            "upper": _number(upper["epsilon"]), "delta": upper["delta"],
            "confidence": empirical.get("confidence"), "design": empirical.get("design"),
            "threat_model": empirical.get("threat_model"),
            "claimed_epsilon_audited": empirical.get("claimed_epsilon")}


def _facts(ledger: Ledger, card: dict[str, Any], rows: list[dict[str, Any]], bundle_digest: str,
           ledger_sha256: str, two_sided: dict[str, Any] | None) -> dict[str, Any]:
    """The DP Deployment Facts statement: OpenDP registry tiers 1–3 as field groups (docs/evidence.md)."""
    noise = ledger.noise
    return {
        "schema": "privfed-dp-deployment-facts/1",
        "follows": {"registry": "OpenDP DP Deployments Registry, transparency tiers 1-3",
                    "url": REGISTRY_TIERS_URL,
                    "note": "no published JSON schema of the registry was found; the field groups follow the tiers' "
                            "published descriptions, the field names are privfed's"},
        "tier1": {
            "curator": None,
            "intended_use": card.get("intended_use"),
            "data_product": ledger.description or "a model trained by a privfed pipeline",
            "publication_date": max((entry.recorded for entry in ledger.entries), default=None),
            "bundle_digest": bundle_digest,
            "ledger_sha256": ledger_sha256,
        },
        "tier2": {
            "flavor": "approximate (ε, δ)-differential privacy; trade-off curves (f-DP) and Gaussian-DP μ derived "
                      "from the same privacy loss distributions",
            "privacy_units": sorted({row["unit"] for row in rows if row["unit"]}),
            "privacy_loss": [{key: row[key] for key in ("observer", "unit", "epsilon", "delta", "gdp_mu",
                                                        "true_positive_rates", "tradeoff_basis")} for row in rows],
            "deployment_model": "federated: parties train locally; a coordinator aggregates (central DP against the "
                                "coordinator where the parties add the noise, against the public otherwise)",
            "observers": sorted({row["observer"] for row in rows}),
        },
        "tier3": {
            "neighbouring_relations": {f"{row['observer']}/{row['unit']}": row["relation"] for row in rows},
            "unprotected_quantities": sorted({text for row in rows for text in row["uncovered"]}),
            "assumptions": sorted({text for row in rows for text in row["assumptions"]}),
            "accounting": {
                "composition": "sequential composition of every release a party's data touches, per unit and "
                               "observer; the smallest valid of the RDP, PLD and pure-DP bounds",
                "post_processing": "the released model and predictions are post-processing of the accounted "
                                   "releases (or of the DP-SGD training, where that bound is reported)",
                "per_entry": "events.json",
            },
            "implementation": {"library": "privfed", "accountant": "dp-accounting (Google)",
                               "noise": noise if noise is not None else "not recorded (ledger before schema 3)"},
            "empirical_audit": two_sided,
        },
    }


def _plot(rows: list[dict[str, Any]], reports: Sequence[PrivacyReport], path: Path) -> bool:
    """The trade-off curves as a PNG; False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rates = np.concatenate([[0.0], np.logspace(-4, 0, 200)])
    figure, axis = plt.subplots(figsize=(5.5, 5))
    axis.plot(rates, rates, color="grey", linestyle=":", label="random guessing")
    for row, report in zip(rows, reports):
        axis.plot(rates, report.tradeoff(rates), linestyle="-" if row["observer"] == "public" else "--",
                  label=f"{row['observer']}, {row['unit']} (ε = {round_up(report.epsilon)})")
    axis.set_xscale("symlog", linthresh=1e-3)
    axis.set_xlabel("false-positive rate of the attack")
    axis.set_ylabel("largest true-positive rate any attack reaches")
    axis.set_title("Membership attacks: the best any attacker can do")
    axis.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True


def _markdown(rows: list[dict[str, Any]], entries: list[dict[str, Any]], facts: dict[str, Any],
              empirical: dict[str, Any] | None, two_sided: dict[str, Any] | None, plotted: bool,
              rates: np.ndarray, signed: bool) -> str:
    """The human-readable report (docs/evidence.md explains each section)."""
    def figure(value: Any) -> str:
        return "∞" if value in ("inf", math.inf) else ("—" if value is None else round_up(float(value)))

    lines = ["# Privacy evidence", "",
             f"Data product: {facts['tier1']['data_product']}. Bundle digest `{facts['tier1']['bundle_digest']}`, "
             f"ledger sha256 `{facts['tier1']['ledger_sha256']}`.", "",
             "Check this folder without privfed: `pip install dp-accounting model-signing`, then `python verify.py` "
             "inside it (exit 0 when every signature and every recomputable ε matches).", "",
             f"Pack signature: {'OpenSSF model signing, pack.sig (key publisher.pub)' if signed else 'unsigned'}.",
             "", "## 1. The guarantee, per observer and unit", "",
             "| observer | unit | ε | δ | GDP μ | " + " | ".join(f"TPR at FPR {r:g}" for r in rates) + " | basis |",
             "|---|---|---|---|---|" + "---|" * len(rates) + "---|"]
    for row in rows:
        tprs = " | ".join(f"{value:.4f}" for value in row["true_positive_rates"].values())
        mu = "—" if row["gdp_mu"] is None else f"{row['gdp_mu']:.4f}"
        lines.append(f"| {row['observer']} | {row['unit']} | {figure(row['epsilon'])} | {row['delta']:g} | {mu} | "
                     f"{tprs} | {row['tradeoff_basis']} |")
    lines += ["", "Each row in full:", ""] + [f"- {row['summary']}" for row in rows]
    lines += ["", "## 2. What an attacker can do (trade-off curve)", "",
              "TPR at FPR α: the largest true-positive rate any attack telling whether one unit's data was used "
              "reaches while wrongly accusing at most a fraction α of non-members (an upper bound, from the privacy "
              "loss distribution where the basis says `pld`, from the RDP curve where it says `rdp`). Random "
              "guessing reaches TPR = α.", ""]
    lines.append("![trade-off curves](tradeoff.png)" if plotted else
                 "(matplotlib is not installed: the curve is the table above; `pip install 'privfed[reports]'`)")
    lines += ["", "## 3. Attack testing (empirical audit)", ""]
    if empirical is None:
        lines.append("No empirical audit ran for this bundle (`privfed audit --empirical CONFIG.toml --json`).")
    else:
        lines.append(f"Design: {empirical.get('design')}; {empirical.get('num_canaries')} canaries; confidence "
                     f"{empirical.get('confidence')}; threat model: {empirical.get('threat_model')} "
                     f"(from {empirical['source']}).")
        if two_sided is not None:
            lines += ["", f"**ε ∈ [{figure(two_sided['lower'])}, {figure(two_sided['upper'])}]** for the "
                          f"{two_sided['unit']} against the public at δ = {two_sided['delta']:g}: the empirical lower "
                          "bound (what the audit proved at least leaks) and the accounted upper bound."]
    lines += ["", "## 4. Per-entry recomputation", "",
              "| entry | unit | release | ε (data-independent) | method | recomputable |", "|---|---|---|---|---|---|"]
    for row in entries:
        how = "yes" if row["recomputable"] else f"no: {row['reason']}"
        lines.append(f"| {row['entry']} | {row['unit'] or '—'} | {row['description']} | {figure(row['epsilon'])} | "
                     f"{row['method'] or '—'} | {how} |")
    lines += ["", "## 5. Files", "",
              "`deployment_facts.json` (the statement, OpenDP registry tiers), `events.json` (dp-accounting events), "
              "`profiles.json` (δ(ε)), `audit.json` (privfed audit), `ledger.json`, `verify.py`.", ""]
    return "\n".join(lines)


def _html(markdown: str) -> str:
    """The Markdown report as a self-contained HTML page (tables and headings rendered; the rest as paragraphs)."""
    out = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>Privacy evidence</title>"
           "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}td,th{border:1px solid #ccc;"
           "padding:2px 6px}table{border-collapse:collapse}</style></head><body>"]
    in_table = False
    for line in markdown.splitlines():
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            if all(set(cell) <= {"-"} for cell in cells):
                continue
            if not in_table:
                out.append("<table>")
                in_table = True
            out.append("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells) + "</tr>")
            continue
        if in_table:
            out.append("</table>")
            in_table = False
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level}>{html.escape(line.lstrip('#').strip())}</h{level}>")
        elif line.startswith("!["):
            out.append("<img src='tradeoff.png' alt='trade-off curves'>")
        elif line.startswith("- "):
            out.append(f"<p>• {html.escape(line[2:])}</p>")
        elif line:
            out.append(f"<p>{html.escape(line)}</p>")
    if in_table:
        out.append("</table>")
    return "\n".join(out + ["</body></html>"])


def _sign(folder: Path, key: Path) -> None:
    """Sign every file of ``folder`` but :data:`PACK_SIGNATURE` with OpenSSF model signing (elliptic-curve key)."""
    from cryptography.hazmat.primitives import serialization
    from model_signing import hashing, signing

    private = serialization.load_pem_private_key(key.read_bytes(), password=None)
    (folder / "publisher.pub").write_bytes(private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    hashing_config = hashing.Config().set_ignored_paths(paths=[PACK_SIGNATURE])
    signing.Config().use_elliptic_key_signer(private_key=key).set_hashing_config(hashing_config).sign(
        folder, folder / PACK_SIGNATURE)


def write_evidence_pack(bundle: str | os.PathLike[str], out: str | os.PathLike[str], *,
                        audit_json: str | os.PathLike[str] | None = None,
                        key: str | os.PathLike[str] | None = None,
                        false_positive_rates: Sequence[float] = DEFAULT_FALSE_POSITIVE_RATES,
                        overwrite: bool = False) -> Path:
    """Write the evidence pack of ``bundle`` to the folder ``out`` (see the module docstring).

    Parameters
    ----------
    bundle:
        A bundle folder (``privfed.save_bundle``); its manifest is verified first.
    out:
        The pack folder; refused when it exists, unless ``overwrite``.
    audit_json:
        The output of ``privfed audit --empirical CONFIG.toml --json``; default: the empirical audit the bundle's
        card records, if any.
    key:
        An elliptic-curve private key (PEM, ``privfed keygen --type ec``): sign the pack with OpenSSF model
        signing. Default: unsigned (``verify.py`` says so).
    false_positive_rates:
        The rates the report tabulates the best attack's true-positive rate at.

    Returns
    -------
    pathlib.Path
        The pack folder.
    """
    from privfed.audit import audit
    from privfed.bundle.load import bundle_ledger
    from privfed.bundle.manifest import read_bundle_files, verify_manifest

    rates = check_false_positive_rates(false_positive_rates)
    if rates.ndim != 1 or rates.size == 0:
        raise ValueError(f"false_positive_rates must be a non-empty sequence of numbers in [0, 1], got "
                         f"{false_positive_rates!r}")
    source, target = Path(bundle), Path(out)
    if not source.is_dir():
        raise ValueError(f"bundle {str(source)!r} is not a folder")
    key_path = None if key is None else Path(key)
    if key_path is not None and not key_path.is_file():
        raise ValueError(f"key file {str(key_path)!r} does not exist")
    if target.exists() and not overwrite:
        raise ValueError(f"out {str(target)!r} exists; pass overwrite=True (--overwrite) to replace an evidence pack")
    if target.exists() and not (target / "deployment_facts.json").is_file():
        raise ValueError(f"out {str(target)!r} is not an evidence pack (no deployment_facts.json); refusing to "
                         "replace it")
    files = read_bundle_files(source)
    digest = verify_manifest(files, where=str(source))
    ledger = bundle_ledger(files)
    card = json.loads(files["card.json"]) if "card.json" in files else {}
    delta = ledger.delta if ledger.delta is not None else 1e-5
    reports = ledger.observer_table(delta)
    rows = [_report_row(report, rates) for report in reports]
    entries = ledger_entry_epsilons(ledger, delta)
    empirical = _empirical_audit(card, audit_json)
    two_sided = _two_sided(rows, empirical)
    facts = _facts(ledger, card, rows, digest, hashlib.sha256(files["ledger.json"]).hexdigest(), two_sided)

    staging = target.with_name(f".{target.name}.staging-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        def dump(name: str, document: Any) -> None:
            (staging / name).write_text(json.dumps(document, indent=2, default=str) + "\n", encoding="utf-8")

        (staging / "ledger.json").write_bytes(files["ledger.json"])
        dump("deployment_facts.json", facts)
        dump("events.json", {"schema": PACK_SCHEMA, "delta": delta, "entries": entries, "reports": rows,
                             "ledger_events": _ledger_events(ledger)})
        dump("profiles.json", {"schema": PACK_SCHEMA, "profiles": [
            {"observer": row["observer"], "unit": row["unit"], "basis": row["tradeoff_basis"],
             **({} if report.privacy_profile() is None else {
                 "epsilons": report.privacy_profile().epsilons.tolist(),
                 "deltas": report.privacy_profile().deltas.tolist()})}
            for row, report in zip(rows, reports)]})
        dump("audit.json", json.loads(audit(source).to_json()))
        if empirical is not None:
            dump("empirical_audit.json", empirical)
        plotted = _plot(rows, reports, staging / "tradeoff.png")
        markdown = _markdown(rows, entries, facts, empirical, two_sided, plotted, rates, signed=key_path is not None)
        (staging / "README.md").write_text(markdown, encoding="utf-8")
        (staging / "report.html").write_text(_html(markdown), encoding="utf-8")
        shutil.copyfile(Path(__file__).with_name("verify_script.py"), staging / "verify.py")
        if key_path is not None:
            _sign(staging, key_path)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
