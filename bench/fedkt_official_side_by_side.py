"""FedKT-L1 and -L2 on Adult: the official FedKT code and privfed, side by side in one run, on the same rows.

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

The official code runs unmodified: its image-only imports (torchvision, pydicom), which the tabular runs never
use, are replaced by empty stand-in modules in the subprocess, and the data are the LIBSVM files rebuilt from
``../shared/datasets`` (labels −1/+1, 1-based features), as ``bench/results/fedkt_official_code_adult_l0_spread.json``
records for the L0 runs. A run of the official code that raises (e.g. a party with fewer rows than teachers)
is recorded as failed, with the last line of its error.

Usage::

    git clone https://github.com/QinbinLi/FedKT /tmp/FedKT && git -C /tmp/FedKT checkout 0bb9a89
    python bench/fedkt_official_side_by_side.py --official-code /tmp/FedKT --settings adult-l1 adult-l2 \\
        --seeds 0 1 2 3 4 --json bench/results/fedkt_official_side_by_side_l1_l2.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
from privfed.pipelines.data.reference_rows import load_reference_rows  # noqa: E402

from bench import provenance  # noqa: E402

#: The official code's flags per setting (../shared/paper_tables/fedkt_official_runs.md).
COMMON = ["--alg", "fedkt", "--model", "tree", "--max_tree_depth", "6", "--n_stu_trees", "100",
          "--n_final_stu_trees", "100", "--partition", "hetero-dir", "--beta", "0.5", "--device", "cpu"]
OFFICIAL_FLAGS = {
    "adult-l1": ["--n_parties", "50", "--n_partition", "1", "--n_teacher_each_partition", "5", "--dp_level", "1",
                 "--gamma", "0.04", "--query_portion", "0.01", "--local_query_portion", "0.5"],
    "adult-l2": ["--n_parties", "20", "--n_partition", "1", "--n_teacher_each_partition", "25", "--dp_level", "2",
                 "--gamma", "0.04", "--query_portion", "0.5", "--local_query_portion", "0.01"],
}

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


def write_libsvm(folder: Path, data_folder: Path) -> None:
    """Adult's training file as the LIBSVM file ``a9a`` the official code reads (original row order)."""
    from sklearn.datasets import dump_svmlight_file

    data = load_dataset("adult_a9a", data_folder)
    dump_svmlight_file(data.X_train.astype(np.float64), np.where(data.y_train == 1, 1, -1), str(folder / "a9a"),
                       zero_based=False)


def vote_accuracy(votes: np.ndarray, truth: np.ndarray) -> float:
    """Accuracy of the argmax of vote histograms (ties to the lowest code, as numpy does)."""
    return 100 * float(np.mean(np.argmax(votes, axis=1) == truth))


def run_official(code: Path, data: Path, key: str, seed: int, model_seed: int, y_official: np.ndarray,
                 rows, timeout: int) -> dict[str, Any]:
    """One process of the official code; accuracy and vote accuracies from its log and vote files."""
    with tempfile.TemporaryDirectory(prefix="fedkt-official-") as logs:
        command = [sys.executable, "-c", LAUNCHER, "--dataset", "a9a", "--datadir", str(data) + "/", "--logdir", logs,
                   "--log_file_name", "run", "--privacy_analysis_file_name", "votes", *COMMON, *OFFICIAL_FLAGS[key],
                   "--init_seed", str(seed), "--fedkt_seed", str(model_seed)]
        start = time.perf_counter()
        finished = subprocess.run(command, cwd=code, capture_output=True, text=True, timeout=timeout, check=False,
                                  env={**os.environ, "OMP_NUM_THREADS": "1"})
        seconds = time.perf_counter() - start
        record: dict[str, Any] = {"side": "official", "setting": key, "seed": seed, "model_seed": model_seed,
                                  "command": "python experiments.py " + " ".join(command[3:]), "seconds": seconds}
        log = (Path(logs) / "run.log").read_text(encoding="utf-8") if (Path(logs) / "run.log").is_file() else ""
        accuracy = re.findall(r"global test acc ([0-9.]+)", log)
        if finished.returncode != 0 or not accuracy:
            lines = (finished.stderr or finished.stdout).strip().splitlines()
            return {**record, "failed": lines[-1] if lines else f"exit status {finished.returncode}"}
        labelling = [100 * float(value) for value in re.findall(r"Labeling acc ([0-9.]+)", log)]
        record["accuracy"] = 100 * float(accuracy[-1])
        public = y_official[rows.public_rows]
        if key == "adult-l1":  # the server's noisy labels; its vote file holds the noiseless counts
            votes = np.load(Path(logs) / "votes-0-dp0.npz")["arr_2"]
            record["noiseless_vote_accuracy"] = vote_accuracy(votes, public[: len(votes)])
            record["noisy_label_accuracy"] = labelling[-1]
        else:  # each party's noisy labels (its 25 teachers' counts are in the -dp1 file, party after party)
            votes = np.load(Path(logs) / "votes-0-dp1.npz")["arr_2"].reshape(len(rows.party_rows), -1, 2)
            record["noiseless_vote_accuracy"] = float(np.mean(
                [vote_accuracy(party, public[: party.shape[0]]) for party in votes]))
            record["noisy_label_accuracy"] = float(np.mean(labelling[:-1]))
        return record


