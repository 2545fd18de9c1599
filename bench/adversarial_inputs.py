"""Issue 45's adversarial probes, each in a fresh process: outcome, time and peak memory per input (≤ 1 MB).

``python -m bench.adversarial_inputs`` writes the probes' inputs into a temporary folder, runs each probe as
``python -m bench.adversarial_inputs --probe NAME --folder DIR`` under a 4 GiB address-space limit and a
time limit, and writes ``bench/results/adversarial_inputs.json`` (rendered by ``python -m bench.tables
adversarial-inputs``). A probe imports only what its own path imports, as a user's fresh process would: the
record's time and memory are what issue 45's target (≤ 2 s and ≤ 200 MB for any input ≤ 1 MB in a fresh
process) is about.

Outcomes: ``clear`` (refused or flagged in one line, no traceback), ``accepted`` (the input went through
unremarked), ``hang`` (past the time limit), ``memory`` (a ``MemoryError`` or killed), ``traceback``
(anything else). Each record has the probe's input size, its wall time and CPU time (user + system) in the fresh
process (interpreter start and imports included; CPU time does not grow when other processes share the cores),
the time from the probe's call to its answer (the imports its path makes included), the process's peak resident
memory (``VmHWM`` in ``/proc/self/status``: ``ru_maxrss`` would include the resident memory of the parent it
was forked from, before ``exec``) and how much of it the probe added beyond the bare interpreter and this script.
"""

from __future__ import annotations

import argparse
import io
import json
import resource
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from bench import provenance

ROOT = provenance.ROOT
RESULTS = ROOT / "bench" / "results" / "adversarial_inputs.json"
#: Limits each probe runs under.
TIME_LIMIT_S = 120
ADDRESS_SPACE = 4 << 30
DELTA = 1e-5


def _gaussian(index: int) -> dict:
    return {"event": "gaussian", "noise_multiplier": 1.0 + index * 1e-3}


def _claims(mechanisms: list, **claim: object) -> dict:
    return {"type": "privfed.claims", "schema_version": 1, "mechanisms": mechanisms,
            "claim": {"epsilon": 1.0, "delta": DELTA, "unit": "example", **claim}}


def _dp_event(event: dict) -> dict:
    return {"kind": "dp_event", "unit": "example", "parameters": {"event": event}}


