"""ε-versus-accuracy sweeps and reports on scikit-learn's digits (no /work/shared data needed)."""

from __future__ import annotations

import base64
import copy
import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("matplotlib")

import privfed.reports.sweep as sweep_module  # noqa: E402
from privfed.accounting import Ledger  # noqa: E402
from privfed.accounting.report import round_up  # noqa: E402
from privfed.reports.config import ConfigError, parse_config  # noqa: E402
from privfed.reports.grid import varied_keys  # noqa: E402
from privfed.reports.render import plot_epsilon_accuracy, render_report, summarize, varying_along_lines  # noqa: E402
from privfed.reports.results import RESULTS_FILE, load_results, result_columns  # noqa: E402
from privfed.reports.sweep import run_sweep  # noqa: E402

from privfed import load_bundle  # noqa: E402
from privfed.cli import main  # noqa: E402

TINY = {
    "name": "tiny-digits",
    "seeds": [0, 1],
    "pipeline": {
        "estimator": "FedKT",
        "params": {"n_partitions": 1, "n_teachers": 2, "delta": 1e-5},
        "models": {"teacher": {"class": "sklearn.tree.DecisionTreeClassifier", "params": {"max_depth": 5}}},
    },
    "data": {"sklearn": "load_digits"},
    "split": {"n_parties": 3, "beta": "homogeneous", "public_size": 150, "test_size": 300},
    "grid": {"gamma": [0.5, 2.0], "query_fraction": [0.3]},
    "setting": [
        {"label": "L1", "privacy": "L1"},
        {"label": "L2", "privacy": "L2", "link": {"local_query_fraction": "query_fraction"}},
    ],
    "reference": {"set": {"privacy": "L0"}, "reset": ["gamma", "query_fraction"]},
}
N_RUNS = 2 * (1 + 2 * 2)  # seeds × (one shared reference + settings × gammas)
TOML = """
name = "tiny-digits-cli"
seeds = [3]
[pipeline]
estimator = "FedKT"
[pipeline.params]
n_partitions = 1
n_teachers = 2
privacy = "L1"
[pipeline.models.teacher]
class = "sklearn.tree.DecisionTreeClassifier"
params = { max_depth = 5 }
[data]
sklearn = "load_digits"
[split]
n_parties = 3
beta = "homogeneous"
public_size = 150
test_size = 300
[grid]
gamma = [1.0]
query_fraction = [0.2, 0.4]
[reference]
set = { privacy = "L0" }
reset = ["gamma", "query_fraction"]
"""


def tiny_config(**changes):
    document = copy.deepcopy(TINY)
    document.update(changes)
    return parse_config(document)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    results = run_sweep(tiny_config(), out, progress=False)
    return out, results, render_report(out / RESULTS_FILE, out)


# --- the sweep's table --------------------------------------------------------------------------------
def test_sweep_writes_the_documented_columns(swept) -> None:
    out, results, _ = swept
    config = tiny_config()
    on_disk = load_results(out / RESULTS_FILE)
    assert tuple(on_disk.columns) == result_columns(varied_keys(config)) == tuple(results.columns)
    assert varied_keys(config) == ("gamma", "query_fraction", "privacy", "local_query_fraction")
    assert len(on_disk) == N_RUNS and on_disk["key"].is_unique
    assert (on_disk["status"] == "ok").all()
    assert set(on_disk["role"]) == {"private", "reference"}
    private = on_disk[on_disk["role"] == "private"]
    assert private["reference_key"].isin(on_disk.loc[on_disk["role"] == "reference", "key"]).all()
    assert ((private["accuracy"] > 0) & (private["accuracy"] <= 1)).all()
    assert private["auc"].isna().all()  # ten classes: no AUC
    assert (private["n_queries"] == math.ceil(0.3 * 150)).all()
    l2 = private[private["setting"] == "L2"]
    assert (l2["param_local_query_fraction"] == 0.3).all() and (l2["unit"] == "example").all()
    assert (private.loc[private["setting"] == "L1", "unit"] == "party").all()


