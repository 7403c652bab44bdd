"""The lock of workers sharing one GPU (KLINEAGE_GPU_LOCK): timing holds it exclusively, correctness
calls share it, a waiting worker says so, a waiting timing is not starved by shared holders, and
without the variable nothing is locked. CPU only."""
from __future__ import annotations

import fcntl
import os
import threading
import time

from klineage.gate.worker import GpuLock


class _Chan:
    def __init__(self):
        self.sent: list[str] = []
        self.phase = "start"

    def progress(self, phase, **kw):
        self.phase = phase
        self.sent.append(phase)

    def beat(self):
        self.sent.append("beat")


def test_without_the_variable_nothing_is_locked():
    lock = GpuLock(None, _Chan())
    with lock.held() as waited:
        assert waited == 0.0
    assert lock.fd is None


def test_a_second_holder_waits_for_the_first(tmp_path):
    path = str(tmp_path / "gpu0.lock")
    first, second = GpuLock(path, _Chan()), GpuLock(path, _Chan())
    order: list[str] = []
    got: dict = {}

    def other():
        with second.held() as waited:
            order.append("second")
            got["waited"] = waited

    with first.held(announce=False) as waited:
        assert waited < 1.0 and first.chan.sent == []  # a silent wait before "ready"
        t = threading.Thread(target=other)
        t.start()
        time.sleep(0.3)
        order.append("first released")
    t.join(5)
    assert order == ["first released", "second"]
    assert got["waited"] >= 0.25 and second.waited == got["waited"]
    assert second.chan.sent[0] == "gpu_lock"  # the wait is announced as a phase of its own ...
    assert second.chan.sent[-1] == "start"  # ... and the phase it interrupted goes on after it


def test_shared_holders_overlap_and_exclude_an_exclusive_one(tmp_path):
    path = str(tmp_path / "gpu0.lock")
    a, b, c = (GpuLock(path, _Chan()) for _ in range(3))
    with a.held(exclusive=False):
        with b.held(exclusive=False) as waited:
            assert waited < 0.2  # two correctness phases run side by side
        done = threading.Event()

        def timing():
            with c.held(exclusive=True):
                done.set()

        t = threading.Thread(target=timing)
        t.start()
        assert not done.wait(0.3)  # a timing waits while a shared holder is on the card
    t.join(5)
    assert done.is_set()


def test_a_waiting_timing_is_not_starved_by_new_shared_holders(tmp_path):
    path = str(tmp_path / "gpu0.lock")
    reader, writer, late = (GpuLock(path, _Chan()) for _ in range(3))
    order: list[str] = []
    with reader.held(exclusive=False):
        def write():
            with writer.held(exclusive=True):
                order.append("timing")
                time.sleep(0.1)

        def read_late():
            with late.held(exclusive=False):
                order.append("late correctness")

        w = threading.Thread(target=write)
        w.start()
        time.sleep(0.2)  # the timing now holds the turnstile, waiting for the first reader
        r = threading.Thread(target=read_late)
        r.start()
        time.sleep(0.2)
        assert order == []  # the late reader queues behind the waiting timing
    w.join(5)
    r.join(5)
    assert order == ["timing", "late correctness"]


def test_the_lock_is_free_after_the_block_even_when_it_raises(tmp_path):
    path = str(tmp_path / "gpu0.lock")
    lock = GpuLock(path, _Chan())
    try:
        with lock.held():
            raise RuntimeError("a harness bug")
    except RuntimeError:
        pass
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError if still held
    finally:
        os.close(fd)