def run_privfed(key: str, folder: Path, rows_file: Path, seed: int, model_seed: int) -> dict[str, Any]:
    """privfed's FedKT on the same rows (bench/fedkt.py's reference-code run) and its noiseless vote accuracy."""
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
    if key == "adult-l1":
        queries = split.X_public[: model.n_queries_answered_]
        votes = np.zeros((len(queries), len(model.classes_)), dtype=np.int64)
        for party in model.students_:
            votes[np.arange(len(queries)), party[0].predict(queries).astype(np.int64)] += 1
        record["noiseless_vote_accuracy"] = vote_accuracy(votes, codes[: len(queries)])
    else:
        record["noiseless_vote_accuracy"] = float(np.mean(
            [vote_accuracy(party[0], codes[: party.shape[1]]) for party in model.party_votes_]))
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    shared = Path(__file__).resolve().parents[2] / "shared"
    parser.add_argument("--official-code", required=True, help="a checkout of QinbinLi/FedKT at commit 0bb9a89")
    parser.add_argument("--data", default=str(shared / "datasets"))
    parser.add_argument("--reference-rows", default=str(shared / "peer_splits" / "fedkt_reference_splits.json.gz"))
    parser.add_argument("--settings", nargs="+", default=list(OFFICIAL_FLAGS), choices=list(OFFICIAL_FLAGS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--model-seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--timeout", type=int, default=900, help="seconds per official run")
    parser.add_argument("--json", required=True, help="records, written after every run; resumable")
    args = parser.parse_args()
    code = Path(args.official_code)
    if not (code / "experiments.py").is_file():
        parser.exit(2, f"--official-code: {code} has no experiments.py (a checkout of QinbinLi/FedKT @ 0bb9a89)\n")
    commit = subprocess.run(["git", "-C", str(code), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=False).stdout.strip()
    path = Path(args.json)
    run = provenance.start(command="python " + " ".join(sys.argv), seeds=args.seeds,
                           settings={**vars(args), "official_commit": commit})
    document: dict[str, Any] = {"command": "python " + " ".join(sys.argv), "official_commit": commit, "records": []}
    if path.is_file():
        document = json.loads(path.read_text(encoding="utf-8"))
    provenance.earlier_records(document["records"])
    done = {(r["side"], r["setting"], r["seed"], r["model_seed"]) for r in document["records"]}
    data = load_dataset("adult_a9a", args.data)
    y_official = (data.y_train == data.y_train[0]).astype(np.int64)  # the code's coding: row 0's label is 1
    with tempfile.TemporaryDirectory(prefix="fedkt-libsvm-") as libsvm:
        write_libsvm(Path(libsvm), Path(args.data))
        for key in args.settings:
            parties = int(OFFICIAL_FLAGS[key][1])
            for seed in args.seeds:
                rows = load_reference_rows(args.reference_rows, dataset="adult_a9a", n_parties=parties, seed=seed)
                for model_seed in args.model_seeds:
                    for side in ("official", "privfed"):
                        if (side, key, seed, model_seed) in done:
                            continue
                        record = (run_official(code, Path(libsvm), key, seed, model_seed, y_official, rows,
                                               args.timeout) if side == "official" else
                                  run_privfed(key, Path(args.data), Path(args.reference_rows), seed, model_seed))
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
                        print({k: v for k, v in record.items() if k != "command"}, flush=True)


if __name__ == "__main__":
    main()
