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
* **Published models** (:func:`model_to_record`, :func:`model_from_record`): a model that must travel (the
  Selective-FD client model that the run publishes) goes in the bundle's safe formats (safetensors with a JSON
  spec, skops with privfed's trusted-type list, xgboost's UBJSON) as byte arrays, never pickled.
"""

from __future__ import annotations

import importlib
import json
import math
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privfed.accounting.documents import parse_json, read_npz
from privfed.pipelines.protocol.messages import MessageError, Record

__all__ = [
    "DATA_FORMATS",
    "DP_TRAINING_REQUEST",
    "PUBLISHED_MODEL",
    "PUBLISH_REQUEST",
    "TRUSTED_MODEL_PACKAGES",
    "build_model",
    "estimator_from_config",
    "from_recorddict",
    "load_party_data",
    "load_public",
    "model_from_record",
    "model_spec",
    "model_to_record",
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
    from privfed.pipelines.models.dp_config import DPConfig

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
        document = parse_json(spec, f"{name} spec")
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

    from privfed.pipelines.models.dp_config import DPConfig

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
    params = parse_json(str(config.get(f"{key}-params", "{}")), f"{key}-params")
    return build_model(json.dumps({"class": path, "params": params}), name=key)


def estimator_from_config(config: Mapping[str, Any]) -> Any:
    """The unfitted pipeline estimator a run configuration describes (0 or "" stand for "not set")."""
    algorithm = str(config.get("algorithm", "fedkt"))
    if algorithm == "privatekt":
        return _privatekt_from_config(config)
    if algorithm not in ("fedkt", "fedkd", *_FEDERATED_DISTILLATION):
        names = ("fedkt", "fedkd", "privatekt", *_FEDERATED_DISTILLATION)
        raise ValueError(f"algorithm must be one of {names}, got {algorithm!r}")
    optional = {key: float(config[key]) or None for key in ("gamma", "sigma", "target-epsilon", "clip")
                if key in config}
    seed = int(config.get("random-state", -1))
    common = dict(delta=float(config.get("delta", 1e-5)), random_state=None if seed < 0 else seed,
                  noise_seed=_noise_seed(config), classes=_public_classes(config))
    if algorithm in _FEDERATED_DISTILLATION:
        return _federated_distillation_from_config(config, algorithm, common)
    if algorithm == "fedkd":
        from privfed.pipelines.fedkd.estimator import FedKD

        return FedKD(
            _model_from_config(config, "local-model"),
            _model_from_config(config, "server-model"),
            quantization_scale=int(config.get("quantization-scale", 200)) or None,
            gamma=optional.get("gamma"),
            clip=optional.get("clip"),
            weighting=str(config.get("weighting", "auto")),
            multilabel=bool(config.get("multilabel", False)),
            aggregator=str(config.get("aggregator", "laplace")),
            secure_aggregation=bool(config.get("secure-aggregation", False)),
            sigma=optional.get("sigma"),
            collusion=None if int(config.get("collusion", -1)) < 0 else int(config["collusion"]),
            **common,
        )
    from privfed.pipelines.fedkt.estimator import FedKT

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
        secure_aggregation=bool(config.get("secure-aggregation", False)),
        accounting=str(config.get("accounting", "conservative")),
        target_epsilon=optional.get("target-epsilon"),
        small_parties=str(config.get("small-parties", "error")),
        collusion=None if int(config.get("collusion", -1)) < 0 else int(config["collusion"]),
        **common,
    )


def _noise_seed(config: Mapping[str, Any]) -> int | None:
    """The run config's ``noise-seed``: −1 (the default) is secret noise, drawn by each site from its own OS
    entropy; a seed ≥ 0 makes the noise reproducible and every ε of the run ∞ for whoever holds the bundle."""
    value = int(config.get("noise-seed", -1))
    return None if value < 0 else value


def _public_classes(config: Mapping[str, Any]) -> list | None:
    """A pipeline's ``classes`` from the run config's ``classes`` (a JSON list of labels; absent or empty: None)."""
    if not str(config.get("classes", "")).strip():
        return None
    text = str(config["classes"])
    try:
        classes = json.loads(text)
    except json.JSONDecodeError:
        classes = None
    if not isinstance(classes, list) or not all(isinstance(c, (int, str)) and not isinstance(c, bool)
                                                for c in classes):
        raise ValueError(f"run config 'classes' must be a JSON list of integer or string labels, got {text!r}")
    return classes


def _privatekt_from_config(config: Mapping[str, Any]) -> Any:
    """PrivateKT from the run config: the global ``model`` and PrivateKT's hyper-parameters (defaults as the class)."""
    from privfed.pipelines.privatekt.estimator import PrivateKT

    seed = int(config.get("random-state", -1))
    integers = ("queries-per-round", "buffer-rounds", "self-training-size", "rounds", "local-epochs",
                "fine-tune-epochs", "fine-tune-batch-size", "self-training-epochs")
    floats = ("epsilon-per-round", "client-fraction", "delta")
    settings = {key.replace("-", "_"): int(config[key]) for key in integers if key in config}
    settings |= {key.replace("-", "_"): float(config[key]) for key in floats if key in config}
    return PrivateKT(_model_from_config(config, "model"), **settings, classes=_public_classes(config),
                     random_state=None if seed < 0 else seed, noise_seed=_noise_seed(config))