def test_epsilon_in_the_table_equals_the_saved_ledgers(swept) -> None:
    out, results, files = swept
    for _, row in results.iterrows():
        ledger = Ledger.from_json((out / row["ledger"]).read_text())
        for unit in ("party", "example"):
            for analysis in ("tight", "classic"):
                expected = ledger.account(row["delta"], analysis=analysis, unit=unit)
                if row["role"] == "reference":  # L0 records no release: no guarantee
                    assert unit not in ledger.units and math.isinf(row[f"epsilon_{unit}_{analysis}"])
                    continue
                assert row[f"epsilon_{unit}_{analysis}"] == expected.epsilon
                assert row[f"epsilon_{unit}_{analysis}_data_independent"] == expected.epsilon_data_independent
        if row["role"] == "private":
            primary = ledger.account(row["delta"])
            assert (row["unit"], row["epsilon"], row["data_dependent"]) == (
                primary.unit, primary.epsilon, primary.data_dependent)
    # The rendered table prints the largest ε over the seeds, rounded up.
    markdown = files.markdown.read_text()
    private = results[results["role"] == "private"]
    for _, group in private.groupby(["setting", "param_gamma"]):
        largest = group["epsilon_party_tight"].max()
        assert round_up(largest) in markdown and float(round_up(largest)) >= largest


#: What a rerun cannot repeat: the time, and what the secret noise decides (the noisy labels, so the scores).
NOT_REPEATED = ("wall_time_s", "accuracy", "auc")


def test_a_rerun_with_the_same_seeds_gives_the_same_numbers_also_in_parallel(swept, tmp_path) -> None:
    """Same splits, queries and ε; the scores follow the secret noise, which no seed repeats (issue 40)."""
    _, first, _ = swept
    second = run_sweep(tiny_config(), tmp_path, n_jobs=2, progress=False)  # grid points on two workers
    columns = [c for c in first.columns if c not in NOT_REPEATED]
    pd.testing.assert_frame_equal(first[columns], second[columns])


def test_an_interrupted_sweep_resumes_without_recomputing(swept, tmp_path, monkeypatch) -> None:
    _, uninterrupted, _ = swept
    real = sweep_module._run_point
    calls = []

    def killed_on_the_fourth(task):
        calls.append(task.point.key)
        if len(calls) == 4:
            raise KeyboardInterrupt  # the user stops the sweep
        return real(task)

    monkeypatch.setattr(sweep_module, "_run_point", killed_on_the_fourth)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(tiny_config(), tmp_path, progress=False)
    assert len(load_results(tmp_path / RESULTS_FILE)) == 3

    resumed_calls = []
    monkeypatch.setattr(sweep_module, "_run_point", lambda task: resumed_calls.append(task.point.key) or real(task))
    resumed = run_sweep(tiny_config(), tmp_path, progress=False)
    assert len(resumed_calls) == N_RUNS - 3 and not set(resumed_calls) & set(calls[:3])
    columns = [c for c in resumed.columns if c not in NOT_REPEATED]
    pd.testing.assert_frame_equal(resumed[columns], uninterrupted[columns])

    resumed_calls.clear()
    run_sweep(tiny_config(), tmp_path, progress=False)  # everything is in the CSV
    assert resumed_calls == []


def test_a_changed_grid_keeps_the_finished_points(swept, tmp_path, monkeypatch) -> None:
    out, _, _ = swept
    shutil.copy(out / RESULTS_FILE, tmp_path / RESULTS_FILE)
    calls = []
    real = sweep_module._run_point
    monkeypatch.setattr(sweep_module, "_run_point", lambda task: calls.append(task) or real(task))
    grown = tiny_config(grid={"gamma": [0.5, 2.0, 4.0], "query_fraction": [0.3]})
    results = run_sweep(grown, tmp_path, progress=False)
    assert len(calls) == 2 * 2 and {task.point.values["gamma"] for task in calls} == {4.0}  # seeds × settings
    assert len(results) == N_RUNS + 4
    with pytest.warns(UserWarning, match="dropping 4 row"):
        shrunk = run_sweep(tiny_config(), tmp_path, progress=False)
    assert len(shrunk) == N_RUNS


