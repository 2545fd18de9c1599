"""Argument checks shared by the accounting core.

Every public entry point validates its arguments before doing any work and
raises ``ValueError`` (bad value) or ``TypeError`` (bad type) with a message
that names the argument, the value received and the valid range.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any, TypeGuard

import numpy as np

#: The largest pure ε of one answer (one noisy-max query, one randomized-response label) privfed accounts:
#: e^ε must fit a float64 (its largest is e^709.78); no meaningful release comes near it.
MAX_EPSILON_PER_ANSWER = 700.0

__all__ = [
    "MAX_COUNT",
    "check_at_most",
    "check_choice",
    "check_delta",
    "check_guess_counts",
    "check_int_at_least",
    "check_nonnegative_int_array",
    "check_orders",
    "check_positive_finite",
    "check_probability",
    "check_recorded_int",
    "check_votes",
]


#: Largest count accepted in a vote or count array: 2⁵³, exact both as int64 and as float64.
MAX_COUNT = 2**53


def _is_real(value: object) -> TypeGuard[numbers.Real]:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_positive_finite(name: str, value: object) -> float:
    """Return ``value`` as a float, requiring 0 < value < inf."""
    if not _is_real(value):
        raise TypeError(f"{name} must be a real number, got {value!r} of type {type(value).__name__}")
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return value


def check_at_most(name: str, value: float, maximum: float, why: str) -> float:
    """Return ``value`` if it is <= ``maximum``; ``why`` says what the limit protects."""
    if value > maximum:
        raise ValueError(f"{name} must be <= {maximum:g} ({why}), got {value!r}")
    return value


def check_delta(value: object, name: str = "delta") -> float:
    """Return δ as a float, requiring 0 < δ < 1."""
    if not _is_real(value):
        raise TypeError(f"{name} must be a real number in (0, 1), got {value!r}")
    value = float(value)
    if not (0.0 < value < 1.0):
        raise ValueError(f"{name} must be in the open interval (0, 1), got {value!r}")
    return value


def check_guess_counts(num_correct: object, num_guesses: object, num_canaries: object) -> tuple[int, int, int]:
    """A one-run audit's counts (v correct of r guesses among m canaries) as ints, 0 ≤ v ≤ r ≤ m and r ≥ 1."""
    num_canaries = check_int_at_least("num_canaries", num_canaries, 1)
    num_guesses = check_int_at_least("num_guesses", num_guesses, 1)
    if num_guesses > num_canaries:
        raise ValueError(f"num_guesses must be in [1, num_canaries={num_canaries}], got {num_guesses}")
    num_correct = check_int_at_least("num_correct", num_correct, 0)
    if num_correct > num_guesses:
        raise ValueError(f"num_correct must be in [0, num_guesses={num_guesses}], got {num_correct}")
    return num_correct, num_guesses, num_canaries


def check_probability(name: str, value: object, *, open_low: bool = True, open_high: bool = True) -> float:
    """Return a probability, by default requiring it in the open interval (0, 1)."""
    if not _is_real(value):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    low_ok = value > 0.0 if open_low else value >= 0.0
    high_ok = value < 1.0 if open_high else value <= 1.0
    if not (math.isfinite(value) and low_ok and high_ok):
        interval = ("(" if open_low else "[") + "0, 1" + (")" if open_high else "]")
        raise ValueError(f"{name} must be in {interval}, got {value!r}")
    return value


def check_int_at_least(name: str, value: object, minimum: int) -> int:
    """Return ``value`` as an int, requiring an integer >= ``minimum``."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        number = int(value)
    elif _is_real(value) and float(value).is_integer():
        number = int(math.trunc(value))
    else:
        raise TypeError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if number < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {number!r}")
    return number


def check_recorded_int(parameters: Mapping[str, Any], name: str, low: int, high: int | None = None) -> int:
    """Return ``parameters[name]`` of a mechanism record, requiring an integer in [low, high] (no upper bound when
    ``high`` is None); a float, a bool or a missing value is refused, not converted."""
    value = parameters.get(name)
    number = int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else None
    if number is None or number < low or (high is not None and number > high):
        bound = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
        raise ValueError(f"parameters.{name} must be {bound}, got {value!r}")
    return number


def check_choice(name: str, value: object, choices: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``choices``."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def check_orders(orders: object, name: str = "orders") -> np.ndarray:
    """Return Rényi orders as a 1-D float array, each finite and > 1."""
    try:
        array = np.asarray(orders, dtype=float)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be a sequence of real numbers > 1, got {orders!r}") from error
    array = np.atleast_1d(array)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence of Rényi orders > 1, got shape {array.shape}")
    bad = ~np.isfinite(array) | (array <= 1.0)
    if bad.any():
        raise ValueError(
            f"{name} must all be finite Rényi orders > 1 (privfed uses α > 1; the papers' moment λ is α − 1), "
            f"got {array[bad][0]!r}"
        )
    return array


def check_nonnegative_int_array(name: str, values: object, *, ndim: int) -> np.ndarray:
    """Return ``values`` as an int64 array of the given rank with entries >= 0.

    Integer dtypes are accepted as they are; float arrays are accepted when every
    entry is integral (vote files written as floats).
    """
    try:
        array = np.asarray(values)
    except Exception as error:  # pragma: no cover - numpy raises many kinds here
        raise TypeError(f"{name} must be an array of non-negative integers, got {type(values).__name__}") from error
    if array.dtype == object or not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)
                                     or array.dtype == bool):
        raise ValueError(f"{name} must hold non-negative integers, got dtype {array.dtype}")
    if array.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-D array, got shape {array.shape}")
    if np.issubdtype(array.dtype, np.floating):
        if not np.isfinite(array).all() or not (array == np.round(array)).all():
            raise ValueError(f"{name} must hold non-negative integers, got non-integral or non-finite values")
    if array.size and array.min() < 0:
        raise ValueError(f"{name} must hold non-negative integers, got a minimum of {array.min()!r}")
    if array.size and array.max() > MAX_COUNT:
        raise ValueError(f"{name} must hold integers in [0, 2**53] (exact as float64 and int64), "
                         f"got a maximum of {array.max()!r}")
    return array.astype(np.int64, copy=False)


def check_votes(votes: object, name: str = "votes") -> np.ndarray:
    """Return a vote matrix of shape (queries, classes): non-negative integers, >= 1 query, >= 2 classes."""
    array = check_nonnegative_int_array(name, votes, ndim=2)
    if array.shape[0] < 1:
        raise ValueError(f"{name} must have at least one query (row), got shape {array.shape}")
    if array.shape[1] < 2:
        raise ValueError(f"{name} must have at least 2 classes (columns), got shape {array.shape}")
    return array
