"""Whether a database file is whole: DuckDB's block checksums over every stored block, and the
content checks of `klineage doctor`.

DuckDB checks a block's checksum when it reads it, so a query reads as fine when the damage sits in
blocks it does not touch (another table, a column it does not select). `scan` reads every column of
every table, so every block in use is read and checked. Every open of a file runs it once per version
of the file (its size, modification time and inode, remembered under $KLINEAGE_HOME), so a damaged
file is refused with the fix before a command reads part of it as fine; `doctor` always runs it, and
then checks the rows against each other and against the recorded evaluations they came from.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import duckdb

from klineage import settings
from klineage.errors import StoreError

_CACHE_NAME = "verified-databases.json"
_CACHE_MAX = 256
_CACHE_LOCK = threading.Lock()


class DamagedDatabaseError(StoreError):
    """A database file whose stored blocks fail DuckDB's checksums: input the command cannot use (exit 2)."""


def damaged_message(path: str, problem: str) -> str:
    return (f"database {path} is damaged ({problem}): nothing read from it can be trusted; restore it from a copy, "
            "or rebuild it (klineage run pipelines/mine.toml --replay --db NEW.duckdb); `klineage doctor --db "
            f"{path}` lists every table it can and cannot read")


def tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
                                      "ORDER BY table_name").fetchall()]


def scan(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Read every column of every table (every stored block, with its checksum); {table: the error}
    for those that cannot be read, {} for a whole database."""
    problems = {}
    try:
        names = tables(con)
    except duckdb.Error as e:
        return {"<catalog>": short_error(e)}
    for t in names:
        try:
            cols = [c for (c,) in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = ? "
                                              "AND database_name = current_database() ORDER BY column_index",
                                              [t]).fetchall()]
            # length of every value as text: each column's data, validity and string blocks are read
            expr = ", ".join(f'sum(length(CAST("{c}" AS VARCHAR)))' for c in cols) or "count(*)"
            con.execute(f'SELECT count(*), {expr} FROM "{t}"').fetchall()
        except duckdb.Error as e:
            problems[t] = short_error(e)
    return problems


def short_error(e: Exception) -> str:
    """The first line of an error, at most 240 characters."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:240]


def _cache_path() -> Path:
    return settings.data_dir() / _CACHE_NAME


def _version(path: Path) -> list[int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _load_cache() -> dict:
    try:
        data = json.loads(_cache_path().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def verified(path: Path) -> bool:
    """Whether this version of the file was scanned whole before."""
    v = _version(path)
    return v is not None and _load_cache().get(str(path)) == v


def remember(path: Path) -> None:
    """Note this version of the file as scanned whole (best effort: a cache that cannot be written
    only means the next open scans again)."""
    v = _version(path)
    if v is None:
        return
    with _CACHE_LOCK:
        data = _load_cache()
        data.pop(str(path), None)
        data[str(path)] = v
        while len(data) > _CACHE_MAX:
            data.pop(next(iter(data)))
        cache = _cache_path()
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            part = cache.with_name(f"{cache.name}.{os.getpid()}.{threading.get_ident()}")
            part.write_text(json.dumps(data))
            os.replace(part, cache)
        except OSError:
            pass


def check_open(con: duckdb.DuckDBPyConnection, path: Path, shown: str) -> None:
    """On opening a file: scan it when this version of it was not scanned before; DamagedDatabaseError
    naming the fix when a block fails its checksum."""
    if verified(path):
        return
    problems = scan(con)
    if problems:
        t, why = next(iter(problems.items()))
        more = f" and {len(problems) - 1} more tables" if len(problems) > 1 else ""
        raise DamagedDatabaseError(damaged_message(shown, f"table {t}{more}: {why}"))
    remember(path)


# -- doctor -------------------------------------------------------------------------------------------

def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def content_checks(store) -> list[dict]:
    """The rows checked against each other: {check, ok, checked, problems (at most 20 named), failed}
    per check. Run on a database whose blocks all read (`scan` found nothing)."""
    from klineage.records import SkillCard
    q = store._query
    out = []

    def add(check: str, checked: int, bad: list[str]):
        out.append({"check": check, "ok": not bad, "checked": checked, "failed": len(bad), "problems": bad[:20]})

    kernels = q("SELECT kernel_hash, source FROM kernels")
    add("kernels: each source hashes to its kernel hash", len(kernels),
        [h for h, src in kernels if _sha(src) != h])
    known_kernels = {h for h, _ in kernels}
    evals = q("SELECT eval_key, kernel_hash, request_json, result_json, env_json FROM evaluations")
    bad = []
    for key, kh, *docs in evals:
        try:
            for d in docs:
                json.loads(d)
        except ValueError:
            bad.append(f"{key}: a JSON column does not parse")
    add("evaluations: every JSON column parses", len(evals), bad)
    eval_keys = {k for k, *_ in evals}
    trans = q("SELECT transition_id, richer_hash, simpler_hash, eval_richer, eval_simpler, eval_rederived FROM transitions")
    bad = []
    for tid, rh, sh, *ek in trans:
        gone = [h[:12] for h in (rh, sh) if h not in known_kernels] + [k[:12] for k in ek if k and k not in eval_keys]
        if gone:
            bad.append(f"transition {tid}: names {', '.join(gone)}, which the database does not hold")
    add("transitions: their kernels and evaluations are stored", len(trans), bad)
    tids = {t for t, *_ in trans}
    skills = q("SELECT skill_id, name, mechanism, card_json FROM skills")
    bad = []
    for sid, name, mech, card_json in skills:
        try:
            card = SkillCard.model_validate_json(card_json)
        except Exception as e:  # a pydantic ValidationError or a JSON error: the card is not a card
            bad.append(f"skill {sid}: its card does not read as a SkillCard ({short_error(e)})")
            continue
        if (card.skill_id, card.name, card.mechanism) != (sid, name, mech):
            bad.append(f"skill {sid}: the row says {name} / {mech}, its card {card.name} / {card.mechanism}")
        missing = [t for t in card.evidence if t not in tids]
        if missing:
            bad.append(f"skill {sid} ({name}): evidence transitions {', '.join(missing[:3])} are not stored")
    add("skills: each card reads, matches its row and names stored transitions", len(skills), bad)
    return out


def against_records(store, files: list[Path]) -> dict:
    """Every stored evaluation that a record file also holds, compared with the record: {files,
    compared, differ (at most 20 named), differing}."""
    by_key = {}
    for f in files:
        import gzip
        try:
            text = (gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_bytes()).decode()
        except (OSError, EOFError, UnicodeDecodeError) as e:
            raise StoreError(f"cannot read the record file {f} ({e}): pass record files (.jsonl, .jsonl.gz)") from None
        for line in text.splitlines():
            if line.strip():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and "eval_key" in rec:
                    by_key[rec["eval_key"]] = rec
    compared, differ = 0, []
    for key, status, req, res, env in store._query(
            "SELECT eval_key, status, request_json, result_json, env_json FROM evaluations"):
        rec = by_key.get(key)
        if rec is None:
            continue
        compared += 1
        fields = [name for name, a, b in (("status", status, rec.get("status")),
                                          ("request", json.loads(req), rec.get("request")),
                                          ("result", json.loads(res), rec.get("result")),
                                          ("env", json.loads(env), rec.get("env"))) if a != b]
        if fields:
            differ.append(f"{key[:16]}: {', '.join(fields)} differ from the record")
    return {"files": [str(f) for f in files], "compared": compared, "differing": len(differ), "differ": differ[:20]}