def test_a_refused_point_is_recorded_and_the_sweep_goes_on(tmp_path) -> None:
    config = tiny_config(grid={"target_epsilon": [1e-4, 50.0]}, setting=[{"label": "L1", "privacy": "L1",
                                                                           "gamma": 0.5}], seeds=[0])
    results = run_sweep(config, tmp_path, progress=False)
    failed = results[results["status"] == "error"]
    assert list(failed["param_target_epsilon"]) == [1e-4]
    assert "does not allow a single server query" in failed["error"].iloc[0]
    assert results.loc[results["param_target_epsilon"] == 50.0, "epsilon"].iloc[0] <= 50.0
    files = render_report(results, tmp_path)
    assert "Failed runs" in files.markdown.read_text() and "single server query" in files.html.read_text()
    nothing = render_report(results[results["status"] == "error"], tmp_path / "failed")
    assert nothing.png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "Failed runs" in nothing.markdown.read_text()


# --- rendering ------------------------------------------------------------------------------------------
def test_report_embeds_a_valid_png_and_links_the_plots(swept) -> None:
    _, _, files = swept
    png = files.png.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    pixels = matplotlib.image.imread(files.png)
    assert pixels.ndim == 3 and pixels.shape[0] > 200 and pixels.std() > 0.01
    page = files.html.read_text()
    embedded = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert embedded and base64.b64decode(embedded.group(1)) == png
    assert 'href="epsilon_accuracy.svg"' in page and "<svg" in files.svg.read_text()
    assert "](epsilon_accuracy.png)" in files.markdown.read_text()
    for text in (page, files.markdown.read_text()):
        assert "Where each ε comes from" in text and "laplace_noisy_max" in text and "parallel_composition" in text
        assert "non-private accuracy" in text and "UNACCOUNTED" in text
        assert 'name = "tiny-digits"' not in text  # no TOML text for a parsed mapping
        assert "dp-accounting" in text  # the environment


def test_epsilon_axis_is_logarithmic_only_when_it_spans_a_decade(swept) -> None:
    _, results, _ = swept
    summary = summarize(results)
    assert len(summary) == 4 and (summary["seeds"] == 2).all()
    narrow = summary.copy()
    for unit in ("party", "example"):
        narrow[f"epsilon_{unit}"] = narrow[f"epsilon_{unit}_min"] = np.linspace(1.0, 3.0, len(narrow))
    assert {axis.get_xscale() for axis in plot_epsilon_accuracy(narrow).axes} == {"linear"}
    wide = narrow.copy()
    wide["epsilon_party"] = wide["epsilon_party_min"] = np.geomspace(0.1, 100.0, len(wide))
    scales = [axis.get_xscale() for axis in plot_epsilon_accuracy(wide).axes]
    assert scales == ["linear", "log"]  # one panel per unit: example, party


def test_the_plot_says_what_varies_along_a_line_and_draws_chance(swept) -> None:
    _, results, _ = swept
    summary = summarize(results)
    assert varying_along_lines(summary) == []  # one query_fraction: each line is a single point
    merged = summary.assign(line=summary["setting"])  # one line per setting: gamma varies along it
    assert varying_along_lines(merged) == ["gamma"]
    figure = plot_epsilon_accuracy(merged, n_classes=10)
    assert figure.get_suptitle() == "along each line gamma varies (each point labelled with its gamma)"
    for axis in figure.axes:
        assert {text.get_text() for text in axis.texts} == {"0.5", "2"}
        chance = [line for line in axis.get_lines() if line.get_label() == "random guessing (1/10): 10.0 %"]
        assert len(chance) == 1 and chance[0].get_ydata()[0] == pytest.approx(0.1)


