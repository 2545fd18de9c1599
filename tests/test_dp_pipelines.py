"""The pipelines with DP-SGD local models: the ledger's training entry, the two bounds and the coverage rules."""

import re

import numpy as np
import pytest

pytest.importorskip("opacus")
from conftest import digits_federation  # noqa: E402
from privfed.accounting.registry import mechanism_from_record  # noqa: E402
from sklearn.tree import DecisionTreeClassifier  # noqa: E402

from privfed import DPConfig, FedKD, FedKT, FedMD, PrivateKT, SelectiveFD, TorchMLP, account  # noqa: E402

DELTA = 1e-5
# Inside a pipeline q must be public (tests/test_dpsgd_noise_attacks.py): the steps are epochs · ⌊1/q⌋ = 10 per epoch.
DP = DPConfig(noise_multiplier=1.0, max_grad_norm=1.0, delta=DELTA, sample_rate=0.1)


@pytest.fixture(scope="module", autouse=True)
def one_thread(one_torch_thread):
    yield


@pytest.fixture(scope="module")
def federation():
    return digits_federation(3)


def mlp(dp=DP, **options):
    return TorchMLP(hidden=(16,), epochs=1, batch_size=32, lr=0.05, optimizer="sgd", dp=dp, **options)


def training_entry(ledger):
    (entry,) = [entry for entry in ledger.entries if entry.kind == "training"]
    return mechanism_from_record(entry.analyses["example"].record())


def check_two_bounds(report, *, source):
    """The reported ε is the named bound's, and the other bound is kept beside it."""
    other = "aggregation" if source == "dpsgd" else "dpsgd"
    assert report.source == source and set(report.alternatives) == {other}
    assert report.notes[0].startswith(f"reported bound: {source}")
    # the note prints both ε, each rounded up (never below the computed bound)
    printed = [float(value) for value in re.findall(r"ε = ([0-9.e+]+)", report.notes[0])]
    assert len(printed) == 2
    assert printed[0] >= report.epsilon and printed[1] >= report.alternatives[other].epsilon
    return report.alternatives[other]


def test_fedkt_dp_teachers(federation):
    parties, public, _ = federation
    settings = dict(n_partitions=2, n_teachers=2, privacy="L1", gamma=0.05, query_fraction=0.25, random_state=0)
    private = FedKT(mlp(), mlp(dp=None), **settings).fit(parties, public)
    training = training_entry(private.ledger_)
    # Per party: two overlapping partitions in sequence, each the parallel composition of its disjoint teachers.
    party = training.mechanisms[0]
    assert len(training.mechanisms) == 3 and party.kind == "sequential_composition" and len(party.mechanisms) == 2
    assert all(member.kind == "parallel_composition" for member in party.mechanisms)
    example = private.ledger_.account(unit="example")
    dpsgd = account(training, delta=DELTA).epsilon
    assert example.source == "dpsgd" and example.epsilon == pytest.approx(dpsgd, rel=1e-9)
    aggregation = check_two_bounds(example, source="dpsgd")
    assert aggregation.epsilon > example.epsilon  # FedKT-L1's example level (k = s) is the larger here
    assert not private.ledger_.account(unit="party").alternatives  # party level unchanged
    plain = FedKT(DecisionTreeClassifier(max_depth=4), DecisionTreeClassifier(max_depth=4), **settings)
    plain_report = plain.fit(parties, public).ledger_.account(unit="example")
    assert plain_report.source == "aggregation" and not plain_report.alternatives
    assert not any("DP-SGD" in note for note in plain_report.notes)


@pytest.mark.parametrize("weighting", ["uniform", "class-count"])
def test_fedkd_dp_local_models(federation, weighting):
    parties, public, _ = federation
    model = FedKD(mlp(), mlp(dp=None), gamma=1.0, clip=4.0, quantization_scale=20, weighting=weighting,
                  random_state=0).fit(parties, public)
    report = model.ledger_.account(unit="example")
    training = training_entry(model.ledger_)
    assert [m.steps for m in training.mechanisms] == [mlp().epochs * 10] * len(parties)  # epochs · ⌊1/q⌋, public
    if weighting == "uniform":
        check_two_bounds(report, source="dpsgd")
        assert report.epsilon == pytest.approx(account(training, delta=DELTA).epsilon, rel=1e-9)
    else:  # class-count weights come from the raw labels: the ensemble is not post-processing of the training
        check_two_bounds(report, source="aggregation")
        assert any("not derived from the DP-trained models" in note for note in report.notes)
        # and the class counts reach the coordinator in clear: covered by nothing there
        coordinator = model.ledger_.account(unit="example", observer="coordinator")
        assert coordinator.epsilon == float("inf") and any("class counts" in text for text in coordinator.uncovered)


