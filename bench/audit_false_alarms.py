"""False alarms of every empirical audit privfed offers, on correct code, and its cost beside one fit (issue 41).

Each audit below runs ``--runs`` times on the code as committed, one audit seed per run (the canary coins; the
noise under audit is the pipelines' secret noise, fresh in every run, whatever the seed). Every run's bound,
claim, violation (a false alarm: the code is correct, so the claim holds), the most its design can show
(``max_lower_bound``) and its CPU seconds (``time.process_time``, one torch thread) are appended to
``bench/results/audit_false_alarms_AUDIT.json`` as soon as it finishes, so a stopped run resumes where it
stopped. The first ``--fit-runs`` runs also time one ordinary fit of the same estimator on the same data, in the
same process (the pipeline on its parties; the DP-SGD model on the first party), and for DP-SGD the accounting
both make (``plan_release``: σ calibrated to the target ε), which the issue-41 target counts separately. Every
timed call starts with privfed's ``functools`` caches empty (:func:`clear_caches`), as in a fresh process::

    nice -n 19 python -m bench.audit_false_alarms --audit privatekt-eps5-mechanism --runs 60
    nice -n 19 python -m bench.audit_false_alarms --audit privatekt-eps5-mechanism --runs 100 --confidence 0.99
    nice -n 19 python -m bench.audit_false_alarms --audit dpsgd-gradient --first-seed 30 --runs 30 --results /tmp/b &
    python -m bench.audit_false_alarms --audit dpsgd-gradient --merge /tmp/b/audit_false_alarms_dpsgd-gradient.json
    python -m bench.tables audit-false-alarms

The audits (data: scikit-learn's digits, 4 parties × 300 rows, the other 597 rows public, as
``bench/audit_designs.py``; the Skellam audit on ``bench/skellam_audit_false_alarms.py``'s generated data; the
FedKT-L1 pipeline audit is ``examples/audit_fedkt_l1.toml`` as ``privfed audit --empirical`` reads it, the audit
seed varied):
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.datasets import make_classification
from sklearn.tree import DecisionTreeClassifier

from bench import provenance
from bench.audit_designs import AUDITS as DESIGN_AUDITS
from bench.audit_designs import digits
from privfed import DPConfig, FedKT, PrivateKT, TorchMLP
from privfed.audit.config import load_audit_config
from privfed.audit.empirical_pipelines import empirical_audit

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
DELTA = 1e-5
EXAMPLE_CONFIG = Path(__file__).resolve().parents[1] / "examples" / "audit_fedkt_l1.toml"


def generated() -> tuple[list, np.ndarray]:
    """``bench/skellam_audit_false_alarms.py``'s data: 4 parties × 200 generated rows, 800 public rows."""
    X, y = make_classification(n_samples=2400, n_features=8, n_informative=5, n_classes=2, random_state=0)
    return [(X[i * 200:(i + 1) * 200], y[i * 200:(i + 1) * 200]) for i in range(4)], X[800:1600]


def example_config() -> tuple[Any, list, np.ndarray]:
    """``examples/audit_fedkt_l1.toml`` as ``privfed audit --empirical`` reads it: estimator, parties, public set."""
    config = load_audit_config(EXAMPLE_CONFIG)
    parties, public = config.data()
    return config.estimator(), parties, public


@dataclass(frozen=True)
class Audit:
    """One audit under test: what it audits, its design and canaries, and how to build its estimator and data."""

    setting: str
    design: str
    num_canaries: int
    build: Callable[[], tuple[Any, list, np.ndarray]]  # a fresh unfitted estimator, the parties, the public set


def _on_digits(factory: Callable[[], Any]) -> Callable[[], tuple[Any, list, np.ndarray]]:
    def build() -> tuple[Any, list, np.ndarray]:
        return (factory(), *digits())

    return build


def _fedkt_gaussian() -> FedKT:
    return FedKT(DecisionTreeClassifier(), n_partitions=2, n_teachers=3, privacy="L1", aggregator="gaussian",
                 sigma=4.0, delta=DELTA, random_state=0)


