"""What every concurrent executor shares: units of work run in driver threads, one at a time in
Python, overlapping only where they wait (nvcc, a GPU, a remote task).

Units hold a *baton* (one lock) while they run mining code and hand it over whenever they block in
the executor: a compile, a live gate evaluation, a claim on a request another unit is evaluating.
So the mining code (tree-sitter parsers, caches, probe files) runs exactly as single-threaded code
does, and what overlaps is the work the executor sends off: nvcc on the CPU pool, kernels on the
GPUs, tasks on a cluster. Each unit writes into a journal (`klineage.exec.journal`) and the driver
commits the journals in unit order, before it hands a unit's result on: the database is written
by one writer, in the order a serial run writes it.
"""
from __future__ import annotations

import hashlib
import itertools
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

from klineage.errors import KLineageError


class ExecutorError(KLineageError):
    """An executor that cannot start or was asked for something it cannot do; the message says the fix."""
    exit_code = 2


class ExecutorClosed(ExecutorError):
    """Work sent to an executor after close() (a run that was interrupted)."""


class _Baton:
    """One lock that units hold while they run Python, released around every blocking wait."""

    def __init__(self):
        self._lock = threading.Lock()
        self._local = threading.local()

    def held(self) -> bool:
        return getattr(self._local, "held", False)

    @contextmanager
    def hold(self):
        self._lock.acquire()
        self._local.held = True
        try:
            yield
        finally:
            self._local.held = False
            self._lock.release()

    @contextmanager
    def released(self):
        """Give the baton up for the block if this thread holds it (a no-op elsewhere)."""
        if not self.held():
            yield
            return
        self._local.held = False
        self._lock.release()
        try:
            yield
        finally:
            self._lock.acquire()
            self._local.held = True


class Executor:
    """Base of the concurrent executors (`local`, `ray`). The serial path uses none: the gate
    compiles and evaluates in the calling process, and mining runs its loops as plain loops."""

    name = "base"

    def __init__(self, units: int | None = None):
        self.units = max(1, units or 1)
        self._baton = _Baton()
        self._claims: dict[object, threading.RLock] = {}
        self._claims_lock = threading.Lock()
        self._groups = itertools.count(1)
        self._journal = None
        self._closed = False
        self._t0 = time.perf_counter()
        self._stats_lock = threading.Lock()
        self.counters = {"compile_requests": 0, "compile_busy_s": 0.0, "live_evaluations": 0, "gate_busy_s": 0.0,
                         "units_run": 0}

    # -- what a backend provides ----------------------------------------------------------------------
    def compile(self, source: str, arch: str, flags: tuple[str, ...]):
        """A klineage.gate.compile.CompileResult for `source` (never raises for a bad kernel)."""
        raise NotImplementedError

    def evaluate_live(self, source: str, compiled, payload: dict, group: str, flags: tuple[str, ...],
                      stall_s: float, total_s: float) -> dict:
        """The gate worker's raw result for one live evaluation, with "env" filled in. Raises
        NoDeviceError where no GPU can take it."""
        raise NotImplementedError

    def release(self, group: str) -> None:
        """Close the gate workers of `group` (a timing round's fresh workers)."""

    def close(self) -> None:
        self._closed = True

    def describe(self) -> dict:
        return {"executor": self.name, "units": self.units}

    # -- shared machinery -----------------------------------------------------------------------------
    def new_group(self) -> str:
        """A fresh gate-worker group: its evaluations run in worker processes of their own."""
        return f"g{next(self._groups)}"

    def check_open(self) -> None:
        if self._closed:
            raise ExecutorClosed(f"the {self.name} executor was closed: the run was interrupted")

    @contextmanager
    def blocking(self):
        """Wrap a wait (nvcc, a GPU, a remote result) so other units run meanwhile."""
        with self._baton.released():
            yield

    @contextmanager
    def claim(self, key):
        """Hold `key` for the block: a second unit claiming the same key waits for the first (so an
        evaluation or probe run in flight is done once, and the second finds it stored)."""
        with self._claims_lock:
            lock = self._claims.setdefault(key, threading.RLock())
        with self.blocking():
            lock.acquire()
        try:
            yield
        finally:
            lock.release()

    def bind(self, gate):
        """A gate like `gate` whose compiles and live evaluations go through this executor and whose
        database writes go through a journal of `gate.store` (committed by map(), in unit order)."""
        from klineage.exec.journal import JournalStore
        if gate.store is not None and (self._journal is None or self._journal._base is not gate.store):
            self._journal = JournalStore(gate.store)
        return gate.through(self, self._journal if gate.store is not None else None)

    def map(self, fn: Callable, items: Iterable, sequential: bool = False) -> Iterator:
        """fn(item) for each item, run as concurrent units; yields the results in input order, each
        after its unit's journal is committed. An exception in a unit is raised at its place in the
        order, after its journal is committed (the writes a serial run would have made before it).
        `sequential`: one unit at a time (still through the executor's pools)."""
        items = list(items)
        if self._baton.held() or (self._journal is not None and self._journal.current() is not None):
            yield from (fn(x) for x in items)  # already inside a unit: a plain loop in that unit
            return
        journal = self._journal
        tag = object()

        def run(i, item):
            self.check_open()
            with self._baton.hold():
                if journal is None:
                    return fn(item)
                with journal.unit((id(tag), i)):
                    return fn(item)

        pool = ThreadPoolExecutor(max_workers=1 if sequential else min(self.units, max(1, len(items))),
                                  thread_name_prefix=f"klineage-{self.name}-unit")
        futures = [pool.submit(run, i, x) for i, x in enumerate(items)]
        with self._stats_lock:
            self.counters["units_run"] += len(items)
        done = 0
        try:
            for i, fut in enumerate(futures):
                try:
                    res = fut.result()
                finally:
                    if journal is not None:
                        journal.commit((id(tag), i))
                done = i + 1
                yield res
        finally:
            if done < len(futures):  # interrupted or failed: stop what has not started, keep what was measured
                for f in futures:
                    f.cancel()
                if journal is not None:
                    for i in range(done, len(futures)):
                        if futures[i].done():
                            journal.commit((id(tag), i))
            pool.shutdown(wait=done == len(futures), cancel_futures=True)

    def commit_pending(self) -> int:
        """Commit whatever units still hold in journals (after an interruption)."""
        return self._journal.commit_all() if self._journal is not None else 0

    def _count(self, **kw) -> None:
        with self._stats_lock:
            for k, v in kw.items():
                self.counters[k] = self.counters.get(k, 0) + v

    def stats(self) -> dict:
        """Counters since the executor started: compile requests and busy seconds, live evaluations and
        GPU busy seconds, units run, wall seconds."""
        with self._stats_lock:
            return {**self.counters, "wall_s": time.perf_counter() - self._t0, **self.describe()}


def request_key(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(repr(p).encode())
        h.update(b"\x1f")
    return h.hexdigest()


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
