"""Ledgers that dp-accounting, Opacus and Flower read and write (accounting/interop.py, dp_event_release.py)."""

from __future__ import annotations

import json
import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant
from privfed.accounting.dp_event_release import event_from_json, event_relation, event_to_json
from privfed.accounting.interop import data_independent_event, flower_mechanism
from privfed.accounting.orders import default_orders

import privfed

DELTA = 1e-5
RELATIONS = {None: dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
             "add_or_remove_one": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
             "replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE}


def _votes(queries=120, classes=10, seed=0):
    return np.random.default_rng(seed).integers(0, 10, size=(queries, classes))


def _mechanisms():
    votes = _votes()
    return {
        "laplace_noisy_max": privfed.LaplaceNoisyMax(votes, 0.05, 1),
        "laplace_noisy_max_party": privfed.LaplaceNoisyMax(votes, 0.05, 3, unit="party"),
        "gaussian_noisy_max": privfed.GaussianNoisyMax(votes, 40.0, 1),
        "confident_gnmax": privfed.ConfidentGNMax(votes, threshold=8.0, sigma_threshold=5.0, sigma=4.0),
        "dpsgd": privfed.DPSGD(1.1, 0.01, 1000),
        "randomized_response": privfed.RandomizedResponse(10, epsilon=1.0, reports=50),
        "parallel": privfed.compose_parallel([privfed.LaplaceNoisyMax(votes, 0.05, 1),
                                              privfed.LaplaceNoisyMax(votes[:60], 0.05, 1)]),
    }


def _rdp_accountant(event, orders=None):
    kwargs = {} if orders is None else {"orders": [float(a) for a in orders]}
    accountant = RdpAccountant(neighboring_relation=RELATIONS[event_relation(event)], **kwargs)
    accountant.compose(event)
    return accountant


@pytest.mark.parametrize("name", sorted(_mechanisms()))
def test_export_is_the_data_independent_curve_and_dp_accounting_epsilon_is_within_stated_factor(name):
    mechanism = _mechanisms()[name]
    ledger = privfed.Ledger(delta=DELTA, primary_unit=mechanism.unit)
    ledger.record(mechanism)
    event = ledger.to_dp_event()
    orders = default_orders("tight")
    recorded = np.asarray(ledger.entries[0].analyses[mechanism.unit].curves["tight"].rdp_data_independent)
    # dp-accounting's RDP of the exported event is privfed's data-independent curve, order by order.
    np.testing.assert_allclose(_rdp_accountant(event, orders)._rdp, recorded, rtol=1e-9)
    report = ledger.account(DELTA)
    theirs = _rdp_accountant(event).get_epsilon(DELTA)
    # Stated factor: dp-accounting's RdpAccountant (its default orders) within [0.99, 1.15] of privfed's
    # data-independent ε (privfed's grid is wider and it also takes the PLD where it has one).
    assert 0.99 * report.epsilon_data_independent <= theirs <= 1.15 * report.epsilon_data_independent
    if event_relation(event) is None:  # PLDAccountant: Gaussian/Laplace/Poisson events (see the RR test below)
        pld = PLDAccountant()
        pld.compose(event)
        assert 0.9 * report.epsilon_data_independent <= pld.get_epsilon(DELTA) <= (
            report.epsilon_data_independent * (1 + 1e-6))


def test_data_dependent_entries_are_exported_as_their_data_independent_bound():
    votes = np.tile([[40, 1, 0, 0]], (30, 1))  # strong consensus: the data-dependent ε is far smaller
    mechanism = privfed.LaplaceNoisyMax(votes, 0.1, 1)
    ledger = privfed.Ledger(delta=DELTA, primary_unit="example")
    ledger.record(mechanism)
    event = ledger.to_dp_event()
    assert event == dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(10.0), 60)
    report = ledger.account(DELTA)
    assert report.data_dependent and report.epsilon < report.epsilon_data_independent
    assert _rdp_accountant(event).get_epsilon(DELTA) >= 0.99 * report.epsilon_data_independent


