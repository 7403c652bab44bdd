"""The GPU spin queued before a timed call (timing "backlog_us"): sized from the host-side dispatch,
queued after the L2 flush and before the start event, and part of the evaluation's request only when
a configuration sets it."""
from __future__ import annotations

from pathlib import Path

import pytest

from klineage.gate import worker as worker_mod
from klineage.gate.gate import DEFAULT_TIMING, Gate, GateConfig
from klineage.gate.worker import BACKLOG_MAX_US, SPIN_CYCLES_PER_US, backlog_for, host_summary, timed_call
from klineage.pipelines import PipelineError, load_pipeline
from klineage.workload import load_workload

ROOT = Path(__file__).resolve().parents[2]


def test_the_spin_covers_twice_the_slowest_dispatch_but_the_first_call():
    # the first call compiled or autotuned (90 ms): left out; the slowest of the rest is 250 us
    assert backlog_for(50.0, [90_000.0, 240.0, 250.0, 180.0]) == 2 * 250.0 + 20.0
    assert backlog_for(50.0, [30.0, 8.0, 9.0]) == 50.0  # a ctypes launch: the floor
    assert backlog_for(50.0, [1.0, 60_000.0]) == BACKLOG_MAX_US
    assert backlog_for(50.0, [400.0]) == 820.0  # one call only: it counts


def test_host_summary_counts_the_calls_whose_dispatch_outlasted_the_spin():
    s = host_summary([10.0, 30.0, 20.0, 600.0, 25.0], spin_us=520.0)
    assert s["median_us"] == 25.0 and s["max_us"] == 600.0 and s["over_backlog"] == 1
    assert "over_backlog" not in host_summary([10.0], None) and host_summary([], 5.0) == {}


class _Trace:
    def __init__(self):
        self.log: list = []


def test_the_spin_is_queued_after_the_flush_and_before_the_start_event(monkeypatch):
    tr = _Trace()

    class Event:
        n = 0

        def __init__(self, enable_timing=False):
            Event.n += 1
            self.name = "start" if Event.n % 2 else "end"

        def record(self, stream):
            tr.log.append(("record", self.name))

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return 0.125  # ms

    class Dev:
        def flush_l2(self):
            tr.log.append(("flush",))

    monkeypatch.setattr(worker_mod.torch.cuda, "Event", Event)
    monkeypatch.setattr(worker_mod.torch.cuda, "_sleep", lambda cycles: tr.log.append(("spin", cycles)), raising=False)

    def call():
        tr.log.append(("call",))
        return 0
    host: list = []
    rc, us = timed_call(Dev(), call, stream=None, spin_us=300.0, host=host)
    assert (rc, us) == (0, 125.0)
    assert tr.log == [("flush",), ("spin", 300 * SPIN_CYCLES_PER_US), ("record", "start"), ("call",), ("record", "end")]
    assert len(host) == 1 and host[0] >= 0
    tr.log.clear()
    timed_call(Dev(), call, stream=None)  # no backlog: the window as it always was
    assert [e[0] for e in tr.log] == ["flush", "record", "call", "record"]


def test_backlog_enters_the_request_only_where_it_is_set():
    wl = load_workload(ROOT / "heldout" / "rmsnorm_16384x4096")
    src = (ROOT / "heldout" / "kernels" / "rmsnorm_idiom.cu").read_text()
    plain = Gate(None, GateConfig()).request(src, wl, nvcc="13.0")
    assert plain["timing"] == DEFAULT_TIMING  # mining and apply records keep their keys
    pipe = load_pipeline(ROOT / "pipelines" / "heldout.toml")
    held = Gate(None, pipe.run.config.gate_config()).request(src, wl, nvcc="13.0")
    assert held["timing"] == {**DEFAULT_TIMING, "backlog_us": 50}


@pytest.mark.parametrize("value", [-1, 20001, 1.5, "auto"])
def test_a_bad_backlog_names_the_key(tmp_path, value):
    text = (ROOT / "pipelines" / "heldout.toml").read_text().replace("backlog_us = 50", f"backlog_us = {value!r}"
                                                                      .replace("'", '"'))
    p = tmp_path / "pipelines" / "heldout.toml"
    p.parent.mkdir()
    p.write_text(text)
    with pytest.raises(PipelineError, match=r"gate\.backlog_us"):
        load_pipeline(p)
