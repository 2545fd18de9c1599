"""Bundles an attacker cannot quietly rewrite: manifest, signatures, loading what was verified, atomic writes,
bounded work and one-line errors (issue 18), and the card's metrics, data and intended use (issue 13, item 6)."""

from __future__ import annotations

import json
import os
import pickle
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from privfed.accounting import LaplaceNoisyMax, Ledger, LedgerFormatError
from privfed.accounting.ledger_entry import GENESIS_SHA256, LedgerEntry

import privfed
from privfed import BundleError, BundleIntegrityError, audit, bundle_digest, load_bundle, save_bundle
from privfed.bundle.manifest import MANIFEST_FILE, build_manifest, read_bundle_files
from privfed.cli import main

sklearn_ensemble = pytest.importorskip("sklearn.ensemble")
pytest.importorskip("skops.io")
pytest.importorskip("cryptography")

DELTA = 1e-5
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    features = rng.normal(size=(80, 4)).astype(np.float32)
    return features, (features[:, 0] > 0).astype(int)


@pytest.fixture(scope="module")
def forest(data):
    return sklearn_ensemble.RandomForestClassifier(n_estimators=3, max_depth=2, random_state=0).fit(*data)


def _ledger(target=None) -> Ledger:
    votes = np.random.default_rng(1).integers(0, 10, size=(30, 2))
    ledger = Ledger(delta=DELTA, target_epsilon=target, description="a student of 4 parties", seeds={"teachers": 0})
    ledger.record({"party": LaplaceNoisyMax(votes, 0.05, 1, unit="party"),
                   "example": LaplaceNoisyMax(votes, 0.05, 2, unit="example")}, note="student labels")
    ledger.record_unaccounted("FedKT-L1: the students are trained without noise", observers=("coordinator",))
    return ledger


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    private, public, fingerprint = privfed.generate_signing_key(tmp_path_factory.mktemp("keys") / "publisher.pem")
    return private, public, fingerprint


@pytest.fixture
def bundle(tmp_path, forest, keys):
    ledger = _ledger()
    return save_bundle(forest, tmp_path / "bundle", ledger, evidence=ledger.evidence(), signing_key=keys[0])


def _reseal(path: Path) -> None:
    """What anyone who can write the folder can do without the key: rewrite the manifest to match."""
    (path / MANIFEST_FILE).write_bytes(build_manifest(read_bundle_files(path)))


def _reseal_ledger(document: dict) -> None:
    previous = GENESIS_SHA256
    for raw in document["entries"]:
        raw["previous_sha256"] = previous
        raw["sha256"] = LedgerEntry.from_dict(raw, "entry").content_sha256()
        previous = raw["sha256"]
    document["num_entries"], document["head_sha256"] = len(document["entries"]), previous
    ledger = Ledger.from_dict({**document, "spent": None, "spent_by_observer": None, "delta": None,
                               "budget": {**document["budget"], "target_epsilon": {}}})
    ledger.delta = document["delta"]
    document["spent"] = ledger.totals()
    document["spent_by_observer"] = {observer: ledger.totals(observer) for observer in ("public", "coordinator")}


def _edit_ledger(path: Path, edit) -> None:
    document = json.loads((path / "ledger.json").read_text())
    edit(document)
    _reseal_ledger(document)
    (path / "ledger.json").write_text(json.dumps(document))


def _swap_model(path: Path, other: Path) -> None:
    (path / "model.skops").write_bytes((other / "model.skops").read_bytes())
    _edit_ledger(path, lambda d: d["model"]["files"].update(
        {"model.skops": json.loads((other / "ledger.json").read_text())["model"]["files"]["model.skops"]}))


def _halve_curve(document: dict) -> None:
    for member in document["entries"][0]["analyses"].values():
        for curve in member["curves"].values():
            curve["rdp_data_independent"] = [v / 2 for v in curve["rdp_data_independent"]]
            curve["rdp"] = [min(a, b) for a, b in zip(curve["rdp"], curve["rdp_data_independent"])]


