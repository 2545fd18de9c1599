"""FedKT-L1: central noise against distributed Skellam noise under secure aggregation, side by side in one run.

For Adult and cod-rna (``../shared/datasets/*.npz``; a small split so that each run takes minutes):

1. **Accuracy at equal public ε.** Distributed Skellam (``aggregator="skellam", secure_aggregation=True``,
   σ chosen for the target party-level ε) against central Laplace (γ) and central Gaussian (σ) calibrated to
   the same *data-independent* party-level ε at δ (the ledgers may report a smaller data-dependent ε for the
   central ones; both are recorded). Coordinator ε: what the server learns — under central noise it receives
   the students' un-noised predictions (ε = ∞), under secure aggregation only the noisy sum.
2. **Flower run time**: ``privfed.federation.simulate`` with SecAgg+ against without (central Laplace), same
   parties, same machine, alternating.
3. **Bytes per party**: the payload each party sends, in process (``bandwidth_``) and over the apps on an
   in-process grid that counts every reply's arrays and config values (SecAgg+'s keys, shares and masked
   vector included).

Usage::

    python bench/secure_aggregation.py --flower-rounds 3 --json bench/results/secure_aggregation.json
    python -m bench.tables secure-aggregation    # the docs' tables, from bench/results/secure_aggregation.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from privfed.pipelines import dirichlet_partition  # noqa: E402
from sklearn.tree import DecisionTreeClassifier  # noqa: E402

import privfed  # noqa: E402
from bench import provenance  # noqa: E402

DELTA = 1e-5


def split(path: Path, *, n_parties: int, n_train: int, n_public: int, n_test: int, seed: int):
    data = np.load(path)
    X, y, X_test, y_test = data["X"].astype(float), data["y"], data["X_test"].astype(float), data["y_test"]
    order = np.random.default_rng(seed).permutation(len(y))
    X, y = X[order], y[order]
    parts = dirichlet_partition(y[:n_train], n_parties, 0.5, min_size=20, random_state=seed)
    parties = [(X[idx], y[idx]) for idx in parts]
    public = X[n_train: n_train + n_public]
    test = np.random.default_rng(seed + 1).permutation(len(y_test))[:n_test]
    return parties, public, (X_test[test], y_test[test])


def _bisect(epsilon_of, target: float, low: float, high: float, *, increasing: bool) -> float:
    """The parameter in [low, high] whose ε is at most ``target`` and closest to it (geometric bisection)."""
    for _ in range(40):
        middle = math.sqrt(low * high)
        over = epsilon_of(middle) > target
        if over == increasing:
            high = middle
        else:
            low = middle
        if high / low < 1.001:
            break
    return low if increasing else high


def calibrate(target: float, *, queries: int, s: int) -> dict:
    """σ (Skellam), γ (Laplace) and σ (Gaussian) giving party-level data-independent ε ≤ target at DELTA."""
    votes = np.zeros((queries, 2), dtype=np.int64)
    votes[:, 0] = 1

    def skellam(sigma):
        mechanism = privfed.SkellamMechanism(sigma**2, l1_sensitivity=2.0 * s, l2_sensitivity=math.sqrt(2) * s,
                                             count=queries, coordinate_sensitivity=s, moved_coordinates=2,
                                             unit="party")
        return privfed.account(mechanism, delta=DELTA).epsilon

    def laplace(gamma):
        return privfed.account(privfed.LaplaceNoisyMax(votes, gamma, s, unit="party"),
                               delta=DELTA).epsilon_data_independent

    def gaussian(sigma):
        return privfed.account(privfed.GaussianNoisyMax(votes, sigma, s, unit="party"),
                               delta=DELTA).epsilon_data_independent

    sigma = _bisect(skellam, target, 0.5, 500.0, increasing=False)
    gamma = _bisect(laplace, target, 1e-4, 10.0, increasing=True)
    sigma_gauss = _bisect(gaussian, target, 0.5, 500.0, increasing=False)
    return {"skellam_sigma": sigma, "skellam_epsilon": skellam(sigma), "laplace_gamma": gamma,
            "laplace_epsilon_data_independent": laplace(gamma), "gaussian_sigma": sigma_gauss,
            "gaussian_epsilon_data_independent": gaussian(sigma_gauss)}


def coordinator_epsilon(model) -> float:
    """The coordinator's party-level ε, as the ledger states it (∞ where it receives anything un-noised)."""
    return model.ledger_.account(DELTA, unit="party", observer="coordinator").epsilon


