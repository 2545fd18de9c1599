"""The exact rows the official FedKT code puts in each party, its public set and its test set.

FedKT's public code (github QinbinLi/FedKT, commit 0bb9a89) draws its split from
numpy's global generator and scikit-learn's ``train_test_split``; the same seed
in privfed draws other rows. A *reference-rows file* records the official draw so
that a per-seed comparison runs on identical data. It is gzip-compressed (or
plain) JSON, read with :mod:`json` only (nothing executable is loaded), mapping
keys ``"{a9a|cod-rna}/parties={n}/seed={seed}"`` to objects with

* ``public_rows`` — row numbers of the public (query) set, in the code's order
  (its queries are a prefix of this list),
* ``test_rows`` — row numbers of the evaluation set,
* ``party_rows`` — one list per party, in the code's order,
* ``class1_label`` — the file's label the code maps to class 1 (the label of row 0),
* ``party_class_counts`` — per party, ``[class 0, class 1]`` counts in the code's coding.

Row numbers index the LIBSVM training file in its original order, which is the
order of ``load_dataset("adult_a9a" | "cod_rna")``'s ``X_train``. Before a split
is built, every party's class counts are checked against the labels given
(class 1 = the label of row 0), so a file and a data set that do not belong
together are refused instead of silently mixed.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...accounting._checks import check_choice, check_int_at_least
from ...accounting.documents import parse_json
from .datasets import FederatedSplit, _check_features_labels

__all__ = ["REFERENCE_ROWS_DATASETS", "ReferenceRows", "load_reference_rows", "reference_rows_split"]

REFERENCE_ROWS_DATASETS = {"adult_a9a": "a9a", "cod_rna": "cod-rna"}
"""privfed's data set names and the names the reference-rows file uses for them."""


@dataclass(frozen=True, eq=False)
class ReferenceRows:
    """One seed's split as the official FedKT code draws it.

    Attributes
    ----------
    key : str
        The entry's key in the file, e.g. ``"a9a/parties=50/seed=0"``.
    source : str
        The file read.
    public_rows, test_rows : ndarray of int64
        Public (query) rows in the code's order, and the evaluation rows.
    party_rows : tuple of ndarray of int64
        Each party's rows, in the code's order.
    party_class_counts : ndarray of shape (n_parties, 2)
        ``[class 0, class 1]`` per party in the code's coding (class 1 = the label of row 0).
    class1_label : float
        The file's label the code maps to class 1.
    """

    key: str
    source: str
    public_rows: np.ndarray
    test_rows: np.ndarray
    party_rows: tuple[np.ndarray, ...]
    party_class_counts: np.ndarray
    class1_label: float


def _rows(value: object, what: str) -> np.ndarray:
    rows = np.asarray(value)
    if rows.ndim != 1 or rows.size == 0 or not np.issubdtype(rows.dtype, np.integer):
        raise ValueError(f"{what} must be a non-empty list of row numbers, got {str(value)[:60]!r}")
    return rows.astype(np.int64)


