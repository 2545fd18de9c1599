"""docs/federation.md's "Your silo's budget" section, run as written: ``/data`` → a temporary folder, and the
SuperNode line's node config given to the in-process grid of tests/test_federation.py."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest
from sklearn.tree import DecisionTreeClassifier

import privfed
from privfed.cli import main

pytestmark = pytest.mark.filterwarnings("ignore:.*(NEAR CHANCE|little to learn):UserWarning")

DOC = Path(__file__).resolve().parents[1] / "docs" / "federation.md"


def blocks() -> list[tuple[str, str]]:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Your silo's budget"):text.index("## Run mode 1: simulation")]
    return re.findall(r"^```(\w+)\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)


def privfed_command(line: str, data: Path) -> tuple[int, str]:
    """The exit code and output of a ``privfed`` command line (the CLI's entry point, in this process)."""
    arguments = line.replace("/data", str(data)).split()
    assert arguments[0] == "privfed"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(arguments[1:])
    return code, printed.getvalue()


def node_config(block: str) -> dict:
    """The SuperNode line's ``--node-config`` as Flower parses it (key=value, TOML values)."""
    (config,) = re.findall(r"--node-config '([^']*)'", block)
    return {key: json.loads(value) for key, value in re.findall(r'(\S+?)=("[^"]*"|\S+)', config)}


def test_the_silo_budget_walkthrough_runs_as_written(federation, task_identity, tmp_path) -> None:
    (bash, supernode), (python, script), (_, show) = blocks()[0], blocks()[1], blocks()[2]
    assert (bash, python) == ("bash", "python")
    init, *_ = supernode.splitlines()
    assert privfed_command(init, tmp_path)[0] == 0
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(script.replace("/data", str(tmp_path)), str(DOC), "exec"), {})
    output = printed.getvalue()
    assert "party 1 refused: fedkt: refused: charging study 'icu-2027'" in output
    assert "party 0" not in output and "party 2" not in output
    assert "hospital A has spent" in output
    assert privfed.SiloBudget.open(tmp_path / "budget-b.jsonl").charges == ()

    # Hospital A's SuperNode, with the node config the page gives it, over Flower's messages.
    pytest.importorskip("flwr")
    from test_federation import LocalGrid

    from privfed.federation.server_app import ServerJob, run_server

    config = node_config(supernode)
    assert config["party-index"] == 0 and config["study"] == "icu-2027"
    _, paths, public, _ = federation
    grid = LocalGrid(paths)
    (context,) = [c for c in grid.contexts.values() if c.node_config["party-index"] == 0]
    context.node_config.update({**config, "data-path": str(paths[0]),
                                "budget-path": config["budget-path"].replace("/data", str(tmp_path))})
    before = len(privfed.SiloBudget.open(tmp_path / "budget.jsonl").charges)
    model = privfed.FedKT(DecisionTreeClassifier(max_depth=4), n_partitions=1, n_teachers=2,
                          privacy="L2", gamma=0.1, local_query_fraction=0.05, query_fraction=0.3,
                          classes=list(range(10)), random_state=0)
    run_server(grid, ServerJob(model, public, num_supernodes=3, timeout=5))
    charges = privfed.SiloBudget.open(tmp_path / "budget.jsonl").charges
    assert len(charges) == before + 1 and charges[-1].study == "icu-2027"

    (line,) = show.splitlines()
    code, shown = privfed_command(line, tmp_path)
    assert code == 0 and "icu-2027" in shown