#: Run-config names of Selective-FD and its baselines (privfed.pipelines.selective_fd.estimator, .baselines).
_FEDERATED_DISTILLATION = ("selective-fd", "fedmd", "independent-learning")
#: The run config's ``dp-selector`` → SelectiveFD's ``dp_selector`` (auto: DP when the clients train with DP-SGD).
_DP_SELECTOR = {"auto": None, "true": True, "false": False}


def _federated_distillation_from_config(config: Mapping[str, Any], algorithm: str, common: dict) -> Any:
    """SelectiveFD, FedMD or IndependentLearning from the run config (keys in ``docs/federation.md``)."""
    from privfed.pipelines.selective_fd.baselines import FedMD, IndependentLearning
    from privfed.pipelines.selective_fd.estimator import SelectiveFD

    model = _model_from_config(config, "local-model")
    shared = dict(rounds=int(config.get("rounds", 10)), local_steps=int(config.get("local-steps", 10)),
                  client=int(config.get("client", 0)), **common)
    if algorithm == "independent-learning":
        return IndependentLearning(model, **shared)
    privacy = str(config.get("selective-fd-privacy", "")) or None
    # Each privacy option reads its own keys only (PrivateKT and FedKT share ``epsilon-per-round`` and ``sigma``).
    keys = {"rr": ("epsilon-per-round",), "gnmax": ("sigma",),
            "confident-gnmax": ("sigma", "threshold", "sigma-threshold")}.get(privacy or "", ())
    optional = {key.replace("-", "_"): float(config[key]) or None for key in keys if key in config}
    distillation = dict(distill_steps=int(config.get("distill-steps", 10)),
                        proxy_batch=int(config.get("proxy-batch", 512)), labels=str(config.get("labels", "soft")),
                        temperature=float(config.get("temperature", 1.0)), privacy=privacy, **optional)
    if algorithm == "fedmd":
        return FedMD(model, **shared, **distillation)
    width = str(config.get("kernel-width", "median"))
    dp_selector = str(config.get("dp-selector", "auto")).lower()
    if dp_selector not in _DP_SELECTOR:
        raise ValueError(f"dp-selector must be one of {sorted(_DP_SELECTOR)}, got {dp_selector!r}")
    return SelectiveFD(
        model, tau_client=float(config.get("tau-client", 0.25)), tau_server=float(config.get("tau-server", 1.0)),
        kernel_width=width if width == "median" else float(width),
        regularization=float(config.get("regularization", 1e-3)), n_auxiliary=int(config.get("n-auxiliary", 1000)),
        max_known=int(config.get("max-known", 1000)),
        validation_fraction=float(config.get("validation-fraction", 0.2)), dp_selector=_DP_SELECTOR[dp_selector],
        dp_selector_epsilon=float(config.get("dp-selector-epsilon", 1.0)),
        dp_selector_frequencies=int(config.get("dp-selector-frequencies", 128)),
        dp_selector_regularization=float(config.get("dp-selector-regularization", 1e-2)), **shared, **distillation,
    )


