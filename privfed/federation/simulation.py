"""``simulate``: a pipeline estimator fitted over Flower's simulation engine, one virtual SuperNode per party.

It runs the very ServerApp and ClientApp that ``flwr run`` starts (:mod:`.server_app`,
:mod:`.client_app`), by default through ``flwr.simulation.run_simulation``: the ServerApp runs in this process,
so the fitted estimator comes back as an object, and each party's ClientApp runs in a Ray worker
process that reads only that party's data file. With ``backend="in-process"`` the ClientApps run in this
process too, on an in-process grid (:mod:`.in_process`): no Ray to start, for small runs on one machine.
``run_simulation`` is deprecated upstream in favour of ``flwr run <app> local-simulation``, which runs the
ServerApp in a process of its own (its result would have to come back through the output bundle); privfed keeps
it for this in-process entry point and documents ``flwr run`` for everything else (``docs/federation.md``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privfed.federation.client_app import make_client_app
from privfed.federation.server_app import FederationError, ServerJob, make_server_app, selective_fd_configs
from privfed.federation.task import DATA_FORMATS

__all__ = ["BACKENDS", "simulate"]

#: Where ``simulate`` runs the ClientApps: Flower's Ray simulation engine, or this process (:mod:`.in_process`).
BACKENDS = ("ray", "in-process")


@contextlib.contextmanager
def _checkout_on_worker_path() -> Iterator[None]:
    """Ray's worker processes import privfed from this checkout too (they inherit ``PYTHONPATH``)."""
    import privfed

    root = str(getattr(privfed, "_CHECKOUT_ROOT", ""))
    previous = os.environ.get("PYTHONPATH")
    if root and (Path(root) / "pyproject.toml").is_file():
        os.environ["PYTHONPATH"] = root if not previous else os.pathsep.join([root, previous])
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous


class _DropRunSimulationDeprecation(logging.Filter):
    """Flower's notice that ``run_simulation`` is deprecated: privfed calls it on purpose (docs/federation.md)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "`run_simulation` function is deprecated" not in record.getMessage()


@contextlib.contextmanager
def _without_run_simulation_deprecation() -> Iterator[None]:
    """Drop that one notice from Flower's logger while ``simulate`` runs; every other record passes."""
    logger, notice = logging.getLogger("flwr"), _DropRunSimulationDeprecation()
    logger.addFilter(notice)
    try:
        yield
    finally:
        logger.removeFilter(notice)


def _party_files(parties: Any, folder: Path, check: Callable[[Any], list] | None = None) -> list[str]:
    """Each party's data file: the paths given, or ``(X, y)`` pairs written as ``party-<i>.npz`` in ``folder``.

    ``check`` validates the pairs (default: :func:`~privfed.pipelines.data.party_data.check_party_data`).
    """
    if isinstance(parties, (str, bytes)) or not isinstance(parties, Sequence) or len(parties) == 0:
        raise ValueError(f"parties must be a non-empty sequence of (X, y) pairs or data files, got {parties!r}")
    if all(isinstance(party, (str, os.PathLike)) for party in parties):
        paths = [Path(party) for party in parties]
        for index, path in enumerate(paths):
            if path.suffix.lower() not in DATA_FORMATS or not path.is_file():
                raise ValueError(f"parties[{index}] = {str(path)!r} must be an existing file ending in {DATA_FORMATS}")
        return [str(path.resolve()) for path in paths]
    from privfed.pipelines.data.party_data import check_party_data

    paths = []
    for index, (X, y) in enumerate((check or check_party_data)(parties)):
        path = folder / f"party-{index}.npz"
        np.savez(path, X=X, y=y)
        paths.append(str(path))
    return paths


