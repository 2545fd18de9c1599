"""bench/fedkt_baselines.py: SOLO alone gives exactly what bench/fedkt.py records beside FedKT (same split, same
models, same seed), PATE is the paper's (one party, one partition of as many teachers as parties, no noise) on that
split, and a rerun with the same --json skips the seeds it holds."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from privfed.pipelines import federated_split
from privfed.pipelines.fedkt.estimator import CentralizedPATE
from sklearn.datasets import make_classification

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import fedkt as bench_fedkt  # noqa: E402
from bench import fedkt_baselines  # noqa: E402

SETTING = bench_fedkt.Setting("synthetic", 4, 1, 2, bench_fedkt.tree, bench_fedkt.tree, (0.0, None), baselines=True)


@pytest.fixture
def synthetic(monkeypatch):
    """A 'synthetic' setting whose split is drawn from make_classification, for both scripts."""
    X, y = make_classification(n_samples=900, n_features=8, n_informative=5, n_classes=3, random_state=0)

    def prepare(name, folder, protocol, parties, seed, rows_file=None, official_labels=False):
        split = federated_split(X[:700], y[:700], n_parties=parties, beta=0.5, public_size=150, X_test=X[700:],
                                y_test=y[700:], random_state=seed)
        return split, "synthetic rows"

    monkeypatch.setitem(bench_fedkt.SETTINGS, "synthetic", SETTING)
    monkeypatch.setattr(bench_fedkt, "prepare", prepare)
    monkeypatch.setattr(fedkt_baselines, "prepare", prepare)


@pytest.mark.parametrize("seed", [0, 3])
def test_solo_equals_the_run_beside_fedkt_and_pate_is_the_papers_on_the_same_split(synthetic, seed):
    alone = fedkt_baselines.run_baselines("synthetic", Path("."), "standard", seed, rows_file=None)
    beside = bench_fedkt.run_seed("synthetic", SETTING, Path("."), "standard", seed, n_jobs=1, rows_file=None,
                                  baselines=True, unit="party", model_seed=seed)
    assert alone["solo_accuracy"] == beside["solo_accuracy"]
    assert alone["majority_class_accuracy"] == beside["majority_class_accuracy"]
    assert 0 < alone["solo_accuracy"] < 100 and alone["solo_seconds"] > 0
    split, _ = bench_fedkt.prepare("synthetic", Path("."), "standard", SETTING.parties, seed=seed)
    papers = CentralizedPATE(SETTING.teacher(), SETTING.student(), n_partitions=1, n_teachers=SETTING.parties,
                             random_state=seed).fit(split.parties, split.X_public)
    assert alone["centralized_pate_accuracy"] == 100 * papers.score(split.X_test, split.y_test)
    assert (alone["pate_partitions"], alone["pate_teachers"]) == (1, SETTING.parties)


def test_a_rerun_with_the_same_json_skips_the_seeds_it_holds(synthetic, tmp_path, monkeypatch, capsys):
    out = tmp_path / "baselines.json"
    command = ["fedkt_baselines.py", "--settings", "synthetic", "--seeds", "0", "--json", str(out)]
    monkeypatch.setattr(sys, "argv", command)
    fedkt_baselines.main()
    first = json.loads(out.read_text())
    assert [r["seed"] for r in first["records"]] == [0] and first["provenance"]["seeds"] == [0]
    monkeypatch.setattr(sys, "argv", command[:4] + ["0", "1"] + command[5:])
    fedkt_baselines.main()
    second = json.loads(out.read_text())
    assert [r["seed"] for r in second["records"]] == [0, 1]
    assert second["records"][0] == first["records"][0]  # kept, not rerun
    assert "synthetic seed 0: already in the JSON file, skipped" in capsys.readouterr().out
    assert np.isfinite(second["records"][1]["centralized_pate_accuracy"])


def test_an_unknown_setting_is_refused_before_any_work(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["fedkt_baselines.py", "--settings", "mnist-l9"])
    with pytest.raises(SystemExit) as exit_info:
        fedkt_baselines.main()
    assert exit_info.value.code == 2
    assert "--settings: unknown ['mnist-l9']" in capsys.readouterr().err
