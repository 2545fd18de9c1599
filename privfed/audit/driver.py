"""The audit's driver: :func:`audit` checks its arguments, runs the checks in table order, returns the verdict.

A bundle: integrity, recomputation, the card, the guarantee as implemented (noise provenance, size-revealing
parameters, the parameters its noise calls ran with when it ships ``run_parameters.json``, relations and
assumptions), claim hygiene, safe loading and the empirical check (a bundle that fails an
earlier check, other than those of its guarantee as implemented, is never loaded). A claims file, with or without
its model: the file, the model file, recomputation, hygiene, safe loading and the empirical check. Each kind of
check is a module of this package; :class:`~privfed.audit.report.AuditReport` renders the verdict.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from privfed.accounting.ledger import LedgerFormatError
from privfed.accounting.ledger_entry import load_json
from privfed.audit.assumptions import assumptions_check
from privfed.audit.card import card_check, statement_check
from privfed.audit.claims import claims_defaults, load_claims
from privfed.audit.claims_recomputation import claims_statement
from privfed.audit.hygiene import hygiene_checks, parse_protected_units
from privfed.audit.integrity import (
    evidence_arrays,
    foreign_model_file_check,
    manifest_check,
    model_file_check,
    read_ledger,
    signature_check,
)
from privfed.audit.loading import load_bundle_model, load_foreign_model
from privfed.audit.membership import empirical_check, empirical_claim, read_samples
from privfed.audit.parameters import parameters_check
from privfed.audit.provenance import noise_headline, noise_provenance_check
from privfed.audit.recomputation import budget_check, entry_checks, epsilon_table, ledger_statement, totals_check
from privfed.audit.report import (
    INTEGRITY_MEANING,
    RECOMPUTE_MEANING,
    AuditInputError,
    AuditReport,
    Check,
    unsigned_headline,
)
from privfed.audit.sizes import size_check
from privfed.bundle.layout import LEDGER_FILE, RUN_PARAMETERS_FILE
from privfed.bundle.manifest import BundleError, read_bundle_files

__all__ = ["audit"]


def _headline(provenance: Check, signing: Check, ledger: Any) -> str:
    """The noise headline, then the unsigned one; a bundle that is not a private release needs only the first."""
    noise = noise_headline(provenance)
    if provenance.status == "fail":
        return noise
    return " ".join(line for line in (noise, unsigned_headline(signing, ledger)) if line)


def _run_parameters_check(content: bytes, document: Mapping[str, Any]) -> Check:
    """The bundle's run record (``run_parameters.json``) against its ledger; an unreadable record fails."""
    try:
        record = load_json(content, RUN_PARAMETERS_FILE)
    except LedgerFormatError as error:
        return Check("parameter consistency", "fail", str(error), INTEGRITY_MEANING, "parameter-consistency")
    return parameters_check(document, record)


