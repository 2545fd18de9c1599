"""Progress bars: ``progress=None`` shows one on a terminal only, ``True`` always, ``False`` never — everywhere."""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest
from privfed.pipelines import FedKD, FedKT, FedMD, IndependentLearning, PrivateKT, SelectiveFD, Solo
from privfed.pipelines.fedkt.estimator import CentralizedPATE
from privfed.pipelines.protocol.progress import check_progress, progress_bar, shows_progress
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.tree import DecisionTreeClassifier


class FakeTerminal(io.StringIO):
    """A standard-error stand-in that says it is a terminal and keeps what is written."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(scope="module")
def small_federation():
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    parties = [(X[i:600:3], y[i:600:3]) for i in range(3)]
    return parties, X[600:800]


def tree():
    return DecisionTreeClassifier(max_depth=4)


def logistic():
    return LogisticRegression(max_iter=200)


# (name, estimator factory taking progress, words the bar shows)
PIPELINES = [
    ("FedKT", lambda progress: FedKT(tree(), n_teachers=2, random_state=0, progress=progress), "party tasks"),
    ("CentralizedPATE", lambda progress: CentralizedPATE(tree(), n_teachers=2, random_state=0, progress=progress),
     "party tasks"),
    ("Solo", lambda progress: Solo(tree(), random_state=0, progress=progress), "SOLO"),
    ("FedKD", lambda progress: FedKD(logistic(), logistic(), random_state=0, progress=progress), "party tasks"),
    ("PrivateKT", lambda progress: PrivateKT(tree(), rounds=2, queries_per_round=20, epsilon_per_round=5.0,
                                             self_training_size=0, random_state=0, progress=progress), "PrivateKT"),
    ("SelectiveFD", lambda progress: SelectiveFD(logistic(), rounds=1, proxy_batch=30, n_auxiliary=20,
                                                 max_known=60, random_state=0, progress=progress), "Selective-FD"),
    ("FedMD", lambda progress: FedMD(logistic(), rounds=2, proxy_batch=50, random_state=0, progress=progress), "FedMD"),
    ("IndependentLearning",
     lambda progress: IndependentLearning(logistic(), rounds=2, random_state=0, progress=progress),
     "Independent learning"),
]


@pytest.mark.parametrize(("name", "make", "label"), PIPELINES, ids=[p[0] for p in PIPELINES])
def test_every_pipeline_shows_a_bar_as_progress_says(name, make, label, small_federation, capsys, monkeypatch):
    parties, public = small_federation
    make(True).fit(parties, public)
    assert label in capsys.readouterr().err  # True: always, even into a captured stream
    make(None).fit(parties, public)
    assert capsys.readouterr().err == ""  # None: captured stderr is not a terminal
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    make(False).fit(parties, public)
    assert terminal.getvalue() == ""  # False: never, even on a terminal
    make(None).fit(parties, public)
    assert label in terminal.getvalue()  # None on a terminal: the bar


@pytest.mark.parametrize(("name", "make", "label"), PIPELINES, ids=[p[0] for p in PIPELINES])
def test_a_bad_progress_value_is_refused_before_any_work(name, make, label, small_federation):
    parties, public = small_federation
    with pytest.raises(TypeError, match="progress must be None"):
        make("yes").fit(parties, public)


def test_progress_none_follows_the_stream():
    assert shows_progress(None, FakeTerminal()) is True
    assert shows_progress(None, io.StringIO()) is False
    closed = io.StringIO()
    closed.close()
    assert shows_progress(None, closed) is False
    assert shows_progress(True, io.StringIO()) is True
    assert shows_progress(False, FakeTerminal()) is False
    for bad in (1, "auto", 0.5):
        with pytest.raises(TypeError, match="progress"):
            check_progress(bad)


def test_a_bar_passes_its_items_through_unchanged(capsys):
    assert list(progress_bar(np.arange(3), progress=True, desc="counting")) == [0, 1, 2]
    assert "counting" in capsys.readouterr().err


def test_a_sweep_shows_its_bar_as_progress_says(tmp_path, capsys):
    pytest.importorskip("pandas")
    from privfed.reports.sweep import run_sweep
    from test_reports import tiny_config

    config = tiny_config()
    run_sweep(config, tmp_path / "quiet")
    assert "sweep" not in capsys.readouterr().err  # None, and stderr is captured
    run_sweep(config, tmp_path / "quiet", progress=True)  # resumed: every run reused, the bar still shown
    assert f"sweep {config.name}" in capsys.readouterr().err


def test_the_demo_shows_its_bar_and_passes_progress_to_every_training(tmp_path, capsys, monkeypatch):
    import privfed.pipelines.fedkt.estimator as fedkt

    import privfed.bundle.save
    from privfed.cli.demo_command import run_demo

    seen = []

    class Recorded:
        """Stands in for Solo and FedKT: records ``progress``, trains nothing."""

        def __init__(self, *args, progress=None, **kwargs):
            seen.append(progress)

        def fit(self, *args):
            return self

    monkeypatch.setattr(fedkt, "FedKT", Recorded)
    monkeypatch.setattr(fedkt, "Solo", Recorded)
    monkeypatch.setattr(privfed.bundle.save, "save_bundle", lambda *args, **kwargs: None)
    with pytest.raises(AttributeError):  # the stand-ins have no score: the run stops after training
        run_demo(tmp_path / "bundle", progress=True)
    assert seen == [True, True, True]
    assert "privfed demo" in capsys.readouterr().err
    seen.clear()
    with pytest.raises(AttributeError):
        run_demo(tmp_path / "bundle")
    assert seen == [None, None, None] and capsys.readouterr().err == ""
