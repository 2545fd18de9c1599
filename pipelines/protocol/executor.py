"""Running party-side work: pure task functions mapped by an executor.

Each unit of party-side work (train a party's teachers, label its queries, train
its students) is a *pure* function of one :class:`PartyTask` — the party's data,
its index, a seed and a configuration — returning a picklable result. Nothing else
is shared, so the same function runs unchanged on one core, on a joblib pool, or on
a cluster engine that implements the one-method :class:`Executor` protocol.

Seeds are derived from one ``random_state`` with
:meth:`numpy.random.SeedSequence.spawn` (see :func:`privfed.pipelines.protocol.seeds.spawn_seeds`):
task ``i`` always gets the same seed, whichever executor runs it and in whatever
order, so results are identical for ``n_jobs=1`` and ``n_jobs=2``. ``n_jobs=None`` lets the executor
choose from the cores that are idle when the tasks start (:func:`idle_workers`).

Examples
--------
>>> def count(task):
...     return task.index, len(task.data)
>>> run_party_tasks(count, [[1, 2], [3]], config=None, random_state=0, executor=SerialExecutor())
[(0, 2), (1, 1)]
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar, runtime_checkable

from joblib import Parallel, delayed

from .progress import check_progress, progress_bar
from .seeds import RandomState, spawn_seeds

__all__ = ["Executor", "JoblibExecutor", "PartyTask", "SerialExecutor", "idle_workers", "run_party_tasks"]

T = TypeVar("T")
R = TypeVar("R")
D = TypeVar("D")
C = TypeVar("C")


def idle_workers() -> int:
    """How many workers pay off now: the cores this process may run on, less those other processes keep busy.

    The busy cores are read from the 1-minute load average, this process counted as the first worker's own
    core: ``floor(cores − load + 1)``, between 1 and the number of cores. A second worker pays only on a core
    nobody else uses: on a busy core it halves the first worker's share and costs extra CPU for its start and
    its messages (docs/pipelines.md, *How many workers*). Where the load average is unknown, every core is
    counted idle.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return max(1, min(cores, math.floor(cores - load + 1.0)))


@runtime_checkable
class Executor(Protocol):
    """Anything that maps a function over tasks and returns results in task order."""

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        """Return ``[fn(task) for task in tasks]``, in task order."""
        ...


@dataclass(frozen=True)
class SerialExecutor:
    """Run tasks one after the other in this process.

    Parameters
    ----------
    progress : bool or None, default=False
        Show a tqdm progress bar: ``None`` on a terminal only, ``True`` always, ``False`` never.
    description : str, default="party tasks"
        Label of the progress bar.
    """

    progress: bool | None = False
    description: str = "party tasks"

    def __post_init__(self) -> None:
        check_progress(self.progress)

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        """Return ``[fn(task) for task in tasks]``."""
        tasks = list(tasks)
        bar = progress_bar(tasks, progress=self.progress, desc=self.description)
        return [fn(task) for task in bar]


@dataclass(frozen=True)
class JoblibExecutor:
    """Run tasks on a joblib pool (processes by default), results in task order.

    Parameters
    ----------
    n_jobs : int or None, default=1
        Number of workers (joblib's convention: ``-1`` uses all cores, ``-2`` all
        but one, and so on; ``0`` is refused). ``1`` runs in this process. ``None``:
        :func:`idle_workers` when the tasks start (1 on a machine whose other cores are busy).
    progress : bool or None, default=None
        Show a tqdm progress bar that advances as results arrive: ``None`` on a terminal
        only, ``True`` always, ``False`` never.
    description : str, default="party tasks"
        Label of the progress bar.
    backend : str or None, default=None
        joblib backend (``"loky"`` processes when ``None``; ``"threading"`` suits
        work that releases the GIL, such as torch or xgboost).

    Notes
    -----
    Task functions and results must be picklable for process backends: define
    task functions at module level.
    """

    n_jobs: int | None = 1
    progress: bool | None = None
    description: str = "party tasks"
    backend: str | None = None

    def __post_init__(self) -> None:
        n_jobs = self.n_jobs
        if n_jobs is not None and (isinstance(n_jobs, bool) or not isinstance(n_jobs, int)):
            raise TypeError(f"n_jobs must be a non-zero integer or None (the idle cores), got {n_jobs!r}")
        if n_jobs == 0:
            raise ValueError("n_jobs must be a non-zero integer (>= 1, or negative as in joblib), got 0")
        check_progress(self.progress)

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        """Return ``[fn(task) for task in tasks]``, computed on the pool."""
        tasks = list(tasks)
        n_jobs = idle_workers() if self.n_jobs is None else self.n_jobs
        parallel = Parallel(n_jobs=n_jobs, backend=self.backend, return_as="generator")
        results = parallel(delayed(fn)(task) for task in tasks)
        bar = progress_bar(results, progress=self.progress, total=len(tasks), desc=self.description)
        return list(bar)


@dataclass(frozen=True, eq=False)
class PartyTask(Generic[D, C]):
    """One unit of party-side work: everything a pure task function may use.

    Attributes
    ----------
    data : D
        The party's data (for example an ``(X, y)`` pair).
    index : int
        The party's position among the parties (0-based).
    seed : int
        A 32-bit seed for this task, derived from the run's ``random_state``.
    config : C
        Settings shared by all tasks (hyper-parameters, model prototypes).
    """

    data: D
    index: int
    seed: int
    config: C


def run_party_tasks(
    fn: Callable[[PartyTask[D, C]], R],
    party_data: Sequence[D],
    *,
    config: C,
    random_state: RandomState = None,
    executor: Executor | None = None,
    n_jobs: int | None = 1,
    progress: bool | None = None,
) -> list[R]:
    """Run ``fn`` once per party and return the results in party order.

    Parameters
    ----------
    fn : callable
        A pure function of a :class:`PartyTask`.
    party_data : sequence
        One item of data per party.
    config : object
        Passed unchanged to every task.
    random_state : None, int, numpy SeedSequence or Generator
        Source of the per-task seeds (``SeedSequence.spawn``).
    executor : Executor or None
        Where to run; by default a :class:`JoblibExecutor` with ``n_jobs`` and
        ``progress``.
    n_jobs, progress
        Used only when ``executor`` is None (``n_jobs=None``: :func:`idle_workers`).

    Returns
    -------
    list
        ``[fn(task_0), fn(task_1), ...]``.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {fn!r}")
    party_data = list(party_data)
    if executor is None:
        executor = JoblibExecutor(n_jobs=n_jobs, progress=progress)
    elif not callable(getattr(executor, "map", None)):
        raise TypeError(f"executor must have a map(fn, tasks) method, got {executor!r}")
    seeds = spawn_seeds(random_state, len(party_data))
    tasks = [
        PartyTask(data=data, index=index, seed=seed, config=config)
        for index, (data, seed) in enumerate(zip(party_data, seeds))
    ]
    return executor.map(fn, tasks)

