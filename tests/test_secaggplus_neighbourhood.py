"""SecAgg+'s window (privfed.federation.secaggplus_neighbourhood): logarithmic, and the guarantee it states holds.

The guarantee is checked by brute force on the ring graph Flower 1.41's ``SecAggPlusWorkflow.setup_stage`` builds
(each node's neighbours: the h = num_shares >> 1 nodes on each side of it in a shuffled order, and itself): for
every placement of the colluders and every dropout pattern that Flower's threshold check lets complete, the
colluders hold fewer than t shares of any other party's secrets and the honest parties that took part stay
connected, so the coordinator and its colluders learn their sum only.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from privfed.federation.secaggplus_neighbourhood import Neighbourhood, secaggplus_neighbourhood


def rotate(bits: np.ndarray, by: int, n: int) -> np.ndarray:
    """Each n-bit ring set in ``bits`` turned by ``by`` positions (bit i → bit i + by mod n)."""
    by %= n
    full = np.uint32((1 << n) - 1)
    return ((bits << np.uint32(by)) | (bits >> np.uint32(n - by))) & full if by else bits


def neighbours_of(bits: np.ndarray, half: int, n: int) -> np.ndarray:
    """The ring positions within ``half`` of a position in ``bits``: the windows ``setup_stage`` builds (the
    h = num_shares >> 1 nodes on each side of a node in Flower's shuffled order, and the node itself)."""
    reach = bits.copy()
    for offset in range(1, half + 1):
        reach |= rotate(bits, offset, n) | rotate(bits, -offset, n)
    return reach


@pytest.mark.parametrize("n,colluders", [(14, 13), (14, 0), (16, 1), (16, 2)])
def test_colluders_learn_only_the_honest_sum_under_every_dropout_flower_completes(n, colluders):
    """Every coalition of c (one member at position 0: the ring is symmetric) and every set of dropped parties,
    as n-bit sets: where each window keeps t parties (else Flower halts and releases nothing), the coalition holds
    fewer than t shares of anyone's secrets and the honest parties that took part are connected."""
    window = secaggplus_neighbourhood(n, colluders=colluders)
    assert not window.complete and window.shares % 2 == 1 and window.colluders < window.threshold
    half = window.shares >> 1
    masks = np.arange(1 << n, dtype=np.uint32)
    single = [np.uint32(1 << i) for i in range(n)]
    windows = [neighbours_of(np.array([position], dtype=np.uint32), half, n)[0] for position in single]
    completed = 0
    for rest in itertools.combinations(range(1, n), max(0, window.colluders - 1)):
        coalition = np.uint32(sum(1 << i for i in ({0, *rest} if window.colluders else ())))
        assert all(np.bitwise_count(coalition & w) < window.threshold for w in windows)
        dropped = masks[(masks & coalition) == 0]
        active = ~dropped & np.uint32((1 << n) - 1)
        keeps = np.ones(len(dropped), dtype=bool)
        for w in windows:
            keeps &= np.bitwise_count(active & w) >= window.threshold
        honest = active[keeps] & ~coalition
        completed += int(keeps.sum())
        # grow each honest set's part from its lowest member; connected iff the part is the whole set
        part = honest & (~honest + np.uint32(1))
        for _ in range(n):
            part = neighbours_of(part, half, n) & honest
        assert np.array_equal(part, honest)
    assert completed > 0


@pytest.mark.parametrize("n", [10, 20, 50, 100, 200, 1000])
def test_the_window_is_logarithmic_and_survives_the_dropouts_it_states(n):
    window = secaggplus_neighbourhood(n, colluders=n - 1)
    assert window.shares == 2 * math.ceil(math.log2(n)) + 1 < n
    assert window.dropouts == math.ceil(math.log2(n)) - 1 and window.colluders == 0
    # any `dropouts` parties may drop: every window keeps at least t
    assert window.shares - window.dropouts >= window.threshold
    assert window.workflow_arguments() == {"num_shares": window.shares, "reconstruction_threshold": window.threshold}


def test_a_larger_coalition_widens_the_window_and_small_federations_share_with_everyone():
    wide = secaggplus_neighbourhood(200, colluders=10)
    assert wide == Neighbourhood(nodes=200, shares=37, threshold=30, colluders=10) and wide.dropouts == 7
    everyone = secaggplus_neighbourhood(5, colluders=3)
    assert everyone == Neighbourhood(nodes=5, shares=5, threshold=4, colluders=3) and everyone.dropouts == 1
    assert everyone.workflow_arguments() == {"num_shares": 1.0, "reconstruction_threshold": 0.8}
    assert secaggplus_neighbourhood(20, colluders=18).complete  # two honest parties left: every share is needed


@pytest.mark.parametrize("arguments,message", [
    ({"n_nodes": 1, "colluders": 0}, r"n_nodes must be an integer of at least 2 parties, got 1"),
    ({"n_nodes": 5.0, "colluders": 0}, r"n_nodes must be an integer of at least 2 parties, got 5\.0"),
    ({"n_nodes": 5, "colluders": -1}, r"colluders must be a non-negative integer number of parties, got -1"),
])
def test_bad_input(arguments, message):
    with pytest.raises(ValueError, match=message):
        secaggplus_neighbourhood(**arguments)
