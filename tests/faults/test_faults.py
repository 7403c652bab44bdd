"""Faults: kernels that break the compiler or the worker. Each must become a record and the run must
go on. What a CPU can check is checked here: the headers, the guard's verdicts, and every
compile-time fault (nvcc killed past its time limit with every stage it started, nvcc stopped by
its memory cap) through compile_kernel and through the Gate. The runtime faults (crash, illegal
address, hang, device memory, launch resources) run on the H200 in benchmarks/gate_h200.py and
benchmarks/soak_h200.py; their recorded outcomes are checked in tests/test_recorded_gate_h200.py."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from klineage.errors import InputError
from klineage.gate.compile import compile_kernel, compile_limits
from klineage.gate.gate import Gate, GateConfig, Status
from klineage.gate.guard import check_source
from klineage.gate.pool import GateWorker
from klineage.store import open_store
from klineage.workload import load_workload
from tests.support.headers import header, statuses

ROOT = Path(__file__).resolve().parents[2]
FAULTS = sorted((ROOT / "tests" / "faults").glob("*.cu"))
ROW_SUM = load_workload(ROOT / "expert_kernels" / "row_sum")
STATUSES = {s.value for s in Status}
FAKE_WORKER = [sys.executable, str(ROOT / "tests" / "gate" / "fake_worker.py")]


def by_name(name: str) -> Path:
    return ROOT / "tests" / "faults" / name


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention `text` (a build folder's path)."""
    hits = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        cmd = raw.replace(b"\0", b" ").decode(errors="replace")
        if text in cmd and state != "Z":
            hits.append(f"{pid}: {cmd[:160]}")
    return hits


