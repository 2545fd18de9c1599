"""docs/results.md, "DP-SGD local models (issue 15)": the speed of Opacus against plain torch and the
reproductions of FedKD, PrivateKT and Selective-FD with DP-SGD local models."""

from __future__ import annotations

import statistics
from typing import Any

from privfed.accounting.report import round_up

from bench.tables import table


def speed_markdown(document: dict[str, Any]) -> str:
    """``bench/dpsgd.py``'s timings: median seconds per epoch of each side (every run), test accuracy, the ratio."""
    settings, n = document["settings"], document["n_examples"]
    steps = n // 64
    names = {"plain": "plain torch",
             "opacus": f"Opacus DP-SGD (σ = 1.0, C = 1.0, q = 64/{n:,}, ⌊1/q⌋ = {steps} steps per epoch)"}
    lines = [f"| training | seconds per epoch (median of {settings['repeats']}; runs, the first includes warm-up) "
             f"| test accuracy after {settings['epochs']} epochs |", "|---|---|---|"]
    for side, name in names.items():
        runs = document["seconds"][side]
        lines.append(f"| {name} | {statistics.median(runs):.2f} ({', '.join(f'{value:.2f}' for value in runs)}) | "
                     f"{document['accuracy'][side]:.4f} |")
    ratio = document["median"]["opacus"] / document["median"]["plain"]
    return "\n".join(lines) + f"\n\nOpacus / plain, medians: ×{ratio:.2f}."


def setting(r: dict) -> str:
    """The run's length, as the table states it."""
    s = r["settings"]
    if r["pipeline"] == "fedkd":
        return f"{s['fedkd_local_epochs']} local epochs"
    if r["pipeline"] == "privatekt":
        n = s["privatekt_local_epochs"]
        dp_lr = f", DP-SGD lr {s['privatekt_dp_lr']:g}" if s.get("privatekt_dp_lr") is not None else ""
        fraction = s.get("privatekt_client_fraction", 0.5)
        clients = "" if fraction == 0.5 else (", every client every round" if fraction == 1 else
                                              f", a share {fraction:g} of the clients per round")
        return f"{s['privatekt_rounds']} rounds, {n} local epoch{'s' * (n != 1)}{dp_lr}{clients}"
    return f"{s['sfd_rounds']} rounds" + (f", {r['distill_steps']} distillation steps" if "distill_steps" in r else "")


def table_markdown(runs: list[dict]) -> str:
    """The runs as a markdown table, then PrivateKT's accuracy per round where recorded."""
    lines = ["| pipeline | run | DP-SGD target ε | σ | test accuracy | example-level guarantee (bound) | other bound | "
             "party-level ε (seed mechanism) | not covered by DP-SGD | time | load (1/5/15 min, at the end) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        other = r["other_bound"]
        target = "none (plain training)" if r["target_epsilon"] is None else f"{r['target_epsilon']:g}"
        sigma = "—" if r["noise_multiplier"] is None else f"{r['noise_multiplier']:.3f}"
        other_text = "—" if other is None else f"{round_up(other['epsilon'])} ({other['source']})"
        uncovered = "; ".join(n.split(": ", 1)[1][:60] + "…" for n in r["not_covered_by_dpsgd"]) or "—"
        guarantee = f"{round_up(r['epsilon_example'])} ({r['source']})"
        load = "—" if "load_average" not in r else " / ".join(f"{v:.1f}" for v in r["load_average"])
        lines.append(f"| {r['pipeline']} | {setting(r)} | {target} | {sigma} | {r['test_accuracy']:.4f} | "
                     f"{guarantee} | {other_text} | {round_up(r['epsilon_party'])} | {uncovered} | "
                     f"{r['seconds']:.0f} s | {load} |")
    curves = [r for r in runs if "accuracy_per_round" in r]
    if curves:
        rounds = max(len(r["accuracy_per_round"]) for r in curves)
        marks = sorted({1, *range(5, rounds + 1, 5), rounds})
        lines += ["", "| PrivateKT run | " + " | ".join(f"round {m}" for m in marks) + " | rounds joined (min–max) |",
                  "|---|" + "---|" * (len(marks) + 1)]
        for r in curves:
            target = "plain training" if r["target_epsilon"] is None else f"DP-SGD ε ≤ {r['target_epsilon']:g}"
            acc = r["accuracy_per_round"]
            cells = " | ".join(f"{acc[m - 1]:.3f}" if m <= len(acc) else "—" for m in marks)
            lines.append(f"| {target} ({setting(r)}) | {cells} | {min(r['rounds_joined'])}–{max(r['rounds_joined'])} |")
    return "\n".join(lines)



table("dpsgd-speed", raw=["bench/results/dpsgd_speed.json"])(lambda documents: speed_markdown(documents[0]))
table("dpsgd-reproductions", raw=["docs/results-dpsgd.json"])(lambda documents: table_markdown(documents[0]["runs"]))


def _rate(value: float) -> str:
    """Adam's learning rate as the page writes it: 10⁻³, 5 × 10⁻³, 2 × 10⁻²."""
    mantissa, exponent = f"{value:.0e}".split("e")
    power = "10" + str(int(exponent)).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return power if mantissa == "1" else f"{mantissa} × {power}"


def client_check_markdown(document: dict[str, Any]) -> str:
    """The one-client check (party 0, a fresh network, the reproduction's σ): test accuracy per σ and rate."""
    epochs = document["provenance"]["settings"]["local_epochs"]
    lines = [f"| client training (party 0, {epochs} epochs) | σ | Adam lr | test accuracy |", "|---|---|---|---|"]
    for row in document["rows"]:
        training = "plain" if row["target_epsilon"] is None else f"DP-SGD, σ for ε ≤ {row['target_epsilon']:g}"
        sigma = "—" if row["noise_multiplier"] is None else f"{row['noise_multiplier']:.3f}"
        lines.append(f"| {training} | {sigma} | {_rate(row['lr'])} | {row['test_accuracy']:.4f} |")
    return "\n".join(lines)


table("dpsgd-client-check", raw=["bench/results/dpsgd_client_check.json"])(
    lambda documents: client_check_markdown(documents[0]))