def audit(
    target: str | os.PathLike[str] | None = None,
    *,
    claims: str | os.PathLike[str] | None = None,
    evidence: str | os.PathLike[str] | None = None,
    members: object = None,
    non_members: object = None,
    protected_units: int | Mapping[str, int] | None = None,
    module: Any = None,
    model_class: type | None = None,
    confidence: float = 0.95,
    random_state: int | None = 0,
    public_key: Any = None,
    signature: str | os.PathLike[str] | None = None,
    load_model: bool = True,
) -> AuditReport:
    """Audit a model's privacy claims; returns the verdict table.

    Parameters
    ----------
    target:
        A privfed bundle directory, or a foreign model file (``.skops``, xgboost
        ``.ubj``/``.json``, ``.safetensors``) audited against ``claims``. May be
        omitted with ``claims`` to audit the claims alone.
    claims:
        A claims file (JSON, ``docs/audit.md``) for a foreign model.
    evidence:
        An ``evidence.npz`` for a bundle (default: the bundle's own, if it ships one):
        data-dependent entries are then recomputed from the raw votes.
    members, non_members:
        Labelled samples that were and were not in the training data (``.npz`` with
        ``X`` and ``y``, read without pickle, or ``(X, y)`` pairs): runs the
        membership-inference lower bound. Give both or neither.
    protected_units:
        How many protected units the data holds, for the δ < 1/n check: an integer
        (for the claim's unit) or a mapping unit → count. Default: the claims file's
        ``protected_units``, or for a ledger the number of parties its description
        states.
    module, model_class:
        For torch models: the module to load a state dict into, or the safe-state class.
    confidence:
        Confidence of the empirical bound (default 0.95).
    random_state:
        Seed of the empirical check's split.
    public_key:
        For a bundle: the publisher's Ed25519 public key (PEM path, bytes or key
        object). The bundle must then carry a valid signature by it ("signed by
        …"); without it the verdict is "unsigned: integrity only against accidents".
        An elliptic-curve public key (PEM path) checks the OpenSSF model-signing
        signature instead (:mod:`privfed.bundle.model_signature`): every file of the bundle
        against ``signature`` (default: ``BUNDLE.sig`` beside the folder).
    signature:
        The model-signing signature file, with an elliptic-curve ``public_key``.
    load_model:
        Open the model through its safe reader (default True), the *safe loading* check. False: every other
        check runs, and *safe loading* warns that the model was not opened; its library (scikit-learn and skops,
        xgboost, safetensors) is then never imported, which saves about 2 CPU s for a scikit-learn bundle. The
        membership check needs the model: ``members`` with ``load_model=False`` is refused.

    Returns
    -------
    AuditReport
        ``report.exit_code`` is 0 when nothing failed, 1 otherwise.

    Raises
    ------
    AuditInputError
        The input cannot be audited at all (missing files, not a bundle, a malformed claims file).
    """
    if target is None and claims is None:
        raise AuditInputError("give a bundle, a model file with claims, or a claims file")
    if (members is None) != (non_members is None):
        raise AuditInputError("members and non_members go together: give both sample files or neither")
    if not isinstance(load_model, bool):
        raise AuditInputError(f"load_model must be True or False, got {load_model!r}")
    if members is not None and not load_model:
        raise AuditInputError("members and non_members are scored by the model: they need load_model=True "
                              "(drop --no-model-load)")
    if not 0.0 < confidence < 1.0:
        raise AuditInputError(f"confidence must be in (0, 1), got {confidence!r}")
    given_units = parse_protected_units(protected_units)
    samples = None if members is None else (read_samples(members, "members"),
                                            read_samples(non_members, "non-members"))
    path = None if target is None else Path(target)
    if path is not None and path.is_dir():
        if claims is not None:
            raise AuditInputError("a bundle carries its own claims (its ledger); --claims is for foreign models")
        return _audit_bundle(path, evidence=evidence, samples=samples,
                             given_units=given_units, module=module, model_class=model_class,
                             confidence=confidence, random_state=random_state, public_key=public_key,
                             signature=signature, load_model=load_model)
    if path is not None and not path.exists():
        raise AuditInputError(f"{str(path)!r} does not exist (give a bundle folder or a model file)")
    if path is not None and not path.is_file():
        raise AuditInputError(f"{str(path)!r} is neither a bundle directory nor a model file")
    if claims is None:
        raise AuditInputError(f"{path.name} is not a privfed bundle; a foreign model needs a claims file (--claims)")
    if evidence is not None:
        raise AuditInputError("evidence applies to privfed bundles, not to a foreign model with a claims file")
    return _audit_claims(path, Path(claims), samples=samples, given_units=given_units,
                         module=module, confidence=confidence, random_state=random_state, load_model=load_model)


#: The safe-loading check of an audit asked not to open the model.
_NOT_LOADED = Check("safe loading", "warn", "not attempted: the model was not opened (load_model=False, privfed audit "
                    "--no-model-load); its file's sha256 was checked, its format was not",
                    "whether the model opens without running code was not checked.", "safe-loading")


