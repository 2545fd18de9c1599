"""Model bundles: round trips per model family, tamper detection and refusal of unsafe content."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest
from privfed.accounting import LaplaceNoisyMax, Ledger, LedgerIntegrityError
from privfed.accounting.fingerprint import file_sha256

import privfed
from privfed import BundleError, BundleIntegrityError, load_bundle, save_bundle
from privfed.bundle.manifest import MANIFEST_FILE, build_manifest, read_bundle_files

torch = pytest.importorskip("torch")
sklearn_ensemble = pytest.importorskip("sklearn.ensemble")
xgboost = pytest.importorskip("xgboost")
skops_io = pytest.importorskip("skops.io")

DELTA = 1e-5


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    features = rng.normal(size=(120, 4)).astype(np.float32)
    labels = (features[:, 0] + features[:, 1] > 0).astype(int)
    return features, labels


@pytest.fixture
def ledger() -> Ledger:
    rng = np.random.default_rng(1)
    votes = rng.integers(0, 10, size=(30, 2))
    ledger = Ledger(delta=DELTA, seeds={"teachers": 0}, description="a student trained on noisy votes")
    ledger.record({"party": LaplaceNoisyMax(votes, 0.05, 1, unit="party"),
                   "example": LaplaceNoisyMax(votes, 0.05, 2, unit="example")}, note="student labels")
    ledger.record_unaccounted("per-party class counts, sent in clear")
    return ledger


@pytest.fixture
def forest(data):
    return sklearn_ensemble.RandomForestClassifier(n_estimators=5, max_depth=3, random_state=0).fit(*data)


class SafeStateLinear:
    """A stand-in for pipelines.TorchClassifier's safe-state protocol: a linear classifier."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray):
        self.weight, self.bias = weight, bias

    def predict(self, features):
        return np.argmax(features @ self.weight.T + self.bias, axis=1)

    def get_safe_state(self):
        return {"in_features": self.weight.shape[1], "out_features": self.weight.shape[0]}, {
            "weight": self.weight, "bias": self.bias}

    @classmethod
    def from_safe_state(cls, spec, tensors, module_fn=None):
        assert tensors["weight"].shape == (spec["out_features"], spec["in_features"])
        return cls(tensors["weight"], tensors["bias"])


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


# --- round trips ----------------------------------------------------------------------------------------
def test_sklearn_forest_round_trip(tmp_path, data, forest, ledger):
    path = save_bundle(forest, tmp_path / "bundle", ledger)
    assert sorted(p.name for p in path.iterdir()) == ["MANIFEST.json", "MODEL_CARD.md", "card.json", "ledger.json",
                                                      "model.skops"]
    assert ledger.model_fingerprint is None  # the caller's ledger is not modified
    model, loaded = load_bundle(path)
    assert np.array_equal(model.predict_proba(data[0]), forest.predict_proba(data[0]))
    assert loaded.account() == ledger.account()
    assert loaded.model_fingerprint["files"] == {"model.skops": file_sha256(path / "model.skops")}
    card = (path / "MODEL_CARD.md").read_text()
    assert "party" in card and "example" in card and "per-party class counts, sent in clear" in card
    # One digest identifies the bundle: the card names it (sha256 of MANIFEST.json) and prints no other file hash.
    assert "sha256 of `MANIFEST.json`" in card and file_sha256(path / "ledger.json") not in card
    assert file_sha256(path / "model.skops") not in card and "Not evaluated" in card


def test_xgboost_round_trip(tmp_path, data, ledger):
    booster = xgboost.XGBClassifier(n_estimators=5, max_depth=2, random_state=0).fit(*data)
    model, _ = load_bundle(save_bundle(booster, tmp_path / "bundle", ledger))
    assert type(model) is xgboost.XGBClassifier
    assert np.array_equal(model.predict_proba(data[0]), booster.predict_proba(data[0]))
    assert json.loads((tmp_path / "bundle" / "ledger.json").read_text())["model"]["class"] == "xgboost.XGBClassifier"


