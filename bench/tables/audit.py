"""docs/results.md, "Auditing (issue 9)" and "Empirical one-run audits (issue 32)"."""

from __future__ import annotations

from typing import Any

from bench.tables import table


def claims_markdown(document: dict[str, Any]) -> str:
    """``bench/audit_claims.py``'s audits: per claims file the claim, privfed's recomputation (its own words) and
    the verdict with the names of the checks that warned or failed."""
    lines = ["| claims file (`privfed audit --claims FILE`) | claimed | privfed's recomputation | verdict | s |",
             "|---|---|---|---|---|"]
    for row in document["rows"]:
        checks = {check["name"]: check for check in row["checks"]}
        described = checks["claims file"]["detail"].split(": ")[1] if "claims file" in checks else row["file"]
        claim = row["claim"]
        claimed = ("none" if claim.get("epsilon") is None else
                   f"ε = {claim['epsilon']:g}{' per round' if claim.get('scope') == 'per_round' else ''}, "
                   f"{claim['unit']} level, δ = {claim['delta']:g}")
        flagged = {status: [check["name"] for check in row["checks"] if check["status"] == status]
                   for status in ("fail", "warn")}
        verdict = "FAIL" if flagged["fail"] else "PASS"
        for status, word in (("fail", "failed"), ("warn", "warnings")):
            if flagged[status]:
                verdict += f", {len(flagged[status])} {word} ({'; '.join(flagged[status])})"
        lines.append(f"| `{row['file'].rsplit('/', 1)[-1]}`: {described} | {claimed} | "
                     f"{checks['claimed ε']['detail']} | {verdict} | {row['seconds']:.2f} |")
    return "\n".join(lines)


def _empirical_audit(documents: list[Any]) -> str:
    from bench.empirical_audit import table as render  # the script's renderer (docs/audit.md prints it too)

    return render(documents[0]["rows"])


table("audit-claims", raw=["bench/results/audit_claims.json"])(lambda documents: claims_markdown(documents[0]))
table("audit-empirical-one-run", raw=["bench/results/empirical_audit.json"])(_empirical_audit)
table("audit-designs", raw=["bench/results/audit_designs.json", "bench/results/audit_designs_planted.json"])(
    lambda documents: __import__("bench.audit_designs", fromlist=["table"]).table(documents))
