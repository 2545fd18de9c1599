"""False alarms of the empirical audit of FedKT with Skellam noise under secure aggregation (issue 41).

The audit draws every party's Skellam share with the parties' own code and sums them (privfed/audit/empirical_pipelines.py);
on correct code it must not report a violation. One audit per seed, raw results with provenance::

    nice -n 10 python -m bench.skellam_audit_false_alarms --seeds 60
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from sklearn.datasets import make_classification
from sklearn.tree import DecisionTreeClassifier

from bench import provenance
from privfed import FedKT
from privfed.audit.empirical_pipelines import empirical_audit

OUT = Path(__file__).resolve().parents[1] / "bench" / "results" / "skellam_audit_false_alarms.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=60)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    run = provenance.start(command=" ".join(["python -m bench.skellam_audit_false_alarms", *(argv or sys.argv[1:])]),
                           seeds=list(range(args.seeds)), settings=vars(args))
    X, y = make_classification(n_samples=2400, n_features=8, n_informative=5, n_classes=2, random_state=0)
    parties = [(X[i * 200:(i + 1) * 200], y[i * 200:(i + 1) * 200]) for i in range(4)]
    model = FedKT(DecisionTreeClassifier(max_depth=4), n_partitions=2, n_teachers=3, privacy="L1",
                  aggregator="skellam", secure_aggregation=True, sigma=4.0, random_state=0)
    records = []
    for seed in range(args.seeds):
        result = empirical_audit(model, parties, X[800:1600], num_canaries=800, random_state=seed)
        records.append({"seed": seed, "epsilon_lower": result.epsilon_lower, "claimed_epsilon": result.claimed_epsilon,
                        "delta": result.delta, "violation": result.violation,
                        "max_lower_bound": result.max_lower_bound, "seconds": result.details["seconds"]})
    alarms = sum(record["violation"] for record in records)
    upper = 1.0 - 0.05 ** (1.0 / args.seeds) if alarms == 0 else math.nan  # 95 % upper bound when none occurred
    summary = {"runs": args.seeds, "violations": alarms, "upper_95": upper}
    provenance.write_json(args.out, {"provenance": provenance.finish(run), "summary": summary, "records": records})
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
