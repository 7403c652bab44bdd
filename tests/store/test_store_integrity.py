"""A damaged database never reads as fine: 200 KB of random bytes written into a copy of the shipped
library make every command that opens it refuse it with the fix (DuckDB's block checksums, read over
every column of every table on the first open of each version of the file), unless they fell on
free blocks and every row reads back the same; `klineage doctor` checks a database's blocks, its rows
against each other and its evaluations against the record files."""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from klineage.cli import main
from klineage.store import DamagedDatabaseError, open_store
from klineage.store.integrity import verified

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "skills_db" / "skills.duckdb"
BLOCK = 262144
DAMAGE = 200 * 1024


def _copy(tmp_path: Path, name: str = "lib.duckdb") -> Path:
    db = tmp_path / name
    shutil.copyfile(SHIPPED, db)
    return db


def _damage(db: Path, offset: int, seed: int = 0) -> None:
    with open(db, "r+b") as f:
        f.seek(offset)
        f.write(random.Random(seed).randbytes(DAMAGE))


def _dump(db: Path) -> str:
    with open_store(db, read_only=True) as s:
        return json.dumps([s.canonical_dump(), s._query("SELECT eval_key, result_json FROM evaluations ORDER BY 1")],
                          sort_keys=True, default=str)


def _used_block_offsets(db: Path) -> dict[str, int]:
    """A file offset inside a block each of these tables uses."""
    out = {}
    with open_store(db, read_only=True) as s:
        for t in ("evaluations", "skills", "lineages", "transitions"):
            (b,) = s._query(f"SELECT max(block_id) FROM pragma_storage_info('{t}') WHERE block_id >= 0")[0]
            out[t] = 3 * 4096 + b * BLOCK + 1000
    return out


@pytest.mark.parametrize("args", [["skills", "list"], ["skills", "stats"], ["skills", "show", "wgmma"],
                                  ["lineage", "list"], ["evals", "list", "--limit", "1"]])
def test_damage_in_any_table_is_refused_by_every_reading_command(tmp_path, args):
    for i, (table, offset) in enumerate(_used_block_offsets(_copy(tmp_path, "probe.duckdb")).items()):
        db = _copy(tmp_path, f"{table}.duckdb")
        _damage(db, offset, seed=i)
        r = CliRunner().invoke(main, [*args, "--db", str(db)])
        assert r.exit_code == 2, (table, r.output)
        assert f"database {db} is damaged" in r.output and "Corrupt database file" in r.output, r.output
        assert "restore it from a copy, or rebuild it" in r.output and "klineage doctor" in r.output


def test_random_damage_is_refused_or_changes_nothing(tmp_path):
    want = _dump(SHIPPED)
    size = SHIPPED.stat().st_size
    rng = random.Random(42)
    refused = 0
    for i in range(10):
        db = _copy(tmp_path, f"d{i}.duckdb")
        _damage(db, rng.randrange(0, size - DAMAGE), seed=i)
        try:
            got = _dump(db)
        except DamagedDatabaseError:
            refused += 1
            continue
        assert got == want, f"damage {i} read as fine but the rows differ"
    assert refused >= 5, refused


def test_a_scanned_version_is_not_scanned_again_and_a_changed_one_is(tmp_path):
    db = _copy(tmp_path)
    open_store(db, read_only=True).close()
    assert verified(db.resolve())
    _damage(db, _used_block_offsets(_copy(tmp_path, "probe.duckdb"))["skills"])
    assert not verified(db.resolve())
    with pytest.raises(DamagedDatabaseError):
        open_store(db, read_only=True)


def test_doctor_passes_a_whole_library_and_names_what_is_wrong(tmp_path):
    db = _copy(tmp_path)
    r = CliRunner().invoke(main, ["doctor", "--db", str(db)])
    assert r.exit_code == 0, r.output
    assert "whole: every check passed" in r.output and "0 differ" in r.output
    with open_store(db) as s:  # a card edited behind the store's back, an evaluation's result changed
        sid, card = s._query("SELECT skill_id, card_json FROM skills ORDER BY skill_id LIMIT 1")[0]
        s.con.execute("UPDATE skills SET card_json = ? WHERE skill_id = ?",
                      [json.dumps({**json.loads(card), "name": "renamed/elsewhere"}), sid])
        key, res = s._query("SELECT eval_key, result_json FROM evaluations WHERE status = 'PASSED' LIMIT 1")[0]
        s.con.execute("UPDATE evaluations SET result_json = ? WHERE eval_key = ?",
                      [json.dumps({**json.loads(res), "edited": True}), key])
    r = CliRunner().invoke(main, ["doctor", "--db", str(db), "--json"])
    assert r.exit_code == 1
    rep = json.loads(r.output)
    failed = [c for c in rep["content"] if not c["ok"]]
    assert [c["check"].split(":")[0] for c in failed] == ["skills"] and sid in failed[0]["problems"][0]
    assert rep["records"]["differing"] == 1 and rep["records"]["differ"][0].startswith(key[:16])


def test_doctor_reports_damaged_blocks_table_by_table(tmp_path):
    db = _copy(tmp_path)
    _damage(db, _used_block_offsets(_copy(tmp_path, "probe.duckdb"))["evaluations"])
    r = CliRunner().invoke(main, ["doctor", "--db", str(db)])
    assert r.exit_code == 1
    assert "evaluations: Corrupt database file" in r.output and "restore it from a copy" in r.output
