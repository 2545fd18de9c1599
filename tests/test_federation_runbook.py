"""docs/federation.md's deployment section, run as written on 127.0.0.1: plain and with TLS + SuperNode authentication.

The test substitutes only what the page says it may: ``server.example.org`` → 127.0.0.1, ``--host 0.0.0.0`` →
``--host 127.0.0.1``, the folders ``/data``, ``/srv``, ``/analyst`` → temporary folders, the ports 8000, 9094–9096
→ free ports; the plain trial applies the page's own edits (``--insecure`` for the certificate flags, no
authentication flags, no keys, ``insecure = true`` in the connection). The TLS run makes a CA and the SuperLink's
certificate with the page's step-1 block, the hospitals' keys with the page's ``ssh-keygen`` and registers them with the
page's ``flwr supernode register``; a SuperNode with an unregistered key is refused. Each run takes one to two
minutes on two shared cores (Flower starts a process per message).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from flower_sites import checkout_env, free_ports, log_tail, stop, wait_for_text

import privfed

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("flwr") is None or shutil.which("flower-superlink") is None
        or shutil.which("ssh-keygen") is None,
        reason="needs flwr (pip install 'privfed[federation]') and ssh-keygen",
    ),
]

DOC = Path(__file__).resolve().parents[1] / "docs" / "federation.md"


def deployment_blocks() -> list[tuple[str, str]]:
    """(language, text) of every fenced block of the deployment section, in order."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Run mode 2: deployment"):text.index("### Run configuration")]
    return re.findall(r"^```(\w+)\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)


def commands(block: str) -> list[str]:
    """The block's commands, continuation lines joined."""
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


class Runbook:
    """The page's blocks with the substitutions it allows, run in ``root`` (the machines' working folder)."""

    def __init__(self, root: Path, *, tls: bool):
        self.root, self.tls = root, tls
        self.folders = {name: root / name.strip("/") for name in ("/data", "/srv", "/analyst")}
        self.folders["/analyst"].mkdir()  # the analyst's own folder (the page's files block makes the other two)
        self.ports = dict(zip(("8000", "9094", "9095", "9096"), map(str, free_ports(4))))
        home = root / "flwr-home"
        home.mkdir()
        self.home, self.env = home, checkout_env(home)
        self.processes: list[subprocess.Popen] = []

    def substitute(self, text: str) -> str:
        text = text.replace("server.example.org", "127.0.0.1").replace("--host 0.0.0.0", "--host 127.0.0.1")
        for name, folder in self.folders.items():
            text = re.sub(rf"(?<![\w.]){re.escape(name)}\b", str(folder), text)
        text = re.sub(r"\b(8000|9094|9095|9096)\b", lambda match: self.ports[match.group(1)], text)
        if not self.tls:  # the page's trial without certificates
            text = re.sub(r"--ssl-ca-certfile \S+", "--insecure", text)
            text = re.sub(r" --ssl-certfile \S+| --ssl-keyfile \S+| --enable-supernode-auth"
                          r"| --auth-supernode-private-key \S+", "", text)
            text = re.sub(r"--root-certificates \S+", "--insecure", text)
            text = re.sub(r"^root-certificates = .*$", "insecure = true", text, flags=re.MULTILINE)
        return text

    def bash(self, script: str, *, timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", self.substitute(script)], cwd=self.root, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def start(self, command: str, log: str) -> subprocess.Popen:
        with (self.root / log).open("w") as out:
            process = subprocess.Popen(["bash", "-c", "exec " + self.substitute(command)], cwd=self.root,
                                       env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.processes.append(process)
        return process

    def stop_all(self) -> None:
        for process in reversed(self.processes):
            stop(process)


def run_the_page(tmp_path: Path, *, tls: bool) -> None:
    blocks = deployment_blocks()
    languages = [language for language, _ in blocks]
    assert languages == ["bash", "bash", "bash", "bash", "toml", "bash", "bash", "toml", "bash", "bash"], languages
    files, certificates, keys, superlink, connection, register, supernodes, run_config, run, audit = (
        text for _, text in blocks)
    book = Runbook(tmp_path, tls=tls)
    try:
        done = book.bash(files, timeout=120)  # 0. the sites' files, the public set, the test set
        assert done.returncode == 0, done.stderr
        assert sorted(p.name for p in book.folders["/data"].iterdir()) == [f"hospital-{s}.npz" for s in "abc"]
        if tls:
            done = book.bash(certificates, timeout=60)  # 1. certificates, made as the page makes them
            assert done.returncode == 0, done.stderr
            assert (tmp_path / "server.key").stat().st_mode & 0o777 == 0o600
            shutil.copy(tmp_path / "ca.crt", book.folders["/analyst"] / "ca.crt")
            done = book.bash(keys, timeout=60)  # 2. the hospitals' keys
            assert done.returncode == 0, done.stderr
        (link_command,) = commands(superlink)
        link = book.start(link_command, "superlink.log")  # 3. the SuperLink
        wait_for_text(tmp_path / "superlink.log", "Uvicorn running", 60, process=link)
        (book.home / "config.toml").write_text(book.substitute(connection))  # 4. the connection
        if tls:
            done = book.bash(register, timeout=120)
            assert done.returncode == 0 and done.stdout.count("registered successfully") == 3, done.stdout + done.stderr
        node_commands = commands(supernodes)  # 5. the SuperNodes
        assert len(node_commands) == 3
        nodes = [book.start(command, f"supernode-{index}.log") for index, command in enumerate(node_commands)]
        for index, node in enumerate(nodes):
            wait_for_text(tmp_path / f"supernode-{index}.log", "SuperNode ID:", 120, process=node)
        if tls:  # a SuperNode whose key was not registered is refused
            subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-f", "intruder"], cwd=tmp_path,
                           check=True)
            intruder = book.start(node_commands[0].replace("hospital-a ", "intruder ").replace(
                "--port 9094", f"--port {free_ports(1)[0]}").replace("party-index=0", "party-index=3"), "intruder.log")
            with pytest.raises(ChildProcessError):
                wait_for_text(tmp_path / "intruder.log", "SuperNode ID:", 60, process=intruder)
            assert "Failed to activate SuperNode" in log_tail(tmp_path / "intruder.log")
        first, body = run_config.split("\n", 1)  # 6. the run configuration file, at the path its comment names
        Path(book.substitute(first.removeprefix("# ").strip())).write_text(book.substitute(body))
        (run_command,) = commands(run)
        done = book.bash(run_command, timeout=400)
        printed = done.stdout
        print(printed, done.stderr)  # shown by pytest on failure
        diagnosis = printed + done.stderr + log_tail(tmp_path / "superlink.log")
        assert done.returncode == 0, diagnosis
        bundle = book.folders["/srv"] / "fedkt-bundle"
        model, ledger = privfed.load_bundle(bundle)
        with np.load(book.folders["/srv"] / "test.npz") as test:
            accuracy = float(np.mean(model.predict(test["X"]) == test["y"]))
            majority = np.bincount(test["y"]).max() / len(test["y"])
        assert accuracy > 0.5, diagnosis  # the page's settings give a useful model (0.859 and 0.761 in two runs)
        assert "algorithm: FedKT L1" in printed and "parties: 3 took part" in printed, diagnosis
        assert f"test accuracy {accuracy:.3f} on 297 test examples" in printed and "NEAR CHANCE" not in printed
        epsilon = re.search(r"epsilon \(party-level, observer public, delta = 1e-05\): ([0-9.e+]+|inf)",
                            printed).group(1)
        page = " ".join(DOC.read_text(encoding="utf-8").split())  # the page quotes this run's numbers
        assert "each run differs" in page and f"against {majority:.3f} for always answering" in page
        assert f"ε = {epsilon} per party" in page
        assert f"bundle: {bundle}" in printed and not (bundle / "evidence.npz").exists()
        card = (bundle / "MODEL_CARD.md").read_text()  # the run's accuracy, data and intended use are on the card
        assert f"| test_accuracy | {accuracy:.6g} |" in card and "- `test`: shape (297, 64)" in card
        assert "not for any clinical decision" in card
        (audit_command,) = commands(audit)
        done = book.bash(audit_command, timeout=300)
        assert done.returncode == 0 and "PASS" in done.stdout, done.stdout + done.stderr
    finally:
        book.stop_all()


def test_the_deployment_section_runs_as_written_without_certificates(tmp_path) -> None:
    run_the_page(tmp_path, tls=False)


def test_the_deployment_section_runs_as_written_with_tls_and_supernode_authentication(tmp_path) -> None:
    run_the_page(tmp_path, tls=True)
