"""load_parties: one table with a party column, or one table per party, into parties with the encoding recorded."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pd = pytest.importorskip("pandas")

from privfed.pipelines.data.party_tables import PartyData, load_parties  # noqa: E402

import privfed  # noqa: E402


@pytest.fixture()
def hospitals():
    """Three small per-hospital tables with string labels; hospital c never sees "severe"."""
    rng = np.random.default_rng(0)
    frames = {}
    diagnoses = {"a": ["mild", "severe", "none"] * 4, "b": ["none", "severe"] * 5, "c": ["mild", "none"] * 3}
    for name, labels in diagnoses.items():
        frames[name] = pd.DataFrame({"age": rng.integers(20, 90, len(labels)), "bmi": rng.normal(25, 4, len(labels)),
                                     "diagnosis": labels})
    return frames


def test_one_file_per_party_gives_parties_with_one_encoding(hospitals, tmp_path):
    paths = []
    for name, frame in hospitals.items():
        frame.to_csv(tmp_path / f"hospital_{name}.csv", index=False)
        paths.append(tmp_path / f"hospital_{name}.csv")
    data = load_parties(paths, label_column="diagnosis")
    assert data.party_names == ("hospital_a", "hospital_b", "hospital_c")
    assert data.rows == (12, 10, 6)
    assert data.feature_columns == ("age", "bmi")
    assert data.classes.tolist() == ["mild", "none", "severe"]
    for (X, y), frame in zip(data.parties, hospitals.values()):
        assert X.dtype == np.float64 and np.allclose(X, frame[["age", "bmi"]].to_numpy())
        assert data.decode(y).tolist() == frame["diagnosis"].tolist()
    # A folder of files is the same list, in name order.
    assert load_parties(tmp_path, label_column="diagnosis").party_names == data.party_names
    assert "hospital_c: 6 rows, mild: 3, none: 3, severe: 0" in data.summary()


def test_one_table_with_a_party_column_equals_the_files(hospitals):
    table = pd.concat([frame.assign(site=name) for name, frame in hospitals.items()], ignore_index=True)
    table = table.sample(frac=1.0, random_state=0)  # rows of all parties interleaved
    one = load_parties(table, party_column="site", label_column="diagnosis")
    many = load_parties(hospitals, label_column="diagnosis")
    assert one.party_names == many.party_names == ("a", "b", "c") and one.rows == many.rows
    for (X1, y1), (X2, y2) in zip(one.parties, many.parties):
        order1, order2 = np.lexsort(X1.T), np.lexsort(X2.T)
        assert np.array_equal(X1[order1], X2[order2]) and np.array_equal(y1[order1], y2[order2])


@pytest.mark.filterwarnings("ignore:FedKT. only")  # 28 public rows: fewer than 10 queries per class
def test_the_parties_train_a_pipeline_and_features_reads_the_public_set(hospitals):
    from sklearn.tree import DecisionTreeClassifier

    data = load_parties(hospitals, label_column="diagnosis", feature_columns=["bmi", "age"])
    public = pd.concat(hospitals.values())
    X_public = data.features(public)
    assert np.array_equal(X_public, public[["bmi", "age"]].to_numpy(dtype=float))
    model = privfed.FedKT(DecisionTreeClassifier(), n_teachers=2, random_state=0).fit(data.parties, X_public)
    assert set(data.decode(model.predict(X_public))) <= set(data.classes)
    assert np.array_equal(data.decode(data.labels(public)), public["diagnosis"].to_numpy())


def test_load_parties_is_public_and_lazy():
    import subprocess
    from pathlib import Path

    assert privfed.load_parties is load_parties and privfed.PartyData is PartyData
    code = ("import sys, privfed; privfed.load_parties; "
            "assert not {'pandas', 'sklearn', 'torch'} & set(sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])


@pytest.mark.parametrize(
    ("change", "kwargs", "message"),
    [
        (lambda f: f.drop(columns="bmi"), {},
         r"feature_columns: b.* has no column 'bmi'; its columns are 'age', 'diagnosis'"),
        (lambda f: f, {"label_column": "outcome"},
         r"label_column: .* has no column 'outcome'; its columns are 'age', 'bmi', 'diagnosis'"),
        (lambda f: f, {"label_column": "diagnoses"},
         r"label_column: .* has no column 'diagnoses' \(did you mean 'diagnosis'\?\); its columns are"),
        (lambda f: f.assign(bmi=f["bmi"].astype(str) + " kg"), {}, r"feature column 'bmi' is not numeric \(e.g. '"),
        (lambda f: f.assign(bmi=np.where(np.arange(len(f)) < 2, np.nan, f["bmi"])), {},
         "feature column 'bmi' has 2 missing values"),
        (lambda f: f.assign(diagnosis=[None] + list(f["diagnosis"][1:])), {}, "label column 'diagnosis' has 1 missing"),
        (lambda f: f.assign(diagnosis=range(len(f))), {}, "holds strings in a but numbers in b"),
        (lambda f: f.assign(bmi=np.inf), {}, "feature column 'bmi' holds infinite values"),
        (lambda f: f.iloc[:0], {}, "has no rows"),
    ],
)
def test_bad_tables_are_refused_with_the_column_named(hospitals, change, kwargs, message):
    hospitals["b"] = change(hospitals["b"])
    with pytest.raises(ValueError, match=message):
        load_parties(hospitals, **{"label_column": "diagnosis", **kwargs})


def test_missing_values_are_kept_when_asked(hospitals):
    hospitals["a"].loc[0, "bmi"] = np.nan
    data = load_parties(hospitals, label_column="diagnosis", allow_missing=True)
    assert np.isnan(data.parties[0][0][0, 1])


def test_bad_arguments_are_refused(hospitals, tmp_path):
    table = pd.concat([frame.assign(site=name) for name, frame in hospitals.items()])
    with pytest.raises(ValueError, match="party_column is required with one table"):
        load_parties(table, label_column="diagnosis")
    with pytest.raises(ValueError, match="party_column: the DataFrame has no column 'hospital'"):
        load_parties(table, party_column="hospital", label_column="diagnosis")
    with pytest.raises(ValueError, match="party_column applies to one table"):
        load_parties(hospitals, party_column="site", label_column="diagnosis")
    with pytest.raises(ValueError, match="must not include the label or party column"):
        load_parties(hospitals, label_column="diagnosis", feature_columns=["age", "diagnosis"])
    with pytest.raises(TypeError, match="label_column must be a column name"):
        load_parties(hospitals, label_column=3)
    with pytest.raises(ValueError, match="neither a .csv nor a .parquet"):
        load_parties([tmp_path / "a.txt"], label_column="diagnosis")
    with pytest.raises(ValueError, match="does not exist"):
        load_parties([tmp_path / "absent.csv"], label_column="diagnosis")
    with pytest.raises(ValueError, match="holds no .csv or .parquet file"):
        load_parties(tmp_path, label_column="diagnosis")
    with pytest.raises(ValueError, match="holds no party"):
        load_parties([], label_column="diagnosis")


def test_parquet_without_pyarrow_says_what_to_install(tmp_path, monkeypatch):
    path = tmp_path / "hospital.parquet"
    path.write_bytes(b"PAR1")  # never read: the reader is missing
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ImportError, match="needs pyarrow: pip install pyarrow"):
        load_parties([path], label_column="diagnosis")


def test_parquet_files_are_read_like_csv(hospitals, tmp_path):
    pytest.importorskip("pyarrow")
    for name, frame in hospitals.items():
        frame.to_parquet(tmp_path / f"{name}.parquet")
    data = load_parties(tmp_path, label_column="diagnosis")
    assert data.party_names == ("a", "b", "c") and data.rows == (12, 10, 6)