def write_inputs(folder: Path) -> None:
    """Every probe's input file in ``folder``."""
    import numpy as np
    from privfed.accounting import LaplaceNoisyMax, Ledger, NoiseSource
    from sklearn.ensemble import RandomForestClassifier

    from privfed import save_bundle
    from privfed.cli import main

    composed = {"event": "composed", "events": [_gaussian(i) for i in range(300)]}
    (folder / "claims-events.json").write_text(json.dumps(_claims([_dp_event(composed)])))
    (folder / "claims-mechanisms.json").write_text(json.dumps(_claims([_dp_event(_gaussian(i)) for i in range(100)])))
    (folder / "claims-moment.json").write_text(json.dumps(_claims([_dp_event(_gaussian(0))], max_moment=10**9)))
    mechanisms = {"mechanisms": [{"kind": "dp_event", "event": composed}]}
    (folder / "mechanisms-events.json").write_text(json.dumps(mechanisms))
    (folder / "deep.toml").write_text("mechanisms = " + "[" * 5000 + "]" * 5000 + "\n")
    (folder / "malformed.toml").write_text("[[mechanisms]]\nkind = 'dp_event'\nevent = {event = 'gaussian'\n")
    (folder / "opacus.json").write_text(json.dumps({"history": [[1.0 + i * 1e-3, 0.01, 10] for i in range(1000)]}))
    flower = {"schema_version": 1, "backend": "rdp",
              "config": {"sampling_method": "poisson", "neighboring_relation": "add-or-remove-one"},
              "compositions": [{"event": {"noise_multiplier": 1.0 + i * 1e-3, "sample_size": 10,
                                          "population_size": 100}, "count": 1} for i in range(1000)]}
    (folder / "flower.json").write_text(json.dumps(flower))
    (folder / "flower-duplicate.json").write_text('{"schema_version": 1, "schema_version": 1}')
    buffer = io.BytesIO()
    np.savez_compressed(buffer, bomb=np.zeros(300_000_000, dtype=np.uint8))
    (folder / "bomb.npz").write_bytes(buffer.getvalue())
    member = io.BytesIO()
    np.lib.format.write_array_header_1_0(member, {"descr": "<i8", "fortran_order": False, "shape": (10**9,)})
    member.write(b"\0" * 64)
    with zipfile.ZipFile(folder / "header.npz", "w") as archive:
        archive.writestr("votes.npy", member.getvalue())
    from privfed.pipelines.data.party_schema import PartySchema

    record = PartySchema(np.array([3]), np.arange(10**6, dtype=np.int32), 10**6).to_record()
    np.savez(folder / "schema.npz", **record.arrays)
    ledger = Ledger(delta=DELTA, description="probe")
    votes = np.random.default_rng(1).integers(0, 10, size=(20, 2))
    ledger.record({"party": LaplaceNoisyMax(votes, 0.05, 1, unit="party"),
                   "example": LaplaceNoisyMax(votes, 0.05, 2, unit="example")})
    ledger.record_noise_source(NoiseSource.secret())
    document = json.loads(ledger.to_json())
    document["entries"][0]["analyses"]["party"]["parameters"] = {"event": composed}
    (folder / "ledger-events.json").write_text(json.dumps(document))
    rng = np.random.default_rng(0)
    features = rng.normal(size=(40, 3)).astype(np.float32)
    forest = RandomForestClassifier(n_estimators=2, max_depth=2, random_state=0).fit(features, features[:, 0] > 0)
    save_bundle(forest, folder / "BUNDLE", ledger)
    save_bundle(forest, folder / "FORGED", Ledger(delta=DELTA, description="nothing recorded"))
    with open("/dev/null", "w") as quiet:
        saved, sys.stdout = sys.stdout, quiet
        try:
            main(["keygen", "--type", "ec", str(folder / "KEY.pem")])
            main(["sign", str(folder / "BUNDLE"), "--key", str(folder / "KEY.pem"), "--format", "model-signing"])
        finally:
            sys.stdout = saved
    (folder / "LINKED").mkdir()
    for path in (folder / "BUNDLE").iterdir():
        (folder / "LINKED" / path.name).write_bytes(path.read_bytes())
    (folder / "LINKED.sig").symlink_to(folder / "BUNDLE.sig")


# --- the probes: each raises a one-line error (or returns a flag) when privfed answers clearly --------------------
def _forged_bytes(folder: Path) -> str:
    from privfed.bundle.manifest import read_bundle_files
    from privfed.bundle.model_signature_verify import model_signing_verdict

    forged = read_bundle_files(folder / "FORGED")
    verdict = model_signing_verdict(folder / "BUNDLE", folder / "KEY.pem.pub", files=forged)
    return "flag" if verdict.status == "invalid" else "accepted"


def _linked_signature(folder: Path) -> str:
    from privfed import load_bundle

    load_bundle(folder / "LINKED", public_key=folder / "KEY.pem.pub")
    return "accepted"


def _ec_load(folder: Path) -> str:
    from privfed import load_bundle

    load_bundle(folder / "BUNDLE", public_key=folder / "KEY.pem.pub")
    return "flag"  # loading with an elliptic-curve key is the expected answer


def _claims_probe(name: str) -> Callable[[Path], str]:
    def probe(folder: Path) -> str:
        from privfed.audit.claims import load_claims

        load_claims(folder / name)
        return "accepted"

    return probe


def _ledger_events(folder: Path) -> str:
    from privfed.bundle.load import ledger_document

    ledger_document((folder / "ledger-events.json").read_bytes())
    return "accepted"


def _mechanisms(name: str) -> Callable[[Path], str]:
    def probe(folder: Path) -> str:
        from privfed.accounting.spec import load_mechanisms

        load_mechanisms(folder / name)
        return "accepted"

    return probe


