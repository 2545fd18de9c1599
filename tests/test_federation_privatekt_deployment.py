"""PrivateKT in deployment mode on 127.0.0.1: a SuperNode process is killed mid-run and the run goes on.

SuperLink, three SuperNodes and ``flwr run`` as in ``test_federation_deployment.py`` (free ports,
``--insecure``, every wait bounded, every process this test started stopped at the end). Party 2's
SuperNode is killed once round 1 has started (so after it answered the schema step); with
``random-state=2`` the server samples party 2 in round 2 only (rounds: {0, 1}, {1, 2}, {0, 1},
{0, 1}), so it is dropped there and the run completes with a bundle whose ledger and model card
name the dropout.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import digits_federation
from test_federation_deployment import APP, free_port, stop, wait_for_port

import privfed

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("flwr") is None or shutil.which("flower-superlink") is None,
        reason="flwr is not installed: pip install 'privfed[federation]'",
    ),
]


def wait_for_text(path, text: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise TimeoutError(f"{path.name} does not mention {text!r} after {seconds} s")


def test_a_killed_supernode_is_dropped_from_its_round_and_the_run_completes(tmp_path) -> None:
    folder = tmp_path
    parties, public, _ = digits_federation(3)
    for index, (X, y) in enumerate(parties):
        np.savez(folder / f"site-{index}.npz", X=X, y=y)
    np.savez(folder / "public.npz", X=public)
    env = {**os.environ, "FLWR_HOME": str(folder / "flwr-home")}
    root = str(Path(privfed.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    link_port = free_port()
    (folder / "flwr-home").mkdir()
    (folder / "flwr-home" / "config.toml").write_text(
        '[superlink]\ndefault = "localhost"\n\n[superlink.localhost]\n'
        f'address = "127.0.0.1:{link_port}"\ninsecure = true\n'
    )
    processes: list[subprocess.Popen] = []

    def start(*command: str, log: str) -> subprocess.Popen:
        with (folder / log).open("w") as out:
            process = subprocess.Popen(command, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        processes.append(process)
        return process

    try:
        start("flower-superlink", "--insecure", "--disable-runtime-dependency-installation", "--port", str(link_port),
              "--database", ":flwr-in-memory:", log="superlink.log")
        wait_for_port(link_port, 60)
        nodes = [
            start("flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{link_port}", "--port", str(free_port()),
                  "--node-config", f'data-path="{folder / f"site-{index}.npz"}" party-index={index}',
                  log=f"supernode-{index}.log")
            for index in range(3)
        ]
        overrides = (f'algorithm="privatekt" public-path="{folder / "public.npz"}" output-bundle="{folder / "bundle"}" '
                     'model="sklearn.tree.DecisionTreeClassifier" model-params=\'{"max_depth": 6}\' rounds=4 '
                     'client-fraction=0.67 queries-per-round=10 self-training-size=30 buffer-rounds=4 '
                     'epsilon-per-round=20.0 random-state=2 timeout=120.0')
        run = start("flwr", "run", str(APP), "localhost", "--stream", "--run-config", overrides, log="flwr-run.log")
        # Party 0 receiving round 1's task means every party has answered the schema step.
        wait_for_text(folder / "supernode-0.log", "Receiving: train message", 300)
        stop(nodes[2])  # hospital 2 goes offline after describing its data, before round 2, which samples it
        run.wait(timeout=300)
        output = (folder / "flwr-run.log").read_text(errors="replace")
        assert (folder / "bundle").is_dir(), output[-3000:]
        _, ledger = privfed.load_bundle(folder / "bundle")
        note = ledger.entries[-1].note
        assert "DROPOUTS (1): party 2 (node" in note and "in round 2 (train step)" in note, note
        assert "DROPOUTS (1)" in (folder / "bundle" / "MODEL_CARD.md").read_text()
    finally:
        for process in reversed(processes):
            stop(process)
