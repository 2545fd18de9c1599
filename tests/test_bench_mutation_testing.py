"""bench.mutation_testing: the selftest runs of separate invocations pool into one row per planted bug."""

from bench.mutation_testing import CORRECT, table, upper_bound


def _record(mutation, failed_runs, *, extra=None):
    runs = [{"failed": failed, "skipped": [], "details": {}, "seconds": 30.0, "cpu_seconds": 8.0}
            for failed in failed_runs]
    per_check = {}
    for failed in failed_runs:
        for name in failed:
            per_check[name] = per_check.get(name, 0) + 1
    selftest = {"exit": 0, "runs": runs, "repeats": len(runs), "failing_runs": sum(bool(f) for f in failed_runs),
                "per_check": per_check, "failed": sorted(per_check), "seconds": 30.0 * len(runs)}
    return {"mutation": mutation, "selftest": selftest, "caught_by": [], **(extra or {})}


def test_runs_of_separate_invocations_add_up_and_later_checks_join_the_row():
    first = {"records": [_record(CORRECT, [[]] * 30), _record("01-bug", [["laplace-noisy-max"]] * 6)]}
    second = {"records": [_record(CORRECT, [[]] * 29), _record("01-bug", [["laplace-noisy-max"]] * 3 + [[]])]}
    checks = {"records": [_record("01-bug", [], extra={"parameter_check": {"failed": [], "results": {"x": {}}},
                                                       "empirical_audit": {"violation": False, "epsilon_lower": 0.31,
                                                                           "claimed_epsilon": 1.0},
                                                       "bundle_audit": {"passed": True}})]}
    rendered = table([first, second, checks])
    assert "| 0/59 | — | — | — | — |" in rendered
    assert "| 9/10 | laplace-noisy-max (9) | pass | pass | pass (0.31 of claim 1) |" in rendered
    assert "runs per planted bug: 10–10" in rendered and "1 of 1 planted bugs by `privfed selftest`" in rendered
    assert "failed 0 of 59 runs, false-alarm rate ≤ 4.95%" in rendered
    assert upper_bound(0, 59) < 0.05 < upper_bound(0, 58)
    assert "(69 runs above): CPU median 8.0 s (8.0–8.0 s), wall median 30 s (30–30 s)" in rendered
