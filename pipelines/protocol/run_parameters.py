"""The parameters each step passed to its noise function, as run: the record the parameter audit reads back.

Every party step and server step that draws noise a guarantee relies on calls :func:`record_draw` with the
parameters it passes to the noise function (a Laplace scale, a Gaussian σ, a Skellam share's variance, a
randomized-response keep probability, DP-SGD's noise multiplier and sampling rate), at the call. An estimator's
``fit`` collects them with :func:`recording` into ``run_parameters_`` (a list of plain dicts), which
:func:`privfed.save_bundle` ships as ``run_parameters.json`` and :mod:`privfed.audit.parameters` compares with
the ledger: the ledger says what was accounted, this record says what the code did.

These are public parameters, never noise, seeds or data; a draw with the same step, law and parameters is
recorded once, with how many times it ran. Draws made in another process (a party in a worker process, a
Flower client) are recorded there, not in the estimator's record: the record of an in-process fit
(``n_jobs=1``, the default) holds every step's draws.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

__all__ = ["LAWS", "RunParameters", "record_draw", "recording", "records_run_parameters"]

#: The laws a draw may declare, and the parameters each one records.
LAWS: Mapping[str, tuple[str, ...]] = {
    "laplace": ("scale",),  # Laplace(scale): a noisy max at 1/γ, FedKD's ensemble noise at 1/γ
    "gaussian": ("sigma",),  # N(0, σ²): GNMax, DP selector
    "gaussian-threshold": ("sigma",),  # Confident GNMax's threshold step, N(0, σ₁²)
    "skellam-share": ("variance",),  # one party's Skellam share
    "randomized-response": ("keep_probability", "num_classes"),
    "dp-sgd": ("noise_multiplier", "sample_rate"),  # the optimizer's σ (noise sd σ·C) and the Poisson rate q
}

_ACTIVE: ContextVar[tuple[RunParameters, ...]] = ContextVar("privfed_run_parameters", default=())


class RunParameters:
    """The draws of one fit: (step, law, parameters) → how many times it ran."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str, tuple[tuple[str, float], ...]], int] = {}

    def add(self, step: str, law: str, parameters: Mapping[str, float]) -> None:
        key = (step, law, tuple(sorted((name, float(value)) for name, value in parameters.items())))
        self._counts[key] = self._counts.get(key, 0) + 1

    def to_list(self) -> list[dict[str, Any]]:
        """The record as JSON-ready dicts: ``{"step", "law", "parameters", "draws"}``, in first-drawn order."""
        return [{"step": step, "law": law, "parameters": dict(parameters), "draws": count}
                for (step, law, parameters), count in self._counts.items()]


def record_draw(step: str, law: str, **parameters: float) -> None:
    """Record that ``step`` passes ``parameters`` to a noise function of ``law`` (a no-op outside a recording).

    Raises
    ------
    ValueError
        ``law`` is not one of :data:`LAWS`, or the parameters are not the ones it records.
    """
    if law not in LAWS:
        raise ValueError(f"law must be one of {', '.join(LAWS)}, got {law!r}")
    if set(parameters) != set(LAWS[law]):
        raise ValueError(f"a {law} draw records {', '.join(LAWS[law])}, got {', '.join(sorted(parameters))}")
    for record in _ACTIVE.get():
        record.add(step, law, parameters)


@contextlib.contextmanager
def recording() -> Iterator[RunParameters]:
    """Collect every :func:`record_draw` of this context (and of any recording nested in it) into one record."""
    record = RunParameters()
    token = _ACTIVE.set((*_ACTIVE.get(), record))
    try:
        yield record
    finally:
        _ACTIVE.reset(token)


def records_run_parameters(fit: Any) -> Any:
    """Decorate an estimator's ``fit``: its draws are recorded into ``run_parameters_`` (``RunParameters.to_list``)."""

    @functools.wraps(fit)
    def recorded_fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        with recording() as run:
            fitted = fit(self, *args, **kwargs)
        self.run_parameters_ = run.to_list()
        return fitted

    return recorded_fit
