"""Parameter consistency: what each step passed to its noise function, as run, against the ledger's parameters.

Correct fits of every pipeline's noised configurations pass; a bug planted at a call site (the ledger says one
parameter, the step passes another) fails — in ``privfed.audit_parameters`` and in ``privfed audit BUNDLE``.
"""

from __future__ import annotations

import dataclasses
import json
import warnings

import pytest
from privfed.pipelines.fedkt import steps as fedkt_steps
from privfed.pipelines.models import dp_training
from privfed.pipelines.privatekt import steps as privatekt_steps
from privfed.pipelines.protocol.run_parameters import record_draw, recording
from privfed.pipelines.protocol.voting import noisy_labels

from bench.parameter_fits import _digits, configurations
from privfed import audit, audit_parameters, save_bundle
from privfed.audit.parameters import parameters_check
from privfed.bundle.layout import RUN_PARAMETERS_FILE

pytest.importorskip("sklearn")
pytest.importorskip("skops.io")


@pytest.fixture(scope="module")
def digits():
    return _digits()


def _fit(name: str, digits):
    parties, public = digits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return configurations()[name]().fit(parties, public)


_LAWS = {"FedKT-L1 Laplace": {"laplace"}, "FedKT-L1 Confident GNMax": {"gaussian", "gaussian-threshold"},
         "FedKT-L2 Laplace": {"laplace"}, "FedKT-L1 Skellam (secure)": {"skellam-share"},
         "FedKT DP-SGD teachers": {"dp-sgd", "laplace"}, "FedKD Laplace": {"laplace"},
         "FedKD Skellam (secure)": {"skellam-share"}, "PrivateKT": {"randomized-response"},
         "Selective-FD GNMax": {"gaussian"}, "Selective-FD randomized response": {"randomized-response"}}


@pytest.mark.parametrize("name", list(_LAWS))
def test_a_correct_fit_of_every_noised_configuration_passes(name, digits):
    if name == "FedKT DP-SGD teachers":
        pytest.importorskip("opacus")
    model = _fit(name, digits)
    check = audit_parameters(model)
    assert check.status == "pass", check.detail
    assert {draw["law"] for draw in model.run_parameters_} == _LAWS[name]  # every noise call was recorded


def _labels_with_doubled_gamma(self, votes, rng):
    """NoisyArgmax.labels with the bug of bench/mutations/17: the Laplace draw gets 2γ (scale b/2)."""
    gamma = 2 * self.scale
    record_draw("FedKT noisy max", "laplace", scale=1.0 / gamma)
    return noisy_labels(votes, rng, gamma=gamma)


def test_a_noise_scale_halved_at_the_call_fails_in_process_and_in_the_bundle(digits, monkeypatch, tmp_path):
    monkeypatch.setattr(fedkt_steps.NoisyArgmax, "labels", _labels_with_doubled_gamma)
    model = _fit("FedKT-L1 Laplace", digits)
    check = audit_parameters(model)
    assert check.status == "fail"
    assert "FedKT noisy max ran laplace with scale = 1" in check.detail  # γ = 0.5 accounted: scale 2, ran 1
    assert "laplace_noisy_max gamma = 0.5" in check.detail
    report = audit(save_bundle(model, tmp_path / "bundle"))
    assert report.exit_code == 1
    assert [c.name for c in report.checks if c.status == "fail"] == ["parameter consistency"]


def test_a_bundle_of_a_correct_fit_ships_its_record_and_passes(digits, tmp_path):
    model = _fit("FedKT-L1 Laplace", digits)
    bundle = save_bundle(model, tmp_path / "bundle")
    assert json.loads((bundle / RUN_PARAMETERS_FILE).read_text()) == model.run_parameters_
    checks = {c.name: c for c in audit(bundle).checks}
    assert checks["parameter consistency"].status == "pass"


def test_an_edited_run_record_fails_the_manifest(digits, tmp_path):
    bundle = save_bundle(_fit("FedKT-L1 Laplace", digits), tmp_path / "bundle")
    record = json.loads((bundle / RUN_PARAMETERS_FILE).read_text())
    record[0]["parameters"]["scale"] = 1.0
    (bundle / RUN_PARAMETERS_FILE).write_text(json.dumps(record))
    report = audit(bundle)
    assert report.exit_code == 1 and any(c.name == "bundle manifest" and c.status == "fail" for c in report.checks)


def test_a_dp_sgd_optimizer_built_with_half_the_noise_multiplier_fails(digits, monkeypatch):
    pytest.importorskip("opacus")
    build = dp_training._secret_noise_optimizer

    def halved(optimizer, *, release, **options):  # bench/mutations/18: the optimizer gets σ/2
        return build(optimizer, release=type(release)(release.noise_multiplier / 2, release.sample_rate,
                                                      release.steps), **options)

    monkeypatch.setattr(dp_training, "_secret_noise_optimizer", halved)
    check = audit_parameters(_fit("FedKT DP-SGD teachers", digits))
    assert check.status == "fail" and "DP-SGD training ran dp-sgd with noise_multiplier = 0.55" in check.detail


def test_a_randomized_response_keep_probability_other_than_the_ledgers_fails(digits, monkeypatch):
    report = privatekt_steps._report

    def inflated(task, predictions, noise):  # bench/mutations/19: β + (1 − β)/C passed as the keep probability
        beta = task.keep_probability
        return report(dataclasses.replace(task, keep_probability=beta + (1 - beta) / len(task.classes)),
                      predictions, noise)

    monkeypatch.setattr(privatekt_steps, "_report", inflated)
    check = audit_parameters(_fit("PrivateKT", digits))
    assert check.status == "fail" and "randomized-response" in check.detail


def test_skellam_shares_must_sum_to_an_accounted_variance():
    ledger = {"entries": [{"analyses": {"party": {"kind": "skellam", "parameters": {"variance": 9.0}}}}]}
    shares = [{"step": f"party {i}", "law": "skellam-share", "parameters": {"variance": 2.25}, "draws": 1}
              for i in range(4)]
    assert parameters_check(ledger, shares).status == "pass"
    check = parameters_check(ledger, shares[:3] + [{**shares[3], "parameters": {"variance": 4.5}}])
    assert check.status == "fail" and "total variance 11.25" in check.detail and "account variance 9" in check.detail


def test_record_draw_names_the_law_and_its_parameters():
    with pytest.raises(ValueError, match="law must be one of laplace, gaussian"):
        record_draw("step", "cauchy", scale=1.0)
    with pytest.raises(ValueError, match="a laplace draw records scale, got sigma"):
        record_draw("step", "laplace", sigma=1.0)
    with recording() as outer, recording() as inner:
        record_draw("step", "laplace", scale=2.0)
        record_draw("step", "laplace", scale=2.0)
    assert outer.to_list() == inner.to_list() == [
        {"step": "step", "law": "laplace", "parameters": {"scale": 2.0}, "draws": 2}]


def test_audit_parameters_needs_a_fitted_pipeline():
    with pytest.raises(TypeError, match="model must be a fitted privfed pipeline .* got int"):
        audit_parameters(3)
