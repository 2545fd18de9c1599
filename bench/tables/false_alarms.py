"""docs/results.md, "False alarms of every empirical audit on correct code (issue 41)"."""

from __future__ import annotations

from bench.tables import table


def _false_alarms(documents: list) -> str:
    from bench.audit_false_alarms import table as render  # the script's renderer

    return render(documents)


def _raw_files() -> list[str]:
    from bench.audit_false_alarms import raw_files

    return raw_files()


table("audit-false-alarms", raw=_raw_files())(_false_alarms)
