"""Rerun a handful of cheap cells of docs/results.md on the checked-out code and compare them with the raw files.

Each cell runs its bench script as the raw file's command did (one seed, into a temporary file) and compares only
quantities that **no privacy noise draws**: since issue 40 the noise of every default fit is drawn from a secret
generator, so accuracies of noisy runs are no longer reproducible from ``random_state``, while an ε that does not
depend on the data, a query count fixed by a data-independent budget, and a run without noise still are. Exit 1 when
a cell differs (each difference printed), 0 otherwise; a cell whose data are not beside the checkout (``../shared``,
as for the tests that need it) is skipped and says so. About a minute on 2 CPU cores::

    python bench/rerun_cells.py
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Cell:
    """A cell of a raw file: the command that reruns it, the records to compare, and the fields compared."""

    name: str
    raw: str
    command: list[str]  # the bench script and its arguments, without --json
    select: Callable[[dict[str, Any]], bool]  # the records of the raw file (and of the rerun) that the cell holds
    fields: tuple[str, ...]
    records: str = "records"  # the key of the file's list of records
    needs: tuple[str, ...] = ()  # data files the rerun reads, relative to the checkout's parent folder

    def recorded(self) -> list[dict[str, Any]]:
        document = json.loads((ROOT / self.raw).read_text(encoding="utf-8"))
        return [record for record in document[self.records] if self.select(record)]


def _fedkt(setting: str, protocol: str, seed: int) -> Callable[[dict[str, Any]], bool]:
    def select(record: dict[str, Any]) -> bool:
        return (record.get("setting"), record.get("protocol"), record.get("seed"), record.get("model_seed", seed),
                record.get("tie_rule", "privfed")) == (setting, protocol, seed, seed, "privfed")
    return select


CELLS = (
    Cell("PrivateKT: a client's composed ε after T rounds (accounting only)",
         "bench/results/privatekt_client_epsilons.json",
         ["bench/privatekt.py", "--client-epsilons", "67", "50", "100", "250", "500"],
         lambda record: True, ("reports", "basic", "tight"), records="rows"),
    Cell("FedKT cod-rna L2 (γ = 0.05, 297 local queries), standard protocol, seed 0: ε and queries",
         "bench/results/fedkt_summary_standard.json",
         ["bench/fedkt.py", "--settings", "codrna-l2", "--seeds", "0", "--n-jobs", "1", "--no-baselines"],
         _fedkt("codrna-l2", "standard", 0),
         ("epsilon_classic", "epsilon_tight_data_independent", "queries_answered", "majority_class_accuracy"),
         needs=("shared/datasets/cod_rna.npz",)),
    Cell("FedKT Adult L2 at the paper's ε (tight budget), standard protocol, seed 0: queries and ε",
         "bench/results/fedkt_summary_standard.json",
         ["bench/fedkt.py", "--settings", "adult-l2-tight", "--seeds", "0", "--n-jobs", "1", "--no-baselines"],
         _fedkt("adult-l2-tight", "standard", 0),
         ("epsilon_tight_data_independent", "queries_answered", "majority_class_accuracy"),
         needs=("shared/datasets/adult_a9a.npz",)),
    Cell("FedKT cod-rna L0 (no noise), standard protocol, seed 0: accuracy",
         "bench/results/fedkt_summary_standard.json",
         ["bench/fedkt.py", "--settings", "codrna-l0", "--seeds", "0", "--n-jobs", "1", "--no-baselines"],
         _fedkt("codrna-l0", "standard", 0), ("accuracy", "majority_class_accuracy"),
         needs=("shared/datasets/cod_rna.npz",)),
)


def _equal(recorded: Any, rerun: Any) -> bool:
    if isinstance(recorded, float) and isinstance(rerun, float):
        return math.isclose(recorded, rerun, rel_tol=1e-12, abs_tol=0.0) or recorded == rerun
    return recorded == rerun


def rerun(cell: Cell, folder: Path) -> list[str]:
    """The differences between the cell's recorded values and a rerun on the checked-out code (empty: equal)."""
    output = folder / (cell.raw.rsplit("/", 1)[-1] + f".{abs(hash(cell.name))}.json")
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, *cell.command, "--json", str(output)], cwd=ROOT, env=environment, check=True,
                   stdout=subprocess.DEVNULL)
    fresh = [record for record in json.loads(output.read_text(encoding="utf-8"))[cell.records] if cell.select(record)]
    recorded = cell.recorded()
    if len(fresh) != len(recorded):
        return [f"{len(recorded)} records in {cell.raw}, {len(fresh)} in the rerun"]
    return [f"record {index}, {field}: {old[field]!r} in {cell.raw}, {new.get(field)!r} now"
            for index, (old, new) in enumerate(zip(recorded, fresh, strict=True))
            for field in cell.fields if not _equal(old[field], new.get(field))]


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    failed = skipped = 0
    with tempfile.TemporaryDirectory(prefix="privfed-rerun-") as folder:
        for cell in CELLS:
            missing = [path for path in cell.needs if not (ROOT.parent / path).is_file()]
            if missing:
                skipped += 1
                print(f"skipped: {cell.name} (../{', ../'.join(missing)} not beside this checkout)")
                continue
            started = time.perf_counter()
            differences = rerun(cell, Path(folder))
            failed += bool(differences)
            print(f"{'DIFFERS' if differences else 'same'}: {cell.name} ({time.perf_counter() - started:.0f} s)")
            for difference in differences:
                print(f"  {difference}")
    print(f"{len(CELLS) - failed - skipped} of {len(CELLS) - skipped} cells repeat their raw results"
          + (f"; {skipped} skipped (no data)" if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
