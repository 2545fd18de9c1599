"""The renderers and raw-results writers of docs/results.md's accounting, Selective-FD, audit, DP-SGD and speed
tables (bench/tables/selective_fd.py, speed.py, audit.py, dpsgd.py)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.tables import selective_fd  # noqa: E402
from bench.tables.dpsgd import _rate  # noqa: E402
from bench.tables.speed import accounting_markdown  # noqa: E402


def _document(seed: int, accuracy: dict[str, float]) -> dict:
    return {"settings": {"seed": seed},
            "results": [{"dataset": "mnist", "setting": "strong", "method": method, "rounds": 100,
                         "accuracy_mean": value} for method, value in accuracy.items()]}


def test_the_seeds_table_gives_mean_sd_and_the_t_interval_and_gains_only_over_seeds_with_both_methods():
    soft = [0.93, 0.95, 0.91]
    documents = [_document(seed, {"Selective-FD soft": value, **({"FedMD soft": 0.90} if seed < 2 else {})})
                 for seed, value in enumerate(soft)]
    text = selective_fd.seeds_markdown(documents)
    values = [100 * value for value in soft]
    mean, sd = sum(values) / 3, math.sqrt(sum((v - sum(values) / 3) ** 2 for v in values) / 2)
    half = stats.t.ppf(0.975, 2) * sd / math.sqrt(3)
    row = next(line for line in text.split("\n") if line.startswith("| mnist | strong | soft |"))
    assert f"{mean:.2f} ± {sd:.2f} [{mean - half:.2f}, {mean + half:.2f}]" in row
    assert "| 0, 1, 2 |" in row and "(seeds 0, 1)" in row  # FedMD ran on two seeds only
    assert "4.00 ± 1.41" in row  # the gain over seeds 0 and 1: 3 and 5 points
    assert "| mnist | strong | gain, soft labels | +3.00 | +5.00 | – |" in text


def test_a_single_seed_is_printed_as_such_not_as_an_interval():
    text = selective_fd.seeds_markdown([_document(0, {"Selective-FD hard": 0.8})])
    assert "80.00 (one seed)" in text


@pytest.mark.slow  # imports torch and the pipelines in a subprocess
@pytest.mark.skipif(importlib.util.find_spec("torch") is not None and __import__("torch").cuda.is_available(),
                    reason="this machine has CUDA: --device cuda is valid here")
def test_the_selective_fd_script_refuses_cuda_without_a_gpu_before_any_work():
    run = subprocess.run([sys.executable, "bench/selective_fd.py", "--device", "cuda", "--rounds", "1"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 2 and "--device: 'cuda' but CUDA is not available" in run.stderr


def test_the_accounting_benchmark_writes_provenance_and_its_table_renders(tmp_path):
    path = tmp_path / "throughput.json"
    run = subprocess.run([sys.executable, "bench/accounting.py", "--queries", "2000", "--slice", "200", "--repeats",
                          "1", "--json", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr[-2000:]
    document = json.loads(path.read_text())
    assert document["provenance"]["settings"]["queries"] == 2000 and len(document["provenance"]["load_end"]) == 3
    assert [row["analysis"] for row in document["rows"]] == ["classic", "tight"]
    assert all(row["epsilon"] <= row["epsilon_data_independent"] for row in document["rows"])
    assert accounting_markdown(document) in run.stdout


@pytest.mark.parametrize(("value", "text"), [(1e-3, "10⁻³"), (5e-3, "5 × 10⁻³"), (2e-2, "2 × 10⁻²")])
def test_learning_rates_are_written_as_the_page_writes_them(value, text):
    assert _rate(value) == text
