"""Each silo's own budget over Flower: the ClientApp charges it (node config ``budget-path``) before reading its
data, or replies with a refusal carrying nothing data-derived; the server goes on with the others and says so."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from privfed.pipelines.fedkt.estimator import FedKT
from privfed.pipelines.privatekt.estimator import PrivateKT
from privfed.pipelines.protocol.silo_gate import BudgetRefusal, RefusedRunError
from sklearn.tree import DecisionTreeClassifier
from test_federation import LocalGrid

import privfed

#: The study's public label set (the server sends it as run config ``public-classes``): a silo's budget refuses a
#: study without one (the schema step would send its size and labels in the clear).
CLASSES = np.arange(10)

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("flwr") is None,
                       reason="flwr is not installed: pip install 'privfed[federation]'"),
    pytest.mark.filterwarnings("ignore:.*(NEAR CHANCE|little to learn):UserWarning"),
]


def budgeted_grid(paths, budgets, **options):
    """LocalGrid whose party ``i`` names ``budgets[i]`` (a path or None) in its node config; replies recorded."""
    replies = []
    grid = LocalGrid(paths, tamper=lambda message, reply: replies.append((message, reply)) or reply, **options)
    for node, context in grid.contexts.items():
        path = budgets[context.node_config["party-index"]]
        if path is not None:
            context.node_config.update({"budget-path": str(path), "study": "icu-2027"})
    return grid, replies


def silo(path, epsilon):
    privfed.SiloBudget(path, epsilon=epsilon, delta=1e-5)  # what `privfed budget init` writes on the silo
    return path


def fedkt_l2():
    return FedKT(DecisionTreeClassifier(max_depth=4), n_partitions=1, n_teachers=2, privacy="L2", gamma=0.5,
                 query_fraction=0.3, local_query_fraction=0.1, classes=CLASSES, random_state=5)


def test_an_over_budget_silo_refuses_and_the_others_finish(federation, task_identity, tmp_path, monkeypatch) -> None:
    from privfed.federation import client_app
    from privfed.federation.server_app import ServerJob, run_server
    from privfed.federation.summary import run_summary, summary_lines

    _, paths, public, _ = federation
    budgets = [silo(tmp_path / "a.jsonl", 1000.0), silo(tmp_path / "b.jsonl", 0.5), None]
    read = []
    load = client_app.load_party_data
    monkeypatch.setattr(client_app, "load_party_data", lambda path, **kw: read.append(str(path)) or load(path, **kw))
    grid, replies = budgeted_grid(paths, budgets)
    job = ServerJob(fedkt_l2(), public, num_supernodes=3, timeout=5, output_bundle=str(tmp_path / "bundle"))
    flower = run_server(grid, job)
    assert [(r.party, r.round) for r in flower.refused_] == [(1, 1)]
    # Party 1 never read its data for the train step (only for the schema), and its reply is the refusal alone.
    assert read.count(str(paths[1])) == 1 and read.count(str(paths[0])) == 2
    (refusal,) = [reply for message, reply in replies
                  if message.metadata.message_type == "train" and message.metadata.dst_node_id == 99]
    (array_records, config_records) = (dict(refusal.content.array_records), dict(refusal.content.config_records))
    assert all(len(record) == 0 for record in array_records.values())  # zero array bytes
    assert BudgetRefusal.KIND in json.dumps({k: dict(v) for k, v in config_records.items()}, default=str)
    # The ledgers: party 0 charged its L2 release once, party 1 nothing.
    assert [c.study for c in privfed.SiloBudget.open(budgets[0]).charges] == ["icu-2027"]
    assert privfed.SiloBudget.open(budgets[1]).charges == ()
    assert flower.n_local_queries_answered_ and len(flower.n_local_queries_answered_) == 2
    summary = run_summary(flower, parties=["party 0", "party 1", "party 2"], bundle=None, metrics=None)
    assert summary["parties"] == ["party 0", "party 2"]
    (line,) = [line for line in summary_lines(summary) if line.startswith("refused")]
    assert line.startswith("refused by its silo's budget: party 1 at round 1: fedkt:")
    card = json.loads((tmp_path / "bundle" / "card.json").read_text())
    assert [(r["party"], r["round"]) for r in card["refused_silos"]] == [(1, 1)]


def test_a_run_every_silo_refuses_stops_naming_them(federation, task_identity, tmp_path) -> None:
    from privfed.federation.server_app import ServerJob, run_server

    _, paths, public, _ = federation
    grid, _ = budgeted_grid(paths, [silo(tmp_path / f"{i}.jsonl", 0.5) for i in range(3)])
    with pytest.raises(RefusedRunError, match=r"FedKT cannot run.*party 0 \(round 1\).*party 2 \(round 1\)"):
        run_server(grid, ServerJob(fedkt_l2(), public, num_supernodes=3, timeout=5))


def test_privatekt_silo_stops_at_the_round_that_would_exceed_over_flower(federation, task_identity,
                                                                          tmp_path) -> None:
    from privfed.federation.server_app import ServerJob, run_server

    _, paths, public, _ = federation
    budgets = [None, silo(tmp_path / "b.jsonl", 1.8), None]
    grid, replies = budgeted_grid(paths, budgets)
    model = PrivateKT(DecisionTreeClassifier(max_depth=6), epsilon_per_round=2.0, queries_per_round=20,
                      buffer_rounds=4, self_training_size=40, rounds=4, client_fraction=1.0, classes=CLASSES,
                      random_state=0)
    flower = run_server(grid, ServerJob(model, public, num_supernodes=3, timeout=5))
    # As in process (tests/test_silo_gate.py): ε 1.20, 1.66, 2.01 after 1, 2, 3 rounds; a budget of 1.8 stops at 3.
    assert [(r.party, r.round) for r in flower.refused_] == [(1, 3)]
    assert flower.participation_.tolist() == [4, 2, 4]
    assert len(privfed.SiloBudget.open(budgets[1]).charges) == 2
    sent_to_party_1 = [m for m, _ in replies if m.metadata.message_type == "train" and m.metadata.dst_node_id == 99]
    assert len(sent_to_party_1) == 3  # rounds 1-2 and the refused round 3; nothing after it stopped


def test_selective_fd_silo_stops_at_the_round_that_would_exceed_over_flower(federation, task_identity,
                                                                            tmp_path, monkeypatch) -> None:
    from privfed.federation import client_app
    from privfed.federation.server_app import ServerJob, run_server

    _, paths, public, _ = federation
    read = []
    load = client_app.load_party_data
    monkeypatch.setattr(client_app, "load_party_data", lambda path, **kw: read.append(str(path)) or load(path, **kw))
    budgets = [None, silo(tmp_path / "b.jsonl", 0.5), silo(tmp_path / "c.jsonl", 1000.0)]
    grid, replies = budgeted_grid(paths, budgets)
    model = privfed.SelectiveFD(DecisionTreeClassifier(max_depth=4), rounds=3, proxy_batch=40, labels="hard",
                                privacy="rr", epsilon_per_round=1.0, tau_client=None, classes=CLASSES,
                                random_state=0)
    flower = run_server(grid, ServerJob(model, public, num_supernodes=3, timeout=5))
    # As in process (tests/test_silo_gate.py): ε 0.40, 0.57 after 1, 2 rounds; a budget of 0.5 stops at round 2.
    assert [(r.party, r.round) for r in flower.refused_] == [(1, 2)]
    assert flower.participation_.tolist() == [3, 1, 3]
    assert [c.pipeline for c in privfed.SiloBudget.open(budgets[1]).charges] == ["selective-fd"]
    assert [c.mechanism["kind"] for c in privfed.SiloBudget.open(budgets[2]).charges] == ["randomized_response"] * 3
    to_party_1 = [(m, r) for m, r in replies
                  if m.metadata.message_type == "train.selective_fd" and m.metadata.dst_node_id == 99]
    assert len(to_party_1) == 4  # setup, round 1 share and distillation, the refused round 2; nothing after it
    assert read.count(str(paths[1])) == 4  # the schema, setup, round 1's two steps: not the refused round
    refusal = to_party_1[-1][1]
    assert all(len(record) == 0 for record in dict(refusal.content.array_records).values())
    assert BudgetRefusal.KIND in json.dumps({k: dict(v) for k, v in dict(refusal.content.config_records).items()},
                                            default=str)


def test_a_budgeted_silo_refuses_a_study_without_public_classes_at_the_schema_step(
        federation, task_identity, tmp_path, monkeypatch) -> None:
    # The attack: without run config `classes` the server's schema query carries no `public-classes`, and each
    # party's schema reply would hand the coordinator its size and label set in the clear (ε = ∞). The guard: the
    # budgeted SuperNode refuses before reading its data and its reply carries no schema; the server stops.
    from privfed.federation import client_app
    from privfed.federation.server_app import FederationError, ServerJob, run_server

    _, paths, public, _ = federation
    read = []
    load = client_app.load_party_data
    monkeypatch.setattr(client_app, "load_party_data", lambda path, **kw: read.append(str(path)) or load(path, **kw))
    budgets = [None, silo(tmp_path / "b.jsonl", 1000.0), None]
    grid, replies = budgeted_grid(paths, budgets)
    with pytest.raises(FederationError, match="failed at the schema step: this silo's budget refuses the study: "
                                              "without the study's public label set"):
        run_server(grid, ServerJob(fedkt_l2().set_params(classes=None), public, num_supernodes=3, timeout=5))
    (query, reply), = [(m, r) for m, r in replies
                       if m.metadata.message_type == "query.schema" and m.metadata.dst_node_id == 99]
    assert "public-classes" not in json.dumps({k: dict(v) for k, v in dict(query.content.config_records).items()},
                                              default=str)
    assert reply.has_error() and not reply.has_content()  # no schema record: neither its size nor its labels
    assert str(paths[1]) not in read  # refused before its data file was read
    assert privfed.SiloBudget.open(budgets[1]).charges == ()
