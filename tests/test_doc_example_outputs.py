"""Example outputs printed in the docs, compared with a fresh run of today's code, exactly as written.

docs/audit.md: every ``$ privfed audit --claims FILE`` block (its whole output and exit code) and the row count
it gives for the FedKT tables folder. docs/accounting.md: the randomized-response worked numbers and the worked
numbers of the DP-SGD, GNMax, Laplace-vote and Skellam sections (Opacus' 2.381 beside them is not recomputed).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest
from privfed.accounting.conversion import rdp_to_epsilon
from privfed.accounting.report import round_up

import privfed
from privfed.cli import main

ROOT = Path(__file__).resolve().parents[1]
AUDIT_PAGE = ROOT / "docs" / "audit.md"
ACCOUNTING_PAGE = ROOT / "docs" / "accounting.md"
AUDIT_BLOCK = re.compile(r"^```\n\$ privfed audit --claims (\S+)\n(.*?)\[exit code (\d)\]\n```",
                         re.MULTILINE | re.DOTALL)


def run_privfed(arguments: list[str]) -> tuple[int, str]:
    """Exit code and standard output of ``privfed ARGUMENTS``, run in this process from the repository root."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.chdir(ROOT):
        code = main(arguments)
    return code, printed.getvalue()


def audit_blocks() -> list[tuple[str, str, int]]:
    return [(claims, output, int(code)) for claims, output, code in AUDIT_BLOCK.findall(AUDIT_PAGE.read_text("utf-8"))]


def test_the_audit_page_shows_every_claims_example_it_ships():
    shown = {claims for claims, _, _ in audit_blocks()}
    assert shown == {"examples/claims/fedkt_l1_adult.json", "examples/claims/fedkd_cifar10.json",
                     "examples/claims/privatekt_demo.json", "examples/claims/selective_fd.json"}


@pytest.mark.parametrize("claims, output, code", audit_blocks(), ids=lambda value: str(value)[:40])
def test_each_audit_example_prints_what_the_page_shows(claims, output, code):
    assert run_privfed(["audit", "--claims", claims]) == (code, output)


def test_the_audit_page_counts_the_fedkt_table_rows_that_pass():
    code, output = run_privfed(["audit", "--claims", "examples/claims/fedkt_tables"])
    (passed,) = re.findall(r"^(\d+) of 71 claims files pass$", output, flags=re.MULTILINE)
    page = " ".join(AUDIT_PAGE.read_text("utf-8").split())
    assert f"a verdict per row: {passed} of 71 pass (exit code {code});" in page


def randomized_response_row(reports: int, *, labels: int, epsilon: float) -> tuple[str, str, str]:
    """Pure ε·T (exact), the RDP conversion and the reported (PLD) ε, both rounded up to four significant digits."""
    mechanism = privfed.RandomizedResponse(10, epsilon=epsilon, labels_per_report=labels, reports=reports)
    report = privfed.account([mechanism], delta=1e-6)
    rdp, _ = rdp_to_epsilon(report.orders, report.rdp, 1e-6, "tight")
    assert report.method == "pld" and report.epsilon <= rdp
    return f"{mechanism.pure_epsilon():g}", round_up(rdp), round_up(report.epsilon)


def test_the_randomized_response_worked_numbers_match_the_code():
    text = ACCOUNTING_PAGE.read_text("utf-8")
    section = text[text.index("*Worked numbers* (C = 10, K = 10, ε = 1 per report"):]
    for reports in (1, 10, 100):
        pure, rdp, pld = randomized_response_row(reports, labels=10, epsilon=1)
        assert f"\n| {reports} | {pure} | {rdp} | {pld} |\n" in section
    pure, rdp, pld = randomized_response_row(50, labels=100, epsilon=4)
    assert f"T = 50: pure {pure}, RDP {rdp}, PLD {pld}.)" in section


def worked_numbers() -> list[tuple[str, str]]:
    """(sentence of docs/accounting.md, the same sentence with today's numbers)."""
    def account(mechanism, analysis="tight"):
        return privfed.account([mechanism], delta=1e-5, analysis=analysis)

    examples = ROOT / "examples"
    dpsgd = privfed.DPSGD(1.1, 0.01, 2000)
    gnmax = privfed.GaussianNoisyMax(np.load(examples / "pipeline_votes.npy"), 40.0)
    laplace = privfed.LaplaceNoisyMax(np.load(examples / "votes.npy"), 0.04, 2, unit="party")
    tight, classic = account(laplace), account(laplace, "classic")
    skellam = dict(l1_sensitivity=4, l2_sensitivity=2 * 2**0.5, count=500)  # σ = 20: variance 400
    moved = account(privfed.SkellamMechanism(400.0, coordinate_sensitivity=2, moved_coordinates=2, **skellam))
    norms = account(privfed.SkellamMechanism(400.0, **skellam))
    assert (account(dpsgd).method, account(gnmax).method, moved.method, norms.method) == ("pld", "pld", "pld", "rdp")
    return [
        ("(σ = 1.1, q = 0.01, 2000 steps): tight ε = 2.160 (PLD); Opacus `RDPAccountant` 2.381; classic 2.797.",
         f"(σ = 1.1, q = 0.01, 2000 steps): tight ε = {round_up(account(dpsgd).epsilon)} (PLD); Opacus "
         f"`RDPAccountant` 2.381; classic {round_up(account(dpsgd, 'classic').epsilon)}."),
        ("σ = 40, k = 1): tight ε = 1.357 (PLD; data-independent); classic ε = 2.002.",
         f"σ = 40, k = 1): tight ε = {round_up(account(gnmax).epsilon)} (PLD; data-independent); classic ε = "
         f"{round_up(account(gnmax, 'classic').epsilon)}."),
        ("k = 2, γ = 0.04): classic 5.933 (data-independent 7.985), tight 4.100 (data-independent 4.698).",
         f"k = 2, γ = 0.04): classic {round_up(classic.epsilon)} (data-independent "
         f"{round_up(classic.epsilon_data_independent)}), tight {round_up(tight.epsilon)} (data-independent "
         f"{round_up(tight.epsilon_data_independent)})."),
        ("ε = 17.96 (PLD); from ℓ1 = 4, ℓ2 = 2√2 alone ε = 19.86 (RDP;",
         f"ε = {round_up(moved.epsilon)} (PLD); from ℓ1 = 4, ℓ2 = 2√2 alone ε = {round_up(norms.epsilon)} (RDP;"),
    ]


def test_the_worked_numbers_of_the_mechanisms_match_the_code():
    page = " ".join(ACCOUNTING_PAGE.read_text("utf-8").split())
    for written, computed in worked_numbers():
        assert written in page  # the sentence this test checks is still on the page
        assert computed == written
