"""Conformance tests of privfed's own noise code: ``privfed selftest`` and :func:`selftest`.

Each check calls the very function a pipeline calls to draw its noise (not a re-implementation), with a fresh
secret :class:`~privfed.accounting.NoiseSource`, and tests what comes out against the law and parameters the
ledger accounts: the scale of Laplace and Gaussian noise, the variance and integrality of Skellam shares and of
their sum, randomized response's keep probability and the unbiasedness of its estimate, the noisy max on every
data-dependent branch (empty votes, unanimous votes, ties, a single class), independence between queries, rounds
and parties, and DP-SGD's noise measured white-box on the trained parameters.

Statistics. Each check computes one or more p-values (exact laws: χ² goodness of fit, Kolmogorov–Smirnov, or a
z-test of a moment with its known standard error). The suite runs every p-value at α = ``family_alpha`` / (number
of p-values) (Bonferroni), so on correct code the probability that *any* check fails is ≤ ``family_alpha``
(default 1 %). Each check states its power: the smallest relative deviation of its parameter (a scale, a
variance, a keep probability) that it detects with probability ≥ 0.9 at its default size, computed from the
test's law at that α (normal approximation for moments, non-central χ² for goodness of fit).

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
from types import SimpleNamespace
from typing import Any

import numpy as np
from scipy import integrate, stats

from privfed.accounting.noise_source import NoiseSource

__all__ = ["CHECK_NAMES", "LAWS", "MechanismUnderTest", "SelftestCheck", "SelftestReport", "selftest"]

#: The power every check reports: the smallest deviation detected with at least this probability.
POWER = 0.9
_DEVIATIONS = (0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)


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


class _Failure(AssertionError):
    """A deterministic property failed (a p-value of 0)."""


@dataclass
class _Outcome:
    p_values: list[float]
    power: str
    detail: str


# --- statistics -------------------------------------------------------------------------------------
def _z_p(z: float) -> float:
    return float(2.0 * stats.norm.sf(abs(z)))


def _z_detectable(relative_se: float, alpha: float) -> float:
    """Smallest relative deviation a two-sided z-test with this relative standard error detects w.p. ≥ POWER."""
    return (stats.norm.isf(alpha / 2) + stats.norm.ppf(POWER)) * relative_se


def _chi2_power(expected: np.ndarray, alternative: np.ndarray, n: int, alpha: float) -> float:
    keep = expected > 0
    lam = n * float(np.sum((alternative[keep] - expected[keep]) ** 2 / expected[keep]))
    df = max(int(keep.sum()) - 1, 1)
    return float(stats.ncx2.sf(stats.chi2.isf(alpha, df), df, lam)) if lam > 0 else alpha


def _gof_p(counts: np.ndarray, expected: np.ndarray) -> float:
    """χ² goodness of fit of ``counts`` to probabilities ``expected``; a count where 0 is expected gives p = 0."""
    n = counts.sum()
    if np.any((expected == 0) & (counts > 0)):
        return 0.0
    keep = expected > 0
    if keep.sum() < 2:
        return 1.0
    return float(stats.chisquare(counts[keep], n * expected[keep] / expected[keep].sum()).pvalue)


def _smallest_deviation(power_at: Callable[[float], float]) -> str:
    """The smallest relative deviation d (both ×(1 + d) and ÷(1 + d)) with power ≥ POWER, as text."""
    for d in _DEVIATIONS:
        if min(power_at(1.0 + d), power_at(1.0 / (1.0 + d))) >= POWER:
            return f"{d:.0%}"
    return f"> {_DEVIATIONS[-1]:.0%}"


def _correlation_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p-value of zero correlation (Fisher: r·√n ≈ N(0, 1) under independence)."""
    a, b = np.ravel(a).astype(float), np.ravel(b).astype(float)
    r = float(np.corrcoef(a, b)[0, 1])
    return _z_p(r * math.sqrt(len(a)))


