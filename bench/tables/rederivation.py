"""docs/results.md, "Re-derivation of printed figures (issue 33)"."""

from __future__ import annotations

from bench import rederivation
from bench.tables import table

table("rederivation", raw=["bench/results/rederivation_issue33.json"])(
    lambda documents: rederivation.render(documents[0]))
