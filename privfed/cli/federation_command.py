"""``privfed federation run`` and ``privfed federation local``: Flower runs with an answer at the end.

``privfed federation run APP_CONFIG [--connection NAME] [--overwrite]`` checks the run configuration (a TOML file
of the app's keys, ``docs/federation.md``), the connection and, where this machine sees the server's folders, that
``output-bundle`` can be written (empty, or ``--overwrite``), submits the run with ``flwr run <app> NAME --stream
--run-config APP_CONFIG``, follows it (Flower's full output goes to a log file; privfed's warnings are
echoed) and prints one summary: the algorithm, the parties that took part, ε per unit (per observer where
the ledger accounts observers), the test accuracy when ``test-path`` names a labelled test file, and the
bundle's path. Exit codes: 0 the bundle was written; 1 the run failed (one line naming the party and the
step; the traceback is in the log file); 2 bad input (nothing submitted); 130 Ctrl-C (the run is stopped
with ``flwr stop``).

``privfed federation local --sites N --data FILE... [--run APP_CONFIG]`` starts a SuperLink and N SuperNodes on
127.0.0.1 (free ports, :mod:`privfed.federation.local`); with ``--run`` it runs it there as above and
stops them, else it keeps them until Ctrl-C (exit 0) and prints how to submit runs to them.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from privfed.cli.arguments import EXIT_CHECK_FAILED, EXIT_INTERRUPTED, EXIT_OK, integer_at_least

__all__ = ["add_federation_command"]

APP = Path(__file__).resolve().parent.parent / "federation" / "app"
_RUN_ID = re.compile(r"run (\d{3,})")
_WARNING = re.compile(r"\b\w*Warning: ")


def app_config_keys() -> dict[str, Any]:
    """The app's run-configuration keys and their defaults (``federation/app/pyproject.toml``)."""
    with (APP / "pyproject.toml").open("rb") as stream:
        return tomllib.load(stream)["tool"]["flwr"]["app"]["config"]


def _type_name(value: Any) -> str:
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(type(value), "a value")


def read_app_config(path: str) -> dict[str, Any]:
    """APP_CONFIG's keys and values, checked against the app's keys and their types; ValueError otherwise."""
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"APP_CONFIG {path!r} does not exist (a TOML file of run-configuration keys)")
    try:
        with file.open("rb") as stream:
            config = tomllib.load(stream)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"APP_CONFIG {path!r} is not valid TOML: {error}") from None
    known = app_config_keys()
    for key, value in config.items():
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else " (docs/federation.md lists the keys)"
            raise ValueError(f"APP_CONFIG {path!r}: unknown key {key!r}{hint}")
        default = known[key]
        same = isinstance(value, type(default)) and isinstance(value, bool) == isinstance(default, bool)
        if not (same or (isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool))):
            raise ValueError(f"APP_CONFIG {path!r}: {key} must be {_type_name(default)} (like its default "
                             f"{default!r}), got {value!r}")
    if not config.get("output-bundle", known["output-bundle"]):
        raise ValueError(f"APP_CONFIG {path!r}: output-bundle is empty; name the bundle folder the server writes "
                         "(the run succeeds when it is written)")
    return config


def _connection(name: str | None, env: dict[str, str]) -> tuple[str, str]:
    """The SuperLink connection to use and its address, checked in ``$FLWR_HOME/config.toml`` (default
    ``~/.flwr``)."""
    home = Path(env.get("FLWR_HOME") or Path.home() / ".flwr")
    file = home / "config.toml"
    connections: dict[str, Any] = {}
    if file.is_file():
        try:
            with file.open("rb") as stream:
                connections = tomllib.load(stream).get("superlink", {})
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"{file} is not valid TOML: {error}") from None
    names = sorted(key for key, value in connections.items() if isinstance(value, dict))
    chosen = name or connections.get("default")
    if not chosen:
        raise ValueError(f"--connection: none given and {file} names no default SuperLink connection "
                         f"([superlink] default = \"NAME\"); connections there: {names or 'none'}")
    if chosen not in names:
        close = difflib.get_close_matches(chosen, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"--connection {chosen!r} is not a [superlink.{chosen}] section of {file} "
                         f"(connections there: {names or 'none'}){hint}")
    return chosen, str(connections[chosen].get("address", ""))


def _on_this_machine(address: str) -> bool:
    """Whether a SuperLink ``address`` (``host:port``) is this machine, so that the server's files are ours."""
    host = address.rsplit(":", 1)[0].strip("[]") if ":" in address else address
    return host in ("localhost", "::1") or host.startswith("127.")


def _overwrite(config: dict[str, Any], args: argparse.Namespace) -> bool:
    return bool(args.overwrite or config.get("overwrite", False))


