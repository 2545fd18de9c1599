"""``privfed keygen`` and ``privfed sign``: publisher keys and bundle signatures (:mod:`privfed.signing`).

``privfed keygen KEY`` writes a new Ed25519 key pair (``KEY``, private, mode 0600;
``KEY.pub``, public) and prints the public key's fingerprint to announce.
``privfed sign BUNDLE --key KEY`` verifies the bundle's manifest, signs it and
prints the bundle digest and the key fingerprint. Readers then run
``privfed audit BUNDLE --public-key KEY.pub``. Exit codes: 0 done, 2 unusable input.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["add_sign_commands"]


def _keygen_command(args: argparse.Namespace) -> int:
    from privfed.signing import generate_signing_key

    private_path, public_path, fingerprint = generate_signing_key(args.key)
    print(f"private key: {private_path} (keep it secret)\npublic key:  {public_path} (give it to readers)\n"
          f"fingerprint: {fingerprint}")
    return 0


def _sign_command(args: argparse.Namespace) -> int:
    from privfed.signing import key_fingerprint, load_private_key, sign_bundle

    if not Path(args.key).is_file():
        raise ValueError(f"--key {args.key!r} does not exist (a private key written by privfed keygen)")
    key = load_private_key(args.key)
    digest = sign_bundle(args.bundle, key)
    print(f"signed {args.bundle}\nbundle digest: {digest}\nkey fingerprint: {key_fingerprint(key)}")
    return 0


def add_sign_commands(subparsers: Any) -> None:
    """Register ``privfed keygen`` and ``privfed sign`` on the ``privfed`` parser's subparsers."""
    keygen = subparsers.add_parser(
        "keygen", help="create an Ed25519 key pair for signing bundles",
        description="Write a new Ed25519 key pair: KEY (private, PEM, mode 0600) and KEY.pub (public, PEM); print "
                    "the fingerprint to announce. Example: privfed keygen publisher.pem",
    )
    keygen.add_argument("key", help="path of the private key to create (the public key goes to KEY.pub)")
    keygen.set_defaults(handler=_keygen_command)
    sign = subparsers.add_parser(
        "sign", help="sign a bundle's manifest with a publisher key",
        description="Verify BUNDLE's manifest and sign it (SIGNATURE.json). Readers check it with "
                    "privfed audit BUNDLE --public-key KEY.pub. Example: privfed sign model_bundle --key publisher.pem",
    )
    sign.add_argument("bundle", help="bundle folder written by privfed.save_bundle")
    sign.add_argument("--key", required=True, help="Ed25519 private key (PEM) from privfed keygen")
    sign.set_defaults(handler=_sign_command)