def test_the_environment_table_says_not_installed(swept, tmp_path) -> None:
    _, results, _ = swept
    environment = {"software": {"xgboost": None, "numpy": "2.0.0"}}
    files = render_report(results, tmp_path, environment=environment)
    text = files.markdown.read_text(encoding="utf-8")
    assert "| xgboost | not installed |" in text and "| numpy | 2.0.0 |" in text and "None" not in text


# --- configuration --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"colour": "blue"}, r"^colour: unknown key"),
        ({"seeds": []}, r"^seeds must be a non-empty array"),
        ({"seeds": [0, 0]}, r"^seeds repeats"),
        ({"grid": {"gama": [0.1]}}, r"^grid\.gama: unknown key 'gama'"),
        ({"grid": {"gamma": 0.1}}, r"^grid\.gamma must be a non-empty array"),
        ({"grid": {"random_state": [1]}}, r"^grid\.random_state: 'random_state' is set by the sweep"),
        ({"data": {"sklearn": "fetch_covtype"}}, r"^data\.sklearn must be one of"),
        ({"data": {"name": "a9a", "folder": "/no/such/folder"}},
         r"^data\.folder: '/no/such/folder' is not a directory"),
        ({"pipeline": {"estimator": "FedKV"}}, r"^pipeline\.estimator: 'FedKV' is not an estimator"),
        ({"pipeline": {"estimator": "FedKT", "models": {"teacher": {"class": "os.system"}}}},
         r"^pipeline\.models\.teacher\.class must be 'package\.module\.Class' from"),
        ({"pipeline": {"estimator": "FedKT", "models": {"teacher": {
            "class": "sklearn.tree.DecisionTreeClassifier", "params": {"depth": 3}}}}},
         r"^pipeline\.models\.teacher\.params\.depth: unknown key 'depth'.*did you mean 'max_depth'\?"),
        ({"setting": [{"label": "a", "privacy": "L1", "link": {"local_query_fraction": "nothing"}}]},
         r"^setting\[0\]\.link\.local_query_fraction must name a grid axis"),
        ({"setting": [{"label": "a", "gamma": 0.1}]}, r"^setting\[0\]\.gamma: 'gamma' is also a grid axis"),
        ({"reference": {"reset": ["teacher.max_depth"]}}, r"^reference\.reset: 'teacher\.max_depth' is a model"),
        ({"split": {"beta": 0.5}}, r"^split\.n_parties is required"),
        ({"n_jobs": 0}, r"^n_jobs must be a non-zero integer"),
    ],
)
def test_bad_configs_name_the_key(change, message) -> None:
    with pytest.raises(ConfigError, match=message):
        tiny_config(**change)


