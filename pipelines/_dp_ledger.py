"""Recording the parties' DP-SGD training in a pipeline's ledger (shared by the four pipelines).

A pipeline whose local models are DP-trained (``dp=``) records their training as
one ``"training"`` ledger entry: each party's DP-SGD releases composed
sequentially (rounds, or the overlapping teacher partitions of FedKT), then in
parallel over parties, whose data are disjoint. Releases computed only from those
models and public data are recorded with ``derived_from_training=True``; the
ledger then reports the smaller valid bound (see ``Ledger.account``).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..accounting import Ledger, Mechanism, compose_parallel

__all__ = ["record_local_training"]


def record_local_training(ledger: Ledger, releases_per_party: Sequence[Mechanism | None], *, what: str) -> bool:
    """Record the parties' DP training; return True when every party's models are DP-trained.

    ``releases_per_party[i]`` is party i's composed DP-SGD mechanism (example level),
    or None when some model of that party was trained without DP. Nothing is recorded
    when no party trained with DP (the ledger then reports the aggregation bound alone).
    """
    trained = [release for release in releases_per_party if release is not None]
    if not trained:
        return False
    ledger.record_training(
        compose_parallel(trained),
        note=(
            f"{what}: DP-SGD of {len(trained)} of {len(releases_per_party)} parties' local models (example level, "
            "add/remove one example; Poisson sampling), each party's trainings composed sequentially, parallel "
            "composition over parties (disjoint data); the models themselves are not released"
        ),
    )
    return len(trained) == len(releases_per_party)
