"""Issue 45's probes, one test each: no file, message or site makes privfed hang, lie or allocate without bound.

Every probe is timed: the answer (a one-line refusal or a correct verdict) must come within two seconds of
work in this process (imports excluded; ``bench/adversarial_inputs.py`` measures fresh processes).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from privfed.accounting import LaplaceNoisyMax, Ledger, NoiseSource
from privfed.accounting.documents import MAX_DECLARED_EVENTS, parse_toml
from privfed.accounting.interop import flower_mechanism, opacus_mechanism
from privfed.accounting.spec import load_mechanisms
from privfed.pipelines.protocol.messages import MessageError

from privfed import audit, load_bundle, save_bundle
from privfed.audit.claims import MAX_CLAIMS_MECHANISMS, MAX_MOMENT, load_claims
from privfed.audit.integrity import read_ledger
from privfed.audit.report import AuditInputError
from privfed.bundle.load import ledger_document, read_evidence
from privfed.bundle.manifest import BundleError, BundleIntegrityError, read_bundle_files
from privfed.cli import main
from privfed.federation.secure_aggregation import vote_sum_from_average

sklearn_ensemble = pytest.importorskip("sklearn.ensemble")
pytest.importorskip("skops.io")

ROOT = Path(__file__).resolve().parents[1]
DELTA = 1e-5
#: Seconds of work any probe may take in a warm process.
BOUND = 2.0


class _Timed:
    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start
        assert self.seconds < BOUND, f"the probe took {self.seconds:.2f} s (bound {BOUND} s)"
        return False


def _gaussian(index: int) -> dict:
    return {"event": "gaussian", "noise_multiplier": 1.0 + index * 1e-3}


def _claims(tmp_path: Path, mechanisms: list, **claim) -> Path:
    path = tmp_path / "claims.json"
    path.write_text(json.dumps({"type": "privfed.claims", "schema_version": 1, "mechanisms": mechanisms,
                                "claim": {"epsilon": 1.0, "delta": DELTA, "unit": "example", **claim}}))
    return path


@pytest.fixture(scope="module")
def forest():
    rng = np.random.default_rng(0)
    features = rng.normal(size=(40, 3)).astype(np.float32)
    return sklearn_ensemble.RandomForestClassifier(n_estimators=2, max_depth=2, random_state=0).fit(
        features, (features[:, 0] > 0).astype(int))


def _ledger() -> Ledger:
    votes = np.random.default_rng(1).integers(0, 10, size=(20, 2))
    ledger = Ledger(delta=DELTA, description="adversarial probes")
    ledger.record({"party": LaplaceNoisyMax(votes, 0.05, 1, unit="party"),
                   "example": LaplaceNoisyMax(votes, 0.05, 2, unit="example")}, note="student labels")
    return ledger


# --- 1. signatures over the bytes read once ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ec_signed(tmp_path_factory, forest):
    pytest.importorskip("model_signing")
    folder = tmp_path_factory.mktemp("ec")
    bundle = save_bundle(forest, folder / "BUNDLE", _ledger())
    key = folder / "KEY.pem"
    assert main(["keygen", "--type", "ec", str(key)]) == 0
    assert main(["sign", str(bundle), "--key", str(key), "--format", "model-signing"]) == 0
    forged = save_bundle(forest, folder / "FORGED", Ledger(delta=DELTA, description="nothing recorded"))
    return bundle, Path(f"{key}.pub"), folder / "BUNDLE.sig", forged


def test_model_signing_judges_the_bytes_read_not_the_folder_read_again(ec_signed):
    """The race of issue 45: privfed read a forgery, then model-signing re-read the genuine folder and said PASS."""
    from privfed.bundle.model_signature_verify import model_signing_verdict

    bundle, public, signature, forged = ec_signed
    genuine = read_bundle_files(bundle)
    with _Timed():
        assert model_signing_verdict(bundle, public, signature=signature, files=genuine).status == "signed"
    # The folder on disk is the genuine one; the bytes in hand are a forgery: the verdict is about the bytes.
    verdict = model_signing_verdict(bundle, public, signature=signature, files=read_bundle_files(forged))
    assert verdict.status == "invalid"


def test_load_bundle_takes_an_elliptic_curve_key(ec_signed, tmp_path):
    bundle, public, signature, forged = ec_signed
    model, ledger = load_bundle(bundle, public_key=public)
    assert len(ledger) == 1 and hasattr(model, "predict")
    shutil.copy(signature, tmp_path / "FORGED.sig")
    with pytest.raises(BundleIntegrityError, match="does not verify"):
        load_bundle(forged, public_key=public, signature=tmp_path / "FORGED.sig")


def test_a_signature_file_behind_a_symbolic_link_is_not_followed(ec_signed, tmp_path):
    bundle, public, signature, _ = ec_signed
    copy = tmp_path / "BUNDLE"
    shutil.copytree(bundle, copy)
    (tmp_path / "BUNDLE.sig").symlink_to(signature)
    report = audit(copy, public_key=public)
    assert report.check("signature").status == "fail" and "symbolic link" in report.check("signature").detail
    with pytest.raises(BundleIntegrityError, match="symbolic link"):
        load_bundle(copy, public_key=public)


# --- 2. a work budget from declared sizes --------------------------------------------------------------------------
def test_a_claims_file_declaring_too_many_events_is_refused_before_any_work(tmp_path):
    composed = {"event": "composed", "events": [_gaussian(i) for i in range(MAX_DECLARED_EVENTS + 1)]}
    path = _claims(tmp_path, [{"kind": "dp_event", "unit": "example", "parameters": {"event": composed}}])
    assert path.stat().st_size < 16_000
    with _Timed(), pytest.raises(AuditInputError, match="event nodes; privfed accounts at most"):
        load_claims(path)


def test_a_claims_file_listing_many_mechanisms_is_refused(tmp_path):
    path = _claims(tmp_path, [{"kind": "dp_event", "unit": "example", "parameters": {"event": _gaussian(i)}}
                              for i in range(MAX_CLAIMS_MECHANISMS + 1)])
    with _Timed(), pytest.raises(AuditInputError, match=f"at most {MAX_CLAIMS_MECHANISMS}"):
        load_claims(path)


def test_a_huge_max_moment_is_refused_not_allocated(tmp_path):
    path = _claims(tmp_path, [{"kind": "dp_event", "unit": "example", "parameters": {"event": _gaussian(0)}}],
                   max_moment=10**9)
    with _Timed(), pytest.raises(AuditInputError, match=rf"max_moment must be an integer in \[1, {MAX_MOMENT}\]"):
        load_claims(path)


def test_a_resealed_ledger_declaring_too_much_work_is_refused_by_load_and_audit():
    document = json.loads(_ledger().to_json())
    event = {"event": "composed", "events": [_gaussian(i) for i in range(MAX_DECLARED_EVENTS + 1)]}
    document["entries"][0]["analyses"]["party"]["parameters"] = {"event": event}
    data = json.dumps(document).encode()
    with _Timed(), pytest.raises(BundleError, match="event nodes"):
        ledger_document(data)
    with _Timed():
        ledger, checks = read_ledger(document)
    assert ledger is None and checks[0].status == "fail" and "event nodes" in checks[0].detail


def test_mechanism_files_opacus_and_flower_states_have_the_same_budget(tmp_path):
    path = tmp_path / "mechanisms.json"
    path.write_text(json.dumps({"mechanisms": [{"kind": "dp_event", "event": {
        "event": "composed", "events": [_gaussian(i) for i in range(MAX_DECLARED_EVENTS + 1)]}}]}))
    with _Timed(), pytest.raises(ValueError, match="event nodes"):
        load_mechanisms(path)
    with _Timed(), pytest.raises(ValueError, match="history lists 1000 runs"):
        opacus_mechanism({"history": [(1.0 + i * 1e-3, 0.01, 10) for i in range(1000)]})
    state = {"schema_version": 1, "backend": "rdp",
             "config": {"sampling_method": "poisson", "neighboring_relation": "add-or-remove-one"},
             "compositions": [{"event": {"noise_multiplier": 1.0 + i * 1e-3, "sample_size": 10,
                                         "population_size": 100}, "count": 1} for i in range(1000)]}
    with _Timed(), pytest.raises(ValueError, match="distinct events"):
        flower_mechanism(json.dumps(state))


# --- 3. memory ---------------------------------------------------------------------------------------------------
def test_an_npz_bomb_is_refused_from_its_declared_sizes():
    buffer = io.BytesIO()
    np.savez_compressed(buffer, bomb=np.zeros(300_000_000, dtype=np.uint8))
    assert len(buffer.getvalue()) < 400_000
    tracemalloc.start()
    try:
        with _Timed(), pytest.raises(BundleError, match="compression bomb"):
            read_evidence(buffer.getvalue())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 << 20


def test_an_npz_array_header_larger_than_its_member_is_refused():
    """numpy allocates what an array's header declares before reading: a 100-byte member must not declare 8 GB."""
    import zipfile

    member = io.BytesIO()
    np.lib.format.write_array_header_1_0(member, {"descr": "<i8", "fortran_order": False, "shape": (10**9,)})
    member.write(b"\0" * 64)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("votes.npy", member.getvalue())
    tracemalloc.start()
    try:
        with _Timed(), pytest.raises(BundleError, match="declares 8000000000 bytes"):
            read_evidence(buffer.getvalue())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 << 20


