"""Log-space arithmetic shared by the noisy-max bounds and their smooth sensitivity."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["log1mexp"]


def log1mexp(x: np.ndarray) -> np.ndarray:
    """ln(1 − eˣ) for x ≤ 0, accurate over the whole range (Mächler 2012).

    ``log1p(-exp(x))`` for x < −ln 2, where eˣ is small and log1p keeps its
    digits; ``log(-expm1(x))`` for x ≥ −ln 2, where 1 − eˣ is not small.
    (``log(-expm1(x))`` alone rounds ln(1 − q) to 0 for q below ~10⁻¹⁶.)
    """
    x = np.asarray(x, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x < -math.log(2.0), np.log1p(-np.exp(x)), np.log(-np.expm1(x)))
