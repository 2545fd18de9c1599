"""FedKT-L0 on Adult exactly as the official code's random streams run it, with either class coding.

A measurement tool for docs/results.md (*Adult seed 0*), not part of privfed: it runs FedKT-L0 (s = 2,
t = 5, depth-6 trees, 100-tree depth-6 forests, consistent voting, numpy argmax) on the official rows
(``../shared/peer_splits/``), drawing from numpy's global generator in the official code's order
(``np.random.seed(model_seed)``, then per party and partition one shuffle of the party's rows split into
``t`` equal shares), so that ``--codings official`` reproduces the official code's accuracy for
``--init_seed SEED --fedkt_seed MODEL_SEED`` to the last digit (checked: 82.142 % for seed 0 / 0, and the
other four ``--fedkt_seed`` values of ``bench/results/fedkt_official_code_adult_l0_spread.json``).

``--codings privfed`` changes one thing: which file label gets class code 0. The official code codes
row 0's label (≤50K) as 1, privfed codes the sorted labels (≤50K as 0). The code decides two tie rules:
a decision-tree leaf with equal class counts predicts the lowest code (scikit-learn), and numpy's argmax
gives a tied server vote the lowest code. ``--server-ties random`` breaks tied server votes at random, as
privfed does (from a generator of its own, so numpy's global stream is unchanged), which separates the two
rules. Each record also says how often the minority class (>50K) is true, voted and predicted.

Usage::

    python bench/fedkt_official_l0_replica.py --seeds 0 1 2 --model-seeds 0 1 2 3 4 \\
        --json bench/results/fedkt_official_l0_replica_adult.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from sklearn.ensemble import RandomForestClassifier
from sklearn.tree import DecisionTreeClassifier

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from privfed.pipelines import load_dataset  # noqa: E402
from privfed.pipelines.reference_rows import load_reference_rows  # noqa: E402

N_PARTITIONS, N_TEACHERS, DEPTH, TREES = 2, 5, 6, 100


def forest() -> RandomForestClassifier:
    return RandomForestClassifier(max_depth=DEPTH, n_estimators=TREES)


def run(X: np.ndarray, y_privfed: np.ndarray, rows, model_seed: int, coding: str, server_ties: str) -> dict:
    """One run; ``y_privfed`` holds privfed's codes, recoded as the official code does (row 0's label is 1)."""
    y = (y_privfed == y_privfed[0]).astype(np.int64) if coding == "official" else y_privfed
    X_public, y_public = X[rows.public_rows], y[rows.public_rows]
    np.random.seed(model_seed)
    students = []
    for party in rows.party_rows:
        for _ in range(N_PARTITIONS):
            shuffled = np.array(party)
            np.random.shuffle(shuffled)
            votes = np.zeros((len(X_public), 2), dtype=np.int64)
            for share in np.array_split(shuffled, N_TEACHERS):
                teacher = DecisionTreeClassifier(max_depth=DEPTH).fit(X[share], y[share])
                votes[np.arange(len(X_public)), teacher.predict(X_public).astype(np.int64)] += 1
            students.append(forest().fit(X_public, np.argmax(votes, axis=1)))
    server_votes = np.zeros((len(X_public), 2), dtype=np.int64)
    for first, second in zip(students[::2], students[1::2]):
        a, b = first.predict(X_public).astype(np.int64), second.predict(X_public).astype(np.int64)
        agree = np.flatnonzero(a == b)
        server_votes[agree, a[agree]] += N_PARTITIONS
    if server_ties == "random":  # integer counts: a jitter in [0, 1/2) reorders tied maxima only
        voted = np.argmax(server_votes + 0.5 * np.random.default_rng(model_seed).random(server_votes.shape), axis=1)
    else:
        voted = np.argmax(server_votes, axis=1)
    final = forest().fit(X_public, voted)
    predicted = final.predict(X[rows.test_rows])
    y_test = y[rows.test_rows]
    minority = 1 - int(np.bincount(y).argmax())
    return {
        "seed": int(rows.key.rsplit("=", 1)[1]), "model_seed": model_seed, "coding": coding, "server_ties": server_ties,
        "accuracy": 100 * float(np.mean(predicted == y_test)),
        "server_label_accuracy": 100 * float(np.mean(voted == y_public)),
        "tied_server_votes": int((server_votes[:, 0] == server_votes[:, 1]).sum()),
        "minority_share_public_true": 100 * float(np.mean(y_public == minority)),
        "minority_share_voted": 100 * float(np.mean(voted == minority)),
        "minority_share_test_true": 100 * float(np.mean(y_test == minority)),
        "minority_share_test_predicted": 100 * float(np.mean(predicted == minority)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    shared = Path(__file__).resolve().parents[2] / "shared"
    parser.add_argument("--data", default=str(shared / "datasets"))
    parser.add_argument("--reference-rows", default=str(shared / "peer_splits" / "fedkt_reference_splits.json.gz"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--model-seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--codings", nargs="+", default=["official", "privfed"], choices=("official", "privfed"))
    parser.add_argument("--server-ties", default="argmax", choices=("argmax", "random"),
                        help="a tied server vote goes to the lowest code (the official code) or at random (privfed)")
    parser.add_argument("--json", required=True, help="records, written after every run")
    args = parser.parse_args()
    data = load_dataset("adult_a9a", args.data)
    X = data.X_train.astype(np.float64)
    document = {"command": "python " + " ".join(sys.argv), "records": []}
    for seed in args.seeds:
        rows = load_reference_rows(args.reference_rows, dataset="adult_a9a", n_parties=50, seed=seed)
        for coding in args.codings:
            for model_seed in args.model_seeds:
                document["records"].append(run(X, data.y_train, rows, model_seed, coding, args.server_ties))
                print(json.dumps(document["records"][-1]), flush=True)
                Path(args.json).write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
