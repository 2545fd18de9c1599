"""The checks of ``privfed selftest``: each calls the very function a pipeline calls to draw its noise.

Not a re-implementation: each check draws from privfed's own noise function with a fresh secret
:class:`~privfed.accounting.NoiseSource` and tests what comes out (:mod:`privfed.audit.noise_statistics`) against the
law and parameters the ledger accounts: the scale of Laplace and Gaussian noise, the variance and integrality of
Skellam shares and of their sum, randomized response's keep probability and the unbiasedness of its estimate, the
noisy max on every data-dependent branch (empty votes, unanimous votes, ties, a single class), independence between
queries, rounds and parties, and DP-SGD's noise measured white-box on the trained parameters. :data:`SPECS` lists
them in the order :func:`privfed.audit.selftest.selftest` runs them, with what each calls, its number of p-values,
its default size and its optional dependencies. Pipeline code is imported inside each check, so that a check whose
dependency is missing can be reported as skipped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
from scipy import stats

from privfed.accounting.noise_source import NoiseSource
from privfed.audit.noise_statistics import (
    DEVIATIONS,
    POWER,
    CheckFailure,
    CheckOutcome,
    chi2_power,
    correlation_p,
    gaussian_difference_check,
    goodness_of_fit_p,
    randomized_response_check,
    skellam_moments,
    smallest_deviation,
    winner_probabilities,
    z_detectable,
    z_test_p,
)

__all__ = ["CHECK_NAMES", "SPECS", "CheckSpec"]


_VOTE_BRANCHES = {"empty votes": (0.0, 0.0, 0.0), "unanimous": (1.5, 0.0, 0.0), "tie": (1.0, 1.0, 0.0),
                  "general": (2.0, 1.0, 0.0)}


def _noisy_max_check(draw: Callable[[np.ndarray, float], np.ndarray], law: Callable[[float], Any], scale: float,
                     size: int, alpha: float) -> CheckOutcome:
    """Every vote branch (in units of the noise scale) through ``draw(votes, scale)``; χ² against the exact law."""
    p_values, details, powers = [], [], []
    for branch, units in _VOTE_BRANCHES.items():
        votes = np.tile(np.asarray(units) * scale, (size, 1))
        labels = draw(votes, scale)
        counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=3)[:3]
        expected = winner_probabilities(votes[0], law(scale))
        p_values.append(goodness_of_fit_p(counts, expected))
        details.append(f"{branch} {np.round(counts / size, 3).tolist()} vs {np.round(expected, 3).tolist()}")
        if branch != "empty votes":
            powers.append(lambda factor, votes=votes[0], expected=expected: chi2_power(
                expected, winner_probabilities(votes, law(scale * factor)), size, alpha))
    single = draw(np.full((5, 1), 3.0 * scale), scale)
    if not np.array_equal(np.asarray(single), np.zeros(5)):
        raise CheckFailure(f"a single class must always win, got {np.asarray(single).tolist()}")
    power = smallest_deviation(lambda factor: max(power(factor) for power in powers))
    return CheckOutcome(p_values, f"noise scale off by {power}", "; ".join(details) + "; single class: always 0")


def _laplace_noisy_max(size: int, alpha: float) -> CheckOutcome:
    from privfed.pipelines.protocol.voting import noisy_labels

    return _noisy_max_check(lambda votes, b: noisy_labels(votes, NoiseSource.secret().generator, gamma=1.0 / b),
                            lambda b: stats.laplace(scale=b), 2.0, size, alpha)


def _gaussian_noisy_max(size: int, alpha: float) -> CheckOutcome:
    from privfed.pipelines.protocol.voting import noisy_labels

    return _noisy_max_check(lambda votes, s: noisy_labels(votes, NoiseSource.secret().generator, sigma=s),
                            lambda s: stats.norm(scale=s), 2.0, size, alpha)


def _fedkt_aggregators(size: int, alpha: float) -> CheckOutcome:
    """FedKT's NoisyArgmax (what the L1 server and the L2 parties call): Laplace and Gaussian labels, and the
    Confident GNMax threshold step at tops T − σ₁, T, T + σ₁."""
    from privfed.pipelines.fedkt.steps import NoisyArgmax

    votes = np.tile([3.0, 0.0, 0.0], (size, 1))
    p_values, details = [], []
    aggregators = (("laplace", 0.5, stats.laplace(scale=2.0)), ("gaussian", 2.0, stats.norm(scale=2.0)))
    for aggregator, scale, law in aggregators:
        labels = NoisyArgmax(aggregator, scale).labels(votes, NoiseSource.secret().generator)
        counts, expected = np.bincount(labels, minlength=3), winner_probabilities(votes[0], law)
        p_values.append(goodness_of_fit_p(counts, expected))
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
    return CheckOutcome(p_values,
                        f"σ₁ off by {z_detectable(se, alpha):.0%}; Laplace/Gaussian scale as in the noisy max",
                    "; ".join(details))


def _fedkd_laplace(size: int, alpha: float) -> CheckOutcome:
    """FedKD's server release (NoisyLogitEnsemble): Laplace(1/γ) law (KS), scale (mean |noise| = 1/γ), no
    correlation between consecutive queries, fresh noise at every read with redraw=True."""
    from privfed.pipelines.fedkd.server import NoisyLogitEnsemble

    gamma, classes = 0.5, 10
    ensemble = np.zeros((size // classes, classes))
    noise = NoisyLogitEnsemble(ensemble, gamma=gamma, rng=NoiseSource.secret().generator).read()
    scale = 1.0 / gamma
    ks = float(stats.kstest(noise.ravel(), stats.laplace(scale=scale).cdf).pvalue)
    z = (np.abs(noise).mean() - scale) / (scale / math.sqrt(noise.size))  # |Laplace(b)| is Exp(b): sd b
    lag = correlation_p(noise[:-1], noise[1:])
    redrawn = NoisyLogitEnsemble(ensemble, gamma=gamma, rng=NoiseSource.secret().generator, redraw=True)
    rounds = correlation_p(redrawn.read(), redrawn.read())
    return CheckOutcome([ks, z_test_p(z), lag, rounds],
                    f"scale off by {z_detectable(1 / math.sqrt(noise.size), alpha):.1%}; a query-to-query or "
                    f"read-to-read correlation of {z_detectable(1 / math.sqrt(noise.size), alpha):.3f}",
                    f"mean |noise| {np.abs(noise).mean():.4f} vs 1/γ = {scale:g}")


def _skellam_share(size: int, alpha: float) -> CheckOutcome:
    """add_skellam_share (FedKD's parties under secure aggregation): integers, Sk(σ²/n) law, no lag correlation."""
    from privfed.pipelines.protocol.secure_sum import add_skellam_share, skellam_share_variance

    share_variance = skellam_share_variance(4.0, 4)
    noisy = add_skellam_share(np.zeros(size, dtype=np.int64), share_variance, value_bound=1,
                              generator=NoiseSource.secret().generator, party="selftest")
    p_values, power, detail = skellam_moments(noisy, share_variance, alpha, "a share")
    p_values.append(correlation_p(noisy[:-1], noisy[1:]))
    return CheckOutcome(p_values, power, detail)


def _secure_sum(size: int, alpha: float) -> CheckOutcome:
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
    p_values, power, detail = skellam_moments(total, ledger_variance, alpha, "the secure sum")
    if not math.isclose(share_variance * n_parties, ledger_variance):
        raise CheckFailure(f"the parties' shares have variance {share_variance} each, {share_variance * n_parties} in "
                       f"all; the ledger accounts {ledger_variance}")
    p_values.append(correlation_p(shares[0], shares[1]))
    return CheckOutcome(p_values, power, detail + f" (σ² = {sigma**2:g}, {n_parties} parties)")


def _fedkt_secure_share(size: int, alpha: float) -> CheckOutcome:
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
    p_values, power, detail = skellam_moments(noise, share_variance, alpha, "FedKT's share")
    p_values.append(correlation_p(noise[:-1], noise[1:]))
    return CheckOutcome(p_values, power, detail)


def _privatekt_rr(size: int, alpha: float) -> CheckOutcome:
    """PrivateKT's perturb_labels, and the unbiasedness of randomized_response_estimate on its reports."""
    from privfed.accounting.randomized_response import randomized_response_estimate, randomized_response_variance
    from privfed.pipelines.privatekt.steps import perturb_labels

    outcome = randomized_response_check(lambda labels, beta, classes: perturb_labels(
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
    outcome.p_values.append(min(1.0, classes * z_test_p(z)))
    outcome.detail += f"; estimate {np.round(estimate, 2).tolist()} vs {true_counts.tolist()}"
    return outcome


def _selective_fd_rr(size: int, alpha: float) -> CheckOutcome:
    from privfed.pipelines.selective_fd.steps import randomized_codes

    return randomized_response_check(lambda labels, beta, classes: randomized_codes(labels, beta, classes,
                                                                    NoiseSource.secret().generator), size, alpha)


def _selective_fd_gnmax(size: int, alpha: float) -> CheckOutcome:
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
            raise CheckFailure(f"with τ_server = ∞ every example is kept; {len(outcome.kept)} of {size} were")
        counts = np.bincount(outcome.targets, minlength=3)
        votes = np.bincount(codes, minlength=3).astype(float)
        expected = winner_probabilities(votes, stats.norm(scale=sigma))
        p_values.append(goodness_of_fit_p(counts, expected))
        details.append(f"{branch} {np.round(counts / size, 3).tolist()} vs {np.round(expected, 3).tolist()}")
        if branch == "unanimous":
            powers.append(lambda factor, votes=votes, expected=expected: chi2_power(
                expected, winner_probabilities(votes, stats.norm(scale=sigma * factor)), size, alpha))
    return CheckOutcome(p_values, f"σ off by {smallest_deviation(powers[0])}", "; ".join(details))


def _dp_selector(size: int, alpha: float) -> CheckOutcome:
    """DPDensityRatioSelector.fit twice on the same data and random_state: the released sums differ by the noise."""
    from privfed.pipelines.selective_fd.dp_selector import DPDensityRatioSelector

    data = np.random.default_rng(0)
    X, public = data.normal(size=(50, 3)), data.normal(size=(60, 3))
    sigma, frequencies = 4.0, max(size // 20, 64)
    fits = [DPDensityRatioSelector(noise_multiplier=sigma, n_frequencies=frequencies, random_state=1, n_auxiliary=60)
            .fit(X, public=public).fitted_arrays()["noisy_sum"] for _ in range(2)]
    return gaussian_difference_check(fits[0] - fits[1], sigma, alpha, "DP selector")


def _dp_sgd(size: int, alpha: float) -> CheckOutcome:
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
            raise CheckFailure(f"the white-box design needs one step, the model took {model.dp_mechanism_.steps}")
        return np.concatenate([p.detach().cpu().numpy().ravel() for p in model.module_.parameters()])

    return gaussian_difference_check(fit() - fit(), lr * sigma * clip / batch, alpha, "DP-SGD parameters")


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


def _fedkt_l2_party_labels(size: int, alpha: float) -> CheckOutcome:
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
        raise CheckFailure(f"the student must be trained once on all {size} noisy labels, got "
                       f"{[len(labels) for labels in _LabelRecorder.seen]}")
    labels = _LabelRecorder.seen.pop()
    votes = np.array([teachers, 0.0, 0.0])
    counts = np.bincount(labels, minlength=3)[:3]
    expected = winner_probabilities(votes, stats.laplace(scale=1 / gamma))
    power = smallest_deviation(lambda factor: chi2_power(
        expected, winner_probabilities(votes, stats.laplace(scale=factor / gamma)), size, alpha))
    leak = next((f"{d:.0%}" for d in DEVIATIONS  # a fraction d of the labels is the clean vote's, class 0
                 if chi2_power(expected, (1 - d) * expected + d * np.eye(3)[0], size, alpha) >= POWER), "> 100%")
    return CheckOutcome([goodness_of_fit_p(counts, expected)],
                        f"noise scale off by {power}; a clean-label leak of {leak}",
                    f"unanimous (4, 0, 0): {np.round(counts / size, 3).tolist()} vs {np.round(expected, 3).tolist()}")


def _party_sources(size: int, alpha: float) -> CheckOutcome:
    """fedkt_noise_seeds: a secret root sends no seed; a seeded root gives each party and the server distinct seeds,
    and the parties' draws are uncorrelated."""
    from privfed.pipelines.fedkt.steps import fedkt_noise_seeds

    parties, server = fedkt_noise_seeds(NoiseSource.secret(), 4)
    if parties != [None] * 4 or server is not None:
        raise CheckFailure(f"a secret root must send no noise seed, got {parties} and {server}")
    parties, server = fedkt_noise_seeds(NoiseSource.seeded(12345), 4)
    if len({*parties, server}) != 5:
        raise CheckFailure(f"the parties' and the server's noise seeds must differ, got {parties} and {server}")
    draws = [NoiseSource.for_task(seed).generator.laplace(size=size) for seed in parties[:2]]
    secret = [NoiseSource.for_task(None).generator.laplace(size=size) for _ in range(2)]
    return CheckOutcome([correlation_p(*draws), correlation_p(*secret)],
                    f"a correlation of {z_detectable(1 / math.sqrt(size), alpha):.3f} between two parties' noise",
                    "seeds distinct; secret root sends none")


@dataclass(frozen=True)
class CheckSpec:
    """One check: its name, what it calls, its number of p-values, ``run(size, alpha)``, its default size, and the
    optional modules it needs (missing ones make it skipped, never passed)."""

    name: str
    target: str
    n_p_values: int
    run: Callable[[int, float], CheckOutcome]
    size: int
    needs: tuple[str, ...] = ()


#: privfed's checks, in the order :func:`~privfed.audit.selftest.selftest` runs them.
SPECS = (
    CheckSpec("laplace-noisy-max", "pipelines.protocol.voting.noisy_labels(gamma=)", 4, _laplace_noisy_max, 20_000),
    CheckSpec("gaussian-noisy-max", "pipelines.protocol.voting.noisy_labels(sigma=)", 4, _gaussian_noisy_max, 20_000),
    CheckSpec("fedkt-aggregators", "pipelines.fedkt.steps.NoisyArgmax.labels/.answered", 5, _fedkt_aggregators, 20_000),
    CheckSpec("fedkd-laplace", "pipelines.fedkd.server.NoisyLogitEnsemble.read", 4, _fedkd_laplace, 100_000),
    CheckSpec("skellam-share", "pipelines.protocol.secure_sum.add_skellam_share", 4, _skellam_share, 200_000),
    CheckSpec("secure-sum", "add_skellam_share × 4 parties, summed; fedkd_secure.skellam_logit_releases", 4,
              _secure_sum,
          100_000),
    CheckSpec("fedkt-skellam-share", "pipelines.fedkt.secure.secure_party_outcome", 4, _fedkt_secure_share, 100_000),
    CheckSpec("privatekt-randomized-response", "pipelines.privatekt.steps.perturb_labels; randomized_response_estimate",
          3, _privatekt_rr, 40_000),
    CheckSpec("selective-fd-randomized-response", "pipelines.selective_fd.steps.randomized_codes", 2, _selective_fd_rr,
          40_000),
    CheckSpec("selective-fd-gnmax", "pipelines.selective_fd.aggregation.server_round(privacy='gnmax')", 2,
          _selective_fd_gnmax, 20_000, ("sklearn",)),
    CheckSpec("dp-selector", "pipelines.selective_fd.dp_selector.DPDensityRatioSelector.fit", 2, _dp_selector,
              40_000, ("sklearn",)),
    CheckSpec("dp-sgd", "pipelines.models.dp_training.train_dp_sgd (TorchMLP, white box)", 2, _dp_sgd, 40_000,
          ("torch", "opacus", "sklearn")),
    CheckSpec("fedkt-l2-party-labels", "pipelines.fedkt.steps.fedkt_party_step (L2, its student's training labels)", 1,
          _fedkt_l2_party_labels, 20_000, ("sklearn",)),
    CheckSpec("party-noise-sources", "pipelines.fedkt.steps.fedkt_noise_seeds; NoiseSource.for_task", 2, _party_sources,
          100_000),
)

#: The checks :func:`selftest` runs, in order.
CHECK_NAMES: tuple[str, ...] = tuple(spec.name for spec in SPECS)
