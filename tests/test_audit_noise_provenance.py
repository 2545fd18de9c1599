"""privfed audit on the guarantee as implemented: noise provenance, size-revealing parameters, relations/assumptions.

Ledgers are built here directly (Ledger + record_noise_source), so these tests do not depend on the pipelines.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from privfed.accounting import DPSGD, LaplaceNoisyMax, Ledger, NoiseSource

from privfed import audit, save_bundle
from privfed.audit.assumptions import assumptions_check
from privfed.audit.sizes import size_check, size_findings
from privfed.bundle.manifest import MANIFEST_FILE, build_manifest, read_bundle_files
from privfed.bundle.privacy_statement import render_privacy_statement
from privfed.cli import main

sklearn_linear = pytest.importorskip("sklearn.linear_model")
pytest.importorskip("skops.io")

DOCS = Path(__file__).resolve().parents[1] / "docs"
VOTES = np.array([[9, 1], [7, 3], [8, 2]])


def _model():
    X = np.random.default_rng(0).normal(size=(40, 3))
    return sklearn_linear.LogisticRegression().fit(X, (X[:, 0] > 0).astype(int))


def _ledger(source: NoiseSource | None, *, training: DPSGD | None = None, unaccounted: str = "") -> Ledger:
    ledger = Ledger(delta=1e-5, seeds={"random_state": 3}, description="a student of 4 parties")
    ledger.record(LaplaceNoisyMax(VOTES, 0.05, 1, unit="party"), note="the server's noisy labels")
    if training is not None:
        ledger.record_training(training)
    if unaccounted:
        ledger.record_unaccounted(unaccounted)
    if source is not None:
        ledger.record_noise_source(source)
    return ledger


def _bundle(tmp_path: Path, name: str, ledger: Ledger) -> Path:
    return save_bundle(_model(), tmp_path / name, ledger)


def _as_schema_2(bundle: Path) -> None:
    """The bundle as privfed wrote it before schema 3: no ``noise`` key (manifest resealed, as the writer would)."""
    document = json.loads((bundle / "ledger.json").read_text())
    document["schema_version"] = 2
    del document["noise"]
    (bundle / "ledger.json").write_text(json.dumps(document))
    (bundle / MANIFEST_FILE).write_bytes(build_manifest(read_bundle_files(bundle)))


# --- noise provenance -------------------------------------------------------------------------------------------
def test_a_seeded_bundle_fails_as_a_release_and_says_so_first(tmp_path, capsys):
    root = NoiseSource.seeded(7)
    drawn = root.generator.laplace(scale=20.0, size=3)  # the server's noise, as a pipeline draws it
    bundle = _bundle(tmp_path, "seeded", _ledger(root))
    # The attack the check stands for: everything needed to regenerate the noise is in the bundle.
    recorded = json.loads((bundle / "ledger.json").read_text())["noise"]
    assert np.array_equal(NoiseSource.seeded(recorded["noise_seed"]).generator.laplace(scale=20.0, size=3), drawn)

    report = audit(bundle)
    check = report.check("noise provenance")
    assert check.status == "fail" and "noise_seed=7" in check.detail and report.exit_code == 1
    assert report.headline.startswith("NOT A PRIVATE RELEASE: every ε below is ∞ for whoever holds this bundle.")
    assert report.table().splitlines()[2].startswith("NOT A PRIVATE RELEASE")  # after "privfed audit: …" and a blank
    assert report.check("safe loading").status == "pass"  # an honest reproduction is still loaded
    assert main(["audit", str(bundle)]) == 1
    assert capsys.readouterr().out.splitlines()[2].startswith("NOT A PRIVATE RELEASE")
    assert main(["audit", str(bundle), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["headline"] == report.headline


def test_a_secret_bundle_passes_the_noise_provenance_check(tmp_path, capsys):
    bundle = _bundle(tmp_path, "secret", _ledger(NoiseSource.secret()))
    report = audit(bundle)
    check = report.check("noise provenance")
    assert check.status == "pass" and check.detail.startswith("secret: randomgen.AESCounter")
    assert report.headline.startswith("UNSIGNED BUNDLE") and report.exit_code == 0  # no noise headline
    assert "noise_seed" not in (bundle / "ledger.json").read_text()
    assert main(["audit", str(bundle)]) == 0
    assert capsys.readouterr().out.splitlines()[2].startswith("UNSIGNED BUNDLE")


def test_a_bundle_saved_before_noise_was_secret_is_failed_not_passed(tmp_path):
    bundle = _bundle(tmp_path, "old", _ledger(None))
    _as_schema_2(bundle)
    report = audit(bundle)
    check = report.check("noise provenance")
    assert report.check("ledger schema").detail.startswith("privfed ledger, schema version 2")
    assert check.status == "fail" and report.exit_code == 1
    assert "ledger schema 2" in check.detail and "random_state = 3" in check.detail
    assert report.headline.startswith("NOT A PRIVATE RELEASE")


def test_a_ledger_that_records_neither_noise_nor_seeds_is_flagged(tmp_path):
    ledger = Ledger(delta=1e-5, description="a student of 4 parties")
    ledger.record(LaplaceNoisyMax(VOTES, 0.05, 1, unit="party"))
    for name, old in (("schema3", False), ("schema2", True)):
        bundle = _bundle(tmp_path, name, ledger)
        if old:
            _as_schema_2(bundle)
        report = audit(bundle)
        assert report.check("noise provenance").status == "warn", name
        assert report.headline.startswith("NOISE PROVENANCE NOT RECORDED"), name


# --- the card ----------------------------------------------------------------------------------------------------
def test_the_card_of_a_seeded_bundle_says_first_that_it_is_not_a_private_release(tmp_path):
    card = (_bundle(tmp_path, "seeded", _ledger(NoiseSource.seeded(7))) / "MODEL_CARD.md").read_text()
    assert card.splitlines()[0] == ("**NOT A PRIVATE RELEASE: noise reproducible from noise_seed=7; every ε below is "
                                    "∞ for whoever holds this bundle.**")
    assert "- Reproducibility: splits and initialisation: random_state=3" in card.splitlines()
    assert "- Seeds:" not in card


def test_the_card_of_a_secret_bundle_opens_with_its_title_and_names_the_generator(tmp_path):
    ledger = _ledger(NoiseSource.secret())
    card = (_bundle(tmp_path, "secret", ledger) / "MODEL_CARD.md").read_text()
    assert card.startswith("# Model card: a student of 4 parties")
    assert "- Noise: secret, drawn by whoever added it — randomgen.AESCounter" in card
    assert "| noise | secret: drawn by whoever adds it" in render_privacy_statement(ledger)


def test_the_card_of_a_ledger_without_noise_provenance_flags_it_first(tmp_path):
    card = (_bundle(tmp_path, "none", _ledger(None)) / "MODEL_CARD.md").read_text()
    assert card.startswith("**NOISE PROVENANCE NOT RECORDED")
    assert "- Noise: not recorded" in card


# --- size-revealing parameters -----------------------------------------------------------------------------------
def test_the_size_scan_finds_a_sample_rate_of_batch_over_n():
    derived = DPSGD(1.0, 32 / 150, 40)  # q = batch_size / n for a party of 150 examples, no DPConfig(sample_rate=)
    check = size_check(_ledger(NoiseSource.secret(), training=derived))
    assert check.status == "fail" and check.section == "sizes"
    assert "q = 0.213333" in check.detail and "16/75" in check.detail and "entry 1 (training)" in check.detail


def test_the_size_scan_walks_compositions_and_passes_configured_rates():
    from privfed.accounting import compose_parallel, compose_sequential

    nested = compose_parallel([compose_sequential([DPSGD(1.0, 0.01, 10), DPSGD(1.0, 64 / 300, 10)]),
                               DPSGD(1.0, 0.064, 10)])
    uncovered, recorded, scanned = size_findings(_ledger(NoiseSource.secret(), training=nested))
    assert scanned == 3 and recorded == [] and len(uncovered) == 1 and "q = 0.213333" in uncovered[0]
    check = size_check(_ledger(NoiseSource.secret(), training=DPSGD(1.0, 0.01, 10)))
    assert check.status == "pass" and "1 sample rate(s), each a configured decimal" in check.detail


def test_the_size_scan_reads_a_dp_accounting_event_too():
    dp_accounting = pytest.importorskip("dp_accounting")
    ledger = Ledger(delta=1e-5, primary_unit="example")
    event = dp_accounting.PoissonSampledDpEvent(32 / 150, dp_accounting.GaussianDpEvent(10.0))
    ledger.record_dp_event(event, description="one DP-SGD step imported from dp-accounting")
    check = size_check(ledger)
    assert check.status == "fail" and "16/75" in check.detail


def test_a_ledger_with_nothing_noised_has_no_noise_to_regenerate(tmp_path):
    ledger = Ledger(delta=1e-5, description="FedKT-L0 of 4 parties")
    ledger.record_unaccounted("no noise is added anywhere")
    assert audit(_bundle(tmp_path, "l0", ledger)).check("noise provenance").status == "pass"


def test_a_size_release_recorded_as_unaccounted_passes_the_scan():
    ledger = _ledger(NoiseSource.secret(), training=DPSGD(1.0, 32 / 150, 40),
                     unaccounted="the DP-SGD sample rate q = batch_size / n reveals each party's training-set size")
    check = size_check(ledger)
    assert check.status == "pass" and "recorded as unaccounted" in check.detail
    seen_by_the_coordinator_only = _ledger(NoiseSource.secret(), training=DPSGD(1.0, 32 / 150, 40))
    seen_by_the_coordinator_only.record_unaccounted("the sample rate reveals sizes", observers=("coordinator",))
    assert size_check(seen_by_the_coordinator_only).status == "fail"  # the public ledger still publishes q


def test_a_data_dependent_stopping_point_fails_the_audit(tmp_path, capsys):
    ledger = Ledger(delta=1e-5, target_epsilon={"party": 50.0}, budget_basis="data_dependent",
                    seeds={"random_state": 3}, description="a student of 4 parties")
    ledger.record(LaplaceNoisyMax(VOTES, 0.05, 1, unit="party"))
    ledger.record_noise_source(NoiseSource.secret())
    bundle = _bundle(tmp_path, "stopping", ledger)
    report = audit(bundle)
    check = report.check("size-revealing parameters")
    assert check.status == "fail" and "answered queries" in check.detail and report.headline.startswith("UNSIGNED")
    assert main(["audit", str(bundle)]) == 1 and "size-revealing parameters    FAIL" in capsys.readouterr().out


# --- relations and assumptions -------------------------------------------------------------------------------------
def test_relations_and_assumptions_are_printed_per_observer(tmp_path):
    check = audit(_bundle(tmp_path, "plain", _ledger(NoiseSource.secret()))).check("relations and assumptions")
    assert check.status == "pass"
    assert ("public, party: relation add_or_remove_one / replace_one; assumes: honest execution; the public sees "
            "the published model and outputs only") in check.detail
    assert "coordinator, party: relation add_or_remove_one / replace_one; assumes: honest execution; no collusion" \
        in check.detail

    def stated(*, unit, observer, analysis, relations=("add/remove one example", "replace one example")):
        assumptions = ("no collusion with more than 2 parties",) if observer == "coordinator" else ()
        return SimpleNamespace(relation=None, relations=relations, assumptions=assumptions)

    reporting = SimpleNamespace(delta=1e-5, units=("example",), analysis="tight", account=stated)
    check = assumptions_check(reporting)
    assert check.status == "pass"
    assert check.detail.endswith("coordinator, example: relation add/remove one example / replace one example; "
                                 "assumes: honest execution; no collusion; no collusion with more than 2 parties")

    reporting.account = lambda **where: stated(**where, relations=())
    check = assumptions_check(reporting)
    assert check.status == "warn" and "relation none covered" in check.detail


# --- the documented output -----------------------------------------------------------------------------------------
def test_docs_show_the_seeded_headline_and_check_as_the_audit_prints_them(tmp_path):
    table = audit(_bundle(tmp_path, "seeded-bundle", _ledger(NoiseSource.seeded(7)))).table()
    lines = table.splitlines()
    documented = (DOCS / "audit.md").read_text(encoding="utf-8")
    block = re.search(r"```\nprivfed audit: seeded-bundle\n(.*?)```", documented, re.S).group(1)
    shown = [line for line in block.splitlines() if line != "..."]
    headline = lines[1:lines.index("", 2) + 1]
    assert shown[:len(headline)] == headline
    provenance = next(i for i, line in enumerate(lines) if line.startswith("noise provenance"))
    assert shown[len(headline)] == next(line for line in lines if line.startswith("check "))
    assert lines[provenance:provenance + 2] == shown[len(headline) + 1:len(headline) + 3]
    assert shown[-1] == lines[-1]