def load_reference_rows(path: str | Path, *, dataset: str, n_parties: int, seed: int) -> ReferenceRows:
    """Read one seed's official rows from a reference-rows file.

    Parameters
    ----------
    path : str or Path
        The file (``.json.gz`` or ``.json``).
    dataset : {"adult_a9a", "cod_rna"}
        privfed's name of the data set.
    n_parties : int
        Number of parties (the file holds 50 and 20).
    seed : int
        The official code's ``--init_seed``.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    KeyError
        If the file holds no entry for this data set, party count and seed.
    ValueError
        On a malformed entry.
    """
    dataset = check_choice("dataset", dataset, tuple(REFERENCE_ROWS_DATASETS))
    n_parties = check_int_at_least("n_parties", n_parties, 1)
    seed = check_int_at_least("seed", seed, 0)
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        entries = parse_json(handle.read(), f"reference rows {str(path)!r}")
    key = f"{REFERENCE_ROWS_DATASETS[dataset]}/parties={n_parties}/seed={seed}"
    if not isinstance(entries, dict) or key not in entries:
        raise KeyError(f"{str(path)!r} holds no entry {key!r}")
    entry = entries[key]
    missing = {"public_rows", "test_rows", "party_rows", "party_class_counts", "class1_label"} - set(entry)
    if missing:
        raise ValueError(f"{str(path)!r} entry {key!r} lacks {sorted(missing)}")
    parties = tuple(_rows(rows, f"{key} party_rows[{i}]") for i, rows in enumerate(entry["party_rows"]))
    counts = np.asarray(entry["party_class_counts"], dtype=np.int64)
    if len(parties) != n_parties or counts.shape != (n_parties, 2):
        raise ValueError(
            f"{str(path)!r} entry {key!r} must hold {n_parties} parties and {n_parties} × 2 class counts, "
            f"got {len(parties)} and {counts.shape}"
        )
    return ReferenceRows(
        key=key,
        source=str(path),
        public_rows=_rows(entry["public_rows"], f"{key} public_rows"),
        test_rows=_rows(entry["test_rows"], f"{key} test_rows"),
        party_rows=parties,
        party_class_counts=counts,
        class1_label=float(entry["class1_label"]),
    )


def reference_rows_split(X: np.ndarray, y: np.ndarray, rows: ReferenceRows, *,
                         official_labels: bool = False) -> FederatedSplit:
    """The :class:`~privfed.pipelines.data.datasets.FederatedSplit` on the official rows.

    ``X, y`` must be the training file in its original row order, binary labels.
    The rows must be disjoint and within range, and every party's class counts
    must equal the file's (class 1 = the label of row 0, as the code maps it);
    otherwise a ValueError names the first mismatch. Labels keep privfed's coding,
    or with ``official_labels=True`` the code's: 1 for the label of row 0, 0 for the
    other (accuracy is the same either way; what changes is which class comes first
    where a model breaks a tie, e.g. a decision-tree leaf with equal counts predicts
    its first class). Party rows keep the code's order; ``protocol`` is
    ``"reference-code"`` and ``rows_source`` names the file and entry.
    """
    if not isinstance(official_labels, bool):
        raise TypeError(f"official_labels must be True or False, got {official_labels!r}")
    X, y = _check_features_labels(X, y, "X", "y")
    if official_labels:
        y = (y == y[0]).astype(np.int64)
    if len(np.unique(y)) != 2:
        raise ValueError(f"official rows exist for binary data sets only; y has {len(np.unique(y))} classes")
    n = len(y)
    every = np.concatenate([rows.public_rows, rows.test_rows, *rows.party_rows])
    if every.min() < 0 or every.max() >= n:
        raise ValueError(f"{rows.key}: row numbers must lie in [0, {n}) for this X, got {every.min()}..{every.max()}")
    if len(np.unique(every)) != len(every):
        raise ValueError(f"{rows.key}: the public, test and party rows must be disjoint; some row appears twice")
    class1 = y[0]
    for party, (indices, (count0, count1)) in enumerate(zip(rows.party_rows, rows.party_class_counts)):
        ones = int(np.sum(y[indices] == class1))
        if (len(indices) - ones, ones) != (count0, count1):
            raise ValueError(
                f"{rows.key}: party {party} holds {len(indices) - ones} / {ones} rows of class 0 / 1 in this y, "
                f"the file says {count0} / {count1}; the file does not belong to this data set"
            )
    return FederatedSplit(
        parties=tuple((X[indices], y[indices]) for indices in rows.party_rows),
        X_public=X[rows.public_rows],
        y_public=y[rows.public_rows],
        X_test=X[rows.test_rows],
        y_test=y[rows.test_rows],
        party_indices=rows.party_rows,
        public_indices=rows.public_rows,
        test_indices=rows.test_rows,
        protocol="reference-code",
        beta=0.5,
        rows_source=f"{rows.source}#{rows.key}",
    )
