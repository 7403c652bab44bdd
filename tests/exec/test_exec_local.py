"""The local executor: units in order, one evaluation per GPU at a time, the serial run's library."""
import sys
import threading
import time
from pathlib import Path

import pytest

from klineage.errors import NoDeviceError
from klineage.exec import ExecutorError, make_executor
from klineage.exec.local import LocalExecutor, visible_gpus
from tests.exec.support import library, mine

FAKE = [sys.executable, str(Path(__file__).resolve().parents[1] / "gate" / "fake_worker.py")]


def test_units_overlap_where_they_wait_and_come_back_in_order():
    ex = LocalExecutor(gpus=[], compile_jobs=2, units=4)
    running, peak, lock = [0], [0], threading.Lock()

    def unit(i):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        with ex.blocking():  # a wait: other units run meanwhile
            time.sleep(0.2 if i == 0 else 0.05)
        with lock:
            running[0] -= 1
        return i * i

    try:
        assert list(ex.map(unit, range(6))) == [i * i for i in range(6)]
        assert peak[0] > 1
    finally:
        ex.close()


def test_a_failing_unit_raises_at_its_place_in_the_order():
    ex = LocalExecutor(gpus=[], compile_jobs=1, units=3)
    got = []

    def unit(i):
        if i == 2:
            raise ValueError("boom")
        return i

    try:
        with pytest.raises(ValueError, match="boom"):
            for r in ex.map(unit, range(5)):
                got.append(r)
        assert got == [0, 1]
    finally:
        ex.close()


def test_a_claim_lets_one_unit_through_at_a_time():
    ex = LocalExecutor(gpus=[], compile_jobs=1, units=4)
    inside, peak = [0], [0]

    def unit(i):
        with ex.claim(("eval", "same")):
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
            with ex.blocking():
                time.sleep(0.05)
            inside[0] -= 1
        return i

    try:
        assert list(ex.map(unit, range(4))) == [0, 1, 2, 3] and peak[0] == 1
    finally:
        ex.close()


def test_one_worker_per_gpu_and_one_evaluation_per_gpu_at_a_time():
    ex = LocalExecutor(gpus=["0", "1"], compile_jobs=1, units=4, worker_command=FAKE)
    try:
        t0 = time.perf_counter()
        # 'slow-progress' takes 1.8 s in the scripted worker: 4 of them on 2 GPUs take two rounds
        res = list(ex.map(lambda i: ex.evaluate_live("src", None, {"so_path": "slow-progress"}, "main", (),
                                                     stall_s=30, total_s=60), range(4)))
        wall = time.perf_counter() - t0
        assert [r["status"] for r in res] == ["PASSED"] * 4 and all(r["env"]["gpu"] == "FakeGPU" for r in res)
        assert len({r["pid"] for r in res}) == 2  # one worker process per GPU, reused
        assert 3.4 < wall < 9
        busy = ex.stats()["gpu_busy_s"]
        assert set(busy) == {"0", "1"} and all(3.0 < b < 5 for b in busy.values())
        # a timing round's fresh group gets worker processes of its own, closed on release
        g = ex.new_group()
        other = ex.evaluate_live("src", None, {"so_path": "ok"}, g, (), stall_s=30, total_s=60)
        assert other["pid"] not in {r["pid"] for r in res}
        ex.release(g)
        assert all(k[0] != g for k in ex._workers)
    finally:
        ex.close()


def test_without_a_gpu_a_live_evaluation_says_how_to_go_on():
    ex = LocalExecutor(gpus=[], compile_jobs=1)
    try:
        with pytest.raises(NoDeviceError, match="--replay"):
            ex.evaluate_live("src", None, {}, "main", (), stall_s=1, total_s=1)
    finally:
        ex.close()


def test_visible_gpus_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert visible_gpus() == ["2", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus() == []


def test_make_executor():
    assert make_executor("serial") is None
    with pytest.raises(ExecutorError, match="--executor ray"):
        make_executor("local", ray_address="127.0.0.1:6379")
    with pytest.raises(ExecutorError, match="serial, local, ray"):
        make_executor("dask")


@pytest.mark.nvcc
def test_local_executor_mines_the_serial_library(subset_config, serial_library, tmp_path):
    summary, dump, counts = serial_library
    db = tmp_path / "local.duckdb"
    out = mine(subset_config, db, "--executor", "local", "--check-builds")
    got_dump, got_counts = library(db)
    assert got_dump == dump and got_counts == counts
    assert out["evaluations"] == summary["evaluations"] and out["missing"] == []
    assert [l["lineage_id"] for l in out["lineages"]] == [l["lineage_id"] for l in summary["lineages"]]
    ex = out["executor"]
    assert ex["executor"] == "local" and ex["compile_requests"] == summary["phases"]["compile_requests"]
    assert ex["units_run"] > len(out["lineages"])  # the walks and the analysis pass's steps
