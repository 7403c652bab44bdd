"""The evaluation repository: kernels, workloads and the evaluations the gate stored for them.

JSON columns hold ``json.dumps(obj, sort_keys=True)``; records come back with those columns
decoded, in the same shape ``put_evaluation`` takes (klineage.records.EvaluationRecord describes
it, with the metrics each status may carry).
"""
from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from klineage.errors import StoreError
from klineage.store.base import Repository, dumps, format_time, now, parse_time

RECORD_KEYS = ("eval_key", "kernel_hash", "workload_hash", "workload_name", "request", "status",
               "result", "env", "gpu", "toolchain", "recorded_at")
_OPTIONAL_KEYS = {"recorded_at"}
_TEXT_KEYS = ("eval_key", "kernel_hash", "workload_hash", "workload_name", "status")
_EVAL_COLUMNS = ("eval_key", "kernel_hash", "workload_hash", "workload_name", "request_json", "status",
                 "result_json", "env_json", "gpu", "toolchain_json", "recorded_at")
def _umask() -> int:
    """The process's file-creation mask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _validate_record(record: Any) -> dict:
    """Check a record's keys and value types; returns the row values by column name."""
    if not isinstance(record, dict):
        raise StoreError(f"an evaluation record must be a dict, got {type(record).__name__}: "
                         f"pass a dict with keys {', '.join(RECORD_KEYS)}")
    unknown = sorted(set(record) - set(RECORD_KEYS))
    missing = [k for k in RECORD_KEYS if k not in record and k not in _OPTIONAL_KEYS]
    if unknown or missing:
        parts = []
        if unknown:
            parts.append(f"unknown keys {', '.join(map(str, unknown))}")
        if missing:
            parts.append(f"missing keys {', '.join(missing)}")
        raise StoreError(f"evaluation record has {' and '.join(parts)}: "
                         f"a record has exactly the keys {', '.join(RECORD_KEYS)} (recorded_at optional)")
    for k in _TEXT_KEYS:
        if not isinstance(record[k], str) or not record[k]:
            raise StoreError(f"evaluation record key {k} must be a non-empty string, got {record[k]!r}: fix the record")
    for k in ("request", "result", "env"):
        if not isinstance(record[k], dict):
            raise StoreError(f"evaluation record key {k} must be a dict, got {type(record[k]).__name__}: "
                             "fix the record")
    if record["gpu"] is not None and not isinstance(record["gpu"], str):
        raise StoreError(f"evaluation record key gpu must be a string or None, got {type(record['gpu']).__name__}: "
                         "fix the record")
    if record["toolchain"] is not None and not isinstance(record["toolchain"], dict):
        raise StoreError("evaluation record key toolchain must be a dict or None, got "
                         f"{type(record['toolchain']).__name__}: fix the record")
    recorded = record.get("recorded_at")
    try:
        return {
            "eval_key": record["eval_key"], "kernel_hash": record["kernel_hash"],
            "workload_hash": record["workload_hash"], "workload_name": record["workload_name"],
            "request_json": dumps(record["request"]), "status": record["status"],
            "result_json": dumps(record["result"]), "env_json": dumps(record["env"]),
            "gpu": record["gpu"],
            "toolchain_json": None if record["toolchain"] is None else dumps(record["toolchain"]),
            "recorded_at": now() if recorded is None else parse_time(recorded),
        }
    except (TypeError, ValueError) as e:  # json.dumps of something that is not JSON
        raise StoreError(f"evaluation record {record['eval_key']} holds a value JSON cannot encode ({e}): "
                         "store only JSON-able values (str, int, float, bool, None, list, dict)") from e


def _row_to_record(row: tuple) -> dict:
    r = dict(zip(_EVAL_COLUMNS, row))
    return {
        "eval_key": r["eval_key"], "kernel_hash": r["kernel_hash"], "workload_hash": r["workload_hash"],
        "workload_name": r["workload_name"], "request": json.loads(r["request_json"]), "status": r["status"],
        "result": json.loads(r["result_json"]), "env": json.loads(r["env_json"]), "gpu": r["gpu"],
        "toolchain": None if r["toolchain_json"] is None else json.loads(r["toolchain_json"]),
        "recorded_at": format_time(r["recorded_at"]),
    }


