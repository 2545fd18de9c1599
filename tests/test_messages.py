"""The wire format of the party and server steps: round trips, and every malformed message refused by name."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import digits_federation
from privfed.pipelines.data.party_schema import PartySchema, describe_party, federation_classes
from privfed.pipelines.fedkt.estimator import FedKT
from privfed.pipelines.fedkt.server import receive_fedkt_replies
from privfed.pipelines.fedkt.steps import WITHHELD, FedKTTask, FedKTVotes
from privfed.pipelines.protocol.messages import MessageError, Record
from sklearn.tree import DecisionTreeClassifier


@pytest.fixture(scope="module")
def digits_federation_3():
    return digits_federation(3)


def task(party_noise: str = "") -> FedKTTask:
    return FedKTTask(
        queries=np.zeros((6, 4)), classes=np.arange(3), n_local_queries=6, n_final_queries=5, n_partitions=2,
        n_teachers=3, seed=1, party_noise=party_noise, noise_scale=0.5 if party_noise else 0.0,
        target_epsilon=float("nan"), delta=1e-5,
    )


def votes(predictions: np.ndarray | None = None, **changes) -> FedKTVotes:
    fields = dict(
        predictions=np.zeros((2, 5), dtype=np.int64) if predictions is None else predictions,
        n_local_answered=6, n_teachers=3, affected_partitions_gap_1=1, affected_partitions_gap_2=2,
    )
    return FedKTVotes(**{**fields, **changes})


def test_messages_round_trip_through_the_wire_form() -> None:
    sent = task("laplace")
    received = FedKTTask.from_record(sent.to_record(), sender="the server", shapes={"queries": (None, 4)})
    np.testing.assert_array_equal(received.queries, sent.queries)
    assert received.noise.scale == 0.5 and received.seed == 1
    schema = describe_party(np.zeros((7, 4)), np.array([2, 0, 2]))
    assert PartySchema.from_record(schema.to_record(), sender="party 0").n_examples == 3
    # Payload: the (6, 4) float64 queries, the 3 int64 classes, 8 per numeric scalar, the string's UTF-8 length.
    assert sent.to_record().nbytes == 6 * 4 * 8 + 3 * 8 + 8 * 8 + len("laplace")


@pytest.mark.parametrize(
    "record, complaint",
    [
        (Record("fedkt-task", {}, {}), "sent messages ['fedkt-task'], expected ['fedkt-votes']"),
        (Record("fedkt-votes", {"predictions": np.zeros((2, 5), dtype=np.int64)}, {"n_teachers": 3}), "scalars"),
        (votes(np.zeros((2, 4), dtype=np.int64)).to_record(), "shape (2, 4), expected (2, 5)"),
        (votes(np.zeros((2, 5))).to_record(), "float64 array"),
        (votes(np.zeros((2, 5), dtype=object)).to_record(), "object array"),
        (votes(n_teachers="3").to_record(), "n_teachers = '3' is not a int"),
        (votes(np.zeros((2, 5), dtype=np.int64) + 7).to_record(), "predictions outside 0..2"),
        (votes(n_local_answered=9).to_record(), "n_local_answered=9"),
        (votes(affected_partitions_gap_2=5).to_record(), "gap-2 count 5"),
    ],
)
def test_malformed_votes_are_refused_naming_the_party(record: Record, complaint: str) -> None:
    with pytest.raises(MessageError, match="party 1") as raised:
        receive_fedkt_replies([task(), task()], [[votes().to_record()], [record]], ["party 0", "party 1"],
                              max_bytes=2**20)
    assert complaint in str(raised.value)


def test_oversized_and_missing_messages_are_refused() -> None:
    with pytest.raises(MessageError, match="party 0 sent an oversized 'fedkt-votes' message: 112 bytes, at most 100"):
        receive_fedkt_replies([task()], [[votes().to_record()]], ["party 0"], max_bytes=100)
    # Under L2 a party sends its votes alone, with its gap counts withheld: a private statistic is refused.
    withheld = votes(affected_partitions_gap_1=WITHHELD, affected_partitions_gap_2=WITHHELD)
    assert receive_fedkt_replies([task("laplace")], [[withheld.to_record()]], ["party 0"], max_bytes=2**20)
    with pytest.raises(MessageError, match="party 0 sent a malformed 'fedkt-votes' message: gap-1 count 1, "
                                           "expected -1 \\(withheld under L2\\)"):
        receive_fedkt_replies([task("laplace")], [[votes().to_record()]], ["party 0"], max_bytes=2**20)
    with pytest.raises(MessageError, match=r"party 0 sent messages \['fedkt-votes', 'fedkt-evidence'\]"):
        receive_fedkt_replies([task("laplace")], [[withheld.to_record(), Record("fedkt-evidence", {}, {})]],
                              ["party 0"], max_bytes=2**20)


def test_schema_mismatches_name_the_party() -> None:
    schemas = [describe_party(np.zeros((5, 4)), np.arange(5) % 2), describe_party(np.zeros((5, 3)), np.arange(5) % 2)]
    with pytest.raises(MessageError, match=r"site-b has features of shape \(3,\), the public set has \(4,\)"):
        federation_classes(schemas, (4,), ["site-a", "site-b"])
    schemas[1] = describe_party(np.zeros((5, 4)), np.array(["a", "b", "a", "b", "a"]))
    with pytest.raises(MessageError, match="site-b has text labels"):
        federation_classes(schemas, (4,), ["site-a", "site-b"])
    schemas[1] = describe_party(np.zeros((5, 4)), np.array([3, 1, 1, 3, 1]))
    np.testing.assert_array_equal(federation_classes(schemas, (4,), ["site-a", "site-b"]), [0, 1, 3])


def test_in_process_fit_reports_the_bytes_each_party_sent(digits_federation_3) -> None:
    parties, public, _ = digits_federation_3
    model = FedKT(DecisionTreeClassifier(max_depth=6), n_teachers=3, privacy="L2", gamma=0.5,
                  local_query_fraction=0.1, query_fraction=0.25, random_state=0).fit(parties, public)
    s, n_final, n_local = 2, 100, 40
    assert model.bandwidth_["fedkt-votes"] == [s * n_final * 8 + 4 * 8] * 3
    assert "fedkt-evidence" not in model.bandwidth_  # L2 sends nothing but the students' predictions
    assert max(model.n_local_queries_answered_) == n_local
    # Each party's schema: its feature shape (one int64), its labels, its size.
    assert model.bandwidth_["party-schema"] == [8 + len(np.unique(y)) * 8 + 8 for _, y in parties]
