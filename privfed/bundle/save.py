"""Writing a bundle: :func:`save_bundle`, atomically.

:func:`save_bundle` writes the model in its family's safe format (:mod:`privfed.bundle.families`), a copy of the
ledger that records every model file's sha256, the optional evidence and run parameters, the card, then the
manifest (:mod:`privfed.bundle.manifest`) and, with a key, its signature, into a fresh sibling folder; fsyncs it,
checks it, then renames it into place (:mod:`privfed.bundle.publish`): a reader sees the old bundle or the new one,
never a mixture, and a save killed at any point leaves one of them. The files are those of
:mod:`privfed.bundle.layout`.
"""

from __future__ import annotations

import io
import json
import os
import re
import secrets
import shutil
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from privfed.accounting.fingerprint import sha256_hex
from privfed.accounting.ledger import Ledger
from privfed.bundle.families import model_family, write_model
from privfed.bundle.layout import BUNDLE_FILES, EVIDENCE_FILE, LEDGER_FILE, MODEL_CARD_FILE, RUN_PARAMETERS_FILE
from privfed.bundle.manifest import MANIFEST_FILE, SIGNATURE_FILE, build_manifest, read_bundle_files, verify_manifest
from privfed.bundle.model_card import CARD_DATA_FILE, card_data_document, render_model_card
from privfed.bundle.publish import check_replaceable, fsync_path, publish_folder, write_file

__all__ = ["save_bundle"]


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
        (``privfed.empirical_audit``), recorded in ``card.json`` and on the card (covered by the
        manifest and any signature). Default: the card says none was run.
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
    family = model_family(model)
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
        check_replaceable(directory, BUNDLE_FILES)
    # A copy: the caller's ledger is left as it was. Checking evidence recomputes every committed curve.
    bundle_ledger = Ledger.from_dict(ledger.to_dict(), evidence=evidence)

    target = Path(os.path.abspath(directory))  # "." or "bundle/" still name a folder with a parent and a name
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.privfed-new-{secrets.token_hex(4)}")
    staging.mkdir()
    try:
        fingerprint = write_model(model, family, staging)
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
        publish_folder(staging, target, overwrite=overwrite, allowed=BUNDLE_FILES)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_path(target.parent)
    return directory
