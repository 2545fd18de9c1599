"""Executors: results in task order, seeds that depend only on random_state, serial == parallel."""

from __future__ import annotations

import time

import numpy as np
import pytest
from privfed.pipelines.protocol import executor as executor_module
from privfed.pipelines.protocol.executor import (
    Executor,
    JoblibExecutor,
    PartyTask,
    SerialExecutor,
    idle_workers,
    run_party_tasks,
)
from privfed.pipelines.protocol.seeds import spawn_seeds


def fit_bagged_least_squares(task: PartyTask) -> np.ndarray:
    """A party-side task: fit on a bootstrap sample drawn with the task seed, score the shared probe set."""
    X, y = task.data
    rows = np.random.default_rng(task.seed).integers(0, len(y), size=len(y))
    weights, *_ = np.linalg.lstsq(X[rows], y[rows], rcond=None)
    return task.config["probe"] @ weights


def slow_when_first(task: PartyTask) -> tuple[int, int]:
    """Finishes out of order on a pool: the first task sleeps longest."""
    time.sleep(0.2 if task.index == 0 else 0.0)
    return task.index, task.seed


def sum_of_random_draws(task: PartyTask) -> float:
    return float(np.random.default_rng(task.seed).normal(size=10).sum() + task.data)


@pytest.fixture(scope="module")
def parties():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(240, 6))
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    probe = rng.normal(size=(20, 6))
    return [(X[i::4], y[i::4]) for i in range(4)], {"probe": probe}


def test_executors_satisfy_the_protocol():
    assert not isinstance(object(), Executor)
    for executor in (SerialExecutor(), JoblibExecutor(n_jobs=2, progress=False)):
        assert isinstance(executor, Executor)
        assert executor.map(abs, [-3, 1, -2]) == [3, 1, 2]


def test_parallel_equals_serial(parties):
    data, config = parties
    serial = run_party_tasks(fit_bagged_least_squares, data, config=config, random_state=7, executor=SerialExecutor())
    parallel = run_party_tasks(fit_bagged_least_squares, data, config=config, random_state=7, n_jobs=2, progress=False)
    assert len(serial) == len(parallel) == 4
    for a, b in zip(serial, parallel):
        np.testing.assert_array_equal(a, b)


def test_results_keep_task_order_even_when_tasks_finish_out_of_order():
    tasks = [PartyTask(data=None, index=i, seed=i, config=None) for i in range(6)]
    results = JoblibExecutor(n_jobs=2, progress=False).map(slow_when_first, tasks)
    assert [index for index, _ in results] == list(range(6))


def test_seeds_depend_only_on_random_state_and_position():
    data = [0.0, 1.0, 2.0]
    first = run_party_tasks(sum_of_random_draws, data, config=None, random_state=11, executor=SerialExecutor())
    again = run_party_tasks(sum_of_random_draws, data, config=None, random_state=11, n_jobs=2, progress=False)
    other = run_party_tasks(sum_of_random_draws, data, config=None, random_state=12, executor=SerialExecutor())
    assert first == again
    assert first != other
    seeds = spawn_seeds(11, 3)
    assert len(set(seeds)) == 3
    assert all(0 <= seed < 2**32 for seed in seeds)
    # A longer run keeps the seeds of the first tasks (spawned children are positional).
    assert spawn_seeds(11, 5)[:3] == seeds


def test_tasks_carry_index_seed_and_config():
    tasks_seen = SerialExecutor().map(lambda task: task, [PartyTask("d", 0, 1, "c")])
    assert tasks_seen[0].data == "d" and tasks_seen[0].config == "c"
    results = run_party_tasks(lambda task: (task.index, task.seed, task.config), ["a", "b"], config={"k": 1},
                              random_state=3, executor=SerialExecutor())
    assert results == [(0, spawn_seeds(3, 2)[0], {"k": 1}), (1, spawn_seeds(3, 2)[1], {"k": 1})]


def test_progress_bar_can_be_switched_on_and_off(capsys):
    SerialExecutor(progress=False, description="quiet run").map(abs, [1, 2])
    assert "quiet run" not in capsys.readouterr().err
    JoblibExecutor(n_jobs=1, progress=True, description="loud run").map(abs, [1, 2])
    assert "loud run" in capsys.readouterr().err


def test_a_custom_executor_can_be_plugged_in():
    class Reversing:
        """Runs tasks backwards but returns results in task order, as the protocol requires."""

        def map(self, fn, tasks):
            return list(reversed([fn(task) for task in reversed(list(tasks))]))

    expected = run_party_tasks(sum_of_random_draws, [1.0, 2.0], config=None, random_state=1, executor=SerialExecutor())
    reversed_run = run_party_tasks(sum_of_random_draws, [1.0, 2.0], config=None, random_state=1, executor=Reversing())
    assert reversed_run == expected


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_jobs": 0}, ValueError, "n_jobs"),
        ({"n_jobs": 1.5}, TypeError, "n_jobs"),
        ({"n_jobs": "auto"}, TypeError, "n_jobs"),
        ({"progress": "yes"}, TypeError, "progress"),
    ],
)
def test_joblib_executor_validates(kwargs, error, match):
    with pytest.raises(error, match=match):
        JoblibExecutor(**kwargs)


def test_run_party_tasks_validates_before_running():
    with pytest.raises(TypeError, match="fn"):
        run_party_tasks("not callable", [1], config=None)
    with pytest.raises(TypeError, match="executor"):
        run_party_tasks(abs, [1], config=None, executor=object())
    with pytest.raises(ValueError, match="random_state"):
        run_party_tasks(abs, [1], config=None, random_state=-1, executor=SerialExecutor())


@pytest.mark.parametrize(("load", "expected"), [(0.0, 2), (1.0, 2), (1.6, 1), (2.0, 1), (9.5, 1)])
def test_idle_workers_counts_the_cores_other_processes_leave_free(monkeypatch, load, expected):
    """Two cores: this process alone (load ≈ 1) gets both; one more busy process (load ≈ 2) leaves one."""
    monkeypatch.setattr(executor_module.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(executor_module.os, "getloadavg", lambda: (load, load, load))
    assert idle_workers() == expected


def test_n_jobs_none_runs_on_the_idle_workers_with_the_same_results(monkeypatch, parties):
    chosen = []
    monkeypatch.setattr(executor_module, "idle_workers", lambda: chosen.append(2) or 2)
    data, config = parties
    serial = run_party_tasks(fit_bagged_least_squares, data, config=config, random_state=3, n_jobs=1)
    auto = run_party_tasks(fit_bagged_least_squares, data, config=config, random_state=3, n_jobs=None)
    assert chosen == [2]
    for a, b in zip(serial, auto):
        np.testing.assert_array_equal(a, b)
