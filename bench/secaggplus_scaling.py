"""SecAgg+ from 5 to 200 parties: FedKT-L1 over the Flower apps on an in-process grid, side by side in one run.

Three sides, alternating within each party count, each a full ``run_server`` over the real ServerApp and ClientApps
(:class:`bench.secure_aggregation.CountingGrid`: every message a copy, every reply's payload counted):

* ``plain``: central Laplace noise (the parties send their students' predictions; no secure aggregation);
* ``window``: distributed Skellam over SecAgg+ with the logarithmic window privfed uses
  (:func:`privfed.federation.secaggplus_neighbourhood.secaggplus_neighbourhood`, default ``collusion``);
* ``everyone``: the same with every party sharing with every other (``num_shares=1.0``, threshold n − 1: what
  privfed ran before), up to ``--everyone-up-to`` parties (it grows as n²).

Each party holds ``--rows`` Adult rows (so the plain run grows linearly in n); CPU seconds of this process (the
apps all run in it) and bytes sent per party (median). Ratios are to the plain run of the same repeat. Beside each
party count, the CPU that Flower's own cryptography costs one party with that window (:func:`crypto_floor`): what
SecAgg+ adds per party whatever privfed does around it.

Usage::

    python bench/secaggplus_scaling.py --json bench/results/secaggplus_scaling.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import privfed.federation.secure_aggregation as secure_aggregation  # noqa: E402
from bench import provenance  # noqa: E402
from bench.secure_aggregation import calibrate, estimators, wire_bytes  # noqa: E402
from privfed.federation.secaggplus_neighbourhood import Neighbourhood, secaggplus_neighbourhood  # noqa: E402


def everyone(n_nodes: int, *, colluders: int) -> Neighbourhood:
    """Every party shares with every other, n − 1 shares rebuild a secret (privfed's setting before)."""
    return Neighbourhood(nodes=n_nodes, shares=n_nodes, threshold=max(2, n_nodes - 1), colluders=max(0, n_nodes - 2))


def parties_of(path: Path, n_parties: int, rows: int, n_public: int, seed: int):
    data = np.load(path)
    X, y = data["X"].astype(float), data["y"]
    order = np.random.default_rng(seed).permutation(len(y))
    X, y = X[order], y[order]
    parties = [(X[i * rows:(i + 1) * rows], y[i * rows:(i + 1) * rows]) for i in range(n_parties)]
    return parties, X[n_parties * rows: n_parties * rows + n_public], np.unique(y)


def run_side(side: str, cal: dict, paths: list[str], public: np.ndarray, classes: np.ndarray, queries: int,
             seed: int) -> dict:
    models = estimators(cal, s=2, t=5, query_fraction=queries / len(public), seed=seed, classes=classes)
    model = models["central-laplace" if side == "plain" else "distributed-skellam"]
    secure_aggregation.secaggplus_neighbourhood = everyone if side == "everyone" else secaggplus_neighbourhood
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        sent = wire_bytes(model, paths, public)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        secure_aggregation.secaggplus_neighbourhood = secaggplus_neighbourhood
    return {"cpu_seconds": cpu, "wall_seconds": wall, "bytes_per_party": float(np.median(sent))}


def crypto_floor(shares: int, threshold: int, values: int, repeats: int = 3) -> dict:
    """CPU seconds of the cryptography SecAgg+ does for one party with a window of ``shares`` (Flower's own
    primitives, as ``secaggplus_mod`` and the workflow call them): two key pairs; two Shamir splits into ``shares``;
    per neighbour two key agreements (bytes → key objects included), one encryption and one decryption, one mask of
    ``values`` entries; the server's reconstruction of the party's mask seed from its window's ``shares`` shares.
    Best of ``repeats``."""
    import os as _os

    from flwr.common.secure_aggregation.crypto.shamir import combine_shares, create_shares
    from flwr.common.secure_aggregation.crypto.symmetric_encryption import decrypt, encrypt, generate_shared_key
    from flwr.common.secure_aggregation.secaggplus_utils import pseudo_rand_gen
    from flwr.supercore.primitives.asymmetric import (
        bytes_to_private_key,
        bytes_to_public_key,
        generate_key_pairs,
        private_key_to_bytes,
        public_key_to_bytes,
    )

    neighbours = shares - 1
    peer_secret, peer_public = generate_key_pairs()
    peer = public_key_to_bytes(peer_public)
    stages = {"key_pairs": 0.0, "shamir_split": 0.0, "key_agreements": 0.0, "encrypt_decrypt": 0.0, "masks": 0.0,
              "server_reconstruction": 0.0}
    best = dict.fromkeys(stages, float("inf"))
    for _ in range(repeats):
        start = time.process_time()
        pairs = [generate_key_pairs() for _ in range(2)]
        secret = private_key_to_bytes(pairs[0][0])
        stages["key_pairs"] = time.process_time() - start
        start = time.process_time()
        split = [create_shares(secret, threshold, shares), create_shares(_os.urandom(32), threshold, shares)]
        stages["shamir_split"] = time.process_time() - start
        start = time.process_time()
        keys = [generate_shared_key(bytes_to_private_key(secret), bytes_to_public_key(peer))
                for _ in range(2 * neighbours)]
        stages["key_agreements"] = time.process_time() - start
        start = time.process_time()
        for key in keys[:neighbours]:
            decrypt(key, encrypt(key, split[0][0] + split[1][0]))
        stages["encrypt_decrypt"] = time.process_time() - start
        start = time.process_time()
        for key in keys[: neighbours + 1]:
            pseudo_rand_gen(key, 2**32, [(values,)])
        stages["masks"] = time.process_time() - start
        start = time.process_time()
        combine_shares(split[1])  # a surviving party's mask seed, from every share its window returns
        stages["server_reconstruction"] = time.process_time() - start
        best = {name: min(best[name], seconds) for name, seconds in stages.items()}
    del peer_secret
    return {**best, "total": sum(best.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data",
                        default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets" / "adult.npz"))
    parser.add_argument("--parties", type=int, nargs="+", default=[5, 10, 20, 50, 100, 200])
    parser.add_argument("--everyone-up-to", type=int, default=50)
    parser.add_argument("--rows", type=int, default=100, help="Adult rows per party")
    parser.add_argument("--public", type=int, default=500)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    run = provenance.start(command="python " + " ".join(sys.argv), seeds=[args.seed], settings=vars(args))
    cal = calibrate(8.0, queries=args.queries, s=2)
    rows = []
    for n in args.parties:
        parties, public, classes = parties_of(Path(args.data), n, args.rows, args.public, args.seed)
        sides = ["plain", "window"] + (["everyone"] if n <= args.everyone_up_to else [])
        window = secaggplus_neighbourhood(n, colluders=n - 1)
        row = {"parties": n, "num_shares": window.shares, "threshold": window.threshold,
               "dropouts": window.dropouts, "colluders": window.colluders, "sides": {side: [] for side in sides}}
        with tempfile.TemporaryDirectory() as folder:
            paths = []
            for i, (X, y) in enumerate(parties):
                paths.append(str(Path(folder) / f"site-{i}.npz"))
                np.savez(paths[-1], X=X, y=y)
            for _ in range(args.repeats):
                for side in sides:
                    row["sides"][side].append(run_side(side, cal, paths, public, classes, args.queries, args.seed))
        plain = [r["cpu_seconds"] for r in row["sides"]["plain"]]
        for side in sides:
            row[f"{side}_cpu_median"] = float(np.median([r["cpu_seconds"] for r in row["sides"][side]]))
            row[f"{side}_over_plain"] = [r["cpu_seconds"] / p for r, p in zip(row["sides"][side], plain)]
            row[f"{side}_bytes_per_party"] = row["sides"][side][0]["bytes_per_party"]
        row["crypto_floor_per_party"] = crypto_floor(window.shares, window.threshold, args.queries * len(classes))
        if "everyone" in sides:
            row["crypto_floor_per_party_everyone"] = crypto_floor(n, max(2, n - 1), args.queries * len(classes))
        summary = {side: f"{row[f'{side}_cpu_median']:.2f} s ×{np.median(row[f'{side}_over_plain']):.2f} "
                         f"{row[f'{side}_bytes_per_party']:.0f} B" for side in sides}
        print(n, f"floor per party {1e3 * row['crypto_floor_per_party']['total']:.1f} ms", summary, flush=True)
        rows.append(row)
    document = {"rows": rows, "provenance": provenance.finish(run)}
    if args.json:
        provenance.write_json(args.json, document)


if __name__ == "__main__":
    main()
