"""The serial executor: a Gate without another executor builds and evaluates through one of its own,
in this process, with one worker per group; the group's owner closes it."""
from __future__ import annotations

from pathlib import Path

import pytest

import klineage.gate.pool as pool
from klineage.errors import NoDeviceError
from klineage.exec import serial
from klineage.exec.serial import SerialExecutor
from klineage.gate.compile import CompileResult
from klineage.gate.gate import Gate, GateConfig, Status, kernel_hash
from klineage.workload import load_workload

ROOT = Path(__file__).resolve().parents[2]
ROW_SUM = ROOT / "expert_kernels" / "row_sum"


class Worker:
    """Stands in for GateWorker: answers PASSED without an env of its own, says its env_info."""

    def __init__(self, *a, **kw):
        self.payloads, self.closed, self.env_info = [], False, {"gpu": "scripted"}

    def evaluate(self, payload, stall_s, total_s):
        self.payloads.append(payload)
        return {"status": "PASSED", "correctness": [], "timing": []}

    def close(self):
        self.closed = True


def _build(calls):
    def build(source, arch, flags):
        calls.append((kernel_hash(source), arch, tuple(flags)))
        return CompileResult(True, "k", arch, list(flags), "13.0", "", so_path="/nowhere")
    return build


def test_a_gate_without_an_executor_builds_and_evaluates_through_its_serial_one(monkeypatch):
    calls, w = [], Worker()
    monkeypatch.setattr(serial, "compile_kernel", _build(calls))
    gate = Gate(None, GateConfig(extra_flags=("-DX=1",)), worker=w)
    assert isinstance(gate.executor, SerialExecutor) and gate.group == "main"
    src = (ROW_SUM / "expert.cu").read_text()
    res = gate.evaluate(src, load_workload(ROW_SUM))
    assert res.status is Status.PASSED and res.source == "live"
    assert calls == [(kernel_hash(src), gate.config.arch, ("-DX=1",))]
    assert len(w.payloads) == 1 and w.payloads[0]["so_path"] == "/nowhere"
    assert res.env == {"gpu": "scripted"}  # the worker's env_info when its answer has none
    gate.close()
    assert w.closed


def test_without_a_gpu_a_live_evaluation_stops_with_what_was_done(monkeypatch):
    monkeypatch.setattr(serial, "compile_kernel", _build([]))
    monkeypatch.setattr(pool, "gpu_available", lambda: False)
    with pytest.raises(NoDeviceError) as e:
        Gate(None, GateConfig()).evaluate((ROW_SUM / "expert.cu").read_text(), load_workload(ROW_SUM))
    assert e.value.partial["compile"]["so_path"] == "/nowhere"


def test_groups_have_workers_of_their_own_and_map_is_a_plain_loop(monkeypatch):
    monkeypatch.setattr(pool, "GateWorker", Worker)
    monkeypatch.setattr(pool, "gpu_available", lambda: True)
    ex = SerialExecutor()
    g = ex.new_group()
    a, b = ex.worker("main"), ex.worker(g)
    assert a is not b and ex.worker(g) is b
    ex.release(g)
    assert b.closed and not a.closed and ex.worker(g) is not b
    assert list(ex.map(lambda x: x * 2, [1, 2, 3])) == [2, 4, 6]
    ex.close()
    assert a.closed
