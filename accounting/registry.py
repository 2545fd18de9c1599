"""One registry of mechanism kinds, so that a mechanism can be rebuilt from what was recorded.

Ledgers, mechanism files for ``privfed account`` and audits record a mechanism
as ``{"kind": ..., "unit": ..., "parameters": {...}}``. Data-independent
mechanisms are rebuilt from their public parameters alone; data-dependent ones
also need their private evidence (for example the vote matrix), which is kept
out of public records.

The registry knows no mechanism (after Opacus's accountant registry): each
mechanism module registers its class with :func:`register`, and the class
brings its hooks as class methods of :class:`Mechanism`
(:meth:`~Mechanism.from_parameters`, :meth:`~Mechanism.from_public_parameters`,
:meth:`~Mechanism.defaulted_parameters`). Nothing here imports a mechanism
module; ``privfed.accounting`` imports them all, which registers every kind.
"""

from __future__ import annotations

import difflib
import inspect
import math
import numbers
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from .documents import check_answer_epsilon, unknown_key_message
from .mechanism import Mechanism

if TYPE_CHECKING:
    import dp_accounting

__all__ = [
    "checked_public_mechanism_from_record",
    "MAX_PUBLIC_CLASSES",
    "defaulted_parameters",
    "PublicVoteView",
    "mechanism_class",
    "mechanism_from_record",
    "mechanism_kinds",
    "public_mechanism_from_record",
    "register",
    "set_kind_importer",
]

_REGISTRY: dict[str, type[Mechanism]] = {}
#: What imports the module that registers a kind, or every such module for ``None`` (set by the package, which knows
#: its modules): the package imports its modules on first use, so a lookup runs it, and a record rebuilds whichever
#: modules the process happened to import before.
_IMPORT_KINDS: list[Callable[[str | None], None]] = []

M = TypeVar("M", bound=type[Mechanism])


def register(cls: M) -> M:
    """Class decorator: make ``cls.kind`` rebuildable by :func:`mechanism_from_record`."""
    if cls.kind in _REGISTRY and _REGISTRY[cls.kind] is not cls:
        raise ValueError(f"mechanism kind {cls.kind!r} is already registered to {_REGISTRY[cls.kind].__name__}")
    _REGISTRY[cls.kind] = cls
    return cls


def set_kind_importer(import_kinds: Callable[[str | None], None]) -> None:
    """Make lookups call ``import_kinds(kind)`` (the package's import of the module that registers ``kind``, or of
    every mechanism module for ``None``)."""
    _IMPORT_KINDS[:] = [import_kinds]


def _registry(kind: str | None = None) -> dict[str, type[Mechanism]]:
    """The registered classes, once the module of ``kind`` is imported, or every mechanism module for ``None``
    (:func:`set_kind_importer`; every module once per process: a lookup that fails to import them leaves the
    importer for the next)."""
    if _IMPORT_KINDS and (kind is None or kind not in _REGISTRY):
        _IMPORT_KINDS[0](kind)
        if kind is None or kind not in _REGISTRY:  # every module is imported now
            _IMPORT_KINDS.clear()
    return _REGISTRY


def mechanism_kinds() -> tuple[str, ...]:
    """The registered kinds, sorted."""
    return tuple(sorted(_registry()))


def mechanism_class(kind: str) -> type[Mechanism]:
    """The class registered for ``kind``."""
    try:
        return _registry(kind)[kind]
    except KeyError:
        raise ValueError(f"kind must be one of {', '.join(mechanism_kinds())}; got {kind!r}") from None


def mechanism_from_record(
    record: Mapping[str, Any], *, evidence: Mapping[str, np.ndarray] | None = None
) -> Mechanism:
    """Rebuild a mechanism from ``{"kind", "unit", "parameters"}`` (and its evidence if data-dependent)."""
    if not isinstance(record, Mapping) or "kind" not in record:
        raise ValueError(f"record must be a mapping with a 'kind' key, got {record!r:.80}")
    cls = mechanism_class(record["kind"])
    return cls.from_parameters(record.get("parameters", {}), unit=record.get("unit", "example"), evidence=evidence)


#: Largest number of classes a public rebuild accepts: one all-zero row of this many counts is allocated.
MAX_PUBLIC_CLASSES = 1_000_000


