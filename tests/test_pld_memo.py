"""The PLD memo: the same ε as without it, no PLD rebuilt for a question already answered, bounded."""

from __future__ import annotations

import dp_accounting
import pytest
from privfed.accounting import GaussianNoisyMax, Ledger, RandomizedResponse, _dp_accounting
from privfed.accounting._dp_accounting import PLDMemo


@pytest.fixture
def counted(monkeypatch):
    """A fresh memo, and a count of the PLDs built."""
    built = []
    original = _dp_accounting.event_pld

    def event_pld(event, **options):
        built.append(repr(event))
        return original(event, **options)

    monkeypatch.setattr(_dp_accounting, "event_pld", event_pld)
    monkeypatch.setattr(_dp_accounting, "PLD_MEMO", PLDMemo(256))
    return built


def test_the_memo_gives_the_same_epsilon_and_builds_each_pld_once(counted, monkeypatch) -> None:
    import numpy as np

    ledger = Ledger(delta=1e-5)
    votes = np.tile([[8, 1, 1]], (200, 1))
    ledger.record(GaussianNoisyMax(votes, 10.0, 1, unit="party"), note="a release")
    ledger.record(RandomizedResponse(10, epsilon=1.0, reports=5), note="labels")  # no closed form: a PLD
    first = [ledger.account(unit="party").epsilon for _ in range(3)]
    builds = len(counted)
    assert builds >= 1 and first[0] == first[1] == first[2]
    Ledger.from_dict(ledger.to_dict()).account(unit="party")  # a copy of the ledger asks the same question
    assert len(counted) == builds
    monkeypatch.setattr(_dp_accounting, "PLD_MEMO", PLDMemo(0))  # no memo: rebuilt, the same number
    assert ledger.account(unit="party").epsilon == first[0]
    assert len(counted) > builds  # (without the memo one account() builds the same PLD twice)


def test_a_release_with_the_same_public_parameters_builds_no_new_pld(counted) -> None:
    """GNMax's event depends only on σ, k and the number of queries: composed with randomized response (a PLD, no
    closed form), other votes of the same shape reuse the composition's PLD."""
    import numpy as np
    from privfed.accounting import account

    rng = np.random.default_rng(0)
    labels = RandomizedResponse(10, epsilon=1.0, reports=5, unit="example")
    first = account([GaussianNoisyMax(rng.multinomial(30, [0.8, 0.1, 0.1], size=500), 25.0), labels], delta=1e-5)
    builds = len(counted)
    second = account([GaussianNoisyMax(rng.multinomial(30, [0.4, 0.3, 0.3], size=500), 25.0), labels], delta=1e-5)
    assert builds >= 1 and len(counted) == builds
    assert second.epsilon_data_independent == first.epsilon_data_independent
    account([GaussianNoisyMax(rng.multinomial(30, [0.4, 0.3, 0.3], size=501), 25.0), labels], delta=1e-5)
    assert len(counted) > builds  # another number of queries is another mechanism


def test_the_memo_keys_every_input_and_drops_the_least_recently_used(counted) -> None:
    memo = PLDMemo(2)
    gaussian = dp_accounting.GaussianDpEvent(3.0)
    values = [memo.epsilon(gaussian, delta, None) for delta in (1e-5, 1e-6)]
    assert values[0] < values[1] and len(counted) == 2  # another δ is another question
    assert memo.epsilon(dp_accounting.GaussianDpEvent(3.0), 1e-5, None) == values[0] and len(counted) == 2
    memo.epsilon(dp_accounting.GaussianDpEvent(3.5), 1e-5, None)  # a third key drops (gaussian, 1e-6)
    memo.epsilon(gaussian, 1e-6, None)
    assert len(counted) == 4
    assert memo.epsilon(dp_accounting.SelfComposedDpEvent(gaussian, 4), 1e-5, None) > values[0]


def test_unconverged_fractional_orders_are_excluded_quietly(caplog) -> None:
    """dp-accounting logs one line per fractional order whose series does not converge (q = 0.1, σ = 0.5): the
    order's RDP is +inf (excluded, still a valid bound) and nothing is printed; other absl records pass."""
    import logging

    import numpy as np
    from privfed.accounting.orders import TIGHT_ORDERS

    event = dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(0.5))
    with caplog.at_level(logging.WARNING, logger="absl"):
        rdp = _dp_accounting.event_rdp(event, TIGHT_ORDERS)
        logging.getLogger("absl").warning("another notice")
    assert [record.getMessage() for record in caplog.records] == ["another notice"]
    assert np.isinf(rdp).any() and np.isfinite(rdp).any()
