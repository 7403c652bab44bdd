"""Exports of the library to files other tools read (DuckDB writes the Parquet)."""
from __future__ import annotations

import json
from pathlib import Path

import duckdb


def write_parquet(skills: list[dict], out: Path) -> int:
    """One row per skill: id, name, mechanism, median speedup, admission status, risks, the card as
    JSON and as markdown. Written to a temporary file first, then moved onto `out`; the row count."""
    out.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute("CREATE TABLE s (skill_id TEXT, name TEXT, mechanism TEXT, median_speedup DOUBLE, "
                "admission TEXT, risks INTEGER, card_json TEXT, card_md TEXT)")
    for s in skills:
        c = s["card"]
        con.execute("INSERT INTO s VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [s["skill_id"], s["name"], s["mechanism"], (c.get("effects") or {}).get("median_speedup"),
                     (c.get("admission") or {}).get("status"), len(c.get("risks") or []),
                     json.dumps(c, sort_keys=True), s["card_md"]])
    tmp = out.with_name(out.name + ".tmp")
    con.execute(f"COPY s TO '{tmp.as_posix()}' (FORMAT PARQUET)")
    con.close()
    tmp.replace(out)
    return len(skills)
