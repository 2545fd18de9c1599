"""One-run privacy auditing: an empirical lower bound on ε from one run of a mechanism.

Steinke, Nasr, Jagielski, "Privacy Auditing with One (1) Training Run", NeurIPS 2023. The auditor
makes m canaries, flips a fair coin for each (S_i = in or out, sealed), runs the mechanism once with
exactly the "in" canaries, then guesses S_i for r of them (abstaining on the rest) from the output
alone. If the mechanism is (ε, δ)-DP with respect to flipping one coin — adding or removing one
canary, or replacing it, whichever neighbouring relation the canary instantiates — the number W of
correct guesses is stochastically dominated as in their Theorem 3.1 (δ = 0: their Proposition 5.2):

    P[W ≥ v] ≤ f(v) + 2mδ · max_{1 ≤ i ≤ v} (f(v − i) − f(v)) / i,
    f(v) = P[Binomial(r, e^ε/(1 + e^ε)) ≥ v].

The right-hand side grows with ε; :func:`epsilon_lower_bound` returns the largest ε that the observed
v still rejects at level 1 − confidence, so the claim "(ε, δ)-DP" is refuted for every smaller ε with
that confidence, over the audit's own coins only.

Beside it, every :class:`AuditResult` carries the f-DP one-run estimate of Mahloujifar, Melis and Chaudhuri
(ICML 2025; :mod:`accounting.fdp_auditing`) on the same guesses: the largest Gaussian-DP μ refuted, and the ε at
the audit's δ that μ implies, which holds as a lower bound only if the mechanism's trade-off curve is Gaussian.

:func:`audit_release` runs the whole protocol against any mechanism given as a function of the coin
flips; privfed's pipeline audits (``privfed.empirical_audit``) are such functions. Nothing here knows
a pipeline: numpy and scipy only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import optimize, stats

from ._checks import check_choice, check_guess_counts, check_int_at_least, check_probability
from .fdp_auditing import gdp_epsilon, gdp_mu_lower_bound

__all__ = [
    "AuditResult",
    "GUESS_FRACTIONS",
    "audit_release",
    "audit_scores",
    "count_correct_guesses",
    "epsilon_lower_bound",
    "max_lower_bound",
    "one_run_p_value",
]

#: Guess counts tried when none is given, as fractions of the canaries (half guessed in, half out).
#: Fixed before any score is seen; the confidence is split evenly over them (Bonferroni).
GUESS_FRACTIONS: tuple[float, ...] = (1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)
#: Above this ε every p-value is 1 to double precision: the search stops there.
_EPSILON_CAP = 1e3
_UNITS = ("example", "party")


def _check_delta(delta: object) -> float:
    if isinstance(delta, bool) or not isinstance(delta, (int, float, np.floating, np.integer)):
        raise TypeError(f"delta must be a real number in [0, 1), got {delta!r}")
    if not 0.0 <= float(delta) < 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    return float(delta)


def one_run_p_value(*, num_correct: int, num_guesses: int, num_canaries: int, epsilon: float,
                    delta: float = 0.0) -> float:
    """Upper bound on P[W ≥ v] for an (ε, δ)-DP mechanism (Steinke et al. 2023, Thm 3.1; Prop. 5.2 for δ = 0).

    Parameters
    ----------
    num_correct, num_guesses, num_canaries : int
        v correct guesses out of r, among m canaries.
    epsilon, delta : float
        The null hypothesis: the mechanism is (ε, δ)-DP with respect to one canary's coin.

    Returns
    -------
    float
        min(1, f(v) + 2mδ · max_{1 ≤ i ≤ v} (f(v − i) − f(v))/i), f(v) = P[Bin(r, e^ε/(1 + e^ε)) ≥ v].
    """
    v, r, m = num_correct, num_guesses, num_canaries
    q = 1.0 / (1.0 + math.exp(-epsilon))
    tail = float(stats.binom.sf(v - 1, r, q))
    if delta == 0.0 or v == 0:
        return min(tail, 1.0)
    shifts = np.arange(1, v + 1)
    slope = float(np.max((stats.binom.sf(v - shifts - 1, r, q) - tail) / shifts))
    return min(tail + 2.0 * m * delta * slope, 1.0)


def epsilon_lower_bound(num_correct: int, num_guesses: int, num_canaries: int, *, delta: float = 0.0,
                        confidence: float = 0.95) -> float:
    """The one-run ε lower bound of Steinke, Nasr and Jagielski (2023, Theorem 3.1).

    Parameters
    ----------
    num_correct : int
        v, the correct guesses.
    num_guesses : int
        r, the guesses made (the canaries not abstained on), 1 ≤ r ≤ m.
    num_canaries : int
        m, the canaries, each in or out by an independent fair coin.
    delta : float, default=0.0
        The δ of the claim under test, in [0, 1). δ = 0 gives the closed binomial tail: the largest ε
        with P[Bin(r, e^ε/(1 + e^ε)) ≥ v] ≤ 1 − confidence.
    confidence : float, default=0.95
        In (0, 1).

    Returns
    -------
    float
        The largest ε whose p-value (:func:`one_run_p_value`) is ≤ 1 − confidence: every (ε', δ) claim with
        ε' below it is refuted at that confidence. 0 when even ε = 0 is not refuted (v not clearly above r/2).

    Examples
    --------
    >>> round(epsilon_lower_bound(100, 100, 1000), 3)  # every guess right: logit(0.05^(1/100))
    3.493
    """
    v, r, m = check_guess_counts(num_correct, num_guesses, num_canaries)
    delta = _check_delta(delta)
    significance = 1.0 - check_probability("confidence", confidence)

    def excess(epsilon: float) -> float:
        return significance - one_run_p_value(num_correct=v, num_guesses=r, num_canaries=m, epsilon=epsilon,
                                              delta=delta)

    if excess(0.0) <= 0.0:
        return 0.0
    high = 1.0
    while excess(high) > 0.0:
        if high >= _EPSILON_CAP:
            return math.inf
        high *= 2.0
    return float(optimize.brentq(excess, 0.0, high, xtol=1e-9, rtol=1e-12))


def count_correct_guesses(scores: np.ndarray, included: np.ndarray, *, guesses_in: int, guesses_out: int,
                          rng: np.random.Generator) -> int:
    """Guess *in* for the ``guesses_in`` highest scores and *out* for the ``guesses_out`` lowest; count the right ones.

    Ties are broken uniformly at random (``rng``), so a score that carries no information gives guesses that
    are right half the time.
    """
    order = np.lexsort((rng.random(len(scores)), scores))  # ascending score, random among ties
    guessed_out, guessed_in = order[:guesses_out], order[len(order) - guesses_in:]
    return int(included[guessed_in].sum() + (~included[guessed_out]).sum())


@dataclass(frozen=True)
class AuditResult:
    """The outcome of a one-run audit: an empirical ε lower bound beside the claimed upper bound.

    ``epsilon_lower`` holds with probability ≥ ``confidence`` over the audit's coins; ``violation`` is
    ``epsilon_lower > claimed_epsilon``: the claim is refuted at that confidence. No violation is *not* a
    pass: a loose audit (weak canaries, a black-box observer) finds nothing even where the claim is false.
    ``guess_counts_tried``: the guess counts r searched over (the confidence was split evenly between them),
    ``num_guesses``/``num_correct`` those of the largest bound. ``unit``: what one canary is (an example or a
    whole party); ``threat_model``: what the auditor controls and sees. ``runs``: mechanism runs spent.
    ``max_lower_bound``: the largest bound this design can reach (every guess right, at each guess count tried,
    with the same m, δ and confidence split); :attr:`can_refute` is False when even that does not exceed the
    claim, so the audit could never report a violation, whatever the mechanism does (NaN: not computed).
    ``expected_lower_bound`` (± ``expected_lower_bound_sd``): the mean (and standard deviation) of the bound that the
    *stated* mechanism gives on the same canary design, over a few simulated runs; an observed bound well above it
    shows a shift even below the claim (NaN: the design has no simulator).

    The f-DP estimate (Mahloujifar, Melis and Chaudhuri 2025; :func:`accounting.fdp_auditing.gdp_mu_lower_bound`),
    on the same guesses, guess counts and confidence split: ``gdp_mu_lower``, the largest μ whose μ-Gaussian-DP claim
    the guesses refute (``gdp_num_correct`` of ``gdp_num_guesses`` right, the guess count that gave it), and
    ``gdp_epsilon_lower``, the ε at ``delta`` of a μ-GDP mechanism (:func:`accounting.fdp_auditing.gdp_epsilon`).
    That ε is a lower bound on the mechanism's ε only if its trade-off curve is Gaussian (a Gaussian mechanism,
    DP-SGD); ``epsilon_lower`` assumes nothing, and ``violation`` is decided by it alone. ``gdp_epsilon_lower`` is
    NaN for a pure claim (δ = 0: a Gaussian curve has no finite ε there) and where the estimate was not computed.
    """

    epsilon_lower: float
    claimed_epsilon: float
    violation: bool
    num_guesses: int
    num_correct: int
    num_canaries: int
    num_included: int
    delta: float
    confidence: float
    unit: str
    guess_counts_tried: tuple[int, ...]
    threat_model: str = ""
    runs: int = 1
    details: dict[str, Any] = field(default_factory=dict)
    max_lower_bound: float = math.nan
    expected_lower_bound: float = math.nan
    expected_lower_bound_sd: float = math.nan
    gdp_mu_lower: float = math.nan
    gdp_epsilon_lower: float = math.nan
    gdp_num_guesses: int = 0
    gdp_num_correct: int = 0

    @property
    def can_refute(self) -> bool:
        """Whether the design could refute the claim at all: ``max_lower_bound > claimed_epsilon``."""
        return bool(self.max_lower_bound > self.claimed_epsilon)

    @property
    def ratio(self) -> float:
        """epsilon_lower / claimed_epsilon (how much of the claim the audit reached; NaN for a claim of 0 or ∞)."""
        if self.claimed_epsilon in (0.0, math.inf):
            return math.nan
        return self.epsilon_lower / self.claimed_epsilon

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (∞ as the string "inf")."""
        def plain(value: Any) -> Any:
            if isinstance(value, float) and math.isinf(value):
                return "inf"
            return list(value) if isinstance(value, tuple) else value

        return {**{name: plain(getattr(self, name)) for name in self.__dataclass_fields__},
                "can_refute": self.can_refute}