def test_torch_module_round_trip_needs_the_module(tmp_path, data, ledger):
    net = _net()
    path = save_bundle(net, tmp_path / "bundle", ledger)
    with pytest.raises(BundleError, match="pass load_bundle\\(path, module=...\\)"):
        load_bundle(path)
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    model, _ = load_bundle(path, module=fresh)
    inputs = torch.from_numpy(data[0])
    assert model is fresh and torch.equal(model(inputs), net(inputs))
    architecture = json.loads((path / "architecture.json").read_text())
    assert architecture["state"]["0.weight"]["shape"] == [8, 4]


def test_safe_state_protocol_round_trip(tmp_path, data, ledger):
    rng = np.random.default_rng(2)
    original = SafeStateLinear(rng.normal(size=(2, 4)).astype(np.float32), rng.normal(size=2).astype(np.float32))
    path = save_bundle(original, tmp_path / "bundle", ledger)
    with pytest.raises(BundleError, match="outside privfed's packages"):
        load_bundle(path)  # privfed does not import code a bundle names
    model, _ = load_bundle(path, model_class=SafeStateLinear)
    assert np.array_equal(model.predict(data[0]), original.predict(data[0]))
    with pytest.raises(BundleError, match="but the bundle was saved from"):
        load_bundle(path, model_class=Ledger)


def test_bundle_without_ledger_says_there_is_no_guarantee(tmp_path, forest):
    path = save_bundle(forest, tmp_path / "bundle")
    _, ledger = load_bundle(path)
    assert len(ledger) == 0
    assert "No release of private data is recorded" in (path / "MODEL_CARD.md").read_text()


def test_evidence_ships_separately_and_is_recomputed(tmp_path, forest, ledger):
    path = save_bundle(forest, tmp_path / "bundle", ledger, evidence=ledger.evidence())
    assert "evidence.npz" in {p.name for p in path.iterdir()}
    _, loaded = load_bundle(path)
    assert loaded.verify() == 2
    assert set(loaded.evidence()) == set(ledger.evidence())
    assert "\"votes\"" not in (path / "ledger.json").read_text()


def test_loading_never_unpickles(tmp_path, monkeypatch, data, forest, ledger):
    paths = [save_bundle(forest, tmp_path / "a", ledger, evidence=ledger.evidence()),
             save_bundle(xgboost.XGBClassifier(n_estimators=2).fit(*data), tmp_path / "b", ledger),
             save_bundle(_net(), tmp_path / "c", ledger)]

    def refuse(*args, **kwargs):
        raise AssertionError("load_bundle unpickled something")

    import joblib

    for target, name in [(pickle, "load"), (pickle, "loads"), (pickle, "Unpickler"), (joblib, "load"), (torch, "load")]:
        monkeypatch.setattr(target, name, refuse)
    load_bundle(paths[0])
    load_bundle(paths[1])
    load_bundle(paths[2], module=_net())


@pytest.mark.parametrize("old_module", ["privfed.pipelines.torch_models", "pipelines.torch_models"])
def test_a_bundle_naming_a_module_that_has_moved_loads_the_exported_class(tmp_path, data, ledger, old_module):
    """A bundle saved before privfed's modules moved names its class by a module path that no longer exists."""
    X, y = data
    original = privfed.TorchMLP(hidden=(8,), epochs=2, random_state=0).fit(X, y)
    path = save_bundle(original, tmp_path / "bundle", ledger)
    _record_model_class(path, f"{old_module}.TorchMLP")
    model, _ = load_bundle(path)
    assert type(model) is privfed.TorchMLP
    assert np.array_equal(model.predict_proba(X), original.predict_proba(X))


@pytest.mark.parametrize("recorded", ["privfed.pipelines.torch_models.FedKT", "pipelines.torch_models.KerasInitialised",
                                      "privfed.pipelines.torch_models.import_module", "pipelines.os.system"])
def test_a_moved_class_resolves_only_to_an_exported_safe_state_class(tmp_path, data, ledger, recorded):
    X, y = data
    path = save_bundle(privfed.TorchMLP(hidden=(8,), epochs=1, random_state=0).fit(X, y), tmp_path / "b", ledger)
    _record_model_class(path, recorded)
    with pytest.raises(BundleError, match="model class .* is not a class with get_safe_state"):
        load_bundle(path)


