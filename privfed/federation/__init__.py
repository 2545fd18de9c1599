"""privfed on Flower: each party in its own process (its own machine), exchanging only its messages.

The Flower app follows Flower's layout: :mod:`.server_app` (the ServerApp), :mod:`.client_app` (the
ClientApp, one per party), :mod:`.task` (the shared code: run configuration, party data, message
transport). The algorithms' party and server steps live in :mod:`privfed.pipelines`; this package only
moves their messages. Flower (``pip install 'privfed[federation]'``) is imported on first use, so
``import privfed.federation`` works without it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["simulate"]


def simulate(
    estimator: Any,
    parties: Any,
    public: Any,
    *,
    num_supernodes: int | None = None,
    timeout: float | None = None,
    random_state: int | None = None,
) -> Any:
    """Fit ``estimator`` over Flower's simulation engine, one SuperNode per party (see :mod:`.simulation`)."""
    from privfed.federation.simulation import simulate as run

    return run(estimator, parties, public, num_supernodes=num_supernodes, timeout=timeout, random_state=random_state)
