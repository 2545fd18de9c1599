"""Random-state handling shared by the pipelines.

Every random choice in ``pipelines`` starts from one user-given ``random_state``
(``None``, an ``int``, a :class:`numpy.random.SeedSequence` or a
:class:`numpy.random.Generator`). Independent streams for parallel work are
derived with :meth:`numpy.random.SeedSequence.spawn`, so a task's seed depends
only on ``random_state`` and the task's position, never on how or where the task
is run.
"""

from __future__ import annotations

import numbers
from typing import TypeAlias

import numpy as np

__all__ = ["RandomState", "as_generator", "as_seed_sequence", "spawn_seeds"]

RandomState: TypeAlias = int | np.random.SeedSequence | np.random.Generator | None

# Seeds handed to tasks are 32-bit: scikit-learn accepts integer seeds in [0, 2**32 - 1].
_SEED_DTYPE = np.uint32


def as_seed_sequence(random_state: RandomState, name: str = "random_state") -> np.random.SeedSequence:
    """Return a :class:`numpy.random.SeedSequence` for ``random_state``.

    ``None`` draws fresh entropy from the operating system; an ``int`` (>= 0) seeds
    the sequence; a ``Generator`` is consumed to draw a 128-bit seed (so the caller's
    generator advances, as with any use of a generator).
    """
    if random_state is None:
        return np.random.SeedSequence()
    if isinstance(random_state, np.random.SeedSequence):
        return random_state
    if isinstance(random_state, np.random.Generator):
        return np.random.SeedSequence(random_state.integers(0, 2**32, size=4, dtype=np.uint64).tolist())
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {random_state!r}")
        return np.random.SeedSequence(int(random_state))
    raise TypeError(
        f"{name} must be None, a non-negative int, a numpy SeedSequence or a numpy Generator, "
        f"got {random_state!r} of type {type(random_state).__name__}"
    )


def as_generator(random_state: RandomState, name: str = "random_state") -> np.random.Generator:
    """Return a :class:`numpy.random.Generator`; a ``Generator`` is returned as it is."""
    if isinstance(random_state, np.random.Generator):
        return random_state
    return np.random.default_rng(as_seed_sequence(random_state, name))


def spawn_seeds(random_state: RandomState, n: int) -> list[int]:
    """Return ``n`` independent 32-bit integer seeds derived from ``random_state``.

    The ``i``-th seed comes from the ``i``-th child of
    ``SeedSequence(random_state).spawn(n)``, so it depends only on ``random_state``
    and ``i``. (A ``SeedSequence`` passed in is spawned from its current state, as
    numpy does; pass an ``int`` for reproducible seeds.)
    """
    children = as_seed_sequence(random_state).spawn(n)
    return [int(child.generate_state(1, dtype=_SEED_DTYPE)[0]) for child in children]
