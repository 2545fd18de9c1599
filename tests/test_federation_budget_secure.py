"""A silo's budget under secure aggregation over Flower: the ClientApp charges its own Skellam share (node config
``budget-path``) before reading its data, as in process (tests/test_silo_gate_secure.py); an over-budget silo refuses
and SecAgg+ sums the others' shares, accounted at the variance that arrived."""

from __future__ import annotations

import importlib.util
import math
import warnings

import numpy as np
import pytest
from privfed.pipelines.fedkd.estimator import FedKD
from privfed.pipelines.fedkt.estimator import FedKT
from sklearn.linear_model import LogisticRegression
from sklearn.tree import DecisionTreeClassifier
from test_federation_secure import CopyingGrid

import privfed

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("flwr") is None, reason="flwr is not installed: pip install 'privfed[federation]'"
)

DELTA = 1e-5
SIGMA = 40.0


def secure_fedkd() -> FedKD:
    return FedKD(LogisticRegression(max_iter=100), DecisionTreeClassifier(max_depth=4), gamma=None,
                 aggregator="skellam", secure_aggregation=True, sigma=SIGMA, clip=4.0, quantization_scale=1,
                 classes=np.arange(10), random_state=0)


def secure_fedkt() -> FedKT:
    return FedKT(DecisionTreeClassifier(max_depth=4), n_partitions=2, n_teachers=2, privacy="L1",
                 aggregator="skellam", secure_aggregation=True, sigma=SIGMA, query_fraction=0.1,
                 classes=np.arange(10), random_state=0)


@pytest.mark.parametrize("estimator", [secure_fedkd, secure_fedkt])
def test_secure_aggregation_silos_charge_their_own_share_and_an_over_budget_one_refuses(
        federation, task_identity, tmp_path, estimator) -> None:
    from privfed.federation.server_app import ServerJob, run_server

    _, paths, public, _ = federation
    grid = CopyingGrid(paths)
    budgets = [tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"]
    for path, epsilon in zip(budgets, (1000.0, 0.1, 1000.0)):
        privfed.SiloBudget(path, epsilon=epsilon, delta=DELTA)  # what `privfed budget init` writes on the silo
    for context in grid.contexts.values():
        context.node_config.update({"budget-path": str(budgets[context.node_config["party-index"]]),
                                    "study": "icu-2027"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flower = run_server(grid, ServerJob(estimator(), public[:40], num_supernodes=3, timeout=5))
    assert [(r.party, r.round) for r in flower.refused_] == [(1, 1)] and "0.1" in flower.refused_[0].reason
    assert privfed.SiloBudget.open(budgets[1]).charges == ()
    # Two of the three shares σ²/3 arrived: the public's release carries 2σ²/3; the coordinator's, colluding with
    # every other party, the target's own σ²/3 — exactly what each silo charged.
    variances = {observer: entry.analyses["party"].parameters["variance"] for entry in flower.ledger_.entries
                 if entry.kind == "release" and entry.analyses.get("party") is not None
                 and entry.analyses["party"].kind == "skellam" for observer in entry.observers}
    assert variances == {"public": pytest.approx(2 * SIGMA ** 2 / 3), "coordinator": pytest.approx(SIGMA ** 2 / 3)}
    recorded = {observer: flower.ledger_.account(DELTA, unit="example", observer=observer).epsilon
                for observer in ("coordinator", "public")}
    for path in (budgets[0], budgets[2]):
        silo = privfed.SiloBudget.open(path)
        (charge,) = silo.charges
        assert charge.mechanism["kind"] == "skellam"
        assert charge.mechanism["parameters"]["variance"] == pytest.approx(SIGMA ** 2 / 3)
        for observer, epsilon in recorded.items():
            assert math.isfinite(epsilon) and silo.spent(observer=observer) >= epsilon
