"""docs/architecture.md: its commands run as written, and the modules and folders it names exist."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"
TEXT = PAGE.read_text("utf-8")
COMMANDS = [line.split("  #")[0].strip()
            for block in re.findall(r"^```bash\n(.*?)^```", TEXT, re.MULTILINE | re.DOTALL)
            for line in block.splitlines() if line.strip()]


def test_the_page_has_its_commands():
    assert len(COMMANDS) == 3, COMMANDS


@pytest.mark.parametrize("command", [
    pytest.param(command, marks=pytest.mark.slow) if command.startswith(".ci/typecheck") else command
    for command in COMMANDS])
def test_each_command_runs_as_written_from_the_repository_root(command):
    done = subprocess.run(command, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    if "__file__" in command:  # the checkout's own folder, not another checkout installed in editable mode
        assert Path(done.stdout.strip()) == ROOT / "pipelines" / "fedkt" / "__init__.py"


@pytest.mark.parametrize("path", sorted(set(re.findall(r"`((?:accounting|pipelines|reports|privfed|tests|bench|docs)"
                                                       r"/[\w/.]*)`", TEXT))))
def test_every_path_the_page_names_exists(path):
    assert (ROOT / path).exists(), path
