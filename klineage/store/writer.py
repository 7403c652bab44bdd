"""One writer per database file, and readers that never wait for it.

A command that writes a database file DB does not write DB itself: it takes the writer's lock
(`DB.lock`, an flock held while it runs, holding the command, its pid and when it started), copies
DB to a working copy beside it (`DB.writing-PID`) and writes there; closing the store publishes the
working copy over DB in one rename. A reading command opens DB as it was last published, however long
a run takes, and a second writer is refused with a message that names the run holding the lock and
for how long it has held it.

A writer killed before it published (SIGKILL, a crash) leaves its working copy, and the lock file
names it: the next open of DB, reading or writing, publishes it when DB is unchanged since that copy
was made, so nothing the killed run committed is lost and a resumed run goes on from it. When DB was
changed meanwhile (by something other than klineage), the copy is kept beside DB as
`DB.unpublished-PID` and the open says so.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import shlex
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from klineage.errors import StoreError

LOCK_SUFFIX = ".lock"
WORK_INFIX = ".writing-"
WAL_SUFFIX = ".wal"


class WriterBusyError(StoreError):
    """Another process holds the database's writer lock (`held_by`: who, klineage.store.writer.holder)."""
    held_by: dict = {}


def lock_path(db: Path) -> Path:
    return db.with_name(db.name + LOCK_SUFFIX)


def _wal(p: Path) -> Path:
    return p.with_name(p.name + WAL_SUFFIX)


def _stat_key(p: Path) -> list[int] | None:
    """What tells whether a file changed: (size, mtime in ns); None when it is not there."""
    try:
        st = p.stat()
    except FileNotFoundError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _command() -> str:
    argv = list(sys.argv)
    if argv and argv[0].endswith(("__main__.py", "/klineage")):
        argv[0] = "klineage"
    return " ".join(shlex.quote(a) for a in argv)[:300]


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def _read_info(fd: int) -> dict:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = os.read(fd, 65536)
        info = json.loads(data.decode() or "{}")
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}


