"""docs/results.md, "Mutation testing of the noise code (issue 41)"."""

from __future__ import annotations

from bench.tables import table


def _mutations(documents: list) -> str:
    from bench.mutation_testing import table as render  # the script's renderer (docs/audit.md prints it too)

    return render(documents)


table("mutation-testing", raw=["bench/results/mutation_testing_correct.json",
                               "bench/results/mutation_testing.json"])(_mutations)