def _fedkt_l2() -> FedKT:
    return FedKT(DecisionTreeClassifier(max_depth=4), n_partitions=2, n_teachers=3, privacy="L2", gamma=0.5,
                 delta=DELTA, random_state=0)


def _privatekt(epsilon: float) -> Callable[[], PrivateKT]:
    return lambda: PrivateKT(DecisionTreeClassifier(), epsilon_per_round=epsilon, queries_per_round=2, rounds=5,
                             self_training_size=400, delta=DELTA, random_state=0)


def _skellam() -> tuple[Any, list, np.ndarray]:
    return (FedKT(DecisionTreeClassifier(max_depth=4), n_partitions=2, n_teachers=3, privacy="L1",
                  aggregator="skellam", secure_aggregation=True, sigma=4.0, random_state=0), *generated())


def _dpsgd_black_box() -> TorchMLP:
    return TorchMLP(hidden=(32,), epochs=2, batch_size=32, lr=0.1, optimizer="sgd", random_state=0,
                    dp=DPConfig(target_epsilon=4.0, max_grad_norm=1.0, delta=DELTA, sample_rate=0.07))


AUDITS: dict[str, Audit] = {
    "fedkt-l1-laplace-mechanism": Audit(DESIGN_AUDITS["fedkt-l1-laplace"][3], "mechanism", 20000,
                                        _on_digits(DESIGN_AUDITS["fedkt-l1-laplace"][0])),
    "fedkt-l1-gnmax-mechanism": Audit("FedKT-L1, GNMax σ = 4, s = 2", "mechanism", 20000, _on_digits(_fedkt_gaussian)),
    "privatekt-eps5-mechanism": Audit(DESIGN_AUDITS["privatekt-eps5"][3], "mechanism", 20000,
                                      _on_digits(DESIGN_AUDITS["privatekt-eps5"][0])),
    "privatekt-eps1-mechanism": Audit(DESIGN_AUDITS["privatekt-eps1"][3], "mechanism", 20000,
                                      _on_digits(DESIGN_AUDITS["privatekt-eps1"][0])),
    "dpsgd-gradient": Audit(DESIGN_AUDITS["dpsgd-gradient"][3], "gradient", 1000,
                            _on_digits(DESIGN_AUDITS["dpsgd-gradient"][0])),
    "fedkt-l1-laplace-pipeline": Audit("FedKT-L1, Laplace γ = 0.25 (examples/audit_fedkt_l1.toml, the CLI's config)",
                                       "pipeline", 400, example_config),
    "fedkt-l1-gnmax-pipeline": Audit("FedKT-L1, GNMax σ = 4, s = 2", "pipeline", 400, _on_digits(_fedkt_gaussian)),
    "fedkt-l1-skellam-pipeline": Audit("FedKT-L1, Skellam σ = 4, secure aggregation (generated data)", "pipeline",
                                       800, _skellam),
    "fedkt-l2-pipeline": Audit("FedKT-L2, Laplace γ = 0.5", "pipeline", 200, _on_digits(_fedkt_l2)),
    "privatekt-eps5-pipeline": Audit("PrivateKT, ε = 5 per report, K = 2", "pipeline", 1000,
                                     _on_digits(_privatekt(5.0))),
    "privatekt-eps1-pipeline": Audit("PrivateKT, ε = 1 per report, K = 2", "pipeline", 1000,
                                     _on_digits(_privatekt(1.0))),
    "dpsgd-black-box-pipeline": Audit("DP-SGD MLP(32), target ε = 4, q = 0.07, 2 epochs, C = 1 (black box)",
                                      "pipeline", 400, _on_digits(_dpsgd_black_box)),
}
__doc__ += "\n" + "\n".join(f"* ``{name}``: {audit.setting}, design {audit.design!r}, {audit.num_canaries} canaries"
                     for name, audit in AUDITS.items()) + "\n"


