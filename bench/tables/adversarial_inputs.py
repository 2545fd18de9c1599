"""docs/results.md, "Adversarial inputs (issue 45)": the table of ``bench/adversarial_inputs.py``'s raw results."""

from __future__ import annotations

from bench.tables import table

_OUTCOMES = ("clear", "accepted", "hang", "memory", "traceback")


def markdown(document: dict) -> str:
    """One row per category: outcomes, worst times, peak memory and the largest input."""
    records = document["records"]
    lines = ["| category | probes | clear / accepted / hang / memory / traceback | worst work s (after imports) | "
             "worst wall s (fresh process) | worst peak RSS MB | worst RSS added by the work MB | largest input "
             "bytes |", "|---|---|---|---|---|---|---|---|"]
    categories = list(dict.fromkeys(record["category"] for record in records))
    for category in categories:
        rows = [record for record in records if record["category"] == category]
        counts = " / ".join(str(sum(r["outcome"] == outcome for r in rows)) for outcome in _OUTCOMES)
        work = max(r.get("work_seconds", float("nan")) for r in rows)
        wall = max(r["wall_seconds"] for r in rows)
        rss = max(r.get("maxrss_mb", 0.0) for r in rows)
        added = max(r.get("work_mb", 0.0) for r in rows)
        largest = max(r["input_bytes"] for r in rows)
        lines.append(f"| {category} | {len(rows)} | {counts} | {work:.3f} | {wall:.1f} | {rss:.0f} | {added:.1f} | "
                     f"{largest} |")
    lines += ["", "Probes: " + "; ".join(f"{r['probe']} ({r['outcome']})" for r in records) + "."]
    return "\n".join(lines)


table("adversarial-inputs", raw=["bench/results/adversarial_inputs.json"])(lambda documents: markdown(documents[0]))