def _header_bomb_npz(path: Path) -> None:
    """An ``.npz`` whose one 100-byte member's header declares 8 GB of int64."""
    import zipfile

    member = io.BytesIO()
    np.lib.format.write_array_header_1_0(member, {"descr": "<i8", "fortran_order": False, "shape": (10**9,)})
    member.write(b"\0" * 64)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("X.npy", member.getvalue())
        archive.writestr("y.npy", member.getvalue())


def test_every_npz_reader_refuses_a_header_bomb(tmp_path):
    """Party data, the public set, audit samples, datasets and checkpoints go through the one bounded reader."""
    from privfed.pipelines.data.datasets import _load_npz
    from privfed.pipelines.protocol.checkpoint import RoundCheckpoint

    from privfed.audit.membership import read_samples
    from privfed.federation.task import load_party_data, load_public

    bomb = tmp_path / "bomb.npz"
    _header_bomb_npz(bomb)
    readers = {"party data": lambda: load_party_data(bomb), "public set": lambda: load_public(bomb),
               "audit samples": lambda: read_samples(bomb, "members"),
               "dataset": lambda: _load_npz("bomb", bomb),
               "checkpoint": lambda: RoundCheckpoint(bomb, "fingerprint").load()}
    tracemalloc.start()
    try:
        for what, read in readers.items():
            with _Timed(), pytest.raises(ValueError, match="declares 8000000000 bytes") as refused:
                read()
            assert "\n" not in str(refused.value), what
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 << 20


