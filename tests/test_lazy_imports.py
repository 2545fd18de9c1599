"""What a fresh process imports: ``import privfed``, ``import privfed.accounting``, the command line's help and a
silo budget's reading load no heavy library, and every public name still resolves (``from privfed import X`` for
each X in ``privfed.__all__``, all listed by ``dir``; the same for ``privfed.accounting``).

Each check runs in a fresh interpreter, so that nothing another test imported hides an eager import.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Libraries that neither ``import privfed`` nor ``privfed … --help`` may load: each costs a second or more.
HEAVY = ("torch", "skops", "ray", "flwr", "sklearn", "xgboost", "opacus", "scipy", "dp_accounting", "pandas",
         "model_signing")


def _fresh(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; the JSON it prints last."""
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def _loaded(prelude: str) -> list[str]:
    return _fresh(f"{prelude}\nimport json, sys\n"
                  f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))")


def test_import_privfed_loads_no_heavy_library():
    assert _loaded("import privfed") == []


def test_privfed_audit_help_loads_no_heavy_library():
    prelude = ("import contextlib, io\nfrom privfed.cli import main\n"
               "with contextlib.redirect_stdout(io.StringIO()):\n"
               "    assert main(['audit', '--help']) == 0\n"
               "    assert main(['--help']) == 0")
    assert _loaded(prelude) == []


def test_every_public_name_imports_from_privfed_and_dir_lists_it():
    seen = _fresh("import json, privfed\n"
                  "names = list(privfed.__all__)\n"
                  "namespace = {}\n"
                  "exec('from privfed import ' + ', '.join(names), namespace)\n"
                  "unresolved = [n for n in names if namespace.get(n) is None]\n"
                  "print(json.dumps({'names': len(names), 'unresolved': unresolved,\n"
                  "                  'unlisted': sorted(set(names) - set(dir(privfed)))}))")
    assert seen["names"] > 80 and seen["unresolved"] == [] and seen["unlisted"] == []


def test_the_flower_apps_load_neither_torch_nor_skops_nor_ray():
    """A ClientApp or ServerApp process that trains trees loads what trees need; torch, skops (the bundle's
    serialiser, loaded when the model is saved), Ray (the simulation engine) and Opacus are not among it."""
    loaded = _fresh("import json, sys\nimport privfed.federation.client_app, privfed.federation.server_app\n"
                    "print(json.dumps(sorted(m for m in ('torch', 'skops', 'ray', 'opacus', 'xgboost') "
                    "if m in sys.modules)))")
    assert loaded == []


def test_an_audit_that_does_not_open_the_model_runs_every_other_check_without_its_library(tmp_path):
    """``privfed audit --no-model-load``: the same table but for *safe loading* (a warning that says the model was
    not opened), and neither scikit-learn nor skops is imported; the membership check, which needs the model, is
    refused without it."""
    import numpy as np
    import pytest

    sklearn_ensemble = pytest.importorskip("sklearn.ensemble")
    from privfed import LaplaceNoisyMax, Ledger, audit, save_bundle
    from privfed.audit.report import AuditInputError

    votes = np.random.default_rng(1).integers(0, 10, size=(20, 2))
    ledger = Ledger(delta=1e-5, description="lazy audit")
    ledger.record({"party": LaplaceNoisyMax(votes, 0.05, 1, unit="party")})
    features = np.random.default_rng(0).normal(size=(40, 3))
    forest = sklearn_ensemble.RandomForestClassifier(n_estimators=2, max_depth=2, random_state=0).fit(
        features, features[:, 0] > 0)
    bundle = save_bundle(forest, tmp_path / "bundle", ledger)
    opened, unopened = audit(bundle), audit(bundle, load_model=False)
    assert [c.name for c in opened.checks] == [c.name for c in unopened.checks]
    differing = {c.name for c, d in zip(opened.checks, unopened.checks) if (c.status, c.detail) != (d.status, d.detail)}
    assert differing == {"safe loading"}
    assert opened.check("safe loading").status == "pass" and unopened.check("safe loading").status == "warn"
    assert "not opened" in unopened.check("safe loading").detail and unopened.exit_code == opened.exit_code
    samples = (features, features[:, 0] > 0)
    with pytest.raises(AuditInputError, match="need load_model=True"):
        audit(bundle, load_model=False, members=samples, non_members=samples)
    prelude = ("import contextlib, io\nfrom privfed.cli import main\n"
               "with contextlib.redirect_stdout(io.StringIO()):\n"
               f"    assert main(['audit', '--no-model-load', {str(bundle)!r}]) == 0")
    assert _loaded(prelude) == []  # ε recomputed from closed forms: neither dp-accounting nor SciPy either
    opened = ("import contextlib, io\nfrom privfed.cli import main\n"
              "with contextlib.redirect_stdout(io.StringIO()):\n"
              f"    assert main(['audit', {str(bundle)!r}]) == 0")
    # The model's own library and serialiser (skops' list of scikit-learn's estimators imports pandas), no more.
    assert _loaded(opened) == ["pandas", "scipy", "sklearn", "skops"]