def test_uncovered_releases_export_as_non_private():
    ledger = privfed.Ledger(delta=DELTA, primary_unit="example")
    ledger.record(privfed.DPSGD(1.1, 0.01, 100))
    assert math.isfinite(_rdp_accountant(ledger.to_dp_event()).get_epsilon(DELTA))
    ledger.record(privfed.GaussianNoisyMax(_votes(), 40.0, 1, unit="party"))  # not analysed at example level
    assert math.isinf(_rdp_accountant(ledger.to_dp_event()).get_epsilon(DELTA))
    plain = privfed.Ledger(delta=DELTA, primary_unit="example")
    plain.record(privfed.DPSGD(1.1, 0.01, 100))
    plain.record_unaccounted("class counts, sent in clear")
    assert isinstance(plain.to_dp_event(), dp_accounting.NonPrivateDpEvent)
    assert math.isinf(_rdp_accountant(plain.to_dp_event()).get_epsilon(DELTA))
    # A mechanism no dp-accounting event bounds is exported as ε = ∞ too, never as something smaller.
    assert isinstance(data_independent_event(privfed.SmoothSensitivityRelease(0.01, 5.0)),
                      dp_accounting.NonPrivateDpEvent)
    assert privfed.Ledger().to_dp_event() == dp_accounting.NoOpDpEvent()


def test_shuffled_randomized_response_exports_its_local_guarantee():
    mechanism = privfed.ShuffledRandomizedResponse(2.0, num_users=1000, num_classes=10, reports=10)
    event = data_independent_event(mechanism)
    local = _rdp_accountant(event, default_orders("tight"))._rdp
    assert np.all(local >= mechanism.rdp_data_independent(default_orders("tight")) * (1 - 1e-9))
    assert event.event.noise_parameter == pytest.approx(2.0 / (math.exp(2.0) + 1.0))  # binary RR at ε₀ = 2
    epsilon = _rdp_accountant(event).get_epsilon(DELTA)
    assert mechanism.central_epsilon(DELTA) <= epsilon <= 20.0 * 1.001  # ≈ basic composition of ε₀: no amplification


def test_dp_accounting_pld_accountant_drops_randomized_response_counts():
    """The gap docs/interoperability.md states: dp-accounting 0.6's PLDAccountant ignores a self-composed
    RandomizedResponseDpEvent's count, so exported randomized response must be accounted with RdpAccountant."""
    event = data_independent_event(privfed.RandomizedResponse(10, epsilon=1.0, reports=50))
    pld = PLDAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    pld.compose(event)
    assert pld.get_epsilon(DELTA) <= 1.0 + 1e-3  # one use's ε: dp-accounting's bug, not a bound on 50 uses
    assert _rdp_accountant(event).get_epsilon(DELTA) > 20.0


def test_ledger_round_trips_through_dp_accounting_events():
    source = privfed.Ledger(delta=DELTA, primary_unit="example")
    for mechanism in (privfed.GaussianNoisyMax(_votes(), 40.0, 1), privfed.LaplaceNoisyMax(_votes(), 0.05, 1)):
        source.record(mechanism)
    event = source.to_dp_event()
    copy = privfed.Ledger(delta=DELTA, primary_unit="example")
    copy.record_dp_event(event, description="the source ledger, exported")
    assert copy.to_dp_event() == event
    independent = source.account(DELTA).epsilon_data_independent
    assert 0.9 * independent <= copy.account(DELTA).epsilon <= independent * (1 + 1e-9)
    # Through JSON: the entry is rebuilt from its recorded event and verified.
    reread = privfed.Ledger.from_json(copy.to_json())
    assert reread.verify() == 1 and reread.to_dp_event() == event
    assert reread.account(DELTA).epsilon == pytest.approx(copy.account(DELTA).epsilon, rel=1e-12)
    document = json.loads(copy.to_json())
    document["entries"][0]["analyses"]["example"]["parameters"]["event"]["events"][0]["count"] = 999
    with pytest.raises(privfed.LedgerIntegrityError):
        privfed.Ledger.from_dict(document).verify()


