"""Bundles signed with OpenSSF model signing (privfed/bundle/model_signature.py): verified by model-signing itself."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from privfed.accounting import LaplaceNoisyMax, Ledger

import privfed
from privfed import audit, bundle_digest, save_bundle
from privfed.bundle.model_signature import signed_statement
from privfed.cli import main

sklearn_ensemble = pytest.importorskip("sklearn.ensemble")
pytest.importorskip("skops.io")
model_signing = pytest.importorskip("model_signing")
from cryptography.hazmat.primitives import serialization  # noqa: E402
from model_signing import verifying  # noqa: E402

DELTA = 1e-5


@pytest.fixture(scope="module")
def forest():
    rng = np.random.default_rng(0)
    features = rng.normal(size=(60, 4)).astype(np.float32)
    return sklearn_ensemble.RandomForestClassifier(n_estimators=2, max_depth=2, random_state=0).fit(
        features, (features[:, 0] > 0).astype(int))


def _ledger() -> Ledger:
    votes = np.random.default_rng(1).integers(0, 10, size=(20, 2))
    ledger = Ledger(delta=DELTA, description="a student of 4 parties")
    ledger.record({"party": LaplaceNoisyMax(votes, 0.05, 1, unit="party"),
                   "example": LaplaceNoisyMax(votes, 0.05, 2, unit="example")}, note="student labels")
    return ledger


@pytest.fixture(scope="module")
def signed(tmp_path_factory, forest):
    """A bundle signed through the CLI exactly as docs/ledger.md says, and the key pair."""
    folder = tmp_path_factory.mktemp("signed")
    ledger = _ledger()
    bundle = save_bundle(forest, folder / "BUNDLE", ledger, evidence=ledger.evidence())
    key = folder / "KEY.pem"
    assert main(["keygen", "--type", "ec", str(key)]) == 0  # prints the fingerprint audit prints back
    assert main(["sign", str(bundle), "--key", str(key), "--format", "model-signing"]) == 0
    return bundle, key, Path(f"{key}.pub"), folder / "BUNDLE.sig"


def _verify(bundle, public, signature):
    verifying.Config().use_elliptic_key_verifier(public_key=str(public)).verify(str(bundle), str(signature))


def test_model_signing_verifies_the_bundle_and_fails_after_any_byte_changes(signed, tmp_path):
    bundle, _, public, signature = signed
    assert signature.is_file() and not (bundle / "BUNDLE.sig").exists()
    _verify(bundle, public, signature)
    files = sorted(p.name for p in bundle.iterdir())
    statement = signed_statement(signature)
    # Every file of the bundle, the manifest included, is a signed resource.
    assert sorted(r["name"] for r in statement["predicate"]["resources"]) == files
    for name in files:
        copy = tmp_path / name / "BUNDLE"
        shutil.copytree(bundle, copy)
        data = bytearray((copy / name).read_bytes())
        data[len(data) // 2] ^= 1
        (copy / name).write_bytes(bytes(data))
        with pytest.raises(ValueError, match="Signature mismatch"):
            _verify(copy, public, signature)
    extra = tmp_path / "extra" / "BUNDLE"
    shutil.copytree(bundle, extra)
    (extra / "notes.txt").write_text("added after signing")
    with pytest.raises(ValueError):
        _verify(extra, public, signature)


def test_the_signed_statement_carries_the_ledger_digest_and_the_audit_verdict(signed):
    bundle, _, _, signature = signed
    fields = signed_statement(signature)["predicate"]["privfed"]
    _, ledger = privfed.load_bundle(bundle)
    assert fields["bundle_digest"] == bundle_digest(bundle)
    assert fields["ledger_digest"] == ledger.digest()
    report = audit(bundle)
    assert fields["audit"]["verdict"] == "pass" and report.passed
    assert fields["audit"]["epsilon"] == pytest.approx(report.claim["epsilon"])
    assert fields["audit"]["unit"] == report.claim["unit"] == "party"
    assert "signature" in fields["audit"]["warnings"]  # at signing time the bundle was not yet signed


def test_audit_public_key_accepts_both_formats(signed, tmp_path, forest, capsys):
    bundle, key, public, signature = signed
    report = audit(bundle, public_key=public)
    check = report.check("signature")
    assert check.status == "pass" and "OpenSSF model signing" in check.detail and report.exit_code == 0
    spki = serialization.load_pem_public_key(public.read_bytes()).public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert f"fingerprint {hashlib.sha256(spki).hexdigest()}" in check.detail
    assert main(["audit", str(bundle), "--public-key", str(public)]) == 0
    assert "OpenSSF model signing" in " ".join(capsys.readouterr().out.split())
    # Another EC key, or a moved signature, fails.
    assert main(["keygen", "--type", "ec", str(tmp_path / "mallory.pem")]) == 0
    assert audit(bundle, public_key=tmp_path / "mallory.pem.pub").check("signature").status == "fail"
    assert audit(bundle, public_key=public, signature=tmp_path / "none.sig").check("signature").status == "fail"
    # Ed25519 keys still check privfed's own format, on the same bundle folder layout.
    ed_key, ed_public, _ = privfed.generate_signing_key(tmp_path / "ed.pem")
    plain = save_bundle(forest, tmp_path / "plain", _ledger())
    privfed.sign_bundle(plain, ed_key)
    assert audit(plain, public_key=ed_public).check("signature").status == "pass"
    capsys.readouterr()


def test_edited_and_resigned_bundle_fails_the_expected_key(signed, tmp_path, forest):
    """A forger who rewrites the ledger and re-signs with their own key passes model-signing for their key only."""
    bundle, key, public, _ = signed
    forged = tmp_path / "BUNDLE"
    shutil.copytree(bundle, forged)
    document = json.loads((forged / "ledger.json").read_text())
    document["description"] = "edited"
    (forged / "ledger.json").write_text(json.dumps(document))
    report = audit(forged, public_key=public, signature=bundle.parent / "BUNDLE.sig")
    assert report.check("signature").status == "fail" and report.exit_code == 1


def test_sign_refuses_bad_input(signed, tmp_path, capsys):
    bundle, key, _, _ = signed
    ed_key = tmp_path / "ed.pem"
    assert main(["keygen", str(ed_key)]) == 0
    capsys.readouterr()
    assert main(["sign", str(bundle), "--key", str(ed_key), "--format", "model-signing",
                 "--out", str(tmp_path / "x.sig")]) == 2
    assert "elliptic-curve" in capsys.readouterr().err
    assert main(["sign", str(bundle), "--key", str(key), "--format", "model-signing",
                 "--out", str(bundle / "inside.sig")]) == 2
    assert "outside the bundle" in capsys.readouterr().err
    assert main(["sign", str(bundle), "--key", str(ed_key), "--out", str(tmp_path / "y.sig")]) == 2
    assert "--out applies to --format model-signing" in capsys.readouterr().err
    assert not (tmp_path / "x.sig").exists() and not (bundle / "inside.sig").exists()
