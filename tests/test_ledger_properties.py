"""Property tests: a ledger read back from its JSON accounts exactly as the original, for any releases."""

from __future__ import annotations

import math
import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from privfed.accounting import LaplaceNoisyMax, Ledger

from privfed import accounting


@st.composite
def releases(draw):
    """A list of ("release", {unit: mechanism}) or ("unaccounted", description)."""
    items = []
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.integers(0, 4)) == 0:
            items.append(("unaccounted", draw(st.text(min_size=1, max_size=20).filter(str.strip))))
            continue
        queries, classes = draw(st.integers(1, 6)), draw(st.integers(2, 4))
        votes = np.array(draw(st.lists(st.integers(0, 30), min_size=queries * classes, max_size=queries * classes)))
        gamma = draw(st.floats(0.01, 1.0))
        units = draw(st.sets(st.sampled_from(["example", "party"]), min_size=1))
        items.append(("release", {
            unit: LaplaceNoisyMax(votes.reshape(queries, classes), gamma, draw(st.integers(1, 3)), unit=unit)
            for unit in units
        }))
    return items


def _ledger(items, delta: float) -> Ledger:
    ledger = Ledger(delta=delta)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # single-query entries are fine here
        for kind, item in items:
            if kind == "unaccounted":
                ledger.record_unaccounted(item)
            else:
                ledger.record(item)
    return ledger


@settings(max_examples=40, deadline=None)
@given(items=releases(), delta=st.floats(1e-9, 1e-2), analysis=st.sampled_from(["tight", "classic"]),
       unit=st.sampled_from(["example", "party"]))
def test_round_trip_accounts_identically(items, delta, analysis, unit):
    ledger = _ledger(items, delta)
    loaded = Ledger.from_json(ledger.to_json())
    assert loaded.account(analysis=analysis, unit=unit) == ledger.account(analysis=analysis, unit=unit)
    assert loaded.account() == ledger.account()


@settings(max_examples=25, deadline=None)
@given(items=releases(), unit=st.sampled_from(["example", "party"]))
def test_ledger_total_is_the_sequential_composition_of_its_unit(items, unit):
    ledger = _ledger(items, 1e-5)
    members = [release[unit] for kind, release in items if kind == "release" and unit in release]
    covered = all(kind == "release" and unit in release for kind, release in items)
    report = ledger.account(unit=unit)
    if not covered:  # something released is covered by no mechanism at this unit: no finite guarantee
        assert report.epsilon == report.epsilon_data_independent == math.inf
        assert report.uncovered
    elif members:
        expected = accounting.account(members, delta=1e-5)
        assert math.isclose(report.epsilon, expected.epsilon, rel_tol=1e-9)
        assert math.isclose(report.epsilon_data_independent, expected.epsilon_data_independent, rel_tol=1e-9)
    else:
        assert report.epsilon == 0.0
    assert len(report.mechanisms) == len(members)
    assert sum("UNACCOUNTED" in note for note in report.notes) == sum(kind == "unaccounted" for kind, _ in items)