def estimators(cal: dict, *, s: int, t: int, query_fraction: float, seed: int, classes: np.ndarray) -> dict:
    # The label set is public (the data set's), so the parties withhold their sizes and labels from the coordinator.
    common = dict(n_partitions=s, n_teachers=t, privacy="L1", query_fraction=query_fraction, random_state=seed,
                  classes=classes)
    tree = DecisionTreeClassifier(max_depth=6)
    return {
        "central-laplace": privfed.FedKT(tree, gamma=cal["laplace_gamma"], **common),
        "central-gaussian": privfed.FedKT(tree, aggregator="gaussian", sigma=cal["gaussian_sigma"], **common),
        "distributed-skellam": privfed.FedKT(tree, aggregator="skellam", secure_aggregation=True,
                                             sigma=cal["skellam_sigma"], **common),
    }


class CountingGrid:
    """An in-process Flower Grid: each message (a copy, as a real grid serialises it) goes to the real ClientApp
    with its node's Context; the payload bytes of every reply are added to its node's count."""

    def __init__(self, paths):
        from flwr.app import Context, RecordDict

        from privfed.federation.client_app import make_client_app

        self.client = make_client_app()
        self.contexts = {10 + i: Context(0, 10 + i, {"data-path": str(p), "party-index": i}, RecordDict(), {})
                         for i, p in enumerate(paths)}
        self.bytes = {node: 0 for node in self.contexts}

    def get_node_ids(self):
        return list(self.contexts)

    @staticmethod
    def payload(content) -> int:
        size = 0
        for record in content.array_records.values():
            size += sum(len(array.data) for array in record.values())
        for record in content.config_records.values():
            for value in record.values():
                values = value if isinstance(value, list) else [value]
                size += sum(len(v) if isinstance(v, (bytes, str)) else 8 for v in values)
        return size

    def send_and_receive(self, messages, *, timeout=None):
        import copy

        replies = []
        for message in messages:
            node = message.metadata.dst_node_id
            reply = self.client(copy.deepcopy(message), self.contexts[node])
            self.bytes[node] += self.payload(reply.content)
            replies.append(reply)
        return replies


