"""FedKT-L1 and -L2 on Adult and cod-rna: the official FedKT code and privfed, side by side, on the same rows.

A reproduction for docs/results.md (*Where the L1/L2 gap lies*), not part of privfed. For every seed (the
official code's ``--init_seed``: the rows of ``../shared/peer_splits``) and model seed (its ``--fedkt_seed``,
privfed's ``random_state``), it runs the official code (a checkout of github QinbinLi/FedKT @ 0bb9a89, given
by ``--official-code``; nothing of it is copied here) in a subprocess, then privfed's FedKT on the same rows
(``bench/fedkt.py --protocol reference-code``), alternating, and records for both:

* the final model's accuracy on the evaluation rows;
* the accuracy of the **noiseless** vote at the stage where the noise is added (L1: the 50 party students'
  votes on the server's 81 queries; L2: each party's 25 teachers' votes on its 81 local queries, averaged over
  the parties), from the official code's own ``-dp0``/``-dp1`` vote files and from privfed's ``students_`` /
  ``party_votes_``;
* the official code's logged "Labeling acc" (its labels after the Laplace noise) at that stage.

The official code runs from a temporary copy of the checkout with one edit, ``bench/fedkt_official_xgboost.patch``
(an XGBoost student whose labels are one class predicts that class, as the xgboost 1.0.2 it was written for did;
today's xgboost refuses such labels; random-forest students, Adult's, are untouched): its image-only imports
(torchvision, pydicom), which the tabular runs never use, are replaced by empty stand-in modules in the
subprocess, and the data are the LIBSVM files rebuilt from ``../shared/datasets`` (labels −1/+1, 1-based
features), as ``bench/results/fedkt_official_code_adult_l0_spread.json`` records for the L0 runs. A run of the
official code that raises (e.g. a party with fewer rows than teachers) is recorded as failed, with the last line
of its error. Each side runs in its own process (privfed's through ``--one-run``); every record has its CPU
seconds (user + system of that process).

Measurements beside the accuracies (both codes, computed here from each code's noiseless votes and the true labels):

* ``party_label_accuracy``: each party's teacher vote on its local queries, right on what share (mean over parties;
  the official code logs it as its parties' "Labeling acc");
* ``expected_noisy_label_accuracy``: the share of the labels after the Laplace noise (scale 1/γ on each count) that
  is right, in expectation over the noise, from the noiseless counts (two classes: a vote with margin m between
  its classes flips with probability ½·e^(−m/b)·(1 + m/(2b)), b = 1/γ; a tie is a coin flip);
  ``expected_flipped_share``: the share of the noiseless vote's labels the noise flips, in expectation;
  ``margin_mean`` and ``margin_at_most_scale``: the mean vote margin and the share of queries whose margin is at
  most the noise scale b;
* L1 only, ``refit``: the final model (the official code's hyperparameters) refitted here on the same server queries
  with their true labels, with the noiseless vote's labels (ties to class 0, numpy's argmax, the official rule),
  and with the labels of ``--noise-draws`` independent Laplace draws on the noiseless counts (mean, sd and range
  of the test accuracy over the draws), each with today's xgboost (base score fitted to the labels, since
  xgboost 2.0), with xgboost 1.x's fixed ``base_score=0.5`` and with the paper's Table 5 learning rate 0.05
  (the code's flag is ``--lr 0.1``); ``server_votes``: the noiseless counts themselves (L1). The draws are a
  measurement's simulation (seeded, the same draws for both codes), not noise any guarantee relies on.

Usage::

    git clone https://github.com/QinbinLi/FedKT /tmp/FedKT && git -C /tmp/FedKT checkout 0bb9a89
    python bench/fedkt_official_side_by_side.py --official-code /tmp/FedKT --settings adult-l1 adult-l2 \\
        --seeds 0 1 2 3 4 --json bench/results/fedkt_official_side_by_side_l1_l2.json
    nice -n 19 python bench/fedkt_official_side_by_side.py --official-code /tmp/FedKT --settings codrna-l1 \\
        codrna-l2 --seeds 0 1 2 3 4 --json bench/results/fedkt_official_side_by_side_codrna.json

(The Adult records were made before the patch and the measurements above existed, with the official code
unpatched, which Adult's random forests do not need.)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fedkt as bench_fedkt  # noqa: E402  (bench/fedkt.py)
from privfed.pipelines import load_dataset  # noqa: E402
from privfed.pipelines.data.reference_rows import REFERENCE_ROWS_DATASETS, load_reference_rows  # noqa: E402
from sklearn.base import clone  # noqa: E402

from bench import provenance  # noqa: E402

#: The official code's flags per setting (../shared/paper_tables/fedkt_official_runs.md; cod-rna: the paper's Table 2
#: rows, γ and query portions as Tables 8/9 print them: 0.5 % of the held-out quarter = 74 server queries for L1,
#: 2 % = 297 local queries for L2; students and final model XGBoost at the code's --lr 0.1, as its L0 runs).
COMMON = ["--alg", "fedkt", "--max_tree_depth", "6", "--n_stu_trees", "100", "--n_final_stu_trees", "100",
          "--partition", "hetero-dir", "--beta", "0.5", "--device", "cpu"]
MODEL = {"adult_a9a": ["--model", "tree"], "cod_rna": ["--model", "gbdt_tree", "--lr", "0.1"]}
OFFICIAL_FLAGS = {
    "adult-l1": ["--n_parties", "50", "--n_partition", "1", "--n_teacher_each_partition", "5", "--dp_level", "1",
                 "--gamma", "0.04", "--query_portion", "0.01", "--local_query_portion", "0.5"],
    "adult-l2": ["--n_parties", "20", "--n_partition", "1", "--n_teacher_each_partition", "25", "--dp_level", "2",
                 "--gamma", "0.04", "--query_portion", "0.5", "--local_query_portion", "0.01"],
    "codrna-l1": ["--n_parties", "50", "--n_partition", "1", "--n_teacher_each_partition", "5", "--dp_level", "1",
                  "--gamma", "0.1", "--query_portion", "0.005", "--local_query_portion", "0.5"],
    "codrna-l2": ["--n_parties", "20", "--n_partition", "1", "--n_teacher_each_partition", "25", "--dp_level", "2",
                  "--gamma", "0.05", "--query_portion", "0.5", "--local_query_portion", "0.02"],
}
#: The run-time edit applied to a temporary copy of the official checkout (its header says what and why).
PATCH = Path(__file__).resolve().parent / "fedkt_official_xgboost.patch"

#: Runs experiments.py as __main__ with empty stand-ins for the image-only modules it imports at the top.
LAUNCHER = """
import runpy, sys, types
class _Unused:
    def __init__(self, *args, **kwargs):
        pass