def _guess_counts(num_canaries: int, num_guesses: int | None) -> tuple[int, ...]:
    """The guess counts r to try: the one given, or each of :data:`GUESS_FRACTIONS` · m."""
    if num_guesses is None:
        return tuple(sorted({max(1, round(fraction * num_canaries)) for fraction in GUESS_FRACTIONS}))
    num_guesses = check_int_at_least("num_guesses", num_guesses, 1)
    if num_guesses > num_canaries:
        raise ValueError(f"num_guesses must be in [1, num_canaries={num_canaries}], got {num_guesses}")
    return (num_guesses,)


def _check_claim(claimed_epsilon: object) -> float:
    if isinstance(claimed_epsilon, bool) or not isinstance(claimed_epsilon, (int, float, np.floating, np.integer)) \
            or math.isnan(float(claimed_epsilon)) or float(claimed_epsilon) < 0:
        raise ValueError(f"claimed_epsilon must be a number >= 0 (math.inf for a release nobody noised), "
                         f"got {claimed_epsilon!r}")
    return float(claimed_epsilon)


def max_lower_bound(num_canaries: int, *, delta: float = 0.0, confidence: float = 0.95,
                    num_guesses: int | None = None) -> float:
    """The largest ε lower bound an audit of m canaries can report: every guess right, at each guess count it
    tries (with its share of 1 − confidence), the best of them. A claim at or above it cannot be refuted.

    Examples
    --------
    >>> round(max_lower_bound(100, delta=1e-5), 2), round(max_lower_bound(100), 2)
    (3.01, 3.02)
    """
    num_canaries = check_int_at_least("num_canaries", num_canaries, 1)
    counts = _guess_counts(num_canaries, num_guesses)
    each = 1.0 - (1.0 - check_probability("confidence", confidence)) / len(counts)
    return max(epsilon_lower_bound(r, r, num_canaries, delta=_check_delta(delta), confidence=each) for r in counts)


