"""Shared helpers: the reference values in ``../shared/oracles`` beside the checkout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

ORACLES = Path(__file__).resolve().parents[1].parent / "shared" / "oracles"

#: Tests that compare with the reference values are skipped, with this reason, where the folder is absent.
requires_oracles = pytest.mark.skipif(
    not ORACLES.is_dir(), reason=f"reference values {ORACLES} are not beside this checkout"
)


def load_oracle(name: str) -> Any:
    """The parsed ``../shared/oracles/<name>`` (use in tests marked :data:`requires_oracles`)."""
    with (ORACLES / name).open() as handle:
        return json.load(handle)


def oracle_cases(name: str, section: str | None = None) -> list:
    """Cases of an oracle file for ``pytest.mark.parametrize`` (empty when the folder is absent)."""
    if not (ORACLES / name).is_file():
        return []
    data = load_oracle(name)
    return data if section is None else data[section]
