"""PrivateKT in deployment mode on 127.0.0.1: a SuperNode process is killed mid-run and the run goes on.

SuperLink, three SuperNodes and ``flwr run`` started and stopped by :mod:`flower_sites`, as in
``test_federation_deployment.py``. Party 2's
SuperNode is killed once round 1 has started (so after it answered the schema step); with
``random-state=6`` the server samples party 2 in round 2 only (rounds: {0, 1}, {0, 2}, {0, 1},
{0, 1}: the clients follow ``random_state`` alone), so it is dropped there and the run completes with a bundle
whose ledger and model card name the dropout.
"""

from __future__ import annotations

import importlib.util
import shutil

import pytest
from conftest import digits_federation
from flower_sites import localhost_federation, stop, wait_for_text

import privfed

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("flwr") is None or shutil.which("flower-superlink") is None,
        reason="flwr is not installed: pip install 'privfed[federation]'",
    ),
]


def test_a_killed_supernode_is_dropped_from_its_round_and_the_run_completes(tmp_path) -> None:
    parties, public, _ = digits_federation(3)
    with localhost_federation(tmp_path, parties, public) as federation:
        overrides = (f'algorithm="privatekt" output-bundle="{tmp_path / "bundle"}" '
                     'model="sklearn.tree.DecisionTreeClassifier" model-params=\'{"max_depth": 6}\' rounds=4 '
                     'client-fraction=0.67 queries-per-round=10 self-training-size=30 buffer-rounds=4 '
                     'epsilon-per-round=20.0 random-state=6 timeout=120.0')
        run = federation.start(*federation.run_command(overrides), log="flwr-run.log")
        # Party 0 receiving round 1's task means every party has answered the schema step.
        wait_for_text(tmp_path / "supernode-0.log", "Receiving: train message", 300)
        stop(federation.nodes[2])  # hospital 2 goes offline after describing its data, before round 2, which samples it
        run.wait(timeout=300)
        output = (tmp_path / "flwr-run.log").read_text(errors="replace")
        assert (tmp_path / "bundle").is_dir(), output[-3000:] + federation.node_logs()
        _, ledger = privfed.load_bundle(tmp_path / "bundle")
        note = [e for e in ledger.entries if e.kind == "release"][-1].note
        assert "DROPOUTS (1): party 2 (node" in note and "in round 2 (train step)" in note, note
        assert "DROPOUTS (1)" in (tmp_path / "bundle" / "MODEL_CARD.md").read_text()
