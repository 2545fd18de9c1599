"""The closed forms of :mod:`privfed.accounting.rdp_closed_forms` equal dp-accounting's bit for bit.

Every comparison is exact (``np.array_equal`` on the float64 bits, ``==`` on ε and the order): the audit's ε
recomputation uses these closed forms, and an ε that moved in its last digit would fail a bundle written with
dp-accounting's numbers.
"""

from __future__ import annotations

import logging
import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant
from privfed.accounting.orders import CLASSIC_ORDERS, TIGHT_ORDERS
from privfed.accounting.rdp_closed_forms import laplace_rdp, randomized_response_rdp, rdp_epsilon

#: Orders around every branch of the closed forms (α = 1, 1 < α < 1.1, α ≤ 1.01, large α) and privfed's grids.
ORDERS = np.unique(np.concatenate([TIGHT_ORDERS, CLASSIC_ORDERS, [1.0, 1.0001, 1.005, 1.01, 1.05, 1.0999, 1.1, 1.5,
                                                                  2.5, 64.0, 256.0, 1024.0, 4096.0]]))
RR_ORDERS = ORDERS[ORDERS > 1]
_REPLACE_ONE = dp_accounting.NeighboringRelation.REPLACE_ONE


def _dp_accounting_rdp(event, orders, count=1, relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE):
    accountant = rdp_privacy_accountant.RdpAccountant(orders=[float(a) for a in orders],
                                                      neighboring_relation=relation)
    accountant.compose(event, count)
    return np.asarray(accountant.rdp, dtype=float)


@pytest.mark.parametrize("noise_multiplier", [1e-3, 0.05, 0.5, 1.0, 1 / 0.3, 10.0, 1 / (7 * 0.05), 1e4, 1e8])
@pytest.mark.parametrize("count", [1, 2, 3, 1000, 10**9])
def test_laplace_rdp_is_dp_accountings_bit_for_bit(noise_multiplier, count):
    expected = _dp_accounting_rdp(dp_accounting.LaplaceDpEvent(noise_multiplier), ORDERS, count)
    assert np.array_equal(laplace_rdp(noise_multiplier, ORDERS, count=count), expected)


@pytest.mark.parametrize("noise_parameter", [0.0, 1e-12, 1e-4, 0.01, 0.2, 0.5, 0.73, 0.999, 1.0,
                                             2.0 / (math.exp(1.0) + 1.0)])
@pytest.mark.parametrize("num_buckets", [1, 2, 3, 10, 1000])
@pytest.mark.parametrize("count", [1, 7, 10**6])
def test_randomized_response_rdp_is_dp_accountings_bit_for_bit(noise_parameter, num_buckets, count):
    event = dp_accounting.SelfComposedDpEvent(dp_accounting.RandomizedResponseDpEvent(noise_parameter, num_buckets),
                                              count)
    expected = _dp_accounting_rdp(event, RR_ORDERS, relation=_REPLACE_ONE)
    assert np.array_equal(randomized_response_rdp(noise_parameter, num_buckets, RR_ORDERS, count=count), expected,
                          equal_nan=True)


def test_randomized_response_at_an_infinite_order_is_the_pure_epsilon():
    expected = _dp_accounting_rdp(dp_accounting.RandomizedResponseDpEvent(0.3, 4), [np.inf], relation=_REPLACE_ONE)
    assert np.array_equal(randomized_response_rdp(0.3, 4, np.array([np.inf])), expected)


def _curves():
    """RDP curves of every shape the conversion meets: Laplace and randomized response over privfed's grids, tiny
    curves (the KL branch), huge ones, infinities, zeros and a negative value."""
    for multiplier in (1e-3, 0.5, 3.0, 1e3):
        yield ORDERS, laplace_rdp(multiplier, ORDERS, count=2)
    for p in (0.01, 0.5, 0.99):
        yield RR_ORDERS, randomized_response_rdp(p, 10, RR_ORDERS, count=50)
    yield TIGHT_ORDERS, np.full(len(TIGHT_ORDERS), 1e-12)
    yield TIGHT_ORDERS, np.where(TIGHT_ORDERS < 3, np.inf, 0.01 * TIGHT_ORDERS)
    yield TIGHT_ORDERS, np.zeros(len(TIGHT_ORDERS))
    yield CLASSIC_ORDERS, np.array([0.1, -1e-17, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    yield np.array([1.0, 1.005, 1.01]), np.array([0.5, 0.5, 0.5])


@pytest.mark.parametrize("delta", [0.0, 1e-300, 1e-12, 1e-5, 0.01, 0.5, 0.999999])
def test_rdp_epsilon_is_dp_accountings_compute_epsilon_bit_for_bit(delta):
    logging.getLogger("absl").disabled = True  # dp-accounting's warning about the negative value
    try:
        for orders, curve in _curves():
            orders, curve = [float(a) for a in orders], [float(r) for r in curve]
            expected = rdp_privacy_accountant.compute_epsilon(orders, curve, delta)
            assert rdp_epsilon(orders, curve, delta) == expected
            assert type(rdp_epsilon(orders, curve, delta)[0]) is type(expected[0])
    finally:
        logging.getLogger("absl").disabled = False


@pytest.mark.parametrize(("call", "match"), [
    (lambda: laplace_rdp(1.0, np.array([0.5])), "order must be finite and >= 1, got 0.5"),
    (lambda: laplace_rdp(0.0, np.array([2.0])), "division by zero"),
    (lambda: randomized_response_rdp(1.5, 3, np.array([2.0])), r"noise_parameter must be in \[0, 1\], got 1.5"),
    (lambda: randomized_response_rdp(0.5, 0, np.array([2.0])), "num_buckets must be >= 1, got 0"),
    (lambda: randomized_response_rdp(0.5, 3, np.array([1.0])), "order must be > 1, got 1.0"),
    (lambda: rdp_epsilon([2.0], [0.1], -1e-5), "delta must be >= 0, got -1e-05"),
    (lambda: rdp_epsilon([2.0, 3.0], [0.1], 1e-5), "same length, got 2 and 1"),
    (lambda: rdp_epsilon([0.5], [0.1], 1e-5), "every order must be >= 1, got 0.5"),
])
def test_bad_input_fails_in_one_line(call, match):
    with pytest.raises((ValueError, ZeroDivisionError), match=match):
        call()
