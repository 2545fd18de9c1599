"""privfed selftest: passes on privfed's noise code, fails on planted noise bugs, through Python and the CLI."""

import json

import numpy as np
import pytest
from privfed.pipelines.privatekt import steps as privatekt_steps
from privfed.pipelines.protocol import secure_sum, voting

import privfed
from privfed.audit.selftest import CHECK_NAMES, selftest
from privfed.cli import main

CHEAP = ["skellam-share", "secure-sum", "fedkt-skellam-share", "privatekt-randomized-response",
         "selective-fd-randomized-response", "fedkd-laplace", "party-noise-sources"]


def test_the_cheap_checks_pass_on_privfeds_code_and_state_alpha_and_power():
    report = selftest(only=CHEAP)
    assert report.passed, report.to_dict()
    assert [check.name for check in report.checks] == [name for name in CHECK_NAMES if name in CHEAP]
    assert report.n_p_values == 43 and all(check.alpha == pytest.approx(0.01 / 43) for check in report.checks)
    assert all(check.power and min(check.p_values) >= check.alpha for check in report.checks)
    assert privfed.selftest is selftest


def test_a_skellam_share_of_the_wrong_variance_fails(monkeypatch):
    honest = secure_sum.add_skellam_share
    monkeypatch.setattr(secure_sum, "add_skellam_share",
                        lambda values, variance, **kw: honest(values, 1.1 * variance, **kw))  # 10 % too much
    report = selftest(only=["skellam-share", "secure-sum"])
    assert report.failed == ["skellam-share", "secure-sum"]


def test_a_keep_probability_computed_without_the_label_count_fails(monkeypatch):
    honest = privatekt_steps.perturb_labels
    monkeypatch.setattr(privatekt_steps, "perturb_labels", lambda labels, *, keep_probability, num_classes, rng:
                        honest(labels, keep_probability=keep_probability + (1 - keep_probability) / num_classes,
                               num_classes=num_classes, rng=rng))
    assert selftest(only=["privatekt-randomized-response"]).failed == ["privatekt-randomized-response"]


def test_noise_skipped_on_unanimous_votes_fails(monkeypatch):
    honest = voting.noisy_labels

    def skips(votes, rng, **kw):
        labels = honest(votes, rng, **kw)
        unanimous = (np.asarray(votes) > 0).sum(axis=1) == 1
        return np.where(unanimous, np.asarray(votes).argmax(axis=1), labels)

    monkeypatch.setattr(voting, "noisy_labels", skips)
    check = selftest(only=["laplace-noisy-max"]).checks[0]
    assert check.status == "fail" and check.p_values[1] == 0.0 and max(check.p_values) > check.alpha


def test_the_cli_exits_0_on_a_pass_1_on_a_failure_and_2_on_bad_input(monkeypatch, capsys):
    assert main(["selftest", "--only", "secure-sum", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["checks"][0]["status"] == "pass"
    honest = secure_sum.add_skellam_share
    monkeypatch.setattr(secure_sum, "add_skellam_share",
                        lambda values, variance, **kw: honest(values, 0.5 * variance, **kw))
    assert main(["selftest", "--only", "secure-sum"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "FAIL: secure-sum"
    assert main(["selftest", "--only", "no-such-check"]) == 2
    assert "only must name checks among" in capsys.readouterr().err


def test_bad_arguments_are_refused_in_one_line():
    with pytest.raises(ValueError, match="family_alpha must be in"):
        selftest(family_alpha=1.0)
    with pytest.raises(ValueError, match="size_factor must be in"):
        selftest(size_factor=0)
    assert len(CHECK_NAMES) == 14


def test_every_planted_bug_applies_to_the_code_and_leaves_the_accounting_alone(tmp_path):
    """bench/mutations/: each patch still applies to the file it mutates, and none touches accounting/."""
    import re
    import shutil
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    patches = sorted((root / "bench" / "mutations").glob("*.patch"))
    assert len(patches) >= 12
    for patch in patches:
        paths = re.findall(r"^\+\+\+ b/(\S+)$", patch.read_text(encoding="utf-8"), flags=re.MULTILINE)
        assert paths and all(path.startswith("pipelines/") for path in paths), patch.name
        for path in paths:
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / path, tmp_path / path)
        checked = subprocess.run(["git", "apply", "--check", str(patch)], cwd=tmp_path, capture_output=True, text=True)
        assert checked.returncode == 0, (patch.name, checked.stderr)


def test_the_mutation_tables_are_the_rendering_of_the_committed_raw_results():
    from pathlib import Path

    from bench.mutation_testing import CORRECT, RAW_FILES, _merged, table

    root = Path(__file__).resolve().parents[1]
    documents = [json.loads((root / path).read_text(encoding="utf-8")) for path in RAW_FILES]
    assert table(documents) in (root / "docs" / "audit.md").read_text(encoding="utf-8")
    (parameters,), (correct,) = documents[0]["records"], documents[1]["records"]
    assert parameters["mutation"] == correct["mutation"] == CORRECT and correct["selftest"]["repeats"] >= 1
    assert parameters["parameter_check"]["results"] and not parameters["parameter_check"]["failed"]
    mutants = [record for document in documents[2:] for record in document["records"] if record["mutation"] != CORRECT]
    patches = {patch.stem for patch in (root / "bench" / "mutations").glob("*.patch")}
    assert mutants and {record["mutation"] for record in mutants} <= patches
    assert all(record["caught_by"] for record in _merged(documents)[1:])  # every file's runs and checks pooled


def test_fedkt_l2_party_labels_sees_a_tenth_of_clean_labels(monkeypatch):
    """bench/mutations/16: a tenth of the L2 student's labels are the clean teacher vote: the party-step check fails."""
    from privfed.pipelines.fedkt import steps as fedkt_steps

    honest = fedkt_steps.NoisyArgmax.labels

    def leaking(self, votes, rng):
        labels = honest(self, votes, rng)
        labels[: len(labels) // 10] = np.asarray(votes)[: len(labels) // 10].argmax(axis=1)
        return labels

    assert selftest(only=["fedkt-l2-party-labels"]).passed
    monkeypatch.setattr(fedkt_steps.NoisyArgmax, "labels", leaking)
    check = selftest(only=["fedkt-l2-party-labels"]).checks[0]
    assert check.status == "fail" and "a clean-label leak of 10%" in check.power