def test_event_json_codec_checks_every_key():
    event = dp_accounting.ComposedDpEvent([
        dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0)),
                                          10),
        dp_accounting.LaplaceDpEvent(2.0),
    ])
    assert event_from_json(json.loads(json.dumps(event_to_json(event)))) == event
    with pytest.raises(ValueError, match="unknown key 'cuont'"):
        event_from_json({"event": "self_composed", "cuont": 3, "inner": {"event": "laplace", "noise_multiplier": 1}})
    with pytest.raises(ValueError, match="event.event must be one of"):
        event_from_json({"event": "os.system"})
    with pytest.raises(ValueError, match="count must be an integer >= 1"):
        event_from_json({"event": "self_composed", "count": 0, "inner": {"event": "laplace", "noise_multiplier": 1}})
    deep = {"event": "laplace", "noise_multiplier": 1.0}
    for _ in range(40):
        deep = {"event": "self_composed", "count": 1, "inner": deep}
    with pytest.raises(ValueError, match="nested deeper"):
        event_from_json(deep)


def test_unsupported_and_mixed_events_are_refused():
    ledger = privfed.Ledger(delta=DELTA)
    with pytest.raises(TypeError, match="record_unaccounted"):
        ledger.record_dp_event(dp_accounting.NonPrivateDpEvent(), description="raw data")
    with pytest.raises(TypeError, match="MixtureOfGaussiansDpEvent"):
        ledger.record_dp_event(dp_accounting.dp_event.MixtureOfGaussiansDpEvent(1.0, [1.0], [1.0]), description="x")
    mixed = dp_accounting.ComposedDpEvent([
        dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(1.0)),
        dp_accounting.RandomizedResponseDpEvent(0.5, 4),
    ])
    with pytest.raises(ValueError, match="no single relation"):
        ledger.record_dp_event(mixed, description="x")
    with pytest.raises(ValueError, match="description"):
        ledger.record_dp_event(dp_accounting.LaplaceDpEvent(1.0), description=" ")
    with pytest.raises(ValueError, match=r"noise_multiplier must be a finite number in \(0, inf\].*record_unaccounted"):
        ledger.record_dp_event(dp_accounting.GaussianDpEvent(0.0), description="no noise")
    with pytest.raises(ValueError, match=r"sampling_probability must be a finite number in \(0, 1\]"):
        ledger.record_dp_event(dp_accounting.PoissonSampledDpEvent(1.5, dp_accounting.GaussianDpEvent(1.0)),
                               description="x")
    assert len(ledger) == 0


def test_account_accepts_dp_events_wherever_it_accepts_mechanisms():
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.1)), 1000)
    theirs = privfed.account(event, delta=DELTA)
    ours = privfed.account(privfed.DPSGD(1.1, 0.01, 1000), delta=DELTA)
    assert theirs.epsilon == pytest.approx(ours.epsilon, rel=1e-9) and theirs.method == ours.method == "pld"
    assert theirs.unit == "example" and "example-level" in theirs.relation
    assert theirs.mechanisms[0].kind == "dp_event"
    mixed = privfed.account([event, privfed.LaplaceNoisyMax(_votes(), 0.05, 1)], delta=DELTA)
    assert mixed.epsilon > theirs.epsilon and len(mixed.mechanisms) == 2
    party = privfed.account(privfed.DpEventRelease(dp_accounting.GaussianDpEvent(2.0), unit="party"), delta=DELTA)
    assert party.unit == "party"
    with pytest.raises(TypeError, match="DpEvents"):
        privfed.account([event, "gaussian"], delta=DELTA)


def test_dp_event_mechanism_files_are_checked_like_every_kind():
    from privfed.accounting.registry import checked_public_mechanism_from_record

    mechanism = privfed.DpEventRelease(dp_accounting.GaussianDpEvent(2.0))
    record = {"kind": "dp_event", "unit": "example", "parameters": mechanism.parameters()}
    rebuilt, _ = checked_public_mechanism_from_record(record)
    assert rebuilt.event == mechanism.event and rebuilt.relation == "add_or_remove_one"
    with pytest.raises(ValueError, match="relaton"):
        checked_public_mechanism_from_record({**record, "parameters": {**record["parameters"], "relaton": "x"}})