def _record_model_class(path, recorded):
    """Rewrite the class a safe-state bundle records (architecture.json and the ledger), as an old bundle names it."""
    architecture = json.loads((path / "architecture.json").read_text())
    (path / "architecture.json").write_text(json.dumps({**architecture, "class": recorded}))
    sha256 = file_sha256(path / "architecture.json")
    _edit_ledger(path, lambda document: document["model"].update(
        {"class": recorded, "files": {**document["model"]["files"], "architecture.json": sha256}}))


# --- tampering ------------------------------------------------------------------------------------------
@pytest.fixture
def bundle(tmp_path, forest, ledger):
    return save_bundle(forest, tmp_path / "bundle", ledger, evidence=ledger.evidence())


def reseal_manifest(path):
    """What anyone able to write the folder can do without a signing key: rewrite the manifest to match."""
    (path / MANIFEST_FILE).write_bytes(build_manifest(read_bundle_files(path)))


def _edit_ledger(path, edit, *, reseal=True):
    document = json.loads((path / "ledger.json").read_text())
    edit(document)
    (path / "ledger.json").write_text(json.dumps(document))
    if reseal:
        reseal_manifest(path)


def test_flipped_model_byte_is_detected(bundle):
    model_file = bundle / "model.skops"
    content = bytearray(model_file.read_bytes())
    content[len(content) // 2] ^= 0x01
    model_file.write_bytes(bytes(content))
    with pytest.raises(BundleIntegrityError, match="model.skops does not match MANIFEST.json .* modified or replaced"):
        load_bundle(bundle)
    reseal_manifest(bundle)  # the ledger's own record of the model file still catches it
    with pytest.raises(BundleIntegrityError, match="model file model.skops has sha256 .* modified or replaced"):
        load_bundle(bundle)


def test_edited_epsilon_in_bundle_ledger_is_detected(bundle):
    _edit_ledger(bundle, lambda d: d["spent"]["party"].update(epsilon=0.1))
    with pytest.raises(LedgerIntegrityError, match="ledger.spent.party.epsilon is 0.1 .* was edited"):
        load_bundle(bundle)


def test_dropped_entry_in_bundle_ledger_is_detected(bundle):
    _edit_ledger(bundle, lambda d: d["entries"].pop(0))
    with pytest.raises(LedgerIntegrityError, match="removed, inserted or reordered"):
        load_bundle(bundle)


def test_swapped_evidence_is_detected(bundle, tmp_path, forest):
    other = Ledger(delta=DELTA)
    other.record(LaplaceNoisyMax(np.array([[5, 1], [3, 3], [0, 6]]), 0.05, 1, unit="party"))
    other_bundle = save_bundle(forest, tmp_path / "other", other, evidence=other.evidence())
    (bundle / "evidence.npz").write_bytes((other_bundle / "evidence.npz").read_bytes())
    with pytest.raises(BundleIntegrityError, match="evidence.npz does not match MANIFEST.json"):
        load_bundle(bundle)
    reseal_manifest(bundle)
    with pytest.raises(BundleIntegrityError, match="evidence file evidence.npz has sha256 .* modified or replaced"):
        load_bundle(bundle)
    # A forger who also rewrites the file's sha256 in ledger.json is caught by the per-entry commitments.
    _edit_ledger(bundle, lambda d: d["evidence"].update(sha256=file_sha256(bundle / "evidence.npz")))
    with pytest.raises(LedgerIntegrityError, match="evidence for entry 0 .* is missing"):
        load_bundle(bundle)


def test_unreferenced_evidence_file_is_refused(tmp_path, forest, ledger):
    path = save_bundle(forest, tmp_path / "bundle", ledger)
    np.savez(path / "evidence.npz", **ledger.evidence())
    with pytest.raises(BundleIntegrityError, match="holds evidence.npz, not in MANIFEST.json"):
        load_bundle(path)
    reseal_manifest(path)
    with pytest.raises(BundleIntegrityError, match="does not reference it"):
        load_bundle(path)


# --- unsafe content -------------------------------------------------------------------------------------
class CustomEstimator(sklearn_ensemble.RandomForestClassifier):
    """An estimator class skops does not know: loading it would run arbitrary code."""


def test_untrusted_sklearn_types_are_refused(tmp_path, data, forest, ledger):
    custom = CustomEstimator(n_estimators=2).fit(*data)
    with pytest.raises(TypeError, match="outside privfed's trusted list"):
        save_bundle(custom, tmp_path / "refused", ledger)
    # A bundle whose skops file was replaced (and its sha256 updated) by one needing untrusted types.
    path = save_bundle(forest, tmp_path / "bundle", ledger)
    skops_io.dump(custom, path / "model.skops")
    _edit_ledger(path, lambda d: d["model"]["files"].update({"model.skops": file_sha256(path / "model.skops")}))
    with pytest.raises(BundleError, match="types outside privfed's trusted list .*CustomEstimator.*refusing"):
        load_bundle(path)


#: Run in a fresh interpreter: audit and load a scikit-learn bundle, then report what got imported.
_AUDIT_WITHOUT_TORCH = """
import importlib.util, json, sys
from privfed import audit, load_bundle
report = audit(sys.argv[1])
model, _ = load_bundle(sys.argv[1])
print(json.dumps({"safe loading": report.check("safe loading").status, "model": type(model).__name__,
                  "torch imported": sorted(name for name in sys.modules if name.split(".")[0] == "torch"),
                  "torch namespace findable": importlib.util.find_spec("sklearn.externals.array_api_compat.torch")
                  is not None}))
"""


def test_auditing_a_sklearn_bundle_never_imports_torch(tmp_path, forest, ledger):
    path = save_bundle(forest, tmp_path / "bundle", ledger)
    result = subprocess.run([sys.executable, "-c", _AUDIT_WITHOUT_TORCH, str(path)], capture_output=True, text=True,
                            check=True)
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    # The model is really loaded (through skops), torch never is, and scikit-learn's own torch namespace is
    # importable again afterwards: only skops' type-list walk was spared it.
    assert seen == {"safe loading": "pass", "model": "RandomForestClassifier", "torch imported": [],
                    "torch namespace findable": True}


def test_pickle_family_is_refused(tmp_path, forest, ledger):
    path = save_bundle(forest, tmp_path / "bundle", ledger)
    (path / "model.pkl").write_bytes(pickle.dumps(forest))
    _edit_ledger(path, lambda d: d.update(model={"family": "pickle", "class": "x", "format": "pickle",
                                                 "files": {"model.pkl": file_sha256(path / "model.pkl")}}))
    with pytest.raises(BundleError, match="never unpickles"):
        load_bundle(path)


def test_bad_arguments(tmp_path, forest, ledger):
    with pytest.raises(TypeError, match="model must be an xgboost model"):
        save_bundle(object(), tmp_path / "x", ledger)
    with pytest.raises(TypeError, match="ledger must be a privfed Ledger"):
        save_bundle(forest, tmp_path / "x", ledger={})
    save_bundle(forest, tmp_path / "x", ledger)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save_bundle(forest, tmp_path / "x", ledger)
    save_bundle(forest, tmp_path / "x", ledger, overwrite=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(BundleError, match="has no MANIFEST.json and no ledger.json"):
        load_bundle(tmp_path / "empty")
    other = Ledger(delta=DELTA)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        other.record(LaplaceNoisyMax(np.array([[5, 1]]), 0.05, 1, unit="party"))
    with pytest.raises(LedgerIntegrityError, match="belongs to another ledger"):
        save_bundle(forest, tmp_path / "y", ledger, evidence={**ledger.evidence(), **other.evidence()})


def test_public_names_are_exported():
    for name in ("Ledger", "BudgetExceededError", "save_bundle", "load_bundle", "LedgerIntegrityError"):
        assert name in privfed.__all__ and hasattr(privfed, name)
