"""``privfed federation run`` / ``local``: bad input (exit 2, nothing submitted), a failed run (exit 1, one line,
the traceback in the log file), Ctrl-C (exit 130, the run stopped), and ``local`` end to end (exit 0, summary)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import digits_federation
from flower_sites import checkout_env, localhost_federation, stop, write_sites

from privfed.cli import main

needs_flower = pytest.mark.skipif(
    importlib.util.find_spec("flwr") is None or shutil.which("flower-superlink") is None,
    reason="flwr is not installed: pip install 'privfed[federation]'",
)


@pytest.fixture
def flwr_home(tmp_path, monkeypatch):
    home = tmp_path / "flwr-home"
    home.mkdir()
    (home / "config.toml").write_text('[superlink]\ndefault = "hospitals"\n\n[superlink.hospitals]\n'
                                      'address = "127.0.0.1:1"\ninsecure = true\n')
    monkeypatch.setenv("FLWR_HOME", str(home))
    return home


@pytest.mark.parametrize(("content", "arguments", "message"), [
    ('gama = 1.0\noutput-bundle = "/tmp/b"\n', [], "unknown key 'gama'; did you mean 'gamma'?"),
    ('gamma = "high"\n', [], "gamma must be a number (like its default 0.1), got 'high'"),
    ('num-supernodes = 2.5\n', [], "num-supernodes must be an integer"),
    ('output-bundle = ""\n', [], "output-bundle is empty"),
    ('gamma = [1\n', [], "is not valid TOML"),
    ('gamma = 1\n', ["--connection", "hospital"], "--connection 'hospital' is not a [superlink.hospital] section of "),
])
def test_bad_input_exits_2_with_one_line_before_submitting(tmp_path, flwr_home, capsys, content, arguments,
                                                           message) -> None:
    config = tmp_path / "fedkt.toml"
    config.write_text(content)
    assert main(["federation", "run", str(config), *arguments]) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1, error
    assert not list(tmp_path.glob("privfed-federation-*.log"))  # nothing was submitted


def test_bad_input_of_local_and_a_missing_config(tmp_path, flwr_home, capsys) -> None:
    assert main(["federation", "run", str(tmp_path / "absent.toml")]) == 2
    assert "APP_CONFIG" in capsys.readouterr().err
    (tmp_path / "a.npz").write_bytes(b"")
    assert main(["federation", "local", "--sites", "2", "--data", str(tmp_path / "a.npz")]) == 2
    assert "--data: 1 files for --sites 2" in capsys.readouterr().err
    config = tmp_path / "fedkt.toml"
    config.write_text("num-supernodes = 3\n")
    assert main(["federation", "local", "--sites", "1", "--data", str(tmp_path / "a.npz"), "--run", str(config)]) == 2
    assert "num-supernodes = 3, but --sites is 1" in capsys.readouterr().err


def _interruptible() -> None:
    """In the child: Ctrl-C raises KeyboardInterrupt even when the suite runs in the background (a shell starts
    background jobs with SIGINT ignored, and Python installs its handler only where SIGINT is not ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def fake_flwr(tmp_path, monkeypatch):
    """A ``flwr`` on PATH that records its arguments and the run configuration it was given, then fails."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "flwr"
    record = tmp_path / "flwr-called.json"
    script.write_text(f"""#!{sys.executable}
import json, pathlib, sys
arguments = sys.argv[1:]
config = arguments[arguments.index("--run-config") + 1]
pathlib.Path({str(record)!r}).write_text(json.dumps({{"arguments": arguments,
                                                     "config": pathlib.Path(config).read_text()}}))
sys.exit(1)
""")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return record


def test_a_bundle_already_in_output_bundle_is_refused_before_submission(tmp_path, flwr_home, fake_flwr,
                                                                        capsys) -> None:
    """Issue 45, item 6: rerunning into the same output folder exits 2 with one line, before flwr run; --overwrite
    submits the run with overwrite = true (a real run-config key: flwr run takes one TOML file, so a copy)."""
    bundle = tmp_path / "fedkt-bundle"
    bundle.mkdir()
    (bundle / "ledger.json").write_text("{}")
    config = tmp_path / "fedkt.toml"
    config.write_text(f'output-bundle = "{bundle}"\ngamma = 1.0\n')
    assert main(["federation", "run", str(config), "--log", str(tmp_path / "run.log")]) == 2
    error = capsys.readouterr().err
    assert error == (f"privfed federation: error: APP_CONFIG {str(config)!r}: output-bundle {str(bundle)!r} exists and "
                     "is not empty; pass --overwrite (or set overwrite = true in APP_CONFIG) to replace its contents; "
                     "nothing was submitted\n"), error
    assert not fake_flwr.exists() and not (tmp_path / "run.log").exists()
    assert main(["federation", "run", str(config), "--log", str(tmp_path / "run.log"), "--overwrite"]) == 1
    submitted = json.loads(fake_flwr.read_text())
    assert submitted["config"] == f'output-bundle = "{bundle}"\ngamma = 1.0\noverwrite = true\n'
    config.write_text(f'output-bundle = "{bundle}"\noverwrite = true\n')  # the run-config key alone
    assert main(["federation", "run", str(config), "--log", str(tmp_path / "run.log")]) == 1
    assert json.loads(fake_flwr.read_text())["arguments"][-1] == str(config.resolve())


def test_a_remote_server_checks_its_output_bundle_itself_before_asking_any_supernode(tmp_path, flwr_home,
                                                                                     fake_flwr) -> None:
    """This machine cannot see a remote server's folders: the run is submitted, and the server refuses it before
    its first message to a SuperNode."""
    import numpy as np
    from privfed.pipelines.fedkt.estimator import FedKT

    from privfed.federation.server_app import ServerJob, run_server

    (flwr_home / "config.toml").write_text('[superlink]\ndefault = "far"\n\n[superlink.far]\n'
                                           'address = "server.example.org:8000"\ninsecure = true\n')
    bundle = tmp_path / "fedkt-bundle"
    bundle.mkdir()
    (bundle / "ledger.json").write_text("{}")
    config = tmp_path / "fedkt.toml"
    config.write_text(f'output-bundle = "{bundle}"\n')
    assert main(["federation", "run", str(config), "--log", str(tmp_path / "run.log")]) == 1
    assert fake_flwr.exists()  # submitted: only the server sees its folder

    class Grid:
        def get_node_ids(self):
            raise AssertionError("a SuperNode was asked")

    from sklearn.tree import DecisionTreeClassifier

    job = ServerJob(estimator=FedKT(DecisionTreeClassifier()), public=np.zeros((4, 2)), num_supernodes=3,
                    output_bundle=str(bundle))
    with pytest.raises(ValueError, match=r"output-bundle .* exists and is not empty; set overwrite = true in the run "
                                         r"configuration \(privfed federation run --overwrite\)"):
        run_server(Grid(), job)


def test_the_server_says_who_is_connected_while_it_waits_and_how_long_it_will(monkeypatch, capsys) -> None:
    """Issue 45, item 7: a site down at submission is named as missing at once (then on each change and every
    30 s), with the run-config key that bounds the wait; a run with every site connected says nothing."""
    import privfed.federation.server_app as server_app
    from privfed.federation.summary import WAITING_PREFIX, waiting_line

    assert waiting_line([11, 22], 3, 12.3, 600.0) == (
        "waiting for SuperNodes: 2 of 3 connected (node 11, node 22), 1 missing after 12 s; the run stops if they "
        "have not all connected 600 s after it started (the run-config key timeout: a smaller one gives up sooner; "
        "Ctrl-C stops the run now)")
    page = " ".join((Path(__file__).resolve().parents[1] / "docs" / "federation.md").read_text().split())
    assert f"(`privfed federation run: {waiting_line([5830, 9121], 3, 0.0, 600.0)}`)" in page  # quoted as printed
    assert waiting_line([], 2, 0.0, None).startswith("waiting for SuperNodes: 0 of 2 connected, 2 missing after 0 s; "
                                                     "no timeout is set")
    monkeypatch.setattr(server_app, "_POLL_SECONDS", 0.0)
    answers = iter([[7], [7], [7], [7, 9], [7, 9, 12]])

    class Grid:
        def get_node_ids(self):
            return next(answers)

    assert server_app._wait_for_nodes(Grid(), 3, 600.0, announce=True) == [7, 9, 12]
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line.startswith(WAITING_PREFIX) for line in lines)
    assert "1 of 3 connected (node 7), 2 missing" in lines[0] and "2 of 3 connected (node 7, node 9), 1 missing" in \
        lines[1]
    everyone = type("Everyone", (), {"get_node_ids": lambda self: [1, 2]})()
    assert server_app._wait_for_nodes(everyone, 2, 1.0, announce=True) == [1, 2]
    assert capsys.readouterr().out == ""
    with pytest.raises(server_app.FederationError, match=r"only 1 of 2 SuperNodes connected after"):
        server_app._wait_for_nodes(type("One", (), {"get_node_ids": lambda self: [5]})(), 2, 0.05)


def privfed_command(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "privfed", "federation", *arguments]


@needs_flower
@pytest.mark.slow
def test_a_killed_supernode_fails_the_run_in_one_line_and_ctrl_c_stops_it(tmp_path) -> None:
    parties, public, _ = digits_federation(3)
    with localhost_federation(tmp_path, parties, public, OMP_NUM_THREADS="1") as federation:
        stop(federation.nodes[2])
        config = tmp_path / "fedkt.toml"
        config.write_text(f'public-path = "{tmp_path / "public.npz"}"\noutput-bundle = "{tmp_path / "bundle"}"\n'
                          "timeout = 20.0\nn-teachers = 3\n")
        log = tmp_path / "run.log"
        done = subprocess.run(privfed_command("run", str(config), "--connection", "localhost", "--log", str(log)),
                              cwd=tmp_path, env=federation.env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 1, done.stdout + done.stderr
        (failed,) = [line for line in done.stderr.splitlines() if "failed:" in line]
        assert "SuperNodes connected after" in failed and f"traceback in {log}" in failed, done.stderr
        waiting = [line for line in done.stderr.splitlines() if "waiting for SuperNodes" in line]
        assert waiting, done.stderr
        assert waiting[0].startswith("privfed federation run: waiting for SuperNodes: 2 of 3 connected (node")
        assert "1 missing after" in waiting[0] and "connected 20 s after it started (the run-config key timeout" in \
            waiting[0], done.stderr
        assert "Traceback" not in done.stdout + done.stderr and "Traceback" in log.read_text()
        assert not (tmp_path / "bundle").exists()

        # Ctrl-C while the server waits for the missing SuperNode: the run is stopped, exit 130.
        config.write_text(config.read_text().replace("timeout = 20.0", "timeout = 600.0"))
        process = subprocess.Popen(privfed_command("run", str(config), "--connection", "localhost", "--log",
                                                   str(tmp_path / "interrupted.log")),
                                   cwd=tmp_path, env=federation.env, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True, preexec_fn=_interruptible)
        assert process.stderr is not None
        submitted = process.stderr.readline()
        assert "submitted" in submitted, submitted
        time.sleep(3)
        os.killpg(process.pid, signal.SIGINT)
        rest = process.stderr.read()
        assert process.wait(timeout=180) == 130, rest
        assert "interrupted; run" in rest and "stopped" in rest and "by hand" not in rest, rest
        run_id = re.search(r"run (\d+) submitted", submitted).group(1)
        listed = subprocess.run(["flwr", "ls", "localhost", "--format", "json"], cwd=tmp_path, env=federation.env,
                                capture_output=True, text=True, timeout=120)
        (run,) = [run for run in json.loads(listed.stdout)["runs"] if str(run["run-id"]) == run_id]
        assert "stopped" in run["status"], run


@needs_flower
@pytest.mark.slow
def test_local_runs_a_configuration_on_n_sites_and_stops_them(tmp_path) -> None:
    parties, public, (X_test, y_test) = digits_federation(3)
    sites = write_sites(tmp_path, parties, public)
    import numpy as np

    np.savez(tmp_path / "test.npz", X=X_test, y=y_test)
    config = tmp_path / "fedkt.toml"
    config.write_text(f'public-path = "{tmp_path / "public.npz"}"\noutput-bundle = "{tmp_path / "bundle"}"\n'
                      f'test-path = "{tmp_path / "test.npz"}"\ngamma = 0.02\nn-teachers = 3\ntimeout = 120.0\n')
    env = checkout_env(tmp_path / "unused-home", OMP_NUM_THREADS="1")
    done = subprocess.run(privfed_command("local", "--sites", "3", "--data", *map(str, sites), "--run", str(config),
                                          "--workdir", str(tmp_path / "local")),
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "parties: 3 took part" in done.stdout and f"bundle: {tmp_path / 'bundle'}" in done.stdout
    assert "NEAR CHANCE" in done.stdout  # gamma 0.02: noise of scale 50 on at most 6 votes per query
    assert "FedKT pre-flight: each server query has at most 6 votes" in done.stderr, done.stderr  # said before too
    assert (tmp_path / "bundle" / "MODEL_CARD.md").is_file()
    for log in Path(tmp_path / "local").glob("*.log"):  # every process it started has stopped
        pid_lines = [line for line in log.read_text().splitlines() if "Started server process" in line]
        for line in pid_lines:
            pid = int(line.rsplit("[", 1)[1].rstrip("]"))
            assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()


def test_the_summary_reports_epsilon_per_unit_and_per_observer_where_the_ledger_has_observers(monkeypatch) -> None:
    """summary_lines: every ε rounded up, per unit; per observer once Ledger.account takes one (issue #31)."""
    import math
    import sys
    import types
    from dataclasses import dataclass

    from privfed.federation.summary import run_summary, summary_line, summary_lines

    @dataclass
    class Report:
        epsilon: float
        data_dependent: bool = False
        epsilon_data_independent: float = math.inf
        epsilon_is_data_dependent: bool = False

    class ObservedLedger:
        units, delta = ("party",), 1e-5

        def account(self, *, unit, observer="public"):
            return Report({"public": 1.23451, "coordinator": math.inf}[observer])

    class Model:
        privacy, ledger_ = "L1", ObservedLedger()

    observers = types.ModuleType("privfed.accounting.observers")
    observers.OBSERVERS = ("public", "coordinator")
    monkeypatch.setitem(sys.modules, "privfed.accounting.observers", observers)
    import privfed.accounting

    monkeypatch.setattr(privfed.accounting, "observers", observers, raising=False)
    summary = run_summary(Model(), parties=["party 0", "party 1"], bundle="/srv/b",
                          metrics={"test_accuracy": 0.9, "test_majority_class_rate": 0.1, "test_examples": 10.0})
    assert json.loads(summary_line(summary).split(": ", 1)[1]) == summary
    lines = summary_lines(summary)
    assert lines[0] == "algorithm: Model L1" and lines[1] == "parties: 2 took part (party 0, party 1)"
    assert "epsilon (party-level, observer public, delta = 1e-05): 1.235" in lines  # rounded up
    assert "epsilon (party-level, observer coordinator, delta = 1e-05): inf" in lines
    assert lines[-2].startswith("test accuracy 0.900 on 10 test examples") and lines[-1] == "bundle: /srv/b"


def test_ctrl_c_when_flwr_stop_does_not_answer_says_to_stop_the_run_by_hand(tmp_path, monkeypatch, capsys) -> None:
    """Ctrl-C after submission runs ``flwr stop``; one that hangs past its timeout gives the one line, not a
    traceback (exit 130)."""
    import privfed.cli.federation_command as federation_command

    class Interrupted:
        returncode = None

        def __init__(self, *args, **kwargs):
            self.stdout = self._lines()

        @staticmethod
        def _lines():
            yield "🎊 Successfully started run 1234567\n"
            raise KeyboardInterrupt

        def terminate(self):
            pass

    def hanging_stop(command, **kwargs):
        raise subprocess.TimeoutExpired(command, kwargs["timeout"])

    monkeypatch.setattr(federation_command.subprocess, "Popen", Interrupted)
    monkeypatch.setattr(federation_command.subprocess, "run", hanging_stop)
    monkeypatch.setattr(federation_command.shutil, "which", lambda *args, **kwargs: "/usr/bin/flwr")
    code = federation_command.follow_run("app.toml", "local", {}, tmp_path / "run.log", name="privfed federation run")
    error = capsys.readouterr().err
    assert code == 130 and "Traceback" not in error
    assert "interrupted; flwr stop 1234567 local did not answer in 120 s: stop it by hand" in error, error
