"""``open_store`` and ``Store``: the one place that reads and writes the DuckDB database.

Every write runs inside a DuckDB transaction, so a process killed mid-write leaves either the
whole change or none of it. The Store holds the connection; its tables are reached through
repositories (klineage.store.evaluations, .library, .heldout), each over one group of tables and
its records: ``store.evals``, ``store.library``, ``store.applies``, ``store.pipelines``,
``store.heldout``. The Store offers each repository's public methods as its own
(``store.skills()`` is ``store.library.skills()``).
"""
from __future__ import annotations

import atexit
import threading
import weakref
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
from klineage.store import integrity, writer as _writer
from klineage.store.integrity import DamagedDatabaseError, damaged_message

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


def _damaged(text: str) -> bool:
    """Whether a DuckDB error says the file's bytes are wrong (a block checksum, a bad header)."""
    return "Corrupt database file" in text or "checksum" in text.lower()


class MissingDatabaseError(StoreError):
    """The database a command reads (or extends) does not exist; nothing was created. `held_by`: the
    run that is writing it (klineage.store.writer.holder), when one is."""
    held_by: dict | None = None


def open_store(path: str | Path = MEMORY, *, read_only: bool = False, create: bool = True) -> "Store":
    """Open the database at `path` and bring its schema up to date.

    `create`: a missing file is created, with its parent folders (else MissingDatabaseError, and
    nothing is made). `read_only`: the file must exist and is never written, migrations included; a
    database that lacks one is refused with the fix (a writing open upgrades it).

    A writing open of a file takes its writer's lock and writes a working copy that `close()`
    publishes (klineage.store.writer): a reading open meanwhile reads the file as last published, and
    a second writer is refused with the name of the run that holds it."""
    writer = None
    notes: list[str] = []
    real_exists = False
    if str(path) == MEMORY:
        if read_only:
            raise StoreError("an in-memory database cannot be opened read-only: pass a database file")
        target = connect_to = MEMORY
    else:
        p = Path(path).expanduser()
        _check_database_file(p)
        real = p.resolve()
        note = _writer.recover(real)
        if note:
            notes.append(note)
        if not p.exists() and (read_only or not create):
            info = _writer.holder(real)
            if info is not None:
                err = MissingDatabaseError(f"no database at {p} yet: {_writer.held_message(p, info)}, and it appears "
                                           "when that run ends")
                err.held_by = info
                raise err
            raise MissingDatabaseError(f"no database at {p}: pass an existing one (e.g. a copy of "
                                       "skills_db/skills.duckdb)")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create the folder {p.parent} for database {p} ({e.strerror}): "
                             "pass another --db PATH") from e
        target = str(p)
        real_exists = real.exists()
        writer = _writer.share(real) if read_only else _writer.acquire(real)
        if writer is not None:
            notes += writer.notes
            writer.notes = []
        connect_to = str(writer.work) if writer is not None else str(real)
    try:
        con = duckdb.connect(connect_to, read_only=read_only and writer is None)
    except duckdb.Error as e:
        if writer is not None:
            _writer.publish(writer)
        text = str(e)
        if _damaged(text):
            raise DamagedDatabaseError(damaged_message(target, text.splitlines()[0])) from e
        if "lock" in text.lower():
            raise StoreError(f"database {target} is locked by another process ({text}): "
                             "wait for that process to finish, or pass another --db PATH") from e
        if "not a valid DuckDB database" in text:
            raise StoreError(f"{target} is not a DuckDB database: move it away or pass another --db PATH") from e
        raise StoreError(f"cannot open database {target} ({text}): "
                         "check the file and its permissions, or pass another --db PATH") from e
    try:
        if real_exists:
            integrity.check_open(con, real, target)
        if read_only:
            _check_schema(con, target)
        else:
            migrate(con, target)
    except duckdb.Error as e:
        con.close()
        if writer is not None:
            _writer.publish(writer)
        if _damaged(str(e)):
            raise DamagedDatabaseError(damaged_message(target, str(e).splitlines()[0])) from e
        raise StoreError(f"cannot open database {target} ({e}): check the file, or pass another --db PATH") from e
    except BaseException:
        con.close()
        if writer is not None:
            _writer.publish(writer)
        raise
    store = Store(con, target, read_only=read_only)
    store._writer = writer
    store.notes = notes
    return store


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
        self._writer = None  # the writer's lock and working copy of a writing open of a file
        self.notes: list[str] = []  # what the open did besides opening (a killed run's copy published)
        _OPEN.add(self)
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
        """Close the connection; a writing open then publishes its working copy (klineage.store.writer)."""
        with self._lock:
            if self._con is None:
                return
            writer, self._writer = self._writer, None
            try:
                if writer is not None and not self.read_only:
                    try:
                        self._con.execute("CHECKPOINT")
                    except duckdb.Error:
                        pass  # the log is published with the file and replayed on the next open
                self._con.close()
            finally:
                self._con = None
                _OPEN.discard(self)
                if writer is not None:
                    _writer.publish(writer)

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
                if _damaged(str(e)):
                    raise DamagedDatabaseError(damaged_message(self.path, str(e).splitlines()[0])) from e
                raise StoreError(f"database {self.path}: query failed ({e}): "
                                 "check the database file or pass another --db PATH") from e

    # -- inventory --------------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """Row count of each table."""
        return {t: self._query(f"SELECT count(*) FROM {t}")[0][0] for t in _TABLES}


_OPEN: "weakref.WeakSet[Store]" = weakref.WeakSet()


@atexit.register
def close_all() -> None:
    """Close every store still open (at exit: a writing open publishes what it wrote)."""
    for store in list(_OPEN):
        try:
            store.close()
        except Exception:
            pass


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
