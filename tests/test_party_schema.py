"""Each SuperNode reads its own data file: npz, CSV with label and feature columns, LIBSVM; bad files named."""

from __future__ import annotations

import numpy as np
import pytest

from privfed.federation.task import load_party_data


def test_npz_csv_and_libsvm_give_the_same_party(tmp_path) -> None:
    pd = pytest.importorskip("pandas", reason="CSV party data needs pandas")
    X = np.array([[0.5, 1.0, 0.0], [2.0, 0.0, 3.0], [0.0, 0.25, 1.5]])
    y = np.array([1, 0, 1])
    np.savez(tmp_path / "site.npz", X=X, y=y)
    frame = pd.DataFrame({"diagnosis": y, "age": X[:, 0], "bmi": X[:, 1], "dose": X[:, 2]})
    frame.to_csv(tmp_path / "site.csv", index=False)
    from sklearn.datasets import dump_svmlight_file

    dump_svmlight_file(X[:, :2], y, str(tmp_path / "site.svm"))
    for path, options, expected in [
        ("site.npz", {}, X),
        ("site.csv", {"label_column": "diagnosis"}, X),
        ("site.csv", {"label_column": 0, "feature_columns": ["dose", "age"]}, X[:, [2, 0]]),
        ("site.svm", {"n_features": 4}, np.hstack([X[:, :2], np.zeros((3, 2))])),
    ]:
        features, labels = load_party_data(tmp_path / path, **options)
        np.testing.assert_array_equal(features, expected)
        np.testing.assert_array_equal(labels, y)


def test_bad_party_files_are_named(tmp_path) -> None:
    with pytest.raises(ValueError, match="must end in one of"):
        load_party_data(tmp_path / "site.xlsx")
    with pytest.raises(ValueError, match="is not a file on this SuperNode"):
        load_party_data(tmp_path / "absent.npz")
    np.savez(tmp_path / "site.npz", features=np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"must hold arrays 'X' and 'y', has \['features'\]"):
        load_party_data(tmp_path / "site.npz")
    # An object array would need unpickling: refused by privfed's .npz reader (never unpickles).
    np.savez(tmp_path / "objects.npz", X=np.array([{"a": 1}], dtype=object), y=np.zeros(1))
    with pytest.raises(ValueError, match="never unpickles"):
        load_party_data(tmp_path / "objects.npz")
    pytest.importorskip("pandas", reason="CSV party data needs pandas")
    (tmp_path / "site.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match=r"columns \['label'\] are not among site.csv's columns \['a', 'b'\]"):
        load_party_data(tmp_path / "site.csv", label_column="label")
