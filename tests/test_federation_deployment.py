"""Deployment mode on 127.0.0.1: a SuperLink, three SuperNodes (one data file each) and ``flwr run``;
and ``flwr run <app> local-simulation``.

The processes are started and stopped by :mod:`flower_sites` (free ports, ``--insecure``, every wait
bounded). About two minutes on two shared cores: Flower starts a ClientApp process per message.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import shutil
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import digits_federation
from flower_sites import APP, checkout_env, free_ports, localhost_federation, stop, write_sites
from privfed.pipelines.fedkt.estimator import FedKT
from sklearn.tree import DecisionTreeClassifier
from threadpoolctl import threadpool_limits

import privfed

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("flwr") is None or shutil.which("flower-superlink") is None,
        reason="flwr is not installed: pip install 'privfed[federation]'",
    ),
]


def assert_same_analyses(ledger, local) -> None:
    """The same releases with the same recorded analyses (ε is ∞ for both: a seeded run records its noise seed);
    the evidence commitments differ, each salted afresh."""
    def analyses(entries):
        return [(e.kind, {unit: dataclasses.replace(analysis, evidence_sha256=None)
                          for unit, analysis in e.analyses.items()}) for e in entries]

    assert analyses(ledger.entries) == analyses(local.entries)


@pytest.fixture
def digits_sites():
    return digits_federation(3)


def test_three_supernodes_on_localhost_reproduce_fit_and_a_killed_one_stops_the_run(tmp_path, digits_sites) -> None:
    parties, public, (X_test, _) = digits_sites
    with localhost_federation(tmp_path, parties, public, OMP_NUM_THREADS="1") as federation:
        def flwr_run(bundle: str, timeout: float, extra: str = "") -> str:
            return federation.flwr_run(
                f'output-bundle="{tmp_path / bundle}" timeout={timeout} n-teachers=3 query-fraction=0.5 gamma=0.5 '
                f'random-state=7 noise-seed=11 {extra}', timeout=timeout + 150)

        output = flwr_run("bundle", timeout=120)
        assert (tmp_path / "bundle").is_dir(), output[-3000:] + federation.node_logs()
        model, ledger = privfed.load_bundle(tmp_path / "bundle")
        local = FedKT(DecisionTreeClassifier(max_depth=8), n_teachers=3, privacy="L1", gamma=0.5, query_fraction=0.5,
                      random_state=7, noise_seed=11).fit(parties, public)
        np.testing.assert_array_equal(model.predict(X_test), local.predict(X_test))
        assert_same_analyses(ledger, local.ledger_)  # every ε is ∞ (the noise seed is recorded): compare the entries

        # Selective-FD on the same SuperNodes: each party's state lives in its context between the messages.
        from privfed.pipelines.models.torch_models import TorchMLP
        from privfed.pipelines.selective_fd.estimator import SelectiveFD

        output = flwr_run("fd-bundle", timeout=120, extra=(
            'algorithm="selective-fd" local-model="privfed.pipelines.models.torch_models.TorchMLP" '
            "local-model-params='{\"hidden\": [16], \"batch_size\": 32}' rounds=2 local-steps=2 distill-steps=4 "
            "proxy-batch=80 n-auxiliary=60 max-known=60 tau-server=1.5"))
        assert (tmp_path / "fd-bundle").is_dir(), output[-3000:] + federation.node_logs()
        model, ledger = privfed.load_bundle(tmp_path / "fd-bundle")
        local = SelectiveFD(TorchMLP(hidden=(16,), batch_size=32), rounds=2, local_steps=2, distill_steps=4,
                            proxy_batch=80, n_auxiliary=60, max_known=60, tau_server=1.5, random_state=7,
                            noise_seed=11)
        with threadpool_limits(1):
            local.fit(parties, public)
        np.testing.assert_array_equal(model.predict(X_test), local.predict(X_test))
        assert [e.description for e in ledger.entries] == [e.description for e in local.ledger_.entries]

        stop(federation.nodes[2])  # a hospital goes offline: the server waits `timeout` seconds, stops, writes nothing
        output = flwr_run("bundle-after-kill", timeout=20)
        assert not (tmp_path / "bundle-after-kill").exists()
        assert "did not reply" in output or "SuperNodes connected" in output, output[-2000:]


def local_superlinks(flwr_home: Path) -> list[int]:
    """Process ids of the SuperLinks that ``flwr run`` started for this test (their log file is in ``flwr_home``)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if entry.name.isdigit() and any(b"flower-superlink" in part for part in command) and any(
                str(flwr_home).encode() in part for part in command):
            found.append(int(entry.name))
    return found


