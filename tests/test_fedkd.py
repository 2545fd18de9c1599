"""FedKD end to end on scikit-learn's digits, and its building blocks (logits, quantization, weights, noise)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier

torch = pytest.importorskip("torch")

from privfed.accounting import QuantizedLaplaceEnsemble, account, quantize_logits  # noqa: E402
from privfed.pipelines.fedkd.estimator import (  # noqa: E402
    PROBABILITY_FLOOR,
    BandwidthReport,
    FedKD,
    NoisyLogitEnsemble,
    paper_quantized,
    party_logits,
    party_message,
)
from privfed.pipelines.fedkd.steps import FedKDTask, fedkd_party_step, receive_fedkd_replies  # noqa: E402
from privfed.pipelines.models.fitting import fit_classifier  # noqa: E402
from privfed.pipelines.models.torch_models import TorchMLP  # noqa: E402
from privfed.pipelines.protocol.messages import MessageError  # noqa: E402

import privfed  # noqa: E402
from tests.conftest import digits_federation  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def digits():
    return digits_federation(5)


def mlp(**options):
    return TorchMLP(**{"hidden": (64,), "epochs": 20, "lr": 1e-2, "random_state": 0, **options})


# --- logits ---------------------------------------------------------------------------------------
def test_multilabel_logits_without_the_label_count_are_refused():
    X = np.random.default_rng(0).normal(size=(20, 3))
    fitted = RandomForestClassifier(n_estimators=2, random_state=0).fit(X, (X[:, :2] > 0).astype(np.int64))
    with pytest.raises(TypeError, match="multilabel=True needs n_outputs"):
        party_logits(fitted, X, clip=4.0, multilabel=True)
    assert party_logits(fitted, X, clip=4.0, multilabel=True, n_outputs=2).shape == (20, 2)


def test_forest_logits_are_centred_log_probabilities(digits):
    parties, public, _ = digits
    X, y = parties[0]
    fitted = fit_classifier(RandomForestClassifier(n_estimators=10), X, y, n_classes=10, seed=0)
    logits = party_logits(fitted, public, clip=5.0)
    log_p = np.log(np.maximum(fitted.estimator.predict_proba(public), PROBABILITY_FLOOR))
    np.testing.assert_allclose(logits[:, fitted.classes], log_p - log_p.mean(axis=1, keepdims=True))
    np.testing.assert_allclose(logits[:, fitted.classes].mean(axis=1), 0.0, atol=1e-9)
    # softmax of the logits is the forest's (floored) probability vector.
    recovered = np.exp(logits[:, fitted.classes])
    np.testing.assert_allclose(recovered / recovered.sum(axis=1, keepdims=True),
                               np.exp(log_p) / np.exp(log_p).sum(axis=1, keepdims=True))


def test_torch_logits_are_its_centred_logits_and_unseen_classes_sit_at_minus_z(digits):
    parties, public, _ = digits
    X, y = parties[0]
    keep = y < 7  # the party never sees classes 7, 8, 9
    fitted = fit_classifier(mlp(epochs=3), X[keep], y[keep], n_classes=10, seed=0)
    logits = party_logits(fitted, public, clip=4.0)
    raw = fitted.estimator._logits(public)
    np.testing.assert_allclose(logits[:, :7], raw - raw.mean(axis=1, keepdims=True), atol=1e-5)
    assert (logits[:, 7:] == -4.0).all()


def test_party_sends_quantized_clipped_logits(digits):
    parties, public, _ = digits
    X, y = parties[1]
    clip, scale = 3.0, 7
    task = FedKDTask(public, np.arange(10), multilabel=False, clip=clip, quantization_scale=scale, seed=5,
                     send_class_counts=True)
    sent = fedkd_party_step(task, X, y, local_model=LogisticRegression(max_iter=300), party="party 0").logits
    raw = party_logits(fit_classifier(LogisticRegression(max_iter=300), X, y, n_classes=10, seed=5), public, clip=clip)
    step = clip / scale
    values = sent.quantized_logits
    assert np.abs(values).max() <= clip + 1e-12
    np.testing.assert_allclose(values / step, np.round(values / step), atol=1e-9)  # on the grid
    assert np.abs(values - np.clip(raw, -clip, clip)).max() <= step / 2 + 1e-9  # within half a step
    np.testing.assert_array_equal(quantize_logits(values, clip=clip, quantization_scale=scale), values)  # idempotent
    np.testing.assert_array_equal(sent.class_counts, np.bincount(y, minlength=10))
    # Uniform weights need no class counts: the party sends zeros, and a party that sends counts is refused.
    uniform = dataclasses.replace(task, send_class_counts=False)
    quiet = fedkd_party_step(uniform, X, y, local_model=LogisticRegression(max_iter=300), party="party 0").logits
    assert not quiet.class_counts.any()
    with pytest.raises(MessageError, match="party 0 sent class counts the task did not ask for"):
        receive_fedkd_replies([uniform], [[sent.to_record()]], ["party 0"], max_bytes=2**24)


def test_fit_logits_runs_the_server_on_given_logits(digits):
    parties, public, (X_test, y_test) = digits
    fitted = [fit_classifier(RandomForestClassifier(n_estimators=10), X, y, n_classes=10, seed=i)
              for i, (X, y) in enumerate(parties)]
    logits = [party_logits(f, public, clip=4.0) for f in fitted]
    counts = np.stack([np.bincount(y, minlength=10) for _, y in parties])
    plain = FedKD(None, mlp(epochs=10), gamma=None, clip=4.0, quantization_scale=20, random_state=0)
    plain.fit_logits(logits, counts, public)
    sent = [party_message(z, clip=4.0, quantization_scale=20) for z in logits]
    np.testing.assert_allclose(plain.noisy_ensemble_, np.einsum("kc,knc->nc", counts / counts.sum(axis=0), sent))
    assert plain.score(X_test, y_test) > 0.8
    noisy = [FedKD(None, mlp(epochs=2), gamma=1.0, clip=4.0, random_state=3, noise_seed=noise_seed).fit_logits(
        logits, counts, public) for noise_seed in (None, None, 5, 5)]
    assert not np.isin(noisy[0].noisy_ensemble_, noisy[1].noisy_ensemble_).any()  # secret noise: fresh each fit
    np.testing.assert_array_equal(noisy[2].noisy_ensemble_, noisy[3].noisy_ensemble_)  # noise_seed: reproducible
    with pytest.raises(ValueError, match="class_counts"):
        plain.fit_logits(logits, counts[:2], public)


# --- the noisy ensemble ---------------------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(gamma=st.floats(0.05, 20.0), seed=st.integers(0, 2**31))
def test_noise_is_drawn_once_and_cached(gamma, seed):
    ensemble = np.arange(12.0).reshape(4, 3)
    cached = NoisyLogitEnsemble(ensemble, gamma=gamma, rng=np.random.default_rng(seed))
    first, second = cached.read(), cached.read()
    assert first is second and cached.draws == 1 and not np.array_equal(first, ensemble)
    redrawn = NoisyLogitEnsemble(ensemble, gamma=gamma, rng=np.random.default_rng(seed), redraw=True)
    a, b = redrawn.read().copy(), redrawn.read()
    assert redrawn.draws == 2 and not np.array_equal(a, b)


def test_noise_is_laplace_of_scale_one_over_gamma():
    gamma = 0.5
    noise = NoisyLogitEnsemble(np.zeros((20000, 5)), gamma=gamma, rng=np.random.default_rng(3)).read()
    # Laplace(b): mean |X| = b; its standard error is b / sqrt(n).
    b, n = 1 / gamma, noise.size
    assert abs(np.abs(noise).mean() - b) < 5 * b / math.sqrt(n)
    assert abs(noise.mean()) < 5 * math.sqrt(2) * b / math.sqrt(n)


# --- end to end -----------------------------------------------------------------------------------
def test_end_to_end_torch_parties_and_server(digits):
    parties, public, (X_test, y_test) = digits
    noiseless = FedKD(mlp(), mlp(epochs=30), gamma=None, quantization_scale=None, clip=None, random_state=0)
    noiseless.fit(parties, public)
    noisy = FedKD(mlp(), mlp(epochs=30), gamma=1.0, clip=5.0, quantization_scale=10, random_state=0).fit(
        parties, public
    )
    assert noiseless.score(X_test, y_test) > 0.85 and noisy.score(X_test, y_test) > 0.8
    np.testing.assert_allclose(noisy.weights_.sum(axis=0), 1.0)  # ω sums to one per class
    assert noisy.draws_per_example_ == 1 and noisy.noisy_ensemble_.shape == (len(public), 10)
    assert math.isinf(noiseless.epsilon_) and any("no guarantee" in u for u in noiseless.ledger_.unaccounted)
    proba = noisy.predict_proba(X_test)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(noisy.classes_[proba.argmax(axis=1)], noisy.predict(X_test))


def test_ledger_equals_account_of_the_mechanism(digits):
    parties, public, _ = digits
    model = FedKD(RandomForestClassifier(n_estimators=10), mlp(epochs=5), gamma=0.5, clip=2.0,
                  quantization_scale=50, random_state=1).fit(parties, public)
    expected = QuantizedLaplaceEnsemble(10, 2.0, 0.5, len(public), quantization_scale=50)
    for unit in ("party", "example"):
        for analysis in ("tight", "classic"):
            assert model.ledger_.account(delta=1e-5, unit=unit, analysis=analysis).epsilon == pytest.approx(
                account(expected, delta=1e-5, analysis=analysis).epsilon, rel=1e-9)
    assert model.epsilon_ == pytest.approx(account(expected, delta=1e-5).epsilon, rel=1e-9)
    assert any("class counts" in text for text in model.ledger_.unaccounted)
    assert any("not the coordinator's view" in text for text in model.ledger_.unaccounted)
    # Public uniform weights: a party's weight sum is C/K, the sensitivity 2Z·C/K, and no class counts are sent.
    uniform = FedKD(RandomForestClassifier(n_estimators=10), mlp(epochs=5), gamma=0.5, clip=2.0, weighting="uniform",
                    random_state=1).fit(parties, public)
    entry = uniform.ledger_.entries[0].analyses["party"].parameters
    assert entry["sensitivity"] == pytest.approx(2 * 2.0 * 10 / len(parties))
    assert not any("class counts" in text for text in uniform.ledger_.unaccounted)


def test_redrawing_noise_per_batch_is_charged_per_draw(digits):
    parties, public, _ = digits
    settings_ = dict(gamma=0.5, clip=2.0, distill_epochs=4, random_state=2)
    once = FedKD(RandomForestClassifier(n_estimators=5), mlp(), **settings_).fit(parties, public)
    redrawn = FedKD(RandomForestClassifier(n_estimators=5), mlp(), redraw_noise_per_batch=True, **settings_)
    redrawn.fit(parties, public)
    assert once.draws_per_example_ == 1 and redrawn.draws_per_example_ == 4
    charged = redrawn.ledger_.entries[0].analyses["party"].parameters["draws_per_example"]
    assert charged == 4
    assert redrawn.epsilon_ > once.epsilon_
    assert redrawn.epsilon_ == pytest.approx(account(QuantizedLaplaceEnsemble(
        10, 2.0, 0.5, len(public), draws_per_example=4), delta=1e-5).epsilon, rel=1e-9)


def test_heterogeneous_parties_and_a_scikit_learn_server(digits):
    parties, public, (X_test, y_test) = digits
    local = [mlp(epochs=10), RandomForestClassifier(n_estimators=20), LogisticRegression(max_iter=300),
             KNeighborsClassifier(5), mlp(hidden=(16,), epochs=10)]
    model = FedKD(local, LogisticRegression(max_iter=500), gamma=1.0, clip=5.0, random_state=0).fit(parties, public)
    assert "argmax" in model.distillation_
    assert model.score(X_test, y_test) > 0.7
    counts = model.bandwidth_.parameter_counts
    assert counts[1] is None and counts[3] is None  # a forest and k-NN have no FedAvg parameter vector
    assert counts[2] % 65 == 0  # logistic regression: 64 weights and an intercept per class it saw
    assert counts[0] > counts[4] > 64 * 16  # the wider MLP sends more parameters per FedAvg round


def test_bandwidth_counts_packed_quantized_logits():
    report = BandwidthReport(n_public=1000, n_outputs=10, bits_per_value=math.ceil(math.log2(2 * 200 + 1)),
                             class_count_bytes=40, parameter_counts=(50_000, None))
    assert report.bits_per_value == 9 and report.logit_bytes == 1000 * 10 * 9 // 8
    assert report.bytes_per_party == report.logit_bytes + 40
    assert report.fedavg_bytes(100) == [50_000 * 4 * 100, None]
    with pytest.raises(ValueError, match="rounds"):
        report.fedavg_bytes(0)


def test_multilabel_parties(digits):
    parties, public, (X_test, y_test) = digits

    def labels(y):
        return np.stack([y % 2 == 0, y >= 5, np.isin(y, (0, 3, 6, 9))], axis=1).astype(int)

    multi = [(X, labels(y)) for X, y in parties]
    model = FedKD(RandomForestClassifier(n_estimators=20), mlp(epochs=30), gamma=None, quantization_scale=None,
                  clip=None, multilabel=True, random_state=0).fit(multi, public)
    predicted = model.predict(X_test)
    assert predicted.shape == (len(X_test), 3)
    assert (predicted == labels(y_test)).mean() > 0.8
    assert model.predict_proba(X_test).shape == (len(X_test), 3)
    with pytest.raises(ValueError, match="kl"):
        FedKD(RandomForestClassifier(), mlp(), loss="kl", multilabel=True).fit(multi, public)


def test_bundle_round_trip_keeps_the_ledger(digits, tmp_path):
    parties, public, (X_test, _) = digits
    model = FedKD(RandomForestClassifier(n_estimators=5), mlp(epochs=5), gamma=1.0, clip=2.0, random_state=0)
    model.fit(parties, public)
    path = privfed.save_bundle(model.server_model_, tmp_path / "fedkd", model.ledger_)
    loaded, ledger = privfed.load_bundle(path)
    np.testing.assert_array_equal(loaded.predict(X_test), model.server_model_.predict(X_test))
    assert ledger.account(delta=1e-5).epsilon == model.ledger_.account(delta=1e-5).epsilon


def test_same_random_state_same_model_and_jobs_do_not_matter(digits):
    parties, public, (X_test, _) = digits
    settings_ = dict(gamma=1.0, clip=3.0, random_state=4, noise_seed=8)
    first = FedKD(RandomForestClassifier(n_estimators=5), mlp(epochs=5), **settings_).fit(parties, public)
    second = FedKD(RandomForestClassifier(n_estimators=5), mlp(epochs=5), n_jobs=2, **settings_).fit(parties, public)
    np.testing.assert_array_equal(first.noisy_ensemble_, second.noisy_ensemble_)
    np.testing.assert_array_equal(first.predict(X_test), second.predict(X_test))


# --- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("settings_", "error", "message"),
    [
        ({"gamma": -1.0}, ValueError, "gamma"),
        ({"clip": None}, ValueError, "clip"),
        ({"quantization_scale": 0}, ValueError, "quantization_scale"),
        ({"weighting": "size"}, ValueError, "weighting"),
        ({"loss": "hinge"}, ValueError, "loss"),
        ({"temperature": 2.0}, ValueError, "temperature"),
        ({"loss": "kl", "temperature": 0.0}, ValueError, "temperature"),
        ({"distill_epochs": 0}, ValueError, "distill_epochs"),
        ({"redraw_noise_per_batch": "yes"}, TypeError, "redraw_noise_per_batch"),
        ({"delta": 0.0}, ValueError, "delta"),
        ({"noise_seed": -1}, ValueError, "noise_seed"),
        ({"noise_seed": 1.5}, TypeError, "noise_seed"),
    ],
)
def test_bad_parameters_fail_before_training(digits, settings_, error, message):
    parties, public, _ = digits
    with pytest.raises(error, match=message):
        FedKD(RandomForestClassifier(), mlp(), **settings_).fit(parties, public)


def test_bad_models_and_data_are_named(digits):
    parties, public, _ = digits
    with pytest.raises(ValueError, match="one per party"):
        FedKD([RandomForestClassifier()] * 2, mlp()).fit(parties, public)
    with pytest.raises(TypeError, match="server_model"):
        FedKD(RandomForestClassifier(), "server").fit(parties, public)
    with pytest.raises(ValueError, match="fit_soft"):
        FedKD(RandomForestClassifier(), LogisticRegression(), redraw_noise_per_batch=True).fit(parties, public)
    with pytest.raises(ValueError, match="public has features"):
        FedKD(RandomForestClassifier(), mlp()).fit(parties, public[:, :5])


def test_fedkd_is_importable_from_privfed():
    assert privfed.FedKD is FedKD


# --- the paper's quantizer (Eq. 4) ------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(scale=st.integers(1, 401), seed=st.integers(0, 2**31), spread=st.floats(0.01, 50.0))
def test_paper_quantizer_is_eq_4(scale, seed, spread):
    rng = np.random.default_rng(seed)
    messages = [rng.normal(scale=spread, size=(6, 4)) for _ in range(3)]
    quantized, z_max = paper_quantized(messages, quantization_scale=scale)
    assert z_max == max(np.abs(z).max() for z in messages)
    step = 2 * z_max / scale
    for z, q in zip(messages, quantized):
        levels = q / step
        np.testing.assert_allclose(levels, np.round(levels), atol=1e-6)  # on the grid of step 2·z_max/S
        assert (q >= z - 1e-9 * z_max).all() and (q - z < step + 1e-9 * z_max).all()  # rounded up, within a step
        assert q.min() >= -z_max * (1 + 1e-12) and q.max() <= z_max * 2 * math.ceil(scale / 2) / scale * (1 + 1e-12)
    # S + 1 levels at most
    assert len(np.unique(np.round(np.concatenate(quantized).ravel() / step))) <= scale + 1


def test_paper_quantizer_of_all_zero_logits_is_zero():
    quantized, z_max = paper_quantized([np.zeros((2, 3))], quantization_scale=10)
    assert z_max == 0.0 and not quantized[0].any()


def test_fedkd_with_the_paper_quantizer(digits):
    parties, public, (X_test, y_test) = digits
    fitted = [fit_classifier(RandomForestClassifier(n_estimators=10), X, y, n_classes=10, seed=i)
              for i, (X, y) in enumerate(parties)]
    logits = [party_logits(f, public, clip=4.0) for f in fitted]
    counts = np.stack([np.bincount(y, minlength=10) for _, y in parties])
    plain = FedKD(None, mlp(epochs=10), gamma=None, clip=4.0, quantization_scale=20, quantizer="paper",
                  random_state=0).fit_logits(logits, counts, public)
    clipped = [np.clip(z, -4.0, 4.0) for z in logits]
    expected, z_max = paper_quantized(clipped, quantization_scale=20)
    assert plain.z_max_ == z_max <= 4.0
    np.testing.assert_allclose(plain.noisy_ensemble_, np.einsum("kc,knc->nc", counts / counts.sum(axis=0), expected))
    assert plain.bandwidth_.bits_per_value == 5  # S + 1 = 21 levels
    assert any("z_max" in note for note in plain.ledger_.unaccounted)
    assert plain.score(X_test, y_test) > 0.8
    # with noise the ε rests on the public Z (odd S: Z·2⌈S/2⌉/S), and z_max is still recorded as unaccounted
    for scale, bound in ((20, 4.0), (21, 4.0 * 22 / 21)):
        noisy = FedKD(None, mlp(epochs=2), gamma=0.5, clip=4.0, quantization_scale=scale, quantizer="paper",
                      random_state=3).fit_logits(logits, counts, public)
        expected_epsilon = account(QuantizedLaplaceEnsemble(10, bound, 0.5, len(public), quantization_scale=scale),
                                   delta=1e-5).epsilon
        assert noisy.epsilon_ == pytest.approx(expected_epsilon)
        assert any("z_max" in note and "public clip" in note for note in noisy.ledger_.unaccounted)
        assert noisy.ledger_.account(delta=1e-5, observer="coordinator").epsilon == math.inf
    public_quantizer = FedKD(None, mlp(epochs=2), gamma=0.5, clip=4.0, quantization_scale=20,
                             random_state=3).fit_logits(logits, counts, public)
    assert public_quantizer.z_max_ is None and not any("z_max" in n for n in public_quantizer.ledger_.unaccounted)


def test_paper_quantizer_arguments_are_checked(digits):
    parties, public, _ = digits
    with pytest.raises(ValueError, match="quantizer"):
        FedKD(mlp(), mlp(), quantizer="round").fit(parties, public)
    with pytest.raises(ValueError, match="quantizer='paper'"):
        FedKD(mlp(), mlp(), gamma=None, quantization_scale=None, quantizer="paper").fit(parties, public)


def test_the_preflight_check_warns_when_the_noise_drowns_the_logit_margin(digits):
    """Logits clipped to ±1 (margin 2) under Laplace noise of scale 50: near chance, said before training."""
    parties, public, _ = digits
    model = FedKD(LogisticRegression(max_iter=200), LogisticRegression(max_iter=200), gamma=0.02, clip=1.0,
                  random_state=0)
    with pytest.warns(UserWarning, match=r"FedKD pre-flight: each public example's ensemble has a top-class margin of "
                                         r"at most 2 \(logits clipped to ±1\) and gets Laplace noise of scale 50 "
                                         r"\(1/gamma\).*NEAR CHANCE"):
        model.fit(parties, public)
