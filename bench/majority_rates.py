"""The majority-class rate of every split the official FedKT code used (``../shared/peer_splits``), from the data.

What predicting one class everywhere scores on each evaluation set (and on each public set) of the official rows
of Adult (a9a) and cod-rna, 50 and 20 parties, seeds 0–4: the floor against which docs/results.md reads the binary
tables (FedKT Tables 6–9, the official rows)::

    python bench/majority_rates.py --json bench/results/fedkt_official_rows_majority_rates.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import provenance  # noqa: E402

SHARED = ROOT.parent / "shared"
DATA = {"a9a": "adult_a9a.npz", "cod-rna": "cod_rna.npz"}


def rates(splits: dict, data: Path) -> list[dict]:
    """Per split: the share (%) of its evaluation and public rows in their most frequent class, and that class."""
    rows = []
    for key, split in splits.items():
        dataset = key.split("/")[0]
        y = np.load(data / DATA[dataset])["y"]
        record = {"split": key, "dataset": dataset, "parties": int(key.split("parties=")[1].split("/")[0]),
                  "seed": int(key.rsplit("seed=", 1)[1])}
        for part in ("test", "public"):
            counts = np.bincount(y[np.asarray(split[f"{part}_rows"])], minlength=2)
            record[f"{part}_rows"] = int(counts.sum())
            record[f"{part}_majority_rate"] = 100 * float(counts.max() / counts.sum())
        rows.append(record)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", default=str(SHARED / "peer_splits" / "fedkt_reference_splits.json.gz"))
    parser.add_argument("--data", default=str(SHARED / "datasets"))
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    run = provenance.start(command="python " + " ".join(sys.argv), seeds=None, settings=vars(args))
    with gzip.open(args.splits, "rt", encoding="utf-8") as handle:
        splits = json.load(handle)
    records = rates(splits, Path(args.data))
    provenance.write_json(args.json, {"provenance": provenance.finish(run), "records": records})
    for record in records:
        print(f"{record['split']}: evaluation {record['test_majority_rate']:.2f} % of {record['test_rows']}, "
              f"public {record['public_majority_rate']:.2f} % of {record['public_rows']}")


if __name__ == "__main__":
    main()