def results_path(audit: str, confidence: float, folder: Path = RESULTS) -> Path:
    """The raw-results file of ``audit`` at ``confidence`` (95 %: no suffix)."""
    suffix = "" if confidence == 0.95 else f"_c{round(confidence * 100):d}"
    return Path(folder) / f"audit_false_alarms_{audit}{suffix}.json"


def _is_dpsgd(estimator: Any) -> bool:
    return getattr(estimator, "dp", None) is not None and hasattr(estimator, "fit_soft")


def clear_caches() -> None:
    """Empty every ``functools`` cache of privfed's code (DP-SGD's σ calibration, Skellam's accounting, ...), so
    that each timed audit or fit pays what it pays in a fresh process, not what an earlier run left cached."""
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(("privfed", "accounting", "pipelines")):
            continue
        for value in list(vars(module).values()):
            if callable(getattr(value, "cache_clear", None)) and hasattr(value, "cache_info"):
                value.cache_clear()


def _cpu(call: Callable[[], Any]) -> float:
    clear_caches()
    start = time.process_time()
    call()
    return time.process_time() - start


def fit_cpu_seconds(audit: Audit) -> dict[str, float]:
    """CPU seconds of one ordinary fit of the audited estimator on the same data, and for DP-SGD of its accounting."""
    model, parties, public = audit.build()
    if not _is_dpsgd(model):
        return {"fit_cpu_s": _cpu(lambda: model.fit(parties, public))}
    from privfed.pipelines.models.dp_training import plan_release  # imports torch: DP-SGD audits only

    X, y = parties[0]
    accounting = _cpu(lambda: plan_release(model.dp, n=len(X), batch_size=model.batch_size, epochs=model.epochs))
    return {"fit_cpu_s": _cpu(lambda: model.fit(X, y)), "dpsgd_accounting_cpu_s": accounting}


def one_run(audit: Audit, seed: int, confidence: float, *, time_fit: bool) -> dict[str, Any]:
    """One audit of correct code with audit seed ``seed``: its bound, claim, verdict and CPU seconds."""
    estimator, parties, public = audit.build()
    clear_caches()
    wall, cpu = time.perf_counter(), time.process_time()
    result = empirical_audit(estimator, parties, public, num_canaries=audit.num_canaries, confidence=confidence,
                             random_state=seed, design=audit.design)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    record = {"seed": seed, "epsilon_lower": result.epsilon_lower, "claimed_epsilon": result.claimed_epsilon,
              "delta": result.delta, "violation": bool(result.violation), "can_refute": bool(result.can_refute),
              "max_lower_bound": result.max_lower_bound, "expected_lower_bound": result.expected_lower_bound,
              "num_guesses": result.num_guesses, "num_correct": result.num_correct,
              "canary_design": result.details["design"], "audit_cpu_s": round(cpu, 3), "audit_wall_s": round(wall, 3),
              "load_1min": round(os.getloadavg()[0], 2)}
    if time_fit:
        record.update({key: round(value, 3) for key, value in fit_cpu_seconds(audit).items()})
    return record


