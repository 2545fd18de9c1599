"""Your own data: tables (CSV, Parquet, pandas) read into ``parties``, with the label encoding recorded.

:func:`load_parties` reads either **one table with a party column** (every row
says which party holds it) or **one table per party** (a list or dict of files or
DataFrames, or a folder of files), keeps the feature columns, and returns a
:class:`PartyData`: ``parties`` ready for any privfed pipeline's ``fit`` — a list
of ``(X, y)`` with ``X`` a float array and ``y`` integer codes — plus the record
of how the labels were encoded (``classes``: code ``i`` is ``classes[i]``, the
sorted distinct labels of all parties, so every party uses one encoding), the
party names and each party's row count.

Everything is checked before any model is trained: missing columns (named, with
the columns that exist), non-numeric features (named, with an example value),
missing values (named, with a count), missing labels, empty parties. Only data
is read (CSV text or Parquet columns): nothing executable is loaded.

Reading needs pandas (``pip install 'privfed[data]'``); Parquet files need pyarrow
as well (``pip install pyarrow``).

Examples
--------
>>> import pandas as pd
>>> table = pd.DataFrame({"site": ["a", "a", "b", "b"], "x": [0.0, 1.0, 2.0, 3.0], "y": ["no", "yes", "yes", "no"]})
>>> data = load_parties(table, party_column="site", label_column="y")
>>> data.party_names, data.classes.tolist(), data.rows
(('a', 'b'), ['no', 'yes'], (2, 2))
>>> data.parties[1][1]
array([1, 0])
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["PartyData", "load_parties"]

#: File suffixes read as CSV and as Parquet.
CSV_SUFFIXES = (".csv",)
PARQUET_SUFFIXES = (".parquet", ".pq")


@dataclass(frozen=True)
class PartyData:
    """The parties' data read from tables, and how it was encoded.

    Attributes
    ----------
    parties : list of (X, y)
        One pair per party, in ``party_names`` order: ``X`` of shape (rows, features)
        as float64, ``y`` the integer codes of the labels (``classes[y]`` are the labels).
    classes : ndarray
        The label of each code: the sorted distinct labels found in all parties.
    party_names : tuple of str
        Each party's name: its value in the party column, its key in a dict, its
        file's name without suffix, or its position in a list of DataFrames.
    rows : tuple of int
        Each party's row count.
    feature_columns : tuple of str
        The feature columns, in the order of ``X``'s columns.
    label_column : str
    """

    parties: list[tuple[np.ndarray, np.ndarray]]
    classes: np.ndarray
    party_names: tuple[str, ...]
    rows: tuple[int, ...]
    feature_columns: tuple[str, ...]
    label_column: str

    def decode(self, codes: Any) -> np.ndarray:
        """The labels of integer ``codes`` (for example a model's predictions)."""
        codes = np.asarray(codes)
        if codes.dtype.kind not in "iu" or (codes.size and (codes.min() < 0 or codes.max() >= len(self.classes))):
            raise ValueError(f"codes must be integers in 0..{len(self.classes) - 1}, got {codes!r}")
        return self.classes[codes]

    def features(self, source: Any, *, allow_missing: bool = False) -> np.ndarray:
        """The feature columns of another table (a public set, a test set), as a float array in this order.

        ``source`` is a CSV or Parquet file or a DataFrame; extra columns (a label
        column, say) are ignored, missing or non-numeric feature columns are errors.
        """
        name, table = _read_table(source, "source")
        return _features(table, self.feature_columns, name, allow_missing=allow_missing)

    def labels(self, source: Any) -> np.ndarray:
        """The label column of another table (a test set), encoded with this data's ``classes``."""
        name, table = _read_table(source, "source")
        _require_columns(table, [self.label_column], name, "label_column")
        labels = _labels(table, self.label_column, name)
        unknown = sorted(set(labels.tolist()) - set(self.classes.tolist()), key=str)
        if unknown:
            raise ValueError(f"{name}: labels {unknown[:5]} are not among the parties' classes {self.classes.tolist()}")
        return np.searchsorted(self.classes, labels)

    def summary(self) -> str:
        """One line per party: name, rows and label counts."""
        lines = [f"{len(self.parties)} parties, {len(self.feature_columns)} features, label {self.label_column!r} "
                 f"with classes {self.classes.tolist()} (codes 0..{len(self.classes) - 1})"]
        for name, (_, y) in zip(self.party_names, self.parties):
            counts = np.bincount(y, minlength=len(self.classes))
            lines.append(f"  {name}: {len(y)} rows, " + ", ".join(f"{c!s}: {n}" for c, n in zip(self.classes, counts)))
        return "\n".join(lines)


def load_parties(
    source: Any,
    *,
    label_column: str,
    party_column: str | None = None,
    feature_columns: Sequence[str] | None = None,
    allow_missing: bool = False,
) -> PartyData:
    """Read the parties' tables into ``parties`` for ``fit``, recording the label encoding.

    Parameters
    ----------
    source : path, DataFrame, list or dict
        One table with a party column (a ``.csv``/``.parquet`` path or a pandas
        DataFrame, with ``party_column``), or one table per party: a list of paths
        or DataFrames, a dict ``{party name: path or DataFrame}``, or a folder whose
        ``.csv``/``.parquet`` files are the parties (in name order).
    label_column : str
        The column holding the labels (numbers or strings; none missing).
    party_column : str, default=None
        With one table: the column naming each row's party (parties in sorted order of
        its values). Leave it out with one table per party.
    feature_columns : sequence of str, default=None
        The feature columns, in this order; by default every column but the label and
        party columns, in the first table's order. Every table must hold them all, as numbers.
    allow_missing : bool, default=False
        Keep missing feature values (NaN) — for models that handle them, such as
        ``HistGradientBoostingClassifier`` or XGBoost. By default they are an error.

    Returns
    -------
    PartyData
        ``.parties`` for ``fit``; ``.classes``, ``.party_names``, ``.rows`` record the encoding.
    """
    if not isinstance(label_column, str):
        raise TypeError(f"label_column must be a column name (str), got {label_column!r}")
    if party_column is not None and not isinstance(party_column, str):
        raise TypeError(f"party_column must be None or a column name (str), got {party_column!r}")
    if feature_columns is not None and (
        isinstance(feature_columns, str) or not all(isinstance(c, str) for c in feature_columns)
    ):
        raise TypeError(f"feature_columns must be None or a list of column names, got {feature_columns!r}")
    if not isinstance(allow_missing, bool):
        raise TypeError(f"allow_missing must be True or False, got {allow_missing!r}")

    tables = _party_tables(source, party_column)
    first_name, first = tables[0]
    excluded = {label_column} | ({party_column} if party_column else set())
    if feature_columns is None:
        feature_columns = [str(c) for c in first.columns if c not in excluded]
        if not feature_columns:
            raise ValueError(f"{first_name} has no feature column besides {sorted(excluded)}")
    else:
        feature_columns = list(feature_columns)
        clash = excluded & set(feature_columns)
        if clash:
            raise ValueError(f"feature_columns must not include the label or party column, got {sorted(clash)}")
        if not feature_columns:
            raise ValueError("feature_columns must name at least one column, got []")

    names, Xs, labels = [], [], []
    for name, table in tables:
        _require_columns(table, [label_column], name, "label_column")
        Xs.append(_features(table, feature_columns, name, allow_missing=allow_missing))
        labels.append(_labels(table, label_column, name))
        names.append(name)
    _check_one_label_type(labels, names, label_column)
    classes = np.unique(np.concatenate(labels))
    parties = [(X, np.searchsorted(classes, y)) for X, y in zip(Xs, labels)]
    return PartyData(
        parties=parties,
        classes=classes,
        party_names=tuple(names),
        rows=tuple(len(y) for y in labels),
        feature_columns=tuple(feature_columns),
        label_column=label_column,
    )


# --- reading ----------------------------------------------------------------------------------------------
def _pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise ImportError("load_parties reads tables with pandas: pip install 'privfed[data]'") from None
    return pandas


def _read_table(source: Any, argument: str) -> tuple[str, Any]:
    """``(name, DataFrame)`` for a CSV or Parquet path or a DataFrame."""
    pd = _pandas()
    if isinstance(source, pd.DataFrame):
        return "the DataFrame", source
    if not isinstance(source, (str, Path)):
        raise TypeError(f"{argument} must be a path to a .csv or .parquet file or a pandas DataFrame, got {source!r}")
    path = Path(source)
    suffix = path.suffix.lower()
    if suffix not in CSV_SUFFIXES + PARQUET_SUFFIXES:
        raise ValueError(f"{argument}: {str(path)!r} is neither a .csv nor a .parquet file")
    if not path.is_file():
        raise ValueError(f"{argument}: {str(path)!r} does not exist or is not a file")
    if suffix in PARQUET_SUFFIXES:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ImportError(f"reading {path.name} (Parquet) needs pyarrow: pip install pyarrow") from None
        return path.name, pd.read_parquet(path, engine="pyarrow")
    try:
        return path.name, pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
        raise ValueError(f"{argument}: {path.name} is not a readable CSV file ({error})") from None


def _party_tables(source: Any, party_column: str | None) -> list[tuple[str, Any]]:
    """``[(party name, DataFrame), ...]`` from any accepted ``source``."""
    pd = _pandas()
    name: str | None  # a party's name; None in a list of tables until read from the file name
    if isinstance(source, (str, Path)) and Path(source).is_dir():
        files = sorted(p for p in Path(source).iterdir() if p.suffix.lower() in CSV_SUFFIXES + PARQUET_SUFFIXES)
        if not files:
            raise ValueError(f"source: the folder {str(source)!r} holds no .csv or .parquet file")
        source = files
    if isinstance(source, (str, Path, pd.DataFrame)):
        name, table = _read_table(source, "source")
        if party_column is None:
            raise ValueError(
                f"party_column is required with one table ({name}): name the column that says which party holds "
                "each row, or pass one table per party (a list or dict of files or DataFrames)"
            )
        _require_columns(table, [party_column], name, "party_column")
        if table[party_column].isna().any():
            empty = int(table[party_column].isna().sum())
            raise ValueError(f"{name}: party_column {party_column!r} is empty in {empty} rows")
        groups = sorted(table.groupby(party_column, sort=False), key=lambda group: str(group[0]))
        if not groups:
            raise ValueError(f"{name} has no rows")
        return [(str(value), frame.drop(columns=party_column)) for value, frame in groups]
    if party_column is not None:
        raise ValueError("party_column applies to one table holding every party; leave it out with one table per party")
    if isinstance(source, Mapping):
        items: list[tuple[str | None, Any]] = [(str(name), table) for name, table in source.items()]
    elif isinstance(source, Sequence) and not isinstance(source, (str, bytes)):
        items = [(None, table) for table in source]
    else:
        raise TypeError(
            "source must be a path, a DataFrame, or a list or dict of paths or DataFrames (one per party), "
            f"got {type(source).__name__}"
        )
    if not items:
        raise ValueError("source holds no party: give at least one table")
    tables = []
    for index, (name, table) in enumerate(items):
        read_name, frame = _read_table(table, f"source[{name if name is not None else index}]")
        if name is None:
            name = Path(table).stem if isinstance(table, (str, Path)) else str(index)
        tables.append((name, frame))
    names = [name for name, _ in tables]
    if len(set(names)) != len(names):
        raise ValueError(f"source: two parties have one name ({names}); give a dict with distinct names")
    return tables


# --- checking ---------------------------------------------------------------------------------------------
def _require_columns(table: Any, columns: Sequence[str], name: str, argument: str) -> None:
    missing = [c for c in columns if c not in table.columns]
    if missing:
        close = difflib.get_close_matches(str(missing[0]), [str(c) for c in table.columns], n=1)
        raise ValueError(
            f"{argument}: {name} has no column {', '.join(map(repr, missing))}"
            f"{f' (did you mean {close[0]!r}?)' if close else ''}; its columns are "
            f"{', '.join(map(repr, map(str, table.columns)))}"
        )
    if len(table) == 0:
        raise ValueError(f"{name} has no rows")


def _features(table: Any, columns: Sequence[str], name: str, *, allow_missing: bool) -> np.ndarray:
    pd = _pandas()
    _require_columns(table, columns, name, "feature_columns")
    for column in columns:
        values = table[column]
        if not (pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_complex_dtype(values)):
            example = values.dropna().iloc[0] if values.notna().any() else None
            raise ValueError(
                f"{name}: feature column {column!r} is not numeric (e.g. {example!r}); encode it as numbers "
                "first, or leave it out with feature_columns"
            )
        missing = int(values.isna().sum())
        if missing and not allow_missing:
            raise ValueError(
                f"{name}: feature column {column!r} has {missing} missing values; fill or drop those rows, or pass "
                "allow_missing=True for a model that handles missing values"
            )
    X = table[list(columns)].to_numpy(dtype=np.float64, na_value=np.nan)
    if np.isinf(X).any():
        column = columns[int(np.argwhere(np.isinf(X))[0, 1])]
        raise ValueError(f"{name}: feature column {column!r} holds infinite values")
    return X


def _labels(table: Any, column: str, name: str) -> np.ndarray:
    values = table[column]
    missing = int(values.isna().sum())
    if missing:
        raise ValueError(f"{name}: label column {column!r} has {missing} missing labels; every row needs a label")
    labels = values.to_numpy()
    if labels.dtype.kind == "O":
        kinds = {"string" if isinstance(v, str) else "number" if isinstance(v, (int, float, np.number)) else
                 type(v).__name__ for v in labels}
        if len(kinds) > 1 or kinds - {"string", "number"}:
            raise ValueError(f"{name}: label column {column!r} mixes label types ({sorted(kinds)}); give one type")
        labels = labels.astype(str) if kinds == {"string"} else labels.astype(float)
    elif labels.dtype.kind not in "biufUS":
        labels = labels.astype(str)
    return labels


def _check_one_label_type(labels: list[np.ndarray], names: list[str], column: str) -> None:
    text = [y.dtype.kind in "US" for y in labels]
    if any(text) and not all(text):
        raise ValueError(
            f"label column {column!r} holds strings in {names[text.index(True)]} but numbers in "
            f"{names[text.index(False)]}; give every party's labels one type"
        )