FORGERIES = {
    "dropped last entry": lambda p, o: _edit_ledger(p, lambda d: d["entries"].pop()),
    "description": lambda p, o: _edit_ledger(p, lambda d: d.update(description="a model of 400 parties")),
    "target epsilon": lambda p, o: _edit_ledger(p, lambda d: d["budget"].update(target_epsilon={"party": 99.0})),
    "primary unit": lambda p, o: _edit_ledger(p, lambda d: d.update(primary_unit="example")),
    "public data": lambda p, o: _edit_ledger(p, lambda d: d.update(public_data_sha256="0" * 64)),
    "seeds": lambda p, o: _edit_ledger(p, lambda d: d.update(seeds={"teachers": 7})),
    "created": lambda p, o: _edit_ledger(p, lambda d: d.update(created="2020-01-01T00:00:00+00:00")),
    "model class": lambda p, o: _edit_ledger(p, lambda d: d["model"].update({"class": "privfed.Other"})),
    "delta with spent recomputed": lambda p, o: _edit_ledger(p, lambda d: d.update(delta=0.04)),
    "model swap": _swap_model,
    "resealed data-independent curve": lambda p, o: _edit_ledger(p, _halve_curve),
    "card edit": lambda p, o: (p / "MODEL_CARD.md").write_text("# Model card\n\nε = 0.1, all good.\n"),
    "card deleted": lambda p, o: (p / "MODEL_CARD.md").unlink(),
    "extra file": lambda p, o: (p / "notes.txt").write_text("trust me"),
}


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_every_forgery_is_detected(name, bundle, tmp_path, data, keys):
    other = save_bundle(sklearn_ensemble.RandomForestClassifier(n_estimators=2, random_state=1).fit(*data),
                        tmp_path / "other", _ledger())
    published = bundle_digest(bundle)
    FORGERIES[name](bundle, other)
    with pytest.raises(BundleError):  # a naive edit: the manifest no longer matches
        load_bundle(bundle)
    assert "bundle manifest" in {check.name for check in audit(bundle).failed}
    _reseal(bundle)  # the careful forger rewrites the manifest too: the digest changes, the signature breaks
    assert bundle_digest(bundle) != published
    with pytest.raises(BundleIntegrityError, match="does not verify"):
        load_bundle(bundle, public_key=keys[1])
    report = audit(bundle, public_key=keys[1])
    assert report.check("signature").status == "fail" and report.exit_code == 1


def test_signed_bundle_verdicts(bundle, keys, tmp_path, forest, capsys):
    model, ledger = load_bundle(bundle, public_key=keys[1])
    assert len(ledger) == 2
    signed = audit(bundle, public_key=keys[1])
    assert signed.exit_code == 0 and signed.check("signature").detail == f"signed by {keys[1]} (fingerprint {keys[2]})"
    assert audit(bundle).check("signature").status == "warn"  # a valid signature by a key nobody vouched for
    other_private, other_public, _ = privfed.generate_signing_key(tmp_path / "mallory.pem")
    privfed.sign_bundle(bundle, other_private)  # a forger re-signs with their own key
    assert audit(bundle, public_key=keys[1]).check("signature").status == "fail"
    unsigned = save_bundle(forest, tmp_path / "unsigned", _ledger())
    verdict = audit(unsigned).check("signature")
    assert verdict.status == "warn" and verdict.detail.startswith("unsigned: integrity only against accidents")
    with pytest.raises(BundleIntegrityError, match="unsigned"):
        load_bundle(unsigned, public_key=keys[1])