def test_flwr_run_local_simulation_writes_the_bundle_of_fit(tmp_path, digits_sites) -> None:
    """``flwr run <app> local-simulation``, as docs/federation.md shows it: FedKT L1 on digits, three SuperNodes.

    ``flwr run`` starts a managed local SuperLink (simulation runtime, Ray) in the background: on free
    ports (Flower's ``FLWR_LOCAL_*_PORT`` variables) under a temporary ``FLWR_HOME``, and stopped here.
    """
    folder, (parties, public, (X_test, _)) = tmp_path, digits_sites
    write_sites(folder, parties, public)
    home = folder / "flwr-home"
    home.mkdir()
    (home / "config.toml").write_text(
        '[superlink]\ndefault = "local-simulation"\n\n[superlink.local-simulation]\naddress = ":local-in-memory:"\n'
    )
    http_port, control_port = free_ports(2)
    env = checkout_env(home, FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(http_port),
                       FLWR_LOCAL_CONTROL_API_PORT=str(control_port))
    overrides = (f'public-path="{folder / "public.npz"}" output-bundle="{folder / "bundle"}" timeout=60 '
                 f'data-paths="{",".join(str(folder / f"site-{i}.npz") for i in range(3))}" '
                 'n-teachers=3 query-fraction=0.5 privacy="L1" gamma=0.5 random-state=7 noise-seed=11')
    try:
        done = subprocess.run(
            ["flwr", "run", str(APP), "local-simulation", "--stream", "--federation-config", "num-supernodes=3",
             "--run-config", overrides], cwd=folder, env=env, capture_output=True, text=True, timeout=150,
        )
    finally:
        for pid in local_superlinks(home):
            os.killpg(pid, signal.SIGTERM)
    assert (folder / "bundle").is_dir(), (done.stdout + done.stderr)[-3000:]
    model, ledger = privfed.load_bundle(folder / "bundle")
    local = FedKT(DecisionTreeClassifier(max_depth=8), n_teachers=3, privacy="L1", gamma=0.5, query_fraction=0.5,
                  random_state=7, noise_seed=11).fit(parties, public)
    np.testing.assert_array_equal(model.predict(X_test), local.predict(X_test))
    assert [e.description for e in ledger.entries] == [e.description for e in local.ledger_.entries]
    assert_same_analyses(ledger, local.ledger_)