def holder(db: Path) -> dict | None:
    """The run holding DB's writer lock ({pid, command, started, age_s}), or None when no process
    holds it."""
    lp = lock_path(db)
    try:
        fd = os.open(lp, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            info = _read_info(fd)
            info["age_s"] = time.time() - float(info.get("started", time.time()))
            return info
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def held_message(db: Path, info: dict) -> str:
    """Who holds DB's writer lock, in words."""
    what = info.get("command") or "another klineage process"
    return (f"{db} is being written by `{what}` (pid {info.get('pid', '?')}, running for "
            f"{_age(info.get('age_s', 0))})")


@dataclass
class Writer:
    """The writer's lock on one database file and its working copy."""
    db: Path
    work: Path
    fd: int
    users: int = 1
    notes: list[str] = field(default_factory=list)


_HELD: dict[Path, Writer] = {}
_HELD_LOCK = threading.Lock()
_WRITTEN: list[Path] = []  # every database this process opened for writing, in order


def _open_lock(db: Path, blocking: bool) -> int | None:
    """An fd holding DB's lock file exclusively (the file at the path, not an unlinked one), or
    None when another process holds it and `blocking` is False."""
    lp = lock_path(db)
    while True:
        try:
            fd = os.open(lp, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise StoreError(f"cannot create the lock file {lp} ({e.strerror}): check the folder's permissions "
                             "or pass another --db PATH") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            raise StoreError(f"cannot lock {lp} ({e.strerror}): pass a --db on a local file system") from e
        try:
            same = os.fstat(fd).st_ino == os.stat(lp).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the holder before removed it as we opened it: take the new one


def _release(db: Path, fd: int) -> None:
    try:
        os.unlink(lock_path(db))
    except FileNotFoundError:
        pass
    os.close(fd)


def _checkpoint(p: Path) -> None:
    """Fold a killed writer's log into its file (DuckDB replays the committed transactions of the log
    and drops an unfinished one); a file that cannot be opened keeps its log."""
    import duckdb
    try:
        duckdb.connect(str(p)).close()
    except duckdb.Error:
        pass


def _recover(db: Path, fd: int) -> str | None:
    """With DB's lock held: publish the working copy a killed writer left (named in the lock file),
    when DB did not change since it was made; else keep it aside. The line saying what was done."""
    info = _read_info(fd)
    work = info.get("work")
    if not work:
        return None
    w = db.with_name(Path(work).name)
    if not w.exists() or WORK_INFIX not in w.name:
        return None
    if _stat_key(db) == info.get("base"):
        if _wal(w).exists():
            _checkpoint(w)
        if _wal(w).exists():  # a kill mid-transaction: DuckDB replays (or drops) its log on the next open
            os.replace(_wal(w), _wal(db))
        else:
            _wal(db).unlink(missing_ok=True)
        os.replace(w, db)
        return (f"{db}: published what pid {info.get('pid', '?')} (`{info.get('command', '?')}`) wrote before it "
                "was stopped")
    aside = db.with_name(f"{db.name}.unpublished-{info.get('pid', 'x')}")
    os.replace(w, aside)
    if _wal(w).exists():
        os.replace(_wal(w), _wal(aside))
    return (f"{db} changed after pid {info.get('pid', '?')} (`{info.get('command', '?')}`) copied it and that run "
            f"was stopped before it published: its copy is kept as {aside} (open it with --db {aside})")


def recover(db: Path) -> str | None:
    """Publish a killed writer's working copy of DB (see `_recover`) when no process holds DB's lock;
    the line saying what was done, or None."""
    if not lock_path(db).exists():
        return None
    with _HELD_LOCK:
        if db in _HELD:
            return None
    fd = _open_lock(db, blocking=False)
    if fd is None:
        return None
    try:
        return _recover(db, fd)
    finally:
        _release(db, fd)


def share(db: Path) -> Writer | None:
    """This process's writer of DB, when it holds one (a reading open then reads the working copy, what
    this process wrote included), counted as one more user; else None."""
    with _HELD_LOCK:
        w = _HELD.get(db)
        if w is not None:
            w.users += 1
        return w


def acquire(db: Path) -> Writer:
    """Take DB's writer lock and make its working copy (a copy of DB, or nothing when DB is new);
    StoreError naming the run that holds the lock. Opened twice by one process, the second open
    shares the first's working copy."""
    with _HELD_LOCK:
        w = _HELD.get(db)
        if w is not None:
            w.users += 1
            return w
        fd = _open_lock(db, blocking=False)
        if fd is None:
            info = holder(db) or {}
            err = WriterBusyError(f"{held_message(db, info)}: wait for it to end, or pass another --db PATH "
                                  "(reading commands such as `skills list` read the database meanwhile)")
            err.held_by = info
            raise err
        try:
            notes = [n for n in [_recover(db, fd)] if n]
            work = db.with_name(f"{db.name}{WORK_INFIX}{os.getpid()}")
            for stale in (work, _wal(work)):
                stale.unlink(missing_ok=True)
            if db.exists():
                shutil.copyfile(db, work)
                if _wal(db).exists():
                    shutil.copyfile(_wal(db), _wal(work))
            info = {"pid": os.getpid(), "command": _command(), "started": time.time(), "work": work.name,
                    "base": _stat_key(db)}
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, json.dumps(info).encode())
        except BaseException:
            _release(db, fd)
            raise
        w = Writer(db, work, fd, notes=notes)
        _HELD[db] = w
        if db not in _WRITTEN:
            _WRITTEN.append(db)
        return w


def publish(w: Writer) -> None:
    """The store on `w.work` is closed: when no other open of this process uses it, rename it over
    DB and release the lock."""
    with _HELD_LOCK:
        w.users -= 1
        if w.users > 0:
            return
        _HELD.pop(w.db, None)
        try:
            if w.work.exists():
                _wal(w.db).unlink(missing_ok=True)
                if _wal(w.work).exists():
                    os.replace(_wal(w.work), _wal(w.db))
                os.replace(w.work, w.db)
        finally:
            _release(w.db, w.fd)


def written() -> list[Path]:
    """The databases this process opened for writing (what an interrupted command may have stored in)."""
    with _HELD_LOCK:
        return list(_WRITTEN)


def held() -> list[Writer]:
    with _HELD_LOCK:
        return list(_HELD.values())