@dataclass(frozen=True, eq=False)
class PublicVoteView(Mechanism):
    """A noisy-max release over private votes, seen through its public parameters only.

    ``one_query`` is the mechanism rebuilt with a single all-zero vote row of the
    recorded number of classes; ``count`` is the recorded number of queries. A
    noisy-max release's data-independent curve is the sequential composition of
    ``count`` identical per-query bounds (Mironov 2017, Prop. 1), so

        RDP_indep(α) = count · RDP_indep,1(α),

    computed in O(classes) memory whatever ``count`` claims (the rebuilt
    mechanism of a 2 × 10⁷-query ledger holds one row, not 2 × 10⁷). ``rdp()``
    returns the same curve, which bounds the data-dependent one from above; the
    data-dependent value itself needs the private votes and is not available
    here. ``dp_event()`` is the one-query event self-composed ``count`` times.
    """

    one_query: Mechanism
    count: int
    unit: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "unit", self.one_query.unit)

    @property
    def kind(self) -> str:  # type: ignore[override]
        return self.one_query.kind

    @property
    def relations(self) -> frozenset[str]:
        return self.one_query.relations

    @property
    def data_dependent(self) -> bool:
        return self.one_query.data_dependent

    @property
    def num_queries(self) -> int:
        return self.count

    def rdp(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        return self.rdp_data_independent(orders, analysis=analysis)

    def rdp_data_independent(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        return self.count * np.asarray(self.one_query.rdp_data_independent(orders, analysis=analysis), dtype=float)

    def pure_epsilon(self) -> float | None:
        value = self.one_query.pure_epsilon()
        return None if value is None else self.count * value

    def dp_event(self) -> dp_accounting.DpEvent | None:
        event = self.one_query.dp_event()
        if event is None:
            return None
        import dp_accounting  # already imported: the event is its

        if isinstance(event, dp_accounting.SelfComposedDpEvent) and event.count == 1:
            event = event.event
        return dp_accounting.SelfComposedDpEvent(event, self.count)

    def parameters(self) -> dict[str, Any]:
        return {**self.one_query.parameters(), "num_queries": self.count}


def _checked_record(record: object) -> Mapping[str, Any]:
    if not isinstance(record, Mapping) or not isinstance(record.get("kind"), str):
        raise ValueError(f"a mechanism record must be an object with a string 'kind', got {record!r:.80}")
    return record


def public_mechanism_from_record(record: Mapping[str, Any]) -> tuple[Mechanism, bool]:
    """Rebuild a mechanism from ``{"kind", "unit", "parameters"}`` without private data.

    Returns ``(mechanism, public_view)``. ``public_view`` is True when the
    mechanism needs private evidence (vote matrices): it is then the view its
    kind gives through :meth:`~Mechanism.from_public_parameters` (a
    :class:`PublicVoteView` for a noisy-max release, a composition of such views
    for a composition), whose data-independent curve, ε and ``dp_event()`` are
    exact and cost memory independent of the recorded number of queries; its
    data-dependent values are not available (the data-independent ones stand in).
    """
    record = _checked_record(record)
    parameters = record.get("parameters", {})
    if not isinstance(parameters, Mapping):
        raise ValueError(f"parameters must be an object, got {type(parameters).__name__}")
    view = mechanism_class(record["kind"]).from_public_parameters(parameters, unit=record.get("unit", "example"))
    if view is not None:
        return view, True
    return mechanism_from_record(record), False


class _ReadRecorder(Mapping[str, Any]):
    """A read-only view of a record that remembers which keys were looked up (nested mappings and lists too)."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = data
        self.read: set[str] = set()
        self.children: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        value = self._data[key]
        if key not in self.children:
            self.children[key] = _wrap(value)
        return self.children[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.read.add(key)
        return key in self._data


def _wrap(value: Any) -> Any:
    if isinstance(value, Mapping):
        return _ReadRecorder(value)
    if isinstance(value, list) and value and all(isinstance(item, Mapping) for item in value):
        return [_ReadRecorder(item) for item in value]
    return value


def _same(given: Any, rebuilt: Any) -> bool:
    if isinstance(given, bool) or isinstance(rebuilt, bool) or given is None or rebuilt is None:
        return given is rebuilt or given == rebuilt
    if isinstance(given, numbers.Real) and isinstance(rebuilt, numbers.Real):
        return math.isclose(float(given), float(rebuilt), rel_tol=1e-9, abs_tol=1e-300)
    if isinstance(given, list) and isinstance(rebuilt, list):
        try:
            given_array, rebuilt_array = np.asarray(given, dtype=float), np.asarray(rebuilt, dtype=float)
            same_shape = given_array.shape == rebuilt_array.shape
            return same_shape and bool(np.allclose(given_array, rebuilt_array, rtol=1e-9, atol=0))
        except (TypeError, ValueError):
            return given == rebuilt
    return bool(given == rebuilt)


#: The keys of a mechanism record (ledgers, claims files).
RECORD_KEYS = ("kind", "parameters", "unit")


def _constructor_names(kind: str) -> set[str]:
    return set(inspect.signature(_registry(kind)[kind]).parameters) - {"self", "unit"}


def _check_record(record: _ReadRecorder, rebuilt: Mapping[str, Any], where: str) -> None:
    """Every key of ``record`` is one the rebuild of its kind used, or a value the rebuilt mechanism records alike.

    A parameter is *used* when ``from_parameters`` looked it up and it names a constructor
    argument (a reader that walks every item, ``parameters.items()``, thus still cannot
    accept a typo), or when the rebuilt mechanism's ``parameters()`` records it (derived
    values such as ``num_queries``, and ``members`` of a composition), whose value must
    then agree.
    """
    for key in record._data:
        if key not in RECORD_KEYS:
            raise ValueError(unknown_key_message(key, RECORD_KEYS, where))
    parameters, recorded = record.children.get("parameters"), rebuilt.get("parameters", {})
    if not isinstance(parameters, _ReadRecorder):
        return
    valid = (parameters.read & _constructor_names(rebuilt["kind"])) | set(recorded)
    for key, value in parameters._data.items():
        here = f"{where}.parameters.{key}"
        if key not in valid:
            raise ValueError(unknown_key_message(key, valid, f"{where}.parameters"))
        if key not in recorded:
            continue
        child, expected = parameters.children.get(key), recorded[key]
        if isinstance(child, list) and child and isinstance(child[0], _ReadRecorder):
            if not isinstance(expected, list) or len(expected) != len(child):
                raise ValueError(f"{here} disagrees with the rebuilt mechanism")
            for index, (item, rebuilt_item) in enumerate(zip(child, expected)):
                _check_record(item, rebuilt_item, f"{here}[{index}]")
        elif (isinstance(expected, numbers.Integral) and not isinstance(expected, bool)
              and isinstance(value, numbers.Real) and not isinstance(value, bool) and not float(value).is_integer()):
            raise ValueError(f"{here} must be an integer, got {value!r}")
        elif not _same(value, expected):
            raise ValueError(f"{here} = {value!r} disagrees with the other parameters, which give {expected!r}")


def defaulted_parameters(record: Mapping[str, Any], *, where: str = "record") -> dict[str, Any]:
    """The parameters a rebuild of ``record`` takes from defaults because the record does not state them.

    ``{"<where>.parameters.<name>": default}`` for every constructor argument with a
    default other than ``None`` (``None`` means "derived from the others") that the
    record's ``parameters`` omit, and ``"<where>.unit"`` when the record has no unit;
    members of a composition are listed under ``<where>.parameters.members[i]``. A
    reader sees every value the recomputation used, stated or not.
    """
    record = _checked_record(record)
    defaults: dict[str, Any] = {}
    if "unit" not in record:
        defaults[f"{where}.unit"] = "example"
    parameters = record.get("parameters", {})
    parameters = parameters if isinstance(parameters, Mapping) else {}
    defaults.update(mechanism_class(record["kind"]).defaulted_parameters(parameters, where=f"{where}.parameters"))
    return defaults


def checked_public_mechanism_from_record(record: Mapping[str, Any], *, where: str = "record") -> tuple[Mechanism, bool]:
    """:func:`public_mechanism_from_record`, refusing every key the rebuild would ignore.

    A key of ``record`` (or of its ``parameters``, members included) is accepted when
    the kind's :meth:`~Mechanism.from_parameters` reads it, or when the rebuilt
    mechanism records it among its :meth:`~Mechanism.parameters` with the same value
    (a derived value such as ``num_queries``, checked for agreement: ``2.5`` queries
    is refused, not truncated). Anything else — a misspelled optional parameter that
    would silently take its default — raises ``ValueError`` naming the key, the valid
    keys and the closest one. The valid keys are learnt from the registered class
    itself, so every registered kind is checked the same way.
    """
    if not isinstance(record, Mapping):
        raise ValueError(f"{where} must be an object with kind, unit and parameters, got {record!r}")
    kind = record.get("kind")
    if kind not in _registry(kind if isinstance(kind, str) else None):
        close = difflib.get_close_matches(str(kind), mechanism_kinds(), n=1)
        raise ValueError(f"{where}.kind must be one of {list(mechanism_kinds())}, got {kind!r}"
                         + (f"; did you mean {close[0]!r}?" if close else ""))
    recorder = _ReadRecorder(record)
    try:
        mechanism, placeholder = public_mechanism_from_record(recorder)
    except (ValueError, TypeError, KeyError, OverflowError) as error:
        reason = f"missing parameter {error}" if isinstance(error, KeyError) else str(error)
        parameters = recorder.children.get("parameters")
        if isinstance(parameters, _ReadRecorder):
            stray = [key for key in parameters._data if key not in parameters.read
                     and difflib.get_close_matches(str(key), parameters.read, n=1, cutoff=0.6)]
            if stray:  # a misspelling of what the rebuild looked for
                reason += "; " + unknown_key_message(stray[0], parameters.read, f"{where}.parameters")
        raise ValueError(f"{where} ({kind}) cannot be rebuilt: {reason}") from None
    rebuilt = {"kind": mechanism.kind, "unit": mechanism.unit, "parameters": mechanism.parameters()}
    _check_record(recorder, rebuilt, where)
    for member in getattr(mechanism, "mechanisms", (mechanism,)):
        check_answer_epsilon(member, f"{where} ({member.kind})")
    return mechanism, placeholder

