"""Parameter consistency: the parameters the code passed to its noise functions, as run, against the ledger's
(``docs/audit.md#parameter-consistency``).

The ledger says what was accounted; the run record (a fitted pipeline's ``run_parameters_``, a bundle's
``run_parameters.json``: :mod:`privfed.pipelines.protocol.run_parameters`) says what each party step and server step
passed to its noise function. Each recorded draw must match an accounted mechanism of the ledger, to a relative
1e-9:

* ``laplace`` (scale b): a Laplace noisy max or FedKD ensemble with 1/γ = b, or L2's withheld-votes noisy max
  (Laplace) with 1/scale = b;
* ``gaussian`` (σ): a (Confident) GNMax or L2's Gaussian withheld-votes noisy max with that σ;
* ``gaussian-threshold`` (σ₁): a Confident GNMax with that threshold σ₁;
* ``skellam-share`` (variance v): the shares of one fit, summed over the parties that drew one, must be the
  variance of a Skellam entry (the public's: every share);
* ``randomized-response`` (β, C): a randomized response with that keep probability and number of classes;
* ``dp-sgd`` (σ, q): a DP-SGD training with that noise multiplier and sampling rate.

Any draw without its match FAILs: the noise that ran is not the noise the ε was computed for. What it cannot
see: a bug between the recorded call and the draw itself (inside the noise function) — that is
``privfed selftest``'s part — and draws made in another process, which the estimator's record does not hold.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from privfed.audit.report import Check

__all__ = ["audit_parameters", "ledger_mechanisms", "parameters_check"]

_NAME = "parameter consistency"
_SECTION = "parameter-consistency"
_MEANING = ("the noise the code drew was not the noise the ledger accounts (a different scale, keep probability or "
            "noise multiplier), so the ε printed is not a bound for the model as it was trained.")
_RTOL = 1e-9

#: For each law of a draw: (ledger kind, required fixed parameters, ledger parameter, map from the draw's value).
_MATCHES: Mapping[str, tuple[tuple[str, Mapping[str, Any], str, Any], ...]] = {
    "laplace": (("laplace_noisy_max", {}, "gamma", lambda b: 1.0 / b),
                ("quantized_laplace_ensemble", {}, "gamma", lambda b: 1.0 / b),
                ("withheld_votes_noisy_max", {"aggregator": "laplace"}, "scale", lambda b: 1.0 / b)),
    "gaussian": (("gaussian_noisy_max", {}, "sigma", float), ("confident_gnmax", {}, "sigma", float),
                 ("withheld_votes_noisy_max", {"aggregator": "gaussian"}, "scale", float)),
    "gaussian-threshold": (("confident_gnmax", {}, "sigma_threshold", float),),
}


def ledger_mechanisms(document: Any) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every (kind, parameters) of every entry's analyses in a ledger document, compositions' members included."""
    if isinstance(document, Mapping):
        if isinstance(document.get("kind"), str) and isinstance(document.get("parameters"), Mapping):
            yield document["kind"], document["parameters"]
        for value in document.values():
            yield from ledger_mechanisms(value)
    elif isinstance(document, (list, tuple)):
        for value in document:
            yield from ledger_mechanisms(value)


def _close(a: Any, b: Any) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=_RTOL, abs_tol=0.0)
    except (TypeError, ValueError):
        return False


def _has(mechanisms: list[tuple[str, Mapping[str, Any]]], kind: str, wanted: Mapping[str, Any]) -> bool:
    return any(k == kind and all(
        parameters.get(name) == value if isinstance(value, str) else _close(parameters.get(name), value)
        for name, value in wanted.items()) for k, parameters in mechanisms)


