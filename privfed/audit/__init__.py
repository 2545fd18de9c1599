"""Auditing a federated model and its privacy claims: ``privfed.audit(...)`` and ``privfed audit``.

Someone receives a model and its privacy claims and must decide whether to trust
them. Two kinds of input:

* a **privfed bundle** (:func:`privfed.save_bundle`): the claims are the bundle's
  ledger, optionally with the private ``evidence.npz``;
* a **foreign model** — a scikit-learn (skops), xgboost (UBJSON/JSON) or torch
  (safetensors) file — with a **claims file** (JSON; see ``docs/audit.md``) that
  states the mechanism, its parameters, the unit and the claimed (ε, δ). A claims
  file may also be audited alone, when the model itself is not available.

The audit runs, in order: integrity (the bundle's and the ledger's own
verification: schema, chain of entries, the model file's sha256, the evidence's
hash and commitments), recomputation (every entry's curves and ε rebuilt from its
recorded parameters with privfed's accountants, the totals from the entries; a
relative difference above 1e-9 fails), the guarantee as implemented (where the noise came from: a bundle whose
holder can regenerate it fails; public parameters derived from private sizes; the relation and assumptions of
each observer's ε), claim hygiene, safe loading (only the
bundle's safe formats; anything that would need unpickling is refused, never
executed) and, with labelled member and non-member samples, an empirical lower
bound on ε (:mod:`privfed.audit.empirical`).

One module per kind of check, and a driver:

* :mod:`~privfed.audit.driver` — :func:`audit`: the arguments, the checks in table order, the verdict;
* :mod:`~privfed.audit.integrity` — bundle manifest, signature, ledger schema and chain, model file, evidence;
* :mod:`~privfed.audit.recomputation` — a ledger's entries, recorded totals (per observer) and budget;
* :mod:`~privfed.audit.claims` — claims files (:func:`load_claims`);
* :mod:`~privfed.audit.claims_recomputation` — a claims file's claim against its stated mechanisms;
* :mod:`~privfed.audit.card` — the model card and its privacy statement against the ledger;
* :mod:`~privfed.audit.parameters` — the parameters each noise call ran with, against the ledger's;
* :mod:`~privfed.audit.provenance` — where the noise came from (secret, or regenerable by the bundle's holder);
* :mod:`~privfed.audit.sizes` — public ledger values derived from private sizes or labels;
* :mod:`~privfed.audit.assumptions` — the relation and assumptions of every observer's ε;
* :mod:`~privfed.audit.hygiene` — claim hygiene;
* :mod:`~privfed.audit.loading` — safe loading;
* :mod:`~privfed.audit.membership` — the empirical (membership-inference) check;
* :mod:`~privfed.audit.report` — :class:`~privfed.audit.report.Check` and
  :class:`~privfed.audit.report.AuditReport`, the verdict table.

Empirical audits and the selftest live here too:

* :mod:`~privfed.audit.empirical` — empirical lower bounds on ε: membership inference with confidence intervals
  and one-run canary audits (:func:`privfed.audit_release`);
* :mod:`~privfed.audit.empirical_pipelines` — :func:`privfed.empirical_audit`: canaries through a pipeline's own
  code, its ε lower bound beside the ledger's claim (``privfed audit --empirical``);
* the canary designs: :mod:`~privfed.audit.mechanism_canaries` (many one-query canaries through a pipeline's
  noise step) and :mod:`~privfed.audit.gradient_canaries` (white-box Dirac-gradient canaries in privfed's
  DP-SGD); :mod:`~privfed.audit.released_labels` records the labels a pipeline released;
* :mod:`~privfed.audit.config` — the TOML file of ``privfed audit --empirical``;
* the selftest, :func:`privfed.selftest` (``privfed selftest``): conformance tests of privfed's own noise code
  against the laws and parameters the ledger accounts.

Imports ``privfed.accounting``, ``privfed.pipelines`` (the empirical audits and the selftest run the pipelines'
own steps), ``privfed.reports`` (the sweep configuration an empirical audit reads) and ``privfed.bundle`` (what a
bundle audit opens); never the CLI.
"""

from privfed.audit.claims import CLAIMS_TYPE, load_claims
from privfed.audit.driver import audit
from privfed.audit.parameters import audit_parameters
from privfed.audit.recomputation import RTOL

__all__ = ["CLAIMS_TYPE", "RTOL", "audit", "audit_parameters", "load_claims"]