def _winner_probabilities(votes: Sequence[float], law: Any) -> np.ndarray:
    """P[argmax_j (v_j + Z_j) = j] for i.i.d. noise of ``law`` (a frozen scipy distribution)."""
    votes = np.asarray(votes, dtype=float)
    if np.all(votes == votes[0]):
        return np.full(len(votes), 1.0 / len(votes))
    width = law.isf(1e-12)
    probabilities = []
    for j, v in enumerate(votes):
        others = np.delete(votes, j)

        def density(x: float, v: float = v, others: np.ndarray = others) -> float:
            return float(law.pdf(x - v) * np.prod(law.cdf(x - others)))

        low, high = votes.min() - width, votes.max() + width
        probabilities.append(integrate.quad(density, low, high, points=sorted(set(votes)), limit=200)[0])
    probabilities = np.asarray(probabilities)
    return probabilities / probabilities.sum()


# --- the checks -------------------------------------------------------------------------------------
_VOTE_BRANCHES = {"empty votes": (0.0, 0.0, 0.0), "unanimous": (1.5, 0.0, 0.0), "tie": (1.0, 1.0, 0.0),
                  "general": (2.0, 1.0, 0.0)}


def _noisy_max_check(draw: Callable[[np.ndarray, float], np.ndarray], law: Callable[[float], Any], scale: float,
                     size: int, alpha: float) -> _Outcome:
    """Every vote branch (in units of the noise scale) through ``draw(votes, scale)``; χ² against the exact law."""
    p_values, details, powers = [], [], []
    for branch, units in _VOTE_BRANCHES.items():
        votes = np.tile(np.asarray(units) * scale, (size, 1))
        labels = draw(votes, scale)
        counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=3)[:3]
        expected = _winner_probabilities(votes[0], law(scale))
        p_values.append(_gof_p(counts, expected))
        details.append(f"{branch} {np.round(counts / size, 3).tolist()} vs {np.round(expected, 3).tolist()}")
        if branch != "empty votes":
            powers.append(lambda factor, votes=votes[0], expected=expected: _chi2_power(
                expected, _winner_probabilities(votes, law(scale * factor)), size, alpha))
    single = draw(np.full((5, 1), 3.0 * scale), scale)
    if not np.array_equal(np.asarray(single), np.zeros(5)):
        raise _Failure(f"a single class must always win, got {np.asarray(single).tolist()}")
    power = _smallest_deviation(lambda factor: max(power(factor) for power in powers))
    return _Outcome(p_values, f"noise scale off by {power}", "; ".join(details) + "; single class: always 0")


def _laplace_noisy_max(size: int, alpha: float) -> _Outcome:
    from privfed.pipelines.protocol.voting import noisy_labels

    return _noisy_max_check(lambda votes, b: noisy_labels(votes, NoiseSource.secret().generator, gamma=1.0 / b),
                            lambda b: stats.laplace(scale=b), 2.0, size, alpha)


def _gaussian_noisy_max(size: int, alpha: float) -> _Outcome:
    from privfed.pipelines.protocol.voting import noisy_labels

    return _noisy_max_check(lambda votes, s: noisy_labels(votes, NoiseSource.secret().generator, sigma=s),
                            lambda s: stats.norm(scale=s), 2.0, size, alpha)


def _fedkt_aggregators(size: int, alpha: float) -> _Outcome:
    """FedKT's NoisyArgmax (what the L1 server and the L2 parties call): Laplace and Gaussian labels, and the
    Confident GNMax threshold step at tops T − σ₁, T, T + σ₁."""
    from privfed.pipelines.fedkt.steps import NoisyArgmax

    votes = np.tile([3.0, 0.0, 0.0], (size, 1))
    p_values, details = [], []
    aggregators = (("laplace", 0.5, stats.laplace(scale=2.0)), ("gaussian", 2.0, stats.norm(scale=2.0)))
    for aggregator, scale, law in aggregators:
        labels = NoisyArgmax(aggregator, scale).labels(votes, NoiseSource.secret().generator)
        counts, expected = np.bincount(labels, minlength=3), _winner_probabilities(votes[0], law)
        p_values.append(_gof_p(counts, expected))
        details.append(f"{aggregator} unanimous {np.round(counts / size, 3).tolist()} vs "
                       f"{np.round(expected, 3).tolist()}")
    threshold, sigma_threshold = 10.0, 3.0
    confident = NoisyArgmax("confident-gnmax", 2.0, threshold=threshold, sigma_threshold=sigma_threshold)
    for shift in (-1.0, 0.0, 1.0):
        top = threshold + shift * sigma_threshold
        answered = confident.answered(np.tile([top, 0.0, 0.0], (size, 1)), NoiseSource.secret().generator)
        p_values.append(float(stats.binomtest(int(answered.sum()), size, stats.norm.cdf(shift)).pvalue))
        details.append(f"threshold at top T{shift:+g}σ₁: {answered.mean():.3f} vs {stats.norm.cdf(shift):.3f}")
    se = math.sqrt(stats.norm.cdf(-1) * stats.norm.cdf(1) / size) / stats.norm.pdf(1)  # on the shift, i.e. on σ₁
    return _Outcome(p_values, f"σ₁ off by {_z_detectable(se, alpha):.0%}; Laplace/Gaussian scale as in the noisy max",
                    "; ".join(details))


