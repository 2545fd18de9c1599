"""The four seed papers' privacy claims audited by privfed: ``privfed.audit(claims=...)`` on each claims file.

For every ``examples/claims/*.json`` at the top level (FedKT-L1 on Adult, FedKD on CIFAR-10, the PrivateKT demo,
Selective-FD): the claimed ε, privfed's recomputation of the stated release (tight and classic analysis, at the
claim's δ and unit) and the verdict with every check's status and finding, as ``privfed audit --claims FILE``
prints them. Seconds per audit after imports.

Run: ``python bench/audit_claims.py --json bench/results/audit_claims.json``; docs/results.md renders its table
from that file (``python -m bench.tables audit-claims``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import privfed  # noqa: E402
from bench import provenance  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=Path, nargs="+", default=sorted((ROOT / "examples" / "claims").glob("*.json")),
                        help="claims files to audit (default: examples/claims/*.json)")
    parser.add_argument("--json", type=Path, help="write the audits and the run's provenance here")
    args = parser.parse_args()
    run = provenance.start(command=" ".join(["python", *sys.argv]), seeds=None,
                           settings={"claims": [str(path.resolve().relative_to(ROOT)) for path in args.claims]})
    rows = []
    for path in args.claims:
        started = time.perf_counter()
        report = privfed.audit(claims=path)
        seconds = time.perf_counter() - started
        rows.append({"file": str(path.resolve().relative_to(ROOT)), "claim": report.claim,
                     "verdict": report.verdict(), "exit_code": report.exit_code, "seconds": round(seconds, 3),
                     "checks": [{"name": check.name, "status": check.status, "detail": check.detail}
                                for check in report.checks]})
        print(report.table(), flush=True)
    if args.json:
        provenance.write_json(args.json, {"provenance": provenance.finish(run), "rows": rows})


if __name__ == "__main__":
    main()
