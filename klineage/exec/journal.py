"""One database writer for concurrent work: each unit of work (a walk, an analysed step) writes into a
journal of its own, and the driver replays the journals into the database in unit order.

`JournalStore` stands in for a `klineage.store` Store. Outside a unit (the driver's own thread) every
call goes straight to the database. Inside a unit, `put_kernel`, `put_workload` and
`put_evaluation` are kept in that unit's journal and in a scratch in-memory store, so every unit
sees what the others have evaluated (as it would have seen it in the database of a serial run),
and `commit(unit)` writes the journal to the database. Committing in unit order gives the serial
run's sequence of writes, whatever order the units finished in. Reads merge the database with the
scratch store. Other writes (lineages, skills, apply runs) are the driver's and pass through.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

_JOURNALED = ("put_kernel", "put_workload", "put_evaluation")


class JournalStore:
    def __init__(self, base):
        from klineage.store import open_store
        self._base = base
        self._scratch = open_store()  # in memory: what units wrote and the database has not yet
        self._journals: dict[object, list] = {}
        self._lock = threading.Lock()
        self._local = threading.local()
        self.path = getattr(base, "path", None)

    def __getattr__(self, name):  # everything not journaled is the database's own
        return getattr(self._base, name)

    # -- units -------------------------------------------------------------------------------------
    @contextmanager
    def unit(self, key):
        """Route this thread's writes into the journal of `key` for the block."""
        with self._lock:
            self._journals.setdefault(key, [])
        prev = getattr(self._local, "key", None)
        self._local.key = key
        try:
            yield
        finally:
            self._local.key = prev

    def current(self):
        return getattr(self._local, "key", None)

    def commit(self, key) -> int:
        """Write the journal of `key` to the database, in the order it was written; returns how many
        writes. Writes are idempotent (content-addressed rows), so a write a unit repeats is kept once."""
        with self._lock:
            ops = self._journals.pop(key, [])
        for op, args, kw in ops:
            getattr(self._base, op)(*args, **kw)
        return len(ops)

    def commit_all(self) -> int:
        """Commit every open journal, in key order (after an interruption: keep what was measured)."""
        with self._lock:
            keys = sorted(self._journals, key=repr)
        return sum(self.commit(k) for k in keys)

    def close_scratch(self) -> None:
        self._scratch.close()

    # -- journaled writes ----------------------------------------------------------------------------
    def _write(self, op: str, *args, **kw):
        key = self.current()
        if key is None:
            return getattr(self._base, op)(*args, **kw)
        with self._lock:
            getattr(self._scratch, op)(*args, **kw)
            self._journals.setdefault(key, []).append((op, args, kw))
        return True

    def put_kernel(self, *args, **kw):
        return self._write("put_kernel", *args, **kw)

    def put_workload(self, *args, **kw):
        return self._write("put_workload", *args, **kw)

    def put_evaluation(self, *args, **kw):
        return self._write("put_evaluation", *args, **kw)

    # -- reads over both ---------------------------------------------------------------------------
    def find_evaluations(self, **filters) -> list[dict]:
        """The database's matching records and the units' not yet committed ones, newest first (the
        database's order), a key present in both taken from the database."""
        base = self._base.find_evaluations(**filters)
        with self._lock:
            extra = self._scratch.find_evaluations(**filters)
        if not extra:
            return base
        have = {r["eval_key"] for r in base}
        merged = base + [r for r in extra if r["eval_key"] not in have]
        merged.sort(key=lambda r: r["eval_key"])
        merged.sort(key=lambda r: str(r.get("recorded_at")), reverse=True)
        return merged

    def get_kernel(self, kernel_hash: str):
        found = self._base.get_kernel(kernel_hash)
        if found is None:
            with self._lock:
                found = self._scratch.get_kernel(kernel_hash)
        return found

    def get_evaluation(self, eval_key: str):
        found = self._base.get_evaluation(eval_key)
        if found is None:
            with self._lock:
                found = self._scratch.get_evaluation(eval_key)
        return found