def _fedkd_laplace(size: int, alpha: float) -> _Outcome:
    """FedKD's server release (NoisyLogitEnsemble): Laplace(1/γ) law (KS), scale (mean |noise| = 1/γ), no
    correlation between consecutive queries, fresh noise at every read with redraw=True."""
    from privfed.pipelines.fedkd.server import NoisyLogitEnsemble

    gamma, classes = 0.5, 10
    ensemble = np.zeros((size // classes, classes))
    noise = NoisyLogitEnsemble(ensemble, gamma=gamma, rng=NoiseSource.secret().generator).read()
    scale = 1.0 / gamma
    ks = float(stats.kstest(noise.ravel(), stats.laplace(scale=scale).cdf).pvalue)
    z = (np.abs(noise).mean() - scale) / (scale / math.sqrt(noise.size))  # |Laplace(b)| is Exp(b): sd b
    lag = _correlation_p(noise[:-1], noise[1:])
    redrawn = NoisyLogitEnsemble(ensemble, gamma=gamma, rng=NoiseSource.secret().generator, redraw=True)
    rounds = _correlation_p(redrawn.read(), redrawn.read())
    return _Outcome([ks, _z_p(z), lag, rounds],
                    f"scale off by {_z_detectable(1 / math.sqrt(noise.size), alpha):.1%}; a query-to-query or "
                    f"read-to-read correlation of {_z_detectable(1 / math.sqrt(noise.size), alpha):.3f}",
                    f"mean |noise| {np.abs(noise).mean():.4f} vs 1/γ = {scale:g}")


def _skellam_moments(noise: np.ndarray, variance: float, alpha: float, what: str) -> tuple[list[float], str, str]:
    """Integrality, mean 0 and variance (z-tests with Skellam's exact fourth cumulant), χ² against the pmf."""
    if noise.dtype.kind not in "iu":
        raise _Failure(f"{what} must be integers, got dtype {noise.dtype}")
    n = noise.size
    mean_z = noise.mean() / math.sqrt(variance / n)
    variance_se = math.sqrt((2 * variance**2 + variance) / n)  # κ₄ = σ² for Skellam
    variance_z = (noise.var() - variance) / variance_se
    law = stats.skellam(variance / 2, variance / 2)
    edges = np.arange(math.floor(law.ppf(1e-3)), math.ceil(law.isf(1e-3)) + 1)
    observed = np.array([(noise < edges[0]).sum(), *[(noise == k).sum() for k in edges], (noise > edges[-1]).sum()])
    expected = np.array([law.cdf(edges[0] - 1), *law.pmf(edges), law.sf(edges[-1])])
    p_values = [_z_p(mean_z), _z_p(variance_z), _gof_p(observed, expected)]
    return (p_values, f"variance off by {_z_detectable(variance_se / variance, alpha):.1%}",
            f"{what}: variance {noise.var():.4f} vs {variance:g}")


def _skellam_share(size: int, alpha: float) -> _Outcome:
    """add_skellam_share (FedKD's parties under secure aggregation): integers, Sk(σ²/n) law, no lag correlation."""
    from privfed.pipelines.protocol.secure_sum import add_skellam_share, skellam_share_variance

    share_variance = skellam_share_variance(4.0, 4)
    noisy = add_skellam_share(np.zeros(size, dtype=np.int64), share_variance, value_bound=1,
                              generator=NoiseSource.secret().generator, party="selftest")
    p_values, power, detail = _skellam_moments(noisy, share_variance, alpha, "a share")
    p_values.append(_correlation_p(noisy[:-1], noisy[1:]))
    return _Outcome(p_values, power, detail)


def _secure_sum(size: int, alpha: float) -> _Outcome:
    """Four parties' add_skellam_share from their own sources, summed: the ledger's variance, no cross-party
    correlation (two parties given the same noise would show ρ = 1)."""
    from privfed.pipelines.fedkd.secure import skellam_logit_releases
    from privfed.pipelines.protocol.secure_sum import add_skellam_share, skellam_share_variance

    sigma, n_parties = 4.0, 4
    share_variance = skellam_share_variance(sigma, n_parties)
    # The variance the ledger accounts for the sum of every party's share (FedKD's secure aggregation).
    every_share = SimpleNamespace(level_sum=np.zeros((1, 2)), n_contributors=n_parties, n_parties=n_parties)
    ledger_variance = skellam_logit_releases(SimpleNamespace(sigma=sigma, quantization_scale=1), every_share)[
        "party"].variance
    shares = [add_skellam_share(np.zeros(size, dtype=np.int64), share_variance, value_bound=1,
                                generator=NoiseSource.for_task(None).generator, party=f"party {i}")
              for i in range(n_parties)]
    total = np.sum(shares, axis=0)
    p_values, power, detail = _skellam_moments(total, ledger_variance, alpha, "the secure sum")
    if not math.isclose(share_variance * n_parties, ledger_variance):
        raise _Failure(f"the parties' shares have variance {share_variance} each, {share_variance * n_parties} in "
                       f"all; the ledger accounts {ledger_variance}")
    p_values.append(_correlation_p(shares[0], shares[1]))
    return _Outcome(p_values, power, detail + f" (σ² = {sigma**2:g}, {n_parties} parties)")


def _fedkt_secure_share(size: int, alpha: float) -> _Outcome:
    """FedKT's secure_party_outcome: the noisy histogram minus the party's histogram is Sk(task.noise_scale)."""
    from privfed.pipelines.fedkt.secure import secure_party_outcome, skellam_share_variance
    from privfed.pipelines.protocol.voting import consistent_votes

    classes, students, share_variance = 5, 2, skellam_share_variance(4.0, 4)
    queries = size // classes
    predictions = np.zeros((students, queries), dtype=np.int64)
    task = SimpleNamespace(noise_scale=share_variance, classes=np.arange(classes), noise_seed=None,
                           n_partitions=students)
    plain = SimpleNamespace(votes=SimpleNamespace(predictions=predictions), students=(), teacher_votes=None,
                            teacher_training=None)
    outcome = secure_party_outcome(task, plain, party="selftest")
    noise = outcome.noisy_votes.noisy_votes - consistent_votes(predictions[None], classes)
    p_values, power, detail = _skellam_moments(noise, share_variance, alpha, "FedKT's share")
    p_values.append(_correlation_p(noise[:-1], noise[1:]))
    return _Outcome(p_values, power, detail)


def _rr_check(perturb: Callable[[np.ndarray, float, int], np.ndarray], size: int, alpha: float, *,
              beta: float = 0.6, classes: int = 4) -> _Outcome:
    """Randomized response on label 0: χ² against (β + (1 − β)/C, (1 − β)/C, …); its power on β."""
    reports = perturb(np.zeros(size, dtype=np.int64), beta, classes)
    counts = np.bincount(reports, minlength=classes)

    def law(keep: float) -> np.ndarray:
        return np.array([keep + (1 - keep) / classes] + [(1 - keep) / classes] * (classes - 1))

    power = _smallest_deviation(lambda factor: _chi2_power(law(beta), law(min(beta * factor, 1.0)), size, alpha))
    lag = _correlation_p(reports[:-1] == 0, reports[1:] == 0)
    return _Outcome([_gof_p(counts, law(beta)), lag], f"keep probability β off by {power}",
                    f"kept {counts[0] / size:.4f} vs {law(beta)[0]:.4f}")


def _privatekt_rr(size: int, alpha: float) -> _Outcome:
    """PrivateKT's perturb_labels, and the unbiasedness of randomized_response_estimate on its reports."""
    from privfed.accounting.randomized_response import randomized_response_estimate, randomized_response_variance
    from privfed.pipelines.privatekt.steps import perturb_labels

    outcome = _rr_check(lambda labels, beta, classes: perturb_labels(
        labels, keep_probability=beta, num_classes=classes, rng=NoiseSource.secret().generator), size, alpha)
    beta, classes, reporters = 0.6, 4, 20
    rows = size // reporters
    true = np.tile(np.repeat(np.arange(classes), [10, 6, 4, 0]), (rows, 1))
    reports = perturb_labels(true, keep_probability=beta, num_classes=classes, rng=NoiseSource.secret().generator)
    counts = np.stack([np.bincount(row, minlength=classes) for row in reports])
    true_counts = np.array([10, 6, 4, 0])
    estimate = randomized_response_estimate(counts, keep_probability=beta).mean(axis=0)
    variance = randomized_response_variance(true_counts, keep_probability=beta) / rows
    z = float(np.max(np.abs(estimate - true_counts) / np.sqrt(variance)))
    outcome.p_values.append(min(1.0, classes * _z_p(z)))
    outcome.detail += f"; estimate {np.round(estimate, 2).tolist()} vs {true_counts.tolist()}"
    return outcome


def _selective_fd_rr(size: int, alpha: float) -> _Outcome:
    from privfed.pipelines.selective_fd.steps import randomized_codes

    return _rr_check(lambda labels, beta, classes: randomized_codes(labels, beta, classes,
                                                                    NoiseSource.secret().generator), size, alpha)


def _selective_fd_gnmax(size: int, alpha: float) -> _Outcome:
    """Selective-FD's server_round (GNMax): labels of unanimous (3, 0, 0) and tied (1, 1, 1) votes of 3 clients."""
    from privfed.pipelines.selective_fd.aggregation import server_round
    from privfed.pipelines.selective_fd.steps import FDProtocol, SelectiveFDShare

    sigma = 2.0
    protocol = FDProtocol(rounds=1, local_steps=1, distill_steps=1, proxy_batch=size, labels="hard", temperature=1.0,
                          selector=None, tau_server=math.inf, privacy="gnmax", epsilon_per_round=None, sigma=sigma,
                          shares=True, name="selftest")
    p_values, details, powers = [], [], []
    for branch, codes in (("unanimous", (0, 0, 0)), ("tie", (0, 1, 2))):
        shares = [SelectiveFDShare(np.ones(size, dtype=bool), np.full(size, code, dtype=np.int64)) for code in codes]
        outcome = server_round(shares, 3, protocol, None, np.random.default_rng(0), noise=NoiseSource.secret())
        if len(outcome.kept) != size:
            raise _Failure(f"with τ_server = ∞ every example is kept; {len(outcome.kept)} of {size} were")
        counts = np.bincount(outcome.targets, minlength=3)
        votes = np.bincount(codes, minlength=3).astype(float)
        expected = _winner_probabilities(votes, stats.norm(scale=sigma))
        p_values.append(_gof_p(counts, expected))
        details.append(f"{branch} {np.round(counts / size, 3).tolist()} vs {np.round(expected, 3).tolist()}")
        if branch == "unanimous":
            powers.append(lambda factor, votes=votes, expected=expected: _chi2_power(
                expected, _winner_probabilities(votes, stats.norm(scale=sigma * factor)), size, alpha))
    return _Outcome(p_values, f"σ off by {_smallest_deviation(powers[0])}", "; ".join(details))


def _gaussian_difference(difference: np.ndarray, scale: float, alpha: float, what: str) -> _Outcome:
    """``difference`` = two runs that differ only in their noise: N(0, 2·scale²) — its sd (z) and law (KS)."""
    standardised = np.ravel(difference) / (scale * math.sqrt(2.0))
    n = standardised.size
    z = (standardised.std() - 1.0) / math.sqrt(1.0 / (2 * n))
    ks = float(stats.kstest(standardised, "norm").pvalue)
    return _Outcome([_z_p(z), ks], f"noise scale off by {_z_detectable(math.sqrt(1 / (2 * n)), alpha):.1%}",
                    f"{what}: spread / expected = {standardised.std():.4f} over {n} coordinates")


def _dp_selector(size: int, alpha: float) -> _Outcome:
    """DPDensityRatioSelector.fit twice on the same data and random_state: the released sums differ by the noise."""
    from privfed.pipelines.selective_fd.dp_selector import DPDensityRatioSelector

    data = np.random.default_rng(0)
    X, public = data.normal(size=(50, 3)), data.normal(size=(60, 3))
    sigma, frequencies = 4.0, max(size // 20, 64)
    fits = [DPDensityRatioSelector(noise_multiplier=sigma, n_frequencies=frequencies, random_state=1, n_auxiliary=60)
            .fit(X, public=public).fitted_arrays()["noisy_sum"] for _ in range(2)]
    return _gaussian_difference(fits[0] - fits[1], sigma, alpha, "DP selector")


def _dp_sgd(size: int, alpha: float) -> _Outcome:
    """White box (tests/test_dpsgd_noise_attacks.py's design): sample rate 1, plain SGD, one step; two fits with one
    random_state share the initialisation and the clipped gradient sum, so θ₁ − θ₂ = −lr·(σC/B)·(z₁ − z₂)."""
    import torch

    from privfed import DPConfig, TorchMLP

    torch.set_num_threads(1)
    data = np.random.default_rng(0)
    X = data.normal(size=(200, 12)).astype(np.float32)
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(np.int64)
    lr, sigma, clip, batch = 0.1, 2.0, 0.5, 50
    config = DPConfig(noise_multiplier=sigma, max_grad_norm=clip, delta=1e-5, sample_rate=1.0,
                      expected_batch_size=batch)
    hidden = max(16, size // 300)

    def fit() -> np.ndarray:
        model = TorchMLP(hidden=(hidden,), epochs=1, batch_size=20, lr=lr, optimizer="sgd", momentum=0.0,
                         random_state=7, dp=config).fit(X, y)
        if model.dp_mechanism_.steps != 1:
            raise _Failure(f"the white-box design needs one step, the model took {model.dp_mechanism_.steps}")
        return np.concatenate([p.detach().cpu().numpy().ravel() for p in model.module_.parameters()])

    return _gaussian_difference(fit() - fit(), lr * sigma * clip / batch, alpha, "DP-SGD parameters")


class _LabelRecorder:
    """A student that keeps the labels it is trained on (the L2 party step's noisy labels) and predicts class 0."""

    seen: list[np.ndarray] = []

    def __init__(self, random_state: int | None = None) -> None:
        self.random_state = random_state

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {"random_state": self.random_state}

    def set_params(self, **params: Any) -> _LabelRecorder:
        self.random_state = params.get("random_state", self.random_state)
        return self

    def fit(self, X: np.ndarray, y: np.ndarray) -> _LabelRecorder:
        _LabelRecorder.seen.append(np.asarray(y))
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.zeros(len(X), dtype=np.int64)


def _fedkt_l2_party_labels(size: int, alpha: float) -> _Outcome:
    """FedKT-L2's party step end to end (fedkt_party_step): t = 4 single-class teachers vote unanimously for class 0
    on every local query; the labels its student is trained on must follow the Laplace noisy max of (4, 0, 0) at
    the task's γ — every one of them noised (a clean label leaking into the student's training set shows here)."""
    from sklearn.tree import DecisionTreeClassifier

    from privfed.pipelines.fedkt.steps import FedKTTask, fedkt_party_step

    gamma, teachers = 0.5, 4
    task = FedKTTask(queries=np.zeros((size, 1)), classes=np.arange(3), n_local_queries=size, n_final_queries=1,
                     n_partitions=1, n_teachers=teachers, seed=0, party_noise="laplace", noise_scale=gamma,
                     target_epsilon=math.nan, delta=1e-5)
    _LabelRecorder.seen.clear()
    fedkt_party_step(task, np.arange(100.0)[:, None], np.zeros(100, dtype=np.int64),  # distinct rows: 4 teachers
                     teacher=DecisionTreeClassifier(), student=_LabelRecorder(), party="selftest")
    if len(_LabelRecorder.seen) != 1 or len(_LabelRecorder.seen[0]) != size:
        raise _Failure(f"the student must be trained once on all {size} noisy labels, got "
                       f"{[len(labels) for labels in _LabelRecorder.seen]}")
    labels = _LabelRecorder.seen.pop()
    votes = np.array([teachers, 0.0, 0.0])
    counts = np.bincount(labels, minlength=3)[:3]
    expected = _winner_probabilities(votes, stats.laplace(scale=1 / gamma))
    power = _smallest_deviation(lambda factor: _chi2_power(
        expected, _winner_probabilities(votes, stats.laplace(scale=factor / gamma)), size, alpha))
    leak = next((f"{d:.0%}" for d in _DEVIATIONS  # a fraction d of the labels is the clean vote's, class 0
                 if _chi2_power(expected, (1 - d) * expected + d * np.eye(3)[0], size, alpha) >= POWER), "> 100%")
    return _Outcome([_gof_p(counts, expected)], f"noise scale off by {power}; a clean-label leak of {leak}",
                    f"unanimous (4, 0, 0): {np.round(counts / size, 3).tolist()} vs {np.round(expected, 3).tolist()}")


def _party_sources(size: int, alpha: float) -> _Outcome:
    """fedkt_noise_seeds: a secret root sends no seed; a seeded root gives each party and the server distinct seeds,
    and the parties' draws are uncorrelated."""
    from privfed.pipelines.fedkt.steps import fedkt_noise_seeds

    parties, server = fedkt_noise_seeds(NoiseSource.secret(), 4)
    if parties != [None] * 4 or server is not None:
        raise _Failure(f"a secret root must send no noise seed, got {parties} and {server}")
    parties, server = fedkt_noise_seeds(NoiseSource.seeded(12345), 4)
    if len({*parties, server}) != 5:
        raise _Failure(f"the parties' and the server's noise seeds must differ, got {parties} and {server}")
    draws = [NoiseSource.for_task(seed).generator.laplace(size=size) for seed in parties[:2]]
    secret = [NoiseSource.for_task(None).generator.laplace(size=size) for _ in range(2)]
    return _Outcome([_correlation_p(*draws), _correlation_p(*secret)],
                    f"a correlation of {_z_detectable(1 / math.sqrt(size), alpha):.3f} between two parties' noise",
                    "seeds distinct; secret root sends none")


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

    def check(self, size: int, alpha: float) -> _Outcome:
        """Run the conformance statistics of the claimed law on ``size`` outputs of two calls."""
        first, second = (np.asarray(self.sample(size)) for _ in range(2))
        if first.shape != (size,) or second.shape != (size,):
            raise _Failure(f"sample({size}) must return {size} outputs, got shapes {first.shape}, {second.shape}")
        if self.law == "randomized-response":
            beta, classes = float(self.parameters["keep_probability"]), int(self.parameters["num_classes"])
            outcome = _rr_check(lambda labels, b, c: first.astype(np.int64), size, alpha, beta=beta, classes=classes)
            outcome.p_values.append(_correlation_p(first == 0, second == 0))
            return outcome
        if self.law == "skellam":
            variance = float(self.parameters["variance"])
            p_values, power, detail = _skellam_moments(first, variance, alpha, self.name)
        else:
            scale = float(self.parameters["scale" if self.law == "laplace" else "sigma"])
            law = stats.laplace(scale=scale) if self.law == "laplace" else stats.norm(scale=scale)
            spread = np.abs(first).mean() if self.law == "laplace" else first.std()
            relative_se = 1 / math.sqrt(size) if self.law == "laplace" else math.sqrt(1 / (2 * size))
            z = (spread / scale - 1.0) / relative_se  # |Laplace(b)| is Exp(b); a normal's sd has se σ/√(2n)
            p_values = [float(stats.kstest(first, law.cdf).pvalue), _z_p(z)]
            power = f"scale off by {_z_detectable(relative_se, alpha):.1%}"
            detail = f"{self.name}: {'mean |noise|' if self.law == 'laplace' else 'sd'} {spread:.4f} vs {scale:g}"
        p_values += [_correlation_p(first[:-1], first[1:]), _correlation_p(first, second)]
        return _Outcome(p_values, power + f"; a correlation of {_z_detectable(1 / math.sqrt(size), alpha):.3f} "
                        "within or between calls", detail)

    @property
    def n_p_values(self) -> int:
        return 3 if self.law == "randomized-response" else 5 if self.law == "skellam" else 4


@dataclass(frozen=True)
class _Spec:
    name: str
    target: str
    n_p_values: int
    run: Callable[[int, float], _Outcome]
    size: int
    needs: tuple[str, ...] = ()


_SPECS = (
    _Spec("laplace-noisy-max", "pipelines.protocol.voting.noisy_labels(gamma=)", 4, _laplace_noisy_max, 20_000),
    _Spec("gaussian-noisy-max", "pipelines.protocol.voting.noisy_labels(sigma=)", 4, _gaussian_noisy_max, 20_000),
    _Spec("fedkt-aggregators", "pipelines.fedkt.steps.NoisyArgmax.labels/.answered", 5, _fedkt_aggregators, 20_000),
    _Spec("fedkd-laplace", "pipelines.fedkd.server.NoisyLogitEnsemble.read", 4, _fedkd_laplace, 100_000),
    _Spec("skellam-share", "pipelines.protocol.secure_sum.add_skellam_share", 4, _skellam_share, 200_000),
    _Spec("secure-sum", "add_skellam_share × 4 parties, summed; fedkd_secure.skellam_logit_releases", 4, _secure_sum,
          100_000),
    _Spec("fedkt-skellam-share", "pipelines.fedkt.secure.secure_party_outcome", 4, _fedkt_secure_share, 100_000),
    _Spec("privatekt-randomized-response", "pipelines.privatekt.steps.perturb_labels; randomized_response_estimate",
          3, _privatekt_rr, 40_000),
    _Spec("selective-fd-randomized-response", "pipelines.selective_fd.steps.randomized_codes", 2, _selective_fd_rr,
          40_000),
    _Spec("selective-fd-gnmax", "pipelines.selective_fd.aggregation.server_round(privacy='gnmax')", 2,
          _selective_fd_gnmax, 20_000, ("sklearn",)),
    _Spec("dp-selector", "pipelines.selective_fd.dp_selector.DPDensityRatioSelector.fit", 2, _dp_selector, 40_000, ("sklearn",)),
    _Spec("dp-sgd", "pipelines.models.dp_training.train_dp_sgd (TorchMLP, white box)", 2, _dp_sgd, 40_000,
          ("torch", "opacus", "sklearn")),
    _Spec("fedkt-l2-party-labels", "pipelines.fedkt.steps.fedkt_party_step (L2, its student's training labels)", 1,
          _fedkt_l2_party_labels, 20_000, ("sklearn",)),
    _Spec("party-noise-sources", "pipelines.fedkt.steps.fedkt_noise_seeds; NoiseSource.for_task", 2, _party_sources,
          100_000),
)
#: Outputs per call of a :class:`MechanismUnderTest` at ``size_factor=1``.
_USER_SIZE = 20_000
#: The checks :func:`selftest` runs, in order.
CHECK_NAMES: tuple[str, ...] = tuple(spec.name for spec in _SPECS)


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
    n_p_values = sum(spec.n_p_values for spec in _SPECS) + sum(m.n_p_values for m in mechanisms)
    alpha = family_alpha / n_p_values
    start, checks = time.perf_counter(), []
    specs = [*(spec for spec in _SPECS if spec.name in names),
             *(_Spec(m.name, f"{m.law} {dict(m.parameters)} (your mechanism)", m.n_p_values, m.check, _USER_SIZE)
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
        except _Failure as failure:
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
