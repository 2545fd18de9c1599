"""Benchmark data: loading from a user-given folder, and the federated split.

:func:`load_dataset` reads a benchmark set from a folder, either the compact
``.npz`` copies (``<name>.npz`` with keys ``X``, ``y``, optionally ``X_test``,
``y_test``, ``class_names``; read with ``allow_pickle=False``) or the original
files:

=================  ===================================================  ==========
name (aliases)     original files                                        features
=================  ===================================================  ==========
``adult_a9a``      LIBSVM text ``a9a`` (or ``a9a.txt``) and ``a9a.t``    123
(``a9a``)
``cod_rna``        LIBSVM text ``cod-rna`` (or ``cod-rna.txt``) and      8
(``cod-rna``)      ``cod-rna.t``
``mnist``          idx files ``train-images-idx3-ubyte``,                28 × 28
                   ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
                   ``t10k-labels-idx1-ubyte`` (each optionally ``.gz``;
                   ``train-images.idx3-ubyte`` spellings also accepted)
``fashion_mnist``  the same idx file names                               28 × 28
(``fashion-mnist``)
=================  ===================================================  ==========

The other sets of ``../shared/datasets`` (``adult``, ``magic``, ``letter``,
``shuttle``, ``pendigits``, ``connect_4``) are read from their ``.npz`` copies only.
Original files are looked for in ``folder/<name>/`` (and ``folder/<alias>/``) and
then in ``folder`` itself; since MNIST and Fashion-MNIST use the same file names,
keep them in subfolders named after the set. LIBSVM labels are mapped to
``0..K-1`` in sorted order (−1 → 0, +1 → 1, as in the ``.npz`` copies), features
are dense ``float32``; idx images stay ``uint8``.

:func:`federated_split` turns a training set into parties, an unlabeled public
set and a test set, with either the standard protocol (official test file,
public set drawn from the training file) or the FedKT reference code's protocol.
"""

from __future__ import annotations

import gzip
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...accounting._checks import check_choice, check_int_at_least, check_positive_finite
from ...accounting.documents import read_npz
from ..protocol.seeds import RandomState, as_generator
from .partition import dirichlet_partition, homogeneous_partition

__all__ = [
    "DATASET_NAMES",
    "BenchmarkDataset",
    "FederatedSplit",
    "federated_split",
    "load_dataset",
    "read_idx",
    "reference_class_order",
]


@dataclass(frozen=True, eq=False)
class BenchmarkDataset:
    """A benchmark set's training and (where one exists) official test split.

    Attributes
    ----------
    name : str
        Canonical name (``"adult_a9a"``, ``"mnist"``, ...).
    X_train, y_train : ndarray
        Training features and labels (``int64`` in ``0..K-1``).
    X_test, y_test : ndarray or None
        The official test split, or None where the source has none.
    class_names : tuple of str
        A name for each class index.
    source : str
        The file(s) read, for reports.
    """

    name: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray | None
    y_test: np.ndarray | None
    class_names: tuple[str, ...]
    source: str

    @property
    def n_classes(self) -> int:
        """Number of classes."""
        return len(self.class_names)


# Canonical names and the spellings accepted for them.
_ALIASES = {
    "a9a": "adult_a9a",
    "cod-rna": "cod_rna",
    "codrna": "cod_rna",
    "fashion-mnist": "fashion_mnist",
    "fmnist": "fashion_mnist",
    "connect-4": "connect_4",
}
_NPZ_ONLY = ("adult", "magic", "letter", "shuttle", "pendigits", "connect_4")
_LIBSVM = {
    # name: (training-file names, test-file names, n_features)
    "adult_a9a": (("a9a", "a9a.txt"), ("a9a.t",), 123),
    "cod_rna": (("cod-rna", "cod-rna.txt"), ("cod-rna.t",), 8),
}
_IDX_STEMS = {
    "train_images": ("train-images-idx3-ubyte", "train-images.idx3-ubyte"),
    "train_labels": ("train-labels-idx1-ubyte", "train-labels.idx1-ubyte"),
    "test_images": ("t10k-images-idx3-ubyte", "t10k-images.idx3-ubyte"),
    "test_labels": ("t10k-labels-idx1-ubyte", "t10k-labels.idx1-ubyte"),
}
_IDX_CLASS_NAMES = {
    "mnist": tuple(str(digit) for digit in range(10)),
    "fashion_mnist": (
        "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
    ),
}
DATASET_NAMES: tuple[str, ...] = tuple(sorted({*_NPZ_ONLY, *_LIBSVM, *_IDX_CLASS_NAMES}))