def check_bundle_folder(config_path: str, config: dict[str, Any], *, overwrite: bool,
                        server_folder: Path | None) -> None:
    """Refuse, before submission, an ``output-bundle`` the server could not write (ValueError, exit 2).

    Only where this machine sees the server's files: an absolute path, or one relative to ``server_folder``
    (the server's working folder, known for ``privfed federation local``). Elsewhere the server checks it itself
    before asking any SuperNode (:func:`privfed.federation.server_app.run_server`).
    """
    from privfed.output_folder import check_output_folder

    bundle = Path(str(config.get("output-bundle", app_config_keys()["output-bundle"])))
    if not bundle.is_absolute():
        if server_folder is None:
            return
        bundle = server_folder / bundle
    try:
        check_output_folder(bundle, "output-bundle", overwrite=overwrite,
                            how_to_overwrite="pass --overwrite (or set overwrite = true in APP_CONFIG)")
    except ValueError as error:
        raise ValueError(f"APP_CONFIG {config_path!r}: {error}; nothing was submitted") from None


@contextlib.contextmanager
def _submitted_config(config_path: str, config: dict[str, Any], overwrite: bool) -> Iterator[str]:
    """APP_CONFIG, or (``--overwrite`` where it does not set ``overwrite = true``) a copy that does, while used."""
    if not overwrite or config.get("overwrite", False):
        yield config_path
        return
    with tempfile.TemporaryDirectory(prefix="privfed-run-") as folder:
        copy = Path(folder) / Path(config_path).name
        lines = [f"{key} = {_toml_value(value)}" for key, value in {**config, "overwrite": True}.items()]
        copy.write_text("\n".join(lines) + "\n", encoding="utf-8")
        yield str(copy)