class EvaluationRepository(Repository):
    """Kernels (source by hash), workloads (description by hash) and evaluations (by eval key)."""

    PUBLIC = ("put_kernel", "get_kernel", "put_workload", "get_workload", "put_evaluation", "get_evaluation",
              "evaluated_kernels", "find_evaluations", "evaluation_keys", "export_evaluations",
              "import_evaluations")

    # -- kernels and workloads --------------------------------------------------------------------

    def put_kernel(self, kernel_hash: str, source: str, origin_path: str | Path | None = None) -> bool:
        """Store a kernel's source unless its hash is present; True when inserted now."""
        origin = None if origin_path is None else str(origin_path)
        return self._insert_new("kernels", "kernel_hash", [kernel_hash, source, origin, now()])

    def get_kernel(self, kernel_hash: str) -> dict | None:
        rows = self._query("SELECT kernel_hash, source, origin_path, first_seen FROM kernels WHERE kernel_hash = ?",
                           [kernel_hash])
        if not rows:
            return None
        h, src, origin, seen = rows[0]
        return {"kernel_hash": h, "source": src, "origin_path": origin, "first_seen": format_time(seen)}

    def put_workload(self, workload_hash: str, name: str, spec: dict) -> bool:
        """Store a workload's description unless its hash is present; True when inserted now."""
        if not isinstance(spec, dict):
            raise StoreError(f"workload spec must be a dict, got {type(spec).__name__}: pass Workload.describe()")
        try:
            spec_json = dumps(spec)
        except (TypeError, ValueError) as e:
            raise StoreError(f"workload {name} spec holds a value JSON cannot encode ({e}): "
                             "pass Workload.describe()") from e
        return self._insert_new("workloads", "workload_hash", [workload_hash, name, spec_json, now()])

    def _insert_new(self, table: str, key_column: str, row: list) -> bool:
        """Insert `row` (its first value the key) unless its key is present; True when inserted now."""
        def go(con):
            if con.execute(f"SELECT 1 FROM {table} WHERE {key_column} = ?", [row[0]]).fetchone():
                return False
            con.execute(f"INSERT INTO {table} VALUES ({', '.join('?' * len(row))})", row)
            return True
        return self._write(go)

    def get_workload(self, workload_hash: str) -> dict | None:
        rows = self._query("SELECT workload_hash, name, spec_json, first_seen FROM workloads WHERE workload_hash = ?",
                           [workload_hash])
        if not rows:
            return None
        h, name, spec, seen = rows[0]
        return {"workload_hash": h, "name": name, "spec": json.loads(spec), "first_seen": format_time(seen)}

    # -- evaluations ------------------------------------------------------------------------------

    @staticmethod
    def _put_row(con, row: dict, replace: bool | str) -> bool:
        """replace: False keeps a stored key, True overwrites it, "newer" overwrites it only with a
        later measurement (recorded_at) of the same request."""
        exists = con.execute("SELECT recorded_at FROM evaluations WHERE eval_key = ?", [row["eval_key"]]).fetchone()
        if exists and replace == "newer":
            replace = str(row["recorded_at"]) > str(exists[0])
        if exists and not replace:
            return False
        if exists:
            con.execute("DELETE FROM evaluations WHERE eval_key = ?", [row["eval_key"]])
        con.execute(f"INSERT INTO evaluations ({', '.join(_EVAL_COLUMNS)}) "
                    f"VALUES ({', '.join('?' * len(_EVAL_COLUMNS))})", [row[c] for c in _EVAL_COLUMNS])
        return True

    def put_evaluation(self, record: dict, replace: bool = False) -> bool:
        """Insert one evaluation record; True when written.

        An eval_key already stored is left untouched (returns False) unless `replace` is set, which
        overwrites it (a re-measurement; returns True)."""
        row = _validate_record(record)
        return self._write(lambda con: self._put_row(con, row, replace))

    def get_evaluation(self, eval_key: str) -> dict | None:
        rows = self._query(f"SELECT {', '.join(_EVAL_COLUMNS)} FROM evaluations WHERE eval_key = ?", [eval_key])
        return _row_to_record(rows[0]) if rows else None

    def evaluated_kernels(self) -> set[str]:
        """The hash of every kernel that has at least one stored evaluation."""
        return {h for (h,) in self._query("SELECT DISTINCT kernel_hash FROM evaluations", [])}

    def find_evaluations(self, kernel_hash: str | None = None, workload_hash: str | None = None,
                         request_match: dict | None = None, status: str | None = None,
                         limit: int | None = None) -> list[dict]:
        """Records matching every given filter, newest first (at most `limit` of them).

        `request_match` keeps records whose decoded request holds each of its key/value pairs."""
        where, params = [], []
        for col, val in (("kernel_hash", kernel_hash), ("workload_hash", workload_hash), ("status", status)):
            if val is not None:
                where.append(f"{col} = ?")
                params.append(val)
        sql = (f"SELECT {', '.join(_EVAL_COLUMNS)} FROM evaluations"
               + (f" WHERE {' AND '.join(where)}" if where else "")
               + " ORDER BY recorded_at DESC, eval_key"
               + (f" LIMIT {int(limit)}" if limit is not None and not request_match else ""))
        records = [_row_to_record(r) for r in self._query(sql, params)]
        if request_match:
            # Compare through JSON so a tuple in the match equals the list stored for it.
            want = json.loads(dumps(request_match))
            records = [r for r in records
                       if all(k in r["request"] and r["request"][k] == v for k, v in want.items())]
        return records if limit is None else records[:limit]

    def evaluation_keys(self) -> set[str]:
        """The keys of every stored evaluation."""
        return {k for (k,) in self._query("SELECT eval_key FROM evaluations")}

    def export_evaluations(self, path: str | Path, workload_hashes: list[str] | None = None, progress=None,
                           **filters) -> int:
        """Write the matching records (find_evaluations filters; `workload_hashes`: records of any of
        these workloads) as JSON Lines sorted by eval_key, gzip-compressed when the path ends in .gz;
        returns how many. The file is replaced atomically: a crash leaves the old file or the new.
        `progress(done, total)` is called as records are written."""
        if workload_hashes is None:
            records = self.find_evaluations(**filters)
        else:
            records = [r for h in sorted(set(workload_hashes)) for r in self.find_evaluations(workload_hash=h, **filters)]
        records = sorted(records, key=lambda r: r["eval_key"])
        p = Path(path)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
            try:
                with os.fdopen(fd, "wb") as raw:
                    parts = []
                    for i, r in enumerate(records, 1):
                        parts.append(dumps(r) + "\n")
                        if progress is not None and (i % 500 == 0 or i == len(records)):
                            progress(i, len(records))
                    text = "".join(parts).encode("utf-8")
                    # mtime 0: the same records give the same bytes
                    raw.write(gzip.compress(text, mtime=0) if p.suffix == ".gz" else text)
                    raw.flush()
                    os.fsync(raw.fileno())
                os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it 0600; an export is an ordinary file
                os.replace(tmp, p)
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
        except OSError as e:
            raise StoreError(f"cannot write {p} ({e.strerror or e}): pass another file path") from e
        return len(records)

    def import_evaluations(self, path: str | Path) -> tuple[int, int]:
        """Read JSON Lines records into the database; returns (inserted, skipped as already present).

        Two records of one request key (the same kernel, workload, settings, toolchain and GPU
        measured twice, e.g. by the gate run and by a mining run) keep the later measurement,
        whichever file is imported first, so a replay sees what the latest live run saw.

        The whole file is checked first and written in one transaction: a malformed line raises
        StoreError naming the file and line, and nothing from the file is inserted."""
        p = Path(path)
        try:  # shipped record files are gzip-compressed (.jsonl.gz) to keep the tree small
            text = (gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()).decode("utf-8")
        except (OSError, UnicodeDecodeError, EOFError) as e:
            raise StoreError(f"cannot read {p} ({e}): pass an existing UTF-8 JSON Lines file (.jsonl or .jsonl.gz)") from e
        rows = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise StoreError(f"{p}: line {lineno} is not valid JSON ({e.msg}): fix or remove that line; "
                                 "nothing from this file was imported") from None
            try:
                rows.append(_validate_record(record))
            except StoreError as e:
                raise StoreError(f"{p}: line {lineno}: {e}; nothing from this file was imported") from None

        def go(con):
            ins = skip = 0
            for row in rows:
                if self._put_row(con, row, replace="newer"):
                    ins += 1
                else:
                    skip += 1
            return ins, skip
        return self._write(go)
