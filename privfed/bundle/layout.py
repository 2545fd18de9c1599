"""The bundle folder's layout: the name of every file a bundle may hold, and what each one is.

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

The **bundle digest** (sha256 of ``MANIFEST.json``) identifies the whole bundle. Writing a bundle is
:mod:`privfed.bundle.save`, reading one :mod:`privfed.bundle.load`, the model files of each model family
:mod:`privfed.bundle.families`.
"""

from __future__ import annotations

from privfed.bundle.manifest import MANIFEST_FILE, SIGNATURE_FILE
from privfed.bundle.model_card import CARD_DATA_FILE

__all__ = ["ARCHITECTURE_FILE", "BUNDLE_FILES", "EVIDENCE_FILE", "LEDGER_FILE", "MODEL_CARD_FILE",
           "RUN_PARAMETERS_FILE"]

LEDGER_FILE = "ledger.json"
EVIDENCE_FILE = "evidence.npz"
RUN_PARAMETERS_FILE = "run_parameters.json"
MODEL_CARD_FILE = "MODEL_CARD.md"
ARCHITECTURE_FILE = "architecture.json"

#: Every name save_bundle writes; overwrite=True replaces only a folder holding nothing else.
BUNDLE_FILES = (MANIFEST_FILE, SIGNATURE_FILE, LEDGER_FILE, EVIDENCE_FILE, RUN_PARAMETERS_FILE, MODEL_CARD_FILE,
                CARD_DATA_FILE, ARCHITECTURE_FILE, "model.ubj", "model.skops", "model.safetensors")
