"""How a database is opened: read-only opens write nothing (no migration, no file, no folder); a
database must exist unless the open creates one on purpose; commands that only read refuse a
missing or mistyped --db with one line naming the fix (exit 2), and the commands that write create
it."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from klineage.cli import main
from klineage.errors import StoreError
from klineage.store import MissingDatabaseError, migrations, open_store

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "skills_db" / "skills.duckdb"


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _files(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def test_a_read_only_open_writes_nothing_and_cannot_write(tmp_path):
    db = tmp_path / "lib.duckdb"
    open_store(db).close()
    before = _digest(db)
    with open_store(db, read_only=True) as s:
        assert s.read_only and s.counts()["skills"] == 0
        with pytest.raises(StoreError, match="open read-only"):
            s.put_kernel("k", "src")
    assert _digest(db) == before and _files(tmp_path) == ["lib.duckdb"]


def test_a_read_only_open_runs_no_migration(tmp_path):
    db = tmp_path / "old.duckdb"
    with open_store(db) as s:
        s.con.execute("DROP TABLE heldout_results")
        s.con.execute("DROP TABLE heldout_runs")
        s.con.execute("DELETE FROM schema_migrations WHERE name = '0005_heldout'")
    before = _digest(db)
    with pytest.raises(StoreError, match="lacks schema migration 0005_heldout"):
        open_store(db, read_only=True)
    assert _digest(db) == before
    with open_store(db) as s:  # a writing open migrates it
        assert "0005_heldout" in migrations.applied(s.con)
    open_store(db, read_only=True).close()


def test_a_missing_database_is_made_only_on_purpose(tmp_path):
    where = tmp_path / "no" / "such" / "lib.duckdb"
    for kw in ({"read_only": True}, {"create": False}):
        with pytest.raises(MissingDatabaseError, match="no database at"):
            open_store(where, **kw)
        assert not (tmp_path / "no").exists()
    open_store(where).close()  # the default creates it, with its folders
    assert where.is_file()


def _cli(args: list[str], cwd: Path, env: dict | None = None):
    runner = CliRunner()
    with runner.isolated_filesystem(temp_dir=cwd) as d:
        r = runner.invoke(main, args, env={"KLINEAGE_DB": None, **(env or {})})
        return r, Path(d)


@pytest.mark.parametrize("args", [["skills", "list"], ["lineage", "list"], ["evals", "list"], ["apply", "list"],
                                  ["skills", "stats", "--json"], ["report", "--out", "rep"]])
def test_reading_commands_refuse_a_missing_default_database(tmp_path, args):
    r, cwd = _cli(args, tmp_path)
    assert r.exit_code == 2, r.output
    line = r.output.strip()
    if "--json" in args:  # the error as JSON, with the same line in it
        line = json.loads(line)["error"]
    assert "\n" not in line and "no database at klineage.duckdb" in line and "--db" in line, r.output
    assert _files(cwd) == []  # no database, no folder, no report


def test_a_mistyped_db_makes_no_database_and_no_folders(tmp_path):
    r, cwd = _cli(["skills", "list", "--db", "skils_db/skills.duckdb"], tmp_path)
    assert r.exit_code == 2 and "no database at skils_db/skills.duckdb" in r.output
    assert _files(cwd) == []
    r, cwd = _cli(["skills", "list"], tmp_path, env={"KLINEAGE_DB": "elsewhere/lib.duckdb"})
    assert r.exit_code == 2 and "elsewhere/lib.duckdb" in r.output and _files(cwd) == []


def test_apply_needs_an_existing_library(tmp_path):
    wl = ROOT / "apply_workloads" / "gelu"
    r, cwd = _cli(["apply", "--workload", str(wl), "--start", str(wl / "naive.cu"), "--db", "lib.duckdb",
                   "--replay"], tmp_path)
    assert r.exit_code == 2 and "no database at lib.duckdb" in r.output and "copy" in r.output, r.output
    assert _files(cwd) == []


def test_writing_commands_create_their_database(tmp_path):
    empty = tmp_path / "none.jsonl"
    empty.write_text("")
    r, cwd = _cli(["evals", "import", str(empty), "--db", "new/lib.duckdb"], tmp_path)
    assert r.exit_code == 0, r.output
    assert (cwd / "new" / "lib.duckdb").is_file()


def test_reading_commands_open_the_shipped_library_read_only():
    """The shipped library is answered from without being written (DuckDB opened read-only: a write
    attempt would fail, a migration would be refused)."""
    before = _digest(SHIPPED)
    r = CliRunner().invoke(main, ["skills", "list", "--db", str(SHIPPED), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output) and _digest(SHIPPED) == before


@pytest.mark.parametrize("args", [["evals", "import", "{empty}"],
                                  ["apply", "--workload", "{gelu}", "--start", "{gelu}/naive.cu", "--replay"],
                                  ["gate", "{gelu}/naive.cu", "--replay"]])
def test_commands_other_than_the_rebuild_do_not_write_the_shipped_library(tmp_path, args):
    empty = tmp_path / "none.jsonl"
    empty.write_text("")
    gelu = ROOT / "apply_workloads" / "gelu"
    before = _digest(SHIPPED)
    r = CliRunner().invoke(main, [a.format(empty=empty, gelu=gelu) for a in args] + ["--db", str(SHIPPED)])
    assert r.exit_code == 2 and "is the shipped library" in r.output and "cp " in r.output, r.output
    assert _digest(SHIPPED) == before