def _none_left(text: str, within_s: float = 15.0) -> list[str]:
    """Wait (SIGKILLed processes take a moment to release their memory) until no live process mentions
    `text`; returns those still alive at the end."""
    deadline = time.monotonic() + within_s
    while (left := _processes_mentioning(text)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def test_every_fault_has_a_header_and_the_list_is_complete():
    kinds = set()
    for p in FAULTS:
        h = header(p)
        assert {"fault", "expect", "why"} <= set(h), p.name
        assert statuses(h["expect"]) and set(statuses(h["expect"])) <= STATUSES - {"PASSED"}, p.name
        if "dynamic" in h:
            assert statuses(h["dynamic"]) and set(statuses(h["dynamic"])) <= STATUSES - {"PASSED"}, p.name
        kinds.add(h["fault"])
    # the list: host segfault, illegal address, spin forever, device memory, nvcc hang and blow-up
    assert {"host_crash", "illegal_address", "hang", "device_oom", "nvcc_hang", "nvcc_blowup"} <= kinds


@pytest.mark.parametrize("path", FAULTS, ids=lambda p: p.name)
def test_guard_verdict_matches_the_header(path):
    """A fault the gate must survive at run time is one the guard lets through; the one it rejects
    says why (and its `dynamic:` outcome is checked on the GPU with the guard off)."""
    h = header(path)
    res = check_source(path.read_text(), ROW_SUM)
    if h["expect"] == "GUARD_REJECTED":
        assert not res.ok and "dynamic" in h, path.name
    else:
        assert res.ok, f"{path.name}: {res.summary}"


def test_device_oom_is_rejected_for_its_allocation():
    res = check_source(by_name("device_oom.cu").read_text(), ROW_SUM)
    assert [v.rule_id for v in res.violations] == ["device_malloc"] and res.violations[0].pitfall == 5


@pytest.mark.nvcc
@pytest.mark.parametrize("path", [p for p in FAULTS if {"RUNTIME_ERROR", "TIMEOUT"} & set(
                                  statuses(header(p)["expect"]) + statuses(header(p).get("dynamic")))],
                         ids=lambda p: p.name)
def test_runtime_faults_compile(path, tmp_path):
    """A runtime fault must reach the GPU: it compiles (a compile error would test nothing there)."""
    res = compile_kernel(path.read_text(), cache_dir=tmp_path)
    assert res.ok, res.error_message


@pytest.mark.nvcc
def test_compile_error_is_reported():
    res = compile_kernel(by_name("compile_error.cu").read_text())
    assert not res.ok and res.error_kind == "nvcc_error" and "error" in res.error_message


@pytest.mark.nvcc
def test_nvcc_hang_is_killed_with_every_stage_it_started(tmp_path):
    t0 = time.monotonic()
    res = compile_kernel(by_name("nvcc_hang.cu").read_text(), cache_dir=tmp_path, timeout_s=3)
    took = time.monotonic() - t0
    assert not res.ok and res.error_kind == "timeout", (res.error_kind, res.error_message)
    assert "time limit of 3 s" in res.error_message and "killed" in res.error_message
    assert took < 45, took  # killed, not waited for: the kernel would take weeks
    # cudafe++ (the stage doing the work) died with nvcc: nothing that worked in this build folder lives on
    assert _none_left(str(tmp_path)) == []
    # nor is anything left on disk: no cache entry for a build that never finished, no temporaries
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


@pytest.mark.nvcc
def test_nvcc_blowup_is_stopped_by_the_memory_cap(tmp_path):
    res = compile_kernel(by_name("nvcc_memory_bomb.cu").read_text(), cache_dir=tmp_path, timeout_s=120,
                         memory_mb=1024)
    assert not res.ok and res.error_kind == "memory_limit", (res.error_kind, res.error_message)
    assert "1024 MiB" in res.error_message
    assert res.seconds < 100  # the cap ended it, not the time limit
    assert _none_left(str(tmp_path)) == []
    # not cached: a larger cap may give another outcome
    assert [p for p in tmp_path.rglob("build.json")] == []


@pytest.mark.nvcc
def test_nvcc_blowup_without_a_cap_meets_the_time_limit(tmp_path):
    res = compile_kernel(by_name("nvcc_memory_bomb.cu").read_text(), cache_dir=tmp_path, timeout_s=3, memory_mb=0)
    assert not res.ok and res.error_kind == "timeout"
    assert _none_left(str(tmp_path)) == []


@pytest.mark.nvcc
def test_an_honest_kernel_compiles_under_the_caps(tmp_path):
    """The caps used above leave room for real kernels: the heaviest expert builds under them."""
    for rel in ("gemm/expert.cu",):
        res = compile_kernel((ROOT / "expert_kernels" / rel).read_text(), cache_dir=tmp_path, memory_mb=1024)
        assert res.ok, (rel, res.error_message)


def test_compile_limits_from_the_environment(monkeypatch):
    monkeypatch.setenv("KLINEAGE_NVCC_TIMEOUT_S", "7.5")
    monkeypatch.setenv("KLINEAGE_NVCC_MEMORY_MB", "2048")
    assert compile_limits() == (7.5, 2048)
    monkeypatch.setenv("KLINEAGE_NVCC_MEMORY_MB", "lots")
    with pytest.raises(InputError, match="KLINEAGE_NVCC_MEMORY_MB='lots' is not a number"):
        compile_limits()
    monkeypatch.setenv("KLINEAGE_NVCC_MEMORY_MB", "-1")
    with pytest.raises(InputError, match="negative"):
        compile_limits()


@pytest.mark.nvcc
def test_compile_faults_through_the_gate_are_records_and_the_run_goes_on(tmp_path, monkeypatch):
    """One gate, one worker (the scripted stand-in: every compiled kernel 'passes'), a sequence of
    faults with honest kernels between them: every submission is a stored record with the expected
    status and reason, and the kernels after the faults are still evaluated."""
    monkeypatch.setenv("KLINEAGE_NVCC_MEMORY_MB", "1024")
    store = open_store(tmp_path / "faults.duckdb")
    worker = GateWorker(command=FAKE_WORKER, start_timeout_s=30)
    gate = Gate(store, GateConfig(), worker=worker)
    honest = (ROOT / "expert_kernels" / "row_sum" / "naive.cu").read_text()
    plan = [("nvcc_hang.cu", "COMPILE_ERROR", "timeout"), ("honest", "PASSED", None),
            ("nvcc_memory_bomb.cu", "COMPILE_ERROR", "memory_limit"),
            ("compile_error.cu", "COMPILE_ERROR", "nvcc_error"),
            ("device_oom.cu", "GUARD_REJECTED", "static_guard"), ("honest2", "PASSED", None)]
    try:
        keys = []
        for name, status, kind in plan:
            src = {"honest": honest, "honest2": honest + "\n// a second honest kernel\n"}.get(name) \
                or by_name(name).read_text()
            # a short time limit for the hang; a long one elsewhere, so the memory cap ends the blow-up
            monkeypatch.setenv("KLINEAGE_NVCC_TIMEOUT_S", "3" if name == "nvcc_hang.cu" else "90")
            res = gate.evaluate(src, ROW_SUM, origin=name)
            assert (res.status.value, res.error_kind) == (status, kind), (name, res.error_message)
            keys.append(res.eval_key)
        stored = {k for (k,) in store._query("SELECT eval_key FROM evaluations")}
        assert len(set(keys)) == len(plan) and stored == set(keys)
        rec = store.get_evaluation(keys[0])
        assert rec["status"] == "COMPILE_ERROR" and "time limit" in rec["result"]["error_message"]
        assert worker.starts == 1  # compile faults never reach (or disturb) the worker
    finally:
        gate.close()
        store.close()


def _children(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is `pid`."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(d))
    return out


def test_worker_crashes_and_hangs_leak_nothing(tmp_path, monkeypatch):
    """Many crashes, hangs and fatal errors in a row (the scripted worker): every one is a result, each
    replaced worker is gone with its working directory and log, and the driver holds no more file
    descriptors or child processes than before."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)  # pick up TMPDIR: the workers' folders land in tmp_path
    fds_before = len(os.listdir("/proc/self/fd"))
    kids_before = set(_children(os.getpid()))
    w = GateWorker(command=FAKE_WORKER, start_timeout_s=30)
    try:
        statuses = []
        for i in range(12):
            mode = ("crash", "fatal", "hang", "ok")[i % 4]
            res = w.evaluate({"so_path": mode}, stall_s=0.5)
            statuses.append(res["status"])
            assert len(set(_children(os.getpid())) - kids_before) <= 1  # never two workers at once
        assert statuses == ["RUNTIME_ERROR", "RUNTIME_ERROR", "TIMEOUT", "PASSED"] * 3
        assert w.starts == 10  # a fresh worker after each of the 9 faults
        assert len([p for p in tmp_path.iterdir() if p.name.startswith("klineage-run-")]) == 1  # the live one
    finally:
        w.close()
    assert set(_children(os.getpid())) - kids_before == set()
    assert [p.name for p in tmp_path.iterdir()] == []  # working directories and logs removed
    assert len(os.listdir("/proc/self/fd")) <= fds_before
