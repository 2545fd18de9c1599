"""bench/audit_false_alarms.py: one record per audit run, appended as it finishes, resumed without redoing a seed,
and rendered into the docs/results.md table."""

from __future__ import annotations

import json

from bench import audit_false_alarms


def test_runs_are_appended_resumed_and_tabulated(tmp_path):
    arguments = ["--audit", "privatekt-eps5-mechanism", "--fit-runs", "1", "--results", str(tmp_path)]
    assert audit_false_alarms.main([*arguments, "--runs", "1"]) == 0
    assert audit_false_alarms.main([*arguments, "--runs", "2"]) == 0
    path = audit_false_alarms.results_path("privatekt-eps5-mechanism", 0.95, tmp_path)
    document = json.loads(path.read_text(encoding="utf-8"))
    first, second = document["records"]
    assert [first["seed"], second["seed"]] == [0, 1] and document["resumed"][0]["seeds"] == [1]
    assert first["claimed_epsilon"] == 5.0 and first["delta"] == 0.0 and first["can_refute"]
    assert first["audit_cpu_s"] > 0 and first["fit_cpu_s"] > 0 and "fit_cpu_s" not in second
    assert first["epsilon_lower"] != second["epsilon_lower"] and len(first["commit"]) == 40
    row = audit_false_alarms.table([document]).splitlines()[2]
    assert row.startswith("| `privatekt-eps5-mechanism` (mechanism) |") and "| 0.95 | 2 |" in row


def test_the_stated_mechanism_false_alarms_are_simulated_on_the_same_design():
    stated = audit_false_alarms.stated_false_alarms(audit_false_alarms.AUDITS["privatekt-eps5-mechanism"], 20, 0.95)
    assert stated["claimed_epsilon"] == 5.0 and stated["delta"] == 0.0 and stated["runs"] == 20
    assert 0 <= stated["violations"] <= 5 and 0.8 * 5.0 < stated["mean_lower"] < 5.5


def test_a_finished_file_is_not_run_again(tmp_path):
    path = audit_false_alarms.results_path("privatekt-eps1-mechanism", 0.99, tmp_path)
    assert path.name == "audit_false_alarms_privatekt-eps1-mechanism_c99.json"
    path.write_text(json.dumps({"records": [{"seed": 0}]}), encoding="utf-8")
    assert audit_false_alarms.main(["--audit", "privatekt-eps1-mechanism", "--confidence", "0.99", "--runs", "1",
                                    "--results", str(tmp_path)]) == 0
    assert json.loads(path.read_text(encoding="utf-8")) == {"records": [{"seed": 0}]}


def test_a_second_process_s_seeds_are_merged_with_its_provenance(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    arguments = ["--audit", "privatekt-eps1-mechanism", "--runs", "1", "--fit-runs", "0"]
    assert audit_false_alarms.main([*arguments, "--results", str(first)]) == 0
    assert audit_false_alarms.main([*arguments, "--first-seed", "5", "--results", str(second)]) == 0
    other = audit_false_alarms.results_path("privatekt-eps1-mechanism", 0.95, second)
    assert audit_false_alarms.main([*arguments, "--results", str(first), "--merge", str(other)]) == 0
    merged = json.loads(audit_false_alarms.results_path("privatekt-eps1-mechanism", 0.95, first).read_text())
    assert [record["seed"] for record in merged["records"]] == [0, 5] and merged["resumed"][0]["seeds"] == [5]
