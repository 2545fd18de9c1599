"""What a Flower run tells the analyst at its end: one summary line the ServerApp prints, read back by the CLI.

The ServerApp runs on the server; the analyst's ``privfed federation run`` sees only the run's streamed
output. So the ServerApp prints, as its last words, one line ``privfed-summary: {json}`` (algorithm, the
parties that took part, those whose silo budgets refused (with the round and the reason), ε per unit — and per
observer where the installed ledger accounts observers —,
the test accuracy when a labelled test file is configured, the bundle's path) or, when the run fails, one
line ``privfed-failed: {json}`` (the error's class and message, which names the party and the step).
:func:`summary_lines` renders the summary for people. Importing this module imports nothing heavy.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["FAILURE_PREFIX", "SUMMARY_PREFIX", "WAITING_PREFIX", "failure_record", "run_summary", "summary_line",
           "summary_lines", "waiting_line"]

SUMMARY_PREFIX = "privfed-summary: "
FAILURE_PREFIX = "privfed-failed: "
#: A line the ServerApp prints while it waits for SuperNodes to connect; ``privfed federation run`` echoes it.
WAITING_PREFIX = "privfed-waiting: "


def waiting_line(connected: Sequence[int], count: int, waited: float, timeout: float | None) -> str:
    """Who is connected while the server waits for ``count`` SuperNodes, and how long it will wait."""
    nodes = ", ".join(f"node {node}" for node in connected)
    limit = (f"the run stops if they have not all connected {timeout:g} s after it started (the run-config key "
             "timeout: a smaller one gives up sooner; Ctrl-C stops the run now)" if timeout else
             "no timeout is set, so it waits until they connect or Ctrl-C (the run-config key timeout bounds the "
             "wait)")
    return (f"waiting for SuperNodes: {len(connected)} of {count} connected{f' ({nodes})' if nodes else ''}, "
            f"{count - len(connected)} missing after {waited:.0f} s; {limit}")


def _algorithm(model: Any) -> str:
    name = type(model).__name__
    variant = getattr(model, "privacy", None)
    return f"{name} {variant}" if isinstance(variant, str) and variant else name


def _epsilons(ledger: Any) -> dict[str, Any]:
    """ε at the ledger's δ per unit (tight analysis); per observer too where ``Ledger.account`` takes one."""
    if ledger is None or not ledger.units or ledger.delta is None:
        return {}
    parameters = inspect.signature(ledger.account).parameters
    observers: Sequence[str | None] = (None,)
    if "observer" in parameters:  # the observers of issue #31, where the installed ledger has them
        from privfed.accounting import observers as observer_module

        observers = tuple(observer_module.OBSERVERS)
    table: dict[str, Any] = {"delta": ledger.delta, "units": {}}
    for unit in ledger.units:
        for observer in observers:
            report = ledger.account(unit=unit) if observer is None else ledger.account(unit=unit, observer=observer)
            table["units"].setdefault(unit, {})[observer or "all"] = {
                "epsilon": report.epsilon if math.isfinite(report.epsilon) else "inf",
                "data_dependent": bool(report.epsilon_is_data_dependent),  # the figure, not the analysis
                "epsilon_data_independent": (report.epsilon_data_independent
                                             if math.isfinite(report.epsilon_data_independent) else "inf"),
            }
    return table


def run_summary(model: Any, *, parties: Sequence[str], bundle: str | None,
                metrics: Mapping[str, float] | None) -> dict[str, Any]:
    """The summary of a fitted run: JSON-ready (infinite ε written ``"inf"``)."""
    refused = [{"party": parties[r.party], "round": r.round, "reason": r.reason}
               for r in getattr(model, "refused_", [])]
    participation = getattr(model, "participation_", None)  # PrivateKT: a client that refused later took part
    absent = {r.party for r in getattr(model, "refused_", [])
              if participation is None or participation[r.party] == 0}
    return {"algorithm": _algorithm(model), "parties": [p for i, p in enumerate(parties) if i not in absent],
            "refused": refused, "epsilon": _epsilons(getattr(model, "ledger_", None)),
            "metrics": dict(metrics or {}), "bundle": bundle}


def failure_record(error: BaseException) -> dict[str, str]:
    """The failure line's content: the error's class and its message on one line."""
    return {"error": type(error).__name__, "message": " ".join(str(error).split())}


def _epsilon_text(value: Any) -> str:
    from privfed.accounting.report import round_up

    return "inf" if value == "inf" else round_up(float(value))


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """The summary for people: one fact per line, every ε rounded up."""
    from privfed.evaluation import accuracy_line

    lines = [f"algorithm: {summary['algorithm']}",
             f"parties: {len(summary['parties'])} took part ({', '.join(summary['parties'])})"]
    lines += [f"refused by its silo's budget: {r['party']} at round {r['round']}: {r['reason']}"
              for r in summary.get("refused", [])]
    table = summary.get("epsilon") or {}
    if not table:
        lines.append("epsilon: no release of private data is recorded (no privacy guarantee from privfed)")
    order = {name: index for index, name in enumerate(("all", "public", "coordinator"))}  # the public first
    for unit, by_observer in table.get("units", {}).items():
        for observer, row in sorted(by_observer.items(), key=lambda item: order.get(item[0], len(order))):
            seen_by = "" if observer == "all" else f", observer {observer}"
            independent = _epsilon_text(row["epsilon_data_independent"])
            dependence = f", DATA-DEPENDENT (data-independent epsilon = {independent})" if row["data_dependent"] else ""
            lines.append(f"epsilon ({unit}-level{seen_by}, delta = {table['delta']:g}): "
                         f"{_epsilon_text(row['epsilon'])}{dependence}")
    accuracy = accuracy_line(summary.get("metrics") or {})
    lines.append(accuracy or "test accuracy: not measured (set test-path to a labelled test file on the server)")
    lines.append(f"bundle: {summary['bundle']}" if summary.get("bundle") else "bundle: none (output-bundle is empty)")
    return lines


def summary_line(summary: Mapping[str, Any]) -> str:
    """The line the ServerApp prints."""
    return SUMMARY_PREFIX + json.dumps(summary, sort_keys=True)
