"""Time loading and verifying a FedKT bundle (issue 18's performance bar).

Builds a FedKT-L1 bundle on scikit-learn's digits (10 parties' worth of data in
5 partitions, decision trees), signs it, then times in one process, side by
side, best of ``--repeats`` after imports:

* baseline: what a load without any check costs — ``skops.io.loads`` of the
  model bytes (trusted types given) and ``Ledger.from_json`` of the ledger;
* ``load_bundle``: reading every file once, the manifest, the ledger's chain and
  totals, the model file and evidence records, every curve rebuilt
  (``Ledger.verify``), then the model from the verified bytes;
* ``load_bundle(public_key=...)``: the same plus the Ed25519 signature;
* the signature check alone (``signature_verdict`` on files already in memory).

Usage::

    python bench/bundle.py [--repeats 7] [--evidence]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _best(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--evidence", action="store_true", help="ship evidence.npz (data-dependent curves recomputed)")
    args = parser.parse_args()

    import skops.io
    from privfed.accounting import Ledger
    from privfed.pipelines.fedkt.estimator import FedKT
    from sklearn.datasets import load_digits
    from sklearn.tree import DecisionTreeClassifier

    import privfed
    from privfed.bundle.manifest import read_bundle_files
    from privfed.bundle.signing import signature_verdict

    X, y = load_digits(return_X_y=True)
    parties = [(X[i * 120:(i + 1) * 120], y[i * 120:(i + 1) * 120]) for i in range(10)]
    model = FedKT(DecisionTreeClassifier(max_depth=8), n_partitions=2, n_teachers=3, privacy="L1", gamma=0.05,
                  query_fraction=0.3, random_state=0).fit(parties, X[1200:])
    with tempfile.TemporaryDirectory() as folder:
        private, public, fingerprint = privfed.generate_signing_key(Path(folder) / "key.pem")
        path = privfed.save_bundle(model, Path(folder) / "bundle", evidence=model.evidence_ if args.evidence else None,
                                   signing_key=private)
        files = read_bundle_files(path)
        untrusted = skops.io.get_untrusted_types(data=files["model.skops"])
        privfed.load_bundle(path, public_key=public)  # warm caches (imports, dp-accounting tables)

        def baseline():
            skops.io.loads(files["model.skops"], trusted=untrusted)
            Ledger.from_json(files["ledger.json"])

        timings = {
            "baseline (skops.io.loads + Ledger.from_json, no checks)": _best(baseline, args.repeats),
            "load_bundle": _best(lambda: privfed.load_bundle(path), args.repeats),
            "load_bundle(public_key=...)": _best(lambda: privfed.load_bundle(path, public_key=public), args.repeats),
            "signature check alone": _best(lambda: signature_verdict(files, public), args.repeats),
        }
    size = sum(len(data) for data in files.values())
    print(f"FedKT-L1 bundle on digits: {len(files)} files, {size / 1e3:.0f} kB, {len(model.ledger_)} ledger entries, "
          f"evidence {'shipped' if args.evidence else 'not shipped'}; best of {args.repeats}")
    base = next(iter(timings.values()))
    for name, seconds in timings.items():
        print(f"  {name:58s} {seconds * 1e3:9.2f} ms   {seconds / base:6.2f} × baseline")


if __name__ == "__main__":
    main()
