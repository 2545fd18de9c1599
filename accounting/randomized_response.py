"""k-ary randomized response on one-hot labels, as PrivateKT releases them.

Source: Qi et al., "Differentially private knowledge transfer for federated
learning", Nature Communications 2023 ("PrivateKT"), Eq. 2 (the perturbation),
Eq. 3 (the server's unbiased aggregate) and Lemma 1 (ε-LDP of one report).
Composition over reports is privfed's, through dp-accounting.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ._checks import (
    MAX_EPSILON_PER_ANSWER,
    check_at_most,
    check_choice,
    check_int_at_least,
    check_nonnegative_int_array,
    check_orders,
    check_positive_finite,
    check_probability,
)
from .mechanism import ALL_RELATIONS, ANALYSES, UNITS, Mechanism
from .rdp_closed_forms import randomized_response_rdp
from .registry import register

if TYPE_CHECKING:
    import dp_accounting

__all__ = [
    "RandomizedResponse",
    "randomized_response_epsilon",
    "randomized_response_estimate",
    "randomized_response_keep_probability",
    "randomized_response_variance",
]


def randomized_response_keep_probability(epsilon: float, *, num_classes: int, labels_per_report: int = 1) -> float:
    """β = (e^{ε/K} − 1) / (e^{ε/K} − 1 + C): the keep probability giving ε-LDP per report of K labels.

    Each label is kept with probability β and otherwise replaced by a label drawn
    uniformly from all C classes, so Pr[true label] / Pr[any other label]
    = 1 + Cβ/(1 − β) = e^{ε/K} (PrivateKT Eq. 2, Lemma 1).
    """
    epsilon = check_positive_finite("epsilon", epsilon)
    num_classes = check_int_at_least("num_classes", num_classes, 2)
    labels_per_report = check_int_at_least("labels_per_report", labels_per_report, 1)
    growth = math.expm1(epsilon / labels_per_report)
    return growth / (growth + num_classes)


def randomized_response_epsilon(keep_probability: float, *, num_classes: int, labels_per_report: int = 1) -> float:
    """ε = K · ln(1 + Cβ/(1 − β)): the LDP guarantee of one report of K labels kept with probability β."""
    beta = check_probability("keep_probability", keep_probability)
    num_classes = check_int_at_least("num_classes", num_classes, 2)
    labels_per_report = check_int_at_least("labels_per_report", labels_per_report, 1)
    return labels_per_report * math.log1p(num_classes * beta / (1.0 - beta))


def _check_counts(name: str, counts: object) -> np.ndarray:
    array = np.asarray(counts)
    if array.ndim < 1 or array.shape[-1] < 2:
        raise ValueError(f"{name} must have the classes on its last axis (at least 2), got shape {array.shape}")
    return check_nonnegative_int_array(name, array, ndim=array.ndim)


def randomized_response_estimate(reported_counts: object, *, keep_probability: float) -> np.ndarray:
    """The unbiased estimate of the true label counts from randomized-response counts (PrivateKT Eq. 3).

    With n reports of which r_c say class c, E[r_c] = β·n_c + (1 − β)·n/C, so

        n̂_c = (r_c − (1 − β)·n/C) / β,   n = Σ_c r_c.

    ``reported_counts`` has the C classes on its last axis (one row per public
    example, for instance); the estimate may be negative or fractional.
    """
    beta = check_probability("keep_probability", keep_probability, open_high=False)
    counts = _check_counts("reported_counts", reported_counts).astype(float)
    reports = counts.sum(axis=-1, keepdims=True)
    return (counts - (1.0 - beta) * reports / counts.shape[-1]) / beta


def randomized_response_variance(true_counts: object, *, keep_probability: float) -> np.ndarray:
    """Variance of :func:`randomized_response_estimate` given the true label counts n_c (for utility predictions).

    Each report says c independently with probability p₁ = β + (1 − β)/C if its
    true label is c and p₀ = (1 − β)/C otherwise, so

        Var[n̂_c] = (n_c·p₁(1 − p₁) + (n − n_c)·p₀(1 − p₀)) / β².
    """
    beta = check_probability("keep_probability", keep_probability, open_high=False)
    counts = _check_counts("true_counts", true_counts).astype(float)
    reports = counts.sum(axis=-1, keepdims=True)
    p_other = (1.0 - beta) / counts.shape[-1]
    p_true = beta + p_other
    return (counts * p_true * (1.0 - p_true) + (reports - counts) * p_other * (1.0 - p_other)) / beta**2


@register
@dataclass(frozen=True, eq=False, init=False)
class RandomizedResponse(Mechanism):
    """Clients' one-hot labels released through k-ary randomized response (PrivateKT).

    Each report holds K = ``labels_per_report`` labels (one per public example a
    client labels in a round); each label is kept with probability β and
    otherwise replaced by a uniform draw over the C classes. Give exactly one of
    ``epsilon`` (per report; stored as ``epsilon_per_report``) or
    ``keep_probability`` (β); the other is derived:

        β = (e^{ε/K} − 1)/(e^{ε/K} − 1 + C),   ε = K·ln(1 + Cβ/(1 − β)).

    **Unit.** A report is ε-LDP for the client: the client's whole data set may
    change every one of its K labels (PrivateKT Lemma 1), so the guarantee is
    party-level (replace-one: one client's data replaced) by default. It is also
    an example-level guarantee (``unit="example"``), since one example can change
    the local model and so every label; the number is the same.

    **Composition over ``reports``** (T, the rounds a client joins), all three shown:

    * pure: ε·T (:meth:`pure_epsilon`);
    * RDP: dp-accounting's exact RDP of ``RandomizedResponseDpEvent(1 − β, C)``
      under REPLACE_ONE, composed K·T times (``analysis="tight"``);
    * PLD: the same event's privacy loss distribution, self-composed K·T times
      by privfed (:meth:`dp_event`; dp-accounting 0.6.0's ``PLDAccountant``
      ignores ``count`` for this event and would return the one-use ε).

    ``analysis="classic"`` uses only the pure per-label guarantee ε/K, through
    RDP ≤ min(α(ε/K)²/2, ε/K) per label (Bun & Steinke 2016).

    PrivateKT argues that "the accumulation of privacy budgets during different
    knowledge transfer rounds" is avoided "based on the model shuffling method";
    no shuffler runs in the authors' code or in privfed, so every round a client
    joins is composed. What a trusted shuffler would give is
    :class:`~privfed.accounting.shuffling.ShuffledRandomizedResponse`.
    """

    num_classes: int
    keep_probability: float
    epsilon_per_report: float
    labels_per_report: int
    reports: int
    unit: str

    kind: ClassVar[str] = "randomized_response"

    def __init__(
        self,
        num_classes: int,
        *,
        epsilon: float | None = None,
        keep_probability: float | None = None,
        labels_per_report: int = 1,
        reports: int = 1,
        unit: str = "party",
    ) -> None:
        # A hand-written __init__: the ``epsilon`` argument must not become a
        # field, which would shadow :meth:`Mechanism.epsilon`.
        num_classes = check_int_at_least("num_classes", num_classes, 2)
        labels = check_int_at_least("labels_per_report", labels_per_report, 1)
        reports = check_int_at_least("reports", reports, 1)
        check_choice("unit", unit, UNITS)
        if (epsilon is None) == (keep_probability is None):
            raise ValueError(
                "give exactly one of epsilon (per report, > 0) or keep_probability (in (0, 1)); "
                f"got epsilon={epsilon!r}, keep_probability={keep_probability!r}"
            )
        if epsilon is not None:
            epsilon = check_at_most(
                "epsilon", check_positive_finite("epsilon", epsilon), MAX_EPSILON_PER_ANSWER * labels,
                f"ε per label = epsilon/labels_per_report must be <= {MAX_EPSILON_PER_ANSWER:g}, where e^ε still fits "
                f"a float64; labels_per_report = {labels}",
            )
            beta = randomized_response_keep_probability(epsilon, num_classes=num_classes, labels_per_report=labels)
        else:
            beta = check_probability("keep_probability", keep_probability)
            epsilon = randomized_response_epsilon(beta, num_classes=num_classes, labels_per_report=labels)
        for name, value in (("num_classes", num_classes), ("keep_probability", beta), ("epsilon_per_report", epsilon),
                            ("labels_per_report", labels), ("reports", reports), ("unit", unit)):
            object.__setattr__(self, name, value)

    @property
    def relations(self) -> frozenset[str]:
        """Party level ``{"replace_one"}``: ε-LDP bounds a report's output for any two inputs of its
        sender, not a sender's reports appearing or vanishing. Example level both: the sender reports
        either way, and an example added, removed or replaced changes only its sender's input."""
        return ALL_RELATIONS if self.unit == "example" else frozenset({"replace_one"})

    @property
    def data_dependent(self) -> bool:
        return False

    @property
    def num_queries(self) -> int:
        """Labels released: K per report, over every report."""
        return self.labels_per_report * self.reports

    @property
    def epsilon_per_label(self) -> float:
        """ε/K = ln(1 + Cβ/(1 − β)): the pure LDP guarantee of one label."""
        return self.epsilon_per_report / self.labels_per_report

    @property
    def noise_parameter(self) -> float:
        """dp-accounting's randomized-response noise parameter, 1 − β."""
        return 1.0 - self.keep_probability

    def dp_event(self) -> dp_accounting.DpEvent:
        """``RandomizedResponseDpEvent(1 − β, C)`` self-composed K·T times (REPLACE_ONE)."""
        import dp_accounting

        return dp_accounting.SelfComposedDpEvent(
            dp_accounting.RandomizedResponseDpEvent(noise_parameter=self.noise_parameter, num_buckets=self.num_classes),
            self.num_queries,
        )

    def rdp(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        orders = check_orders(orders)
        check_choice("analysis", analysis, ANALYSES)
        if analysis == "classic":
            per_label = self.epsilon_per_label
            return self.num_queries * np.minimum(0.5 * per_label * per_label * orders, per_label)
        return randomized_response_rdp(self.noise_parameter, self.num_classes, orders, count=self.num_queries)

    def rdp_data_independent(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        return self.rdp(orders, analysis=analysis)

    def pure_epsilon(self) -> float:
        """Basic composition over reports: ε·T."""
        return self.epsilon_per_report * self.reports

    def parameters(self) -> dict[str, Any]:
        return {
            "num_classes": self.num_classes,
            "keep_probability": self.keep_probability,
            "epsilon_per_report": self.epsilon_per_report,
            "epsilon_per_label": self.epsilon_per_label,
            "noise_parameter": self.noise_parameter,
            "labels_per_report": self.labels_per_report,
            "reports": self.reports,
        }

    @classmethod
    def from_parameters(
        cls, parameters: Mapping[str, Any], *, unit: str, evidence: Mapping[str, np.ndarray] | None = None
    ) -> "RandomizedResponse":
        """Rebuild from recorded parameters: from ``keep_probability`` (the noise applied) when recorded,
        else ``epsilon``."""
        given = ({"keep_probability": parameters["keep_probability"]} if "keep_probability" in parameters
                 else {"epsilon": parameters.get("epsilon")})
        return cls(
            parameters["num_classes"],
            **given,
            labels_per_report=parameters.get("labels_per_report", 1),
            reports=parameters.get("reports", 1),
            unit=unit,
        )
