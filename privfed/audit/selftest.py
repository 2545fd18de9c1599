"""Conformance tests of privfed's own noise code: ``privfed selftest`` and :func:`selftest`, its report and the adapter
for another project's noise code.

Each check calls the very function a pipeline calls to draw its noise (not a re-implementation), with a fresh
secret :class:`~privfed.accounting.NoiseSource`, and tests what comes out against the law and parameters the
ledger accounts: the scale of Laplace and Gaussian noise, the variance and integrality of Skellam shares and of
their sum, randomized response's keep probability and the unbiasedness of its estimate, the noisy max on every
data-dependent branch (empty votes, unanimous votes, ties, a single class), independence between queries, rounds
and parties, and DP-SGD's noise measured white-box on the trained parameters (the checks:
:mod:`privfed.audit.noise_checks`).

Statistics (:mod:`privfed.audit.noise_statistics`). Each check computes one or more p-values (exact laws: χ²
goodness of fit, Kolmogorov–Smirnov, or a z-test of a moment with its known standard error). The suite runs every
p-value at α = ``family_alpha`` / (number of p-values) (Bonferroni), so on correct code the probability that *any*
check fails is ≤ ``family_alpha`` (default 1 %). Each check states its power: the smallest relative deviation of its
parameter (a scale, a variance, a keep probability) that it detects with probability ≥ 0.9 at its default size,
computed from the test's law at that α (normal approximation for moments, non-central χ² for goodness of fit).

Optional parts: the DP-SGD check needs torch and opacus, the DP selector and Selective-FD checks scikit-learn;
a check whose dependency is missing is reported as skipped, never as passed.

Another project's noise code. :class:`MechanismUnderTest` is the adapter: a name, a callable that runs the
user's own mechanism on a zero input and returns ``size`` outputs, the law it claims (``"laplace"``,
``"gaussian"``, ``"skellam"`` or ``"randomized-response"``) and that law's parameters. ``selftest(only=[],
mechanisms=[...])`` runs the same statistics on it: the law (KS or χ²), its scale or variance or keep
probability (with the check's power), integrality for Skellam, and independence — within one call (lag-1
correlation) and between two calls (noise reused across queries shows as ρ = 1).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from privfed.audit.noise_checks import CHECK_NAMES, SPECS, CheckSpec
from privfed.audit.noise_statistics import (
    CheckFailure,
    CheckOutcome,
    correlation_p,
    randomized_response_check,
    skellam_moments,
    z_detectable,
    z_test_p,
)

__all__ = ["CHECK_NAMES", "LAWS", "MechanismUnderTest", "SelftestCheck", "SelftestReport", "selftest"]


@dataclass(frozen=True)
class SelftestCheck:
    """One conformance check: what it called, its p-values against α, its power, and whether it passed.

    ``status`` is ``"pass"``, ``"fail"`` or ``"skipped"`` (a dependency is missing; ``detail`` says which).
    ``power`` states the smallest deviation the check detects with probability ≥ 0.9 at ``alpha``.
    """

    name: str
    target: str
    status: str
    p_values: tuple[float, ...]
    alpha: float
    power: str
    detail: str
    seconds: float

    @property
    def passed(self) -> bool:
        return self.status != "fail"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "target": self.target, "status": self.status, "p_values": list(self.p_values),
                "alpha": self.alpha, "power": self.power, "detail": self.detail, "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class SelftestReport:
    """All checks of one :func:`selftest` run; ``passed`` is False when any check failed."""

    checks: tuple[SelftestCheck, ...]
    family_alpha: float
    n_p_values: int
    seconds: float

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    @property
    def failed(self) -> list[str]:
        return [check.name for check in self.checks if not check.passed]

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "family_alpha": self.family_alpha, "n_p_values": self.n_p_values,
                "alpha_per_p_value": self.family_alpha / self.n_p_values, "seconds": round(self.seconds, 3),
                "checks": [check.to_dict() for check in self.checks]}


#: The laws a :class:`MechanismUnderTest` may claim, and the parameters each one needs.
LAWS: dict[str, tuple[str, ...]] = {"laplace": ("scale",), "gaussian": ("sigma",), "skellam": ("variance",),
                                    "randomized-response": ("keep_probability", "num_classes")}


@dataclass(frozen=True)
class MechanismUnderTest:
    """A noise function of your own, with the law it claims, for :func:`selftest` (``mechanisms=``).

    Parameters
    ----------
    name : str
        The check's name in the report.
    sample : callable
        ``sample(size)`` runs your mechanism on a zero input and returns ``size`` outputs (an array): the noise
        itself for ``"laplace"``, ``"gaussian"`` and ``"skellam"`` (integers), the reported labels of ``size``
        true labels 0 for ``"randomized-response"``. Each call must draw fresh noise, as each query would.
    law : {"laplace", "gaussian", "skellam", "randomized-response"}
        The law the mechanism claims (its ledger's).
    parameters : mapping
        That law's parameters (:data:`LAWS`): ``scale`` (Laplace b), ``sigma`` (Gaussian σ), ``variance``
        (Skellam σ²), ``keep_probability`` and ``num_classes`` (randomized response).

    Examples
    --------
    >>> import numpy as np
    >>> from privfed.audit.selftest import MechanismUnderTest, selftest
    >>> rng = np.random.default_rng()
    >>> mine = MechanismUnderTest("my-laplace", lambda size: rng.laplace(0.0, 2.0, size), "laplace", {"scale": 2.0})
    >>> selftest(only=[], mechanisms=[mine]).passed  # doctest: +SKIP
    True
    """

    name: str
    sample: Callable[[int], np.ndarray]
    law: str
    parameters: Mapping[str, float]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        if not callable(self.sample):
            raise TypeError(f"sample must be a callable sample(size) -> array, got {type(self.sample).__name__}")
        if self.law not in LAWS:
            raise ValueError(f"law must be one of {', '.join(LAWS)}, got {self.law!r}")
        if not isinstance(self.parameters, Mapping) or set(self.parameters) != set(LAWS[self.law]):
            got = sorted(self.parameters) if isinstance(self.parameters, Mapping) else self.parameters
            raise ValueError(f"parameters of a {self.law} mechanism must be {', '.join(LAWS[self.law])}, got {got!r}")

    def check(self, size: int, alpha: float) -> CheckOutcome:
        """Run the conformance statistics of the claimed law on ``size`` outputs of two calls."""
        first, second = (np.asarray(self.sample(size)) for _ in range(2))
        if first.shape != (size,) or second.shape != (size,):
            raise CheckFailure(f"sample({size}) must return {size} outputs, got shapes {first.shape}, {second.shape}")
        if self.law == "randomized-response":
            beta, classes = float(self.parameters["keep_probability"]), int(self.parameters["num_classes"])
            outcome = randomized_response_check(lambda labels, b, c: first.astype(np.int64), size, alpha,
                                                beta=beta, classes=classes)
            outcome.p_values.append(correlation_p(first == 0, second == 0))
            return outcome
        if self.law == "skellam":
            variance = float(self.parameters["variance"])
            p_values, power, detail = skellam_moments(first, variance, alpha, self.name)
        else:
            scale = float(self.parameters["scale" if self.law == "laplace" else "sigma"])
            law = stats.laplace(scale=scale) if self.law == "laplace" else stats.norm(scale=scale)
            spread = np.abs(first).mean() if self.law == "laplace" else first.std()
            relative_se = 1 / math.sqrt(size) if self.law == "laplace" else math.sqrt(1 / (2 * size))
            z = (spread / scale - 1.0) / relative_se  # |Laplace(b)| is Exp(b); a normal's sd has se σ/√(2n)
            p_values = [float(stats.kstest(first, law.cdf).pvalue), z_test_p(z)]
            power = f"scale off by {z_detectable(relative_se, alpha):.1%}"
            detail = f"{self.name}: {'mean |noise|' if self.law == 'laplace' else 'sd'} {spread:.4f} vs {scale:g}"
        p_values += [correlation_p(first[:-1], first[1:]), correlation_p(first, second)]
        return CheckOutcome(p_values, power + f"; a correlation of {z_detectable(1 / math.sqrt(size), alpha):.3f} "
                        "within or between calls", detail)

    @property
    def n_p_values(self) -> int:
        return 3 if self.law == "randomized-response" else 5 if self.law == "skellam" else 4


#: Outputs per call of a :class:`MechanismUnderTest` at ``size_factor=1``.
_USER_SIZE = 20_000


def _missing(modules: Sequence[str]) -> list[str]:
    import importlib.util

    return [module for module in modules if importlib.util.find_spec(module) is None]


def selftest(*, family_alpha: float = 0.01, only: Sequence[str] | None = None, size_factor: float = 1.0,
             mechanisms: Sequence[MechanismUnderTest] = ()) -> SelftestReport:
    """Run privfed's noise conformance checks on this installation.

    Parameters
    ----------
    family_alpha : float, default=0.01
        The probability, on correct code, that any check fails (Bonferroni over all the suite's p-values), in (0, 1).
    only : sequence of str, optional
        Names from :data:`CHECK_NAMES` to run (default: all). α per p-value stays that of the whole suite.
    size_factor : float, default=1.0
        Multiplies every check's sample size (power grows as its square root), in (0, 100].
    mechanisms : sequence of MechanismUnderTest, default=()
        Your own noise functions, each checked against the law it claims (20,000 outputs per call, times
        ``size_factor``), after privfed's checks; ``only=[]`` runs yours alone. Their p-values join the
        Bonferroni family.

    Returns
    -------
    SelftestReport
        ``passed`` False when any check failed; each check's p-values, α, power and detail.
    """
    if isinstance(family_alpha, bool) or not isinstance(family_alpha, (int, float)) or not 0 < family_alpha < 1:
        raise ValueError(f"family_alpha must be in (0, 1), got {family_alpha!r}")
    if isinstance(size_factor, bool) or not isinstance(size_factor, (int, float)) or not 0 < size_factor <= 100:
        raise ValueError(f"size_factor must be in (0, 100], got {size_factor!r}")
    names = list(CHECK_NAMES) if only is None else list(only)
    unknown = sorted(set(names) - set(CHECK_NAMES))
    if unknown:
        raise ValueError(f"only must name checks among {', '.join(CHECK_NAMES)}; got {', '.join(unknown)}")
    if isinstance(mechanisms, MechanismUnderTest) or not all(isinstance(m, MechanismUnderTest) for m in mechanisms):
        raise TypeError(f"mechanisms must be a sequence of MechanismUnderTest, got {mechanisms!r}")
    clashes = sorted({m.name for m in mechanisms} & set(CHECK_NAMES)) or sorted(
        {m.name for m in mechanisms if [n.name for n in mechanisms].count(m.name) > 1})
    if clashes:
        raise ValueError(f"mechanisms need distinct names other than privfed's checks; got {', '.join(clashes)} twice")
    n_p_values = sum(spec.n_p_values for spec in SPECS) + sum(m.n_p_values for m in mechanisms)
    alpha = family_alpha / n_p_values
    start, checks = time.perf_counter(), []
    specs = [*(spec for spec in SPECS if spec.name in names),
             *(CheckSpec(m.name, f"{m.law} {dict(m.parameters)} (your mechanism)", m.n_p_values, m.check, _USER_SIZE)
               for m in mechanisms)]
    for spec in specs:
        began = time.perf_counter()
        missing = _missing(spec.needs)
        if missing:
            checks.append(SelftestCheck(spec.name, spec.target, "skipped", (), alpha, "",
                                        f"needs {', '.join(missing)} (not installed)", 0.0))
            continue
        try:
            outcome = spec.run(max(1000, int(spec.size * size_factor)), alpha)
        except CheckFailure as failure:
            checks.append(SelftestCheck(spec.name, spec.target, "fail", (0.0,), alpha, "", str(failure),
                                        time.perf_counter() - began))
            continue
        except Exception as error:  # noqa: BLE001  (a crash of the noise code is a failed check, said as such)
            checks.append(SelftestCheck(spec.name, spec.target, "fail", (0.0,), alpha, "",
                                        f"crashed: {type(error).__name__}: {error}", time.perf_counter() - began))
            continue
        status = "pass" if min(outcome.p_values) >= alpha else "fail"
        checks.append(SelftestCheck(spec.name, spec.target, status, tuple(float(p) for p in outcome.p_values), alpha,
                                    outcome.power, outcome.detail, time.perf_counter() - began))
    return SelftestReport(tuple(checks), float(family_alpha), n_p_values, time.perf_counter() - start)
