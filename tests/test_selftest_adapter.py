"""The selftest's adapter for another project's noise functions: docs/audit.md's example, run exactly as written,
and what the adapter catches (a wrong scale, noise reused across calls) and refuses (a malformed declaration)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest

from privfed.audit.selftest import MechanismUnderTest, selftest

DOC = Path(__file__).resolve().parents[1] / "docs" / "audit.md"


def test_the_documented_example_runs_as_written_and_passes():
    example = re.search(r"<!-- selftest-adapter-example -->\n```python\n(.*?)```\n"
                        r"<!-- end selftest-adapter-example -->", DOC.read_text(encoding="utf-8"), re.S).group(1)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example, str(DOC), "exec"), {"__name__": "docs_audit_example"})  # noqa: S102
    assert printed.getvalue() == "True scale off by 3.5%; a correlation of 0.035 within or between calls\n"


def _laplace(scale: float) -> MechanismUnderTest:
    rng = np.random.default_rng()
    return MechanismUnderTest(f"laplace-{scale:g}", lambda size: rng.laplace(0.0, scale, size), "laplace",
                              {"scale": 2.0})


def test_a_scale_off_by_a_tenth_fails_and_the_right_one_passes():
    report = selftest(only=[], mechanisms=[_laplace(2.0), _laplace(1.8)])
    assert [check.status for check in report.checks] == ["pass", "fail"]
    assert report.n_p_values == 43 + 2 * 4  # the adapter's p-values join privfed's Bonferroni family


def test_noise_reused_across_calls_fails():
    noise = np.random.default_rng().normal(0.0, 3.0, 20_000)
    reused = MechanismUnderTest("reused", lambda size: noise[:size].copy(), "gaussian", {"sigma": 3.0})
    check = selftest(only=[], mechanisms=[reused]).checks[0]
    assert check.status == "fail" and check.p_values[-1] < 1e-12  # the between-calls correlation is 1


@pytest.mark.parametrize("law, parameters, sample", [
    ("skellam", {"variance": 4.0}, lambda rng, n: rng.poisson(2.0, n) - rng.poisson(2.0, n)),
    ("randomized-response", {"keep_probability": 0.6, "num_classes": 4},
     lambda rng, n: np.where(rng.random(n) < 0.6, 0, rng.integers(0, 4, n))),
])
def test_skellam_and_randomized_response_declarations_pass_when_true(law, parameters, sample):
    rng = np.random.default_rng()
    mine = MechanismUnderTest(law, lambda size: sample(rng, size), law, parameters)
    assert selftest(only=[], mechanisms=[mine]).passed


def test_skellam_noise_must_be_integers():
    rng = np.random.default_rng()
    floats = MechanismUnderTest("floats", lambda size: rng.normal(0.0, 2.0, size), "skellam", {"variance": 4.0})
    check = selftest(only=[], mechanisms=[floats]).checks[0]
    assert check.status == "fail" and "must be integers" in check.detail


def test_a_malformed_declaration_is_refused_in_one_line():
    with pytest.raises(ValueError, match="law must be one of laplace, gaussian, skellam, randomized-response, got "
                                         "'cauchy'"):
        MechanismUnderTest("x", np.zeros, "cauchy", {"scale": 1.0})
    with pytest.raises(ValueError, match=r"parameters of a gaussian mechanism must be sigma, got \['scale'\]"):
        MechanismUnderTest("x", np.zeros, "gaussian", {"scale": 1.0})
    with pytest.raises(TypeError, match="sample must be a callable"):
        MechanismUnderTest("x", 3, "gaussian", {"sigma": 1.0})
    with pytest.raises(ValueError, match="mechanisms need distinct names other than privfed's checks; got dp-sgd"):
        selftest(only=[], mechanisms=[MechanismUnderTest("dp-sgd", np.zeros, "gaussian", {"sigma": 1.0})])
