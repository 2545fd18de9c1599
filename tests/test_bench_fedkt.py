"""bench/fedkt.py and fedkt_tables.py: the official tie rule (``--tie-rule official``), the MNIST MLPs'
``--device``, failed runs counted in Tables 8 and 9, and ``--public-portion`` (Table 3).

The row-for-row reproduction refits the final model on the same consistent votes with the official code's
rule and the final model's own parameters, so the two accuracies differ by the tie rule only.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from sklearn.tree import DecisionTreeClassifier

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import fedkt as bench_fedkt  # noqa: E402  (bench/fedkt.py)


class _Fixed:
    """A student whose predictions (class codes) are fixed in advance."""

    def __init__(self, codes):
        self.codes = np.asarray(codes)

    def predict(self, X):
        return self.codes[: len(X)]


def _model(student_codes, final):
    classes = np.array([10, 20])
    return SimpleNamespace(students_=[[_Fixed(a), _Fixed(b)] for a, b in student_codes], classes_=classes,
                           final_model_=final, predict=lambda X: classes[final.predict(X)])


def _split(y_public):
    X_public = np.arange(len(y_public), dtype=float)[:, None]
    return SimpleNamespace(X_public=X_public, y_public=np.asarray(y_public), X_test=X_public,
                           y_test=np.asarray(y_public))


def test_tied_and_all_inconsistent_votes_go_to_the_tie_class():
    # queries: 0 and 1 won by class code 0 and 1; 2 tied 2–2; 3 inconsistent everywhere (0–0)
    parties = [([0, 1, 0, 0], [0, 1, 0, 1]), ([0, 1, 1, 1], [0, 1, 1, 0])]
    split = _split([10, 20, 20, 20])
    final = DecisionTreeClassifier(random_state=0).fit(split.X_public, [0, 1, 0, 0])
    to_20 = bench_fedkt.official_tie_rule(_model(parties, final), split, tie_class=20)
    assert to_20["tied_queries"] == 2 and to_20["all_inconsistent_queries"] == 1
    assert to_20["server_label_accuracy_official_tie_rule"] == 100.0  # ties labelled 20, as y_public
    to_10 = bench_fedkt.official_tie_rule(_model(parties, final), split, tie_class=10)
    assert to_10["server_label_accuracy_official_tie_rule"] == 50.0  # both ties now labelled 10: wrong


def test_without_ties_the_refit_is_the_final_model_itself():
    parties = [([0, 1, 1], [0, 1, 1]), ([0, 1, 0], [0, 1, 0]), ([0, 0, 1], [0, 0, 1])]
    split = _split([10, 20, 20])
    final = DecisionTreeClassifier(random_state=3).fit(split.X_public, [0, 1, 1])
    result = bench_fedkt.official_tie_rule(_model(parties, final), split, tie_class=10)
    assert result["tied_queries"] == 0
    assert result["accuracy_official_tie_rule"] == 100 * np.mean(
        _model(parties, final).predict(split.X_test) == split.y_test)


def test_the_official_tie_rule_needs_the_official_rows(capsys):
    argv = sys.argv
    sys.argv = ["bench/fedkt.py", "--tie-rule", "official", "--settings", "adult-l0"]
    try:
        bench_fedkt.main()
    except SystemExit as stop:
        assert stop.code == 2
    else:
        raise AssertionError("--tie-rule official without --protocol reference-code ran")
    finally:
        sys.argv = argv
    assert "--tie-rule official needs --protocol reference-code" in capsys.readouterr().err


def test_the_mnist_mlps_train_on_the_device_asked_for():
    try:
        for name, expected in (("cpu", "cpu"), ("auto", None), ("cuda", "cuda")):
            bench_fedkt.DEVICE["name"] = name
            assert bench_fedkt.mlp()().device == expected
    finally:
        bench_fedkt.DEVICE["name"] = "cpu"
    assert bench_fedkt.resolved_device("cpu") == "cpu"
    try:
        bench_fedkt.torch_device("gpu")
    except ValueError as error:
        assert "'cpu', 'cuda' or 'auto'" in str(error)
    else:
        raise AssertionError("an unknown device name was accepted")


def test_tables_8_and_9_count_failed_runs_in_the_median():
    import fedkt_tables  # bench/fedkt_tables.py

    assert fedkt_tables.median([76.0, 77.0, 78.0]) == "77.0 (3)"
    # a failed run ranks below every trained run: the median of three with one failure is the lower survivor
    assert fedkt_tables.median([75.0, 79.0], failed=1) == "75.0 (1 of 3 failed; trained runs 77.0)"
    assert fedkt_tables.median([79.6], failed=2) == "failed (2 of 3 failed; trained runs 79.6)"
    assert fedkt_tables.median([], failed=3) == "failed (3 of 3 failed)"
    assert fedkt_tables.median([]) == "–"


def test_fit_and_score_records_accuracy_or_the_failure():
    class _Model:
        def __init__(self, error=None):
            self.error = error

        def fit(self, parties, X_public):
            if self.error:
                raise ValueError(self.error)
            return self

        def score(self, X, y):
            return 0.75

    split = SimpleNamespace(parties=[], X_public=None, X_test=None, y_test=None)
    record = bench_fedkt.fit_and_score(_Model(), split, {"seed": 3})
    assert record["seed"] == 3 and record["accuracy"] == 75.0 and record["seconds"] >= 0 and "failed" not in record
    failed = bench_fedkt.fit_and_score(_Model("one class"), split, {"seed": 3})
    assert failed["failed"] == "one class" and "accuracy" not in failed


def test_a_public_portion_keeps_the_parties_and_test_set_and_nests():
    from privfed.pipelines import federated_split

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(400, 3)), rng.integers(0, 2, size=400)
    split = federated_split(X, y, n_parties=4, beta=0.5, public_size=100, X_test=X[:50], y_test=y[:50],
                            random_state=0)
    fifth, three_fifths = (bench_fedkt.public_portion(split, p, seed=3) for p in (0.2, 0.6))
    assert (len(fifth.X_public), len(three_fifths.X_public)) == (20, 60)
    assert set(fifth.public_indices) < set(three_fifths.public_indices) < set(split.public_indices)
    for cut in (fifth, three_fifths):
        assert np.array_equal(cut.X_public, X[cut.public_indices])
        assert np.array_equal(cut.y_public, y[cut.public_indices])
        assert cut.parties is split.parties and cut.X_test is split.X_test
    assert bench_fedkt.public_portion(split, 1.0, seed=3) is split
    odd = bench_fedkt.public_portion(SimpleNamespace(X_public=X[:7], y_public=y[:7], parties=[]), 0.5, seed=1)
    assert len(odd.X_public) == 4  # ⌈0.5 · 7⌉
    for bad in (0.0, 1.5, -0.2):
        try:
            bench_fedkt.public_portion(split, bad, seed=0)
        except ValueError as error:
            assert "public_portion must be in (0, 1]" in str(error) and repr(bad) in str(error)
        else:
            raise AssertionError(f"portion {bad} was accepted")


def test_the_public_portion_option_refuses_values_outside_0_1(capsys):
    argv = sys.argv
    sys.argv = ["bench/fedkt.py", "--public-portion", "0", "--settings", "adult-l0"]
    try:
        bench_fedkt.main()
    except SystemExit as stop:
        assert stop.code == 2
    else:
        raise AssertionError("--public-portion 0 ran")
    finally:
        sys.argv = argv
    assert "--public-portion must be in (0, 1], got 0.0" in capsys.readouterr().err
