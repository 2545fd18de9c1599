"""Code shared by privfed's ServerApp and ClientApp: run configuration, model specs, party data, transport.

* **Run configuration** (:func:`estimator_from_config`): the ``[tool.flwr.app.config]`` keys that
  ``flwr run`` reads (``docs/federation.md`` lists them) become an unfitted pipeline estimator.
* **Model specs** (:func:`model_spec`, :func:`build_model`): how a party learns which teacher and
  student to train — a class name and JSON hyper-parameters, never a pickled object. Only classes
  from the packages in :data:`TRUSTED_MODEL_PACKAGES` are built.
* **Party data** (:func:`load_party_data`): each SuperNode reads its own ``(X, y)`` from the file
  named in its node config (npz with arrays ``X`` and ``y``; CSV or Parquet with a label column;
  LIBSVM).
* **Transport** (:func:`to_recorddict`, :func:`from_recorddict`): privfed's wire records ⇄ Flower's
  ``RecordDict`` (an ``ArrayRecord`` and a ``ConfigRecord`` per message). Flower serialises arrays
  with ``numpy.save(allow_pickle=False)``; an array that needs unpickling is refused on receipt.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privfed.pipelines.messages import MessageError, Record

__all__ = [
    "DATA_FORMATS",
    "TRUSTED_MODEL_PACKAGES",
    "build_model",
    "estimator_from_config",
    "from_recorddict",
    "load_party_data",
    "load_public",
    "model_spec",
    "to_recorddict",
]

#: Top-level packages whose estimator classes a party agrees to build from a model spec.
TRUSTED_MODEL_PACKAGES = ("sklearn", "xgboost", "privfed")
#: Party data file formats, by suffix.
DATA_FORMATS = (".npz", ".csv", ".parquet", ".svm", ".libsvm")
_JSON_SCALARS = (str, int, float, bool, type(None))


# --- model specs ------------------------------------------------------------------------------------
#: The one non-scalar parameter a spec carries: a DP-SGD configuration, as ``{"DPConfig": {field: scalar}}``.
_DP_CONFIG_KEY = "DPConfig"


def model_spec(estimator: Any, *, name: str = "estimator") -> str:
    """The JSON spec of an unfitted scikit-learn-style estimator: class path and ``get_params(deep=False)``.

    A :class:`~privfed.DPConfig` parameter (``dp=`` of the torch models) travels as its fields,
    ``{"DPConfig": {"noise_multiplier": ..., ...}}``; every other parameter must be a JSON scalar or a
    list of them.
    """
    from privfed.pipelines.dp_config import DPConfig

    cls = type(estimator)
    params = estimator.get_params(deep=False)
    for key, value in params.items():
        if isinstance(value, DPConfig):
            params[key] = {_DP_CONFIG_KEY: value.to_dict()}
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        finite = not isinstance(value, float) or math.isfinite(value)
        if not finite or not all(isinstance(v, _JSON_SCALARS) for v in values):
            raise TypeError(
                f"{name} {cls.__name__} cannot travel to the parties: its parameter {key}={value!r} is not a "
                "JSON scalar or list of scalars (only such hyper-parameters cross the wire, never objects)"
            )
    return json.dumps({"class": f"{cls.__module__}.{cls.__qualname__}", "params": params}, sort_keys=True)


def build_model(spec: str, *, name: str = "estimator") -> Any:
    """An unfitted estimator from :func:`model_spec`'s JSON; refuses classes outside the trusted packages."""
    try:
        document = json.loads(spec)
        path, params = document["class"], document["params"]
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{name} spec must be JSON {{'class': ..., 'params': {{...}}}}, got {spec!r}") from error
    module_name, _, class_name = str(path).rpartition(".")
    if module_name.split(".")[0] not in TRUSTED_MODEL_PACKAGES or not isinstance(params, dict):
        raise ValueError(
            f"{name} class {path!r} is outside the trusted packages {TRUSTED_MODEL_PACKAGES} (or its params are not "
            "a JSON object); a party builds only those"
        )
    cls = getattr(importlib.import_module(module_name), class_name, None)
    if not isinstance(cls, type) or not all(hasattr(cls, m) for m in ("fit", "predict", "get_params")):
        raise ValueError(f"{name} class {path!r} is not a scikit-learn-style classifier")
    return cls(**{key: _dp_config(value, f"{name} parameter {key}") if isinstance(value, dict) else value
                  for key, value in params.items()})


