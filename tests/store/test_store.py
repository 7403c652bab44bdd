"""The storage room: migrations, refusal of foreign files, evaluation records, JSONL round trips."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from klineage.errors import StoreError
from klineage.store import Store, migrations, open_store

REPO = Path(__file__).resolve().parents[2]


def record(key="e1", kernel="k1", workload="w1", status="passed", recorded_at="2024-05-01T12:00:00+00:00",
           **request):
    return {
        "eval_key": key, "kernel_hash": kernel, "workload_hash": workload, "workload_name": "rowsum",
        "request": {"arch": "sm_90", "seeds": [0, 1], "nvcc": "12.4", **request},
        "status": status, "result": {"timing": [{"latency_us": 12.5}], "note": "ok"},
        "env": {"gpu": "H100", "torch": "2.4"}, "gpu": "H100",
        "toolchain": {"nvcc": "12.4", "arch": "sm_90"}, "recorded_at": recorded_at,
    }


@pytest.fixture
def db(tmp_path):
    return tmp_path / "sub" / "dir" / "k.duckdb"


@pytest.fixture
def store(db):
    with open_store(db) as s:
        yield s


def raw_rows(path, sql):
    """Rows of `sql` run on the database at `path` (through the store: only it imports duckdb)."""
    with open_store(path) as s:
        return s.con.execute(sql).fetchall()


# -- opening and migrations ---------------------------------------------------------------------------

def test_open_creates_parents_and_applies_migrations_once(db):
    assert not db.parent.exists()
    s = open_store(db)
    assert isinstance(s, Store)
    s.close()
    assert db.is_file()
    names = [r[0] for r in raw_rows(db, "SELECT name FROM schema_migrations ORDER BY name")]
    assert names == [n for n, _ in migrations.MIGRATIONS]
    assert names[0] == "0001_core"
    tables = {r[0] for r in raw_rows(db, "SELECT table_name FROM duckdb_tables()")}
    assert {"kernels", "workloads", "evaluations", "schema_migrations"} <= tables
    idx = raw_rows(db, "SELECT index_name FROM duckdb_indexes() WHERE table_name = 'evaluations'")
    assert idx, "evaluations needs an index on (kernel_hash, workload_hash)"


def test_reopening_is_a_noop(db):
    with open_store(db) as s:
        s.put_evaluation(record())
    before = raw_rows(db, "SELECT name, applied_at FROM schema_migrations ORDER BY name")
    with open_store(db) as s:
        assert migrations.migrate(s.con, str(db)) == []
    with open_store(db) as s:
        assert s.counts()["evaluations"] == 1
        assert s.counts()["schema_migrations"] == len(migrations.MIGRATIONS)
    assert raw_rows(db, "SELECT name, applied_at FROM schema_migrations ORDER BY name") == before


def test_memory_store_works():
    with open_store() as s:
        assert s.put_evaluation(record())
        counts = s.counts()
        assert counts["evaluations"] == 1 and counts["schema_migrations"] == len(migrations.MIGRATIONS)
        assert all(v == 0 for k, v in counts.items() if k not in ("evaluations", "schema_migrations"))


def test_unknown_future_migration_refused(db):
    open_store(db).close()
    with open_store(db) as s:
        s.con.execute("INSERT INTO schema_migrations VALUES ('9999_from_the_future', now())")
    with pytest.raises(StoreError) as ei:
        open_store(db)
    msg = str(ei.value)
    assert "9999_from_the_future" in msg and "newer klineage" in msg and "upgrade klineage" in msg
    assert str(db) in msg


def test_new_migration_applied_on_reopen_and_failed_one_rolled_back(db, monkeypatch):
    open_store(db).close()
    good = ("0900_extra", "CREATE TABLE extra (a INTEGER);")
    bad = ("0901_broken", "CREATE TABLE half (a INTEGER); INSERT INTO half VALUES ('not a number');")
    monkeypatch.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS + [good, bad])
    with pytest.raises(StoreError) as ei:
        open_store(db)
    assert "0901_broken" in str(ei.value)
    monkeypatch.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:-1])  # read without retrying it
    names = [r[0] for r in raw_rows(db, "SELECT name FROM schema_migrations ORDER BY name")]
    assert names == [n for n, _ in migrations.MIGRATIONS] and names[-1] == "0900_extra"
    tables = {r[0] for r in raw_rows(db, "SELECT table_name FROM duckdb_tables()")}
    assert "extra" in tables and "half" not in tables


@pytest.mark.parametrize("content", [b"hello, I am a text file\n" * 20, b"", b"SQLite format 3\x00" + b"\x00" * 200])
def test_not_a_database_refused_and_left_untouched(tmp_path, content):
    f = tmp_path / "notes.db"
    f.write_bytes(content)
    with pytest.raises(StoreError) as ei:
        open_store(f)
    msg = str(ei.value)
    assert str(f) in msg
    assert "not a DuckDB database: move it away or pass another --db PATH" in msg
    assert f.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]


def test_directory_refused(tmp_path):
    with pytest.raises(StoreError, match="directory"):
        open_store(tmp_path)


def test_locked_by_another_process_refused(db):
    open_store(db).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {str(REPO)!r})
            from klineage.store import open_store
            s = open_store({str(db)!r})
            print("ready", flush=True)
            sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreError) as ei:
            open_store(db)
        assert str(db) in str(ei.value) and "--db PATH" in str(ei.value)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_closed_store_refuses(db):
    s = open_store(db)
    s.close()
    s.close()  # twice is fine
    with pytest.raises(StoreError, match="closed"):
        s.counts()


# -- kernels and workloads ------------------------------------------------------------------------------

def test_kernel_idempotent(store):
    assert store.put_kernel("k1", "__global__ void f() {}", "a/b.cu") is True
    assert store.put_kernel("k1", "different source", None) is False
    k = store.get_kernel("k1")
    assert k["source"] == "__global__ void f() {}" and k["origin_path"] == "a/b.cu"
    assert k["first_seen"] is not None
    assert store.get_kernel("nope") is None
    assert store.counts()["kernels"] == 1


def test_workload_idempotent(store):
    spec = {"name": "rowsum", "dtypes": ["float32"], "tolerance": {"rtol": 1e-5, "atol": 1e-6}}
    assert store.put_workload("w1", "rowsum", spec) is True
    assert store.put_workload("w1", "renamed", {"other": 1}) is False
    assert store.counts()["workloads"] == 1
    w = store.get_workload("w1")
    assert w["name"] == "rowsum" and w["spec"] == spec
    stored = store.con.execute("SELECT spec_json FROM workloads").fetchone()[0]
    assert stored == json.dumps(spec, sort_keys=True)


def test_workload_describe_is_storable(store):
    spec = {"name": "x", "benchmark_cases": [{"rows": 4}], "stateful": False, "path": "/w/x"}
    store.put_workload("wx", "x", spec)
    assert store.get_workload("wx")["spec"] == spec


# -- evaluations --------------------------------------------------------------------------------------------

def test_put_get_roundtrip_and_idempotence(store):
    r = record()
    assert store.put_evaluation(r) is True
    got = store.get_evaluation("e1")
    assert got == r
    changed = dict(r, status="failed", result={"timing": []})
    assert store.put_evaluation(changed) is False
    assert store.get_evaluation("e1") == r
    assert store.counts()["evaluations"] == 1
    assert store.get_evaluation("missing") is None


def test_evaluated_kernels_lists_each_kernel_once(store):
    assert store.evaluated_kernels() == set()
    store.put_evaluation(record("e1", kernel="k1"))
    store.put_evaluation(record("e2", kernel="k1", round=2))
    store.put_evaluation(record("e3", kernel="k2", status="failed"))
    store.put_kernel("k3", "__global__ void k() {}")  # a kernel without an evaluation
    assert store.evaluated_kernels() == {"k1", "k2"}


def test_replace_overwrites(store):
    store.put_evaluation(record())
    new = dict(record(), status="failed", result={"timing": [{"latency_us": 99.0}]}, gpu="H200",
               recorded_at="2024-06-01T00:00:00+00:00")
    assert store.put_evaluation(new, replace=True) is True
    assert store.get_evaluation("e1") == new
    assert store.counts()["evaluations"] == 1


def test_json_columns_sorted_keys(store):
    r = record()
    r["request"] = {"z": 1, "a": {"y": 2, "b": 3}}
    store.put_evaluation(r)
    req, tool = store.con.execute("SELECT request_json, toolchain_json FROM evaluations").fetchone()
    assert req == '{"a": {"b": 3, "y": 2}, "z": 1}'
    assert tool == json.dumps(r["toolchain"], sort_keys=True)


def test_recorded_at_defaults_to_now_and_none_toolchain(store):
    r = record()
    del r["recorded_at"]
    r["toolchain"] = None
    r["gpu"] = None
    store.put_evaluation(r)
    got = store.get_evaluation("e1")
    assert got["toolchain"] is None and got["gpu"] is None
    assert got["recorded_at"].endswith("+00:00") and got["recorded_at"][:2] == "20"


def test_recorded_at_zones_normalised_to_utc(store):
    store.put_evaluation(record(recorded_at="2024-05-01T14:00:00+02:00"))
    assert store.get_evaluation("e1")["recorded_at"] == "2024-05-01T12:00:00+00:00"
    with pytest.raises(StoreError, match="ISO 8601"):
        store.put_evaluation(record(key="e2", recorded_at="yesterday"))


def test_unknown_and_missing_keys_refused(store):
    bad = dict(record(), colour="blue")
    with pytest.raises(StoreError) as ei:
        store.put_evaluation(bad)
    assert "colour" in str(ei.value)
    missing = record()
    del missing["status"], missing["env"]
    with pytest.raises(StoreError) as ei:
        store.put_evaluation(missing)
    assert "status" in str(ei.value) and "env" in str(ei.value)
    with pytest.raises(StoreError, match="request"):
        store.put_evaluation(dict(record(), request="not a dict"))
    assert store.counts()["evaluations"] == 0


def test_find_filters_and_order(store):
    store.put_evaluation(record("a", kernel="k1", workload="w1", recorded_at="2024-01-01T00:00:00+00:00"))
    store.put_evaluation(record("b", kernel="k1", workload="w2", recorded_at="2024-03-01T00:00:00+00:00"))
    store.put_evaluation(record("c", kernel="k2", workload="w1", status="compile_error",
                                recorded_at="2024-02-01T00:00:00+00:00", arch="sm_80"))
    store.put_evaluation(record("d", kernel="k1", workload="w1", recorded_at="2024-04-01T00:00:00+00:00",
                                seeds=[7]))
    keys = lambda rows: [r["eval_key"] for r in rows]
    assert keys(store.find_evaluations()) == ["d", "b", "c", "a"]
    assert keys(store.find_evaluations(kernel_hash="k1")) == ["d", "b", "a"]
    assert keys(store.find_evaluations(workload_hash="w1")) == ["d", "c", "a"]
    assert keys(store.find_evaluations(kernel_hash="k1", workload_hash="w1")) == ["d", "a"]
    assert keys(store.find_evaluations(status="compile_error")) == ["c"]
    assert keys(store.find_evaluations(request_match={"arch": "sm_80"})) == ["c"]
    assert keys(store.find_evaluations(request_match={"seeds": [0, 1]})) == ["b", "c", "a"]
    assert keys(store.find_evaluations(request_match={"seeds": (7,)})) == ["d"]
    assert keys(store.find_evaluations(kernel_hash="k1", request_match={"arch": "sm_90", "nvcc": "12.4"})) \
        == ["d", "b", "a"]
    assert store.find_evaluations(request_match={"no_such_key": None}) == []
    assert store.find_evaluations(kernel_hash="zzz") == []


# -- export / import ---------------------------------------------------------------------------------------

def test_export_import_roundtrip(tmp_path, store):
    for i, key in enumerate(["c3", "a1", "b2"]):
        store.put_evaluation(record(key, kernel=f"k{i}", recorded_at=f"2024-0{i + 1}-01T00:00:00.123456+00:00"))
    out = tmp_path / "out" / "evals.jsonl"
    assert store.evaluation_keys() == {"a1", "b2", "c3"}
    assert store.export_evaluations(out) == 3
    lines = out.read_text().splitlines()
    assert [json.loads(x)["eval_key"] for x in lines] == ["a1", "b2", "c3"]
    for x in lines:
        assert x == json.dumps(json.loads(x), sort_keys=True)
    with open_store(tmp_path / "fresh.duckdb") as fresh:
        assert fresh.import_evaluations(out) == (3, 0)
        assert fresh.import_evaluations(out) == (0, 3)
        assert fresh.find_evaluations() == store.find_evaluations()
        for key in ("a1", "b2", "c3"):
            assert fresh.get_evaluation(key) == store.get_evaluation(key)
        again = tmp_path / "again.jsonl"
        fresh.export_evaluations(again)
        assert again.read_bytes() == out.read_bytes()


def test_export_with_filters(tmp_path, store):
    store.put_evaluation(record("a", kernel="k1"))
    store.put_evaluation(record("b", kernel="k2", status="failed"))
    out = tmp_path / "f.jsonl"
    assert store.export_evaluations(out, kernel_hash="k2") == 1
    assert json.loads(out.read_text())["eval_key"] == "b"
    assert store.export_evaluations(out, status="nothing") == 0
    assert out.read_text() == ""


def test_import_skips_present_and_keeps_stored(tmp_path, store):
    store.put_evaluation(record("a"))
    f = tmp_path / "in.jsonl"
    f.write_text(json.dumps(dict(record("a"), status="failed")) + "\n\n" + json.dumps(record("b")) + "\n")
    assert store.import_evaluations(f) == (1, 1)
    assert store.get_evaluation("a")["status"] == "passed"
    assert store.get_evaluation("b") == record("b")


@pytest.mark.parametrize("bad_line", ['{"eval_key": "x", truncated', '[1, 2, 3]',
                                      json.dumps(dict(record("x"), extra=1))])
def test_malformed_line_refused_nothing_inserted(tmp_path, store, bad_line):
    f = tmp_path / "bad.jsonl"
    f.write_text("\n".join([json.dumps(record("a")), json.dumps(record("b")), bad_line,
                            json.dumps(record("c"))]) + "\n")
    with pytest.raises(StoreError) as ei:
        store.import_evaluations(f)
    msg = str(ei.value)
    assert str(f) in msg and "line 3" in msg
    assert store.counts()["evaluations"] == 0
    assert store.find_evaluations() == []


def test_import_missing_file(tmp_path, store):
    with pytest.raises(StoreError, match="cannot read"):
        store.import_evaluations(tmp_path / "nope.jsonl")


# -- crash safety ---------------------------------------------------------------------------------------------

def test_process_killed_mid_transaction_leaves_db_consistent(db):
    with open_store(db) as s:
        s.put_evaluation(record("kept"))
    child = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(REPO)!r})
        from klineage.store import open_store
        s = open_store({str(db)!r})
        with s._transaction() as con:
            for i in range(200):
                con.execute("INSERT INTO kernels VALUES (?, 'src', NULL, now())", [f"k{{i}}"])
            os._exit(9)  # dies before COMMIT
    """)
    rc = subprocess.run([sys.executable, "-c", child], cwd=REPO, timeout=60).returncode
    assert rc == 9
    with open_store(db) as s:
        assert s.counts()["kernels"] == 0
        assert s.counts()["evaluations"] == 1
        assert s.get_evaluation("kept") == record("kept")
