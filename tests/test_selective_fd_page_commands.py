"""The ``python bench/selective_fd.py`` command blocks of docs/results.md, as written, are valid command lines of
today's script: each parses (with its checkpoint folder ``CHECKPOINTS`` made real) and selects at least one method
in every split it names. Running them takes minutes to hours each, so this checks the command, not its results."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "results.md"


def _commands() -> list[str]:
    """Every command of a fenced block that starts with ``python bench/selective_fd.py``, continuations joined."""
    blocks = re.findall(r"^```\n(.*?)^```", PAGE.read_text(encoding="utf-8"), flags=re.M | re.S)
    joined = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    return [line.strip() for line in joined if line.startswith("python bench/selective_fd.py")]


@pytest.fixture(scope="module")
def script():
    saved = list(sys.path)  # the script puts its own checkout first on sys.path when imported
    sys.path.insert(0, str(ROOT))
    from bench import selective_fd

    sys.path[:] = saved
    return selective_fd


def test_the_page_has_selective_fd_commands():
    assert len(_commands()) >= 5


@pytest.mark.parametrize("command", _commands())
def test_each_command_on_the_page_parses_and_runs_some_method(script, command, tmp_path):
    words = shlex.split(command.split("#")[0])[2:]
    args = script.arguments([str(tmp_path) if word == "CHECKPOINTS" else word for word in words])
    for setting in args.settings:
        chosen = [label for label in script.methods(args, setting)
                  if not args.methods or any(name in label for name in args.methods)]
        assert chosen, f"{command!r}: --methods {args.methods} selects nothing in split {setting!r}"
