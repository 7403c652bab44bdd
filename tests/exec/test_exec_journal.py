"""The journal: units write into journals of their own, the driver commits them in unit order."""
import threading

from klineage.exec.journal import JournalStore
from klineage.store import open_store


def _record(key: str, kernel: str = "k1", recorded_at: str = "2026-12-01 00:00:00") -> dict:
    return {"eval_key": key, "kernel_hash": kernel, "workload_hash": "w1", "workload_name": "row_sum",
            "request": {"seeds": [1]}, "status": "PASSED", "result": {}, "env": {}, "gpu": "G",
            "toolchain": {}, "recorded_at": recorded_at}


def test_writes_outside_a_unit_go_straight_to_the_database():
    base = open_store()
    j = JournalStore(base)
    assert j.put_kernel("k1", "src", "a.cu")
    assert base.get_kernel("k1")["origin_path"] == "a.cu"
    assert j.counts() == base.counts()  # other calls are the database's own


def test_unit_writes_wait_for_commit_and_are_seen_by_every_unit_meanwhile():
    base = open_store()
    j = JournalStore(base)
    with j.unit(1):
        j.put_kernel("k1", "src", "one.cu")
        j.put_evaluation(_record("e1"))
    assert base.get_kernel("k1") is None and base.get_evaluation("e1") is None
    with j.unit(0):  # another unit sees what unit 1 evaluated, as a serial run's later target would
        assert j.get_kernel("k1")["source"] == "src"
        assert [r["eval_key"] for r in j.find_evaluations(kernel_hash="k1", request_match={"seeds": [1]})] == ["e1"]
        j.put_kernel("k1", "src", "zero.cu")
    # commit in unit order: unit 0's write comes first, as in a serial run, whatever order they ran
    assert j.commit(0) == 1 and j.commit(1) == 2
    assert base.get_kernel("k1")["origin_path"] == "zero.cu"
    assert base.get_evaluation("e1")["status"] == "PASSED"
    assert j.commit(1) == 0  # a journal is committed once


def test_reads_merge_newest_first_and_prefer_the_database():
    base = open_store()
    base.put_evaluation(_record("e-old", recorded_at="2026-11-01 00:00:00"))
    j = JournalStore(base)
    with j.unit("u"):
        j.put_evaluation(_record("e-new", recorded_at="2026-12-02 00:00:00"))
        j.put_evaluation(_record("e-old", recorded_at="2026-12-03 00:00:00"))  # kept once: the stored one
    got = j.find_evaluations(kernel_hash="k1")
    assert [r["eval_key"] for r in got] == ["e-new", "e-old"]
    assert got[1]["recorded_at"].startswith("2026-11-01")


def test_units_are_per_thread():
    base = open_store()
    j = JournalStore(base)
    seen = {}

    def work(key):
        with j.unit(key):
            j.put_kernel(f"k{key}", "src")
            seen[key] = j.current()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {i: i for i in range(4)} and j.current() is None
    assert j.commit_all() == 4 and all(base.get_kernel(f"k{i}") for i in range(4))
