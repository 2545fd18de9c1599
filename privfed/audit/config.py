"""``privfed audit --empirical CONFIG.toml``: one pipeline, its data and its canaries, read from a TOML file.

The file is a sweep configuration (``docs/reports.md``: ``[pipeline]``, ``[data]``, ``[split]``) describing a
single run — no ``[grid]``, at most one ``[[setting]]``, no ``[reference]``, one seed — plus an ``[audit]``
table::

    [audit]
    num_canaries = 800      # required, >= 2
    confidence = 0.95       # optional, in (0, 1)
    design = "pipeline"     # optional: "pipeline", "mechanism" or "gradient" (privfed.empirical_audit)

:func:`load_audit_config` validates everything before any data is loaded or any model trained.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privfed.accounting._checks import check_int_at_least, check_probability
from privfed.audit.empirical_pipelines import DESIGN_CHOICES
from privfed.reports.config import SPLIT_KEYS, ConfigError, SweepConfig, init_parameters, parse_config, read_toml

__all__ = ["AuditConfig", "load_audit_config"]

_AUDIT_KEYS = ("num_canaries", "confidence", "design")


@dataclass(frozen=True)
class AuditConfig:
    """A validated ``--empirical`` configuration: the run's sweep configuration and the audit's settings."""

    run: SweepConfig
    num_canaries: int
    confidence: float
    design: str = "pipeline"

    @property
    def seed(self) -> int:
        return self.run.seeds[0]

    def _setting(self, *, split: bool) -> dict[str, Any]:
        """The one setting's values that are split keys (``split=True``) or estimator parameters."""
        values = self.run.settings[0].values if self.run.settings else {}
        return {key: value for key, value in values.items() if (key in SPLIT_KEYS) == split}

    def estimator(self) -> Any:
        """The unfitted estimator under audit (``random_state`` = the seed)."""
        cls = self.run.estimator_class()
        kwargs = {**self.run.params, **self._setting(split=False),
                  **{key: spec.build() for key, spec in self.run.models.items()}}
        if "progress" in init_parameters(cls):
            kwargs["progress"] = False
        return cls(**kwargs, random_state=self.seed)

    def data(self) -> tuple[list, Any]:
        """The parties and the public set: the configured federated split of the training data, for the seed."""
        from privfed.pipelines.data.datasets import federated_split, load_dataset

        spec = self.run.data
        if spec.sklearn is not None:
            import sklearn.datasets

            X, y = getattr(sklearn.datasets, spec.sklearn)(return_X_y=True)
        else:
            dataset = load_dataset(spec.name, spec.folder)
            X, y = dataset.X_train, dataset.y_train
        split = federated_split(X, y, random_state=self.seed, **self.run.split, **self._setting(split=True))
        return list(split.parties), split.X_public


def load_audit_config(path: str | Path) -> AuditConfig:
    """Read and validate an ``--empirical`` configuration; :class:`ConfigError` names the bad key."""
    path = Path(path)
    document, text = read_toml(path)
    audit = document.pop("audit", None)
    if not isinstance(audit, dict):
        raise ConfigError("[audit] with num_canaries = N (>= 2) is required")
    unknown = sorted(set(audit) - set(_AUDIT_KEYS))
    if unknown:
        raise ConfigError(f"audit.{unknown[0]}: unknown key; valid keys: {list(_AUDIT_KEYS)}")
    for key in ("grid", "reference"):
        if key in document:
            raise ConfigError(f"[{key}] describes a sweep; an audit runs one pipeline: remove [{key}]")
    if isinstance(document.get("setting"), list) and len(document["setting"]) > 1:
        raise ConfigError(f"an audit runs one pipeline: give at most one [[setting]], got {len(document['setting'])}")
    run = parse_config(document, base_dir=path.parent, source_text=text)
    if len(run.seeds) != 1:
        raise ConfigError(f"seeds: an audit runs once; give one seed, got {list(run.seeds)}")
    if run.settings and run.settings[0].links:
        raise ConfigError("setting.link: an audit's setting gives its values directly, without links")
    try:
        num_canaries = check_int_at_least("audit.num_canaries", audit.get("num_canaries"), 2)
        confidence = check_probability("audit.confidence", audit.get("confidence", 0.95))
    except TypeError as error:
        raise ConfigError(str(error)) from None
    design = audit.get("design", "pipeline")
    if design not in DESIGN_CHOICES:
        raise ConfigError(f"audit.design: must be one of {list(DESIGN_CHOICES)}, got {design!r}")
    return AuditConfig(run=run, num_canaries=num_canaries, confidence=confidence, design=design)