def test_a_laplace_ledgers_epsilon_loads_no_dp_accounting_and_its_event_is_built_when_read():
    """A ledger of Laplace noisy max accounts with the closed forms and imports only that kind's module; its
    report's dp-accounting event (the trade-off curve's) is built the first time it is read, the same event as
    before."""
    seen = _fresh("import json, sys\nimport numpy as np\nfrom privfed import LaplaceNoisyMax, Ledger\n"
                  "ledger = Ledger(delta=1e-5, description='closed forms')\n"
                  "ledger.record({'party': LaplaceNoisyMax(np.array([[9, 1], [5, 5]]), 0.05, 1, unit='party')})\n"
                  "rebuilt = Ledger.from_dict(ledger.to_dict())\n"
                  "report = rebuilt.account(unit='party')\n"
                  "before = sorted(m for m in ('dp_accounting', 'scipy') if m in sys.modules)\n"
                  "kinds = sorted(n.rsplit('.', 1)[1] for n in sys.modules if n.startswith('privfed.accounting.') and\n"
                  "               n.rsplit('.', 1)[1] in ('dpsgd', 'skellam', 'gaussian_noisy_max', 'shuffling'))\n"
                  "event = report.dp_event\n"
                  "print(json.dumps({'before': before, 'kinds': kinds, 'epsilon': report.epsilon,\n"
                  "                  'event': repr(event), 'after': 'dp_accounting' in sys.modules}))")
    assert seen["before"] == [] and seen["kinds"] == [] and seen["after"]
    # two queries, each two Laplace(1/(kγ)) releases of the noisy histogram (interop.data_independent_event)
    assert seen["event"] == "SelfComposedDpEvent(event=LaplaceDpEvent(noise_multiplier=20.0), count=4)"


def test_import_privfed_accounting_loads_neither_dp_accounting_nor_scipy():
    """``import privfed.accounting`` loads each public name's module on first use: the package alone pays for no
    ε curve (dp-accounting's init loads scipy.signal and scipy.stats, over a CPU second)."""
    assert _loaded("import privfed.accounting") == []


def test_every_accounting_name_resolves_and_account_stays_the_function():
    """Every name in ``privfed.accounting.__all__`` resolves and ``dir`` lists it; ``account`` is the function even
    after its submodule of the same name was imported by another (the ledger imports it)."""
    seen = _fresh("import json, types\nimport privfed.accounting as accounting\n"
                  "import privfed.accounting.ledger\n"
                  "names = list(accounting.__all__)\n"
                  "unresolved = [n for n in names if getattr(accounting, n, None) is None]\n"
                  "print(json.dumps({'names': len(names), 'unresolved': unresolved,\n"
                  "                  'unlisted': sorted(set(names) - set(dir(accounting))),\n"
                  "                  'account_is_function': callable(accounting.account)\n"
                  "                      and not isinstance(accounting.account, types.ModuleType)}))")
    assert seen == {"names": 49, "unresolved": [], "unlisted": [], "account_is_function": True}


