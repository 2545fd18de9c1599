"""Sweep configurations: TOML files parsed with :mod:`tomllib` and validated before any work.

A configuration names a pipeline (an estimator of :mod:`privfed.pipelines` with
``fit(parties, public)``, ``score`` and ``ledger_``), its models, a data set,
how the data set is split among parties, a grid of parameters, optional named
settings, an optional non-private reference, and seeds. ``docs/reports.md``
documents every key; :func:`load_config` reads a file and :func:`parse_config`
a mapping. Every problem raises :class:`ConfigError` (a ``ValueError``) whose
message names the offending key.
"""

from __future__ import annotations

import importlib
import inspect
import math
import numbers
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..accounting.documents import check_finite_numbers, unknown_key_message

__all__ = [
    "BUNDLED_DATASETS",
    "MODEL_PACKAGES",
    "SPLIT_KEYS",
    "ConfigError",
    "DataSpec",
    "ModelSpec",
    "ReferenceSpec",
    "Setting",
    "SweepConfig",
    "estimator_class",
    "init_parameters",
    "load_config",
    "parse_config",
]

#: scikit-learn's bundled data sets a sweep may use (``[data] sklearn = "load_digits"``).
BUNDLED_DATASETS: tuple[str, ...] = ("load_breast_cancer", "load_digits", "load_iris", "load_wine")
#: Top-level packages a model class may come from (``class = "sklearn.tree.DecisionTreeClassifier"``).
MODEL_PACKAGES: tuple[str, ...] = ("sklearn", "xgboost", "privfed")
#: Parameters of :func:`privfed.pipelines.federated_split`, sweepable like estimator parameters.
SPLIT_KEYS: tuple[str, ...] = ("n_parties", "beta", "public_size", "test_size", "protocol", "min_size")
#: Estimator parameters the sweep sets itself.
_RESERVED = ("random_state", "progress")

_TOP_KEYS = ("name", "description", "seeds", "n_jobs", "delta", "pipeline", "data", "split", "grid", "setting",
             "reference")


class ConfigError(ValueError):
    """A sweep configuration is invalid; the message names the key."""


@dataclass(frozen=True)
class ModelSpec:
    """A model prototype: an importable class and its keyword parameters.

    Attributes
    ----------
    class_path : str
        ``"package.module.Class"`` with ``package`` in :data:`MODEL_PACKAGES`.
    params : mapping
        Keyword arguments of the class.
    """

    class_path: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def build(self, **overrides: Any) -> Any:
        """A new instance with ``params`` updated by ``overrides``."""
        return _import_class(self.class_path, "class")(**{**self.params, **overrides})


@dataclass(frozen=True)
class DataSpec:
    """Where the data comes from: a bundled scikit-learn set, or a benchmark set in a folder.

    Attributes
    ----------
    sklearn : str or None
        A name in :data:`BUNDLED_DATASETS`.
    name : str or None
        A benchmark name for :func:`privfed.pipelines.load_dataset` (``"a9a"``, ``"mnist"``, ...).
    folder : Path or None
        The folder :func:`privfed.pipelines.load_dataset` reads ``name`` from (relative paths in a
        file are resolved against the file's folder).
    """

    sklearn: str | None = None
    name: str | None = None
    folder: Path | None = None

    @property
    def label(self) -> str:
        return f"sklearn.datasets.{self.sklearn}" if self.sklearn else f"{self.name} from {self.folder}"


@dataclass(frozen=True)
class Setting:
    """A named group of fixed values (one line in the plot), crossed with the grid.

    ``links`` maps a parameter to the grid or setting key whose value it copies
    (``{"local_query_fraction": "query_fraction"}``).
    """

    label: str
    values: Mapping[str, Any] = field(default_factory=dict)
    links: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ReferenceSpec:
    """The non-private reference of every setting: ``set`` these values, ``reset`` those to their defaults."""

    set: Mapping[str, Any] = field(default_factory=dict)
    reset: tuple[str, ...] = ()


