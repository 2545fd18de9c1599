"""The official FedKT rows: a tiny reference-rows file written here in the shared file's format."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from privfed.pipelines.data.reference_rows import load_reference_rows, reference_rows_split


def make_data(n: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)).astype(np.float32)
    y = rng.integers(0, 2, size=n)
    y[0] = 0  # the code's class 1 is the label of row 0
    return X, y


def entry_for(y: np.ndarray, seed: int) -> dict:
    """A split in the file's format: public / test / three parties, in a shuffled (the code's) order."""
    order = np.random.default_rng(100 + seed).permutation(len(y))
    public, test, parties = order[:8], order[8:16], np.array_split(order[16:], 3)
    return {
        "public_rows": public.tolist(),
        "test_rows": test.tolist(),
        "party_rows": [rows.tolist() for rows in parties],
        "class1_label": -1.0,
        "party_class_counts": [[int(np.sum(y[rows] != y[0])), int(np.sum(y[rows] == y[0]))] for rows in parties],
    }


@pytest.fixture
def rows_file(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    X, y = make_data()
    entries = {f"a9a/parties=3/seed={seed}": entry_for(y, seed) for seed in (0, 1)}
    path = tmp_path / "splits.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        json.dump(entries, handle)
    return path, X, y


def test_split_uses_exactly_the_files_rows_in_its_order(rows_file):
    path, X, y = rows_file
    rows = load_reference_rows(path, dataset="adult_a9a", n_parties=3, seed=1)
    entry = entry_for(y, 1)
    split = reference_rows_split(X, y, rows)
    np.testing.assert_array_equal(split.public_indices, entry["public_rows"])
    np.testing.assert_array_equal(split.X_public, X[entry["public_rows"]])
    np.testing.assert_array_equal(split.y_test, y[entry["test_rows"]])
    for (X_party, y_party), expected in zip(split.parties, entry["party_rows"]):
        np.testing.assert_array_equal(X_party, X[expected])
        np.testing.assert_array_equal(y_party, y[expected])
    assert split.protocol == "reference-code"
    assert split.summary()["rows_source"] == f"{path}#a9a/parties=3/seed=1"
    # another seed is another split
    other = reference_rows_split(X, y, load_reference_rows(path, dataset="adult_a9a", n_parties=3, seed=0))
    assert not np.array_equal(other.public_indices, split.public_indices)


def test_official_label_coding_maps_row_zeros_label_to_one(rows_file):
    path, X, y = rows_file
    rows = load_reference_rows(path, dataset="adult_a9a", n_parties=3, seed=0)
    ours, official = reference_rows_split(X, y, rows), reference_rows_split(X, y, rows, official_labels=True)
    np.testing.assert_array_equal(official.y_test, (ours.y_test == y[0]).astype(int))
    np.testing.assert_array_equal(official.parties[2][1], 1 - ours.parties[2][1])  # y[0] == 0 here: a flip
    with pytest.raises(TypeError, match="official_labels"):
        reference_rows_split(X, y, rows, official_labels="yes")


def test_plain_json_file_is_read_too(tmp_path):
    X, y = make_data()
    path = tmp_path / "splits.json"
    path.write_text(json.dumps({"cod-rna/parties=3/seed=0": entry_for(y, 0)}))
    split = reference_rows_split(X, y, load_reference_rows(path, dataset="cod_rna", n_parties=3, seed=0))
    assert len(split.parties) == 3


def test_missing_entry_and_missing_file(rows_file, tmp_path):
    path, _, _ = rows_file
    with pytest.raises(KeyError, match="seed=4"):
        load_reference_rows(path, dataset="adult_a9a", n_parties=3, seed=4)
    with pytest.raises(KeyError, match="cod-rna/parties=3/seed=0"):
        load_reference_rows(path, dataset="cod_rna", n_parties=3, seed=0)
    with pytest.raises(FileNotFoundError):
        load_reference_rows(tmp_path / "absent.json.gz", dataset="adult_a9a", n_parties=3, seed=0)
    with pytest.raises(ValueError, match="dataset"):
        load_reference_rows(path, dataset="mnist", n_parties=3, seed=0)


def test_wrong_party_count_is_refused(rows_file):
    path, _, _ = rows_file
    with pytest.raises(KeyError):
        load_reference_rows(path, dataset="adult_a9a", n_parties=50, seed=0)


def test_labels_that_do_not_match_the_files_class_counts_are_refused(rows_file):
    path, X, y = rows_file
    rows = load_reference_rows(path, dataset="adult_a9a", n_parties=3, seed=0)
    flipped = y.copy()
    flipped[rows.party_rows[1][0]] ^= 1
    with pytest.raises(ValueError, match="party 1 holds"):
        reference_rows_split(X, flipped, rows)


def test_rows_out_of_range_or_repeated_are_refused(tmp_path):
    X, y = make_data()
    entry = entry_for(y, 0)
    bad_range = dict(entry, public_rows=entry["public_rows"][:-1] + [len(y)])
    repeated = dict(entry, test_rows=entry["test_rows"][:-1] + [entry["public_rows"][0]])
    for name, bad, message in (("range", bad_range, r"must lie in \[0, 40\)"), ("repeat", repeated, "disjoint")):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"a9a/parties=3/seed=0": bad}))
        with pytest.raises(ValueError, match=message):
            reference_rows_split(X, y, load_reference_rows(path, dataset="adult_a9a", n_parties=3, seed=0))


SHARED = Path(__file__).resolve().parents[2] / "shared"
SHARED_SPLITS = SHARED / "peer_splits" / "fedkt_reference_splits.json.gz"


@pytest.mark.skipif(not (SHARED_SPLITS.is_file() and (SHARED / "datasets" / "adult_a9a.npz").is_file()),
                    reason="../shared/peer_splits or ../shared/datasets is not beside this checkout")
def test_shared_file_matches_the_shared_data_where_present():
    """The real file against the real a9a: class counts agree for every seed (skipped without ../shared)."""
    path, data_folder = SHARED_SPLITS, SHARED / "datasets"
    from privfed.pipelines import load_dataset

    data = load_dataset("adult_a9a", data_folder)
    split = reference_rows_split(data.X_train, data.y_train,
                                 load_reference_rows(path, dataset="adult_a9a", n_parties=50, seed=0))
    assert len(split.X_public) == 4070 and len(split.X_test) == 4071 and len(split.parties) == 50