def test_a_record_of_every_kind_rebuilds_whichever_module_the_process_imported_first():
    """Kinds register when their module is imported; with the package's names loaded on first use, a process that
    imported only the silo budget still rebuilds every kind (the registry imports each kind's module)."""
    seen = _fresh("import json\nfrom privfed.accounting.silo_budget import SiloBudget\n"
                  "from privfed.accounting.registry import mechanism_class, mechanism_kinds\n"
                  "kinds = mechanism_kinds()\n"
                  "rr = mechanism_class('randomized_response').__name__\n"
                  "import privfed.accounting as accounting\n"
                  "[getattr(accounting, name) for name in accounting.__all__]\n"
                  "print(json.dumps({'first': list(kinds), 'all': list(mechanism_kinds()), 'rr': rr}))")
    assert seen["first"] == seen["all"] and len(seen["all"]) == 13 and seen["rr"] == "RandomizedResponse"


def test_a_silo_budgets_reading_loads_neither_dp_accounting_nor_scipy(tmp_path):
    """What a data officer's fresh process does with a silo's budget without a new release: open it, read what was
    spent from the last line (``spent``, ``privfed budget show``), check the hash chain (``privfed budget verify``).
    No ε curve is computed, so neither dp-accounting nor SciPy is imported; charging a release computes its RDP
    curve and still does."""
    from privfed.accounting import RandomizedResponse
    from privfed.accounting.silo_budget import SiloBudget

    path = tmp_path / "silo.jsonl"
    budget = SiloBudget(path, epsilon=10.0, delta=1e-5)
    budget.charge(RandomizedResponse(10, epsilon=0.5, reports=1, unit="example"), study="s", pipeline="p")
    prelude = ("import contextlib, io\nfrom privfed.accounting.silo_budget import SiloBudget\n"
               "from privfed.cli import main\n"
               f"assert SiloBudget.open({str(path)!r}).spent() == 0.5\n"
               "with contextlib.redirect_stdout(io.StringIO()):\n"
               f"    assert main(['budget', 'show', {str(path)!r}]) == 0\n"
               f"    assert main(['budget', 'verify', {str(path)!r}]) == 0")
    assert _loaded(prelude) == []


def test_the_client_app_module_loads_only_flower_until_a_message_needs_more():
    """Flower starts a fresh ``flwr-clientapp`` process per message, each importing the ClientApp module: it loads
    a pipeline's party side only when a message of that pipeline arrives."""
    assert _loaded("import privfed.federation.client_app as module\nmodule.app") == ["flwr"]


def test_a_client_apps_schema_step_loads_neither_scikit_learn_nor_dp_accounting(tmp_path):
    """The schema step, in the process Flower starts for it: numpy, the message layer and Flower, nothing heavier."""
    import numpy as np

    np.savez(tmp_path / "site.npz", X=np.zeros((4, 3)), y=np.array([0, 1, 0, 1]))
    prelude = ("from flwr.app import Context, Message, RecordDict\n"
               "from flwr.supercore.task_identity import TaskIdentity\n"
               "from privfed.federation.client_app import app\n"
               "from privfed.federation.task import from_recorddict, to_recorddict\n"
               "TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1\n"
               f"context = Context(1, 7, {{'data-path': {str(tmp_path / 'site.npz')!r}, 'party-index': 0}}, "
               "RecordDict(), {})\n"
               "reply = app(Message(to_recorddict([], {}), 7, 'query.schema'), context)\n"
               "assert [record.kind for record in from_recorddict(reply.content, sender='test')[0]] == "
               "['party-schema']")
    assert _loaded(prelude) == ["flwr"]


def test_the_client_apps_lazy_task_table_names_the_message_classes_kinds():
    """The ClientApp dispatches on a message's kind before importing its pipeline: the kinds it lists are the
    classes' own."""
    from privfed.pipelines.selective_fd.steps import SelectiveFDRound, SelectiveFDSetup

    from privfed.federation import client_app

    assert {kind: entry()[0].KIND for kind, entry in client_app._TASKS.items()} == {
        kind: kind for kind in client_app._TASKS}
    assert (client_app._SELECTIVE_FD_SETUP, client_app._SELECTIVE_FD_ROUND) == (SelectiveFDSetup.KIND,
                                                                                 SelectiveFDRound.KIND)
