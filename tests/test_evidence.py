"""privfed evidence: the pack a regulator receives, checked as they would check it (verify.py, outside privfed)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import dp_accounting
import numpy as np
import pytest
from privfed.accounting import LaplaceNoisyMax, Ledger
from privfed.accounting.auditing import audit_scores
from sklearn.ensemble import RandomForestClassifier

from privfed.bundle.save import save_bundle
from privfed.cli import main

DELTA = 1e-5


def _ledger() -> Ledger:
    votes = np.random.default_rng(1).integers(0, 10, size=(20, 2))
    ledger = Ledger(delta=DELTA, description="a student of 4 parties")
    ledger.record({"party": LaplaceNoisyMax(votes, 0.05, 1, unit="party"),
                   "example": LaplaceNoisyMax(votes, 0.05, 2, unit="example")}, note="student labels")
    ledger.record_dp_event(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(5.0), 10),
                           description="noisy sums", unit="party")
    return ledger


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    rng = np.random.default_rng(0)
    features = rng.normal(size=(60, 4)).astype(np.float32)
    forest = RandomForestClassifier(n_estimators=2, max_depth=2, random_state=0).fit(features, features[:, 0] > 0)
    scores = rng.normal(size=40)
    included = rng.random(40) < 0.5
    result = audit_scores(scores + included, included, claimed_epsilon=1.0, delta=DELTA, unit="party",
                          threat_model="canary parties", random_state=0)
    return save_bundle(forest, tmp_path_factory.mktemp("b") / "BUNDLE", _ledger(), audit_result=result)


def _verify(pack: Path, *args: str) -> subprocess.CompletedProcess:
    """Run verify.py as a regulator would: its own interpreter, inside the folder, privfed not importable."""
    env = {**os.environ, "PYTHONPATH": "", "PYTHONNOUSERSITE": "1"}
    code = ("import sys; sys.modules['privfed'] = None; import runpy; sys.argv = ['verify.py', *sys.argv[1:]]; "
            "runpy.run_path('verify.py', run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code, *args], cwd=pack, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def signed_pack(bundle, tmp_path_factory):
    folder = tmp_path_factory.mktemp("pack")
    key = folder / "KEY.pem"
    assert main(["keygen", "--type", "ec", str(key)]) == 0
    assert main(["evidence", str(bundle), "--out", str(folder / "EVIDENCE"), "--key", str(key)]) == 0
    return folder / "EVIDENCE", Path(f"{key}.pub")


def test_pack_holds_every_section(signed_pack):
    pack, _ = signed_pack
    names = {path.name for path in pack.iterdir()}
    assert {"README.md", "report.html", "deployment_facts.json", "events.json", "profiles.json", "audit.json",
            "empirical_audit.json", "ledger.json", "verify.py", "pack.sig", "publisher.pub"} <= names
    facts = json.loads((pack / "deployment_facts.json").read_text())
    assert set(facts) >= {"tier1", "tier2", "tier3"} and facts["follows"]["url"].startswith("https://registry.opendp")
    rows = facts["tier2"]["privacy_loss"]
    party = next(row for row in rows if row["observer"] == "public" and row["unit"] == "party")
    assert party["tradeoff_basis"] == "pld" and party["gdp_mu"] > 0
    assert set(party["true_positive_rates"]) == {"0.001", "0.01", "0.1"}


def test_two_sided_epsilon_from_the_cards_audit(signed_pack):
    pack, _ = signed_pack
    two_sided = json.loads((pack / "deployment_facts.json").read_text())["tier3"]["empirical_audit"]
    assert two_sided["unit"] == "party" and 0 <= two_sided["lower"] <= two_sided["upper"]
    assert "ε ∈ [" in (pack / "README.md").read_text()


def test_verify_passes_without_privfed_and_recomputes_every_entry(signed_pack):
    pack, public = signed_pack
    done = _verify(pack, "--public-key", str(public))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "signature: valid" in done.stdout
    assert done.stdout.count(": MATCH ε = ") == 3
    assert "3 of 3 accounted entries recomputed to 1e-09 (100.0 %)" in done.stdout


def test_verify_fails_after_any_change(signed_pack, tmp_path):
    import shutil

    pack, public = signed_pack
    copy = tmp_path / "tampered"
    shutil.copytree(pack, copy)
    events = json.loads((copy / "events.json").read_text())
    events["entries"][0]["epsilon"] *= 0.5  # a smaller ε than the ledger's
    (copy / "events.json").write_text(json.dumps(events))
    done = _verify(copy, "--public-key", str(public))
    assert done.returncode == 1 and "signature: INVALID" in done.stdout and "MISMATCH" in done.stdout


def test_unsigned_pack_says_so(bundle, tmp_path):
    assert main(["evidence", str(bundle), "--out", str(tmp_path / "E")]) == 0
    done = _verify(tmp_path / "E")
    assert done.returncode == 0 and "signature: unsigned" in done.stdout


def test_audit_json_and_bad_input(bundle, tmp_path, capsys):
    audit = tmp_path / "audit.json"
    audit.write_text(json.dumps({"epsilon_lower": 0.25, "claimed_epsilon": 2.0, "unit": "example", "confidence": 0.95,
                                 "details": {"design": "fedkt-l2"}, "threat_model": "planted canaries"}))
    assert main(["evidence", str(bundle), "--out", str(tmp_path / "E"), "--audit-json", str(audit)]) == 0
    assert "empirical audit (fedkt-l2): ε ∈ [0.25, " in capsys.readouterr().out
    assert main(["evidence", str(bundle), "--out", str(tmp_path / "E")]) == 2  # exists, no --overwrite
    assert "exists; pass overwrite=True" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("[]")
    assert main(["evidence", str(bundle), "--out", str(tmp_path / "F"), "--audit-json",
                 str(tmp_path / "bad.json")]) == 2


def test_the_evidence_page_runs_as_written(tmp_path, monkeypatch, capsys):
    import re
    import shlex

    doc = (Path(__file__).resolve().parents[1] / "docs" / "evidence.md").read_text(encoding="utf-8")
    python_blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.DOTALL)
    bash_blocks = re.findall(r"```bash\n(.*?)```", doc, flags=re.DOTALL)
    monkeypatch.chdir(tmp_path)
    for block in python_blocks:
        exec(compile(block, "docs/evidence.md", "exec"), {})
    for line in "\n".join(bash_blocks).splitlines():
        for command in line.split("&&"):
            words = shlex.split(command)
            if words[0] == "cd":
                monkeypatch.chdir(words[1])
            elif words[0] == "privfed":
                assert main(words[1:]) == 0, command
            else:
                assert words[:2] == ["python", "verify.py"], command
                done = _verify(Path.cwd(), *words[2:])
                assert done.returncode == 0, done.stdout + done.stderr
                assert "verdict: PASS" in done.stdout and "signature: valid" in done.stdout
    assert "party" in capsys.readouterr().out


@pytest.mark.filterwarnings("ignore:FedKT. only .* server queries were answered")
def test_a_fedkt_run_is_recomputed_entry_by_entry(tmp_path):
    """A real pipeline's ledger: every accounted entry recomputed to 1e-9; what is not is named with its reason."""
    from privfed.pipelines import FedKT, federated_split
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    split = federated_split(X, y, n_parties=4, beta=1.0, public_size=300, test_size=300, min_size=20, random_state=0)
    model = FedKT(RandomForestClassifier(n_estimators=5), RandomForestClassifier(n_estimators=5), n_partitions=1,
                  n_teachers=2, privacy="L1", gamma=0.5, query_fraction=0.2, random_state=0)
    model.fit(split.parties, split.X_public)
    bundle = save_bundle(model, tmp_path / "BUNDLE")
    assert main(["evidence", str(bundle), "--out", str(tmp_path / "E")]) == 0
    done = _verify(tmp_path / "E")
    assert done.returncode == 0, done.stdout + done.stderr
    entries = json.loads((tmp_path / "E" / "events.json").read_text())["entries"]
    accounted = [row for row in entries if row["kind"] != "unaccounted"]
    assert accounted and all(row["recomputable"] for row in accounted)
    assert done.stdout.count(": MATCH ε = ") == len(accounted)
    assert done.stdout.count("NOT RECOMPUTED: unaccounted release") == len(entries) - len(accounted)


