"""DP-SGD's ε is computed once per process: ``account()``, σ's calibration, the fit and an empirical audit of it
share one RDP curve (:func:`~privfed.accounting.dpsgd.sampled_gaussian_rdp`) and one PLD (the PLD memo) for each
run's parameters (issue 46: an empirical DP-SGD audit spent 94 % of its time in ε accounting, recomputing the same
curve four times per claim). The counts below are the accounting calls themselves, spied on."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

import privfed.accounting._dp_accounting as bridge  # noqa: E402
import privfed.accounting.dpsgd as dpsgd  # noqa: E402

from privfed import DPSGD, DPConfig, TorchMLP, account, empirical_audit  # noqa: E402


@pytest.fixture
def calls(monkeypatch):
    """Count dp-accounting's RDP curves of DP-SGD and the PLDs built, from empty memos."""
    counted = {"rdp": 0, "pld": 0}
    rdp, interval = dpsgd.event_rdp, bridge.pld_interval

    def counting_rdp(*arguments, **keywords):
        counted["rdp"] += 1
        return rdp(*arguments, **keywords)

    def counting_pld(*arguments, **keywords):  # sizes the grid of each PLD the memo builds, once per PLD
        counted["pld"] += 1
        return interval(*arguments, **keywords)

    monkeypatch.setattr(dpsgd, "event_rdp", counting_rdp)
    monkeypatch.setattr(bridge, "pld_interval", counting_pld)
    monkeypatch.setattr(bridge, "PLD_MEMO", bridge.PLDMemo(256))
    dpsgd.sampled_gaussian_rdp.cache_clear()
    yield counted
    dpsgd.sampled_gaussian_rdp.cache_clear()


def test_account_computes_the_curve_and_the_pld_once_and_a_second_account_reuses_both(calls):
    first = account(DPSGD(1.7, 0.02, 30), delta=1e-5)
    assert calls == {"rdp": 1, "pld": 1}  # before: four curves (ε, data-independent ε, the PLD's hint, the report)
    again = account(DPSGD(1.7, 0.02, 30), delta=1e-5)
    assert calls == {"rdp": 1, "pld": 1} and again.epsilon == first.epsilon and again.method == "pld"


def test_the_memoised_curve_is_dp_accountings_and_cannot_be_altered_through_a_report(calls):
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant

    mechanism = DPSGD(0.9, 0.1, 12)
    orders = np.array([1.5, 2.0, 8.0, 64.0])
    accountant = rdp_privacy_accountant.RdpAccountant(orders=list(orders))
    accountant.compose(mechanism.add_or_remove_event())
    curve = mechanism.rdp(orders)
    assert np.array_equal(curve, accountant.rdp)
    curve[:] = 0.0  # the caller's copy
    assert np.array_equal(mechanism.rdp(orders), accountant.rdp) and calls["rdp"] == 1
    assert isinstance(mechanism.dp_event(), dp_accounting.SelfComposedDpEvent)


def test_replace_one_reads_two_curves_once_each(calls):
    first = account(DPSGD(1.2, 0.05, 20, neighboring_relation="replace_one"), delta=1e-5)
    assert calls["rdp"] == 2  # the add-or-remove curve at 2α and at 2α − 1 (Mironov 2017, Prop. 11)
    assert account(DPSGD(1.2, 0.05, 20, neighboring_relation="replace_one"), delta=1e-5).epsilon == first.epsilon
    assert calls["rdp"] == 2


def test_an_empirical_audit_of_a_dp_sgd_fit_accounts_the_run_once(calls):
    """The black-box audit's claim is the fitted run's ε: one curve and one PLD (before: four curves)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(240, 4))
    y = (X[:, 0] > 0).astype(int)
    model = TorchMLP(hidden=(4,), epochs=1, batch_size=16, lr=0.1, optimizer="sgd", random_state=0,
                     dp=DPConfig(noise_multiplier=1.5, max_grad_norm=1.0, delta=1e-5, sample_rate=0.1))
    result = empirical_audit(model, [(X[:120], y[:120])], X[120:], num_canaries=10, random_state=0)
    assert result.details["design"] == "dpsgd" and result.claimed_epsilon == result.details["ledger_epsilon"] > 0
    assert calls == {"rdp": 1, "pld": 1}
