"""A silo's budget in deployment mode on 127.0.0.1: SuperLink, three SuperNode processes and ``flwr run``.

Hospital 1's SuperNode names a budget too small for the study (``budget-path`` in its node config): it refuses
before reading its data for the train step; the two others finish, the run's summary names the refusal, and the
bundle's card records it. What crosses the wire from every SuperNode is recorded in its own process: the app is
privfed's ClientApp with a tap that appends each reply's records and array bytes to the file its node config
names (``wire-log``), and the test checks that hospital 1 sent zero data-derived bytes.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess

import numpy as np
import pytest
from conftest import digits_federation
from flower_sites import APP, localhost_federation
from privfed.pipelines.data.party_schema import WITHHELD_SIZE, PartySchema
from privfed.pipelines.protocol.silo_gate import BudgetRefusal

import privfed

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("flwr") is None or shutil.which("flower-superlink") is None,
        reason="flwr is not installed: pip install 'privfed[federation]'",
    ),
]

#: privfed's ClientApp, every reply it sends recorded where the node config's ``wire-log`` says (test only).
WIRE_TAP = '''
import json

from flwr.clientapp import ClientApp

from privfed.federation.client_app import make_client_app
from privfed.federation.task import from_recorddict


class WireTap(ClientApp):
    def __call__(self, message, context):
        reply = super().__call__(message, context)
        log = context.node_config.get("wire-log")
        if log and not reply.has_error():
            content = reply.content
            wire = sum(len(array.data) for record in content.array_records.values() for array in record.values())
            records, _ = from_recorddict(content, sender="tap")
            with open(str(log), "a") as out:
                out.write(json.dumps({
                    "type": message.metadata.message_type, "array_bytes_on_the_wire": wire,
                    "records": [{"kind": r.kind, "arrays": {k: v.tolist() for k, v in r.arrays.items()},
                                 "scalars": dict(r.scalars)} for r in records]}, default=str) + "\\n")
        return reply


app = make_client_app()
app.__class__ = WireTap
'''


def tapped_app(folder):
    """A copy of privfed's Flower app whose ClientApp is privfed's with the wire tap."""
    app = folder / "tapped-app"
    shutil.copytree(APP, app)
    (app / "wire_tap.py").write_text(WIRE_TAP)
    pyproject = app / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('clientapp = "privfed.federation.client_app:app"',
                                                       'clientapp = "wire_tap:app"'))
    return app


def test_an_over_budget_supernode_sends_zero_data_derived_bytes_and_the_others_finish(tmp_path) -> None:
    parties, public, _ = digits_federation(3)
    budgets = [tmp_path / "budget-0.jsonl", tmp_path / "budget-1.jsonl"]
    privfed.SiloBudget(budgets[0], epsilon=1000.0, delta=1e-5)
    privfed.SiloBudget(budgets[1], epsilon=0.5, delta=1e-5)
    logs = [tmp_path / f"wire-{index}.jsonl" for index in range(3)]
    node_configs = {index: f'wire-log="{logs[index]}"' for index in range(3)}
    for index, path in enumerate(budgets):
        node_configs[index] += f' budget-path="{path}" study="icu-2027"'
    classes = sorted({int(label) for _, y in parties for label in y})
    app = tapped_app(tmp_path)
    with localhost_federation(tmp_path, parties, public, node_configs=node_configs, OMP_NUM_THREADS="1") as federation:
        command = [str(app) if part == str(APP) else part for part in federation.run_command(
            f'output-bundle="{tmp_path / "bundle"}" timeout=120 privacy="L2" n-partitions=1 n-teachers=2 gamma=0.5 '
            f'query-fraction=0.3 local-query-fraction=0.1 random-state=7 classes="{json.dumps(classes)}"')]
        done = subprocess.run(command, cwd=tmp_path, env=federation.env, capture_output=True, text=True, timeout=300)
        output = done.stdout + done.stderr
        assert (tmp_path / "bundle").is_dir(), output[-3000:] + federation.node_logs()
    (line,) = [line for line in output.splitlines() if line.startswith("privfed-summary: ")]
    summary = json.loads(line.removeprefix("privfed-summary: "))
    assert [r["party"].split(" (")[0] for r in summary["refused"]] == ["party 1"], summary
    assert len(summary["parties"]) == 2
    assert [c.study for c in privfed.SiloBudget.open(budgets[0]).charges] == ["icu-2027"]
    assert privfed.SiloBudget.open(budgets[1]).charges == ()
    card = json.loads((tmp_path / "bundle" / "card.json").read_text())
    assert [r["party"] for r in card["refused_silos"]] == [1]

    # On the wire, in hospital 1's own process: its schema reply is what the public set and the public classes
    # alone give (shape, classes, size withheld), and its train reply is the refusal alone, with no array.
    sent = [json.loads(line) for line in logs[1].read_text().splitlines()]
    assert [entry["type"] for entry in sent] == ["query.schema", "train"], sent
    (schema,) = sent[0]["records"]
    public_only = PartySchema(np.asarray(public.shape[1:], dtype=np.int64), np.asarray(classes), WITHHELD_SIZE)
    assert schema["arrays"] == {k: v.tolist() for k, v in public_only.to_record().arrays.items()}
    assert schema["scalars"] == dict(public_only.to_record().scalars)
    (refusal,) = sent[1]["records"]
    assert refusal["kind"] == BudgetRefusal.KIND and refusal["arrays"] == {} and set(refusal["scalars"]) == {"reason"}
    assert sent[1]["array_bytes_on_the_wire"] == 0
    # The tap counts: hospital 0's train reply (its noisy labels) carries array bytes.
    train_0 = [json.loads(line) for line in logs[0].read_text().splitlines() if '"type": "train"' in line]
    assert train_0 and all(entry["array_bytes_on_the_wire"] > 0 for entry in train_0)