def test_cli_keygen_sign_and_audit(tmp_path, forest, capsys):
    key = tmp_path / "k.pem"
    assert main(["keygen", str(key)]) == 0 and (tmp_path / "k.pem.pub").is_file()
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    assert main(["keygen", str(key)]) == 2 and "already exists" in capsys.readouterr().err
    path = save_bundle(forest, tmp_path / "b", _ledger())
    assert main(["sign", str(path), "--key", str(key)]) == 0
    assert bundle_digest(path) in capsys.readouterr().out
    assert main(["audit", str(path), "--public-key", str(tmp_path / "k.pem.pub")]) == 0
    assert "signed by" in capsys.readouterr().out
    assert main(["sign", str(path), "--key", str(tmp_path / "missing.pem")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_model_is_loaded_from_the_verified_bytes(bundle, tmp_path, data, monkeypatch):
    """TOCTOU: the probe swapped model.skops between the check and the load (31 of 60 loads got another model)."""
    import privfed.bundle.load as bundle_module

    other = save_bundle(sklearn_ensemble.RandomForestClassifier(n_estimators=2, random_state=5).fit(*data),
                        tmp_path / "other", _ledger())
    real = bundle_module.verify_manifest

    def verify_then_swap(files, **kwargs):
        digest = real(files, **kwargs)
        os.replace(other / "model.skops", bundle / "model.skops")  # an atomic swap right after the check
        return digest

    original, _ = load_bundle(tmp_path / "bundle")
    monkeypatch.setattr(bundle_module, "verify_manifest", verify_then_swap)
    model, _ = load_bundle(bundle)
    assert np.array_equal(model.predict_proba(data[0]), original.predict_proba(data[0]))


def test_symlinks_and_folders_are_refused(bundle, tmp_path):
    (bundle / "passwd").symlink_to("/etc/passwd")
    with pytest.raises(BundleError, match="passwd .* is a symbolic link"):
        load_bundle(bundle)
    assert main(["audit", str(bundle)]) == 2
    (bundle / "passwd").unlink()
    (bundle / "sub").mkdir()
    with pytest.raises(BundleError, match="not a regular file"):
        load_bundle(bundle)
    (bundle / "sub").rmdir()
    link = tmp_path / "link"
    link.symlink_to(bundle)
    with pytest.raises(BundleError, match="symbolic link"):
        load_bundle(link)


def _forge_model_file(path: Path, content: bytes, name: str = "model.skops") -> None:
    (path / name).write_bytes(content)
    _edit_ledger(path, lambda d: d["model"]["files"].update({name: privfed.accounting.fingerprint.sha256_hex(content)}))
    _reseal(path)


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 truncated", b"not a zip at all"], ids=["empty", "zip", "text"])
def test_corrupt_model_files_are_one_line_errors(bundle, content, capsys):
    _forge_model_file(bundle, content)
    with pytest.raises(BundleError, match="could not be read as sklearn"):
        load_bundle(bundle)
    assert audit(bundle).exit_code == 1
    assert main(["audit", str(bundle)]) == 1 and "Traceback" not in capsys.readouterr().err


def test_truncated_real_skops_file(bundle):
    _forge_model_file(bundle, (bundle / "model.skops").read_bytes()[:500])
    with pytest.raises(BundleError, match="could not be read"):
        load_bundle(bundle)


def test_pickle_stored_as_safetensors_and_hostile_class_names(tmp_path, forest):
    torch = pytest.importorskip("torch")
    net = torch.nn.Linear(3, 2)
    path = save_bundle(net, tmp_path / "net", _ledger())
    _forge_model_file(path, pickle.dumps(forest), "model.safetensors")
    with pytest.raises(BundleError, match="could not be read as torch-module"):
        load_bundle(path, module=torch.nn.Linear(3, 2))
    for name in ("pipelines..os.system", "privfed.os.system", "privfed.nonexistent.Thing"):
        _edit_ledger(path, lambda d: d["model"].update({"family": "torch-safe-state", "class": name}))
        _reseal(path)
        with pytest.raises(BundleError, match="model class"):
            load_bundle(path)


def test_deeply_nested_ledger_and_bad_claims_are_one_line(bundle, tmp_path, capsys):
    (bundle / "ledger.json").write_text("[" * 50_000 + "]" * 50_000)
    _reseal(bundle)
    with pytest.raises(LedgerFormatError, match="nested more than"):
        load_bundle(bundle)
    assert main(["audit", str(bundle)]) == 1
    claims = tmp_path / "claims.json"
    claims.write_text(json.dumps({"type": "privfed.claims", "schema_version": 1, "mechanisms": [5],
                                  "claim": {"epsilon": 1.0, "delta": 1e-5, "unit": "party"}}))
    assert main(["audit", "--claims", str(claims)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "mechanisms[0]" in err


def test_twenty_million_query_ledger_loads_fast(bundle):
    def claim_many(document):
        for member in document["entries"][0]["analyses"].values():
            member["parameters"]["num_queries"] = member["num_queries"] = 20_000_000
            fresh = privfed.accounting.ledger_entry.analyse_mechanism(
                privfed.accounting.registry.public_mechanism_from_record(member)[0], evidence_sha256=None)
            member["pure_epsilon"] = fresh.pure_epsilon
            member["curves"] = {name: curve.to_dict() for name, curve in fresh.curves.items()}
            member["evidence_sha256"] = None
        document["evidence"] = None

    (bundle / "evidence.npz").unlink()
    _edit_ledger(bundle, claim_many)
    _reseal(bundle)
    start = time.perf_counter()
    _, ledger = load_bundle(bundle)
    assert time.perf_counter() - start < 5.0 and ledger.entries[0].analyses["party"].num_queries == 20_000_000
    start = time.perf_counter()
    audit(bundle)
    assert time.perf_counter() - start < 10.0


# --- atomic writes --------------------------------------------------------------------------------------
def test_failed_overwrite_keeps_the_old_bundle(bundle):
    digest = bundle_digest(bundle)
    with pytest.raises(TypeError, match="model must be"):
        save_bundle(object(), bundle, _ledger(), overwrite=True)

    class Unwritable(sklearn_ensemble.RandomForestClassifier):
        pass

    with pytest.raises(TypeError):
        save_bundle(Unwritable(n_estimators=1).fit(np.zeros((4, 2)), [0, 1, 0, 1]), bundle, _ledger(), overwrite=True)
    assert bundle_digest(bundle) == digest and load_bundle(bundle)[1] is not None
    assert sorted(p.name for p in bundle.parent.iterdir()) == ["bundle"]  # no staging folder left behind


def test_overwrite_never_deletes_foreign_files(tmp_path, forest):
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("years of work")
    with pytest.raises(FileExistsError, match="refusing to delete other files"):
        save_bundle(forest, home, _ledger(), overwrite=True)
    assert (home / "thesis.tex").read_text() == "years of work"


def test_concurrent_writers_without_overwrite_one_wins(tmp_path, forest, monkeypatch):
    import privfed.bundle.save as bundle_module

    barrier = threading.Barrier(4)
    real = bundle_module.publish_folder

    def synchronised(staging, directory, **kwargs):  # every writer renames at the same moment
        barrier.wait(timeout=30)
        real(staging, directory, **kwargs)

    monkeypatch.setattr(bundle_module, "publish_folder", synchronised)
    outcomes = []

    def write():
        try:
            save_bundle(forest, tmp_path / "race", _ledger())
            outcomes.append("ok")
        except FileExistsError:
            outcomes.append("exists")

    threads = [threading.Thread(target=write) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["exists", "exists", "exists", "ok"]
    bundle_digest(tmp_path / "race")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["race"]


class _Linear:
    """A safe-state model of about 700 kB, so that a save takes a noticeable time."""

    def __init__(self, weight):
        self.weight = weight

    def get_safe_state(self):
        return {"n": int(self.weight.shape[0])}, {"weight": self.weight}

    @classmethod
    def from_safe_state(cls, spec, tensors):
        return cls(tensors["weight"])


def _save_forever(path: Path, ledger: Ledger, progress: int) -> None:
    for i in range(1, 10**6):
        os.write(progress, b"s")  # a save starts
        save_bundle(_Linear(np.full((300, 300), float(i))), path, ledger, overwrite=True)
        os.write(progress, b"d")  # … and is done


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_killed_saves_leave_the_old_or_the_new_bundle(tmp_path):
    """The probe's SIGKILL during an overwrite left no loadable bundle in 12 of 27 trials."""
    path = tmp_path / "bundle"
    ledger = Ledger(delta=DELTA)
    ledger.record(LaplaceNoisyMax(np.random.default_rng(0).integers(0, 9, (20, 3)), 0.05, 1, unit="party"))
    start = time.perf_counter()
    save_bundle(_Linear(np.zeros((300, 300))), path, ledger)
    duration = time.perf_counter() - start
    rng = np.random.default_rng(0)
    killed_mid_save = 0
    for _ in range(10):
        reader, writer = os.pipe()
        child = os.fork()
        if child == 0:  # the child saves until it is killed
            try:
                os.close(reader)
                _save_forever(path, ledger, writer)
            finally:
                os._exit(0)
        os.close(writer)
        time.sleep(float(rng.uniform(0.0, 2.5)) * duration)
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        with os.fdopen(reader, "rb") as stream:
            killed_mid_save += stream.read().endswith(b"s")
        files = read_bundle_files(path)  # always there, complete, and verified: the old bundle or the new one
        privfed.bundle.manifest.verify_manifest(files)
        model, _ = privfed.bundle.load.open_bundle_files(files, model_class=_Linear)
        assert np.all(model.weight == model.weight[0, 0])
    assert killed_mid_save >= 3  # the kills did land inside saves


# --- legacy bundles, budget, card -----------------------------------------------------------------------
def test_legacy_bundle_is_refused_unless_allowed(bundle):
    for name in (MANIFEST_FILE, "SIGNATURE.json"):
        (bundle / name).unlink()
    with pytest.raises(BundleError, match="legacy bundle .* integrity cannot be verified"):
        load_bundle(bundle)
    with pytest.warns(privfed.LegacyBundleWarning, match="integrity unverifiable"):
        load_bundle(bundle, allow_legacy=True)
    report = audit(bundle)
    assert report.check("bundle manifest").status == "fail" and "legacy" in report.check("bundle manifest").detail


def test_bundle_over_its_own_budget_fails(tmp_path, forest):
    ledger = _ledger(target=100.0)
    path = save_bundle(forest, tmp_path / "b", ledger)
    assert audit(path).check("budget").status == "pass"
    _edit_ledger(path, lambda d: d["budget"].update(target_epsilon={"party": 0.5, "example": 0.5}))
    _reseal(path)
    report = audit(path)
    assert report.check("budget").status == "fail" and "over its own budget" in report.check("budget").detail


def test_delta_against_a_given_dataset_size_fails(tmp_path, forest):
    path = save_bundle(forest, tmp_path / "b", _ledger())
    assert audit(path, protected_units=1000).check("δ against protected units").status == "pass"
    assert audit(path, protected_units=10**6).check("δ against protected units").status == "fail"


def test_card_states_metrics_data_and_intended_use(tmp_path, forest, data):
    plain = (save_bundle(forest, tmp_path / "plain", _ledger()) / "MODEL_CARD.md").read_text()
    assert "Not evaluated" in plain and "Not stated" in plain
    path = save_bundle(forest, tmp_path / "b", _ledger(), metrics={"accuracy": 0.91},
                       data={"public": data[0], "parties": "4 hospitals' admissions, 2019"},
                       intended_use="Triage research only; not for individual decisions.")
    card = (path / "MODEL_CARD.md").read_text()
    assert "| accuracy | 0.91 |" in card and "shape (80, 4)" in card and "4 hospitals" in card
    assert privfed.data_fingerprint({"public": data[0]}) in card and "Triage research only" in card
    assert audit(path).check("model card").status == "pass"
    (path / "MODEL_CARD.md").write_text(card.replace("0.91", "0.99"))
    _reseal(path)
    assert audit(path).check("model card").status == "fail"
    with pytest.raises(ValueError, match="metrics must map names to finite numbers"):
        save_bundle(forest, tmp_path / "c", _ledger(), metrics={"accuracy": float("nan")})


def test_pipeline_evidence_attribute_is_accepted(tmp_path):
    from privfed.pipelines.fedkt.estimator import FedKT
    from sklearn.datasets import make_classification
    from sklearn.tree import DecisionTreeClassifier

    X, y = make_classification(n_samples=700, n_features=6, random_state=0)
    parties = [(X[i * 150:(i + 1) * 150], y[i * 150:(i + 1) * 150]) for i in range(3)]
    model = FedKT(DecisionTreeClassifier(max_depth=3), n_partitions=2, n_teachers=2, privacy="L1", gamma=0.05,
                  query_fraction=0.4, random_state=0).fit(parties, X[450:])
    path = save_bundle(model, tmp_path / "b", evidence=model.evidence_)
    _, ledger = load_bundle(path)
    assert set(ledger.evidence()) == set(model.ledger_.evidence())
    assert audit(path).exit_code == 0


def test_claims_with_huge_gamma_are_refused_in_one_line_not_a_traceback(tmp_path, capsys):
    claims = tmp_path / "claims.json"
    claims.write_text(json.dumps({
        "type": "privfed.claims", "schema_version": 1, "claim": {"epsilon": 1.0, "delta": 1e-5, "unit": "party"},
        "mechanisms": [{"kind": "laplace_noisy_max", "unit": "party",
                        "parameters": {"gamma": 400, "votes_per_unit": 3, "num_queries": 10, "num_classes": 2}}]}))
    assert main(["audit", "--claims", str(claims)]) == 2  # bad input: one answer's ε = 2400 is beyond 700
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and captured.err.count("\n") == 1 and "gamma" in captured.err


@pytest.mark.parametrize("suffix", [".skops", ".safetensors", ".ubj"])
def test_corrupt_foreign_model_file_is_a_failed_check(tmp_path, suffix, capsys):
    """Issue 13: `privfed audit` on a corrupt model file printed a zipfile.BadZipFile traceback."""
    model = tmp_path / f"model{suffix}"
    model.write_bytes(b"PK\x03\x04 this is not a model")
    claims = ROOT / "examples" / "claims" / "fedkt_l1_adult.json"  # shipped with the repository
    assert main(["audit", str(model), "--claims", str(claims)]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "is not a readable" in captured.out


@pytest.mark.parametrize("value", [10**7, "7", -1, None])
def test_out_of_range_parameters_are_one_line_errors(bundle, value, capsys):
    (bundle / "evidence.npz").unlink()

    def forge(document):
        document["evidence"] = None
        for member in document["entries"][0]["analyses"].values():
            member["parameters"]["num_classes"] = value
            member["evidence_sha256"] = None

    document = json.loads((bundle / "ledger.json").read_text())
    forge(document)
    previous = GENESIS_SHA256
    for raw in document["entries"]:
        raw["previous_sha256"] = previous
        raw["sha256"] = previous = LedgerEntry.from_dict(raw, "entry").content_sha256()
    document["head_sha256"] = previous
    (bundle / "ledger.json").write_text(json.dumps(document))
    _reseal(bundle)
    with pytest.raises(LedgerFormatError, match="num_classes must be an integer in"):
        load_bundle(bundle)
    report = audit(bundle)
    assert report.check("recorded totals").status == "fail" and report.exit_code == 1
    assert main(["audit", str(bundle)]) == 1 and "Traceback" not in capsys.readouterr().err


def _claim_a_billion_reports(bundle: Path) -> None:
    """A forger rewrites the ledger to a randomized response of 10⁹ reports, resealing entries and manifest."""
    def billion(document):
        document["entries"][0]["analyses"] = {unit: privfed.accounting.ledger_entry.analyse_mechanism(
            privfed.RandomizedResponse(10, epsilon=1.0, reports=10**9, unit=unit), evidence_sha256=None).to_dict()
            for unit in ("party", "example")}
        document["evidence"] = None

    (bundle / "evidence.npz").unlink()
    _edit_ledger(bundle, billion)
    _reseal(bundle)


def test_a_billion_reports_are_accounted_in_bounded_time(bundle):
    """Identical reports compose in closed form (RDP, pure); the PLD is not self-composed 10⁹ times."""
    start = time.perf_counter()
    report = privfed.account(privfed.RandomizedResponse(10, epsilon=1.0, reports=10**9), delta=DELTA)
    assert time.perf_counter() - start < 5.0 and report.method == "rdp"
    one = privfed.account(privfed.RandomizedResponse(10, epsilon=1.0, reports=1000), delta=DELTA, analysis="tight")
    assert report.epsilon <= 10**9 * 1.0 and report.epsilon > one.epsilon
    _claim_a_billion_reports(bundle)
    start = time.perf_counter()
    audited = audit(bundle)
    assert time.perf_counter() - start < 30.0
    assert "1.496e+08" in audited.check("recorded totals").detail or audited.check("ledger chain").status == "pass"


def test_the_signature_is_checked_before_any_recomputation(bundle, keys, monkeypatch):
    _claim_a_billion_reports(bundle)

    def forbidden(*args, **kwargs):
        raise AssertionError("recomputed a bundle whose signature does not verify")

    import importlib

    driver = importlib.import_module("privfed.audit.driver")
    for name in ("read_ledger", "entry_checks", "totals_check"):
        monkeypatch.setattr(driver, name, forbidden)
    report = audit(bundle, public_key=keys[1])
    assert report.check("signature").status == "fail" and report.exit_code == 1
    assert "not attempted" in report.check("recomputation").detail


def test_a_claims_file_with_a_billion_rounds_and_reports_is_audited_in_bounded_time(tmp_path):
    claims = tmp_path / "claims.json"
    claims.write_text(json.dumps({
        "type": "privfed.claims", "schema_version": 1, "description": "huge counts", "setting": "federated",
        "claim": {"epsilon": 1.0, "delta": 1e-6, "unit": "party", "scope": "per_round", "rounds": 10**9,
                  "clients_per_round": 1000, "max_moment": 8},
        "mechanisms": [
            {"kind": "randomized_response", "unit": "party",
             "parameters": {"num_classes": 10, "epsilon": 1.0, "labels_per_report": 1, "reports": 10**9}},
            {"kind": "gaussian_noisy_max", "unit": "party",
             "parameters": {"num_queries": 10**9, "num_classes": 10, "sigma": 40.0}}]}))
    start = time.perf_counter()
    report = audit(None, claims=claims)
    assert time.perf_counter() - start < 30.0
    assert "not computed over 1000000000 rounds" in report.check("shuffling").detail
