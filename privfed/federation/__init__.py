"""privfed on Flower: each party in its own process (its own machine), exchanging only its messages.

The Flower app follows Flower's layout: :mod:`.server_app` (the ServerApp), :mod:`.client_app` (the
ClientApp, one per party), :mod:`.task` (the shared code: run configuration, party data, message
transport); :mod:`.simulation` fits an estimator over Flower's simulation engine, or with
``backend="in-process"`` over :mod:`.in_process` (the ServerApp and ClientApps in one process). The algorithms'
party and server steps live in :mod:`privfed.pipelines`; this package only
moves their messages. Flower (``pip install 'privfed[federation]'``) is imported on first use, so
``import privfed.federation`` works without it. Imports ``privfed.accounting``, ``privfed.pipelines``,
``privfed.bundle`` (the output bundle), ``privfed.evaluation`` and ``privfed.output_folder``; never the CLI.
"""

from __future__ import annotations

from typing import Any

__all__ = ["simulate"]


def __getattr__(name: str) -> Any:
    # simulate (privfed.federation.simulation) imports Flower: load it on first use.
    if name == "simulate":
        from .simulation import simulate

        return simulate
    raise AttributeError(f"module 'privfed.federation' has no attribute {name!r}")