def audit_scores(scores: np.ndarray, included: np.ndarray, *, claimed_epsilon: float, delta: float = 0.0,
                 confidence: float = 0.95, num_guesses: int | None = None, random_state: Any = None,
                 unit: str = "example", threat_model: str = "", runs: int = 1,
                 guess_in_only: bool = False) -> AuditResult:
    """The guessing and the bound of :func:`audit_release`, on scores already computed from the sealed coins.

    ``scores`` must have been computed without looking at ``included`` (beyond running the mechanism with it):
    the caller answers for that. With ``num_guesses`` None, each guess count of :data:`GUESS_FRACTIONS` · m is
    tried at confidence 1 − (1 − ``confidence``)/(number tried) and the largest bound is kept (union bound).
    ``guess_in_only``: all r guesses are *in*, for the r highest scores (Steinke et al. allow any split of the
    guesses fixed in advance; this one suits designs whose low scores say little, e.g. a subsampled canary that
    was never drawn).
    """
    scores = np.asarray(scores, dtype=float)
    included = np.asarray(included)
    if scores.ndim != 1 or scores.shape != included.shape or included.dtype != bool:
        raise ValueError(f"scores must be one float per canary and included one bool per canary; got shapes "
                         f"{scores.shape} and {included.shape} ({included.dtype})")
    if np.isnan(scores).any():
        raise ValueError("scores must not contain NaN")
    claimed_epsilon, delta = _check_claim(claimed_epsilon), _check_delta(delta)
    confidence = check_probability("confidence", confidence)
    unit = check_choice("unit", unit, _UNITS)
    m = len(scores)
    counts = _guess_counts(m, num_guesses)
    each = 1.0 - (1.0 - confidence) / len(counts)
    rng = np.random.default_rng(random_state)
    best, best_gdp = (-1.0, 0, 0), (-1.0, 0, 0)
    for r in counts:
        v = count_correct_guesses(scores, included, guesses_in=r if guess_in_only else (r + 1) // 2,
                                  guesses_out=0 if guess_in_only else r // 2, rng=rng)
        bound = epsilon_lower_bound(v, r, m, delta=delta, confidence=each)
        if bound > best[0]:
            best = (bound, r, v)
        mu = gdp_mu_lower_bound(v, r, m, confidence=each)
        if mu > best_gdp[0]:
            best_gdp = (mu, r, v)
    bound, r, v = best
    mu, gdp_r, gdp_v = best_gdp
    return AuditResult(
        epsilon_lower=bound, claimed_epsilon=claimed_epsilon, violation=bound > claimed_epsilon, num_guesses=r,
        num_correct=v, num_canaries=m, num_included=int(included.sum()), delta=delta, confidence=confidence,
        unit=unit, guess_counts_tried=counts, threat_model=threat_model, runs=runs,
        max_lower_bound=max_lower_bound(m, delta=delta, confidence=confidence, num_guesses=num_guesses),
        gdp_mu_lower=mu, gdp_epsilon_lower=math.nan if delta == 0.0 else gdp_epsilon(mu, delta=delta),
        gdp_num_guesses=gdp_r, gdp_num_correct=gdp_v,
    )


def audit_release(release: Callable[[np.ndarray], Any], num_canaries: int, *, claimed_epsilon: float,
                  delta: float = 0.0, confidence: float = 0.95, num_guesses: int | None = None,
                  random_state: Any = None, unit: str = "example", guess_in_only: bool = False) -> AuditResult:
    """Audit any mechanism in one run: seal m fair coins, run it once, guess, bound ε.

    Parameters
    ----------
    release : callable
        ``release(included)`` receives the sealed coin flips (a boolean array, one per canary; a copy), runs
        the mechanism with exactly those canaries included, and returns one score per canary (higher: more
        likely included), computed from what the mechanism releases only.
    num_canaries : int
        m ≥ 1.
    claimed_epsilon : float
        The ε under test (≥ 0; ``math.inf`` for a release nobody noised: never a violation).
    delta : float, default=0.0
        The δ of the claim, in [0, 1).
    confidence : float, default=0.95
    num_guesses : int, default=None
        r, fixed before looking: guess *in* for the ⌈r/2⌉ highest scores, *out* for the ⌊r/2⌋ lowest. None
        tries each of :data:`GUESS_FRACTIONS` · m and splits 1 − confidence evenly between them.
    random_state : int, numpy Generator or None
        Seeds the coins and the tie-breaks.
    unit : {"example", "party"}, default="example"
        What one canary is, recorded in the result.
    guess_in_only : bool, default=False
        Guess *in* for the r highest scores and never *out* (:func:`audit_scores`).

    Returns
    -------
    AuditResult

    Examples
    --------
    >>> import numpy as np
    >>> def laplace_count(included):  # each canary adds 1 to its own count, Laplace(1/ε) noise, ε = 1
    ...     return included + np.random.default_rng(1).laplace(0.0, 1.0, size=len(included))
    >>> result = audit_release(laplace_count, 5000, claimed_epsilon=1.0, random_state=0)
    >>> result.violation, 0.7 < result.epsilon_lower <= 1.0
    (False, True)
    """
    if not callable(release):
        raise TypeError(f"release must be a callable taking the boolean inclusion array, got {type(release).__name__}")
    num_canaries = check_int_at_least("num_canaries", num_canaries, 1)
    _check_claim(claimed_epsilon), _check_delta(delta), check_probability("confidence", confidence)
    check_choice("unit", unit, _UNITS)
    _guess_counts(num_canaries, num_guesses)
    rng = np.random.default_rng(random_state)
    included = rng.random(num_canaries) < 0.5
    scores = np.asarray(release(included.copy()), dtype=float)
    if scores.shape != (num_canaries,):
        raise ValueError(f"release must return one score per canary, shape ({num_canaries},), got {scores.shape}")
    return audit_scores(scores, included, claimed_epsilon=claimed_epsilon, delta=delta, confidence=confidence,
                        num_guesses=num_guesses, random_state=rng, unit=unit, guess_in_only=guess_in_only)
