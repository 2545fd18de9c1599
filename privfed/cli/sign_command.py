"""``privfed keygen`` and ``privfed sign``: publisher keys and bundle signatures (:mod:`privfed.bundle.signing`).

``privfed keygen KEY`` writes a new Ed25519 key pair (``KEY``, private, mode 0600;
``KEY.pub``, public) and prints the public key's fingerprint to announce;
``--type ec`` writes a P-256 pair for OpenSSF model signing.
``privfed sign BUNDLE --key KEY`` verifies the bundle's manifest, signs it and
prints the bundle digest and the key fingerprint; ``--format model-signing``
writes ``BUNDLE.sig`` (:mod:`privfed.bundle.model_signature`). Readers then run
``privfed audit BUNDLE --public-key KEY.pub``. Exit codes: 0 done, 2 unusable input.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["add_sign_commands"]


def _keygen_command(args: argparse.Namespace) -> int:
    from privfed.bundle.signing import generate_signing_key

    private_path, public_path, fingerprint = generate_signing_key(args.key, key_type=args.type)
    print(f"private key: {private_path} (keep it secret)\npublic key:  {public_path} (give it to readers)\n"
          f"fingerprint: {fingerprint}")
    return 0


def _sign_command(args: argparse.Namespace) -> int:
    if args.format == "model-signing":
        from privfed.bundle.model_signature import sign_bundle_model_signing

        path, fields = sign_bundle_model_signing(args.bundle, args.key, out=args.out)
        audit = fields["audit"]
        print(f"signed {args.bundle} (OpenSSF model signing): {path}\nbundle digest: {fields['bundle_digest']}\n"
              f"ledger digest: {fields['ledger_digest']}\naudit verdict in the signed statement: {audit['verdict']}"
              + (f" (failed: {', '.join(audit['failed'])})" if audit["failed"] else ""))
        return 0
    if args.out is not None:
        raise ValueError("--out applies to --format model-signing; privfed's format signs into BUNDLE/SIGNATURE.json")
    from privfed.bundle.signing import key_fingerprint, load_private_key, sign_bundle

    if not Path(args.key).is_file():
        from privfed.accounting.documents import not_a_file
        raise ValueError(f"--key {args.key!r} {not_a_file(Path(args.key))} (a private key written by privfed keygen)")
    key = load_private_key(args.key)
    digest = sign_bundle(args.bundle, key)
    print(f"signed {args.bundle}\nbundle digest: {digest}\nkey fingerprint: {key_fingerprint(key)}")
    return 0


def add_sign_commands(subparsers: Any) -> None:
    """Register ``privfed keygen`` and ``privfed sign`` on the ``privfed`` parser's subparsers."""
    keygen = subparsers.add_parser(
        "keygen", help="create a key pair for signing bundles (Ed25519, or EC P-256 for model signing)",
        description="Write a new key pair: KEY (private, PEM, mode 0600) and KEY.pub (public, PEM); print the "
                    "fingerprint to announce. --type ed25519 (default) signs in privfed's format, --type ec (P-256) "
                    "in OpenSSF model signing's. Example: privfed keygen publisher.pem",
    )
    keygen.add_argument("key", help="path of the private key to create (the public key goes to KEY.pub)")
    keygen.add_argument("--type", choices=("ed25519", "ec"), default="ed25519",
                        help="ed25519 (default: privfed's SIGNATURE.json) or ec (NIST P-256: --format model-signing)")
    keygen.set_defaults(handler=_keygen_command)
    sign = subparsers.add_parser(
        "sign", help="sign a bundle with a publisher key",
        description="Verify BUNDLE's manifest and sign it. --format privfed (default): an Ed25519 signature of the "
                    "manifest in BUNDLE/SIGNATURE.json. --format model-signing: an OpenSSF model signature of every "
                    "file (EC key) in BUNDLE.sig beside the folder, its statement carrying the ledger digest and the "
                    "audit verdict. Readers check either with privfed audit BUNDLE --public-key KEY.pub. "
                    "Example: privfed sign model_bundle --key publisher.pem",
    )
    sign.add_argument("bundle", help="bundle folder written by privfed.save_bundle")
    sign.add_argument("--key", required=True, help="private key (PEM) from privfed keygen")
    sign.add_argument("--format", choices=("privfed", "model-signing"), default="privfed",
                      help="privfed (default; Ed25519 key) or model-signing (OpenSSF model signing; EC key)")
    sign.add_argument("--out", help="with --format model-signing: the signature file (default: BUNDLE.sig beside "
                                    "the bundle folder)")
    sign.set_defaults(handler=_sign_command)