def _canonical_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {name!r}")
    canonical = _ALIASES.get(name.lower(), name.lower())
    if canonical not in DATASET_NAMES:
        raise ValueError(
            f"name must be one of {', '.join(DATASET_NAMES)} (or an alias: {', '.join(sorted(_ALIASES))}); got {name!r}"
        )
    return canonical


def load_dataset(name: str, folder: str | Path, *, source: str = "auto") -> BenchmarkDataset:
    """Load a benchmark set from ``folder``.

    Parameters
    ----------
    name : str
        One of ``adult_a9a`` (``a9a``), ``cod_rna`` (``cod-rna``), ``mnist``,
        ``fashion_mnist``, ``adult``, ``magic``, ``letter``, ``shuttle``,
        ``pendigits``, ``connect_4``.
    folder : str or Path
        The folder holding ``<name>.npz`` and/or the original files (see the
        module docstring for names and places).
    source : {"auto", "npz", "original"}, default="auto"
        ``"auto"`` reads ``<name>.npz`` when present and the original files
        otherwise.

    Returns
    -------
    BenchmarkDataset

    Raises
    ------
    FileNotFoundError
        Naming every path looked for, when the files are missing.
    ValueError
        On an unknown name or source, or a malformed file.
    """
    name = _canonical_name(name)
    source = check_choice("source", source, ("auto", "npz", "original"))
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"folder {str(folder)!r} is not a directory")
    npz_path = folder / f"{name}.npz"
    if source == "npz" or (source == "auto" and npz_path.is_file()):
        if not npz_path.is_file():
            raise FileNotFoundError(f"no compact copy of {name!r}: {str(npz_path)!r} does not exist")
        return _load_npz(name, npz_path)
    if name in _LIBSVM:
        return _load_libsvm(name, folder)
    if name in _IDX_CLASS_NAMES:
        return _load_idx_set(name, folder)
    raise FileNotFoundError(
        f"{name!r} is read from its compact copy only, and {str(npz_path)!r} does not exist"
        if source == "auto"
        else f"{name!r} has no original-format loader; use source='npz' ({str(npz_path)!r})"
    )


def _load_npz(name: str, path: Path) -> BenchmarkDataset:
    arrays = read_npz(path, repr(str(path)))
    missing = {"X", "y"} - arrays.keys()
    if missing:
        raise ValueError(f"{str(path)!r} lacks the required key(s) {sorted(missing)}; it has {sorted(arrays)}")
    if ("X_test" in arrays) != ("y_test" in arrays):
        raise ValueError(f"{str(path)!r} must hold both X_test and y_test or neither; it has {sorted(arrays)}")
    X_train, y_train = _check_pair(arrays["X"], arrays["y"], f"{path}: X/y")
    X_test = y_test = None
    if "X_test" in arrays:
        X_test, y_test = _check_pair(arrays["X_test"], arrays["y_test"], f"{path}: X_test/y_test")
    n_classes = int(max(y_train.max(), -1 if y_test is None else y_test.max())) + 1
    if "class_names" in arrays:
        class_names = tuple(str(c) for c in arrays["class_names"])
        if len(class_names) < n_classes:
            raise ValueError(f"{str(path)!r} has {len(class_names)} class_names for labels up to {n_classes - 1}")
    else:
        class_names = tuple(str(c) for c in range(n_classes))
    return BenchmarkDataset(name, X_train, y_train, X_test, y_test, class_names, str(path))


