"""``open_store`` and ``Store``: the one place that reads and writes the DuckDB database.

Every write runs inside a DuckDB transaction, so a process killed mid-write leaves either the
whole change or none of it. The Store holds the connection; its tables are reached through
repositories (klineage.store.evaluations, .library, .heldout), each over one group of tables and
its records: ``store.evals``, ``store.library``, ``store.applies``, ``store.pipelines``,
``store.heldout``. The Store offers each repository's public methods as its own
(``store.skills()`` is ``store.library.skills()``).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import duckdb

from klineage.errors import StoreError
from klineage.store.base import Repository
from klineage.store.evaluations import EvaluationRepository
from klineage.store.heldout import HeldoutRepository
from klineage.store.library import ApplyRepository, LibraryRepository, PipelineRunRepository
from klineage.store.migrations import migrate, pending

MEMORY = ":memory:"
# A DuckDB file carries this magic at bytes 8..12 of its main header.
_MAGIC = b"DUCK"
_MAGIC_AT = 8

_TABLES = ("schema_migrations", "kernels", "workloads", "evaluations", "lineages", "states", "transitions",
           "rejections", "skills", "skill_evidence")


def _check_database_file(path: Path) -> None:
    """Refuse, without touching it, a path that exists but is not a DuckDB database file."""
    if not path.exists():
        return
    if path.is_dir():
        raise StoreError(f"{path} is a directory, not a DuckDB database: pass a file path with --db PATH")
    try:
        with open(path, "rb") as f:
            head = f.read(_MAGIC_AT + len(_MAGIC))
    except OSError as e:
        raise StoreError(f"cannot read {path} ({e.strerror}): fix its permissions or pass another --db PATH") from e
    if head[_MAGIC_AT:_MAGIC_AT + len(_MAGIC)] != _MAGIC:
        raise StoreError(f"{path} is not a DuckDB database: move it away or pass another --db PATH")


class MissingDatabaseError(StoreError):
    """The database a command reads (or extends) does not exist; nothing was created."""


def open_store(path: str | Path = MEMORY, *, read_only: bool = False, create: bool = True) -> "Store":
    """Open the database at `path` and bring its schema up to date.

    `create`: a missing file is created, with its parent folders (else MissingDatabaseError, and
    nothing is made). `read_only`: the file must exist and is never written, migrations included; a
    database that lacks one is refused with the fix (a writing open upgrades it)."""
    if str(path) == MEMORY:
        if read_only:
            raise StoreError("an in-memory database cannot be opened read-only: pass a database file")
        target = MEMORY
    else:
        p = Path(path).expanduser()
        _check_database_file(p)
        if not p.exists() and (read_only or not create):
            raise MissingDatabaseError(f"no database at {p}: pass an existing one (e.g. a copy of "
                                       "skills_db/skills.duckdb)")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create the folder {p.parent} for database {p} ({e.strerror}): "
                             "pass another --db PATH") from e
        target = str(p)
    try:
        con = duckdb.connect(target, read_only=read_only)
    except duckdb.Error as e:
        text = str(e)
        if "lock" in text.lower():
            raise StoreError(f"database {target} is locked by another process ({text}): "
                             "wait for that klineage process to finish, or pass another --db PATH") from e
        if "not a valid DuckDB database" in text:
            raise StoreError(f"{target} is not a DuckDB database: move it away or pass another --db PATH") from e
        raise StoreError(f"cannot open database {target} ({text}): "
                         "check the file and its permissions, or pass another --db PATH") from e
    try:
        if read_only:
            _check_schema(con, target)
        else:
            migrate(con, target)
    except BaseException:
        con.close()
        raise
    return Store(con, target, read_only=read_only)


def _check_schema(con: duckdb.DuckDBPyConnection, path: str) -> None:
    """A read-only open runs no migration: refuse a database whose schema is not the newest."""
    missing = pending(con, path)
    if missing:
        raise StoreError(f"database {path} lacks schema migration {', '.join(missing)} (written by an older "
                         "klineage) and this command only reads: a command that writes to it (klineage mine, run, "
                         "apply, evals import) upgrades it first; copy it before if the original must stay as it is")


# the repositories of a Store, by the attribute that holds each
REPOSITORIES: dict[str, type[Repository]] = {
    "evals": EvaluationRepository, "library": LibraryRepository, "applies": ApplyRepository,
    "pipelines": PipelineRunRepository, "heldout": HeldoutRepository,
}


class Store:
    """Kernels, workloads, evaluations, the skill library and the runs over it, in one DuckDB
    database. Make one with ``open_store``."""

    evals: EvaluationRepository
    library: LibraryRepository
    applies: ApplyRepository
    pipelines: PipelineRunRepository
    heldout: HeldoutRepository

    def __init__(self, con: duckdb.DuckDBPyConnection, path: str = MEMORY, read_only: bool = False):
        self._con: duckdb.DuckDBPyConnection | None = con
        self.path = path
        self.read_only = read_only
        self._lock = threading.RLock()  # one DuckDB connection must not run two statements at once
        for attr, repo in REPOSITORIES.items():
            setattr(self, attr, repo(self))

    # -- plumbing ---------------------------------------------------------------------------------

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.path!r}{'' if self._con else ', closed'})"

    def close(self) -> None:
        with self._lock:
            if self._con is not None:
                self._con.close()
                self._con = None

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            raise StoreError(f"database {self.path} is closed: open it again with open_store")
        return self._con

    @contextmanager
    def _transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """BEGIN ... COMMIT around the block; ROLLBACK if it raises (nothing of it is kept)."""
        with self._lock:
            con = self.con
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
            except BaseException:
                try:
                    con.execute("ROLLBACK")
                except duckdb.Error:
                    pass
                raise
            try:
                con.execute("COMMIT")
            except duckdb.Error as e:
                try:
                    con.execute("ROLLBACK")
                except duckdb.Error:
                    pass
                raise StoreError(f"database {self.path}: commit failed ({e}): nothing was written; "
                                 "check the disk and try again") from e

    def _write(self, fn):
        if self.read_only:
            raise StoreError(f"database {self.path} is open read-only: nothing was written "
                             "(open it with a command that writes, on a copy of a shipped library)")
        try:
            with self._transaction() as con:
                return fn(con)
        except duckdb.Error as e:
            raise StoreError(f"database {self.path}: write failed ({e}): nothing was written; "
                             "check the disk and try again") from e

    def _query(self, sql: str, params: list | None = None) -> list[tuple]:
        with self._lock:
            try:
                return self.con.execute(sql, params or []).fetchall()
            except duckdb.Error as e:
                raise StoreError(f"database {self.path}: query failed ({e}): "
                                 "check the database file or pass another --db PATH") from e

    # -- inventory --------------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """Row count of each table."""
        return {t: self._query(f"SELECT count(*) FROM {t}")[0][0] for t in _TABLES}


def _delegate(attr: str, name: str, repo: type[Repository]):
    target = getattr(repo, name)

    def method(self, *args, **kw):
        return getattr(getattr(self, attr), name)(*args, **kw)
    method.__name__, method.__qualname__, method.__doc__ = name, f"Store.{name}", target.__doc__
    return method


for _attr, _repo in REPOSITORIES.items():
    for _name in _repo.PUBLIC:
        assert not hasattr(Store, _name), _name  # one owner for each public method
        setattr(Store, _name, _delegate(_attr, _name, _repo))