@dataclass(frozen=True)
class SweepConfig:
    """A validated sweep configuration (see ``docs/reports.md`` for the TOML keys).

    Attributes
    ----------
    name, description : str
    estimator : str
        Name of the estimator class in :mod:`privfed.pipelines` (``"FedKT"``).
    params : mapping
        Fixed estimator parameters (``[pipeline.params]``).
    models : mapping of str to ModelSpec
        Estimator parameters that are models (``[pipeline.models.<param>]``).
    data : DataSpec
    split : mapping
        Fixed :func:`privfed.pipelines.federated_split` parameters (``[split]``).
    grid : mapping of str to tuple
        Axis name → values; every combination is run (``[grid]``).
    settings : tuple of Setting
        Named settings crossed with the grid (``[[setting]]``); one unnamed setting by default.
    reference : ReferenceSpec or None
        How to derive the non-private reference run of each setting (``[reference]``).
    seeds : tuple of int
        Each grid point runs once per seed (split and estimator ``random_state``).
    n_jobs : int
        Grid points run in parallel (joblib convention).
    delta : float or None
        δ at which ε is reported; default: each model's ledger's δ.
    source_text : str
        The TOML text, verbatim (kept for the report).
    """

    name: str
    estimator: str
    data: DataSpec
    seeds: tuple[int, ...]
    description: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)
    models: Mapping[str, ModelSpec] = field(default_factory=dict)
    split: Mapping[str, Any] = field(default_factory=dict)
    grid: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    settings: tuple[Setting, ...] = (Setting(label="default"),)
    reference: ReferenceSpec | None = None
    n_jobs: int = 1
    delta: float | None = None
    source_text: str = ""

    def estimator_class(self) -> type:
        """The estimator class, looked up in :mod:`privfed.pipelines`."""
        return estimator_class(self.estimator)

    def estimator_defaults(self) -> dict[str, Any]:
        """Default values of the estimator's parameters (those that have one)."""
        signature = inspect.signature(self.estimator_class().__init__)
        return {
            name: parameter.default
            for name, parameter in signature.parameters.items()
            if parameter.default is not inspect.Parameter.empty
        }


# --- loading -------------------------------------------------------------------------------------------
def load_config(path: str | Path, *, data_folder: str | Path | None = None) -> SweepConfig:
    """Read and validate a sweep configuration file.

    Parameters
    ----------
    path : str or Path
        The TOML file.
    data_folder : str or Path, optional
        Overrides ``[data] folder`` (for a benchmark set by name).

    Raises
    ------
    ConfigError
        When the file cannot be read or parsed, or a key is missing or invalid.
    """
    path = Path(path)
    document, text = read_toml(path)
    return parse_config(document, base_dir=path.parent, source_text=text, data_folder=data_folder)