def _opacus(folder: Path) -> str:
    from privfed.accounting.interop import opacus_mechanism

    opacus_mechanism(json.loads((folder / "opacus.json").read_text()))
    return "accepted"


def _flower(name: str) -> Callable[[Path], str]:
    def probe(folder: Path) -> str:
        from privfed.accounting.interop import flower_mechanism

        flower_mechanism((folder / name).read_text())
        return "accepted"

    return probe


def _npz(name: str) -> Callable[[Path], str]:
    def probe(folder: Path) -> str:
        from privfed.bundle.load import read_evidence

        read_evidence((folder / name).read_bytes())
        return "accepted"

    return probe


def _party_schema(folder: Path) -> str:
    import numpy as np
    from privfed.pipelines.data.party_schema import PartySchema, describe_party, federation_classes
    from privfed.pipelines.protocol.messages import MessageError, Record

    with np.load(folder / "schema.npz", allow_pickle=False) as arrays:  # the probe's own input, written above
        record = Record("party-schema", dict(arrays), {"n_examples": 10**6})
    honest = describe_party(np.zeros((4, 3)), np.array([0, 1, 0, 1]))
    try:
        federation_classes([honest, PartySchema.from_record(record, sender="site-b")], (3,), ["site-a", "site-b"])
    except MessageError as error:
        raise ValueError(str(error)) from None
    return "accepted"


def _secure_sum(folder: Path) -> str:
    import numpy as np

    from privfed.federation.secure_aggregation import vote_sum_from_average

    vote_sum_from_average(np.array([np.nan, 1e30]), 3, 100)
    return "accepted"


def _unsigned(folder: Path) -> str:
    from privfed import audit

    return "flag" if audit(folder / "BUNDLE").headline.startswith("UNSIGNED BUNDLE") else "accepted"


