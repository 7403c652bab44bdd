"""The serial executor: everything in this process, one thing at a time.

nvcc runs in the calling thread (klineage.gate.compile.compile_kernel, its memory cap and process
group kill included) and each gate-worker group is one klineage.gate.pool.GateWorker, started on its
group's first live evaluation. It is what a Gate without another executor uses, so the gate has one
compile path and one evaluation path whatever runs them; a group released (a timing round's gate
closed) closes its worker.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterable, Iterator

from klineage.errors import NoDeviceError
from klineage.exec.base import Executor
from klineage.gate.compile import compile_kernel

MAIN = "main"


class SerialExecutor(Executor):
    """The executor of the calling process. `worker`: the GateWorker of group MAIN (one a caller
    started or scripted); other groups start their own."""

    name = "serial"

    def __init__(self, worker=None):
        super().__init__(units=1)
        self._workers: dict[str, object] = {} if worker is None else {MAIN: worker}

    def compile(self, source: str, arch: str, flags: tuple[str, ...]):
        return compile_kernel(source, arch, flags)

    def worker(self, group: str):
        """The group's gate worker, started on first use; NoDeviceError where no GPU exists."""
        if group not in self._workers:
            from klineage.gate import pool
            if not pool.gpu_available():
                raise NoDeviceError("no CUDA device found — run on a GPU machine or pass --replay to use "
                                    "recorded evaluations")
            self._workers[group] = pool.GateWorker()
        return self._workers[group]

    def evaluate_live(self, source, compiled, payload, group, flags, stall_s, total_s) -> dict:
        worker = self.worker(group)
        raw = dict(worker.evaluate(payload, stall_s=stall_s, total_s=total_s))
        raw["env"] = raw.get("env") or worker.env_info
        return raw

    def bind(self, gate):
        """`gate` itself: a serial run compiles, evaluates and writes through the gate as it is (its
        own worker, its own store), in this thread."""
        return gate

    def claim(self, key):
        """Nothing runs beside this process's one unit: no claim to wait on."""
        return contextlib.nullcontext()

    def map(self, fn: Callable, items: Iterable, sequential: bool = False) -> Iterator:
        """fn(item) for each item, in order, in this thread (a plain loop)."""
        return map(fn, items)

    def release(self, group: str) -> None:
        w = self._workers.pop(group, None)
        if w is not None:
            w.close()

    def close(self) -> None:
        super().close()
        for group in list(self._workers):
            self.release(group)
