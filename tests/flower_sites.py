"""Flower processes on 127.0.0.1 for the deployment tests: free ports, bounded waits, every process stopped.

:func:`localhost_federation` writes one npz file per site, starts a SuperLink (``--insecure``, in-memory
database) and one SuperNode per site with ``data-path`` and ``party-index`` in its node config (distinct
free ports), waits until every SuperNode has its node ID (one that exited before is restarted once on a
new port; one that never registers fails the test with its log), and yields a :class:`LocalFederation`;
on exit it stops every process it started (SIGTERM to each process group, SIGKILL after 10 s). Both
SuperLink modes the tests use resolve privfed from this checkout (``PYTHONPATH``) under a temporary
``FLWR_HOME``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import privfed
from privfed.federation.local import free_ports
from privfed.federation.local import stop_process as stop

APP = Path(privfed.__file__).resolve().parent / "federation" / "app"


def free_port() -> int:
    return free_ports(1)[0]


def wait_for_port(port: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {seconds} s")


def wait_for_text(path: Path, text: str, seconds: float, process: subprocess.Popen | None = None) -> None:
    """Until ``path`` mentions ``text``; ChildProcessError as soon as ``process`` (the writer) has exited without."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if process is not None and process.poll() is not None:
            raise ChildProcessError(f"{path.name}: its process exited ({process.returncode}) before {text!r}")
        time.sleep(0.2)
    raise TimeoutError(f"{path.name} does not mention {text!r} after {seconds} s")


def log_tail(path: Path, characters: int = 3000) -> str:
    return path.read_text(errors="replace")[-characters:] if path.exists() else f"({path.name} was not written)"


def checkout_env(flwr_home: Path, **extra: str) -> dict[str, str]:
    """The environment of Flower's processes: this checkout on ``PYTHONPATH``, ``FLWR_HOME``, ``extra``."""
    root = str(Path(privfed.__file__).resolve().parent.parent)
    return {**os.environ, "FLWR_HOME": str(flwr_home), **extra,
            "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}


def write_sites(folder: Path, parties: Sequence, public: np.ndarray) -> list[Path]:
    """``site-<i>.npz`` (X, y) per party and ``public.npz`` in ``folder``; the sites' paths."""
    paths = []
    for index, (X, y) in enumerate(parties):
        paths.append(folder / f"site-{index}.npz")
        np.savez(paths[-1], X=X, y=y)
    np.savez(folder / "public.npz", X=public)
    return paths


@dataclass
class LocalFederation:
    """A running SuperLink and its SuperNodes (``nodes[i]`` holds ``site-<i>.npz``)."""

    folder: Path
    env: dict[str, str]
    link_port: int
    sites: list[Path]
    processes: list[subprocess.Popen] = field(default_factory=list)
    nodes: list[subprocess.Popen] = field(default_factory=list)
    node_configs: dict[int, str] = field(default_factory=dict)  # extra node config per party, e.g. its budget

    def start(self, *command: str, log: str) -> subprocess.Popen:
        with (self.folder / log).open("w") as out:
            process = subprocess.Popen(command, cwd=self.folder, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        self.processes.append(process)
        return process

    def start_node(self, index: int, port: int) -> subprocess.Popen:
        return self.start("flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{self.link_port}",
                          "--port", str(port), "--node-config",
                          f'data-path="{self.sites[index]}" party-index={index} {self.node_configs.get(index, "")}',
                          log=f"supernode-{index}.log")

    def wait_until_registered(self, index: int, seconds: float = 120) -> None:
        """Until SuperNode ``index`` has its node ID; one that exited (a port taken meanwhile) is restarted once."""
        log = self.folder / f"supernode-{index}.log"
        for attempt in range(2):
            try:
                return wait_for_text(log, "SuperNode ID:", seconds, process=self.nodes[index])
            except ChildProcessError:
                if attempt == 0:
                    self.nodes[index] = self.start_node(index, free_port())
            except TimeoutError:
                break
        raise TimeoutError(f"SuperNode {index} did not register with the SuperLink; its log:\n"
                           f"{log_tail(log)}\nthe SuperLink's log:\n{log_tail(self.folder / 'superlink.log')}")

    def node_logs(self) -> str:
        """The tail of every SuperNode's log, for an assertion's message."""
        return "".join(f"\n--- supernode-{index}.log ---\n{log_tail(self.folder / f'supernode-{index}.log', 1500)}"
                       for index in range(len(self.nodes)))

    def run_command(self, overrides: str) -> list[str]:
        return ["flwr", "run", str(APP), "localhost", "--stream", "--run-config",
                f'public-path="{self.folder / "public.npz"}" {overrides}']

    def flwr_run(self, overrides: str, *, timeout: float) -> str:
        """``flwr run`` to completion (bounded); its output."""
        done = subprocess.run(self.run_command(overrides), cwd=self.folder, env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        return done.stdout + done.stderr


@contextlib.contextmanager
def localhost_federation(folder: Path, parties: Sequence, public: np.ndarray, *,
                         node_configs: dict[int, str] | None = None, **env: str) -> Iterator[LocalFederation]:
    """A SuperLink and one SuperNode per party on 127.0.0.1 (``node_configs``: extra node config by party), all
    stopped on exit."""
    paths = write_sites(folder, parties, public)
    link_port = free_port()
    home = folder / "flwr-home"
    home.mkdir()
    (home / "config.toml").write_text(
        '[superlink]\ndefault = "localhost"\n\n[superlink.localhost]\n'
        f'address = "127.0.0.1:{link_port}"\ninsecure = true\n'
    )
    federation = LocalFederation(folder, checkout_env(home, **env), link_port, paths,
                                 node_configs=dict(node_configs or {}))
    try:
        federation.start("flower-superlink", "--insecure", "--disable-runtime-dependency-installation",
                         "--port", str(link_port), "--database", ":flwr-in-memory:", log="superlink.log")
        wait_for_port(link_port, 60)
        federation.nodes = [federation.start_node(index, port) for index, port in enumerate(free_ports(len(paths)))]
        for index in range(len(paths)):
            federation.wait_until_registered(index)
        yield federation
    finally:
        for process in reversed(federation.processes):
            stop(process)
