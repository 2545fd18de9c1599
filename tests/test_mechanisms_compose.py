"""All mechanisms in one account() call; PLD versus RDP; mechanism files (JSON/TOML)."""

from __future__ import annotations

import json
from pathlib import Path

import dp_accounting
import numpy as np
import pytest
from privfed.accounting._dp_accounting import event_pld_epsilon
from privfed.accounting.conversion import tight_epsilon
from privfed.accounting.mechanism import Mechanism

import privfed

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _votes(rows: int = 30, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.multinomial(50, [0.7, 0.1, 0.1, 0.1], size=rows)


def _all_example_level() -> list[Mechanism]:
    return [
        privfed.DPSGD(1.0, 0.01, 500),
        privfed.GaussianNoisyMax(_votes(), 40.0),
        privfed.LaplaceNoisyMax(_votes(), 0.05),
        privfed.RandomizedResponse(10, epsilon=0.5, labels_per_report=5, reports=2, unit="example"),
        privfed.QuantizedLaplaceEnsemble(10, 0.01, 1.0, 50, unit="example"),
    ]


def test_base_mechanism_has_no_event_and_no_notes():
    assert privfed.LaplaceNoisyMax(_votes(2), 0.1).dp_event() is None
    assert privfed.compose_parallel([privfed.DPSGD(1.0, 0.1, 5)]).dp_event() is None
    assert privfed.DPSGD(1.0, 0.1, 5).notes() == ()


@pytest.mark.parametrize("analysis", ["tight", "classic"])
def test_all_mechanisms_compose_with_a_breakdown(analysis):
    members = _all_example_level()
    report = privfed.account(members, delta=1e-6, analysis=analysis)
    assert [row.kind for row in report.mechanisms] == [m.kind for m in members]
    assert report.unit == "example" and report.data_dependent
    orders = np.asarray(report.orders)
    np.testing.assert_allclose(report.rdp, np.sum([m.rdp(orders, analysis=analysis) for m in members], axis=0))
    # The composition costs at least as much as its most expensive member, and at most the sum of their ε.
    assert max(row.epsilon for row in report.mechanisms) <= report.epsilon + 1e-9
    assert report.epsilon <= sum(row.epsilon for row in report.mechanisms)
    assert report.epsilon <= report.epsilon_data_independent
    json.dumps(report.to_dict())


def test_pld_of_the_whole_composition_when_every_member_has_an_event():
    members = [privfed.DPSGD(1.0, 0.01, 500),
               privfed.RandomizedResponse(10, epsilon=0.5, labels_per_report=5, reports=2, unit="example"),
               privfed.QuantizedLaplaceEnsemble(10, 0.01, 1.0, 50, unit="example")]
    report = privfed.account(members, delta=1e-6)
    assert not report.data_dependent and report.method == "pld"
    rdp_epsilon, _ = tight_epsilon(np.asarray(report.orders), np.asarray(report.rdp), 1e-6)
    assert report.epsilon < rdp_epsilon
    composed = dp_accounting.ComposedDpEvent([m.dp_event() for m in members])
    assert report.epsilon == pytest.approx(event_pld_epsilon(composed, 1e-6, epsilon_hint=rdp_epsilon), rel=1e-12)
    assert all(row.method == "pld" for row in report.mechanisms)


def test_a_member_without_event_keeps_the_total_on_rdp():
    members = [privfed.DPSGD(1.0, 0.01, 500), privfed.LaplaceNoisyMax(_votes(), 0.05)]
    report = privfed.account(members, delta=1e-6)
    assert report.method == "rdp"
    assert [row.method for row in report.mechanisms] == ["pld", "rdp"]


def test_units_are_never_mixed():
    with pytest.raises(ValueError, match="same unit"):
        privfed.account([privfed.DPSGD(1.0, 0.01, 5), privfed.RandomizedResponse(4, epsilon=1.0)], delta=1e-5)


# --- mechanism files ---------------------------------------------------------------------------
def test_example_pipeline_file_loads_and_accounts():
    members = privfed.load_mechanisms(EXAMPLES / "pipeline.toml")
    assert [m.kind for m in members] == ["dpsgd", "gaussian_noisy_max"]
    np.testing.assert_array_equal(members[1].votes, np.load(EXAMPLES / "pipeline_votes.npy"))
    assert privfed.account(members, delta=1e-5).epsilon > 0


def test_json_and_toml_files_give_the_same_mechanisms(tmp_path):
    np.save(tmp_path / "votes.npy", _votes(5))
    entries = [
        {"kind": "laplace_noisy_max", "votes": "votes.npy", "gamma": 0.05, "votes_per_unit": 2},
        {"kind": "randomized_response", "unit": "example", "num_classes": 10, "epsilon": 1.0, "reports": 3},
        {"kind": "quantized_laplace_ensemble", "unit": "example", "num_classes": 3, "clip": 1.0, "gamma": 0.1,
         "num_examples": 5, "weights": [[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]]},
    ]
    (tmp_path / "spec.json").write_text(json.dumps({"mechanisms": entries}))
    (tmp_path / "spec.toml").write_text(
        "[[mechanisms]]\nkind = 'laplace_noisy_max'\nvotes = 'votes.npy'\ngamma = 0.05\nvotes_per_unit = 2\n"
        "[[mechanisms]]\nkind = 'randomized_response'\nunit = 'example'\nnum_classes = 10\nepsilon = 1.0\nreports = 3\n"
        "[[mechanisms]]\nkind = 'quantized_laplace_ensemble'\nunit = 'example'\nnum_classes = 3\nclip = 1.0\n"
        "gamma = 0.1\nnum_examples = 5\nweights = [[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]]\n"
    )
    from_json = privfed.load_mechanisms(tmp_path / "spec.json")
    from_toml = privfed.load_mechanisms(tmp_path / "spec.toml")
    for a, b in zip(from_json, from_toml, strict=True):
        assert a.describe() == b.describe()
    assert from_json[0].votes_per_unit == 2 and from_json[2].sensitivity == pytest.approx(3.0)
    assert privfed.account(from_json, delta=1e-5).mechanisms[1].pure_epsilon == pytest.approx(3.0)


@pytest.mark.parametrize(
    "document, match",
    [
        ({"mechanisms": [{"kind": "nope"}]}, "kind must be one of"),
        ({"mechanisms": [{"kind": "dpsgd", "noise_multiplier": 1.0, "sample_rate": 0.1, "step": 3}]},
         "unknown key 'step'.*did you mean 'steps'"),
        ({"mechanisms": [{"kind": "dpsgd", "noise_multiplier": 1.0, "sample_rate": 2.0, "steps": 3}]}, "sample_rate"),
        ({"mechanisms": [{"kind": "laplace_noisy_max", "votes": "missing.npy", "gamma": 0.1}]}, "does not exist"),
        ({"mechanisms": [{"kind": "laplace_noisy_max", "votes": [[1, 2]], "gamma": 0.1}]}, "must name a .npy"),
        ({"mechanisms": []}, "lists no mechanisms"),
        ({"mechanism": []}, "unknown key 'mechanism'.*did you mean 'mechanisms'"),
        ({"description": "none"}, "top-level 'mechanisms' list"),
        ({"mechanisms": [{"kind": "dpsgd", "noise_multiplier": 1.0, "sample_rate": 0.1, "steps": 3}], "delta": 1},
         "unknown key 'delta'"),
    ],
)
def test_bad_files_are_refused(tmp_path, document, match):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError, match=match):
        privfed.load_mechanisms(path)


def test_pickled_vote_files_are_refused(tmp_path):
    np.save(tmp_path / "votes.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"mechanisms": [{"kind": "laplace_noisy_max", "votes": "votes.npy", "gamma": 0.1}]}))
    with pytest.raises(ValueError, match="pickle"):
        privfed.load_mechanisms(path)


def test_wrong_suffix_is_refused(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("mechanisms: []")
    with pytest.raises(ValueError, match=r"\.json or \.toml"):
        privfed.load_mechanisms(path)
