"""docs/results.md, "What each observer learns, per pipeline": the pipeline × observer × unit ε of
``bench/observers.py``'s raw results, every ∞ with its reasons and the setting that covers each."""

from __future__ import annotations

from bench.tables import table

COLUMNS = ("coordinator/party", "coordinator/example", "public/party", "public/example")


def _reason(text: str) -> str:
    """The first clause of a ledger's uncovered-release text (up to its first ';' or '(')."""
    for stop in (";", " ("):
        text = text.split(stop)[0]
    return text.rstrip(" .,")


def markdown(document: dict) -> str:
    """One row per configuration; ∞ cells name their reasons by letter, listed below with their settings."""
    legend: dict[tuple[str, str], str] = {}
    lines = [f"ε at δ = {document['delta']:g} from each run's ledger (`ledger_.account(unit=, observer=)`).", "",
             "| pipeline | configuration | coordinator, party | coordinator, example | public, party | "
             "public, example | seconds |", "|---|---|---|---|---|---|---|"]
    for row in document["rows"]:
        cells = []
        for column in COLUMNS:
            cell = row["cells"][column]
            if cell["epsilon"] is not None:
                cells.append(f"{cell['epsilon']:.3g}")
                continue
            letters = []
            for reason, fix in zip(cell["reasons"], cell["fixes"]):
                key = (_reason(reason), fix)
                legend.setdefault(key, chr(ord("a") + len(legend)))
                letters.append(legend[key])
            cells.append(f"∞ ({', '.join(sorted(set(letters)))})")
        lines.append(f"| {row['pipeline']} | {row['configuration']} | {' | '.join(cells)} | {row['seconds']:.1f} |")
    lines += ["", "| | what is released without noise | the setting that covers it |", "|---|---|---|"]
    lines += [f"| {letter} | {reason} | {fix} |" for (reason, fix), letter in legend.items()]
    return "\n".join(lines)


table("observers", raw=["bench/results/observers.json"])(lambda documents: markdown(documents[0]))
