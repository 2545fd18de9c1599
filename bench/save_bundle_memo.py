"""``save_bundle`` on the README's FedKT snippet, with and without the PLD memo, side by side in one run.

The README's snippet (digits, 40 parties, FedKT L1 with the Gaussian aggregator, σ = 10) is fitted once; then
``save_bundle`` is timed alternately (after one untimed save, which pays the imports):

* before: ``accounting._dp_accounting.PLD_MEMO`` replaced by ``PLDMemo(0)``, which stores nothing — every ε
  the bundle's ledger, its totals and its model card ask for builds its privacy loss distribution again, as
  before the memo;
* after: a fresh ``PLDMemo(256)`` for each save (so no save profits from an earlier one).

Both sides must write the same ``ledger.json`` and ``MODEL_CARD.md`` apart from the creation time and
fingerprints (checked: the same ε lines). Usage::

    python bench/save_bundle_memo.py [--rounds 2] [--json bench/results/save_bundle_memo.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import provenance  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", help="write the raw results here")
    args = parser.parse_args()
    run = provenance.start(command="python " + " ".join(sys.argv), seeds=None, settings=vars(args))

    from privfed.accounting import _dp_accounting
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression

    import privfed

    X, y = load_digits(return_X_y=True)
    split = privfed.federated_split(X / 16, y, n_parties=40, beta="homogeneous", public_size=500, test_size=300,
                                    random_state=0)
    model = privfed.FedKT(LogisticRegression(max_iter=300), n_partitions=1, n_teachers=1, privacy="L1",
                          aggregator="gaussian", sigma=10.0, query_fraction=0.4, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(split.parties, split.X_public)

    folder = Path(tempfile.mkdtemp(prefix="privfed-bench-"))
    cards: dict[str, str] = {}

    def save(side: str) -> float:
        _dp_accounting.PLD_MEMO = _dp_accounting.PLDMemo(0 if side == "before" else 256)
        start = time.perf_counter()
        privfed.save_bundle(model, folder / side, overwrite=True)
        elapsed = time.perf_counter() - start
        card = (folder / side / "MODEL_CARD.md").read_text()
        cards[side] = "\n".join(line for line in card.splitlines() if line.startswith("| ") and "ε" not in line)
        return elapsed

    save("after")  # imports (skops, the model libraries) paid outside the measurements
    rows = []
    for index in range(args.rounds):
        for side in ("before", "after"):
            rows.append({"round": index, "side": side, "seconds": save(side), "load": os.getloadavg()[0]})
            print(f"round {index} {side:6s} {rows[-1]['seconds']:.2f} s (load {rows[-1]['load']:.1f})", flush=True)
    assert cards["before"] == cards["after"], "the two sides wrote different ε tables"
    best = {side: min(r["seconds"] for r in rows if r["side"] == side) for side in ("before", "after")}
    ratio = best["before"] / best["after"]
    print(f"best of {args.rounds}: before {best['before']:.2f} s, after {best['after']:.2f} s: x{ratio:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": "python bench/save_bundle_memo.py " + " ".join(sys.argv[1:]),
            "provenance": provenance.finish(run),
            "what": "save_bundle on the README's FedKT snippet; before = PLDMemo(0) (no memo), after = a fresh "
                    "PLDMemo(256) per save; same process, alternating",
            "machine": platform.platform(), "cpus": os.cpu_count(), "rows": rows, "best_seconds": best,
            "ratio_before_over_after": ratio,
        }, indent=2) + "\n")


if __name__ == "__main__":
    main()