def _module(name):
    module = types.ModuleType(name)
    def attribute_of(attribute):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return _Unused if attribute[:1].isupper() else _module(name + "." + attribute)
    module.__getattr__ = attribute_of
    sys.modules[name] = module
    return module
for name in ("torchvision", "torchvision.transforms", "torchvision.datasets", "torchvision.datasets.vision",
             "torchvision.datasets.utils", "pydicom"):
    _module(name)
sys.argv = ["experiments.py", *sys.argv[1:]]
runpy.run_path("experiments.py", run_name="__main__")
"""


def write_libsvm(folder: Path, data_folder: Path, name: str) -> None:
    """A training file as the LIBSVM file the official code reads (``a9a``, ``cod-rna``; original row order)."""
    from sklearn.datasets import dump_svmlight_file

    data = load_dataset(name, data_folder)
    dump_svmlight_file(data.X_train.astype(np.float64), np.where(data.y_train == 1, 1, -1),
                       str(folder / REFERENCE_ROWS_DATASETS[name]), zero_based=False)


def vote_accuracy(votes: np.ndarray, truth: np.ndarray) -> float:
    """Accuracy of the argmax of vote histograms (ties to the lowest code, as numpy does)."""
    return 100 * float(np.mean(np.argmax(votes, axis=1) == truth))


def flip_probability(margin: np.ndarray, scale: float) -> np.ndarray:
    """P(Laplace noise of ``scale`` on both of two counts reverses a lead of ``margin`` > 0): ½·e^(−m/b)·(1 + m/2b)."""
    margin = np.asarray(margin, dtype=float)
    return 0.5 * np.exp(-margin / scale) * (1 + margin / (2 * scale))


def noise_effect(votes: np.ndarray, truth: np.ndarray, scale: float) -> dict[str, float]:
    """What Laplace noise of ``scale`` does to two-class vote counts, in expectation over the noise (percent).

    ``expected_noisy_label_accuracy``: the share of noisy labels equal to ``truth``; ``expected_flipped_share``: the
    share of the noiseless vote's labels the noise changes (a tied vote counts as half flipped, half right);
    ``margin_mean``, ``margin_at_most_scale``: the vote margins and the share of them at most ``scale``.
    """
    votes = np.asarray(votes, dtype=float)
    margin = np.abs(votes[:, 1] - votes[:, 0])
    flip = np.where(margin == 0, 0.5, flip_probability(margin, scale))
    leader = np.argmax(votes, axis=1)
    right = np.where(margin == 0, 0.5, np.where(leader == truth, 1 - flip, flip))
    return {"expected_noisy_label_accuracy": 100 * float(np.mean(right)),
            "expected_flipped_share": 100 * float(np.mean(flip)),
            "margin_mean": float(np.mean(margin)), "margin_at_most_scale": 100 * float(np.mean(margin <= scale))}


def refits(key: str, votes: np.ndarray, X_queries: np.ndarray, truth: np.ndarray, X_test: np.ndarray,
           y_test: np.ndarray, scale: float, draws: int) -> dict[str, Any]:
    """The final model refitted on the server queries with other labels (L1); test accuracies in percent.

    ``true``, ``noiseless`` (argmax, ties to class 0) and, over ``draws`` seeded Laplace draws of ``scale`` on the
    noiseless counts, ``noisy_mean``/``noisy_sd``/``noisy_min``/``noisy_max``; every one with the model as the bench
    builds it (today's xgboost) and, for XGBoost, again with xgboost 1.x's fixed ``base_score=0.5`` (``_base0.5``)
    and with the paper's Table 5 learning rate 0.05 instead of the code's ``--lr 0.1`` (``_lr0.05``).
    A label set of one class gives the constant model's accuracy (the official patch's and privfed's rule).
    """
    prototype = bench_fedkt.SETTINGS[key].student()
    variants = {"": prototype}
    if "base_score" in prototype.get_params():  # XGBoost: 1.x's fixed base score, and Table 5's learning rate
        variants["_base0.5"] = clone(prototype).set_params(base_score=0.5)
        variants["_lr0.05"] = clone(prototype).set_params(learning_rate=0.05)

    def accuracy(model: Any, labels: np.ndarray) -> float:
        if len(np.unique(labels)) == 1:
            return 100 * float(np.mean(y_test == labels[0]))
        return 100 * float(np.mean(clone(model).fit(X_queries, labels).predict(X_test) == y_test))

    result: dict[str, Any] = {"queries": len(truth), "draws": draws}
    generator = np.random.default_rng(20261128)  # a measurement's simulation: the same draws for both codes
    noisy = [np.argmax(votes + generator.laplace(0.0, scale, size=votes.shape), axis=1) for _ in range(draws)]
    for suffix, model in variants.items():
        result["true" + suffix] = accuracy(model, truth)
        result["noiseless" + suffix] = accuracy(model, np.argmax(votes, axis=1))
        scores = [accuracy(model, labels) for labels in noisy]
        result.update({"noisy_mean" + suffix: float(np.mean(scores)),
                       "noisy_sd" + suffix: float(np.std(scores, ddof=1)) if draws > 1 else None,
                       "noisy_min" + suffix: float(np.min(scores)), "noisy_max" + suffix: float(np.max(scores))})
    return result


def official_copy(code: Path, folder: Path) -> Path:
    """A copy of the official checkout's files in ``folder`` with :data:`PATCH` applied (``git apply``)."""
    copy = folder / "FedKT"
    shutil.copytree(code, copy, ignore=shutil.ignore_patterns(".git"))
    subprocess.run(["git", "apply", str(PATCH)], cwd=copy, check=True, capture_output=True)
    return copy


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_official(code: Path, data: Path, key: str, seed: int, model_seed: int, y_official: np.ndarray,
                 X_train: np.ndarray, rows, timeout: int, draws: int) -> dict[str, Any]:
    """One process of the official code; accuracy, vote accuracies and the noise's effect from its log and votes."""
    name = bench_fedkt.SETTINGS[key].data
    gamma = float(OFFICIAL_FLAGS[key][OFFICIAL_FLAGS[key].index("--gamma") + 1])
    with tempfile.TemporaryDirectory(prefix="fedkt-official-") as logs:
        command = [sys.executable, "-c", LAUNCHER, "--dataset", REFERENCE_ROWS_DATASETS[name], "--datadir",
                   str(data) + "/", "--logdir", logs, "--log_file_name", "run", "--privacy_analysis_file_name", "votes",
                   *COMMON, *MODEL[name], *OFFICIAL_FLAGS[key], "--init_seed", str(seed), "--fedkt_seed",
                   str(model_seed)]
        start, cpu = time.perf_counter(), children_cpu_seconds()
        finished = subprocess.run(command, cwd=code, capture_output=True, text=True, timeout=timeout, check=False,
                                  env={**os.environ, "OMP_NUM_THREADS": "1"})
        record: dict[str, Any] = {"side": "official", "setting": key, "seed": seed, "model_seed": model_seed,
                                  "command": "python experiments.py " + " ".join(command[3:]),
                                  "seconds": time.perf_counter() - start, "cpu_seconds": children_cpu_seconds() - cpu}
        log = (Path(logs) / "run.log").read_text(encoding="utf-8") if (Path(logs) / "run.log").is_file() else ""
        accuracy = re.findall(r"global test acc ([0-9.]+)", log)
        if finished.returncode != 0 or not accuracy:
            lines = (finished.stderr or finished.stdout).strip().splitlines()
            return {**record, "failed": lines[-1] if lines else f"exit status {finished.returncode}"}
        labelling = [100 * float(value) for value in re.findall(r"Labeling acc ([0-9.]+)", log)]
        record["accuracy"] = 100 * float(accuracy[-1])
        public = y_official[rows.public_rows]
        if key.endswith("-l1"):  # the server's noisy labels; its vote file holds the noiseless counts
            votes = np.load(Path(logs) / "votes-0-dp0.npz")["arr_2"]
            truth = public[: len(votes)]
            record["noiseless_vote_accuracy"] = vote_accuracy(votes, truth)
            record["noisy_label_accuracy"] = labelling[-1]
            record["party_label_accuracy"] = float(np.mean(labelling[:-1]))  # noiseless teacher votes (γ = 0 there)
            record.update(noise_effect(votes, truth, 1 / gamma))
            record["server_votes"] = votes.astype(int).tolist()
            if draws:
                record["refit"] = refits(key, votes, X_train[rows.public_rows[: len(votes)]], truth,
                                         X_train[rows.test_rows], y_official[rows.test_rows], 1 / gamma, draws)
        else:  # each party's noisy labels (its 25 teachers' counts are in the -dp1 file, party after party)
            votes = np.load(Path(logs) / "votes-0-dp1.npz")["arr_2"].reshape(len(rows.party_rows), -1, 2)
            record["noiseless_vote_accuracy"] = float(np.mean(
                [vote_accuracy(party, public[: party.shape[0]]) for party in votes]))
            record["noisy_label_accuracy"] = float(np.mean(labelling[:-1]))
            effects = [noise_effect(party, public[: party.shape[0]], 1 / gamma) for party in votes]
            record.update({field: float(np.mean([e[field] for e in effects])) for field in effects[0]})
        return record


def run_privfed(key: str, folder: Path, rows_file: Path, seed: int, model_seed: int, draws: int) -> dict[str, Any]:
    """privfed's FedKT on the same rows (bench/fedkt.py's reference-code run), its votes and the noise's effect."""
    setting = bench_fedkt.SETTINGS[key]
    split, _ = bench_fedkt.prepare(setting.data, folder, "reference-code", setting.parties, seed=seed,
                                   rows_file=rows_file)
    model = bench_fedkt.fedkt_for(setting, split, model_seed, n_jobs=1)
    record: dict[str, Any] = {"side": "privfed", "setting": key, "seed": seed, "model_seed": model_seed,
                              "official_rows": split.rows_source is not None}
    record = bench_fedkt.fit_and_score(model, split, record)
    if "failed" in record:
        return record
    codes = np.searchsorted(model.classes_, split.y_public)
    test_codes = np.searchsorted(model.classes_, split.y_test)
    party_votes = [party[0] for party in model.party_votes_ if party is not None]
    record["party_label_accuracy"] = float(np.mean([vote_accuracy(v, codes[: v.shape[0]]) for v in party_votes]))
    if setting.privacy == "L1":
        queries = split.X_public[: model.n_queries_answered_]
        votes = np.zeros((len(queries), len(model.classes_)), dtype=np.int64)
        for party in model.students_:
            votes[np.arange(len(queries)), party[0].predict(queries).astype(np.int64)] += 1
        truth = codes[: len(queries)]
        record["noiseless_vote_accuracy"] = vote_accuracy(votes, truth)
        record["student_accuracy"] = float(np.mean(
            [100 * np.mean(party[0].predict(split.X_test) == test_codes) for party in model.students_ if party]))
        record.update(noise_effect(votes, truth, 1 / setting.gamma))
        record["server_votes"] = votes.tolist()
        if draws:
            record["refit"] = refits(key, votes, queries, truth, split.X_test, test_codes, 1 / setting.gamma, draws)
    else:
        record["noiseless_vote_accuracy"] = record["party_label_accuracy"]
        effects = [noise_effect(v, codes[: v.shape[0]], 1 / setting.gamma) for v in party_votes]
        record.update({field: float(np.mean([e[field] for e in effects])) for field in effects[0]})
    return record


def run_privfed_process(key: str, data: str, rows_file: str, seed: int, model_seed: int, draws: int,
                        timeout: int) -> dict[str, Any]:
    """:func:`run_privfed` in a process of its own (this script's ``--one-run``); its record, with CPU seconds."""
    command = [sys.executable, __file__, "--one-run", key, str(seed), str(model_seed), "--data", data,
               "--reference-rows", rows_file, "--noise-draws", str(draws)]
    start, cpu = time.perf_counter(), children_cpu_seconds()
    finished = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall, used = time.perf_counter() - start, children_cpu_seconds() - cpu
    if finished.returncode != 0:
        lines = (finished.stderr or finished.stdout).strip().splitlines()
        return {"side": "privfed", "setting": key, "seed": seed, "model_seed": model_seed,
                "failed": lines[-1] if lines else f"exit status {finished.returncode}", "seconds": wall,
                "cpu_seconds": used}
    record = json.loads(finished.stdout.strip().splitlines()[-1])
    return {**record, "process_seconds": wall, "cpu_seconds": used}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    shared = Path(__file__).resolve().parents[2] / "shared"
    parser.add_argument("--official-code", help="a checkout of QinbinLi/FedKT at commit 0bb9a89")
    parser.add_argument("--data", default=str(shared / "datasets"))
    parser.add_argument("--reference-rows", default=str(shared / "peer_splits" / "fedkt_reference_splits.json.gz"))
    parser.add_argument("--settings", nargs="+", default=list(OFFICIAL_FLAGS), choices=list(OFFICIAL_FLAGS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--model-seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--sides", nargs="+", default=["official", "privfed"], choices=["official", "privfed"])
    parser.add_argument("--noise-draws", type=int, default=20, help="simulated noise draws per L1 refit (0: none)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per run")
    parser.add_argument("--json", help="records, written after every run; resumable")
    parser.add_argument("--one-run", nargs=3, metavar=("SETTING", "SEED", "MODEL_SEED"),
                        help="internal: one privfed run in this process, its record as JSON on stdout")
    args = parser.parse_args()
    if args.one_run:
        key, seed, model_seed = args.one_run
        record = run_privfed(key, Path(args.data), Path(args.reference_rows), int(seed), int(model_seed),
                             args.noise_draws)
        print(json.dumps(record), flush=True)
        return
    if not args.official_code or not args.json:
        parser.error("--official-code and --json are required")
    code = Path(args.official_code)
    if not (code / "experiments.py").is_file():
        parser.exit(2, f"--official-code: {code} has no experiments.py (a checkout of QinbinLi/FedKT @ 0bb9a89)\n")
    commit = subprocess.run(["git", "-C", str(code), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=False).stdout.strip()
    path = Path(args.json)
    patch = {"file": str(PATCH.relative_to(PATCH.parents[1])),
             "sha256": hashlib.sha256(PATCH.read_bytes()).hexdigest()}
    run = provenance.start(command="python " + " ".join(sys.argv), seeds=args.seeds,
                           settings={**vars(args), "official_commit": commit, "official_patch": patch})
    document: dict[str, Any] = {"command": "python " + " ".join(sys.argv), "official_commit": commit,
                                "official_patch": patch, "records": []}
    if path.is_file():
        document = json.loads(path.read_text(encoding="utf-8"))
    provenance.earlier_records(document["records"])
    done = {(r["side"], r["setting"], r["seed"], r["model_seed"]) for r in document["records"]}
    with tempfile.TemporaryDirectory(prefix="fedkt-libsvm-") as scratch:
        official = official_copy(code, Path(scratch))
        names = dict.fromkeys(bench_fedkt.SETTINGS[key].data for key in args.settings)
        train = {}
        for name in names:
            write_libsvm(Path(scratch), Path(args.data), name)
            data = load_dataset(name, args.data)
            # the code's coding: row 0's label is class 1
            train[name] = (data.X_train, (data.y_train == data.y_train[0]).astype(np.int64))
        for key in args.settings:
            name = bench_fedkt.SETTINGS[key].data
            parties = int(OFFICIAL_FLAGS[key][1])
            for seed in args.seeds:
                rows = load_reference_rows(args.reference_rows, dataset=name, n_parties=parties, seed=seed)
                for model_seed in args.model_seeds:
                    for side in args.sides:
                        if (side, key, seed, model_seed) in done:
                            continue
                        if side == "official":
                            record = run_official(official, Path(scratch), key, seed, model_seed, train[name][1],
                                                  train[name][0], rows, args.timeout, args.noise_draws)
                        else:
                            record = run_privfed_process(key, args.data, args.reference_rows, seed, model_seed,
                                                         args.noise_draws, args.timeout)
                        record["load_after"] = list(os.getloadavg())
                        document["records"].append(record)
                        provenance.stamp_records(document["records"], run)
                        if document.get("provenance", run)["started"] == run["started"]:
                            document["provenance"] = provenance.finish(run)
                        else:  # a resumed run: the first run's record stays, this one is added
                            resumed = document.setdefault("resumed", [])
                            resumed[:] = [r for r in resumed if r["started"] != run["started"]] + [
                                provenance.finish(run)]
                        document["provenance"]["seeds"] = sorted({r["seed"] for r in document["records"]})
                        provenance.write_json(path, document)
                        shown = {k: v for k, v in record.items() if k not in ("command", "refit", "server_votes")}
                        print(shown, flush=True)


if __name__ == "__main__":
    main()
