"""A trial federation on this machine: a SuperLink and N SuperNodes on 127.0.0.1, each on a free port.

:func:`local_federation` starts them (``--insecure``: loopback only), waits — bounded — until every
SuperNode has its node ID, writes a Flower configuration (``FLWR_HOME``) naming the SuperLink as the
connection ``local``, yields a :class:`LocalSites`, and stops every process it started on exit (SIGTERM to
each one's process group, SIGKILL after 10 s), also on Ctrl-C or an error. Flower's own commands do the
work; this module only starts and stops them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LocalSites", "free_ports", "local_federation"]

#: The connection name :func:`local_federation` writes into its ``FLWR_HOME``.
CONNECTION = "local"


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 now (all held open together while chosen)."""
    with contextlib.ExitStack() as held:
        probes = [held.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [probe.getsockname()[1] for probe in probes]


def stop_process(process: subprocess.Popen) -> None:
    """SIGTERM to the process group of ``process`` (started with ``start_new_session``), SIGKILL after 10 s."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@dataclass
class LocalSites:
    """The running trial federation: its folder (logs, ``flwr-home``), the SuperLink's port, the environment
    in which ``flwr`` finds the connection ``local``."""

    folder: Path
    link_port: int
    env: dict[str, str]
    connection: str = CONNECTION


def _wait_for_log(path: Path, text: str, seconds: float, process: subprocess.Popen, what: str) -> None:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited (code {process.returncode}) after {time.monotonic() - started:.1f} s; "
                               f"its log: {path}")
        time.sleep(0.2)
    raise TimeoutError(f"{what} was not ready after {time.monotonic() - started:.1f} s (waited at most {seconds:g} s); "
                       f"its log: {path}")


@contextlib.contextmanager
def local_federation(data_paths: Sequence[str | os.PathLike[str]], *, folder: str | os.PathLike[str] | None = None,
                     ready_seconds: float = 120.0) -> Iterator[LocalSites]:
    """A SuperLink and one SuperNode per data file (``party-index`` = its position) on 127.0.0.1."""
    for command in ("flower-superlink", "flower-supernode", "flwr"):
        if shutil.which(command) is None:
            raise ValueError(f"{command} is not on PATH: pip install 'privfed[federation]'")
    paths = [Path(path).resolve() for path in data_paths]
    for path in paths:
        if not path.is_file():
            raise ValueError(f"data file {str(path)!r} does not exist")
    with contextlib.ExitStack() as cleanup:
        where = Path(folder) if folder is not None else Path(cleanup.enter_context(
            tempfile.TemporaryDirectory(prefix="privfed-local-")))
        home = where / "flwr-home"
        home.mkdir(parents=True, exist_ok=True)
        link_port, *node_ports = free_ports(1 + len(paths))
        (home / "config.toml").write_text(f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
                                          f'address = "127.0.0.1:{link_port}"\ninsecure = true\n')
        env = {**os.environ, "FLWR_HOME": str(home)}
        processes: list[subprocess.Popen] = []

        def start(command: list[str], log: Path) -> subprocess.Popen:
            with log.open("w") as out:
                process = subprocess.Popen(command, cwd=where, env=env, stdout=out, stderr=subprocess.STDOUT,
                                           start_new_session=True)
            processes.append(process)
            return process

        try:
            link = start(["flower-superlink", "--insecure", "--disable-runtime-dependency-installation",
                          "--host", "127.0.0.1", "--port", str(link_port)], where / "superlink.log")
            _wait_for_log(where / "superlink.log", "Uvicorn running", ready_seconds, link, "the SuperLink")
            nodes = [start(["flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{link_port}", "--port",
                            str(port), "--node-config", f'data-path="{path}" party-index={index}'],
                           where / f"supernode-{index}.log")
                     for index, (path, port) in enumerate(zip(paths, node_ports))]
            for index, node in enumerate(nodes):
                _wait_for_log(where / f"supernode-{index}.log", "SuperNode ID:", ready_seconds, node,
                              f"SuperNode {index}")
            yield LocalSites(where, link_port, env)
        finally:
            for process in reversed(processes):
                stop_process(process)