def _check_pair(X: np.ndarray, y: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    if y.ndim != 1 or X.ndim < 2 or X.shape[0] != y.shape[0] or y.size == 0:
        raise ValueError(
            f"{what}: expected X of shape (n, ...) and y of shape (n,), n >= 1; got {X.shape} and {y.shape}"
        )
    if not np.issubdtype(y.dtype, np.integer) or y.min() < 0:
        raise ValueError(f"{what}: labels must be non-negative integers 0..K-1, got dtype {y.dtype}")
    return X, y.astype(np.int64, copy=False)


def _find(folders: Sequence[Path], names: Sequence[str]) -> Path | None:
    for directory in folders:
        for file_name in names:
            if (directory / file_name).is_file():
                return directory / file_name
    return None


def _search_folders(name: str, folder: Path) -> list[Path]:
    spellings = [name, *(alias for alias, canonical in _ALIASES.items() if canonical == name)]
    return [folder / spelling for spelling in spellings] + [folder]


def _missing(name: str, folders: Sequence[Path], names: Sequence[str]) -> FileNotFoundError:
    return FileNotFoundError(
        f"no original files for {name!r}: looked for {', '.join(names)} in {', '.join(str(f) for f in folders)} "
        f"(and for {name}.npz in {folders[-1]})"
    )


def _load_libsvm(name: str, folder: Path) -> BenchmarkDataset:
    train_names, test_names, n_features = _LIBSVM[name]
    folders = _search_folders(name, folder)
    train_path = _find(folders, train_names)
    test_path = _find(folders, test_names)
    if train_path is None or test_path is None:
        raise _missing(name, folders, train_names + test_names)
    X_train, labels_train = _read_libsvm(train_path, n_features)
    X_test, labels_test = _read_libsvm(test_path, n_features)
    classes = np.unique(np.concatenate([labels_train, labels_test]))
    y_train = np.searchsorted(classes, labels_train).astype(np.int64)
    y_test = np.searchsorted(classes, labels_test).astype(np.int64)
    class_names = tuple(f"{label:g}" for label in classes)
    return BenchmarkDataset(name, X_train, y_train, X_test, y_test, class_names, f"{train_path}, {test_path}")


def _read_libsvm(path: Path, n_features: int) -> tuple[np.ndarray, np.ndarray]:
    # Imported here: scikit-learn takes seconds to import, and joblib workers import
    # ``pipelines`` whenever they run a task function defined in it.
    from sklearn.datasets import load_svmlight_file

    try:
        X, labels = load_svmlight_file(str(path), n_features=n_features, dtype=np.float32, zero_based=False)
    except ValueError as error:
        raise ValueError(f"{str(path)!r} is not a LIBSVM file with {n_features} features: {error}") from error
    return X.toarray(), labels


# idx element types: type code (third byte of the magic number) -> big-endian numpy dtype.
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> np.ndarray:
    """Read an idx file (the MNIST format), gzip-compressed or not.

    The header is two zero bytes, a type code (``0x08`` unsigned byte, ``0x09``
    signed byte, ``0x0B`` int16, ``0x0C`` int32, ``0x0D`` float32, ``0x0E``
    float64), the number of dimensions, and one big-endian ``uint32`` size per
    dimension; the data follow in big-endian C order.

    Parameters
    ----------
    path : str or Path
        The file; gzip compression is detected from its first bytes.

    Returns
    -------
    ndarray
        An array of the stored shape in native byte order.

    Raises
    ------
    ValueError
        If the header is malformed or the data size does not match it.
    """
    path = Path(path)
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise ValueError(f"{str(path)!r} is not an idx file: bad magic number {raw[:4].hex()!r}")
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    n_dims = raw[3]
    header_end = 4 + 4 * n_dims
    if len(raw) < header_end:
        raise ValueError(f"{str(path)!r} is truncated inside its idx header")
    shape = tuple(int(size) for size in np.frombuffer(raw, dtype=">u4", count=n_dims, offset=4))
    expected = math.prod(shape) * dtype.itemsize
    if len(raw) - header_end != expected:
        raise ValueError(
            f"{str(path)!r}: header announces shape {shape} ({expected} bytes of data), "
            f"but the file holds {len(raw) - header_end}"
        )
    data = np.frombuffer(raw, dtype=dtype, offset=header_end).reshape(shape)
    return data.astype(dtype.newbyteorder("="))


def _load_idx_set(name: str, folder: Path) -> BenchmarkDataset:
    folders = _search_folders(name, folder)
    paths: dict[str, Path] = {}
    for part, stems in _IDX_STEMS.items():
        candidates = [stem + suffix for stem in stems for suffix in (".gz", "")]
        found = _find(folders, candidates)
        if found is None:
            raise _missing(name, folders, candidates)
        paths[part] = found
    arrays = {part: read_idx(path) for part, path in paths.items()}
    splits = []
    for images, labels in (("train_images", "train_labels"), ("test_images", "test_labels")):
        X, y = arrays[images], arrays[labels]
        if X.ndim != 3 or y.ndim != 1 or X.shape[0] != y.shape[0]:
            raise ValueError(
                f"{paths[images]} and {paths[labels]}: expected images (n, rows, cols) and labels (n,), "
                f"got {X.shape} and {y.shape}"
            )
        if y.max() >= len(_IDX_CLASS_NAMES[name]):
            raise ValueError(f"{paths[labels]}: label {int(y.max())} outside 0..{len(_IDX_CLASS_NAMES[name]) - 1}")
        splits.append((X, y.astype(np.int64)))
    (X_train, y_train), (X_test, y_test) = splits
    return BenchmarkDataset(
        name, X_train, y_train, X_test, y_test, _IDX_CLASS_NAMES[name], ", ".join(str(p) for p in paths.values())
    )


# ---------------------------------------------------------------------------------------------
# Federated split


@dataclass(frozen=True, eq=False)
class FederatedSplit:
    """Parties, an unlabeled public set and a test set built from one data set.

    Attributes
    ----------
    parties : tuple of (X, y)
        Each party's private training data.
    X_public : ndarray
        The public set given to the algorithm (unlabeled).
    y_public : ndarray
        The public set's true labels, for diagnostics only (for example the
        accuracy of voted labels); never give them to the algorithm.
    X_test, y_test : ndarray
        Evaluation data.
    party_indices : tuple of ndarray
        Rows of the input ``X`` held by each party (sorted).
    public_indices : ndarray
        Rows of the input ``X`` in the public set, in public-set order.
    test_indices : ndarray or None
        Rows of the input ``X`` used for evaluation, or None when a separate
        test set was given.
    protocol : str
        ``"standard"`` or ``"reference-code"``.
    beta : float or "homogeneous"
        How the parties were drawn.
    rows_source : str or None
        ``"file#entry"`` when the rows were read from a reference-rows file (the
        official FedKT code's exact rows, see :mod:`~privfed.pipelines.data.reference_rows`;
        party rows then keep the code's order), None when they were drawn here.
    """

    parties: tuple[tuple[np.ndarray, np.ndarray], ...]
    X_public: np.ndarray
    y_public: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    party_indices: tuple[np.ndarray, ...]
    public_indices: np.ndarray
    test_indices: np.ndarray | None
    protocol: str
    beta: float | str
    rows_source: str | None = None

    def summary(self) -> dict[str, Any]:
        """JSON-able description for reports and ledgers (sizes only, no data)."""
        return {
            "protocol": self.protocol,
            "beta": self.beta,
            "n_parties": len(self.parties),
            "party_sizes": [int(len(indices)) for indices in self.party_indices],
            "public_size": int(len(self.X_public)),
            "test_size": int(len(self.X_test)),
            "rows_source": self.rows_source,
        }


REFERENCE_HELD_OUT_FRACTION = 0.25
"""Share of the training file the FedKT reference code holds out (scikit-learn's
``train_test_split`` default); the first half of it is public, the rest evaluation."""


def reference_class_order(y: np.ndarray) -> list[Any] | None:
    """FedKT's code's class order for a binary label vector: the first row's label last; None otherwise.

    The code recodes LIBSVM labels as ``1 if y == y[0] else 0`` and deals classes 0, 1 out in that order.
    """
    labels = np.unique(y)
    if len(labels) != 2:
        return None
    first = y[0]
    return [label for label in labels if label != first] + [first]


def federated_split(
    X: np.ndarray,
    y: np.ndarray,
    *,
    n_parties: int,
    beta: float | str,
    public_size: int | float | None = None,
    X_test: np.ndarray | None = None,
    y_test: np.ndarray | None = None,
    test_size: int | float | None = None,
    protocol: str = "standard",
    min_size: int = 10,
    class_order: Sequence[Any] | None = None,
    random_state: RandomState = None,
) -> FederatedSplit:
    """Split a data set into parties, a public (unlabeled) set and a test set.

    Protocols
    ---------
    ``"standard"`` (default)
        Evaluation uses ``X_test, y_test`` (the official test file) when given;
        otherwise ``test_size`` rows of ``X`` are held out at random. From the
        remaining rows, ``public_size`` are drawn at random as the public set,
        and the rest is shared among the parties.
    ``"reference-code"``
        The protocol of FedKT's public code (Li, He, Song, 2021), for row-by-row
        comparison: 25 % of ``X`` (rounded up, as scikit-learn's
        ``train_test_split``) is held out at random; the first half of it
        (``⌊held/2⌋`` rows) is the public set, the second half the evaluation set;
        the other 75 % is shared among the parties. ``X_test``, ``test_size`` and
        ``public_size`` must be left out. Note that the code's query fractions
        are of the whole held-out part, twice the public set: its "1 %" of a9a
        is 81 queries, i.e. 2 % of the public set.

    Parameters
    ----------
    X : array-like of shape (n_samples, ...)
        Features (the training file).
    y : array-like of shape (n_samples,)
        Labels.
    n_parties : int
        Number of parties, >= 1.
    beta : float or "homogeneous"
        Dirichlet concentration (> 0) for :func:`~pipelines.data.partition.dirichlet_partition`,
        or ``"homogeneous"`` for :func:`~pipelines.data.partition.homogeneous_partition`.
    public_size : int or float
        Standard protocol: the public set's size, as a count (>= 1) or as a
        fraction in (0, 1) of the rows left after the test hold-out.
    X_test, y_test : array-like, optional
        Standard protocol: the official test split.
    test_size : int or float, optional
        Standard protocol without ``X_test``: rows of ``X`` held out for
        evaluation, as a count or a fraction in (0, 1).
    protocol : {"standard", "reference-code"}
    min_size : int, default=10
        Smallest party under a Dirichlet split (see ``dirichlet_partition``).
    class_order : sequence, optional
        Order in which a Dirichlet split deals the classes out (see
        ``dirichlet_partition``). Default: sorted labels, except under
        ``protocol="reference-code"`` for two classes, where the label of the first
        row is dealt out last, as FedKT's code does (it maps a LIBSVM file's first
        label to class 1). The order changes the partitions a lot under the size
        cap; ``reference_class_order(y)`` gives the code's order for any protocol.
    random_state : None, int, numpy SeedSequence or Generator
        Seed of every random choice.

    Returns
    -------
    FederatedSplit
    """
    protocol = check_choice("protocol", protocol, ("standard", "reference-code"))
    X, y = _check_features_labels(X, y, "X", "y")
    n_parties = check_int_at_least("n_parties", n_parties, 1)
    beta = _check_beta(beta)
    min_size = check_int_at_least("min_size", min_size, 0)
    n_samples = len(y)
    if (X_test is None) != (y_test is None):
        raise ValueError("X_test and y_test must be given together (or both left out)")
    if protocol == "reference-code":
        for argument, value in (("X_test", X_test), ("test_size", test_size), ("public_size", public_size)):
            if value is not None:
                raise ValueError(
                    f"{argument} is fixed by protocol='reference-code' and must be left out; got {value!r}"
                )
        n_held_out = math.ceil(REFERENCE_HELD_OUT_FRACTION * n_samples)
        n_public = n_held_out // 2
        n_test = n_held_out - n_public
    else:
        if public_size is None:
            raise ValueError("public_size is required with protocol='standard' (a count >= 1 or a fraction in (0, 1))")
        if X_test is not None:
            if test_size is not None:
                raise ValueError(f"give either X_test/y_test or test_size, not both; got test_size={test_size!r}")
            X_test, y_test = _check_features_labels(X_test, y_test, "X_test", "y_test")
            if X_test.shape[1:] != X.shape[1:]:
                raise ValueError(f"X_test rows must have the shape of X rows, {X.shape[1:]}; got {X_test.shape[1:]}")
            n_test = 0
        elif test_size is None:
            raise ValueError("protocol='standard' needs a test set: give X_test and y_test, or test_size")
        else:
            n_test = _size("test_size", test_size, n_samples)
        n_public = _size("public_size", public_size, n_samples - n_test)
    n_pool = n_samples - n_test - n_public
    if n_pool < n_parties:
        raise ValueError(
            f"only {n_pool} of the {n_samples} rows are left for the parties after the test ({n_test}) and "
            f"public ({n_public}) sets; need at least n_parties={n_parties}"
        )
    rng = as_generator(random_state)
    order = rng.permutation(n_samples)
    if protocol == "reference-code":
        held_out, pool = order[:n_test + n_public], order[n_test + n_public:]
        public_indices, test_indices = held_out[:n_public], held_out[n_public:]
    else:
        test_indices, public_indices, pool = order[:n_test], order[n_test:n_test + n_public], order[n_test + n_public:]
    pool = np.sort(pool)
    if beta == "homogeneous":
        shares = homogeneous_partition(len(pool), n_parties, random_state=rng)
    else:
        if class_order is None and protocol == "reference-code":
            class_order = reference_class_order(y)
        assert isinstance(beta, float)  # _check_beta: "homogeneous" or a float
        shares = dirichlet_partition(
            y[pool], n_parties, beta, min_size=min_size, class_order=class_order, random_state=rng
        )
    party_indices = tuple(pool[share] for share in shares)
    if X_test is None:
        X_test, y_test = X[test_indices], y[test_indices]
        held_out_test: np.ndarray | None = test_indices
    else:
        assert y_test is not None  # given with X_test (checked above)
        held_out_test = None
    return FederatedSplit(
        parties=tuple((X[rows], y[rows]) for rows in party_indices),
        X_public=X[public_indices],
        y_public=y[public_indices],
        X_test=X_test,
        y_test=y_test,
        party_indices=party_indices,
        public_indices=public_indices,
        test_indices=held_out_test,
        protocol=protocol,
        beta=beta,
    )


def _check_features_labels(X: object, y: object, x_name: str, y_name: str) -> tuple[np.ndarray, np.ndarray]:
    features, labels = np.asarray(X), np.asarray(y)
    if features.ndim < 2:
        raise ValueError(f"{x_name} must have shape (n_samples, n_features, ...), got shape {features.shape}")
    if labels.ndim != 1 or labels.shape[0] != features.shape[0]:
        raise ValueError(
            f"{y_name} must have shape ({features.shape[0]},) to match {x_name}, got shape {labels.shape}"
        )
    if labels.size == 0:
        raise ValueError(f"{x_name} and {y_name} must hold at least one row, got none")
    return features, labels


def _check_beta(beta: object) -> float | str:
    if isinstance(beta, str):
        return check_choice("beta", beta, ("homogeneous",))
    return check_positive_finite("beta", beta)


def _size(name: str, value: object, total: int) -> int:
    """A count >= 1, or a fraction in (0, 1) of ``total`` rounded up, that leaves rows over."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a count >= 1 or a fraction in (0, 1), got {value!r}")
    if isinstance(value, numbers.Integral):
        count = int(value)
    else:
        fraction = float(value)
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"{name} must be a count >= 1 or a fraction in (0, 1), got {fraction!r}")
        count = max(1, math.ceil(fraction * total))
    if not 1 <= count < total:
        raise ValueError(
            f"{name} must come to between 1 and {total - 1} rows here (of {total}), got {value!r} -> {count}"
        )
    return count