def test_an_npy_header_declaring_more_than_the_file_holds_is_refused(tmp_path, capsys):
    votes = tmp_path / "votes.npy"
    with votes.open("wb") as handle:
        np.lib.format.write_array_header_1_0(handle, {"descr": "<i8", "fortran_order": False, "shape": (10**9,)})
        handle.write(b"\0" * 64)
    tracemalloc.start()
    try:
        with _Timed():
            code = main(["account", str(votes), "--gamma", "0.1", "--delta", "1e-5"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    error = capsys.readouterr().err
    assert code == 2 and error.count("\n") == 1 and "declares 8000000000 bytes of data, the file holds 64" in error
    assert peak < 20 << 20


def test_a_schema_declaring_a_million_classes_is_refused_before_allocation():
    """One party listing 10⁶ classes made the server allocate 29.8 GiB of public-set × class arrays."""
    from privfed.pipelines.data.party_schema import MAX_CLASSES, PartySchema, describe_party, federation_classes

    honest = describe_party(np.zeros((4, 3)), np.array([0, 1, 0, 1]))
    huge = PartySchema.from_record(PartySchema(np.array([3]), np.arange(10**6), 10**6).to_record(), sender="site-b")
    with _Timed(), pytest.raises(MessageError, match=f"site-b declares 1000000 classes; a schema may declare at "
                                                      f"most {MAX_CLASSES}"):
        federation_classes([honest, huge], (3,), ["site-a", "site-b"])
    # Each party within the bound, their union over it: refused as well.
    halves = [PartySchema(np.array([3]), np.arange(start, start + MAX_CLASSES), 10) for start in (0, MAX_CLASSES)]
    with pytest.raises(MessageError, match=f"{2 * MAX_CLASSES} classes together"):
        federation_classes(halves, (3,), ["site-a", "site-b"])
    assert len(federation_classes([honest, halves[0]], (3,), ["site-a", "site-b"])) == MAX_CLASSES


def test_reading_a_bundle_reserves_no_more_than_its_files(tmp_path, forest):
    """Under a 1 GiB address-space limit above what the interpreter uses, a bundle still reads (it asked for 4 GiB)."""
    bundle = save_bundle(forest, tmp_path / "B", _ledger())
    script = (
        "import resource, sys\n"
        "from privfed.bundle.manifest import read_bundle_files\n"
        "size = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()\n"
        "resource.setrlimit(resource.RLIMIT_AS, (size + (1 << 30), resource.RLIM_INFINITY))\n"
        f"print(len(read_bundle_files({str(bundle)!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-500:]
    assert int(done.stdout) == len(os.listdir(bundle))


# --- 4. values that lie quietly ------------------------------------------------------------------------------------
def test_a_duplicate_key_in_card_json_fails_the_card_check(tmp_path, forest):
    from privfed.audit.card import card_check

    bundle = save_bundle(forest, tmp_path / "B", _ledger(), metrics={"accuracy": 0.9})
    files = read_bundle_files(bundle)
    files["card.json"] = files["card.json"].replace(b'{', b'{"metrics": {"accuracy": 0.1}, ', 1)
    with _Timed():
        check = card_check(files)
    assert check.status == "fail" and "twice" in check.detail


def test_a_duplicate_key_or_nan_in_a_flower_state_is_refused():
    text = ('{"schema_version": 1, "schema_version": 1, "backend": "rdp", "config": {}, "compositions": []}')
    with pytest.raises(ValueError, match="twice"):
        flower_mechanism(text)
    with pytest.raises(ValueError, match="NaN is not a finite number"):
        flower_mechanism('{"schema_version": NaN}')


@pytest.mark.parametrize("text, needle", [("a = " + "[" * 5000 + "]" * 5000, "nested more than"),
                                          ("a = [1, 2", "not valid TOML"), (b"a = '\xff'", "not UTF-8")])
def test_toml_is_read_strictly_in_one_line(text, needle):
    with _Timed(), pytest.raises(ValueError, match=needle) as caught:
        parse_toml(text, "mechanism file 'x.toml'")
    assert "\n" not in str(caught.value)


def test_toml_mechanism_file_errors_are_one_line_at_the_cli(tmp_path, capsys):
    path = tmp_path / "deep.toml"
    path.write_text("mechanisms = " + "[" * 3000 + "]" * 3000 + "\n")
    assert main(["account", str(path), "--delta", "1e-5"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "nested more than" in error


@pytest.mark.parametrize("average, needle", [(np.array([np.nan, 1.0]), "NaN"), (np.array([1e30]), "outside the range"),
                                             (np.array([-1e19]), "outside the range"),
                                             (np.array(["1"]), "dtype")])
def test_secure_aggregation_checks_ranges_before_int64_arithmetic(average, needle):
    with _Timed(), pytest.raises(MessageError, match=needle):
        vote_sum_from_average(average, 3, 100)
    assert vote_sum_from_average(np.array([1.0, -2.0 / 3]), 3, 100).tolist() == [3, -2]


def test_a_named_pipe_is_named_as_such_and_never_waited_on(tmp_path, ec_signed):
    from privfed.bundle.model_signature_verify import read_signature_file

    fifo = tmp_path / "claims.json"
    os.mkfifo(fifo)
    with _Timed(), pytest.raises(AuditInputError, match="named pipe"):
        load_claims(fifo)
    with _Timed(), pytest.raises(ValueError, match="named pipe"):
        read_signature_file(fifo)
    bundle, public, _, _ = ec_signed
    copy = tmp_path / "BUNDLE"
    shutil.copytree(bundle, copy)
    os.mkfifo(tmp_path / "BUNDLE.sig")
    with _Timed(), pytest.raises(BundleIntegrityError, match="named pipe"):
        load_bundle(copy, public_key=public)


# --- 5. unsigned reseals -------------------------------------------------------------------------------------------
def test_an_unsigned_bundle_says_first_that_its_observer_table_cannot_be_trusted(tmp_path, forest, capsys):
    ledger = _ledger()
    ledger.record_noise_source(NoiseSource.secret())
    bundle = save_bundle(forest, tmp_path / "B", ledger)
    report = audit(bundle)
    assert report.headline.startswith("UNSIGNED BUNDLE: its observer table")
    unrecorded = audit(save_bundle(forest, tmp_path / "C", _ledger())).headline
    assert unrecorded.startswith("NOISE PROVENANCE NOT RECORDED") and "UNSIGNED BUNDLE" in unrecorded
    assert main(["audit", str(bundle)]) in (0, 1)
    assert capsys.readouterr().out.splitlines()[2].startswith("UNSIGNED BUNDLE")


def test_a_signed_bundle_has_no_unsigned_headline(tmp_path, forest):
    from privfed.bundle.signing import generate_signing_key

    private, public, _ = generate_signing_key(tmp_path / "key.pem")
    bundle = save_bundle(forest, tmp_path / "B", _ledger(), signing_key=private)
    assert not audit(bundle, public_key=public).headline.startswith("UNSIGNED")


# --- 11. keys are not committed -----------------------------------------------------------------------------------
@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_keygen_output_is_ignored_by_git():
    done = subprocess.run([shutil.which("git"), "check-ignore", "me.pem", "me.pem.pub"], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.stdout.split() == ["me.pem"], done.stdout  # the public key may be committed; the private one not