# --- Opacus ----------------------------------------------------------------------------------------
def test_record_opacus_takes_a_real_accountants_history():
    from opacus.accountants import PRVAccountant, RDPAccountant

    accountants = {cls: cls() for cls in (RDPAccountant, PRVAccountant)}
    for accountant in accountants.values():
        for _ in range(300):
            accountant.step(noise_multiplier=1.1, sample_rate=0.01)
        for _ in range(200):
            accountant.step(noise_multiplier=0.9, sample_rate=0.02)
    ledger = privfed.Ledger(delta=DELTA, primary_unit="example")
    entry = ledger.record_opacus(accountants[RDPAccountant], description="DP-SGD of the teacher, Opacus")
    members = entry.analyses["example"].parameters["members"]
    assert [m["parameters"] for m in members] == [
        {"noise_multiplier": 1.1, "sample_rate": 0.01, "steps": 300},
        {"noise_multiplier": 0.9, "sample_rate": 0.02, "steps": 200},
    ]
    report = ledger.account(DELTA)
    assert report.unit == "example" and not report.data_dependent
    assert report.mechanisms[0].kind == "sequential_composition"
    # privfed's bound is never looser than Opacus's own (same history, its RDP accountant) by more than 1 %.
    assert report.epsilon <= accountants[RDPAccountant].get_epsilon(DELTA) * 1.01
    assert report.epsilon <= accountants[PRVAccountant].get_epsilon(DELTA) * 1.05
    # Any Opacus accountant's history, or its state_dict, gives the same entry.
    for source in (accountants[PRVAccountant], accountants[RDPAccountant].state_dict()):
        again = privfed.Ledger(delta=DELTA, primary_unit="example")
        assert again.record_opacus(source, description="the same").analyses == entry.analyses


def test_record_opacus_from_a_real_privacy_engine_run():
    torch = pytest.importorskip("torch")
    from opacus import PrivacyEngine

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(64, 3), torch.randint(0, 2, (64,)))
    model = torch.nn.Linear(3, 2)
    engine = PrivacyEngine(accountant="rdp")
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        data_loader=torch.utils.data.DataLoader(data, batch_size=16), noise_multiplier=1.3, max_grad_norm=1.0)
    for features, labels in loader:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(features), labels).backward()
        optimizer.step()
    ledger = privfed.Ledger(delta=DELTA, primary_unit="example")
    ledger.record_opacus(engine.accountant, description="one epoch of DP-SGD with Opacus")
    (sigma, rate, steps), = engine.accountant.history
    assert ledger.entries[0].analyses["example"].parameters == {"noise_multiplier": sigma, "sample_rate": rate,
                                                                "steps": steps}
    assert ledger.account(DELTA).epsilon <= engine.get_epsilon(DELTA) * 1.01


def test_record_opacus_refuses_bad_histories():
    ledger = privfed.Ledger(delta=DELTA)
    with pytest.raises(ValueError, match="history is empty"):
        ledger.record_opacus({"history": [], "mechanism": "rdp"}, description="x")
    with pytest.raises(ValueError, match=r"history\[0\]'s sample_rate"):
        ledger.record_opacus({"history": [(1.0, 1.5, 10)]}, description="x")
    with pytest.raises(TypeError, match="Opacus accountant"):
        ledger.record_opacus(object(), description="x")
    assert len(ledger) == 0


# --- Flower ----------------------------------------------------------------------------------------
def _flower_accountant(sampling, relation, rounds=((1.0, 10, 100, 30), (1.5, 20, 100, 20))):
    """A real Flower RdpAccountant that composed DP-FedAvg rounds (σ, sampled clients, population, rounds)."""
    pytest.importorskip("flwr")
    from flwr.supercore.privacy_accounting import (
        GaussianPrivacyEvent,
        NeighboringRelation,
        PrivacyConfig,
        SamplingMethod,
    )
    from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant as FlowerRdpAccountant

    config = PrivacyConfig(target_delta=DELTA, population_size=100, neighboring_relation=NeighboringRelation(relation),
                           sampling_method=SamplingMethod(sampling))
    accountant = FlowerRdpAccountant(config)
    for sigma, sample, population, count in rounds:
        accountant.compose(GaussianPrivacyEvent(noise_multiplier=sigma, sample_size=sample,
                                                population_size=population), count)
    return accountant


