"""Model bundles: a model in a safe format, its privacy ledger, optional evidence and a model card.

A bundle is a folder::

    MANIFEST.json      the integrity root: size and sha256 of every other file (privfed.bundle.manifest)
    SIGNATURE.json     optional: the publisher's Ed25519 signature of MANIFEST.json (privfed.bundle.signing)
    ledger.json        the ledger, with the sha256 of every model file and of evidence.npz
    model.ubj          xgboost models: xgboost's own UBJSON format (Booster.save_model)
    model.skops        scikit-learn models: skops, loaded with an explicit trusted-type list
    model.safetensors  torch models: tensors in safetensors, plus
    architecture.json  the architecture spec (JSON) needed to rebuild the module
    evidence.npz       optional, PRIVATE: the evidence of data-dependent entries (np.savez)
    run_parameters.json  optional: the parameters each step passed to its noise function, as run (public)
    card.json          what the card states beyond the ledger: metrics, data description, intended use
    MODEL_CARD.md      the ledger and card.json rendered for people

The **bundle digest** (sha256 of ``MANIFEST.json``) identifies the whole bundle.
None of these formats can execute code when read: :func:`load_bundle` never
unpickles (no ``pickle``, ``joblib.load`` or ``torch.load``), loads ``.npz``
with ``allow_pickle=False``, reads each file once into memory, checks it
against the manifest and loads the model from those very bytes.

:func:`save_bundle` writes into a fresh sibling folder, fsyncs it, checks it,
then renames it into place: a reader sees the old bundle or the new one, never
a mixture, and a save killed at any point leaves one of them.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import re
import secrets
import shutil
import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from privfed.accounting.documents import check_declared_work, parse_json, read_npz
from privfed.accounting.fingerprint import sha256_hex
from privfed.accounting.ledger import Ledger
from privfed.accounting.ledger_entry import load_json
from privfed.bundle.manifest import (
    MANIFEST_FILE,
    SIGNATURE_FILE,
    BundleError,
    BundleIntegrityError,
    build_manifest,
    read_bundle_files,
    verify_manifest,
)
from privfed.bundle.model_card import CARD_DATA_FILE, card_data_document, render_model_card
from privfed.bundle.publish import check_replaceable, fsync_path, publish_folder, write_file
from privfed.bundle.skops_import import import_skops_io

__all__ = [
    "LEDGER_FILE",
    "SKOPS_TRUSTED_TYPES",
    "BundleError",
    "BundleIntegrityError",
    "LegacyBundleWarning",
    "bundle_digest",
    "load_bundle",
    "save_bundle",
]

LEDGER_FILE = "ledger.json"
EVIDENCE_FILE = "evidence.npz"
RUN_PARAMETERS_FILE = "run_parameters.json"
MODEL_CARD_FILE = "MODEL_CARD.md"
ARCHITECTURE_FILE = "architecture.json"

#: Types beyond skops' own default-trusted set that privfed accepts in a scikit-learn model:
#: the fitted state of trees, forests, gradient boosting and MLPs. Anything else is refused.
SKOPS_TRUSTED_TYPES: tuple[str, ...] = (
    "sklearn.tree._tree.Tree",
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
    "sklearn.neural_network._stochastic_optimizers.AdamOptimizer",
    "sklearn.neural_network._stochastic_optimizers.SGDOptimizer",
)

#: xgboost classes a bundle may name; each is rebuilt empty, then filled by ``load_model``.
_XGBOOST_CLASSES = ("Booster", "XGBClassifier", "XGBRegressor", "XGBRanker", "XGBRFClassifier", "XGBRFRegressor")
#: Packages whose safe-state classes load_bundle may import by the name recorded in a bundle.
_TRUSTED_PACKAGES = ("privfed",)
#: Bundles written before privfed became one import package name ``pipelines.…`` classes.
_LEGACY_PREFIX = "pipelines."
#: A recorded class name: dotted Python identifiers, nothing else.
_CLASS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")
#: The files each model family is stored in; load_bundle reads only these, after checking their sha256.
_FAMILY_FILES = {
    "xgboost": ("model.ubj",),
    "sklearn": ("model.skops",),
    "torch-safe-state": (ARCHITECTURE_FILE, "model.safetensors"),
    "torch-module": (ARCHITECTURE_FILE, "model.safetensors"),
}
#: Every name save_bundle writes; overwrite=True replaces only a folder holding nothing else.
_BUNDLE_FILES = (MANIFEST_FILE, SIGNATURE_FILE, LEDGER_FILE, EVIDENCE_FILE, RUN_PARAMETERS_FILE, MODEL_CARD_FILE,
                 CARD_DATA_FILE, ARCHITECTURE_FILE, "model.ubj", "model.skops", "model.safetensors")


class LegacyBundleWarning(UserWarning):
    """A bundle without a manifest was loaded with ``allow_legacy=True``: its integrity is unverifiable."""


# --- model families -------------------------------------------------------------------------------
def _qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _model_family(model: Any) -> str:
    """The bundle family of ``model``; libraries are only consulted if already imported."""
    if callable(getattr(model, "get_safe_state", None)) and callable(getattr(type(model), "from_safe_state", None)):
        return "torch-safe-state"
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(model, torch.nn.Module):
        return "torch-module"
    xgboost = sys.modules.get("xgboost")
    if xgboost is not None and isinstance(model, (xgboost.Booster, xgboost.XGBModel)):
        return "xgboost"
    sklearn_base = sys.modules.get("sklearn.base")
    if sklearn_base is not None and isinstance(model, sklearn_base.BaseEstimator):
        return "sklearn"
    raise TypeError(
        f"model must be an xgboost model, a scikit-learn estimator, a torch.nn.Module or an object with "
        f"get_safe_state()/from_safe_state() (e.g. privfed.TorchClassifier); got {type(model).__name__}"
    )


def _write_model(model: Any, family: str, directory: Path) -> dict[str, Any]:
    """Write ``model``'s files; return the fingerprint entry (without hashes)."""
    if family == "xgboost":
        import xgboost

        name = type(model).__name__
        if name not in _XGBOOST_CLASSES or getattr(xgboost, name) is not type(model):
            raise TypeError(
                f"model's xgboost class must be one of {_XGBOOST_CLASSES}, got {_qualified_name(type(model))}"
            )
        model.save_model(os.fspath(directory / "model.ubj"))
        return {"family": family, "class": f"xgboost.{name}", "format": "xgboost UBJSON (save_model)",
                "files": ["model.ubj"]}
    if family == "sklearn":
        skops_io = import_skops_io()

        path = directory / "model.skops"
        try:
            skops_io.dump(model, path)
        except Exception as error:  # skops reduces every attribute; some objects (torch tensors) cannot be
            path.unlink(missing_ok=True)
            raise TypeError(
                f"model {type(model).__name__} could not be written with skops ({type(error).__name__}: {error}); "
                "a privfed pipeline is saved through its final_model_, a torch network through TorchClassifier"
            ) from None
        untrusted = sorted(set(skops_io.get_untrusted_types(file=path)) - set(SKOPS_TRUSTED_TYPES))
        if untrusted:
            path.unlink()
            raise TypeError(
                f"model contains types outside privfed's trusted list, which could not be loaded safely: {untrusted}"
            )
        return {"family": family, "class": _qualified_name(type(model)),
                "format": "skops (loaded with an explicit trusted-type list)", "files": ["model.skops"]}
    if family == "torch-safe-state":
        import safetensors.numpy

        spec, tensors = model.get_safe_state()
        arrays = {str(name): np.ascontiguousarray(value) for name, value in tensors.items()}
        for name, array in arrays.items():
            if array.dtype == object:
                raise TypeError(f"get_safe_state() tensor {name!r} has dtype object; tensors must be numeric")
        try:
            architecture = json.dumps({"class": _qualified_name(type(model)), "spec": spec}, indent=2, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise TypeError(f"get_safe_state()'s spec must be JSON-serialisable: {error}") from None
        (directory / ARCHITECTURE_FILE).write_text(architecture)
        safetensors.numpy.save_file(arrays, os.fspath(directory / "model.safetensors"))
        return {"family": family, "class": _qualified_name(type(model)),
                "format": "safetensors + JSON architecture spec", "files": [ARCHITECTURE_FILE, "model.safetensors"]}
    import safetensors.torch  # family == "torch-module"

    state = model.state_dict()
    architecture = {"class": _qualified_name(type(model)), "repr": repr(model),
                    "state": {name: {"shape": list(t.shape), "dtype": str(t.dtype)} for name, t in state.items()}}
    (directory / ARCHITECTURE_FILE).write_text(json.dumps(architecture, indent=2))
    safetensors.torch.save_model(model, os.fspath(directory / "model.safetensors"))
    return {"family": family, "class": _qualified_name(type(model)),
            "format": "safetensors state dict (the module is rebuilt by the caller)",
            "files": [ARCHITECTURE_FILE, "model.safetensors"]}


def _safe_state_class(recorded: str, model_class: type | None) -> type:
    if model_class is not None:
        if model_class.__qualname__ != recorded.rsplit(".", 1)[-1]:
            raise BundleError(f"model_class is {_qualified_name(model_class)} but the bundle was saved from {recorded}")
        return model_class
    if recorded.startswith(_LEGACY_PREFIX):
        recorded = "privfed." + recorded
    if not _CLASS_NAME.fullmatch(recorded):
        raise BundleError(f"the bundle's model class {recorded!r} is not a dotted Python name; refused")
    module_name, _, class_name = recorded.rpartition(".")
    if module_name.split(".")[0] not in _TRUSTED_PACKAGES:
        raise BundleError(
            f"the bundle's model class {recorded} is outside privfed's packages {_TRUSTED_PACKAGES}; "
            "privfed does not import code named by a bundle: pass load_bundle(path, model_class=...)"
        )
    try:
        cls = getattr(importlib.import_module(module_name), class_name, None)
    except ImportError:
        raise BundleError(f"the bundle's model class {recorded} names no privfed module; refused") from None
    if not isinstance(cls, type) or not callable(getattr(cls, "from_safe_state", None)):
        raise BundleError(f"the bundle's model class {recorded} is not a class with from_safe_state()")
    return cls


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def _read_model(
    fingerprint: Mapping[str, Any], files: Mapping[str, bytes], *, module: Any, model_class: type | None,
    module_fn: Callable[..., Any] | None,
) -> Any:
    """The model, from the bytes that were verified (never reopened); BundleError for anything unreadable."""
    family, recorded = fingerprint["family"], fingerprint["class"]
    if family == "torch-safe-state":
        cls = _safe_state_class(recorded, model_class)
    elif family == "torch-module" and module is None:
        raise BundleError(
            f"this bundle holds the state dict of a plain torch module ({recorded}); build the module with the "
            "same architecture and pass load_bundle(path, module=...)"
        )
    names = _FAMILY_FILES[family]
    try:
        if family == "xgboost":
            import xgboost

            name = recorded.removeprefix("xgboost.")
            if name not in _XGBOOST_CLASSES:
                raise BundleError(f"the bundle's xgboost class must be one of {_XGBOOST_CLASSES}, got {recorded!r}")
            model = getattr(xgboost, name)()
            model.load_model(bytearray(files["model.ubj"]))
            return model
        if family == "sklearn":
            skops_io = import_skops_io()

            data = files["model.skops"]
            untrusted = skops_io.get_untrusted_types(data=data)
            refused = sorted(set(untrusted) - set(SKOPS_TRUSTED_TYPES))
            if refused:
                raise BundleError(
                    f"model.skops needs types outside privfed's trusted list {refused}; refusing to load it "
                    "(they could execute code)"
                )
            return skops_io.loads(data, trusted=list(untrusted))
        if family == "torch-safe-state":
            import safetensors.numpy

            architecture = parse_json(files[ARCHITECTURE_FILE], ARCHITECTURE_FILE)
            tensors = safetensors.numpy.load(files["model.safetensors"])
            if module_fn is None:
                return cls.from_safe_state(architecture["spec"], tensors)
            return cls.from_safe_state(architecture["spec"], tensors, module_fn=module_fn)
        return _fill_module(module, files["model.safetensors"])  # family == "torch-module"
    except BundleError:
        raise
    except Exception as error:  # every reader's own error for a truncated, empty or foreign file
        raise BundleError(
            f"the model file(s) {', '.join(names)} could not be read as {family}: {_first_line(error)}"
        ) from None


def _fill_module(module: Any, data: bytes) -> Any:
    """``module`` filled from a verified ``model.safetensors`` (a JSON header and raw bytes: no pickle, no code).

    The verified bytes go to a private temporary file, which safetensors' own ``load_model`` reads:
    the bundle's file is not opened again after its hash was checked, and tensors that share
    storage in ``module`` (stored once by ``save_model``) are matched as safetensors matches them.
    """
    import tempfile

    import safetensors.torch

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.safetensors"
        path.write_bytes(data)
        missing, unexpected = safetensors.torch.load_model(module, os.fspath(path), strict=False)
    if missing or unexpected:
        raise BundleError(f"model.safetensors does not fit the module given: missing {sorted(missing)}, "
                          f"unexpected {sorted(unexpected)}")
    return module


# --- evidence -----------------------------------------------------------------------------------------
def _bundle_evidence(evidence: object, ledger: Ledger) -> Mapping[str, np.ndarray] | None:
    """The committed evidence to ship: ``ledger.evidence()`` as given, or built from a pipeline's ``evidence_``.

    A pipeline's ``evidence_`` names its vote matrices for readers (``server_votes``,
    ``party_0_votes``); ``ledger.evidence()`` is the same arrays keyed by their salted
    commitments, which is what a bundle stores. Each named array must be one the
    ledger committed to; arrays behind no ledger entry are not shipped (a warning says so).
    """
    if evidence is None or evidence is True:
        return None if evidence is None else ledger.evidence()
    if not isinstance(evidence, Mapping):
        raise TypeError(f"evidence must be a mapping name → array (ledger.evidence() or a pipeline's evidence_), True "
                        f"or None, got {type(evidence).__name__}")
    if not evidence or any(re.fullmatch(r"[0-9a-f]{64}([/#].*)", str(key)) for key in evidence):
        return evidence
    try:
        committed = ledger.evidence()
    except ValueError as error:
        raise ValueError(f"evidence: {error}") from None
    arrays = [np.asarray(value) for key, value in committed.items() if not key.endswith("#salt")]
    unmatched = [name for name, value in evidence.items()
                 if not any(a.shape == np.shape(value) and np.array_equal(a, value) for a in arrays)]
    if unmatched:
        warnings.warn(f"evidence arrays {unmatched} are behind no entry of the ledger (no mechanism used them); the "
                      "bundle ships only the evidence its ledger commits to", UserWarning, stacklevel=3)
    return committed or None


# --- public API -------------------------------------------------------------------------------------
def save_bundle(
    model: Any,
    path: str | os.PathLike[str],
    ledger: Ledger | None = None,
    evidence: Mapping[str, np.ndarray] | bool | None = None,
    *,
    overwrite: bool = False,
    signing_key: Any = None,
    metrics: Mapping[str, float] | None = None,
    data: Mapping[str, Any] | None = None,
    intended_use: str | None = None,
    audit_result: Any = None,
    run_parameters: list[Mapping[str, Any]] | None = None,
) -> Path:
    """Write ``model`` with its privacy ledger as a bundle folder, atomically.

    Parameters
    ----------
    model:
        An xgboost model (``Booster`` or ``XGBClassifier``/…), a scikit-learn
        estimator (saved with skops), an object with ``get_safe_state()`` /
        ``from_safe_state()`` (``privfed.TorchClassifier``), or a plain
        ``torch.nn.Module`` (its state dict; loading needs the module). A fitted
        privfed pipeline (an object with ``final_model_`` and ``ledger_``, such as
        ``FedKT``) stands for its final model, with its own ledger by default.
    path:
        The bundle folder; must not exist or be empty unless ``overwrite``.
    ledger:
        The model's :class:`~privfed.accounting.ledger.Ledger` (default: an empty one,
        and the card says no privacy guarantee is recorded). Not modified: the
        bundle's copy receives the model's fingerprint.
    evidence:
        Private evidence to ship for auditors: a pipeline's ``evidence_`` (its vote
        matrices by name), ``ledger.evidence()`` (the same arrays keyed by their
        salted commitments) or ``True`` (the ledger's own). Checked against the
        ledger's commitments first. Default: none, so the bundle holds no private data.
    overwrite:
        Replace an existing bundle at ``path``. The old bundle is replaced only
        once the new one is complete (a failing save leaves it untouched); a
        folder holding files other than a bundle's is never replaced.
    signing_key:
        An Ed25519 private key (``cryptography``'s ``Ed25519PrivateKey``) or the
        path of one written by :func:`privfed.generate_signing_key`: the manifest
        is signed (``SIGNATURE.json``). Default: unsigned.
    metrics:
        Evaluation results for the card, name → number (e.g. ``{"accuracy": 0.91}``,
        computed on data the user names in ``data``). Default: the card says
        "not evaluated".
    data:
        The data sets to describe on the card, name → array (shape, dtype and
        fingerprint are recorded, never the values) or a string description.
    intended_use:
        What the model is for and not for, in a sentence or two, for the card.
    audit_result:
        The :class:`~privfed.accounting.auditing.AuditResult` of an empirical audit of the pipeline
        (``privfed.empirical_audit``), recorded in ``card.json`` and on the card (covered by the manifest and any
        signature). Default: the card says none was run.
    run_parameters:
        The parameters each step passed to its noise function, as run (a pipeline's ``run_parameters_``:
        :mod:`privfed.pipelines.protocol.run_parameters`), written to ``run_parameters.json`` for ``privfed audit``'s
        parameter-consistency check. Public parameters, never noise. Default: a fitted pipeline's own
        ``run_parameters_``, else none.

    Returns
    -------
    pathlib.Path
        The bundle folder.
    """
    refused = None
    if hasattr(model, "final_model_") and hasattr(model, "ledger_"):
        ledger = model.ledger_ if ledger is None else ledger
        refused = getattr(model, "refused_", None)
        run_parameters = getattr(model, "run_parameters_", None) if run_parameters is None else run_parameters
        model = model.final_model_
    family = _model_family(model)
    if ledger is None:
        ledger = Ledger()
    elif not isinstance(ledger, Ledger):
        raise TypeError(f"ledger must be a privfed Ledger or None, got {type(ledger).__name__}")
    if not isinstance(overwrite, bool):
        raise TypeError(f"overwrite must be True or False, got {overwrite!r}")
    evidence = _bundle_evidence(evidence, ledger)
    card_data = card_data_document(metrics=metrics, data=data, intended_use=intended_use, audit_result=audit_result,
                                   refused=refused)
    private_key = None
    if signing_key is not None:
        from privfed.bundle.signing import load_private_key

        private_key = load_private_key(signing_key)
    directory = Path(path)
    if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
        what = "the symbolic link" if directory.is_symlink() else "the file"
        raise ValueError(f"path must be a folder for the bundle, got {what} {directory}")
    if directory.is_dir() and any(directory.iterdir()):
        if not overwrite:
            raise FileExistsError(f"path {directory} is not empty; pass overwrite=True to replace a bundle there")
        check_replaceable(directory, _BUNDLE_FILES)
    # A copy: the caller's ledger is left as it was. Checking evidence recomputes every committed curve.
    bundle_ledger = Ledger.from_dict(ledger.to_dict(), evidence=evidence)

    target = Path(os.path.abspath(directory))  # "." or "bundle/" still name a folder with a parent and a name
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.privfed-new-{secrets.token_hex(4)}")
    staging.mkdir()
    try:
        fingerprint = _write_model(model, family, staging)
        fingerprint["files"] = {name: sha256_hex((staging / name).read_bytes()) for name in fingerprint["files"]}
        bundle_ledger.model_fingerprint = fingerprint
        if evidence is not None:
            buffer = io.BytesIO()
            np.savez(buffer, **{key: np.asarray(value) for key, value in evidence.items()})
            write_file(staging / EVIDENCE_FILE, buffer.getvalue())
            bundle_ledger.evidence_fingerprint = {"file": EVIDENCE_FILE, "sha256": sha256_hex(buffer.getvalue())}
        write_file(staging / LEDGER_FILE, bundle_ledger.to_json().encode())
        if run_parameters is not None:
            write_file(staging / RUN_PARAMETERS_FILE,
                       (json.dumps(list(run_parameters), indent=1, allow_nan=False) + "\n").encode())
        write_file(staging / CARD_DATA_FILE, (json.dumps(card_data, indent=2, ensure_ascii=False) + "\n").encode())
        write_file(staging / MODEL_CARD_FILE, render_model_card(bundle_ledger, card=card_data).encode())
        for name in fingerprint["files"]:  # written by the model libraries, which do not fsync
            with open(staging / name, "rb+") as stream:
                os.fsync(stream.fileno())
        files = read_bundle_files(staging)
        manifest = build_manifest(files)
        write_file(staging / MANIFEST_FILE, manifest)
        if private_key is not None:
            from privfed.bundle.signing import signature_document

            write_file(staging / SIGNATURE_FILE, signature_document(private_key, manifest))
        fsync_path(staging)
        verify_manifest(read_bundle_files(staging), where=str(staging))
        publish_folder(staging, target, overwrite=overwrite, allowed=_BUNDLE_FILES)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_path(target.parent)
    return directory


def bundle_digest(path: str | os.PathLike[str]) -> str:
    """The bundle digest (sha256 of ``MANIFEST.json``) after checking every file against the manifest.

    Publish it through a channel readers trust, or sign it (``privfed sign``).
    """
    return verify_manifest(read_bundle_files(path), where=str(path))


def load_bundle(
    path: str | os.PathLike[str],
    *,
    module: Any = None,
    model_class: type | None = None,
    module_fn: Callable[..., Any] | None = None,
    public_key: Any = None,
    allow_legacy: bool = False,
    signature: str | os.PathLike[str] | None = None,
) -> tuple[Any, Ledger]:
    """Load a bundle written by :func:`save_bundle`, verifying it first.

    Every file is read once into memory. In order: the manifest (every file
    listed, sizes and sha256 match, no extra file, no symbolic link), the
    signature when ``public_key`` is given; the ledger's format, chain of entries
    and recorded totals; the model files and evidence against the ledger's
    records; the evidence against each entry's commitment; every entry's curves
    rebuilt from its public parameters (:meth:`Ledger.verify`, the audit's own
    recomputation: data-independent curves always, data-dependent ones from the
    evidence when shipped); and only then the model, from the verified bytes.

    Parameters
    ----------
    path:
        The bundle folder.
    module:
        For a plain ``torch.nn.Module`` bundle: a module of the same architecture,
        into which the state dict is loaded.
    model_class:
        For a safe-state bundle whose class is outside privfed's packages: the class
        to rebuild it with (its name must match the recorded one).
    module_fn:
        Passed to ``from_safe_state`` for safe-state bundles that need it.
    public_key:
        The publisher's public key: Ed25519 (object, PEM path or bytes; the bundle must
        carry a valid ``SIGNATURE.json`` by that key) or elliptic-curve (PEM path or
        bytes; the bundle must verify against its OpenSSF model-signing signature,
        ``signature``), every key type ``privfed audit --public-key`` accepts. The
        signature is checked over the bytes read once, which are the bytes then
        loaded. Default: no signature required.
    allow_legacy:
        Load a bundle written before bundles carried a manifest, with a
        :class:`LegacyBundleWarning`: its integrity cannot be verified. Default: refuse it.
    signature:
        With an elliptic-curve ``public_key``: the model-signing signature file
        (default ``BUNDLE.sig`` beside the folder; never followed through a symbolic link).

    Returns
    -------
    (model, ledger)
        The ledger holds the evidence when the bundle ships it (``ledger.evidence()``).

    Raises
    ------
    BundleIntegrityError
        A file does not match the manifest or its record, or the signature does not verify.
    BundleError
        The bundle is malformed, unsafe to load, or a legacy bundle without ``allow_legacy``.
    LedgerFormatError, LedgerIntegrityError
        The ledger itself is malformed or inconsistent.
    """
    files = read_bundle_files(path)
    try:
        verify_manifest(files, where=str(path))
    except BundleError:
        if not (allow_legacy and MANIFEST_FILE not in files and LEDGER_FILE in files):
            raise
        warnings.warn(f"{path} is a legacy bundle without {MANIFEST_FILE}: loaded with its integrity unverifiable "
                      "(only the ledger's own records were checked)", LegacyBundleWarning, stacklevel=2)
    if signature is not None and public_key is None:
        raise TypeError("signature is a model-signing signature file: give it with public_key= (the publisher's "
                        "elliptic-curve key)")
    if public_key is not None:
        _verify_publisher(path, files, public_key, signature)
    return open_bundle_files(files, module=module, model_class=model_class, module_fn=module_fn)


def _verify_publisher(path: str | os.PathLike[str], files: Mapping[str, bytes], public_key: Any,
                      signature: str | os.PathLike[str] | None) -> None:
    """Require a valid publisher signature over ``files``: Ed25519 or OpenSSF model signing (EC key)."""
    from privfed.bundle.model_signature_verify import is_elliptic_curve_key, model_signing_verdict
    from privfed.bundle.signing import verify_signature

    if not is_elliptic_curve_key(public_key):
        if signature is not None:
            raise TypeError("signature is a model-signing signature file, which needs an elliptic-curve public_key")
        verify_signature(files, public_key)
        return
    verdict = model_signing_verdict(path, public_key, signature=signature, files=files)
    if verdict.status != "signed":
        raise BundleIntegrityError(f"bundle signature: {verdict.detail}")


def ledger_document(data: bytes) -> dict[str, Any]:
    """``ledger.json`` parsed by the strict JSON reader and refused when it declares more work than the budget.

    The budget (:func:`~privfed.accounting.documents.check_declared_work`) is checked
    before any entry is rebuilt or any total recomputed: a small resealed ledger
    cannot make loading or auditing work for minutes.
    """
    document = load_json(data, LEDGER_FILE)
    check_declared_work(document, LEDGER_FILE, error=BundleError)
    return document


def bundle_ledger(files: Mapping[str, bytes]) -> Ledger:
    """The ledger of verified bundle files, its records checked against the files (no curve recomputed)."""
    if LEDGER_FILE not in files:
        raise BundleError(f"not a privfed bundle: it has no {LEDGER_FILE}")
    ledger = Ledger.from_dict(ledger_document(files[LEDGER_FILE]))
    fingerprint = ledger.model_fingerprint
    if not fingerprint or not isinstance(fingerprint.get("files"), dict) or not fingerprint["files"]:
        raise BundleError(f"{LEDGER_FILE} records no model files (ledger.model.files): not a bundle's ledger")
    if fingerprint.get("family") not in _FAMILY_FILES:
        raise BundleError(
            f"the bundle's model family {fingerprint.get('family')!r} is not one privfed loads safely "
            f"({', '.join(_FAMILY_FILES)}); refusing — privfed never unpickles a model"
        )
    if not isinstance(fingerprint.get("class"), str):
        raise BundleError(f"{LEDGER_FILE}: ledger.model.class must be a string, got {fingerprint.get('class')!r}")
    if sorted(fingerprint["files"]) != sorted(_FAMILY_FILES[fingerprint["family"]]):
        raise BundleError(
            f"{LEDGER_FILE}: a {fingerprint['family']} model must list exactly the files "
            f"{list(_FAMILY_FILES[fingerprint['family']])}, got {sorted(fingerprint['files'])}"
        )
    for name, recorded in fingerprint["files"].items():
        _check_file(files, name, recorded, what="model file")
    if ledger.evidence_fingerprint is not None:
        _check_file(files, EVIDENCE_FILE, ledger.evidence_fingerprint.get("sha256"), what="evidence file")
    elif EVIDENCE_FILE in files:
        raise BundleIntegrityError(f"{EVIDENCE_FILE} is present but {LEDGER_FILE} does not reference it: it was added")
    return ledger


def read_evidence(data: bytes, *, what: str = EVIDENCE_FILE) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` held in memory, read without pickle, within a memory budget; BundleError otherwise.

    :func:`privfed.accounting.documents.read_npz`: the budget is checked on the archive's declared sizes before
    anything is decompressed, so a small archive cannot make the reader allocate gigabytes.
    """
    try:
        return read_npz(data, what)
    except ValueError as error:
        raise BundleError(str(error)) from None


def open_bundle_files(
    files: Mapping[str, bytes], *, module: Any = None, model_class: type | None = None,
    module_fn: Callable[..., Any] | None = None,
) -> tuple[Any, Ledger]:
    """(model, ledger) from bundle files already read and checked against their manifest."""
    ledger = bundle_ledger(files)
    if ledger.evidence_fingerprint is not None:
        ledger = Ledger.from_dict(ledger_document(files[LEDGER_FILE]), evidence=read_evidence(files[EVIDENCE_FILE]))
    ledger.verify()
    model = _read_model(ledger.model_fingerprint, files, module=module, model_class=model_class, module_fn=module_fn)
    return model, ledger


def _check_file(files: Mapping[str, bytes], name: str, recorded: object, *, what: str) -> None:
    if not isinstance(name, str) or Path(name).name != name:
        raise BundleError(f"{LEDGER_FILE} names the {what} {name!r}, which is not a plain file name")
    if name not in files:
        raise BundleIntegrityError(f"the {what} {name} recorded in {LEDGER_FILE} is missing from the bundle")
    actual = sha256_hex(files[name])
    if actual != recorded:
        raise BundleIntegrityError(
            f"the {what} {name} has sha256 {actual} but {LEDGER_FILE} records {recorded}: "
            "the file was modified or replaced after the bundle was written"
        )