def read_toml(path: Path) -> tuple[dict[str, Any], str]:
    """A configuration file's parsed TOML and its text; :class:`ConfigError` (one line) when unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"config file {str(path)!r} could not be read: {error.strerror or error}") from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {error}") from None


def parse_config(
    document: Mapping[str, Any],
    *,
    base_dir: str | Path = ".",
    source_text: str = "",
    data_folder: str | Path | None = None,
) -> SweepConfig:
    """Validate a configuration mapping (as :func:`tomllib.loads` returns) into a :class:`SweepConfig`."""
    _no_unknown_keys(document, _TOP_KEYS, "")
    try:
        check_finite_numbers(document, "")
    except ValueError as error:
        raise ConfigError(str(error)) from None
    name = _string(_required(document, "name", ""), "name")
    description = document.get("description", "")
    if not isinstance(description, str):
        raise ConfigError(f"description must be a string, got {description!r}")
    seeds = _seeds(_required(document, "seeds", ""))
    n_jobs = _int(document.get("n_jobs", 1), "n_jobs", minimum=None)
    if n_jobs == 0:
        raise ConfigError("n_jobs must be a non-zero integer (>= 1, or negative as in joblib), got 0")
    delta = document.get("delta")
    if delta is not None and not (_is_real(delta) and 0 < delta < 1):
        raise ConfigError(f"delta must be a number in (0, 1), got {delta!r}")

    pipeline = _table(_required(document, "pipeline", ""), "pipeline")
    _no_unknown_keys(pipeline, ("estimator", "params", "models"), "pipeline")
    estimator = _string(_required(pipeline, "estimator", "pipeline"), "pipeline.estimator")
    try:
        cls = estimator_class(estimator)
    except (ImportError, AttributeError, TypeError) as error:
        raise ConfigError(f"pipeline.estimator: {error}") from None
    estimator_keys = init_parameters(cls)
    models = {
        key: _model_spec(value, f"pipeline.models.{key}")
        for key, value in _table(pipeline.get("models", {}), "pipeline.models").items()
    }
    for key in models:
        if key not in estimator_keys:
            raise ConfigError(unknown_key_message(key, estimator_keys, f"pipeline.models.{key}"))
    overlap = sorted(set(estimator_keys) & set(SPLIT_KEYS))
    if overlap:
        raise ConfigError(f"pipeline.estimator: {estimator}'s parameters {overlap} clash with the split's keys")
    keys = _Keys(estimator=estimator, estimator_keys=estimator_keys, models=models)

    params = dict(_table(pipeline.get("params", {}), "pipeline.params"))
    for key in params:
        keys.check(key, f"pipeline.params.{key}", split_allowed=False)
        if key in models:
            raise ConfigError(f"pipeline.params.{key}: {key!r} is a model; set it in [pipeline.models.{key}]")
    split = dict(_table(document.get("split", {}), "split"))
    _no_unknown_keys(split, SPLIT_KEYS, "split")

    data = _data_spec(_table(_required(document, "data", ""), "data"), Path(base_dir), data_folder)

    grid: dict[str, tuple[Any, ...]] = {}
    for key, values in _table(document.get("grid", {}), "grid").items():
        keys.check(key, f"grid.{key}")
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or len(values) == 0:
            raise ConfigError(f"grid.{key} must be a non-empty array of values, got {values!r}")
        values = tuple(values)
        if len(set(map(repr, values))) != len(values):
            raise ConfigError(f"grid.{key} repeats a value: {list(values)}")
        grid[key] = values

    settings = _settings(document.get("setting"), keys, grid)
    reference = _reference(document.get("reference"), keys)
    if "n_parties" not in split and not any("n_parties" in s.values for s in settings) and "n_parties" not in grid:
        raise ConfigError("split.n_parties is required (in [split], [grid] or every [[setting]])")
    if "beta" not in split and "beta" not in grid and not all("beta" in s.values for s in settings):
        raise ConfigError('split.beta is required: a Dirichlet concentration > 0 or "homogeneous"')
    return SweepConfig(
        name=name, description=description, estimator=estimator, params=params, models=models, data=data,
        split=split, grid=grid, settings=settings, reference=reference, seeds=seeds, n_jobs=n_jobs,
        delta=None if delta is None else float(delta), source_text=source_text,
    )


# --- keys -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Keys:
    """Which names a grid, setting or reference may set."""

    estimator: str
    estimator_keys: tuple[str, ...]
    models: Mapping[str, ModelSpec]

    def check(self, key: str, where: str, *, split_allowed: bool = True) -> None:
        if key in _RESERVED:
            raise ConfigError(f"{where}: {key!r} is set by the sweep (from the seeds / never shown); remove it")
        if split_allowed and key in SPLIT_KEYS:
            return
        model, dot, model_param = key.partition(".")
        if dot:
            if model not in self.models:
                raise ConfigError(f"{where}: {key!r} names the model {model!r}, which is not in [pipeline.models]")
            if not model_param:
                raise ConfigError(f"{where}: {key!r} must be '<model>.<parameter>'")
            return
        if key not in self.estimator_keys:
            valid = [k for k in self.estimator_keys if k not in _RESERVED]
            if split_allowed:
                valid += list(SPLIT_KEYS) + [f"{m}.<parameter>" for m in self.models]
            raise ConfigError(unknown_key_message(key, valid, where))


def _settings(raw: object, keys: _Keys, grid: Mapping[str, Any]) -> tuple[Setting, ...]:
    if raw is None:
        return (Setting(label="default"),)
    if not isinstance(raw, list) or not raw:
        raise ConfigError("setting must be an array of tables ([[setting]] blocks), each with a label")
    settings, labels = [], set()
    for index, entry in enumerate(raw):
        where = f"setting[{index}]"
        entry = dict(_table(entry, where))
        label = _string(_required(entry, "label", where), f"{where}.label")
        if label in labels:
            raise ConfigError(f"{where}.label: {label!r} is used by another setting; labels must be unique")
        labels.add(label)
        links = dict(_table(entry.pop("link", {}), f"{where}.link"))
        del entry["label"]
        for key in entry:
            keys.check(key, f"{where}.{key}")
            if key in grid:
                raise ConfigError(
                    f"{where}.{key}: {key!r} is also a grid axis; a setting fixes keys the grid leaves free"
                )
        for target, source in links.items():
            keys.check(target, f"{where}.link.{target}")
            if not isinstance(source, str) or (source not in grid and source not in entry):
                raise ConfigError(
                    f"{where}.link.{target} must name a grid axis or a key of this setting, got {source!r}"
                )
            if target in entry or target in grid:
                raise ConfigError(f"{where}.link.{target}: {target!r} is already given a value; a link copies another")
        settings.append(Setting(label=label, values=entry, links=links))
    return tuple(settings)


def _reference(raw: object, keys: _Keys) -> ReferenceSpec | None:
    if raw is None:
        return None
    table = _table(raw, "reference")
    _no_unknown_keys(table, ("set", "reset"), "reference")
    values = dict(_table(table.get("set", {}), "reference.set"))
    for key in values:
        keys.check(key, f"reference.set.{key}", split_allowed=False)
    reset = table.get("reset", [])
    if not isinstance(reset, list) or not all(isinstance(key, str) for key in reset):
        raise ConfigError(f"reference.reset must be an array of parameter names, got {reset!r}")
    for key in reset:
        keys.check(key, f"reference.reset ({key!r})", split_allowed=False)
        if "." in key:
            raise ConfigError(f"reference.reset: {key!r} is a model parameter; only estimator parameters can be reset")
    if not values and not reset:
        raise ConfigError("reference needs set = {...} and/or reset = [...] (how the non-private run differs)")
    return ReferenceSpec(set=values, reset=tuple(reset))


# --- pieces -----------------------------------------------------------------------------------------------
def _data_spec(table: Mapping[str, Any], base_dir: Path, data_folder: str | Path | None) -> DataSpec:
    _no_unknown_keys(table, ("sklearn", "name", "folder"), "data")
    if ("sklearn" in table) == ("name" in table):
        raise ConfigError(
            "data needs exactly one of sklearn = \"load_digits\" (bundled) or name = \"a9a\" (with folder)"
        )
    if "sklearn" in table:
        loader = _string(table["sklearn"], "data.sklearn")
        if loader not in BUNDLED_DATASETS:
            raise ConfigError(f"data.sklearn must be one of {list(BUNDLED_DATASETS)}, got {loader!r}")
        if "folder" in table:
            raise ConfigError("data.folder applies to data.name only, not to a bundled scikit-learn set")
        return DataSpec(sklearn=loader)
    name = _string(table["name"], "data.name")
    if data_folder is not None:
        folder = Path(data_folder)
    else:
        folder = Path(_string(_required(table, "folder", "data"), "data.folder"))
        if not folder.is_absolute():
            folder = base_dir / folder
    if not folder.is_dir():
        raise ConfigError(f"data.folder: {str(folder)!r} is not a directory")
    return DataSpec(name=name, folder=folder.resolve())


def _model_spec(raw: object, where: str) -> ModelSpec:
    table = _table(raw, where)
    _no_unknown_keys(table, ("class", "params"), where)
    class_path = _string(_required(table, "class", where), f"{where}.class")
    try:
        _import_class(class_path, f"{where}.class")
    except (ImportError, AttributeError, TypeError, ValueError) as error:
        raise ConfigError(str(error)) from None
    params = dict(_table(table.get("params", {}), f"{where}.params"))
    cls = _import_class(class_path, f"{where}.class")
    signature = inspect.signature(cls.__init__).parameters.values()
    if not any(parameter.kind is parameter.VAR_KEYWORD for parameter in signature):  # xgboost takes **kwargs
        for key in params:
            if key not in init_parameters(cls):
                raise ConfigError(unknown_key_message(key, init_parameters(cls), f"{where}.params.{key}"))
    try:
        ModelSpec(class_path, params).build()
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{where}.params: {class_path} refuses {params}: {error}") from None
    return ModelSpec(class_path=class_path, params=params)


def _import_class(class_path: str, where: str) -> type:
    module_name, _, class_name = class_path.rpartition(".")
    if not module_name or module_name.split(".")[0] not in MODEL_PACKAGES:
        raise ValueError(f"{where} must be 'package.module.Class' from {list(MODEL_PACKAGES)}, got {class_path!r}")
    module = importlib.import_module(module_name)
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        raise ValueError(f"{where}: {module_name} has no class {class_name!r}")
    return cls


def estimator_class(name: str) -> type:
    """The class ``pipelines.<name>`` (an estimator with ``fit`` and ``score``)."""
    from .. import pipelines

    cls = getattr(pipelines, name, None)
    if not isinstance(cls, type) or not (callable(getattr(cls, "fit", None)) and callable(getattr(cls, "score", None))):
        estimators = [n for n in getattr(pipelines, "_LAZY", {}) if n[0].isupper()]
        raise TypeError(f"{name!r} is not an estimator of pipelines with fit and score; known: {estimators}")
    return cls


def init_parameters(cls: type) -> tuple[str, ...]:
    """The keyword parameters of ``cls.__init__``."""
    signature = inspect.signature(cls.__init__)
    return tuple(
        name for name, parameter in signature.parameters.items()
        if name != "self" and parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
    )


def _no_unknown_keys(table: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(unknown_key_message(key, allowed, f"{where}.{key}" if where else str(key)))


def _required(table: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in table:
        raise ConfigError(f"{where + '.' if where else ''}{key} is required")
    return table[key]


def _table(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must be a table, got {value!r}")
    return value


def _string(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where} must be a non-empty string, got {value!r}")
    return value


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _int(value: object, where: str, *, minimum: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise ConfigError(f"{where} must be an integer{bound}, got {value!r}")
    return value


def _seeds(value: object) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise ConfigError(f"seeds must be a non-empty array of integers >= 0, got {value!r}")
    seeds = tuple(_int(seed, f"seeds[{index}]", minimum=0) for index, seed in enumerate(value))
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds repeats a seed: {list(seeds)}")
    return seeds
