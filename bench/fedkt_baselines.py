"""FedKT's Table 1 baselines alone: SOLO and centralized PATE on the split ``bench/fedkt.py`` draws.

``bench/fedkt.py`` runs SOLO and centralized PATE beside FedKT only for the settings that ask for them (Adult and
cod-rna): on MNIST at the paper's settings (100 epochs per MLP) they would add about half a FedKT run to every
seed. This script runs the two baselines without FedKT, on exactly the split ``bench/fedkt.py`` draws for the
same setting, protocol and seed (its ``prepare``), with the setting's teacher and student models:

* SOLO: each party trains the student model on its own data; the accuracy is the parties' mean on the test set.
* PATE as the paper defines it (§5 and Appendix B.1: "a single party with the whole dataset", "the number of
  teacher models is set to be same as the number of parties of FedKT", no noise): the parties' data pooled into
  one party with one partition of as many teachers as there are parties, ``CentralizedPATE(n_partitions=1,
  n_teachers=parties)``, as ``bench/fedkt_sweeps.py`` does for cod-rna. privfed's FedKT with one party keeps its
  two tiers, so the votes label the public set for the party's student, whose votes label it for the final model.
  (``bench/fedkt.py``'s PATE column for Adult and cod-rna keeps FedKT's own s and t instead.)

Usage::

    python bench/fedkt_baselines.py --settings mnist-l0-paper --seeds 0 1 2 3 4 --json OUT.json

``--json`` is rewritten after every seed with the run's provenance, and a rerun with the same file skips the seeds
it holds (resumable). ``python -m bench.tables fedkt-mnist-baselines`` renders the table of docs/results.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from privfed.pipelines.fedkt.estimator import CentralizedPATE, Solo  # noqa: E402

from bench import provenance  # noqa: E402
from bench.fedkt import DEVICE, SETTINGS, JsonRecords, prepare, resolved_device  # noqa: E402


def run_baselines(key: str, folder: Path, protocol: str, seed: int, rows_file: Path | None) -> dict:
    """SOLO's and PATE's test accuracy (%) on one seed's split, with their fit seconds."""
    setting = SETTINGS[key]
    split, rows_from = prepare(setting.data, folder, protocol, setting.parties, seed=seed, rows_file=rows_file)
    print(f"  {key} seed {seed}: {rows_from}", flush=True)
    record = {
        "setting": key, "seed": seed, "model_seed": seed, "protocol": protocol, "rows": rows_from,
        "official_rows": split.rows_source is not None,
        "majority_class_accuracy": 100 * float(np.mean(split.y_test == np.bincount(split.y_test).argmax())),
        "public_size": len(split.X_public), "parties": setting.parties,
        "pate_partitions": 1, "pate_teachers": setting.parties,
    }
    start = time.perf_counter()
    solo = Solo(setting.student(), random_state=seed).fit(split.parties)
    record["solo_accuracy"] = 100 * float(solo.score(split.X_test, split.y_test))
    record["solo_seconds"] = time.perf_counter() - start
    start = time.perf_counter()
    central = CentralizedPATE(setting.teacher(), setting.student(), n_partitions=1, n_teachers=setting.parties,
                              random_state=seed).fit(split.parties, split.X_public)
    record["centralized_pate_accuracy"] = 100 * float(central.score(split.X_test, split.y_test))
    record["centralized_pate_seconds"] = time.perf_counter() - start
    print(f"  {key} seed {seed}: SOLO {record['solo_accuracy']:.2f} % ({record['solo_seconds']:.0f} s), "
          f"centralized PATE {record['centralized_pate_accuracy']:.2f} % "
          f"({record['centralized_pate_seconds']:.0f} s)", flush=True)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parents[2] / "shared"
    parser.add_argument("--data", default=str(root / "datasets"))
    parser.add_argument("--reference-rows", default=str(root / "peer_splits" / "fedkt_reference_splits.json.gz"))
    parser.add_argument("--settings", default="mnist-l0-paper", help="comma-separated keys of bench/fedkt.py")
    parser.add_argument("--protocol", default="standard", choices=("standard", "reference-code"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu",
                        help="where the MNIST MLPs train; recorded in the provenance")
    parser.add_argument("--json", type=Path, default=None, help="per-seed records, written after every seed")
    args = parser.parse_args()
    keys = [key.strip() for key in args.settings.split(",") if key.strip()]
    unknown = [key for key in keys if key not in SETTINGS]
    if unknown:
        parser.exit(2, f"bench/fedkt_baselines.py: error: --settings: unknown {unknown}; choose from "
                       f"{sorted(SETTINGS)}\n")
    DEVICE["name"] = args.device
    run = provenance.start(command="python " + " ".join(sys.argv), seeds=args.seeds,
                           settings={key: str(value) if isinstance(value, Path) else value
                                     for key, value in vars(args).items()},
                           device=resolved_device(args.device))
    records = JsonRecords(args.json, args.protocol, run) if args.json else None
    rows_file = Path(args.reference_rows) if args.protocol == "reference-code" else None
    for key in keys:
        for seed in args.seeds:
            if records is not None and (key, seed, seed) in records.done:
                print(f"  {key} seed {seed}: already in the JSON file, skipped", flush=True)
                continue
            record = run_baselines(key, Path(args.data), args.protocol, seed, rows_file)
            if records is not None:
                records.add(record)


if __name__ == "__main__":
    main()
