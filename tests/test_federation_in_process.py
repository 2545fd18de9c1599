"""``simulate(..., backend="in-process")``: the ServerApp and every ClientApp in one process, no Ray.

Equal to ``fit`` (FedKT L1 and L2 with ``noise_seed``; FedKT-L1 over SecAgg+; FedMD, whose parties keep state between
messages), without starting Ray; each party's noise still drawn by its own ClientApp from its own secret source; a
failing ClientApp named; the documented example (docs/federation.md, "Run mode 1") run as written.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
from pathlib import Path

import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier

from tests.test_federation import assert_same_fit, fedkt

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("flwr") is None, reason="flwr is not installed: pip install 'privfed[federation]'"
)

DOC = Path(__file__).resolve().parents[1] / "docs" / "federation.md"


@pytest.fixture
def no_ray(monkeypatch):
    """Fail the test if anything asks Flower's Ray engine to run."""
    import flwr.simulation

    def refuse(*args, **kwargs):
        raise AssertionError("backend='in-process' must not start Flower's Ray simulation engine")

    monkeypatch.setattr(flwr.simulation, "run_simulation", refuse)


@pytest.mark.parametrize("privacy", ["L1", "L2"])
def test_in_process_simulation_equals_fit(federation, no_ray, privacy) -> None:
    from privfed.federation import simulate

    parties, paths, public, (X_test, _) = federation
    local = fedkt(privacy).fit(parties, public)
    flower = simulate(fedkt(privacy, random_state=None), paths, public, random_state=5, backend="in-process")
    assert_same_fit(flower, local, X_test)
    assert not hasattr(flower, "students_")  # the students stay with the parties' ClientApps


def test_in_process_simulation_over_secaggplus_equals_fit(federation, no_ray) -> None:
    """SecAgg+'s client mod edits the message it receives: each party gets its own copy, as over a network."""
    from privfed.federation import simulate

    parties, paths, public, (X_test, _) = federation
    secure = dict(aggregator="skellam", secure_aggregation=True, sigma=4.0, gamma=None)
    local = fedkt("L1", **secure).fit(parties, public)
    flower = simulate(fedkt("L1", **secure), parties, public, backend="in-process")
    np.testing.assert_array_equal(flower.predict(X_test), local.predict(X_test))
    for unit in local.ledger_.units:
        assert flower.ledger_.account(delta=1e-5, unit=unit).epsilon == pytest.approx(
            local.ledger_.account(delta=1e-5, unit=unit).epsilon, abs=1e-12)


def test_in_process_parties_keep_their_state_between_messages(federation, no_ray) -> None:
    """FedMD: every party keeps its model's distilled positions in its own Context across the rounds."""
    from privfed.pipelines.selective_fd.baselines import FedMD

    from privfed.federation import simulate

    parties, paths, public, (X_test, _) = federation

    def make():
        return FedMD(DecisionTreeClassifier(max_depth=4), rounds=2, proxy_batch=30, local_steps=1, random_state=3,
                     noise_seed=4)

    local, flower = make().fit(parties, public), simulate(make(), paths, public, backend="in-process")
    np.testing.assert_array_equal(flower.predict_proba(X_test), local.predict_proba(X_test))
    assert flower.history_ == local.history_


def _train_replies(monkeypatch, model, paths, public) -> list[bytes]:
    """Every array each party sent in its train reply, in party order, from an in-process run of ``model``."""
    from privfed.federation import in_process, simulate

    sent, deliver = {}, in_process.InProcessGrid._deliver

    def recording(grid, message):
        reply = deliver(grid, message)
        if message.metadata.message_type == "train":
            sent[message.metadata.dst_node_id] = b"".join(array.data for record in reply.content.array_records.values()
                                                          for array in record.values())
        return reply

    monkeypatch.setattr(in_process.InProcessGrid, "_deliver", recording)
    simulate(model, paths, public, backend="in-process")
    return [sent[node] for node in sorted(sent)]


def test_each_party_still_draws_its_noise_from_its_own_secret_source(federation, no_ray, monkeypatch) -> None:
    """The attack: the coordinator regenerates each L2 party's noisy labels from everything it sent (the tasks,
    their seeds included) by running the parties again on them. With one random_state every task is the same, yet
    no party's reply is: the noise comes from nothing the coordinator holds. The control, noise_seed=, reproduces
    every reply, and its ε is ∞."""
    _, paths, public, _ = federation
    secret = [_train_replies(monkeypatch, fedkt("L2", noise_seed=None), paths, public) for _ in range(2)]
    assert all(first != second for first, second in zip(*secret))
    seeded = [_train_replies(monkeypatch, fedkt("L2"), paths, public) for _ in range(2)]
    assert seeded[0] == seeded[1]


def test_a_failing_client_app_is_named_with_its_error(federation, no_ray, tmp_path) -> None:
    from privfed.federation import simulate
    from privfed.federation.server_app import FederationError

    _, paths, public, _ = federation
    np.savez(tmp_path / "broken.npz", X=np.zeros((5, 64)))  # no labels
    failed = r"node 102 failed at the schema step: ValueError: data-path .*broken.npz' must hold arrays 'X' and 'y'"
    with pytest.raises(FederationError, match=failed):
        simulate(fedkt("L1"), [*paths[:2], str(tmp_path / "broken.npz")], public, backend="in-process")


def test_simulate_refuses_an_unknown_backend(federation) -> None:
    from privfed.federation import simulate

    parties, _, public, _ = federation
    with pytest.raises(ValueError, match=r"backend must be one of \('ray', 'in-process'\), got 'threads'"):
        simulate(fedkt("L1"), parties, public, backend="threads")


def test_the_documented_in_process_example_runs_as_written(no_ray) -> None:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Run mode 1: simulation"):text.index("## Run mode 2")]
    (script,) = [block for block in re.findall(r"^```python\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)
                 if 'backend="in-process"' in block]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(script, str(DOC), "exec"), {})
    match = re.fullmatch(r"test accuracy (\d\.\d\d), ε = (\d+\.\d) \(δ = 1e-05\)\n", printed.getvalue())
    assert match, printed.getvalue()
    assert float(match.group(1)) > 0.5 and np.isfinite(float(match.group(2)))


def test_the_in_process_grid_is_a_flower_grid() -> None:
    from flwr.serverapp import Grid

    from privfed.federation.in_process import InProcessGrid

    assert issubclass(InProcessGrid, Grid) and not InProcessGrid.__abstractmethods__