# --- command line -----------------------------------------------------------------------------------
def test_one_command_from_toml_to_report_with_bundles(tmp_path, capsys) -> None:
    config = tmp_path / "tiny.toml"
    config.write_text(TOML)
    out = tmp_path / "out"
    assert main(["report", str(config), "--out", str(out), "--no-progress"]) == 0
    assert {"report.html", "report.md", "epsilon_accuracy.png", "epsilon_accuracy.svg", RESULTS_FILE,
            "config.toml"} <= {p.name for p in out.iterdir()}
    assert (out / "config.toml").read_text() == TOML and "reset = [" in (out / "report.html").read_text()
    results = load_results(out / RESULTS_FILE)
    assert len(results) == 3
    for _, row in results.iterrows():
        model, ledger = load_bundle(out / "runs" / row["key"])
        assert hasattr(model, "predict")
        if row["role"] == "private":
            assert ledger.account(row["delta"], unit="party").epsilon == row["epsilon_party_tight"]

    rendered = tmp_path / "rendered"
    assert main(["report", "--render", str(out / RESULTS_FILE), "--out", str(rendered)]) == 0
    assert (rendered / "report.md").read_text() == (out / "report.md").read_text()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["missing.toml"], "config file 'missing.toml' could not be read"),
        (["--render", "missing.csv"], "results file 'missing.csv' does not exist"),
        ([], "give either CONFIG.toml"),
        (["bad.toml"], "grid.gama: unknown key"),
    ],
)
def test_bad_input_exits_2_with_one_line(arguments, message, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.toml").write_text(TOML.replace("gamma = [1.0]", "gama = [1.0]"))
    assert main(["report", *arguments, "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("privfed report: error: ") and message in error


# --- headless browser ------------------------------------------------------------------------------
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


@pytest.mark.chromium
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium (/usr/bin/chromium) is not installed")
def test_report_opens_in_headless_chromium(swept, tmp_path) -> None:
    _, _, files = swept
    screenshot = tmp_path / "report.png"
    subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars", "--window-size=1280,1600",
         f"--screenshot={screenshot}", files.html.resolve().as_uri()],
        check=True, capture_output=True, timeout=120,
    )
    import matplotlib.image

    pixels = matplotlib.image.imread(screenshot)
    assert pixels.shape[:2] == (1600, 1280)
    # The embedded plot rendered: many distinct colours, not a blank page or a broken-image icon.
    assert len(np.unique(pixels.reshape(-1, pixels.shape[-1])[:, :3], axis=0)) > 50


def test_sweep_runs_other_pipelines_and_bundles_their_final_model(tmp_path):
    """Reports are generic over privfed's estimators: FedKD with scikit-learn models, saved through final_model_."""
    import privfed
    from privfed.cli import main

    config = tmp_path / "fedkd.toml"
    config.write_text(
        'name = "fedkd-tiny"\nseeds = [0]\n\n[pipeline]\nestimator = "FedKD"\n\n'
        "[pipeline.params]\nclip = 5.0\n\n"
        '[pipeline.models.local_model]\nclass = "sklearn.linear_model.LogisticRegression"\n'
        "params = { max_iter = 200 }\n\n"
        '[pipeline.models.server_model]\nclass = "sklearn.tree.DecisionTreeClassifier"\nparams = { max_depth = 8 }\n\n'
        '[data]\nsklearn = "load_digits"\n\n[split]\nn_parties = 3\nbeta = "homogeneous"\npublic_size = 300\n'
        "test_size = 300\n\n[grid]\ngamma = [0.1, 1.0]\n\n[[setting]]\nlabel = \"FedKD\"\n"
    )
    out = tmp_path / "out"
    assert main(["report", str(config), "--out", str(out), "--no-progress"]) == 0
    results = pd.read_csv(out / "results.csv")
    assert len(results) == 2 and (results["status"] == "ok").all()
    for run in sorted((out / "runs").iterdir()):
        model, ledger = privfed.load_bundle(run)
        assert type(model).__name__ == "DecisionTreeClassifier" and ledger.account(delta=1e-5).epsilon > 0


def test_the_runs_warnings_are_printed_once_after_the_sweep(tmp_path, capsys) -> None:
    """A warning every noisy run raises (the pre-flight check at gamma = 0.05) is one line, naming the runs, and is
    not printed through the progress bar run by run."""
    config = tmp_path / "hopeless.toml"
    config.write_text(TOML.replace("gamma = [1.0]", "gamma = [0.05]"), encoding="utf-8")
    assert main(["report", str(config), "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "NEAR CHANCE" in line]
    assert len(lines) == 1 and err.count("NEAR CHANCE") == 1, err
    assert lines[0].startswith("privfed report: warning: FedKT pre-flight: each server query has at most 3 votes")
    assert lines[0].endswith("[2 of 3 runs: default gamma=0.05 query_fraction=0.2 seed=3, "
                             "default gamma=0.05 query_fraction=0.4 seed=3]"), lines[0]
