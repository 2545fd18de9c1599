"""Shared fixtures: the reference values in ``../shared/oracles`` beside the checkout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ORACLES = Path(__file__).resolve().parents[1].parent / "shared" / "oracles"


def load_oracle(name: str):
    """Load ``../shared/oracles/<name>``; skip the calling test if the folder is absent."""
    path = ORACLES / name
    if not path.is_file():
        pytest.skip(f"reference values {path} are not available beside this checkout")
    with path.open() as handle:
        return json.load(handle)


def oracle_cases(name: str, section: str | None = None) -> list:
    """Cases of an oracle file for ``pytest.mark.parametrize`` (empty when the folder is absent)."""
    path = ORACLES / name
    if not path.is_file():
        return []
    with path.open() as handle:
        data = json.load(handle)
    return data if section is None else data[section]