def test_fedkd_mixed_models_compose_the_aggregation_into_the_dpsgd_bound(federation):
    parties, public, _ = federation
    model = FedKD([mlp(), mlp(), mlp(dp=None)], mlp(dp=None), gamma=1.0, clip=4.0, quantization_scale=20,
                  weighting="uniform", random_state=0).fit(parties, public)
    report = model.ledger_.account(unit="example")
    dpsgd = check_two_bounds(report, source="aggregation")
    assert dpsgd.epsilon > report.epsilon  # training + the ensemble's own mechanism
    assert any("not derived from the DP-trained models" in note for note in report.notes)


def test_privatekt_composes_each_clients_rounds(federation):
    parties, public, _ = federation
    model = PrivateKT(mlp(), epsilon_per_round=20.0, queries_per_round=10, buffer_rounds=2, self_training_size=30,
                      rounds=3, client_fraction=0.67, local_epochs=1, random_state=0).fit(parties, public)
    training = training_entry(model.ledger_)
    participants = [t for t in model.participation_ if t > 0]
    assert [m.steps for m in training.mechanisms] == [t * 10 for t in participants]  # rounds · ⌊1/q⌋, public
    report = model.ledger_.account(unit="example")
    check_two_bounds(report, source="dpsgd")
    assert model.global_model_.dp is None  # the server trains on public data without DP-SGD


def test_selective_fd_raw_data_selector_is_not_covered_and_fedmd_is(federation):
    parties, public, _ = federation
    fast = dict(rounds=2, distill_steps=5, proxy_batch=100, random_state=0)
    selective = SelectiveFD(mlp(), n_auxiliary=100, max_known=100, dp_selector=False, **fast).fit(parties, public)
    report = selective.ledger_.account(unit="example")
    assert report.epsilon == np.inf  # the raw-data selectors' choices are seen and covered by nothing
    assert any(note.startswith("NOT COVERED by the DP-SGD bound") and "selectors" in note for note in report.notes)
    assert any("selectors" in text for text in report.uncovered)
    steps = [m.steps for m in training_entry(selective.ledger_).mechanisms]
    assert steps == [2 * 10] * len(parties)  # one DP-SGD epoch (⌊1/q⌋ steps, public) per round

    fedmd = FedMD(mlp(), privacy="rr", epsilon_per_round=50.0, labels="hard", **fast).fit(parties, public)
    report = fedmd.ledger_.account(unit="example")
    check_two_bounds(report, source="dpsgd")
    assert not any(note.startswith("NOT COVERED") for note in report.notes)
    assert np.isfinite(report.epsilon)


@pytest.fixture(scope="module")
def dp_selective_fd(federation):
    """Selective-FD with DP-SGD clients calibrated to ε = 4 per round: the DP selectors by default."""
    from privfed.pipelines.selective_fd.dp_selector import DPDensityRatioSelector

    parties, public, _ = federation
    fitted = []
    original = DPDensityRatioSelector.fit

    def spy(self, X, y=None, *, public):
        fitted.append((np.array(X), np.array(public)))
        return original(self, X, y, public=public)

    dp = DPConfig(target_epsilon=4.0, max_grad_norm=1.0, delta=DELTA, sample_rate=0.1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DPDensityRatioSelector, "fit", spy)
        patch.setattr("privfed.pipelines.selective_fd.kulsif.DensityRatioSelector.fit", lambda *a, **k: pytest.fail(
            "the raw-data KuLSIF selector was fitted in a DP run"))
        model = SelectiveFD(mlp(dp=dp), rounds=2, distill_steps=5, proxy_batch=100, n_auxiliary=200,
                            random_state=0).fit(parties, public)
    return model, fitted