@pytest.mark.parametrize("sampling, relation", [("poisson", "add-or-remove-one"),
                                                ("without-replacement", "replace-one"),
                                                ("no-amplification", "add-or-remove-one")])
def test_record_flower_takes_a_real_rdp_accountant(sampling, relation):
    # Poisson rounds get the PLD too (slow for mixed σ): one σ there, two elsewhere.
    rounds = ((1.0, 10, 100, 50),) if sampling == "poisson" else ((1.0, 10, 100, 30), (1.5, 20, 100, 20))
    accountant = _flower_accountant(sampling, relation, rounds)
    ledger = privfed.Ledger(delta=DELTA, primary_unit="party")
    entry = ledger.record_flower(accountant, description="DP-FedAvg, 50 rounds, server-side fixed clipping")
    report = ledger.account(DELTA)
    assert report.unit == "party" and "party-level" in report.relation
    assert entry.analyses["party"].parameters["relation"] == relation.replace("-", "_")
    # Printed as analysed: a party added or removed, or a party's data replaced, never both.
    assert report.relations == (relation.replace("-", "_"),)
    assert ("(added or removed)" if relation == "add-or-remove-one" else "(replaced)") in report.relation
    flower_epsilon = accountant.get_epsilon(DELTA)
    # privfed's wider order grid (and PLD where it has one) is never looser than Flower's RDP by over 1 %.
    assert report.epsilon <= flower_epsilon * 1.01
    # On Flower's own orders the recorded curve is exactly Flower's backend's.
    orders = accountant.state_dict()["orders"]
    mechanism = ledger.mechanisms()[0]
    assert mechanism.epsilon(np.asarray(orders), DELTA, analysis="tight")[0] == pytest.approx(flower_epsilon,
                                                                                            rel=1e-9)
    # Its JSON state (what a ServerApp saves between runs) gives the same mechanism.
    assert flower_mechanism(json.dumps(accountant.state_dict())).parameters() == mechanism.parameters()


def test_record_flower_refuses_other_states():
    ledger = privfed.Ledger(delta=DELTA)
    state = _flower_accountant("poisson", "add-or-remove-one").state_dict()
    with pytest.raises(ValueError, match="schema_version"):
        ledger.record_flower({**state, "schema_version": 2}, description="x")
    with pytest.raises(ValueError, match="compositions"):
        ledger.record_flower({**state, "compositions": []}, description="x")
    with pytest.raises(TypeError, match="Flower RdpAccountant"):
        ledger.record_flower(42, description="x")
    assert len(ledger) == 0


def test_privfed_account_reads_dp_events_from_a_mechanism_file(tmp_path, capsys):
    from privfed.cli import main

    (tmp_path / "events.toml").write_text(
        '[[mechanisms]]\nkind = "dp_event"\nunit = "example"\n'
        'event = {event = "self_composed", count = 10, inner = {event = "gaussian", noise_multiplier = 4.0}}\n')
    mechanism, = privfed.load_mechanisms(tmp_path / "events.toml")
    assert mechanism.event == dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(4.0), 10)
    assert main(["account", str(tmp_path / "events.toml"), "--delta", "1e-5"]) == 0
    assert "dp_event" in capsys.readouterr().out
    (tmp_path / "bad.toml").write_text('[[mechanisms]]\nkind = "dp_event"\nevent = {event = "gausian"}\n')
    assert main(["account", str(tmp_path / "bad.toml"), "--delta", "1e-5"]) == 2
    assert "event.event must be one of" in capsys.readouterr().err


def test_to_dp_event_exports_either_bound_of_a_ledger_with_dp_training():
    training = privfed.DPSGD(1.1, 0.01, 100)
    ledger = privfed.Ledger(delta=DELTA, primary_unit="example")
    ledger.record_training(training)
    release = privfed.GaussianNoisyMax(_votes(), 40.0, 1)
    ledger.record(release, derived_from_training=True)
    assert ledger.to_dp_event() == release.dp_event()  # the aggregation bound composes the releases only
    assert ledger.to_dp_event(bound="dpsgd") == training.dp_event()  # the release is post-processing of training
    with pytest.raises(ValueError, match="bound"):
        ledger.to_dp_event(bound="training")