# --- published models -------------------------------------------------------------------------------
#: The record kind of a model that crosses the wire, and of the server's request for it (no content).
PUBLISHED_MODEL = "published-model"
PUBLISH_REQUEST = "publish-request"
#: The server's request (no content) for a Selective-FD party's ``dp-training`` report after the last round.
DP_TRAINING_REQUEST = "dp-training-request"


def model_to_record(model: Any) -> Record:
    """A fitted model in the bundle's safe formats: one uint8 array per file, the family and class as scalars.

    A :class:`~privfed.pipelines.models.fitting.FittedClassifier` (a refitted client model over class codes)
    travels as its estimator plus its class codes (``fitted-classes``, JSON) and class count.
    """
    from privfed.bundle.families import model_family, write_model
    from privfed.pipelines.models.fitting import FittedClassifier

    scalars: dict[str, Any] = {"family": "", "class": "", "fitted-classes": "", "n-classes": 0}
    estimator = model
    if isinstance(model, FittedClassifier):
        scalars.update({"fitted-classes": json.dumps([int(c) for c in model.classes]), "n-classes": model.n_classes})
        estimator = model.estimator
    arrays: dict[str, np.ndarray] = {}
    if estimator is not None:
        family = model_family(estimator)
        with tempfile.TemporaryDirectory(prefix="privfed-model-") as folder:
            entry = write_model(estimator, family, Path(folder))
            arrays = {name: np.frombuffer((Path(folder) / name).read_bytes(), dtype=np.uint8)
                      for name in entry["files"]}
        scalars.update({"family": family, "class": entry["class"]})
    return Record(PUBLISHED_MODEL, arrays, scalars)


def model_from_record(record: Record, *, sender: str, max_bytes: int) -> Any:
    """The model of :func:`model_to_record`, loaded as ``load_bundle`` loads one (MessageError names ``sender``)."""
    from privfed.bundle.families import FAMILY_FILES, read_model
    from privfed.bundle.manifest import BundleError
    from privfed.pipelines.models.fitting import FittedClassifier

    where = f"{sender} sent a malformed {PUBLISHED_MODEL!r} message"
    if record.kind != PUBLISHED_MODEL:
        raise MessageError(f"{sender} sent a {record.kind!r} message where a {PUBLISHED_MODEL!r} message was expected")
    if record.nbytes > max_bytes:
        raise MessageError(f"{sender} sent an oversized {PUBLISHED_MODEL!r} message: {record.nbytes} bytes, "
                           f"at most {max_bytes}")
    scalars = record.scalars
    if set(scalars) != {"family", "class", "fitted-classes", "n-classes"}:
        raise MessageError(f"{where}: scalars {sorted(scalars)}")
    family = str(scalars["family"])
    estimator = None
    if family:
        files = FAMILY_FILES.get(family) if family != "torch-module" else None
        if files is None or set(record.arrays) != set(files) or any(
                not isinstance(a, np.ndarray) or a.dtype != np.uint8 or a.ndim != 1 for a in record.arrays.values()):
            raise MessageError(f"{where}: family {family!r} with files {sorted(record.arrays)}")
        try:
            estimator = read_model({"family": family, "class": str(scalars["class"])},
                                    {name: array.tobytes() for name, array in record.arrays.items()},
                                    module=None, model_class=None, module_fn=None)
        except BundleError as error:
            raise MessageError(f"{where}: {error}") from None
    elif record.arrays:
        raise MessageError(f"{where}: files {sorted(record.arrays)} without a model family")
    if not scalars["fitted-classes"]:
        if estimator is None:
            raise MessageError(f"{where}: no model")
        return estimator
    try:
        classes = np.asarray(parse_json(str(scalars["fitted-classes"]), "fitted-classes"), dtype=np.int64)
    except (ValueError, TypeError) as error:
        raise MessageError(f"{where}: fitted-classes {scalars['fitted-classes']!r}") from error
    return FittedClassifier(estimator, classes, int(scalars["n-classes"]))


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
        arrays = read_npz(path, f"data-path {str(path)!r}")
        if not {"X", "y"} <= set(arrays):
            raise ValueError(f"data-path {str(path)!r} must hold arrays 'X' and 'y', has {sorted(arrays)}")
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
        arrays = read_npz(path, f"public-path {str(path)!r}")
        if "X" not in arrays:
            raise ValueError(f"public-path {str(path)!r} must hold an array 'X', has {sorted(arrays)}")
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
