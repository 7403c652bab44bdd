"""Bad input: every loader given garbage answers with one line naming the file and the problem,
exit code 2, no traceback (unless --debug); nothing already stored is lost."""
from __future__ import annotations

import random
import shutil
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from klineage.cli import main
from klineage.store import open_store

ROOT = Path(__file__).resolve().parents[2]
RNG = random.Random(7)


def _garbage(n: int) -> bytes:
    return bytes(RNG.randrange(256) for _ in range(n))


def _run(args, **kw):
    return CliRunner().invoke(main, args, **kw)


def _one_line_error(r, needle: str, code: int = 2):
    assert r.exit_code == code, (r.exit_code, r.output)
    assert "Traceback" not in r.output and needle in r.output, r.output
    lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.output


@pytest.mark.parametrize("seed", range(4))
def test_garbage_workload_files(tmp_path, seed):
    d = tmp_path / "wl"
    d.mkdir()
    RNG.seed(seed)
    texts = [_garbage(200), b"NAME = 3\n", b"import os\nos.exit(1\n", b"ARGS = [{'name': 'x'}]\nNAME='w'\n"]
    (d / "workload.py").write_bytes(texts[seed])
    r = _run(["workload", "show", str(d)])
    _one_line_error(r, str(d / "workload.py"))


@pytest.mark.parametrize("content,needle", [
    (b"\xff\xfe\x00garbage", "not UTF-8 text"),
    (b"__global__ void k() {}\x00\x01", "NUL bytes"),
])
def test_binary_kernel_sources(tmp_path, content, needle):
    k = tmp_path / "k.cu"
    k.write_bytes(content)
    r = _run(["gate", str(k), "--workload", str(ROOT / "expert_kernels" / "row_sum"), "--db", str(tmp_path / "x.duckdb")])
    _one_line_error(r, needle)
    lib = tmp_path / "y.duckdb"  # an existing database: a missing one is the first thing apply says
    open_store(lib).close()
    r = _run(["apply", "--workload", str(ROOT / "expert_kernels" / "row_sum"), "--start", str(k), "--db", str(lib)])
    _one_line_error(r, needle)


@pytest.mark.parametrize("seed", range(3))
def test_garbage_pipeline_configs(tmp_path, seed):
    RNG.seed(100 + seed)
    p = tmp_path / "pipelines" / "p.toml"
    p.parent.mkdir()
    p.write_bytes([_garbage(120), b"kind = 'mine'\n[[target]]\npaths = 3\n", b"[limits]\nmax_steps = 'x'\n"][seed])
    r = _run(["run", str(p), "--db", str(tmp_path / "x.duckdb")])
    assert r.exit_code == 2 and "Traceback" not in r.output and str(p) in r.output, r.output


def test_garbage_and_foreign_database_files(tmp_path):
    junk = tmp_path / "junk.duckdb"
    junk.write_bytes(_garbage(5000))
    _one_line_error(_run(["skills", "list", "--db", str(junk)]), "is not a DuckDB database")
    foreign = tmp_path / "foreign.duckdb"
    con = duckdb.connect(str(foreign))
    con.execute("CREATE TABLE skills (x INTEGER)")  # a table of ours in another shape, no migration record
    con.close()
    r = _run(["skills", "list", "--db", str(foreign)])
    assert r.exit_code == 2 and "Traceback" not in r.output and str(foreign) in r.output, r.output
    newer = tmp_path / "newer.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", newer)
    con = duckdb.connect(str(newer))
    con.execute("INSERT INTO schema_migrations VALUES ('9999_from_the_future', now())")
    con.close()
    r = _run(["skills", "list", "--db", str(newer)])
    assert r.exit_code == 2 and "Traceback" not in r.output and "9999_from_the_future" in r.output, r.output


def test_an_older_database_is_migrated_by_a_writing_command_and_keeps_its_data(tmp_path):
    old = tmp_path / "old.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", old)
    con = duckdb.connect(str(old))
    # back to the schema of 0002: the tables of every later migration go
    con.execute("DROP TABLE heldout_results")
    con.execute("DROP TABLE heldout_runs")
    con.execute("DROP TABLE pipeline_runs")
    con.execute("DROP TABLE apply_steps")
    con.execute("DROP TABLE apply_runs")
    con.execute("DELETE FROM schema_migrations WHERE name >= '0003'")
    n = con.execute("SELECT count(*) FROM skills").fetchone()[0]
    con.close()
    before = old.read_bytes()
    r = _run(["skills", "list", "--db", str(old), "--json"])  # a reading command migrates nothing
    assert r.exit_code == 2 and "0003_apply_runs" in r.output and "evals import" in r.output, r.output
    assert old.read_bytes() == before
    empty = tmp_path / "none.jsonl"
    empty.write_text("")
    r = _run(["evals", "import", str(empty), "--db", str(old)])  # a writing one brings it up to date
    assert r.exit_code == 0, r.output
    r = _run(["skills", "list", "--db", str(old), "--json"])
    assert r.exit_code == 0, r.output
    r = _run(["apply", "list", "--db", str(old), "--json"])
    assert r.exit_code == 0 and r.output.strip() == "[]"
    con = duckdb.connect(str(old))
    assert con.execute("SELECT count(*) FROM skills").fetchone()[0] == n
    con.close()


def test_debug_shows_the_traceback(tmp_path):
    d = tmp_path / "wl"
    d.mkdir()
    (d / "workload.py").write_text("def (:\n")
    r = _run(["--debug", "workload", "show", str(d)])
    assert r.exit_code != 0 and r.exception is not None  # raised, not turned into a one-line message