def stated_false_alarms(audit: Audit, runs: int, confidence: float, *, seed: int = 2**31) -> dict[str, Any]:
    """False alarms of the *stated* mechanism on a mechanism design's canaries: numpy's noise in place of privfed's
    noise code, the same claim, guess count and bound (one design built with ``seed``, ``runs`` simulated audits).
    The rate a perfectly correct implementation shows, beside which privfed's own count is read."""
    from privfed.audit.empirical_pipelines import stated_mechanism_bounds
    from privfed.audit.mechanism_canaries import fedkt_noisy_max_design, privatekt_rr_design

    estimator, parties, _ = audit.build()
    classes = np.unique(np.concatenate([np.asarray(y) for _, y in parties]))
    build = fedkt_noisy_max_design if isinstance(estimator, FedKT) else privatekt_rr_design
    rng, m = np.random.default_rng(seed), audit.num_canaries
    design = build(estimator, classes, m, delta=estimator.delta, confidence=confidence, rng=rng)
    pure = design.details["ledger"]["pure_epsilon"]
    claim, delta = (pure, 0.0) if pure is not None and np.isfinite(pure) else (design.claim, estimator.delta)
    bounds = stated_mechanism_bounds(design, m, claim=claim, delta=delta, confidence=confidence, rng=rng,
                                     repeats=runs)
    return {"runs": runs, "violations": int(np.sum(np.array(bounds) > claim)), "claimed_epsilon": claim,
            "delta": delta, "num_guesses": design.num_guesses, "mean_lower": float(np.mean(bounds)), "seed": seed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--audit", choices=sorted(AUDITS), required=True)
    parser.add_argument("--runs", type=int, default=60,
                        help="audit seeds first-seed … first-seed + runs − 1 (those done are skipped)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--fit-runs", type=int, default=3, help="the first runs that also time one fit")
    parser.add_argument("--results", default=str(RESULTS), help="the folder of the raw-results files")
    parser.add_argument("--merge", metavar="FILE",
                        help="add another process's raw file of this audit and confidence (its seeds not here yet)")
    parser.add_argument("--stated-runs", type=int, default=0,
                        help="then simulate this many audits of the stated mechanism (design 'mechanism' only)")
    args = parser.parse_args(argv)
    audit, out = AUDITS[args.audit], results_path(args.audit, args.confidence, Path(args.results))
    document = json.loads(out.read_text(encoding="utf-8")) if out.exists() else None
    done = set() if document is None else {record["seed"] for record in document["records"]}
    seeds = [seed for seed in range(args.first_seed, args.first_seed + args.runs) if seed not in done]
    if args.merge:
        document = merge(out, Path(args.merge))
    if seeds and not args.merge:
        command = " ".join(["python -m bench.audit_false_alarms", *(argv or sys.argv[1:])])
        document = _run_seeds(args, command, audit, out, document, seeds)
    if args.stated_runs and "stated_mechanism" not in document:  # after the runs: the stated mechanism's rate
        document["stated_mechanism"] = stated_false_alarms(audit, args.stated_runs, args.confidence)
        provenance.write_json(out, document)
        print(json.dumps(document["stated_mechanism"]), flush=True)
    return 0


def merge(out: Path, other: Path) -> dict[str, Any]:
    """Add to ``out`` the records of ``other`` (a second process's raw file, ``--first-seed``/``--results``) whose
    seeds ``out`` lacks, with ``other``'s provenance as a resumed run; the merged document."""
    document, extra = (json.loads(path.read_text(encoding="utf-8")) for path in (out, other))
    if (extra["audit"], extra["confidence"]) != (document["audit"], document["confidence"]):
        raise ValueError(f"--merge: {other} holds {extra['audit']} at {extra['confidence']}, not "
                         f"{document['audit']} at {document['confidence']}")
    have = {record["seed"] for record in document["records"]}
    new = [record for record in extra["records"] if record["seed"] not in have]
    document["records"] = sorted(document["records"] + new, key=lambda record: record["seed"])
    document.setdefault("resumed", []).append({**extra["provenance"], "seeds": [record["seed"] for record in new],
                                               "note": "a second process beside the first (--first-seed 30 "
                                                       "--results ...), its records merged here"})
    provenance.write_json(out, document)
    return document


def _run_seeds(args: argparse.Namespace, command: str, audit: Audit, out: Path, document: dict[str, Any] | None,
               seeds: list[int]) -> dict[str, Any]:
    """Run the audit once per seed, appending each record to ``out`` as it finishes; the updated document."""
    run = provenance.start(command=command, seeds=seeds, settings=vars(args))
    if document is None:
        document = {"provenance": run, "audit": args.audit, "setting": audit.setting, "design": audit.design,
                    "num_canaries": audit.num_canaries, "confidence": args.confidence, "records": []}
    else:
        provenance.earlier_records(document["records"])
        document.setdefault("resumed", []).append(run)
    for seed in seeds:
        record = one_run(audit, seed, args.confidence, time_fit=len(document["records"]) < args.fit_runs)
        document["records"].append(record)
        provenance.stamp_records(document["records"], run)
        finished = provenance.finish(run)
        if "resumed" in document:
            document["resumed"][-1] = finished
        else:
            document["provenance"] = finished
        provenance.write_json(out, document)
        print(json.dumps({key: record[key] for key in ("seed", "epsilon_lower", "claimed_epsilon", "violation",
                                                       "audit_cpu_s")} | {"fit_cpu_s": record.get("fit_cpu_s")}),
              flush=True)
    return document


def _median(values: list[float]) -> float:
    return float(np.median(values))


def table(documents: list[dict[str, Any]]) -> str:
    """The docs/results.md table: one row per raw file (audit and confidence), in the order of :data:`AUDITS`."""
    from privfed.audit.empirical import clopper_pearson

    order = {name: index for index, name in enumerate(AUDITS)}
    lines = ["| audit (design) | setting | canaries | confidence | runs | violations | false-alarm rate, 95 % upper "
             "| stated mechanism: violations | median bound / claim | claim (δ) | max bound (can refute) | audit CPU s "
             "| one fit CPU s | audit ÷ fit | load (1 min) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for document in sorted(documents, key=lambda document: (order[document["audit"]], document["confidence"])):
        records = document["records"]
        runs, violations = len(records), sum(record["violation"] for record in records)
        upper = clopper_pearson(violations, runs, confidence=0.90)[1]  # the one-sided 95 % upper bound
        claims = [record["claimed_epsilon"] for record in records]
        claim = f"{_median(claims):.2f}" if max(claims) - min(claims) < 0.005 else (
            f"{min(claims):.2f}–{max(claims):.2f}")
        refute = sum(record["can_refute"] for record in records)
        fits = [record for record in records if "fit_cpu_s" in record]
        audit_cpu, fit_cpu = _median([record["audit_cpu_s"] for record in records]), None
        ratio = "–"
        if fits:
            fit_cpu = _median([record["fit_cpu_s"] for record in fits])
            ratio = f"{audit_cpu / fit_cpu:.1f}×"
            if "dpsgd_accounting_cpu_s" in fits[0]:  # the issue-41 target counts DP-SGD's accounting separately
                accounting = _median([record["dpsgd_accounting_cpu_s"] for record in fits])
                ratio += (f" (σ calibration, {accounting:.1f} s, apart: {audit_cpu - accounting:.1f} s against "
                          f"{fit_cpu - accounting:.1f} s)")
        loads = [record["load_1min"] for record in records]
        stated = document.get("stated_mechanism")
        simulated = "–" if stated is None else f"{stated['violations']}/{stated['runs']}"
        lines.append(
            f"| `{document['audit']}` ({document['design']}) | {document['setting']} | {document['num_canaries']} "
            f"| {document['confidence']:g} | {runs} | {violations} | {upper:.1%} | {simulated} "
            f"| {_median([record['epsilon_lower'] / record['claimed_epsilon'] for record in records]):.2f} "
            f"| {claim} ({records[0]['delta']:g}) | {_median([record['max_lower_bound'] for record in records]):.2f} "
            f"({'yes' if refute == runs else 'no' if refute == 0 else f'{refute} of {runs} runs'}) "
            f"| {audit_cpu:.1f} | {'–' if fit_cpu is None else f'{fit_cpu:.1f}'} ({len(fits)} fits) | {ratio} "
            f"| {min(loads):.1f}–{max(loads):.1f} |")
    return "\n".join(lines)


def raw_files() -> list[str]:
    """The committed raw-results files, repository-relative."""
    return [str(path.relative_to(RESULTS.parents[1])) for path in sorted(RESULTS.glob("audit_false_alarms_*.json"))]


def _quiet_one_thread() -> None:
    """The script's process: no warnings or log lines between the records, one torch thread (CPU s per run)."""
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    try:
        import torch
    except ImportError:  # the scikit-learn audits run without torch
        return
    torch.set_num_threads(1)


if __name__ == "__main__":
    _quiet_one_thread()
    raise SystemExit(main())