def test_secaggplus_on_localhost_with_a_supernode_dropping_inside_it(tmp_path, digits_sites) -> None:
    """FedKT with secure aggregation on three SuperNodes; SuperNode 2 is stopped inside SecAgg+.

    SecAgg+'s threshold is 2 of 3: the two other parties' sum is recovered, the bundle is written, and its ledger
    accounts the realised variance σ²·2/3 — the same ledger and model as ``fit`` with parties 0 and 1's sum.
    """
    import re
    import time

    import privfed.pipelines.fedkt.estimator as fedkt_module
    from privfed.pipelines.fedkt.secure import FedKTVoteSum

    parties, public, (X_test, _) = digits_sites
    settings = dict(n_teachers=3, query_fraction=0.5, privacy="L1", aggregator="skellam", secure_aggregation=True,
                    sigma=4.0, random_state=7, noise_seed=11)
    original = fedkt_module.secure_sum

    def without_party_2(tasks, sent, names, *, max_bytes, n_parties=None):
        total = original(tasks[:2], sent[:2], names[:2], max_bytes=max_bytes, n_parties=n_parties)
        return FedKTVoteSum(total.vote_sum, n_parties=3, n_contributors=2)

    fedkt_module.secure_sum = without_party_2
    try:
        local = FedKT(DecisionTreeClassifier(max_depth=8), **settings).fit(parties, public)
    finally:
        fedkt_module.secure_sum = original
    with localhost_federation(tmp_path, parties, public, OMP_NUM_THREADS="1") as federation:
        overrides = (f'output-bundle="{tmp_path / "bundle"}" timeout=40 n-teachers=3 query-fraction=0.5 '
                     'aggregator="skellam" secure-aggregation=true sigma=4.0 gamma=0 random-state=7 noise-seed=11')
        with (tmp_path / "flwr-run.log").open("w") as out:
            run = subprocess.Popen(federation.run_command(overrides), cwd=tmp_path, env=federation.env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        log = tmp_path / "supernode-2.log"
        deadline = time.monotonic() + 240
        # SecAgg+'s third message (the masked-vectors stage) reaches SuperNode 2: it goes away before answering,
        # with its noise share. (Flower 1.41 cannot lose a node in the two stages before: see test_federation_secure.)
        received = re.compile(r"\[RUN \d+, ROUND 1\][^\n]*\n[^\n]*Receiving: train message")
        while len(received.findall(log.read_text(errors="replace"))) < 3:
            assert time.monotonic() < deadline and run.poll() is None, federation.node_logs()
            time.sleep(0.05)
        stop(federation.nodes[2])
        try:
            run.wait(timeout=240)
        finally:
            stop(run)
        output = (tmp_path / "flwr-run.log").read_text(errors="replace")
        assert (tmp_path / "bundle").is_dir(), output[-3000:] + federation.node_logs()
    model, ledger = privfed.load_bundle(tmp_path / "bundle")
    np.testing.assert_array_equal(model.predict(X_test), local.predict(X_test))
    assert "sum of 2 of 3 parties" in [e for e in ledger.entries if e.kind == "release"][-1].note
    assert_same_analyses(ledger, local.ledger_)


def test_fedkd_secaggplus_on_localhost_reproduces_fit(tmp_path, digits_sites) -> None:
    """FedKD with distributed Skellam noise on three SuperNodes: the parties' noisy logit levels go only through
    Flower's SecAgg+; the bundle's model and ledger are those of ``fit``."""
    from privfed.pipelines.fedkd.estimator import FedKD
    from sklearn.linear_model import LogisticRegression

    parties, public, (X_test, _) = digits_sites
    local = FedKD(LogisticRegression(max_iter=300), DecisionTreeClassifier(max_depth=8), gamma=None,
                  aggregator="skellam", secure_aggregation=True, sigma=12.0, clip=4.0, quantization_scale=2,
                  classes=list(range(10)), random_state=7, noise_seed=11).fit(parties, public)
    with localhost_federation(tmp_path, parties, public, OMP_NUM_THREADS="1") as federation:
        output = federation.flwr_run(
            f'output-bundle="{tmp_path / "bundle"}" timeout=120 algorithm="fedkd" aggregator="skellam" '
            'secure-aggregation=true sigma=12.0 gamma=0 clip=4.0 quantization-scale=2 '
            'classes="[0,1,2,3,4,5,6,7,8,9]" random-state=7 noise-seed=11', timeout=270)
        assert (tmp_path / "bundle").is_dir(), output[-3000:] + federation.node_logs()
    model, ledger = privfed.load_bundle(tmp_path / "bundle")
    np.testing.assert_array_equal(model.predict(X_test), local.predict(X_test))
    assert [e.description for e in ledger.entries] == [e.description for e in local.ledger_.entries]
    assert_same_analyses(ledger, local.ledger_)
