"""DP-SGD: the Poisson-subsampled Gaussian mechanism composed over training steps.

Sources: Abadi et al., "Deep learning with differential privacy", CCS 2016
(the algorithm and the moments accountant); Mironov, Talwar, Zhang, "Rényi
differential privacy of the sampled Gaussian mechanism", 2019 (the RDP that
dp-accounting and Opacus compute). privfed delegates the numbers to dp-accounting.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar

import dp_accounting
import numpy as np
from privfed.accounting._checks import (
    check_at_most,
    check_choice,
    check_int_at_least,
    check_orders,
    check_positive_finite,
    check_probability,
)
from privfed.accounting._dp_accounting import event_rdp
from privfed.accounting.mechanism import ANALYSES, UNITS, Mechanism
from privfed.accounting.registry import register

__all__ = ["DPSGD"]

#: Smallest noise multiplier accepted: at 10⁻⁴ dp-accounting's RDP already overflows.
MIN_NOISE_MULTIPLIER = 1e-3
#: Most steps accepted (10⁹; at 10¹² dp-accounting's RDP overflows).
MAX_STEPS = 10**9


@register
@dataclass(frozen=True, eq=False)
class DPSGD(Mechanism):
    """DP-SGD training: ``steps`` Poisson-subsampled Gaussian mechanisms.

    Each step includes every example independently with probability
    q = ``sample_rate``, clips each per-example gradient to ℓ2 norm C and adds
    N(0, σ²C²) with σ = ``noise_multiplier`` to their sum. Its RDP is that of the
    sampled Gaussian mechanism (Mironov et al. 2019), composed ``steps`` times;
    the dp-accounting event is
    ``PoissonSampledDpEvent(q, GaussianDpEvent(σ))`` self-composed ``steps`` times
    (:meth:`dp_event`), so ``analysis="tight"`` also takes its PLD.

    **Unit**: example level, add-or-remove-one neighbouring (one training
    example present or absent), as Opacus and dp-accounting state DP-SGD; a
    replacement is a removal followed by an addition. For party-level DP-SGD
    (each party's data a unit, user-level sampling), pass ``unit="party"`` only
    when the party is what is sampled and clipped.

    ``analysis="classic"`` is the moments accountant of Abadi et al.: the same
    RDP curve, converted with the classic tail bound on orders 2..9.
    """

    noise_multiplier: float
    sample_rate: float
    steps: int
    _: KW_ONLY
    unit: str = "example"

    kind: ClassVar[str] = "dpsgd"

    def __post_init__(self) -> None:
        noise = check_positive_finite("noise_multiplier", self.noise_multiplier)
        if noise < MIN_NOISE_MULTIPLIER:
            raise ValueError(f"noise_multiplier must be >= {MIN_NOISE_MULTIPLIER:g} (below it the RDP of one step "
                             f"overflows a float64 and no guarantee is left to account), got {noise!r}")
        object.__setattr__(self, "noise_multiplier", noise)
        object.__setattr__(self, "sample_rate", check_probability("sample_rate", self.sample_rate, open_high=False))
        steps = check_int_at_least("steps", self.steps, 1)
        object.__setattr__(self, "steps", int(check_at_most(
            "steps", steps, MAX_STEPS, "dp-accounting's RDP of more steps overflows a float64")))
        check_choice("unit", self.unit, UNITS)

    @property
    def data_dependent(self) -> bool:
        return False

    @property
    def num_queries(self) -> int:
        """Noisy gradient steps."""
        return self.steps

    def dp_event(self) -> dp_accounting.DpEvent:
        """``PoissonSampledDpEvent(q, GaussianDpEvent(σ))`` self-composed ``steps`` times."""
        return dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(
                self.sample_rate, dp_accounting.GaussianDpEvent(self.noise_multiplier)
            ),
            self.steps,
        )

    def rdp(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        orders = check_orders(orders)
        check_choice("analysis", analysis, ANALYSES)
        return event_rdp(self.dp_event(), orders)

    def rdp_data_independent(self, orders: np.ndarray, *, analysis: str = "tight") -> np.ndarray:
        return self.rdp(orders, analysis=analysis)

    def parameters(self) -> dict[str, Any]:
        return {"noise_multiplier": self.noise_multiplier, "sample_rate": self.sample_rate, "steps": self.steps}
