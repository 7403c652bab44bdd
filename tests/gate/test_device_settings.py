"""The worker's persisting-L2 defence, on the CPU with a stand-in for the device: a candidate that
leaves the persisting-L2 limit or the harness stream's access policy window other than the worker set
them is rejected (GUARD_REJECTED, persisting_l2) whichever phase it changed them in, and the settings
are put back before the next candidate runs, also when it was rejected for something else. On the
H200 the gallery's persisting_l2.cu shows it (tests/test_recorded_gate_h200.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from klineage.gate import worker as W

ROOT = Path(__file__).resolve().parents[2]
ROW_SUM = ROOT / "expert_kernels" / "row_sum"
PINNED = {"persisting_l2_limit": 39321600, "stream_window_bytes": 0}


class FakeDevice:
    """The two settings a candidate can change, and how often the worker put them back."""

    def __init__(self):
        self.settings_baseline = {"persisting_l2_limit": 0, "stream_window_bytes": 0}
        self.now = dict(self.settings_baseline)
        self.restored = 0

    def l2_settings(self) -> dict:
        return dict(self.now)

    def restore_l2_settings(self) -> None:
        self.now = dict(self.settings_baseline)
        self.restored += 1


class Quiet:
    def progress(self, *a, **k):
        pass


def _evaluator(monkeypatch, dev: FakeDevice, **phases) -> W.Evaluator:
    """An Evaluator whose phases are stand-ins: each named phase runs `fn(dev)` (a candidate's call
    changing the settings, or raising) before answering as an honest kernel would."""
    ev = object.__new__(W.Evaluator)
    ev.chan, ev.dev, ev.env, ev.warm = Quiet(), dev, {"gpu": "stand-in"}, set()
    ev.lock = W.GpuLock(None, ev.chan)  # no other worker on this card
    monkeypatch.setattr(ev, "warm_reference", lambda workload, shapes: None)  # no reference to call here
    monkeypatch.setattr(W, "Candidate", lambda so_path, workload: object())

    def correctness(cand, workload, shapes, seeds):
        phases.get("correctness", lambda d: None)(dev)
        return [{"kind": k, "shape": s, "ok": True, "seeds": []} for k, s in shapes]

    def activity(cand, workload, shape):
        phases.get("activity", lambda d: None)(dev)
        return {"off_stream": [], "harness_stream": 7}

    def timing(cand, workload, shape, cfg):
        phases.get("timing", lambda d: None)(dev)
        return {"shape": shape, "rechecks": [], "latency_us": 100.0, "floor_us": 10.0}
    monkeypatch.setattr(ev, "correctness", correctness)
    monkeypatch.setattr(ev, "activity", activity)
    monkeypatch.setattr(ev, "timing", timing)
    return ev


def _request(timing: bool = True) -> dict:
    shape = {"rows": 16384, "cols": 4096}
    return {"workload_path": str(ROW_SUM), "so_path": "candidate.so", "seeds": [1],
            "shapes": [{"kind": "benchmark", "shape": shape}],
            "timing": {"warmup": 1, "reps": 5, "trials": 1} if timing else None}


def _pin(dev: FakeDevice) -> None:
    dev.now = dict(PINNED)


def test_an_honest_candidate_passes_and_nothing_is_put_back(monkeypatch):
    dev = FakeDevice()
    res = _evaluator(monkeypatch, dev).evaluate(_request())
    assert res["status"] == "PASSED" and dev.restored == 0 and "l2_settings_restored" not in res


@pytest.mark.parametrize("phase", ["correctness", "activity", "timing"])
def test_changed_settings_are_rejected_in_every_phase_and_put_back(monkeypatch, phase):
    dev = FakeDevice()
    res = _evaluator(monkeypatch, dev, **{phase: _pin}).evaluate(_request())
    assert (res["status"], res["error_kind"]) == ("GUARD_REJECTED", "persisting_l2"), res
    assert "persisting_l2_limit 0 -> 39321600" in res["error_message"] and not res["fatal"]
    assert dev.now == dev.settings_baseline and dev.restored == 1


def test_a_window_on_the_harness_stream_is_a_change_too(monkeypatch):
    dev = FakeDevice()

    def window(d):
        d.now["stream_window_bytes"] = 64 << 20
    res = _evaluator(monkeypatch, dev, correctness=window).evaluate(_request(timing=False))
    assert res["error_kind"] == "persisting_l2" and "stream_window_bytes 0 -> 67108864" in res["error_message"]
    assert dev.now == dev.settings_baseline


def test_settings_are_put_back_after_a_candidate_rejected_for_something_else(monkeypatch):
    """A launch error after pinning L2: the record is the launch error, and the next candidate still
    runs with the worker's settings."""
    dev = FakeDevice()

    def pin_then_fail(d):
        _pin(d)
        raise W.CandidateFailure("RUNTIME_ERROR", "launch_error", "entry returned cudaErrorInvalidValue (1)")
    res = _evaluator(monkeypatch, dev, correctness=pin_then_fail).evaluate(_request())
    assert res["error_kind"] == "launch_error" and res["l2_settings_restored"] is True
    assert dev.now == dev.settings_baseline


def test_settings_changed_names_what_changed():
    base = {"persisting_l2_limit": 0, "stream_window_bytes": 0}
    assert W.settings_changed(base, dict(base), "here") is None
    f = W.settings_changed(base, {"persisting_l2_limit": 0, "stream_window_bytes": None}, "after x")
    assert f.status == "GUARD_REJECTED" and f.message.startswith("after x:") and "stream_window_bytes 0 -> None" in f.message
