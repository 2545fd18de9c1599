"""`python -m bench.tables`: every table of docs/results.md re-renders from committed raw results."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import provenance  # noqa: E402
from bench.tables import Page  # noqa: E402
from bench.tables import __main__ as tables  # noqa: E402


def test_every_table_of_the_results_page_matches_its_raw_results():
    run = subprocess.run([sys.executable, "-m", "bench.tables", "--check"], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]


def test_a_changed_figure_or_an_unmarked_table_fails_the_check(tmp_path, monkeypatch, capsys):
    page = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    name = "rederivation"
    first, end = Page.parse(page, source="page").blocks[name]
    lines = page.split("\n")
    row = next(index for index in range(first, end) if lines[index].startswith("| 1 |"))
    lines[row] = lines[row].replace("0.9181", "0.9180")
    changed = tmp_path / "results.md"
    changed.write_text("\n".join(lines), encoding="utf-8")
    monkeypatch.setattr(tables, "DOCUMENT", changed)
    assert tables.main(["--check", name]) == 1
    assert "rederivation: differs from its raw results" in capsys.readouterr().err

    changed.write_text(page + "\n## New\n\n| a | b |\n|---|---|\n| 1 | 2 |\n", encoding="utf-8")
    assert tables.main(["--check"]) == 1
    assert "under 'New'): a table or figure without markers" in capsys.readouterr().err


def test_an_unknown_table_name_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as stop:
        tables.main(["no-such-table"])
    assert stop.value.code == 2
    assert "unknown table(s) no-such-table" in capsys.readouterr().err


def test_a_marker_without_its_end_is_refused():
    with pytest.raises(ValueError, match="line 2: '<!-- table x -->' has no end marker"):
        Page.parse("text\n<!-- table x -->\n| a |\n", source="page")


def test_provenance_records_commit_seeds_machine_and_load_and_describes_them():
    record = provenance.finish(provenance.start(command="python bench/x.py", seeds=[0, 1, 2, 3, 4],
                                                settings={"rounds": 3}))
    assert len(record["commit"]) == 40 and record["seeds"] == [0, 1, 2, 3, 4]
    assert record["machine"]["cpus"] >= 1 and len(record["load_start"]) == len(record["load_end"]) == 3
    line = provenance.describe({"provenance": record})
    assert line.startswith(f"code commit {record['commit'][:10]}") and "seeds 0–4" in line and "load" in line
    assert provenance.describe({"rows": []}) == "code commit not recorded; machine not recorded; load not recorded"
    later = provenance.finish(provenance.start(command="python bench/x.py --seeds 5", seeds=[5], settings={}))
    resumed = provenance.describe({"provenance": record, "resumed": [later]})
    assert resumed.startswith(line) and f"then resumed by seed 5 at code commit {later['commit'][:10]}" in resumed


def test_a_published_input_is_described_by_its_source():
    document = {"source": {"repository": "https://github.com/o/r", "commit": "3846548c6ae1", "path": "a.ipynb"}}
    assert provenance.describe(document) == "published input from https://github.com/o/r @ 3846548, a.ipynb"


def test_provenance_records_the_library_versions_from_package_metadata():
    import importlib.metadata

    libraries = provenance.start(command="x", seeds=None, settings={})["machine"]["libraries"]
    assert set(libraries) == set(provenance.LIBRARIES)
    assert libraries["numpy"] == importlib.metadata.version("numpy")
    assert libraries["scikit-learn"] == importlib.metadata.version("scikit-learn")


def test_a_resumed_file_says_which_commit_made_each_record():
    first = {**provenance.start(command="x", seeds=[0], settings={}), "commit": "a" * 40}
    later = {**provenance.start(command="x", seeds=[1], settings={}), "commit": "b" * 40}
    before_stamping = [{"seed": 0}]  # a record written before per-record commits
    records = provenance.earlier_records(before_stamping) + [{"seed": 1}]
    provenance.stamp_records(records, later)
    assert [record["commit"] for record in records] == [None, "b" * 40]
    provenance.stamp_records(records, first)  # a stamp is never overwritten
    assert [record["commit"] for record in records] == [None, "b" * 40]
    line = provenance.describe({"provenance": provenance.finish(first), "records": records,
                                "resumed": [provenance.finish(later)]})
    assert "records per code commit: not recorded ×1, bbbbbbbbbb ×1" in line


def test_a_curated_list_is_described_as_curated():
    document = {"curated": {"issue": 44, "checked_against": ["../shared/papers"]}}
    assert provenance.describe(document) == "curated by hand in issue 44, checked against ../shared/papers"


def test_uncommitted_code_names_each_changed_file_whole(tmp_path, monkeypatch):
    status = " M bench/tables/fedkt.py\nM  bench/provenance.py\n M docs/results.md\n"
    monkeypatch.setattr(provenance, "_git", lambda *arguments, strip=True: status.strip() if strip else status)
    assert provenance._uncommitted_code() == ["bench/tables/fedkt.py", "bench/provenance.py"]