def wire_bytes(model, paths, public) -> list[int]:
    from flwr.supercore.task_identity import TaskIdentity

    from privfed.federation.server_app import ServerJob, run_server

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    grid = CountingGrid(paths)
    run_server(grid, ServerJob(model, public, num_supernodes=len(paths), timeout=60))
    return [grid.bytes[node] for node in sorted(grid.bytes)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parents[2] / "shared" / "datasets"
    parser.add_argument("--data", default=str(root))
    parser.add_argument("--datasets", default="adult,cod_rna")
    parser.add_argument("--parties", type=int, default=50)
    parser.add_argument("--train", type=int, default=20000)
    parser.add_argument("--public", type=int, default=1000)
    parser.add_argument("--test", type=int, default=10000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--target-epsilon", type=float, default=8.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--flower-parties", type=int, default=5, help="SuperNodes of the Flower timing")
    parser.add_argument("--flower-rounds", type=int, default=2, help="alternating Flower runs per side")
    parser.add_argument("--skip-flower", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    run = provenance.start(command="python " + " ".join(sys.argv), seeds=args.seeds, settings=vars(args))
    s, t = 2, 5
    cal = calibrate(args.target_epsilon, queries=args.queries, s=s)
    print("calibration", json.dumps(cal))
    document = {"command": "python " + " ".join(sys.argv), "machine": platform.platform(),
                "cpus": os.cpu_count(), "delta": DELTA, "s": s, "t": t, "calibration": cal, "datasets": {}}
    for name in [n.strip() for n in args.datasets.split(",") if n.strip()]:
        per_side = {}
        for seed in args.seeds:
            parties, public, (X_test, y_test) = split(Path(args.data) / f"{name}.npz", n_parties=args.parties,
                                                      n_train=args.train, n_public=args.public, n_test=args.test,
                                                      seed=seed)
            classes = np.unique(np.concatenate([y for _, y in parties] + [y_test]))
            for side, model in estimators(cal, s=s, t=t, query_fraction=args.queries / args.public, seed=seed,
                                          classes=classes).items():
                started = time.perf_counter()
                model.fit(parties, public)
                seconds = time.perf_counter() - started
                coordinator = coordinator_epsilon(model)
                record = per_side.setdefault(side, {"accuracy": [], "public_epsilon": [],
                                                    "public_epsilon_data_independent": [], "coordinator_epsilon": [],
                                                    "fit_seconds": [], "bytes_per_party": []})
                report = model.ledger_.account(DELTA, unit="party")
                record["accuracy"].append(float(model.score(X_test, y_test)))
                record["public_epsilon"].append(report.epsilon)
                record["public_epsilon_data_independent"].append(report.epsilon_data_independent)
                record["coordinator_epsilon"].append(coordinator)
                record["fit_seconds"].append(seconds)
                record["bytes_per_party"].append(float(np.median([sum(v[i] for v in model.bandwidth_.values())
                                                                  for i in range(len(parties))])))
                print(name, seed, side, f"acc {record['accuracy'][-1]:.4f} ε {report.epsilon:.4f} "
                      f"coordinator {coordinator} {seconds:.1f} s", flush=True)
        for record in per_side.values():
            record["accuracy_mean"] = float(np.mean(record["accuracy"]))
            record["accuracy_std"] = float(np.std(record["accuracy"], ddof=1))
        document["datasets"][name] = per_side
    if not args.skip_flower:
        document["flower"] = flower(args, cal, s, t)
    document["provenance"] = provenance.finish(run)
    text = json.dumps(document, indent=1, default=lambda v: None if isinstance(v, float) and math.isinf(v) else v)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(document, indent=1, allow_nan=True) + "\n", encoding="utf-8")


def flower(args, cal: dict, s: int, t: int) -> dict:
    """Simulation wall time with SecAgg+ against without (central Laplace), alternating; bytes on the wire."""
    import tempfile

    from privfed.federation import simulate

    name = [n.strip() for n in args.datasets.split(",") if n.strip()][0]
    parties, public, (X_test, y_test) = split(Path(args.data) / f"{name}.npz", n_parties=args.flower_parties,
                                              n_train=args.train // 4, n_public=args.public, n_test=args.test, seed=0)
    classes = np.unique(np.concatenate([y for _, y in parties] + [y_test]))

    def estimator(side: str):
        return estimators(cal, s=s, t=t, query_fraction=args.queries / args.public, seed=0, classes=classes)[side]

    result = {"dataset": name, "parties": args.flower_parties, "train_rows": args.train // 4,
              "without_secaggplus_seconds": [], "with_secaggplus_seconds": []}
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for i, (X, y) in enumerate(parties):
            paths.append(str(Path(folder) / f"site-{i}.npz"))
            np.savez(paths[-1], X=X, y=y)
        for _ in range(args.flower_rounds):
            for side, key in (("central-laplace", "without_secaggplus_seconds"),
                              ("distributed-skellam", "with_secaggplus_seconds")):
                model = estimator(side)
                started = time.perf_counter()
                fitted = simulate(model, paths, public, timeout=300)
                result[key].append(time.perf_counter() - started)
                local = estimator(side).fit(parties, public)
                result.setdefault(f"{side}_same_predictions_as_fit", []).append(
                    bool(np.array_equal(fitted.predict(X_test), local.predict(X_test))))
                print(side, f"{result[key][-1]:.1f} s", flush=True)
        for _ in range(args.flower_rounds):  # the apps over an in-process grid: the protocol without Ray's start
            for side in ("central-laplace", "distributed-skellam"):
                model = estimator(side)
                started = time.perf_counter()
                result[f"{side}_wire_bytes_per_party"] = wire_bytes(model, paths, public)
                result.setdefault(f"{side}_in_process_grid_seconds", []).append(time.perf_counter() - started)
    result["ratio_with_over_without"] = (float(np.median(result["with_secaggplus_seconds"]))
                                         / float(np.median(result["without_secaggplus_seconds"])))
    result["in_process_grid_ratio_with_over_without"] = (
        float(np.median(result["distributed-skellam_in_process_grid_seconds"]))
        / float(np.median(result["central-laplace_in_process_grid_seconds"])))
    return result


if __name__ == "__main__":
    main()