def _bundle_read_under_limit(folder: Path) -> str:
    from privfed.bundle.manifest import read_bundle_files

    size = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    soft = size + (1 << 30) if hard == resource.RLIM_INFINITY else min(size + (1 << 30), hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    read_bundle_files(folder / "BUNDLE")
    return "flag"  # read within 1 GiB above the interpreter: the expected answer


def _baseline(folder: Path) -> str:
    return "flag"  # the interpreter and this script alone: what every other probe's memory and time include


#: name → (category, input file(s) it reads, probe).
PROBES: dict[str, tuple[str, str, Callable[[Path], str]]] = {
    "bare interpreter (baseline)": ("baseline", "", _baseline),
    "forged bytes, genuine folder (model signing)": ("signature", "FORGED", _forged_bytes),
    "BUNDLE.sig through a symbolic link": ("signature", "LINKED.sig", _linked_signature),
    "load_bundle with an EC key": ("signature", "BUNDLE", _ec_load),
    "claims: 301 composed events": ("work", "claims-events.json", _claims_probe("claims-events.json")),
    "claims: 100 mechanisms": ("work", "claims-mechanisms.json", _claims_probe("claims-mechanisms.json")),
    "resealed ledger: 301 events": ("work", "ledger-events.json", _ledger_events),
    "mechanism file: 301 events": ("work", "mechanisms-events.json", _mechanisms("mechanisms-events.json")),
    "Opacus history: 1000 runs": ("work", "opacus.json", _opacus),
    "Flower state: 1000 distinct events": ("work", "flower.json", _flower("flower.json")),
    "claims: max_moment = 1e9": ("memory", "claims-moment.json", _claims_probe("claims-moment.json")),
    ".npz bomb (300 MB in 292 KB)": ("memory", "bomb.npz", _npz("bomb.npz")),
    ".npz header declaring 8 GB": ("memory", "header.npz", _npz("header.npz")),
    "bundle read under +1 GiB address space": ("memory", "BUNDLE", _bundle_read_under_limit),
    "Flower state: duplicate key": ("values", "flower-duplicate.json", _flower("flower-duplicate.json")),
    "TOML nested 5000 deep": ("values", "deep.toml", _mechanisms("deep.toml")),
    "malformed TOML": ("values", "malformed.toml", _mechanisms("malformed.toml")),
    "secure sum: NaN and 1e30": ("values", "", _secure_sum),
    "party schema: 10⁶ classes (4 MB)": ("memory", "schema.npz", _party_schema),
    "unsigned bundle's headline": ("unsigned", "BUNDLE", _unsigned),
}


def _peak_kb() -> int:
    """This process's peak resident memory in KiB since its ``exec`` (``VmHWM``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/status has no VmHWM line")


def run_probe(name: str, folder: Path) -> dict:
    """Run one probe in this process; its record (outcome, seconds from call to answer, peak memory)."""
    before = _peak_kb()
    start = time.perf_counter()
    try:
        answer = PROBES[name][2](folder)
        outcome, detail = ("clear", "flagged") if answer == "flag" else ("accepted", "accepted without remark")
    except MemoryError:
        outcome, detail = "memory", "MemoryError"
    except (ValueError, TypeError) as error:
        text = str(error)
        outcome, detail = ("clear" if text and "\n" not in text.strip() else "traceback"), text.strip()[:160]
    seconds = time.perf_counter() - start
    peak = _peak_kb()
    return {"outcome": outcome, "detail": detail, "probe_seconds": round(seconds, 3),
            "maxrss_mb": round(peak / 1024, 1), "probe_mb": round((peak - before) / 1024, 1)}


def _input_bytes(folder: Path, name: str) -> int:
    if not name:
        return 0
    path = folder / name
    if path.is_dir():
        return sum(f.stat().st_size for f in path.iterdir())
    return path.stat().st_size if not path.is_symlink() else path.resolve().stat().st_size


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.adversarial_inputs", description=__doc__.splitlines()[0])
    parser.add_argument("--probe", help="run one probe in this process (internal)")
    parser.add_argument("--folder", type=Path, help="the probes' inputs (internal)")
    arguments = parser.parse_args(argv)
    if arguments.probe:
        print(json.dumps(run_probe(arguments.probe, arguments.folder)))
        return 0
    run = provenance.start(command="python -m bench.adversarial_inputs", seeds=None,
                           settings={"time_limit_s": TIME_LIMIT_S, "address_space_bytes": ADDRESS_SPACE})
    records = []
    with tempfile.TemporaryDirectory(prefix="privfed-probes-") as temporary:
        folder = Path(temporary)
        write_inputs(folder)
        for name, (category, source, _) in PROBES.items():
            start, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
            try:
                done = subprocess.run([sys.executable, "-m", "bench.adversarial_inputs", "--probe", name, "--folder",
                                       str(folder)], capture_output=True, text=True, timeout=TIME_LIMIT_S, cwd=ROOT,
                                      preexec_fn=_limit)
                wall = time.perf_counter() - start
                used = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu_seconds = used.ru_utime - cpu.ru_utime + used.ru_stime - cpu.ru_stime
                lines = done.stdout.strip().splitlines()
                if done.returncode == 0 and lines:
                    record = json.loads(lines[-1])
                elif done.returncode < 0 or "MemoryError" in done.stderr:
                    record = {"outcome": "memory", "detail": done.stderr.strip()[-160:]}
                else:
                    record = {"outcome": "traceback", "detail": done.stderr.strip()[-160:]}
            except subprocess.TimeoutExpired:
                wall, cpu_seconds = float(TIME_LIMIT_S), float("nan")
                record = {"outcome": "hang", "detail": f"past {TIME_LIMIT_S} s"}
            record = {"category": category, "probe": name, "input_bytes": _input_bytes(folder, source),
                      "wall_seconds": round(wall, 2), "cpu_seconds": round(cpu_seconds, 2), **record}
            print(json.dumps(record), flush=True)
            records.append(record)
    provenance.write_json(RESULTS, {"provenance": provenance.finish(run), "records": records})
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
