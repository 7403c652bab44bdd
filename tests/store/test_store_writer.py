"""A database is readable while a run writes it: the writer works on a copy and publishes it when it
closes; a second writer is refused with the name of the run holding the lock; a killed writer's copy
is published by the next open (nothing it committed is lost); no file is left beside the database."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from klineage.cli import main
from klineage.errors import StoreError
from klineage.store import MissingDatabaseError, open_store

ROOT = Path(__file__).resolve().parents[2]

# a writer in another process: stores kernel k1, says so, then waits for a line on stdin (or is killed)
_WRITER = """
import sys
from klineage.store import open_store
s = open_store(sys.argv[1])
s.put_kernel("k1", "source one")
print("written", flush=True)
if sys.stdin.readline().strip() == "close":
    s.close()
    print("closed", flush=True)
"""


def _writer(db: Path) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", _WRITER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.stdout.readline().strip() == "written"
    return p


def _kernels(db: Path) -> set[str]:
    with open_store(db, read_only=True) as s:
        return {k for (k,) in s._query("SELECT kernel_hash FROM kernels")}


def _base(db: Path) -> None:
    with open_store(db) as s:
        s.put_kernel("k0", "source zero")


def test_reads_see_the_last_published_database_while_a_run_writes(tmp_path):
    db = tmp_path / "lib.duckdb"
    _base(db)
    w = _writer(db)
    try:
        assert _kernels(db) == {"k0"}  # readable, as it was before the run
        with pytest.raises(StoreError, match=rf"being written by .* \(pid {w.pid}, running for \d+ s\)"):
            open_store(db)
        w.stdin.write("close\n")
        w.stdin.flush()
        assert w.stdout.readline().strip() == "closed"
    finally:
        w.wait(timeout=60)
    assert _kernels(db) == {"k0", "k1"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lib.duckdb"]


def test_a_reading_command_works_during_a_run_and_names_it_when_the_database_is_not_there_yet(tmp_path):
    db = tmp_path / "new.duckdb"
    w = _writer(db)
    try:
        r = CliRunner().invoke(main, ["skills", "list", "--db", str(db)])
        assert r.exit_code == 2
        assert f"no database at {db} yet" in r.output and f"pid {w.pid}" in r.output, r.output
        with pytest.raises(MissingDatabaseError, match="appears when that run ends"):
            open_store(db, read_only=True)
    finally:
        w.stdin.write("close\n")
        w.stdin.flush()
        w.wait(timeout=60)
    r = CliRunner().invoke(main, ["skills", "list", "--db", str(db)])
    assert r.exit_code == 0 and "no skills in" in r.output


def _killed_writer(tmp_path: Path) -> tuple[Path, int]:
    """A database holding k0, and the pid of a writer killed after it committed k1 to its copy."""
    db = tmp_path / "lib.duckdb"
    _base(db)
    w = _writer(db)
    os.kill(w.pid, signal.SIGKILL)
    w.wait(timeout=60)
    return db, w.pid


def test_a_killed_writer_loses_nothing_it_committed(tmp_path):
    db, _ = _killed_writer(tmp_path)
    with open_store(db, read_only=True) as s:  # the next open publishes the killed run's copy
        assert any("published what pid" in n for n in s.notes), s.notes
    assert _kernels(db) == {"k0", "k1"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lib.duckdb"]
    with open_store(db) as s:  # and a writer goes on from it
        s.put_kernel("k2", "source two")
    assert _kernels(db) == {"k0", "k1", "k2"}


def test_a_killed_writers_copy_is_kept_aside_when_the_database_changed_since(tmp_path):
    db, pid = _killed_writer(tmp_path)
    time.sleep(0.01)
    db.write_bytes(db.read_bytes())  # changed (rewritten) behind klineage's back
    with open_store(db, read_only=True) as s:
        assert any("is kept as" in n for n in s.notes), s.notes
    assert _kernels(db) == {"k0"}
    aside = tmp_path / f"lib.duckdb.unpublished-{pid}"
    assert aside.is_file() and _kernels(aside) == {"k0", "k1"}


def test_one_process_opening_twice_shares_its_working_copy(tmp_path):
    db = tmp_path / "lib.duckdb"
    _base(db)
    a = open_store(db)
    a.put_kernel("k1", "one")
    with open_store(db, read_only=True) as b:  # sees what this process wrote
        assert {k for (k,) in b._query("SELECT kernel_hash FROM kernels")} == {"k0", "k1"}
    assert _kernels_after(a, db) == {"k0", "k1"}


def _kernels_after(store, db: Path) -> set[str]:
    store.close()
    return _kernels(db)


@pytest.mark.nvcc
def test_the_gate_works_while_a_run_writes_its_database(tmp_path):
    db = tmp_path / "lib.duckdb"
    _base(db)
    w = _writer(db)
    try:
        r = CliRunner().invoke(main, ["gate", str(ROOT / "expert_kernels" / "row_sum" / "expert.cu"), "--config",
                                      str(ROOT / "pipelines" / "mine.toml"), "--replay", "--db", str(db), "--quiet"])
        assert r.exit_code == 0, r.output
        assert "PASSED (replayed)" in r.stdout
        assert f"pid {w.pid}" in r.stderr and "this gate's results are not stored there" in r.stderr
    finally:
        w.stdin.write("close\n")
        w.stdin.flush()
        w.wait(timeout=60)
    assert _kernels(db) == {"k0", "k1"}