def _toml_value(value: Any) -> str:
    """A run-configuration value (bool, int, float, str) as TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _log_path(given: str | None) -> Path:
    path = Path(given) if given else Path.cwd() / f"privfed-federation-{time.strftime('%Y%m%d-%H%M%S')}.log"
    if path.is_dir():
        raise ValueError(f"--log {str(path)!r} is a folder; it must name a file")
    if not path.parent.is_dir():
        raise ValueError(f"--log {str(path)!r}: its folder {str(path.parent)!r} does not exist")
    return path


def follow_run(config_path: str, connection: str, env: dict[str, str], log: Path, *, name: str) -> int:
    """Submit the run, follow it into ``log``, print the summary or the failure; the exit code."""
    from privfed.federation.summary import FAILURE_PREFIX, SUMMARY_PREFIX, WAITING_PREFIX, summary_lines

    flwr = shutil.which("flwr", path=env.get("PATH"))
    if flwr is None:
        raise ValueError("flwr is not on PATH: pip install 'privfed[federation]'")
    command = [flwr, "run", str(APP), connection, "--stream", "--run-config", str(Path(config_path).resolve())]
    summary = failure = run_id = None
    with log.open("w") as out:
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   errors="replace", start_new_session=True)
        try:
            assert process.stdout is not None
            for line in process.stdout:
                out.write(line)
                out.flush()
                if run_id is None and (found := _RUN_ID.search(line)):
                    run_id = found.group(1)
                    print(f"{name}: run {run_id} submitted to {connection}; following it (Flower's output: {log})",
                          file=sys.stderr)
                if SUMMARY_PREFIX in line:
                    summary = json.loads(line.split(SUMMARY_PREFIX, 1)[1])
                elif FAILURE_PREFIX in line:
                    failure = json.loads(line.split(FAILURE_PREFIX, 1)[1])
                elif WAITING_PREFIX in line:
                    print(f"{name}: {line.split(WAITING_PREFIX, 1)[1].strip()}", file=sys.stderr)
                elif _WARNING.search(line):
                    print(f"{name}: {_WARNING.split(line.strip(), 1)[-1]}", file=sys.stderr)
            process.wait()
        except KeyboardInterrupt:
            process.terminate()
            stopped = "no run had been submitted yet"
            if run_id is not None:
                try:
                    done = subprocess.run([flwr, "stop", run_id, connection], env=env, capture_output=True,
                                          text=True, timeout=120)
                except subprocess.TimeoutExpired:
                    stopped = f"flwr stop {run_id} {connection} did not answer in 120 s: stop it by hand"
                else:
                    out.write(done.stdout + done.stderr)
                    stopped = f"run {run_id} stopped" if done.returncode == 0 else \
                        f"flwr stop {run_id} {connection} failed (exit {done.returncode}; see {log}): stop it by hand"
            print(f"{name}: interrupted; {stopped}", file=sys.stderr)
            return EXIT_INTERRUPTED
    if summary is not None and summary.get("bundle"):
        print("\n".join(summary_lines(summary)))
        return EXIT_OK
    if failure is not None:
        print(f"{name}: failed: {failure['message']} ({failure['error']}; traceback in {log})", file=sys.stderr)
    else:
        print(f"{name}: failed: flwr run exited with code {process.returncode} without privfed's summary "
              f"(Flower's output: {log})", file=sys.stderr)
    return EXIT_CHECK_FAILED


def _run_command(args: argparse.Namespace) -> int:
    config = read_app_config(args.config)
    env = dict(os.environ)
    connection, address = _connection(args.connection, env)
    overwrite = _overwrite(config, args)
    if _on_this_machine(address):
        check_bundle_folder(args.config, config, overwrite=overwrite, server_folder=None)
    log = _log_path(args.log)
    with _submitted_config(args.config, config, overwrite) as submitted:
        return follow_run(submitted, connection, env, log, name="privfed federation run")


def _local_command(args: argparse.Namespace) -> int:
    from privfed.federation.local import local_federation

    if len(args.data) != args.sites:
        raise ValueError(f"--data: {len(args.data)} files for --sites {args.sites}; give one file per site")
    folder = Path(args.workdir)
    config: dict[str, Any] = {}
    if args.config is not None:
        config = read_app_config(args.config)
        wanted = config.get("num-supernodes", app_config_keys()["num-supernodes"])
        if wanted != args.sites:
            raise ValueError(f"APP_CONFIG {args.config!r}: num-supernodes = {wanted}, but --sites is {args.sites}")
        check_bundle_folder(args.config, config, overwrite=_overwrite(config, args), server_folder=folder)
    elif args.overwrite:
        raise ValueError("--overwrite applies to a run: give --run APP_CONFIG")
    log = _log_path(args.log)
    name = "privfed federation local"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with local_federation(args.data, folder=folder) as sites:
            print(f"{name}: SuperLink on 127.0.0.1:{sites.link_port} with {args.sites} SuperNodes (logs in {folder})",
                  file=sys.stderr)
            if args.config is not None:
                with _submitted_config(args.config, config, _overwrite(config, args)) as submitted:
                    return follow_run(submitted, sites.connection, sites.env, log, name=name)
            print(f"{name}: submit runs with FLWR_HOME={sites.env['FLWR_HOME']} privfed federation run APP_CONFIG "
                  f"--connection {sites.connection}; Ctrl-C stops the SuperLink and the SuperNodes", file=sys.stderr)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        if args.config is not None:
            raise
        print(f"{name}: stopped", file=sys.stderr)
        return EXIT_OK
    except (RuntimeError, TimeoutError) as error:  # a Flower process that would not start
        print(f"{name}: failed: {error}", file=sys.stderr)
        return EXIT_CHECK_FAILED


def add_federation_command(commands: Any) -> None:
    """Register ``privfed federation run`` and ``privfed federation local``."""
    federation = commands.add_parser(
        "federation", help="run privfed's Flower app and get its summary (ε, accuracy, bundle)",
        description="Submit privfed's Flower app to a SuperLink and report its result (docs/federation.md).",
        epilog="exit codes: 0 the bundle was written, 1 the run failed (one line; traceback in the log file), "
               "2 bad input, 130 interrupted (the run is stopped)",
    )
    sub = federation.add_subparsers(dest="federation_command", required=True, metavar="COMMAND")
    run = sub.add_parser(
        "run", help="submit a run (flwr run), follow it, print its summary",
        description="Check APP_CONFIG, submit the run with flwr run to the connection's SuperLink, follow it and "
                    "print the algorithm, the parties, ε per unit, the test accuracy and the bundle's path.",
    )
    run.add_argument("config", metavar="APP_CONFIG", help="the run configuration: a TOML file of the app's keys")
    run.add_argument("--connection", help="a [superlink.NAME] connection of $FLWR_HOME/config.toml "
                                          "(default: its [superlink] default)")
    run.add_argument("--log", help="file for Flower's full output (default: privfed-federation-TIME.log here)")
    run.add_argument("--overwrite", action="store_true",
                     help="replace a bundle already in output-bundle (sets the run config's overwrite = true)")
    run.set_defaults(handler=_run_command)
    local = sub.add_parser(
        "local", help="a trial federation on 127.0.0.1: a SuperLink and N SuperNodes",
        description="Start a SuperLink and N SuperNodes on 127.0.0.1 (free ports, no TLS: this machine only), one "
                    "data file each; run APP_CONFIG on them and stop, or keep them until Ctrl-C.",
    )
    local.add_argument("--run", dest="config", metavar="APP_CONFIG", help="run this configuration, then stop")
    local.add_argument("--sites", type=integer_at_least(1), required=True, help="number of SuperNodes")
    local.add_argument("--data", nargs="+", required=True, metavar="FILE", help="one data file per site, in order")
    local.add_argument("--workdir", default="privfed-local", help="folder for the processes' logs (default "
                                                                  "./privfed-local)")
    local.add_argument("--log", help="file for Flower's full output of the run (default: privfed-federation-TIME.log)")
    local.add_argument("--overwrite", action="store_true",
                       help="with --run: replace a bundle already in output-bundle (the run config's overwrite = true)")
    local.set_defaults(handler=_local_command)
