"""A sweep's runs: its configuration expanded into :class:`SweepPoint` s, each keyed by its exact configuration.

:func:`expand_points` lists every run of a :class:`~reports.config.SweepConfig` (grid point × setting × seed, plus
each setting's non-private reference); each run's key is the sha256 of its estimator, parameters, models, split,
data fingerprint, seed and δ, so equal keys mean identical runs, and a resumed sweep skips the runs its results
already hold. :func:`check_points` builds and validates every distinct parameter set before the first run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .config import SPLIT_KEYS, ModelSpec, Setting, SweepConfig, estimator_class, init_parameters

__all__ = ["SweepPoint", "build_estimator", "canonical", "check_points", "expand_points", "varied_keys"]


@dataclass(frozen=True)
class SweepPoint:
    """One run: a grid point (or a setting's reference) with one seed.

    Attributes
    ----------
    key : str
        sha256 (16 hex digits) of the run's configuration: equal keys mean identical runs.
    role : {"private", "reference"}
    setting, line : str
    seed : int
    values : mapping
        The run's value of every varied key (``param_<key>`` columns).
    estimator_params : mapping
        Every estimator parameter (models as ``{"class", "params"}`` specifications).
    split_params : mapping
        :func:`privfed.pipelines.federated_split` keyword arguments.
    reference_key : str
    """

    key: str
    role: str
    setting: str
    line: str
    seed: int
    values: Mapping[str, Any]
    estimator_params: Mapping[str, Any]
    split_params: Mapping[str, Any]
    reference_key: str = ""


def varied_keys(config: SweepConfig) -> tuple[str, ...]:
    """The keys that differ between runs: grid axes, then the settings' keys and links, in order of appearance."""
    keys = list(config.grid)
    for setting in config.settings:
        for key in (*setting.values, *setting.links):
            if key not in keys:
                keys.append(key)
    return tuple(keys)


def canonical(value: Any) -> str:
    """``value`` as canonical JSON (sorted keys, no spaces; ``repr`` for what JSON cannot hold): a run's identity."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)


def _resolve(config: SweepConfig, setting: Setting, combo: Mapping[str, Any], *, reference: bool) -> dict[str, Any]:
    """Every key's value for one run: split, fixed parameters, setting, grid, then reference changes and links."""
    values = {**config.split, **config.params, **setting.values, **combo}
    if reference and config.reference is not None:
        for key in config.reference.reset:
            values.pop(key, None)
        values.update(config.reference.set)
    for target, source in setting.links.items():
        if source in values:
            values[target] = values[source]
        else:
            values.pop(target, None)
    return values


def _point(
    config: SweepConfig, values: Mapping[str, Any], *, role: str, setting: str, line: str, seed: int,
    fingerprint: str, varied: tuple[str, ...], defaults: Mapping[str, Any],
) -> SweepPoint:
    split = {key: values[key] for key in SPLIT_KEYS if key in values}
    models = {name: {"class": spec.class_path, "params": dict(spec.params)} for name, spec in config.models.items()}
    estimator_params = {key: value for key, value in defaults.items() if key not in ("random_state", "progress")}
    for key, value in values.items():
        model, dot, parameter = key.partition(".")
        if dot:
            models[model]["params"][parameter] = value
        elif key not in SPLIT_KEYS:
            estimator_params[key] = value
    estimator_params.update(models)
    identity = {
        "estimator": config.estimator,
        "params": {key: value for key, value in estimator_params.items() if key != "n_jobs"},
        "split": split,
        "data": fingerprint,
        "seed": seed,
        "delta": config.delta,
    }
    key = hashlib.sha256(canonical(identity).encode()).hexdigest()[:16]
    shown = {name: values.get(name, defaults.get(name)) for name in varied}
    return SweepPoint(key=key, role=role, setting=setting, line=line, seed=seed, values=shown,
                      estimator_params=estimator_params, split_params=split)


def expand_points(config: SweepConfig, *, data_fingerprint: str) -> list[SweepPoint]:
    """Every run of the sweep, seeds outermost; each setting's reference run precedes its grid points.

    Runs with equal configurations (equal keys) appear once.
    """
    defaults = config.estimator_defaults()
    varied = varied_keys(config)
    axes = list(config.grid)
    line_axes = axes[:-1]
    points: dict[str, SweepPoint] = {}
    for seed in config.seeds:
        for setting in config.settings:
            common = dict(config=config, setting=setting.label, seed=seed, fingerprint=data_fingerprint,
                          varied=varied, defaults=defaults)
            reference_key = ""
            if config.reference is not None:
                reference = _point(values=_resolve(config, setting, {}, reference=True), role="reference",
                                   line=setting.label, **common)
                points.setdefault(reference.key, reference)
                reference_key = reference.key
            for combo_values in itertools.product(*config.grid.values()):
                combo = dict(zip(axes, combo_values))
                line = ", ".join([setting.label, *(f"{axis} = {combo[axis]}" for axis in line_axes)])
                point = _point(values=_resolve(config, setting, combo, reference=False), role="private",
                               line=line, **common)
                points.setdefault(point.key, dataclasses.replace(point, reference_key=reference_key))
    return list(points.values())


def build_estimator(estimator: str, params: Mapping[str, Any], seed: int) -> Any:
    """The unfitted estimator of one run: its models built from their specifications, ``random_state=seed``."""
    kwargs = {}
    for key, value in params.items():
        is_model = isinstance(value, Mapping) and set(value) == {"class", "params"}
        kwargs[key] = ModelSpec(value["class"], value["params"]).build() if is_model else value
    cls = estimator_class(estimator)
    if "progress" in init_parameters(cls):
        kwargs["progress"] = False
    return cls(**kwargs, random_state=seed)


def check_points(estimator: str, points: Sequence[SweepPoint]) -> None:
    """Every run's parameters, before the first run: each distinct parameter set is built and checked by the
    estimator's own validation (``_validate``), so that a bad grid or setting value stops the sweep at once —
    a ``ValueError`` naming the run's varied values — instead of failing run after run."""
    seen = set()
    for point in points:
        params = canonical(point.estimator_params)
        if params in seen:
            continue
        seen.add(params)
        try:
            model = build_estimator(estimator, point.estimator_params, point.seed)
            validate = getattr(model, "_validate", None)
            if validate is not None:
                validate()
        except (ValueError, TypeError) as error:
            values = ", ".join(f"{key} = {value!r}" for key, value in point.values.items())
            raise ValueError(f"the {point.setting or point.role} run with {values or 'its settings'} is invalid, "
                             f"checked before any run: {error}") from None
