"""Every gallery and fault kernel as it is now, judged on a GPU by the gate's code as it is now.

The record is `benchmarks/gate_h200.py --gallery-faults-only` (benchmarks/results/gate_<card>_gallery_faults.*,
named by the card it ran on). It names the hash of the gate's code that judged it
(klineage.gate.worker_code_hash: the worker, its driver, the gate and every klineage module they
import), each kernel's hash and the row_sum workload's: a change to any of them fails here, naming
what changed and the one device call that records it again."""
import json
import sys
from pathlib import Path

import pytest

from klineage.gate import gate_modules, worker_code_digests, worker_code_hash
from klineage.gate.gate import Status, kernel_hash
from klineage.workload import load_workload
from tests.support.headers import header, outcome_met, outcomes, statuses

ROOT = Path(__file__).resolve().parents[1]
RES = ROOT / "benchmarks" / "results"
GALLERY = sorted((ROOT / "tests" / "gallery").glob("*.cu"))
FAULTS = sorted((ROOT / "tests" / "faults").glob("*.cu"))
ROW_SUM = load_workload(ROOT / "expert_kernels" / "row_sum")
sys.path.insert(0, str(ROOT / "benchmarks"))
import gate_h200  # noqa: E402  (the command that records)
from record_names import card, card_of, the_record  # noqa: E402

RERECORD = (f"re-record it on a GPU: `{gate_h200.RECORD_COMMAND}` (one device call, carry .whlx; see "
            "benchmarks/gate_h200.py), then copy $OUT/gate_*_gallery_faults.{json,log,jsonl.gz} into "
            "benchmarks/results/ and remove the record it replaces")


@pytest.fixture(scope="module")
def record_path() -> Path:
    return the_record(RES, gate_h200.RECORD, RERECORD)


@pytest.fixture(scope="module")
def gallery_faults(record_path) -> dict:
    rec = json.loads(record_path.read_text())
    assert rec.get("gallery") and rec.get("faults"), f"{record_path.name} holds no gallery or fault outcome: {RERECORD}"
    return rec


def test_recorded_on_a_hopper_gpu_and_named_by_it(record_path, gallery_faults):
    # the outcomes are the gate's defences, not speeds: any sm_90 part (H100 or H200) records them
    env = gallery_faults["environment"]
    assert env["capability"] == "9.0" and env["gpu"].startswith(("NVIDIA H200", "NVIDIA H100")), env["gpu"]
    assert card_of(record_path, gate_h200.RECORD) == card(env["gpu"]), \
        f"{record_path.name} was recorded on {env['gpu']}: name it by that card"
    for suffix in (".log", ".jsonl.gz"):  # the evaluations and the log beside it
        side = record_path.with_name(record_path.name.removesuffix(".json") + suffix)
        assert side.is_file() and side.stat().st_size > 0, f"{side.name} is missing or empty: {RERECORD}"
    assert gallery_faults["after_faults"]["status"] == "PASSED"  # the run went on after every fault


def test_judged_by_the_gate_code_as_it_is_now(record_path, gallery_faults):
    """The dynamic defences live in the worker and what it and the gate import: a change to any of
    that code voids the record until the gallery and the faults run through it on a GPU again."""
    now = worker_code_hash()
    recorded = gallery_faults.get("worker_code_hash")
    if recorded != now:
        then = gallery_faults.get("worker_code_files") or {}
        changed = sorted(f for f, d in worker_code_digests().items() if then.get(f) != d) if then else \
            ["(the record names no files: it predates per-file digests)"]
        gone = sorted(set(then) - set(worker_code_digests()))
        pytest.fail(f"the gate's code changed since {record_path.name} was recorded (recorded {recorded}, now {now}); "
                    f"changed or new: {', '.join(changed)}" + (f"; no longer covered: {', '.join(gone)}" if gone else "")
                    + f": {RERECORD}")
    assert gallery_faults["environment"].get("worker_code") == now  # what the device's worker itself reported
    live = [o for e in gallery_faults["gallery"] for o in (e["guarded"], e["unguarded"]) if o.get("source") == "live"]
    live += [o for e in gallery_faults["faults"] for o in (e, e.get("unguarded") or {}) if o.get("source") == "live"]
    assert live and all(o["worker_code"] == now for o in live)
    assert gallery_faults["workload_hash"]["row_sum"] == ROW_SUM.content_hash, \
        f"expert_kernels/row_sum (the workload every gallery kernel runs against) changed: {RERECORD}"


def _recorded(gallery_faults, section: str, path: Path) -> dict:
    rec = {e["kernel"]: e for e in gallery_faults[section]}
    assert path.name in rec, f"{path.name} has no recorded outcome: {RERECORD}"
    e = rec[path.name]
    assert e["kernel_hash"] == kernel_hash(path.read_text()), f"{path.name} changed since it was recorded: {RERECORD}"
    return e


