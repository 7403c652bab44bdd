"""Isolation: hangs, crashes and fatal CUDA errors become records and the worker is replaced."""
import sys
import time
from pathlib import Path

import pytest

from klineage.errors import NoDeviceError
from klineage.gate.pool import GateWorker

FAKE = [sys.executable, str(Path(__file__).with_name("fake_worker.py"))]


@pytest.fixture
def worker():
    w = GateWorker(command=FAKE, start_timeout_s=30)
    yield w
    w.close()


def test_ok_reuses_the_same_process(worker):
    a = worker.evaluate({"so_path": "ok"})
    b = worker.evaluate({"so_path": "ok"})
    assert a["status"] == b["status"] == "PASSED"
    assert a["pid"] == b["pid"] and worker.starts == 1


def test_hang_is_killed_by_the_stall_limit(worker):
    t0 = time.monotonic()
    res = worker.evaluate({"so_path": "hang"}, stall_s=1.0)
    assert res["status"] == "TIMEOUT" and "no progress for 1 s in phase correctness" in res["error_message"]
    assert time.monotonic() - t0 < 15
    assert not worker.alive()
    after = worker.evaluate({"so_path": "ok"})
    assert after["status"] == "PASSED" and worker.starts == 2


def test_progress_keeps_a_slow_evaluation_alive(worker):
    res = worker.evaluate({"so_path": "slow-progress"}, stall_s=1.0)
    assert res["status"] == "PASSED"


def test_a_phase_declaring_its_own_stall_limit_gets_it_and_only_it(worker):
    """The reference's first call (JIT and autotuning) says how long it may be silent; past that it is
    a hang like any other, and the next phase is held to the driver's limit again."""
    assert worker.evaluate({"so_path": "long-phase"}, stall_s=1.0)["status"] == "PASSED"
    res = worker.evaluate({"so_path": "long-phase-hang"}, stall_s=1.0)
    assert res["status"] == "TIMEOUT" and "no progress for 3 s in phase reference" in res["error_message"]
    t0 = time.monotonic()
    res = worker.evaluate({"so_path": "long-phase-then-hang"}, stall_s=1.0)
    assert res["status"] == "TIMEOUT" and "no progress for 1 s in phase timing" in res["error_message"]
    assert time.monotonic() - t0 < 2.8 + 10


def test_total_limit_kills_even_with_progress(worker):
    res = worker.evaluate({"so_path": "slow-progress"}, stall_s=1.0, total_s=0.8)
    assert res["status"] == "TIMEOUT" and "ran past" in res["error_message"]


def test_crash_is_a_runtime_error_and_the_worker_is_replaced(worker):
    first = worker.evaluate({"so_path": "ok"})
    res = worker.evaluate({"so_path": "crash"})
    assert res["status"] == "RUNTIME_ERROR" and res["error_kind"] == "worker_crash"
    assert "SIGSEGV" in res["error_message"]
    again = worker.evaluate({"so_path": "ok"})
    assert again["status"] == "PASSED" and again["pid"] != first["pid"]


def test_fatal_cuda_error_restarts_the_worker(worker):
    first = worker.evaluate({"so_path": "ok"})
    res = worker.evaluate({"so_path": "fatal"})
    assert res["status"] == "RUNTIME_ERROR" and res["worker_restarted"]
    assert worker.evaluate({"so_path": "ok"})["pid"] != first["pid"]


def test_worker_that_cannot_start_names_the_fix():
    w = GateWorker(command=[sys.executable, "-c", "import sys; sys.exit(3)"], start_timeout_s=10)
    with pytest.raises(NoDeviceError, match="--replay"):
        w.start()


def test_candidates_run_in_a_working_directory_of_their_own():
    root = Path(__file__).resolve().parents[2]
    w = GateWorker(command=FAKE, start_timeout_s=30)
    try:
        res = w.evaluate({"so_path": "write-relative"})
        cwd = Path(res["cwd"])
        assert cwd != root and root not in cwd.parents and cwd.name.startswith("klineage-run-")
        assert (cwd / "escape.txt").is_file() and Path(res["tmp"]).parent == cwd  # TMPDIR is inside it too
        assert not (root / "escape.txt").exists()
    finally:
        w.close()
    assert not cwd.exists()  # removed with the worker