def _dp_config(value: dict, name: str) -> Any:
    """The :class:`~privfed.DPConfig` of a spec's ``{"DPConfig": {...}}`` (its fields JSON scalars), or ValueError."""
    from dataclasses import fields

    from privfed.pipelines.dp_config import DPConfig

    allowed = {field.name for field in fields(DPConfig)}
    settings = value.get(_DP_CONFIG_KEY) if set(value) == {_DP_CONFIG_KEY} else None
    if not isinstance(settings, dict) or not set(settings) <= allowed or not all(
            isinstance(v, (int, float, type(None))) and not isinstance(v, bool) for v in settings.values()):
        raise ValueError(
            f"{name} = {value!r}: the only object a spec carries is {{'DPConfig': {{...}}}} with numeric fields "
            f"among {sorted(allowed)}"
        )
    return DPConfig(**settings)


# --- run configuration ------------------------------------------------------------------------------
def _model_from_config(config: Mapping[str, Any], key: str) -> Any:
    path = str(config.get(key, ""))
    if not path:
        return None
    params = json.loads(str(config.get(f"{key}-params", "{}")))
    return build_model(json.dumps({"class": path, "params": params}), name=key)


def estimator_from_config(config: Mapping[str, Any]) -> Any:
    """The unfitted estimator (FedKT or FedKD) that a run configuration describes (0 or "" stand for "not set")."""
    algorithm = str(config.get("algorithm", "fedkt"))
    if algorithm not in ("fedkt", "fedkd"):
        raise ValueError(f"algorithm must be 'fedkt' or 'fedkd' (the pipelines on Flower so far), got {algorithm!r}")
    optional = {key: float(config[key]) or None for key in ("gamma", "sigma", "target-epsilon", "clip")
                if key in config}
    seed = int(config.get("random-state", -1))
    common = dict(delta=float(config.get("delta", 1e-5)), random_state=None if seed < 0 else seed)
    if algorithm == "fedkd":
        from privfed.pipelines.fedkd import FedKD

        return FedKD(
            _model_from_config(config, "local-model"),
            _model_from_config(config, "server-model"),
            quantization_scale=int(config.get("quantization-scale", 200)) or None,
            gamma=optional.get("gamma"),
            clip=optional.get("clip"),
            weighting=str(config.get("weighting", "class-count")),
            multilabel=bool(config.get("multilabel", False)),
            **common,
        )
    from privfed.pipelines.fedkt import FedKT

    return FedKT(
        _model_from_config(config, "teacher"),
        _model_from_config(config, "student"),
        _model_from_config(config, "final"),
        n_partitions=int(config.get("n-partitions", 2)),
        n_teachers=int(config.get("n-teachers", 5)),
        privacy=str(config.get("privacy", "L0")),
        gamma=optional.get("gamma"),
        sigma=optional.get("sigma"),
        query_fraction=float(config.get("query-fraction", 1.0)),
        local_query_fraction=float(config.get("local-query-fraction", 1.0)),
        consistent_voting=bool(config.get("consistent-voting", True)),
        aggregator=str(config.get("aggregator", "laplace")),
        accounting=str(config.get("accounting", "conservative")),
        target_epsilon=optional.get("target-epsilon"),
        small_parties=str(config.get("small-parties", "error")),
        **common,
    )