@pytest.fixture(scope="module")
def skellam_pack(tmp_path_factory):
    """FedKD over a secure sum with distributed Skellam noise (secret shares), its bundle and its unsigned pack."""
    import warnings

    from privfed.pipelines import FedKD
    from sklearn.linear_model import LogisticRegression
    from sklearn.tree import DecisionTreeClassifier

    from tests.conftest import digits_federation

    parties, public, _ = digits_federation(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = FedKD(LogisticRegression(max_iter=200), DecisionTreeClassifier(max_depth=4), gamma=None,
                      aggregator="skellam", secure_aggregation=True, sigma=12.0, clip=4.0, quantization_scale=2,
                      classes=np.arange(10), random_state=0).fit(parties, public[:40])
    folder = tmp_path_factory.mktemp("skellam")
    bundle = save_bundle(model, folder / "BUNDLE")
    assert main(["evidence", str(bundle), "--out", str(folder / "E")]) == 0
    return folder / "E", model


def test_verify_recomputes_the_skellam_entries_without_privfed(skellam_pack):
    """The Skellam PLD from numpy's PMF and the closed-form RDP bound, both to 1e-9 of privfed's numbers."""
    pack, model = skellam_pack
    done = _verify(pack)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [row for row in json.loads((pack / "events.json").read_text())["entries"] if row.get("mechanism")]
    skellam = [row for row in rows if row["mechanism"] == "skellam"]
    assert skellam and all(row["recomputable"] for row in skellam)
    assert done.stdout.count("MATCH ε = ") == len(rows)
    assert done.stdout.count("and its Skellam RDP bound") == len(skellam)
    assert max(row["epsilon"] for row in skellam) == pytest.approx(
        model.ledger_.account(DELTA, observer="coordinator").epsilon, rel=1e-6)


@pytest.mark.parametrize("change", ["epsilon", "variance", "rdp_epsilon", "shift"])
def test_verify_refuses_a_tampered_skellam_entry(skellam_pack, tmp_path, change):
    import shutil

    pack, _ = skellam_pack
    copy = tmp_path / "tampered"
    shutil.copytree(pack, copy)
    events = json.loads((copy / "events.json").read_text())
    row = next(row for row in events["entries"] if row.get("mechanism") == "skellam")
    if change == "epsilon":
        row["epsilon"] *= 0.9  # a smaller ε than the ledger's
    elif change == "variance":
        row["skellam_rdp"]["variance"] *= 2.0
    elif change == "rdp_epsilon":
        row["skellam_rdp"]["epsilon"] *= 0.5
    else:
        row["event"]["event"]["shift"] = 1
    (copy / "events.json").write_text(json.dumps(events))
    done = _verify(copy)
    assert done.returncode == 1 and "MISMATCH" in done.stdout, done.stdout


@pytest.mark.slow
def test_verify_recomputes_every_accounted_entry_of_the_pipelines_default_and_private_ledgers():
    """The eight runs of docs/results.md's observer table (each pipeline's default and private configuration): every
    accounted entry and unit recomputed by verify.py's own functions to 1e-9 (the end-to-end runs are above)."""
    import logging
    import warnings

    from bench.observers import _configurations, _digits
    from privfed.evidence import verify_script as evidence_verify
    from privfed.evidence.pack import ledger_entry_epsilons

    logging.getLogger("absl").setLevel(logging.ERROR)
    parties, public = _digits()
    accounted, matched = 0, 0
    for _, _, estimator in _configurations():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            estimator.fit(parties, public)
        for row in ledger_entry_epsilons(estimator.ledger_, DELTA):
            if row["kind"] == "unaccounted":
                continue
            accounted += 1
            row = json.loads(json.dumps(row))  # as the pack holds it
            if row["recomputable"]:
                value, recorded = evidence_verify.recompute(row), float(row["epsilon"])
                matched += (abs(value - recorded) <= 1e-9 * max(1.0, recorded)
                            and not evidence_verify.skellam_bound_problem(row, recorded))
    assert accounted == 20 and matched == accounted
