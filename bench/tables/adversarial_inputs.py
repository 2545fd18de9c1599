"""docs/results.md, "Adversarial inputs (issue 45)": the table of ``bench/adversarial_inputs.py``'s raw results."""

from __future__ import annotations

from bench.tables import table

#: Issue 45's target for any input of at most 1 MB, in a fresh process.
TARGET_SECONDS = 2.0
TARGET_MB = 200.0


def markdown(document: dict) -> str:
    """One row per probe: outcome, fresh-process wall and CPU seconds, peak memory, and whether it meets the target."""
    records = document["records"]
    lines = ["| category | probe | outcome | input bytes | wall s (fresh process) | CPU s (fresh process) | "
             "probe s (call → answer) | peak RSS MB | ≤ 2 CPU s and ≤ 200 MB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        cpu, rss = r.get("cpu_seconds", float("nan")), r.get("maxrss_mb", float("nan"))
        met = "yes" if cpu <= TARGET_SECONDS and rss <= TARGET_MB else "**no**"
        lines.append(f"| {r['category']} | {r['probe']} | {r['outcome']} | {r['input_bytes']} | "
                     f"{r['wall_seconds']:.1f} | {cpu:.2f} | {r.get('probe_seconds', float('nan')):.2f} | {rss:.0f} | "
                     f"{met} |")
    within = sum(r.get("cpu_seconds", float("inf")) <= TARGET_SECONDS and r.get("maxrss_mb", float("inf")) <= TARGET_MB
                 for r in records)
    lines += ["", f"{within} of {len(records)} probes within ≤ {TARGET_SECONDS:g} CPU s and ≤ {TARGET_MB:g} MB; "
              f"outcomes: {sum(r['outcome'] == 'clear' for r in records)} clear of {len(records)}."]
    return "\n".join(lines)


table("adversarial-inputs", raw=["bench/results/adversarial_inputs.json"])(lambda documents: markdown(documents[0]))
