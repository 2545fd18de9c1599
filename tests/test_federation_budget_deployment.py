"""A silo's budget in deployment mode on 127.0.0.1: SuperLink, three SuperNode processes and ``flwr run``.

Hospital 1's SuperNode names a budget too small for the study (``budget-path`` in its node config): it refuses
before reading its data for the train step; the two others finish, the run's summary names the refusal, and the
bundle's card records it. (What crosses the wire from the refusing SuperNode is checked message by message in
tests/test_federation_budget.py: its reply is the refusal alone, no array.)
"""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest
from conftest import digits_federation
from flower_sites import localhost_federation

import privfed

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("flwr") is None or shutil.which("flower-superlink") is None,
        reason="flwr is not installed: pip install 'privfed[federation]'",
    ),
]


def test_an_over_budget_supernode_refuses_and_the_others_finish(tmp_path) -> None:
    parties, public, _ = digits_federation(3)
    budgets = [tmp_path / "budget-0.jsonl", tmp_path / "budget-1.jsonl"]
    privfed.SiloBudget(budgets[0], epsilon=1000.0, delta=1e-5)
    privfed.SiloBudget(budgets[1], epsilon=0.5, delta=1e-5)
    node_configs = {index: f'budget-path="{path}" study="icu-2027"' for index, path in enumerate(budgets)}
    with localhost_federation(tmp_path, parties, public, node_configs=node_configs, OMP_NUM_THREADS="1") as federation:
        output = federation.flwr_run(
            f'output-bundle="{tmp_path / "bundle"}" timeout=120 privacy="L2" n-partitions=1 n-teachers=2 gamma=0.5 '
            'query-fraction=0.3 local-query-fraction=0.1 random-state=7', timeout=300)
        assert (tmp_path / "bundle").is_dir(), output[-3000:] + federation.node_logs()
    (line,) = [line for line in output.splitlines() if line.startswith("privfed-summary: ")]
    summary = json.loads(line.removeprefix("privfed-summary: "))
    assert [r["party"].split(" (")[0] for r in summary["refused"]] == ["party 1"], summary
    assert len(summary["parties"]) == 2
    assert [c.study for c in privfed.SiloBudget.open(budgets[0]).charges] == ["icu-2027"]
    assert privfed.SiloBudget.open(budgets[1]).charges == ()
    card = json.loads((tmp_path / "bundle" / "card.json").read_text())
    assert [r["party"] for r in card["refused_silos"]] == [1]
