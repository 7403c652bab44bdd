"""`klineage doctor`: a database file checked whole, read-only (klineage.store.integrity's checks)."""
from __future__ import annotations

from pathlib import Path

import duckdb

from klineage.errors import StoreError
from klineage.store.db import Store
from klineage.store.integrity import against_records, content_checks, remember, scan, short_error, tables
from klineage.store.migrations import pending


def doctor(path: Path, record_files: list[Path]) -> dict:
    """Check a database file: it opens, its schema is current, every stored block reads (DuckDB's
    checksums), its rows agree with each other (content_checks) and its evaluations with the record
    files (against_records). {path, ok, opens, schema, blocks, content, records}; read-only."""
    rep: dict = {"path": str(path), "ok": False, "opens": None, "schema": None, "blocks": {}, "content": [],
                 "records": None}
    p = Path(path)
    if not p.is_file():
        raise StoreError(f"no database at {p}: pass --db with an existing file")
    try:
        con = duckdb.connect(str(p), read_only=True)
    except duckdb.Error as e:
        rep["opens"] = short_error(e)
        return rep
    rep["opens"] = "ok"
    store = Store(con, str(p), read_only=True)
    try:
        try:
            missing = pending(con, str(p))
            rep["schema"] = "current" if not missing else f"lacks migrations {', '.join(missing)}"
        except StoreError as e:
            rep["schema"] = str(e)
        rep["blocks"] = {t: "ok" for t in tables(con)} if not (bad := scan(con)) else {
            **{t: "ok" for t in _safe_tables(con)}, **bad}
        if not bad:
            rep["content"] = content_checks(store)
            rep["records"] = against_records(store, record_files)
        rep["ok"] = (rep["schema"] == "current" and not bad and all(c["ok"] for c in rep["content"])
                     and not (rep["records"] or {}).get("differing"))
        if rep["ok"]:
            remember(p.resolve())
    finally:
        store.close()
    return rep


def _safe_tables(con) -> list[str]:
    try:
        return tables(con)
    except duckdb.Error:
        return []
