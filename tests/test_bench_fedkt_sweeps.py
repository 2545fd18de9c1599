"""bench/fedkt_sweeps.py on MNIST (FedKT Tables 6 and 7): its cells run only with ``--datasets MNIST``, at the
``mnist-l0-paper`` setting with the cell's s and t, one record per (cell, seed) that a rerun skips; the tables show
only the data sets that have records, so the committed Adult and cod-rna tables are unchanged.

No ../shared data: ``prepare`` is replaced by the official image protocol (``official_image_split``) on synthetic
"images", and the setting's MLPs train for one epoch.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from sklearn.datasets import make_classification

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import fedkt_sweeps  # noqa: E402  (bench/fedkt_sweeps.py; it imports bench/fedkt.py by name)

bench_fedkt = fedkt_sweeps.bench_fedkt
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def tiny_mnist(monkeypatch):
    """MNIST's split: the official image protocol on 600 synthetic rows (2 parties, MLPs of one epoch)."""
    X, y = make_classification(n_samples=600, n_features=12, n_informative=6, n_classes=3, random_state=0)
    X = X.astype("float32")
    calls = []

    def prepare(name, folder, protocol, parties, seed, rows_file=None, official_labels=False):
        calls.append((name, protocol, parties, seed))
        return bench_fedkt.official_image_split(X[:400], y[:400], X[400:], y[400:], parties, seed), "synthetic"

    setting = bench_fedkt.SETTINGS[fedkt_sweeps.MNIST_SETTING]
    tiny = bench_fedkt.mlp(1, 32, 1e-6)
    monkeypatch.setitem(bench_fedkt.SETTINGS, fedkt_sweeps.MNIST_SETTING,
                        replace(setting, parties=2, teacher=tiny, student=tiny))
    monkeypatch.setattr(bench_fedkt, "prepare", prepare)
    return calls


def run(monkeypatch, *arguments: str) -> None:
    monkeypatch.setattr(sys, "argv", ["fedkt_sweeps.py", *arguments])
    fedkt_sweeps.main()


def test_the_mnist_cells_are_the_papers_and_run_only_when_asked():
    mnist = fedkt_sweeps.selected_cells([6, 7], ["MNIST"], None)
    assert [(c.table, c.partitions, c.teachers) for c in mnist] == (
        [(6, s, 5) for s in range(1, 6)] + [(7, 2, 10), (7, 2, 15), (7, 2, 20)])  # Table 7's t = 5 is Table 6's s = 2
    assert [(c.paper_mean, c.paper_sd) for c in mnist] == [(89.2, 0.4), (90.5, 0.3), (89.9, 0.2), (90.1, 0.2),
                                                           (90.2, 0.2), (89.4, 0.2), (89.0, 0.4), (88.4, 0.3)]
    assert fedkt_sweeps.TABLE_7_PAPER_T5["MNIST"] == (90.5, 0.3)
    default = fedkt_sweeps.selected_cells([6, 7, 1], list(fedkt_sweeps.DEFAULT_DATASETS), None)
    assert {c.data for c in default} == {"Adult", "cod-rna"} and len(default) == 13
    assert fedkt_sweeps.selected_cells([7], ["MNIST"], [(2, 15)]) == [mnist[6]]


def test_each_cell_and_seed_reaches_the_json_once_with_its_s_and_t(tiny_mnist, monkeypatch, tmp_path, capsys):
    out = tmp_path / "mnist.json"
    arguments = ["--datasets", "MNIST", "--tables", "6", "7", "--cells", "1,5", "2,10", "--json", str(out)]
    run(monkeypatch, *arguments, "--seeds", "0")
    first = json.loads(out.read_text())["records"]
    assert [(r["cell"], r["seed"], r["partitions"], r["teachers"]) for r in first] == [
        ("T6/MNIST/s=1/t=5", 0, 1, 5), ("T7/MNIST/s=2/t=10", 0, 2, 10)]
    assert all(0 <= r["accuracy"] <= 100 and 0 < r["majority_class_accuracy"] < 100 for r in first)
    assert tiny_mnist == [("mnist", "reference-code", 2, 0)] * 2  # the official code's protocol, the setting's parties
    run(monkeypatch, *arguments, "--seeds", "0", "1")
    document = json.loads(out.read_text())
    assert [(r["cell"], r["seed"]) for r in document["records"]] == [
        ("T6/MNIST/s=1/t=5", 0), ("T7/MNIST/s=2/t=10", 0), ("T6/MNIST/s=1/t=5", 1), ("T7/MNIST/s=2/t=10", 1)]
    assert document["records"][:2] == first and len(tiny_mnist) == 4  # seed 0 kept, not rerun
    assert document["provenance"]["device"] == "cpu" and len(document["resumed"]) == 1
    table_6 = capsys.readouterr().out
    assert "| MNIST | 89.2 ± 0.4 |" in table_6 and "| Adult |" not in table_6  # only the data sets run


def test_a_cell_the_tables_do_not_have_is_refused_before_any_work(monkeypatch, tmp_path, capsys):
    for arguments, message in ((["--datasets", "Adult", "--cells", "2,20"], "--cells: no cell 2,20"),
                               (["--datasets", "MNIST", "--cells", "2x5"], "a cell is S,T")):
        with pytest.raises(SystemExit) as exit_info:
            run(monkeypatch, *arguments, "--json", str(tmp_path / "never.json"))
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "never.json").exists()


def test_the_tables_show_only_the_data_sets_with_records_and_a_partial_mnist_cell_plainly():
    from bench.tables import fedkt as tables_fedkt

    committed = json.loads((ROOT / "bench/results/fedkt_tables_6_7.json").read_text())
    assert fedkt_sweeps.datasets_run(committed["records"]) == ["Adult", "cod-rna"]
    mnist = [{"cell": "T6/MNIST/s=2/t=5", "seed": seed, "rows": "synthetic", "accuracy": accuracy,
              "majority_class_accuracy": 11.0} for seed, accuracy in ((0, 90.0), (1, 91.0))]
    mnist.append({"cell": "T6/MNIST/s=1/t=5", "seed": 0, "rows": "synthetic", "accuracy": 89.0,
                  "majority_class_accuracy": 11.0})
    both = [committed, {"records": mnist}]
    assert tables_fedkt.table_6([committed]) in tables_fedkt.table_6(both)  # the committed rows unchanged
    assert "| MNIST | 89.2 ± 0.4 | 89.0 (1) | 90.5 ± 0.3 | 90.5 ± 0.7" in tables_fedkt.table_6(both)
    assert "| MNIST | 90.5 ± 0.3 | 90.5 ± 0.7 [84.1, 96.9] (2) | 89.4 ± 0.2 | – |" in tables_fedkt.table_7(both)
    reference = json.loads((ROOT / "bench/results/fedkt_summary_reference_rows.json").read_text())
    welch = tables_fedkt.tables_6_7_welch([committed, {"records": mnist}, reference])
    assert "| Table 6, s = 1 | MNIST | 89.2 ± 0.4 | 89.0 (1) | – | – | – | – | – |" in welch
    assert "| Table 6, s = 2 | MNIST | 90.5 ± 0.3 | 90.50 ± 0.71 (2) |" in welch and "| 11.0 |" in welch
    without = tables_fedkt.tables_6_7_welch([committed, reference]).splitlines()
    assert [line for line in welch.splitlines() if "| MNIST |" not in line] == without  # committed rows unchanged