def _mismatch(draw: Mapping[str, Any], mechanisms: list[tuple[str, Mapping[str, Any]]]) -> str | None:
    """Why one recorded draw has no accounted match (None when it has one)."""
    law, parameters = draw.get("law"), draw.get("parameters") or {}
    try:
        if law in _MATCHES:
            value = float(next(iter(parameters.values())))
            if any(_has(mechanisms, kind, {**fixed, name: convert(value)}) for kind, fixed, name, convert
                   in _MATCHES[law]):
                return None
            accounted = sorted({f"{kind} {name} = {p[name]:g}" for k, p in mechanisms for kind, fixed, name, _
                                in _MATCHES[law] if k == kind and isinstance(p.get(name), (int, float))})
        elif law == "randomized-response":
            if _has(mechanisms, "randomized_response", {"keep_probability": parameters["keep_probability"],
                                                        "num_classes": parameters["num_classes"]}):
                return None
            accounted = sorted({f"keep probability {p.get('keep_probability'):.6g} over {p.get('num_classes')} "
                                f"classes" for k, p in mechanisms if k == "randomized_response"})
        elif law == "dp-sgd":
            if _has(mechanisms, "dpsgd", {"noise_multiplier": parameters["noise_multiplier"],
                                          "sample_rate": parameters["sample_rate"]}):
                return None
            accounted = sorted({f"σ = {p.get('noise_multiplier'):.6g}, q = {p.get('sample_rate'):.6g}"
                                for k, p in mechanisms if k == "dpsgd"})
        else:
            return f"{draw.get('step')}: a draw of unknown law {law!r}"
    except (KeyError, TypeError, ValueError, StopIteration):
        return f"{draw.get('step')}: malformed parameters {dict(parameters)!r} for a {law} draw"
    ran = ", ".join(f"{name} = {float(value):.6g}" for name, value in parameters.items())
    return f"{draw.get('step')} ran {law} with {ran}; the ledger accounts {'; '.join(accounted) or 'no such noise'}"


def _skellam_mismatch(draws: Sequence[Mapping[str, Any]], mechanisms: list[tuple[str, Mapping[str, Any]]]
                      ) -> str | None:
    shares = [draw for draw in draws if draw.get("law") == "skellam-share"]
    if not shares:
        return None
    try:
        total = sum(float(draw["parameters"]["variance"]) for draw in shares)
    except (KeyError, TypeError, ValueError):
        return "a Skellam share with malformed parameters"
    if _has(mechanisms, "skellam", {"variance": total}):
        return None
    accounted = sorted({f"{p.get('variance'):g}" for k, p in mechanisms if k == "skellam"})
    return (f"{len(shares)} parties drew Skellam shares of total variance {total:.6g}; the ledger's Skellam entries "
            f"account variance {', '.join(accounted) or 'none'}")


def parameters_check(ledger_document: Mapping[str, Any], run_parameters: Sequence[Mapping[str, Any]]) -> Check:
    """Compare a run record (:mod:`privfed.pipelines.protocol.run_parameters`) with a ledger document
    (``Ledger.to_dict()``).

    Parameters
    ----------
    ledger_document : mapping
        The ledger as JSON (a bundle's ``ledger.json``, or ``ledger.to_dict()``).
    run_parameters : sequence of mappings
        The draws as run: ``{"step", "law", "parameters", "draws"}`` each.

    Returns
    -------
    Check
        ``pass`` when every draw matches an accounted mechanism, ``fail`` naming each that does not.
    """
    if not isinstance(run_parameters, Sequence) or not all(isinstance(d, Mapping) for d in run_parameters):
        return Check(_NAME, "fail", "the run record is not a list of draws", _MEANING, _SECTION)
    mechanisms = list(ledger_mechanisms(ledger_document.get("entries", [])))
    problems = [problem for draw in run_parameters if draw.get("law") != "skellam-share"
                for problem in [_mismatch(draw, mechanisms)] if problem]
    skellam = _skellam_mismatch(run_parameters, mechanisms)
    problems += [skellam] if skellam else []
    if problems:
        return Check(_NAME, "fail", "; ".join(problems), _MEANING, _SECTION)
    if not run_parameters:
        return Check(_NAME, "pass", "the run record holds no noise draw (nothing was noised in this process)")
    laws = sorted({str(draw.get("law")) for draw in run_parameters})
    draws = sum(int(draw.get("draws", 1)) for draw in run_parameters)
    return Check(_NAME, "pass", f"{len(run_parameters)} recorded noise calls ({draws} draws; {', '.join(laws)}) "
                 "use exactly the parameters the ledger accounts")


def audit_parameters(model: Any) -> Check:
    """The parameter consistency check of a fitted privfed pipeline: its ``run_parameters_`` against its ``ledger_``.

    Examples
    --------
    >>> check = privfed.audit_parameters(FedKT(...).fit(parties, public))  # doctest: +SKIP
    >>> check.status
    'pass'

    Raises
    ------
    TypeError
        ``model`` is not a fitted pipeline with ``ledger_`` and ``run_parameters_``.
    """
    if not (hasattr(model, "ledger_") and hasattr(model, "run_parameters_")):
        raise TypeError(f"model must be a fitted privfed pipeline (with ledger_ and run_parameters_), got "
                        f"{type(model).__name__}")
    return parameters_check(model.ledger_.to_dict(), model.run_parameters_)
