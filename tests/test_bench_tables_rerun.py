"""bench/rerun_cells.py: the cheap cells it reruns in CI exist in their raw files, and a changed value is caught."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import rerun_cells  # noqa: E402


@pytest.mark.parametrize("cell", rerun_cells.CELLS, ids=lambda cell: cell.name.split(":")[0])
def test_every_cell_holds_records_with_the_fields_it_compares(cell):
    recorded = cell.recorded()
    assert recorded
    assert all(field in record for record in recorded for field in cell.fields)


def _cell_writing(rows: list[dict]) -> rerun_cells.Cell:
    """A cell whose 'bench script' writes ``rows`` to the --json file it is given."""
    writer = f"import json, sys; open(sys.argv[2], 'w').write(json.dumps({{'rows': {json.dumps(rows)!s}}}))"
    return rerun_cells.Cell("client ε", "bench/results/privatekt_client_epsilons.json", ["-c", writer],
                            lambda record: True, ("reports", "basic", "tight"), records="rows")


def test_a_rerun_that_repeats_the_raw_file_has_no_differences(tmp_path):
    rows = json.loads((ROOT / "bench/results/privatekt_client_epsilons.json").read_text())["rows"]
    assert rerun_cells.rerun(_cell_writing(rows), tmp_path) == []


def test_a_changed_value_is_reported_with_both_values(tmp_path):
    rows = json.loads((ROOT / "bench/results/privatekt_client_epsilons.json").read_text())["rows"]
    changed = [dict(row) for row in rows]
    changed[1]["tight"] = rows[1]["tight"] * (1 + 1e-9)
    differences = rerun_cells.rerun(_cell_writing(changed), tmp_path)
    assert differences == [f"record 1, tight: {rows[1]['tight']!r} in bench/results/privatekt_client_epsilons.json, "
                           f"{changed[1]['tight']!r} now"]


def test_a_cell_whose_data_are_absent_is_skipped_and_says_so(monkeypatch, capsys):
    cell = rerun_cells.Cell("needs data", "bench/results/privatekt_client_epsilons.json", ["-c", "raise SystemExit(3)"],
                            lambda record: True, ("tight",), records="rows", needs=("shared/no-such-file.npz",))
    monkeypatch.setattr(rerun_cells, "CELLS", (cell,))
    assert rerun_cells.main([]) == 0
    out = capsys.readouterr().out
    assert "skipped: needs data (../shared/no-such-file.npz not beside this checkout)" in out
    assert "0 of 0 cells repeat their raw results; 1 skipped (no data)" in out