@pytest.mark.parametrize("path", GALLERY, ids=lambda p: p.name)
def test_every_gallery_kernel_has_its_header_outcomes(gallery_faults, path):
    """Guarded: the header's `expect`; guard off: one of its `dynamic` outcomes (status and the
    defence's error kind)."""
    e, h = _recorded(gallery_faults, "gallery", path), header(path)
    assert outcome_met(e["guarded"], h["expect"]), (h["expect"], e["guarded"])
    assert outcome_met(e["unguarded"], h["dynamic"]), (h["dynamic"], e["unguarded"])


@pytest.mark.parametrize("path", FAULTS, ids=lambda p: p.name)
def test_every_fault_kernel_has_its_expected_status(gallery_faults, path):
    e, h = _recorded(gallery_faults, "faults", path), header(path)
    assert "harness_error" not in e, e["harness_error"][-400:]
    assert outcome_met(e, h["expect"]), (e["status"], e["error_kind"], e["error_message"])
    if "dynamic" in h:  # with the guard off the worker meets it, and survives it
        assert outcome_met(e["unguarded"], h["dynamic"]), e["unguarded"]


def test_every_gallery_header_states_both_outcomes():
    """What the tests above compare: every gallery kernel says what the shipped gate and the guard-off
    gate give, in the gate's own vocabulary."""
    known = {s.value for s in Status}
    for path in GALLERY:
        h = header(path)
        assert statuses(h["expect"]) and set(statuses(h["expect"])) <= known, (path.name, h)
        assert statuses(h["dynamic"]) and set(statuses(h["dynamic"])) <= known, (path.name, h)


def test_a_header_may_name_alternative_outcomes():
    text = "// expect: GUARD_REJECTED\n// dynamic: INCORRECT wrong_values | RUNTIME_ERROR cuda_error\n"
    h = header(text)
    assert outcomes(h["dynamic"]) == [("INCORRECT", "wrong_values"), ("RUNTIME_ERROR", "cuda_error")]
    assert outcome_met({"status": "RUNTIME_ERROR", "error_kind": "cuda_error"}, h["dynamic"])
    assert outcome_met({"status": "INCORRECT", "error_kind": "wrong_values"}, h["dynamic"])
    assert not outcome_met({"status": "INCORRECT", "error_kind": "nan_output"}, h["dynamic"])
    assert not outcome_met({"status": "RUNTIME_ERROR", "error_kind": "timeout"}, h["dynamic"])
    assert not outcome_met({"status": "TIMEOUT", "error_kind": None}, h["dynamic"])
    assert outcome_met({"status": "GUARD_REJECTED", "error_kind": "static_guard"}, h["expect"])  # no kind: any
    assert not outcome_met({"status": "PASSED"}, None) and outcomes("") == []


# -- what the hash covers ------------------------------------------------------------------------

def test_the_code_hash_covers_what_the_gate_imports():
    names = {n for n, _ in gate_modules()}
    # the entries, and what they import (found, not listed): the workload contract the worker loads,
    # the build, the correctness rule, the records' statuses
    assert {"klineage.gate.worker", "klineage.gate.pool", "klineage.gate.gate", "klineage.gate.correctness",
            "klineage.gate.compile", "klineage.workload", "klineage.workload_schema",
            "klineage.records.evaluation"} <= names
    assert not any(n.startswith(("klineage.lineage", "klineage.apply", "klineage.cli", "klineage.mechanisms"))
                   for n in names)


def test_a_module_newly_imported_by_the_worker_changes_the_hash(tmp_path):
    """In a copy of the package: a new module the worker imports is covered without being named, and
    a change to it (or to workload.py) changes the hash."""
    import shutil
    import subprocess
    shutil.copytree(ROOT / "klineage", tmp_path / "klineage", ignore=shutil.ignore_patterns("__pycache__"))
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import klineage.gate as g; "
             "print(g.worker_code_hash()); print(' '.join(n for n, _ in g.gate_modules()))")

    def hash_and_modules() -> tuple[str, set[str]]:
        out = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True,
                             check=True, cwd=tmp_path).stdout.split("\n")
        return out[0], set(out[1].split())
    base, mods = hash_and_modules()
    assert base == worker_code_hash() and "klineage.gate.newcheck" not in mods
    worker = tmp_path / "klineage" / "gate" / "worker.py"
    worker.write_text(worker.read_text().replace("import torch\n", "import torch\n\nfrom klineage.gate import newcheck\n", 1))
    (tmp_path / "klineage" / "gate" / "newcheck.py").write_text("LIMIT = 1\n")
    h1, mods = hash_and_modules()
    assert "klineage.gate.newcheck" in mods and h1 != base
    (tmp_path / "klineage" / "gate" / "newcheck.py").write_text("LIMIT = 2\n")
    h2, _ = hash_and_modules()
    wl = tmp_path / "klineage" / "workload.py"
    wl.write_text(wl.read_text() + "\n# a change\n")
    h3, _ = hash_and_modules()
    assert len({base, h1, h2, h3}) == 4
