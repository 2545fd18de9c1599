"""Benchmark loaders on tiny files written here in the original formats, and the federated split."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
from privfed.pipelines.data.datasets import federated_split, load_dataset, read_idx


def write_libsvm(path: Path, labels, rows: list[dict[int, float]]) -> None:
    """LIBSVM text: ``label index:value ...`` with 1-based feature indices."""
    lines = [
        " ".join([f"{label:+d}"] + [f"{i}:{v:g}" for i, v in sorted(row.items())]) for label, row in zip(labels, rows)
    ]
    path.write_text("\n".join(lines) + "\n")


def write_idx(path: Path, array: np.ndarray, type_code: int, *, compress: bool) -> None:
    header = bytes([0, 0, type_code, array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes()
    payload = header + array.astype(array.dtype.newbyteorder(">")).tobytes()
    path.write_bytes(gzip.compress(payload) if compress else payload)


@pytest.fixture
def a9a_folder(tmp_path: Path) -> Path:
    # The training file uses feature 123; the test file never does (as in the real a9a.t).
    write_libsvm(tmp_path / "a9a", [-1, +1, -1], [{1: 1, 5: 1}, {123: 1}, {2: 1, 3: 1}])
    write_libsvm(tmp_path / "a9a.t", [+1, -1], [{4: 1}, {1: 1, 122: 1}])
    return tmp_path


def test_libsvm_a9a_is_dense_with_fixed_width_and_mapped_labels(a9a_folder):
    data = load_dataset("a9a", a9a_folder)
    assert data.name == "adult_a9a"
    assert data.X_train.shape == (3, 123) and data.X_test.shape == (2, 123)
    assert data.X_train.dtype == np.float32
    np.testing.assert_array_equal(data.y_train, [0, 1, 0])
    np.testing.assert_array_equal(data.y_test, [1, 0])
    assert data.X_train[1, 122] == 1 and data.X_train[1].sum() == 1  # LIBSVM index 123 -> column 122
    assert data.X_test[1, 0] == 1 and data.X_test[1, 121] == 1
    assert data.class_names == ("-1", "1") and data.n_classes == 2


def test_libsvm_cod_rna_in_a_subfolder_with_txt_name(tmp_path):
    folder = tmp_path / "cod-rna"
    folder.mkdir()
    write_libsvm(folder / "cod-rna.txt", [-1, +1], [{1: -766, 2: 128, 8: 0.5}, {1: -642, 7: 0.25}])
    write_libsvm(folder / "cod-rna.t", [-1], [{3: 0.2}])
    data = load_dataset("cod-rna", tmp_path)
    assert data.X_train.shape == (2, 8) and data.X_test.shape == (1, 8)
    np.testing.assert_allclose(data.X_train[0], [-766, 128, 0, 0, 0, 0, 0, 0.5])
    np.testing.assert_array_equal(data.y_train, [0, 1])


def test_libsvm_with_too_many_features_is_refused(tmp_path):
    write_libsvm(tmp_path / "cod-rna", [1, -1], [{9: 1}, {1: 1}])
    write_libsvm(tmp_path / "cod-rna.t", [1], [{1: 1}])
    with pytest.raises(ValueError, match="8 features"):
        load_dataset("cod_rna", tmp_path)


def make_idx_set(folder: Path, *, compress: bool, dotted: bool, n_train: int = 5, n_test: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images": rng.integers(0, 256, size=(n_train, 28, 28), dtype=np.uint8),
        "train-labels": rng.integers(0, 10, size=n_train, dtype=np.uint8),
        "t10k-images": rng.integers(0, 256, size=(n_test, 28, 28), dtype=np.uint8),
        "t10k-labels": rng.integers(0, 10, size=n_test, dtype=np.uint8),
    }
    folder.mkdir(parents=True, exist_ok=True)
    for stem, array in arrays.items():
        kind = "idx3-ubyte" if array.ndim == 3 else "idx1-ubyte"
        name = f"{stem}{'.' if dotted else '-'}{kind}{'.gz' if compress else ''}"
        write_idx(folder / name, array, 0x08, compress=compress)
    return arrays


@pytest.mark.parametrize(("compress", "dotted"), [(True, False), (False, True)])
def test_idx_mnist_files(tmp_path, compress, dotted):
    arrays = make_idx_set(tmp_path, compress=compress, dotted=dotted)
    data = load_dataset("mnist", tmp_path)
    np.testing.assert_array_equal(data.X_train, arrays["train-images"])
    np.testing.assert_array_equal(data.y_train, arrays["train-labels"])
    np.testing.assert_array_equal(data.X_test, arrays["t10k-images"])
    assert data.X_train.dtype == np.uint8 and data.y_test.dtype == np.int64
    assert data.class_names == tuple("0123456789")


def test_fashion_mnist_is_read_from_its_own_subfolder(tmp_path):
    make_idx_set(tmp_path, compress=True, dotted=False, seed=1)  # MNIST files in the folder itself
    fashion = make_idx_set(tmp_path / "fashion_mnist", compress=True, dotted=False, seed=2)
    data = load_dataset("fashion-mnist", tmp_path)
    np.testing.assert_array_equal(data.X_train, fashion["train-images"])
    assert data.class_names[0] == "T-shirt/top"


@pytest.mark.parametrize(
    ("type_code", "dtype"),
    [(0x09, np.int8), (0x0B, np.int16), (0x0C, np.int32), (0x0D, np.float32), (0x0E, np.float64)],
)
def test_read_idx_round_trips_every_type(tmp_path, type_code, dtype):
    array = (np.arange(24).reshape(2, 3, 4) - 7).astype(dtype)
    write_idx(tmp_path / "values.idx", array, type_code, compress=False)
    read = read_idx(tmp_path / "values.idx")
    np.testing.assert_array_equal(read, array)
    assert read.dtype == np.dtype(dtype)


def test_read_idx_refuses_bad_files(tmp_path):
    (tmp_path / "bad").write_bytes(b"\x01\x02\x08\x01\x00\x00\x00\x01\x05")
    with pytest.raises(ValueError, match="magic number"):
        read_idx(tmp_path / "bad")
    write_idx(tmp_path / "short", np.zeros(10, dtype=np.uint8), 0x08, compress=False)
    (tmp_path / "short").write_bytes((tmp_path / "short").read_bytes()[:-1])
    with pytest.raises(ValueError, match="shape \\(10,\\)"):
        read_idx(tmp_path / "short")


def test_npz_copy_is_preferred_and_originals_can_be_forced(tmp_path, a9a_folder):
    X = np.ones((4, 123), dtype=np.float32)
    np.savez_compressed(a9a_folder / "adult_a9a.npz", X=X, y=np.array([0, 1, 1, 0]), X_test=X[:2],
                        y_test=np.array([1, 0]), class_names=np.array(["neg", "pos"]))
    compact = load_dataset("adult_a9a", a9a_folder)
    assert compact.X_train.shape == (4, 123) and compact.class_names == ("neg", "pos")
    assert compact.source.endswith("adult_a9a.npz")
    original = load_dataset("adult_a9a", a9a_folder, source="original")
    assert original.X_train.shape == (3, 123)


def test_npz_without_test_split_or_class_names(tmp_path):
    np.savez(tmp_path / "magic.npz", X=np.zeros((5, 10), dtype=np.float32), y=np.array([0, 1, 0, 0, 1]))
    data = load_dataset("magic", tmp_path)
    assert data.X_test is None and data.y_test is None
    assert data.class_names == ("0", "1")


def test_npz_needing_pickle_is_refused(tmp_path):
    np.savez(tmp_path / "letter.npz", X=np.zeros((2, 2)), y=np.array([0, 1]), class_names=np.array([{"a": 1}, None]))
    with pytest.raises(ValueError, match="unpickling"):
        load_dataset("letter", tmp_path)


def test_npz_with_missing_keys_is_refused(tmp_path):
    np.savez(tmp_path / "shuttle.npz", X=np.zeros((2, 2)))
    with pytest.raises(ValueError, match="'y'"):
        load_dataset("shuttle", tmp_path)


def test_missing_files_and_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="a9a.t"):
        load_dataset("a9a", tmp_path)
    with pytest.raises(FileNotFoundError, match="pendigits.npz"):
        load_dataset("pendigits", tmp_path)
    with pytest.raises(FileNotFoundError, match="not a directory"):
        load_dataset("mnist", tmp_path / "absent")
    with pytest.raises(ValueError, match="name must be one of"):
        load_dataset("cifar10", tmp_path)
    with pytest.raises(ValueError, match="source"):
        load_dataset("mnist", tmp_path, source="web")


# ---------------------------------------------------------------------------------------------
# federated_split


@pytest.fixture(scope="module")
def labelled():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(1001, 4))
    y = rng.integers(0, 3, size=1001)
    X[:, 0] = np.arange(1001)  # row id, to trace rows through the split
    return X, y


def test_reference_code_protocol_sizes_and_disjointness(labelled):
    X, y = labelled
    split = federated_split(X, y, n_parties=5, beta=0.5, protocol="reference-code", random_state=0)
    # train_test_split's default rounds the 25 % hold-out up: ceil(250.25) = 251 rows, public = first 125.
    assert len(split.X_public) == 125
    assert len(split.X_test) == 126
    rows = [*split.party_indices, split.public_indices, split.test_indices]
    combined = np.concatenate(rows)
    assert np.array_equal(np.sort(combined), np.arange(1001))  # disjoint and covering
    for (X_party, y_party), indices in zip(split.parties, split.party_indices):
        np.testing.assert_array_equal(X_party[:, 0], indices)
        np.testing.assert_array_equal(y_party, y[indices])
    np.testing.assert_array_equal(split.X_public[:, 0], split.public_indices)
    np.testing.assert_array_equal(split.y_test, y[split.test_indices])
    assert split.summary()["public_size"] == 125 and split.summary()["n_parties"] == 5


def test_standard_protocol_with_official_test_file(labelled):
    X, y = labelled
    X_test, y_test = X[:7] * 0 - 1, y[:7]
    split = federated_split(X, y, n_parties=4, beta="homogeneous", public_size=0.1, X_test=X_test, y_test=y_test,
                            random_state=1)
    np.testing.assert_array_equal(split.X_test, X_test)
    assert split.test_indices is None
    assert len(split.X_public) == 101  # ceil(0.1 * 1001)
    combined = np.concatenate([*split.party_indices, split.public_indices])
    assert np.array_equal(np.sort(combined), np.arange(1001))
    sizes = split.summary()["party_sizes"]
    assert sum(sizes) == 900 and max(sizes) - min(sizes) <= 1


def test_standard_protocol_with_held_out_test(labelled):
    X, y = labelled
    split = federated_split(X, y, n_parties=3, beta=1.0, public_size=50, test_size=0.2, min_size=20, random_state=2)
    assert len(split.X_test) == 201 and len(split.X_public) == 50  # ceil(0.2 * 1001)
    assert min(len(p) for p in split.party_indices) >= 20
    combined = np.concatenate([*split.party_indices, split.public_indices, split.test_indices])
    assert np.array_equal(np.sort(combined), np.arange(1001))


def test_federated_split_is_deterministic(labelled):
    X, y = labelled
    first = federated_split(X, y, n_parties=5, beta=0.5, protocol="reference-code", random_state=9)
    second = federated_split(X, y, n_parties=5, beta=0.5, protocol="reference-code", random_state=9)
    assert all(np.array_equal(a, b) for a, b in zip(first.party_indices, second.party_indices))
    np.testing.assert_array_equal(first.public_indices, second.public_indices)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"public_size": None}, ValueError, "public_size is required"),
        ({"test_size": None}, ValueError, "needs a test set"),
        ({"public_size": 1.5}, ValueError, "public_size"),
        ({"public_size": 0}, ValueError, "public_size"),
        ({"public_size": "10%"}, TypeError, "public_size"),
        ({"test_size": 1001}, ValueError, "test_size"),
        ({"beta": "iid"}, ValueError, "beta"),
        ({"beta": -1.0}, ValueError, "beta"),
        ({"n_parties": 0}, ValueError, "n_parties"),
        ({"n_parties": 900}, ValueError, "n_parties=900"),
        ({"protocol": "paper"}, ValueError, "protocol"),
        ({"protocol": "reference-code"}, ValueError, "fixed by protocol"),
        ({"X_test": np.zeros((2, 4))}, ValueError, "together"),
        ({"y": np.zeros(1000)}, ValueError, "y must have shape"),
    ],
)
def test_federated_split_validates(labelled, kwargs, error, match):
    X, y = labelled
    arguments = {"X": X, "y": y, "n_parties": 3, "beta": 0.5, "public_size": 10, "test_size": 100} | kwargs
    with pytest.raises(error, match=match):
        federated_split(**arguments)