def _audit_bundle(directory: Path, *, evidence, samples, given_units, module, model_class,
                  confidence, random_state, public_key=None, signature=None, load_model=True) -> AuditReport:
    """The checks of a bundle folder, in table order; a bundle that fails one is never loaded."""
    try:
        files = read_bundle_files(directory)
    except BundleError as error:
        raise AuditInputError(str(error)) from None
    if LEDGER_FILE not in files:
        raise AuditInputError(f"{directory} is not a privfed bundle: it has no {LEDGER_FILE}")
    manifest, digest = manifest_check(files, directory)
    signing = signature_check(files, public_key, directory, signature)
    checks = [manifest, signing]
    if public_key is not None and signing.status == "fail":
        # The publisher's key says the bundle is not what was signed: nothing in it is recomputed (a forged ledger
        # could ask for any amount of work), and nothing is loaded.
        return AuditReport(str(directory), (*checks, Check(
            "recomputation", "warn", "not attempted: the signature does not verify, so the ledger was not read",
            "nothing in an unsigned or forged bundle is worth recomputing; use the publisher's signed bundle.",
            "integrity")))
    try:
        document = load_json(files[LEDGER_FILE], LEDGER_FILE)
    except LedgerFormatError as error:
        return AuditReport(str(directory), (*checks, Check("ledger schema", "fail", str(error), INTEGRITY_MEANING,
                                                           "integrity")))
    ledger, ledger_checks = read_ledger(document)
    checks += ledger_checks
    if ledger is None:
        return AuditReport(str(directory), tuple(checks))
    checks.append(model_file_check(files, ledger))
    verified, evidence_check = evidence_arrays(files, ledger, evidence)
    if evidence_check is not None:
        checks.append(evidence_check)
    checks += entry_checks(ledger, verified)
    try:  # totals are recomputed from untrusted parameters: a malformed entry fails here, never as a traceback
        totals = totals_check(ledger, document)
        epsilons = epsilon_table(ledger, document) if totals.status == "pass" else {}
        budget = budget_check(ledger, document)
        statement, claim = ledger_statement(ledger, document.get("spent"), given_units)
    except (ValueError, TypeError, KeyError, ArithmeticError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        checks.append(Check("recorded totals", "fail", f"the totals cannot be recomputed from the entries: {message}",
                            RECOMPUTE_MEANING, "recomputation"))
        return AuditReport(str(directory), tuple(checks))
    checks += [totals] if budget is None else [totals, budget]
    checks.append(card_check(files))
    card_statement = statement_check(files)
    if card_statement is not None:
        checks.append(card_statement)
    if digest is not None:
        claim = {**claim, "bundle_digest": digest}
    # A bundle that fails a check is never loaded; one whose guarantee fails only as implemented (noise its holder
    # regenerates, a size in a parameter) is what it says it is, and is loaded.
    untrustworthy = any(check.status == "fail" for check in checks)
    provenance = noise_provenance_check(ledger, document["schema_version"])
    checks += [provenance, size_check(ledger, document["budget"].get("target_epsilon"))]
    if RUN_PARAMETERS_FILE in files:
        checks.append(_run_parameters_check(files[RUN_PARAMETERS_FILE], document))
    relations = assumptions_check(ledger)
    if relations is not None:
        checks.append(relations)
    hygiene = hygiene_checks(statement)
    checks += hygiene
    if untrustworthy or any(check.status == "fail" for check in hygiene):
        model = None
        checks.append(Check("safe loading", "warn", "not attempted: the bundle failed the checks above, and a bundle "
                            "that fails them is never loaded", "the model was not opened.", "safe-loading"))
    elif not load_model:
        model = None
        checks.append(_NOT_LOADED)
    else:
        model, loading = load_bundle_model(files, ledger, module=module, model_class=model_class)
        checks.append(loading)
    empirical = None
    if samples is not None:
        compared = empirical_claim(statement)
        check, empirical = empirical_check(model, samples, claimed=compared, delta=statement.delta,
                                           confidence=confidence, random_state=random_state)
        checks.append(check)
    return AuditReport(str(directory), tuple(checks), claim, empirical,
                       headline=_headline(provenance, signing, ledger), epsilons=epsilons)


def _audit_claims(model_path: Path | None, claims_path: Path, *, samples, given_units, module,
                  confidence, random_state, load_model=True) -> AuditReport:
    """The checks of a claims file and, when given, the foreign model it describes, in table order."""
    document = load_claims(claims_path)
    statement, claim, recomputation = claims_statement(document, given_units)
    described = f"{claims_path.name}: {document.get('description', '')}".rstrip(": ")
    defaults = claims_defaults(document)
    if defaults:
        described += "; defaults used (not stated in the file): " + ", ".join(
            f"{name} = {value!r}" for name, value in defaults.items())
    checks = [Check("claims file", "pass", described)]
    model = None
    if model_path is None:
        checks.append(Check("model file", "warn", "no model file given: only the claims were audited",
                            "the numbers were checked, not the model they are said to describe.", "foreign-models"))
    else:
        checks.append(foreign_model_file_check(model_path, document))
    checks += recomputation
    checks += hygiene_checks(statement)
    if model_path is not None and not load_model:
        checks.append(_NOT_LOADED)
    elif model_path is not None:
        model, loading = load_foreign_model(model_path, module=module)
        checks.append(loading)
    empirical = None
    if samples is not None:
        compared = (
            statement.epsilon if statement.rounds is None and statement.epsilon is not None
            else statement.total_epsilon
        )
        check, empirical = empirical_check(model, samples, claimed=compared, delta=statement.delta,
                                           confidence=confidence, random_state=random_state)
        checks.append(check)
    target = " + ".join(str(p) for p in (model_path, claims_path) if p is not None)
    return AuditReport(target, tuple(checks), claim, empirical)