def test_selective_fd_with_dp_clients_has_a_meaningful_example_level_epsilon(federation, dp_selective_fd):
    """Issue 33 item 8: with DP-SGD clients the example-level ε covers everything (before: the raw-data selectors
    left the DP-SGD bound uncovered and the reported ε was the aggregation's)."""
    from privfed.accounting import compose_sequential
    from privfed.pipelines.selective_fd.dp_selector import DPDensityRatioSelector, selector_mechanism

    parties, public, _ = federation
    model, fitted = dp_selective_fd
    report = model.ledger_.account(unit="example")
    assert report.epsilon < 20 and not report.uncovered
    check_two_bounds(report, source="dpsgd")
    assert not any(note.startswith("NOT COVERED") for note in report.notes)
    # the bound is the DP-SGD training composed with the selectors' Gaussian mechanism, nothing else
    sigma = model.selectors_[0].noise_multiplier
    assert all(isinstance(s, DPDensityRatioSelector) and s.noise_multiplier == sigma for s in model.selectors_)
    expected = account(compose_sequential([training_entry(model.ledger_), selector_mechanism(sigma)]), delta=DELTA)
    assert report.epsilon == pytest.approx(expected.epsilon, rel=1e-9)
    assert account(selector_mechanism(sigma), delta=DELTA).epsilon <= model.dp_selector_epsilon
    (release,) = [e for e in model.ledger_.entries if e.kind == "release"]
    assert set(release.analyses) == {"example"} and not release.derived_from_training
    # each party's selector saw its own data once (the noisy sum) and the public proxy set otherwise,
    # and keeps no raw example
    assert len(fitted) == len(parties)
    for (X, proxy), (X_party, _), selector in zip(fitted, parties, model.selectors_):
        np.testing.assert_array_equal(X, X_party)
        np.testing.assert_array_equal(proxy, public)
        private_rows = {row.tobytes() for row in np.asarray(X_party, dtype=float)}
        for array in selector.fitted_arrays().values():
            assert array.ndim < 2 or not any(row.tobytes() in private_rows for row in array.astype(float))
    assert model.history_["shared_fraction"][0] < 1.0  # the selectors do select
    # party level: the selectors' release is analysed per example only, so it is listed as not covered
    party = model.ledger_.account(unit="party")
    assert any("example level only" in text and "DP selectors" in text for text in party.uncovered)


def test_selective_fd_dp_selector_settings_are_checked(federation):
    parties, public, _ = federation
    for change, error, text in [
        (dict(dp_selector="yes"), TypeError, "dp_selector must be None"),
        (dict(dp_selector=True, tau_client=None), ValueError, "dp_selector=True needs a client-side selector"),
        (dict(dp_selector_epsilon=0.0), ValueError, "dp_selector_epsilon"),
        (dict(dp_selector_frequencies=0), ValueError, "dp_selector_frequencies"),
        (dict(dp_selector_regularization=float("nan")), ValueError, "dp_selector_regularization"),
    ]:
        with pytest.raises(error, match=text) as raised:
            SelectiveFD(mlp(), **change).fit(parties, public)
        assert "\n" not in str(raised.value)


def test_selective_fd_without_dp_clients_keeps_the_raw_data_selector(federation):
    """Non-DP clients: the default is the raw-data KuLSIF selector, recorded as unaccounted, as before."""
    from privfed.pipelines.selective_fd.kulsif import DensityRatioSelector

    parties, public, _ = federation
    model = SelectiveFD(mlp(dp=None), rounds=1, distill_steps=2, proxy_batch=60, n_auxiliary=60, max_known=60,
                        random_state=0).fit(parties, public)
    assert all(type(s) is DensityRatioSelector for s in model.selectors_)
    assert any("client-side selectors" in text for text in model.ledger_.unaccounted)
    assert not [e for e in model.ledger_.entries if e.kind == "release"]


def test_run_config_sets_the_dp_selector():
    from privfed.federation.task import estimator_from_config

    dp = '{"dp": {"DPConfig": {"noise_multiplier": 1.0, "max_grad_norm": 1.0, "delta": 1e-5}}}'
    base = {"algorithm": "selective-fd", "local-model": "privfed.TorchMLP", "local-model-params": dp}
    default = estimator_from_config(base)
    assert default.dp_selector is None and default._private_selectors()
    chosen = estimator_from_config({**base, "dp-selector": "false", "dp-selector-epsilon": 2.0,
                                    "dp-selector-frequencies": 64, "dp-selector-regularization": 0.1})
    assert (chosen.dp_selector, chosen.dp_selector_epsilon, chosen.dp_selector_frequencies,
            chosen.dp_selector_regularization) == (False, 2.0, 64, 0.1)
    assert not chosen._private_selectors()
    with pytest.raises(ValueError, match="dp-selector must be one of") as raised:
        estimator_from_config({**base, "dp-selector": "maybe"})
    assert "\n" not in str(raised.value)