def simulate(
    estimator: Any,
    parties: Any,
    public: Any,
    *,
    num_supernodes: int | None = None,
    timeout: float | None = None,
    random_state: int | None = None,
    backend: str = "ray",
) -> Any:
    """Fit ``estimator`` over Flower's simulation engine, one virtual SuperNode per party; return it fitted.

    Parameters
    ----------
    estimator : FedKT, FedKD, PrivateKT, SelectiveFD, FedMD or IndependentLearning
        Unfitted and configured as for ``fit`` (the models the parties train — FedKT's teacher and
        student, FedKD's and Selective-FD's local models, PrivateKT's global model — must be describable
        by class name and JSON hyper-parameters: they travel to the parties as specs, never as objects; a
        ``dp=DPConfig(...)`` travels as its fields). FedKD with ``multilabel=True`` takes (X, Y) pairs or
        npz files with an (n, L) 0/1 ``y``. Selective-FD on Flower takes no ``callback``, no
        ``feature_map`` and no DP-SGD client models.
    parties : sequence of (X, y) pairs, or of data files
        As ``fit`` takes them, or one file per party (npz with ``X`` and ``y``, CSV/Parquet with the
        label in the last column, LIBSVM). Pairs are written to a temporary npz file per party.
    public : array of shape (n, features...)
        The unlabelled public set (it stays on the server, which sends the parties their queries).
    num_supernodes : int, default=None
        Virtual SuperNodes: one per party (``None`` means ``len(parties)``; any other count is an error).
    timeout : float, default=None
        Seconds the server waits for the SuperNodes to connect and for each step's replies; a party
        still silent then stops the run with :class:`~privfed.federation.server_app.FederationError`
        (FedKT, FedKD), or is dropped from that round and listed in ``dropouts_`` (PrivateKT).
    random_state : int, default=None
        Overrides ``estimator.random_state`` when given.
    backend : {"ray", "in-process"}, default="ray"
        Where the ClientApps run. ``"ray"``: Flower's simulation engine, each virtual SuperNode's ClientApp in a Ray
        worker process. ``"in-process"``: every ClientApp in this process, one after another, on an in-process grid
        (:func:`~privfed.federation.in_process.run_in_process`; each virtual SuperNode keeps its own ``Context``,
        and every message crosses as a copy): no Ray start, no worker imports — for small runs on one machine;
        ``timeout`` then has nothing to wait for. The messages, the parties' secret noise (each drawn inside its
        own ClientApp call) and the ledger are those of the Ray run.

    Returns
    -------
    estimator
        Fitted: ``final_model_``, ``ledger_``, ``evidence_``, ``bandwidth_`` and the rest as ``fit`` sets
        them — except FedKT's ``students_``, which stay on the parties, and Selective-FD's client models
        and selectors: only client ``client``'s model is published (``models_`` holds it at its position,
        ``None`` elsewhere; ``selectors_`` is all ``None``).
    """
    from privfed.pipelines.data.party_data import check_multilabel_parties
    from privfed.pipelines.fedkd.estimator import FedKD
    from privfed.pipelines.fedkt.estimator import FedKT
    from privfed.pipelines.privatekt.estimator import PrivateKT
    from privfed.pipelines.selective_fd.driver import _FederatedDistillation

    if not isinstance(estimator, (FedKT, FedKD, PrivateKT, _FederatedDistillation)):
        raise TypeError(
            f"estimator must be a privfed FedKT, FedKD, PrivateKT, SelectiveFD, FedMD or IndependentLearning, "
            f"got {type(estimator).__name__}"
        )
    if random_state is not None:
        estimator.set_params(random_state=random_state)
    estimator._validate()
    if isinstance(estimator, _FederatedDistillation):
        selective_fd_configs(estimator, len(parties) if isinstance(parties, Sequence) else 0)
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    try:
        import flwr  # noqa: F401
    except ImportError as error:
        raise ImportError("privfed.federation.simulate needs Flower: pip install 'privfed[federation]'") from error

    fitted: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="privfed-parties-") as folder, _checkout_on_worker_path():
        check = None
        if isinstance(estimator, FedKD) and estimator.multilabel:  # (X, Y) pairs with (n, L) 0/1 indicators
            def check(pairs: Any) -> list:
                return check_multilabel_parties(pairs, public)[0]
        paths = _party_files(parties, Path(folder), check)
        if num_supernodes is not None and num_supernodes != len(paths):
            raise ValueError(f"num_supernodes must be None or len(parties) = {len(paths)}, got {num_supernodes!r}")
        job = ServerJob(estimator=estimator, public=np.asarray(public), num_supernodes=len(paths), timeout=timeout)
        server_app, client_app = make_server_app(job, on_fitted=fitted.append), make_client_app(paths)
        if backend == "in-process":
            from privfed.federation.in_process import run_in_process

            # the node configs Flower's simulation engine gives its virtual SuperNodes
            run_in_process(server_app, client_app,
                           [{"partition-id": index, "num-partitions": len(paths)} for index in range(len(paths))])
        else:
            from flwr.simulation import run_simulation

            with _without_run_simulation_deprecation():
                run_simulation(
                    server_app=server_app,
                    client_app=client_app,
                    num_supernodes=len(paths),
                    backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}},
                )
    if not fitted:
        raise FederationError("the Flower simulation ended without a fitted model; nothing was written")
    return fitted[0]
