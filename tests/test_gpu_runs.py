"""bench/gpu_runs.py: chunks that stop at their deadline, resume from the checkpoint and finish every round once."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import gpu_runs  # noqa: E402

# A resumable run of ROUNDS rounds (0.2 s each): its checkpoint lists the rounds done, rewritten atomically after
# every round; the result file appears once the last round is done.
ROUNDS = 8
FAKE_RUN = """
import json, sys, time
from pathlib import Path
checkpoint, result, rounds = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
done = json.loads(checkpoint.read_text()) if checkpoint.exists() else []
for round_index in range(len(done), rounds):
    time.sleep(0.2)
    done.append(round_index)
    checkpoint.with_suffix(".tmp").write_text(json.dumps(done))
    checkpoint.with_suffix(".tmp").replace(checkpoint)
result.write_text(json.dumps({"rounds": rounds, "done": done}))
"""


def fake_step(tmp_path: Path, name: str = "fake", *, after_stop: tuple[str, ...] = ()) -> gpu_runs.Step:
    script = tmp_path / "fake_run.py"
    script.write_text(FAKE_RUN)
    result = tmp_path / f"{name}.json"
    command = (sys.executable, str(script), str(tmp_path / f"{name}.checkpoint.json"), str(result), str(ROUNDS))
    return gpu_runs.Step(name, command, result, gpu_runs.privatekt_done(ROUNDS), after_stop=after_stop)


def test_a_chunk_stops_at_its_deadline_and_the_next_ones_resume_until_every_round_ran_once(tmp_path):
    step, status = fake_step(tmp_path), tmp_path / "status.json"
    assert gpu_runs.run_chunk([step], seconds=0.8, status_path=status, log=lambda _: None) == gpu_runs.MORE_TO_DO
    assert not step.json_path.exists()
    chunks = 1
    while gpu_runs.run_chunk([step], seconds=1.5, status_path=status, log=lambda _: None) == gpu_runs.MORE_TO_DO:
        chunks += 1
        assert chunks < 20
    assert json.loads(step.json_path.read_text())["done"] == list(range(ROUNDS))  # none lost, none twice
    recorded = json.loads(status.read_text())["steps"]["fake"]
    assert len(recorded["chunks"]) == chunks + 1 and recorded["done"] is True
    assert recorded["chunks"][0]["ended"] == "stopped at the deadline" and recorded["chunks"][-1]["ended"] == "exited"


def test_done_steps_are_skipped_a_stopped_step_writes_its_partial_result_and_a_failed_one_stops_the_plan(tmp_path):
    status = tmp_path / "status.json"
    skipped = gpu_runs.Step("never run", (sys.executable, "-c", "raise SystemExit(3)"), tmp_path / "x.json",
                            lambda path: True)
    partial = tmp_path / "partial.txt"
    stopped = fake_step(tmp_path, "stopped", after_stop=(sys.executable, "-c", f"open({str(partial)!r}, 'w')"))
    assert gpu_runs.run_chunk([skipped, stopped], seconds=0.5, status_path=status,
                              log=lambda _: None) == gpu_runs.MORE_TO_DO
    assert partial.exists() and "never run" not in json.loads(status.read_text())["steps"]
    failing = gpu_runs.Step("failing", (sys.executable, "-c", "raise SystemExit(3)"), tmp_path / "y.json",
                            lambda path: False)
    assert gpu_runs.run_chunk([failing, stopped], seconds=5, status_path=status, log=lambda _: None) == 1
    assert json.loads(status.read_text())["steps"]["failing"]["chunks"][0]["ended"] == "failed (exit 3)"


def test_every_plan_names_existing_scripts_and_the_chunk_fits_a_device_command(capsys):
    for plan, count in (("privatekt-round-500", 6), ("selective-fd-authors-rounds", 9), ("fedkt-mnist-paper", 10),
                        ("fedkt-mnist-tables-6-7", 40)):
        assert gpu_runs.main([plan, "--dry-run"]) == 0
        commands = capsys.readouterr().out.splitlines()
        assert len(commands) == count
        assert all(Path(line.split()[2]).is_file() for line in commands)
    with pytest.raises(SystemExit) as error:
        gpu_runs.main(["fedkt-mnist-paper", "--chunk-minutes", "12"])
    assert error.value.code == 2 and "--chunk-minutes must be in (0, 10]" in capsys.readouterr().err


def test_the_fedkt_tables_6_7_plan_runs_each_mnist_cell_and_seed_once_and_knows_a_finished_one(tmp_path, monkeypatch,
                                                                                               capsys):
    monkeypatch.setattr(gpu_runs, "RESULTS", tmp_path)
    steps = gpu_runs.fedkt_tables_6_7_plan(argparse.Namespace(seeds=None, n_jobs=10, device="cuda"))
    runs = [(step.command[step.command.index("--cells") + 1], step.command[step.command.index("--seeds") + 1])
            for step in steps]
    cells = ["1,5", "2,5", "3,5", "4,5", "5,5", "2,10", "2,15", "2,20"]  # Table 7's t = 5 is Table 6's s = 2
    assert runs == [(cell, str(seed)) for seed in range(5) for cell in cells]  # seed by seed
    assert all(step.json_path == tmp_path / "fedkt_tables_6_7_mnist.json" for step in steps)
    assert all(("--datasets", "MNIST", "--tables", "6", "7") == step.command[2:7] for step in steps)
    assert all(step.command[-6:-1] == ("--n-jobs", "10", "--device", "cuda", "--json") for step in steps)
    (tmp_path / "fedkt_tables_6_7_mnist.json").write_text(json.dumps({"records": [
        {"cell": "T6/MNIST/s=1/t=5", "seed": 0, "accuracy": 89.0},
        {"cell": "T7/MNIST/s=2/t=20", "seed": 0, "failed": "every voted label in one class"}]}))
    assert [step.done(step.json_path) for step in steps[:8]] == [True] + [False] * 6 + [True]
    assert gpu_runs.main(["fedkt-mnist-tables-6-7", "--seeds", "0", "--dry-run"]) == 0
    assert [line[:6] for line in capsys.readouterr().out.splitlines()] == ["done  "] + ["to do "] * 6 + ["done  "]