# --- party data -------------------------------------------------------------------------------------
def load_party_data(
    path: str | Path,
    *,
    label_column: str | int = -1,
    feature_columns: Sequence[str] | None = None,
    n_features: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """A party's ``(X, y)`` from its own file.

    ``.npz``: arrays ``X`` and ``y``. ``.csv``/``.parquet`` (pandas; Parquet also needs pyarrow): the label
    is ``label_column`` (a name, or a position, default the last column), the features are
    ``feature_columns`` (names; default every other column). ``.svm``/``.libsvm``: LIBSVM, with
    ``n_features`` columns (default: the largest index in the file, which may differ between parties).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in DATA_FORMATS:
        raise ValueError(f"data-path {str(path)!r} must end in one of {DATA_FORMATS}")
    if not path.is_file():
        raise ValueError(f"data-path {str(path)!r} is not a file on this SuperNode")
    if suffix == ".npz":
        with np.load(path, allow_pickle=False) as arrays:
            if not {"X", "y"} <= set(arrays.files):
                raise ValueError(f"data-path {str(path)!r} must hold arrays 'X' and 'y', has {arrays.files}")
            return arrays["X"], arrays["y"]
    if suffix in (".svm", ".libsvm"):
        from sklearn.datasets import load_svmlight_file

        X, y = load_svmlight_file(str(path), n_features=n_features)
        return X.toarray(), y
    try:
        import pandas as pd
    except ImportError as error:
        raise ValueError(f"reading {path.name} needs pandas: pip install 'privfed[reports]' (or use .npz)") from error
    frame = pd.read_csv(path) if suffix == ".csv" else pd.read_parquet(path)
    columns = list(frame.columns)
    if isinstance(label_column, int) and not isinstance(label_column, bool):
        if not -len(columns) <= label_column < len(columns):
            raise ValueError(f"label-column {label_column} is outside {path.name}'s {len(columns)} columns")
        label_column = columns[label_column]
    features = [c for c in columns if c != label_column] if feature_columns is None else list(feature_columns)
    missing = [c for c in [label_column, *features] if c not in columns]
    if missing:
        raise ValueError(f"columns {missing} are not among {path.name}'s columns {columns}")
    return frame[features].to_numpy(dtype=float), frame[label_column].to_numpy()


def load_public(path: str | Path) -> np.ndarray:
    """The server's public (unlabelled) set: npz with an array ``X``, or every column of a CSV/Parquet file."""
    path = Path(path)
    if path.suffix.lower() not in (".npz", ".csv", ".parquet") or not path.is_file():
        raise ValueError(f"public-path {str(path)!r} must be an existing .npz, .csv or .parquet file")
    if path.suffix.lower() == ".npz":
        with np.load(path, allow_pickle=False) as arrays:
            if "X" not in arrays.files:
                raise ValueError(f"public-path {str(path)!r} must hold an array 'X', has {arrays.files}")
            return arrays["X"]
    import pandas as pd

    frame = pd.read_csv(path) if path.suffix.lower() == ".csv" else pd.read_parquet(path)
    return frame.to_numpy(dtype=float)


# --- transport --------------------------------------------------------------------------------------
def to_recorddict(records: Sequence[Record], config: Mapping[str, Any] | None = None) -> Any:
    """A Flower ``RecordDict``: per record ``<kind>`` (ArrayRecord) and ``<kind>.scalars`` (ConfigRecord)."""
    from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

    content = RecordDict()
    for record in records:
        content[record.kind] = ArrayRecord({name: Array(np.asarray(a)) for name, a in record.arrays.items()})
        content[f"{record.kind}.scalars"] = ConfigRecord(dict(record.scalars))
    if config:
        content["privfed"] = ConfigRecord(dict(config))
    return content


def from_recorddict(content: Any, *, sender: str) -> tuple[list[Record], dict[str, Any]]:
    """privfed's records and ``privfed`` config in a Flower ``RecordDict``; :class:`MessageError` names ``sender``."""
    records, config = [], {}
    for key, value in content.items():
        if key == "privfed":
            config = dict(value)
        elif key.endswith(".scalars"):
            continue
        else:
            try:
                arrays = {name: array.numpy() for name, array in value.items()}
                scalars = dict(content[f"{key}.scalars"])
            except (ValueError, KeyError, TypeError, AttributeError) as error:
                raise MessageError(f"{sender} sent an unreadable {key!r} message: {error}") from error
            records.append(Record(key, arrays, scalars))
    return records, config
