"""The worker's heartbeats and the reference's first call: a phase of many calls says it is alive
between calls, and the reference's first call in a process (where a Triton reference compiles and
autotunes) runs once per workload and shape, before the candidate's activity check and timing, in a
phase that declares its own stall limit. CPU only: the GPU calls are stubbed."""
from __future__ import annotations

import json
import os

import pytest

from klineage.gate import worker as worker_mod
from klineage.gate.gate import GateResult, Status
from klineage.heldout.run import implicates_reference


class _Chan:
    def __init__(self):
        self.sent: list[dict] = []

    def progress(self, phase, **kw):
        self.sent.append({"phase": phase, **kw})

    def beat(self):
        self.sent.append({"beat": True})


class _Workload:
    content_hash = "w1"
    input_names = ("x",)

    def __init__(self, fail=None):
        self.vendor_calls: list[dict] = []
        self.fail = fail

    def make_inputs(self, shape, seed, device="cpu"):
        return {"x": seed}

    def vendor(self, inputs, shape):
        if self.fail:
            raise RuntimeError(self.fail)
        self.vendor_calls.append(shape)
        return {}


def _evaluator(monkeypatch) -> worker_mod.Evaluator:
    monkeypatch.setattr(worker_mod, "_sync", lambda where: None)
    monkeypatch.setattr(worker_mod, "place_inputs", lambda wl, shape, t: dict(t))
    ev = object.__new__(worker_mod.Evaluator)
    ev.chan, ev.warm, ev.env = _Chan(), set(), {}
    ev.lock = worker_mod.GpuLock(None, ev.chan)  # no other worker on this card
    return ev


def test_the_reference_warms_once_per_shape_in_a_phase_with_its_own_stall_limit(monkeypatch):
    ev, wl = _evaluator(monkeypatch), _Workload()
    a, b = {"n": 4}, {"n": 8}
    ev.warm_reference(wl, [a, b])
    ev.warm_reference(wl, [a, b])
    assert wl.vendor_calls == [a, b]
    phases = [m for m in ev.chan.sent if m.get("phase") == "reference"]
    assert len(phases) == 2 and all(m["stall_s"] == worker_mod.REFERENCE_WARMUP_STALL_S for m in phases)
    assert worker_mod.REFERENCE_WARMUP_STALL_S > 60.0  # longer than the driver's default stall limit


def test_a_reference_that_fails_its_first_call_is_named_as_the_reference(monkeypatch):
    ev = _evaluator(monkeypatch)
    with pytest.raises(RuntimeError) as e:
        ev.warm_reference(_Workload(fail="compilation of _attn_fwd failed"), [{"n": 4}])
    assert "in vendor" in str(e.value)
    res = GateResult(status=Status.RUNTIME_ERROR, kernel_hash="k", workload="w", eval_key="e", source="live",
                     guard={}, error_kind="runtime_error", error_message=str(e.value))
    assert implicates_reference(res)  # a held-out run falls back to the instance's other reference


def test_the_reference_warms_before_the_activity_check_and_the_timing(monkeypatch):
    ev = _evaluator(monkeypatch)
    order: list[str] = []
    wl = _Workload()
    monkeypatch.setattr(worker_mod, "load_workload", lambda path: wl)
    monkeypatch.setattr(worker_mod, "Candidate", lambda so, w: object())
    ev.correctness = lambda cand, w, shapes, seeds: order.append("correctness") or [{"ok": True}]
    ev.check_settings = lambda where: None
    ev.warm_reference = lambda w, shapes: order.append("reference")
    ev.activity = lambda cand, w, shape: order.append("activity") or {"off_stream": []}
    ev.timing = lambda cand, w, shape, cfg: order.append("timing") or {"rechecks": [], "latency_us": 2.0,
                                                                        "floor_us": 1.0}
    ev.dev = type("D", (), {"l2_settings": lambda self: {}, "settings_baseline": {}})()
    res = ev.evaluate({"workload_path": "x", "so_path": "y", "seeds": [1],
                       "shapes": [{"kind": "benchmark", "shape": {"n": 4}}], "timing": {"warmup": 1}})
    assert res["status"] == "PASSED", res
    assert order == ["correctness", "reference", "activity", "timing"]


def test_beats_between_calls_are_rate_limited():
    rfd, wfd = os.pipe()
    chan = worker_mod.Channel(wfd)
    try:
        chan.progress("timing", shape="n=4")
        chan.beat()  # just said so: nothing more
        chan.sent -= worker_mod.HEARTBEAT_S + 1
        chan.beat()  # a while ago: the same phase again
        chan.f.close()
        with os.fdopen(rfd) as f:
            msgs = [json.loads(line) for line in f]
    finally:
        if not chan.f.closed:
            chan.f.close()
    assert [m["phase"] for m in msgs] == ["timing", "timing"]
    assert worker_mod.HEARTBEAT_S < 60.0
