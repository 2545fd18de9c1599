"""docs/results.md, "Mutation testing of the noise code (issue 41)"."""

from __future__ import annotations

from bench.tables import table


def _mutations(documents: list) -> str:
    from bench.mutation_testing import table as render  # the script's renderer (docs/audit.md prints it too)

    return render(documents)


def _raw_files() -> list[str]:
    from bench.mutation_testing import RAW_FILES

    return list(RAW_FILES)


table("mutation-testing", raw=_raw_files())(_mutations)
