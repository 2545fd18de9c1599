"""The accountant's contract: composition, units, parallel composition, reports, bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from privfed.accounting import CLASSIC_ORDERS, TIGHT_ORDERS, LaplaceNoisyMax, account, compose_parallel
from privfed.accounting.registry import mechanism_from_record
from privfed.accounting.report import round_up

import privfed

VOTES = np.array([[40, 5, 5], [20, 18, 12], [30, 30, 0], [49, 1, 0]])


def test_empty_composition_spends_nothing() -> None:
    report = account([], delta=1e-5)
    assert report.epsilon == 0.0 and report.unit is None and not report.data_dependent


def test_sequential_composition_adds_rdp_curves() -> None:
    first, second = LaplaceNoisyMax(VOTES, 0.1), LaplaceNoisyMax(VOTES[:2], 0.3, 2)
    for analysis in ("classic", "tight"):
        joint = account([first, second], delta=1e-5, analysis=analysis)
        grid = np.array(joint.orders)
        np.testing.assert_allclose(joint.rdp, first.rdp(grid, analysis=analysis) + second.rdp(grid, analysis=analysis))
        assert len(joint.mechanisms) == 2
        assert joint.epsilon >= max(row.epsilon for row in joint.mechanisms)


def test_composing_two_halves_equals_the_whole() -> None:
    whole = account(LaplaceNoisyMax(VOTES, 0.1), delta=1e-5)
    halves = account([LaplaceNoisyMax(VOTES[:2], 0.1), LaplaceNoisyMax(VOTES[2:], 0.1)], delta=1e-5)
    assert halves.epsilon == pytest.approx(whole.epsilon, rel=1e-12)


def test_default_order_grids() -> None:
    assert account(LaplaceNoisyMax(VOTES, 0.1), delta=1e-5, analysis="classic").orders == tuple(range(2, 10))
    assert set(CLASSIC_ORDERS) <= set(TIGHT_ORDERS) and TIGHT_ORDERS.min() < 2


def test_units_never_compose_across() -> None:
    with pytest.raises(ValueError, match="same unit"):
        account([LaplaceNoisyMax(VOTES, 0.1), LaplaceNoisyMax(VOTES, 0.1, unit="party")], delta=1e-5)


def test_non_mechanisms_are_refused() -> None:
    with pytest.raises(TypeError, match="mechanisms"):
        account([LaplaceNoisyMax(VOTES, 0.1), "votes"], delta=1e-5)
    with pytest.raises(TypeError, match="mechanisms"):
        account(3, delta=1e-5)


def test_parallel_composition_is_the_max_over_parties() -> None:
    parties = [LaplaceNoisyMax(VOTES, 0.1), LaplaceNoisyMax(VOTES, 0.3), LaplaceNoisyMax(VOTES[:1], 0.2)]
    for analysis in ("classic", "tight"):
        alone = [account(p, delta=1e-5, analysis=analysis).epsilon for p in parties]
        parallel = account(compose_parallel(parties), delta=1e-5, analysis=analysis)
        grid = np.array(parallel.orders)
        np.testing.assert_allclose(parallel.rdp, np.max([p.rdp(grid, analysis=analysis) for p in parties], axis=0))
        # Converting the per-order maximum is never below the largest member's ε, and equals it
        # when one member dominates at every order.
        assert parallel.epsilon >= max(alone) * (1 - 1e-12)
        dominated = account(compose_parallel([parties[1], parties[0]]), delta=1e-5, analysis=analysis)
        assert dominated.epsilon == pytest.approx(alone[1], rel=1e-12)


def test_parallel_composition_composes_sequentially_by_its_curve() -> None:
    parallel = compose_parallel([LaplaceNoisyMax(VOTES, 0.1), LaplaceNoisyMax(VOTES, 0.2)])
    joint = account([parallel, LaplaceNoisyMax(VOTES, 0.1)], delta=1e-5)
    grid = np.array(joint.orders)
    np.testing.assert_allclose(joint.rdp, parallel.rdp(grid) + LaplaceNoisyMax(VOTES, 0.1).rdp(grid))


def test_parallel_composition_refuses_mixed_units_and_empty() -> None:
    with pytest.raises(ValueError, match="same unit"):
        compose_parallel([LaplaceNoisyMax(VOTES, 0.1), LaplaceNoisyMax(VOTES, 0.1, unit="party")])
    with pytest.raises(ValueError, match="at least one"):
        compose_parallel([])


def test_report_is_json_serialisable_and_labels_data_dependence() -> None:
    report = account(LaplaceNoisyMax(VOTES, 0.1, 2, unit="party"), delta=1e-5)
    data = json.loads(json.dumps(report.to_dict()))
    assert data["unit"] == "party" and data["data_dependent"] is True
    assert data["mechanisms"][0]["parameters"]["votes_per_unit"] == 2
    assert "votes" not in data["mechanisms"][0]["parameters"]
    text = str(report)
    assert "party-level" in text and "DATA-DEPENDENT" in text and "tight analysis" in text
    assert round_up(report.epsilon) in text
    np.testing.assert_allclose(data["log_moments"], np.array(data["rdp"]) * (np.array(data["orders"]) - 1))


def test_privfed_reexports_the_core() -> None:
    assert privfed.account is account and privfed.LaplaceNoisyMax is LaplaceNoisyMax
    assert privfed.compose_parallel is compose_parallel


@pytest.mark.parametrize("value", [3.72, 0.123449, 1e-7, 12345.678, 2.0, 0.1 + 0.2, 7.000000001])
def test_printed_epsilon_is_never_rounded_down(value: float) -> None:
    assert float(round_up(value)) >= value
    assert float(round_up(value)) <= value * (1 + 1e-3)


def test_mechanisms_rebuild_from_records_with_evidence() -> None:
    parallel = compose_parallel(
        [LaplaceNoisyMax(VOTES, 0.1, unit="party"), LaplaceNoisyMax(VOTES[:2], 0.2, unit="party")]
    )
    record = json.loads(json.dumps({"kind": parallel.kind, "unit": parallel.unit, "parameters": parallel.parameters()}))
    rebuilt = mechanism_from_record(record, evidence=parallel.evidence())
    assert account(rebuilt, delta=1e-6).epsilon == account(parallel, delta=1e-6).epsilon
    with pytest.raises(ValueError, match="evidence"):
        mechanism_from_record(record["parameters"]["members"][0])
    with pytest.raises(ValueError, match="kind"):
        mechanism_from_record({"kind": "no_such_mechanism"})


BAD_INPUTS = [
    ({"gamma": 0.0}, "gamma"),
    ({"gamma": -0.1}, "gamma"),
    ({"gamma": math.inf}, "gamma"),
    ({"gamma": math.nan}, "gamma"),
    ({"votes": np.array([1, 2, 3])}, "votes"),
    ({"votes": np.array([[1, -2]])}, "votes"),
    ({"votes": np.array([[1.5, 2.0]])}, "votes"),
    ({"votes": np.array([[1], [2]])}, "2 classes"),
    ({"votes": np.zeros((0, 3), dtype=int)}, "at least one query"),
    ({"votes_per_unit": 0}, "votes_per_unit"),
    ({"unit": "hospital"}, "unit"),
]


@pytest.mark.parametrize(("change", "message"), BAD_INPUTS)
def test_bad_mechanism_input_is_a_value_error_naming_the_argument(change: dict, message: str) -> None:
    arguments = {"votes": VOTES, "gamma": 0.1, "votes_per_unit": 1, "unit": "example"} | change
    with pytest.raises(ValueError, match=message):
        LaplaceNoisyMax(arguments.pop("votes"), arguments.pop("gamma"), arguments.pop("votes_per_unit"), **arguments)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"delta": 0.0}, "delta"),
        ({"delta": 1.0}, "delta"),
        ({"delta": -1e-5}, "delta"),
        ({"orders": [2.0, 1.0]}, "orders"),
        ({"orders": []}, "orders"),
        ({"analysis": "loose"}, "analysis"),
    ],
)
def test_bad_accounting_input_is_a_value_error(arguments: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        account(LaplaceNoisyMax(VOTES, 0.1), **({"delta": 1e-5} | arguments))


def test_float_votes_with_integral_values_are_accepted() -> None:
    as_float = account(LaplaceNoisyMax(VOTES.astype(float), 0.1), delta=1e-5)
    assert as_float.epsilon == account(LaplaceNoisyMax(VOTES, 0.1), delta=1e-5).epsilon


def test_noisy_max_repr_never_prints_the_votes() -> None:
    from privfed.accounting import GaussianNoisyMax

    for mechanism in (LaplaceNoisyMax(VOTES, 0.1), GaussianNoisyMax(VOTES, 3.0)):
        text = repr(mechanism)
        assert "4 queries × 3 classes" in text and "49" not in text and "array" not in text
