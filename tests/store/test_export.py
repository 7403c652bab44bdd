"""`klineage skills export --format parquet`: one row per skill, written through the store's export."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
from click.testing import CliRunner

from klineage.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_parquet_export_has_one_row_per_skill(tmp_path):
    db = tmp_path / "lib.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)  # never the shipped file itself
    out = tmp_path / "out" / "skills.parquet"
    r = CliRunner().invoke(main, ["skills", "export", "--db", str(db), "--format", "parquet", "--out", str(out)])
    assert r.exit_code == 0, r.output
    listed = json.loads(CliRunner().invoke(main, ["skills", "list", "--db", str(db), "--json"]).output)
    assert r.output == f"wrote {len(listed)} skills to {out}\n"
    rows = duckdb.connect().execute(f"SELECT skill_id, name, card_json FROM '{out.as_posix()}' ORDER BY skill_id").fetchall()
    assert sorted(c["skill_id"] for c in listed) == [row[0] for row in rows]
    assert all(json.loads(row[2])["skill_id"] == row[0] for row in rows)
    assert not out.with_name(out.name + ".tmp").exists()
    again = CliRunner().invoke(main, ["skills", "export", "--db", str(db), "--format", "parquet", "--out", str(out)])
    assert again.exit_code == 2 and "--force" in again.output
