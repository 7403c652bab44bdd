"""Every GPU of one host busy: one gate worker per visible GPU, nvcc on a CPU pool sized to the cores.

- compile: a thread pool of `compile_jobs` (default: the cores this process may use) runs
  `compile_kernel`; nvcc is a subprocess, so threads suffice. Two units asking for the same build
  wait for one nvcc.
- gate: one `GateWorker` subprocess per (worker group, GPU), pinned with CUDA_VISIBLE_DEVICES. A
  per-device lock (a queue of free GPUs) lets one evaluation at a time onto a device: the worker
  runs correctness and timing in one request, so the lock covers both and no timing window ever
  shares its GPU. A timing round that asks for a fresh worker gets a group of its own.
- without a GPU the local executor still compiles in parallel and replays; a live evaluation
  raises NoDeviceError, as the serial gate does.
"""
from __future__ import annotations

import os
import queue
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from klineage.errors import NoDeviceError
from klineage.exec.base import Executor, cpu_count, request_key


def visible_gpus() -> list[str]:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES when set (its entries, indices or UUIDs),
    else every device `nvidia-smi -L` lists; [] without a GPU or nvidia-smi."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip() and d.strip() != "-1"]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    return [str(i) for i, line in enumerate(l for l in out.stdout.splitlines() if l.startswith("GPU "))]


class LocalExecutor(Executor):
    name = "local"

    def __init__(self, gpus: list[str] | None = None, compile_jobs: int | None = None, units: int | None = None,
                 worker_command: list[str] | None = None):
        self.gpus = visible_gpus() if gpus is None else [str(g) for g in gpus]
        self.compile_jobs = max(1, compile_jobs or cpu_count())
        # enough units in flight to keep the compile pool and every GPU fed while others wait
        super().__init__(units or self.compile_jobs + 2 * len(self.gpus) + 1)
        self._pool = ThreadPoolExecutor(max_workers=self.compile_jobs, thread_name_prefix="klineage-nvcc")
        self._free: queue.Queue = queue.Queue()
        for g in self.gpus:
            self._free.put(g)
        self._workers: dict[tuple[str, str], object] = {}
        self._workers_lock = threading.Lock()
        self._worker_command = worker_command  # tests substitute a scripted worker
        self.gpu_busy_s = {g: 0.0 for g in self.gpus}

    def describe(self) -> dict:
        return {"executor": self.name, "units": self.units, "compile_jobs": self.compile_jobs, "gpus": list(self.gpus)}

    # -- compile ---------------------------------------------------------------------------------
    def _compile_timed(self, source, arch, flags):
        from klineage.gate.compile import compile_kernel
        t0 = time.perf_counter()
        res = compile_kernel(source, arch, tuple(flags))
        self._count(compile_requests=1, compile_busy_s=time.perf_counter() - t0)
        return res

    def compile(self, source: str, arch: str, flags: tuple[str, ...]):
        self.check_open()
        with self.claim(("build", request_key(source, arch, tuple(flags)))):
            with self.blocking():
                return self._pool.submit(self._compile_timed, source, arch, flags).result()

    # -- gate ------------------------------------------------------------------------------------
    def _worker(self, group: str, gpu: str):
        from klineage.gate.pool import GateWorker
        with self._workers_lock:
            w = self._workers.get((group, gpu))
            if w is None:
                kw = {"command": self._worker_command} if self._worker_command else {}
                w = self._workers[(group, gpu)] = GateWorker(gpu=gpu, **kw)
            return w

    def evaluate_live(self, source, compiled, payload, group, flags, stall_s, total_s) -> dict:
        self.check_open()
        if not self.gpus:
            raise NoDeviceError("no CUDA device found — run on a GPU machine or pass --replay to use "
                                "recorded evaluations")
        with self.blocking():
            gpu = self._free.get()  # the per-device lock: one evaluation per GPU at a time
            try:
                self.check_open()
                worker = self._worker(group, gpu)
                t0 = time.perf_counter()
                raw = worker.evaluate(payload, stall_s=stall_s, total_s=total_s)
                busy = time.perf_counter() - t0
                self.check_open()  # a worker killed by close() is no RUNTIME_ERROR of the kernel's
            finally:
                self._free.put(gpu)
        with self._stats_lock:
            self.gpu_busy_s[gpu] += busy
        self._count(live_evaluations=1, gate_busy_s=busy)
        raw = dict(raw)
        raw["env"] = raw.get("env") or worker.env_info
        return raw

    def release(self, group: str) -> None:
        with self._workers_lock:
            gone = [k for k in self._workers if k[0] == group]
            workers = [self._workers.pop(k) for k in gone]
        for w in workers:
            w.close()

    def stats(self) -> dict:
        out = super().stats()
        with self._stats_lock:
            out["gpu_busy_s"] = dict(self.gpu_busy_s)
        return out

    def close(self) -> None:
        super().close()
        with self._workers_lock:
            workers = list(self._workers.values())
            self._workers.clear()
        for w in workers:
            w.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
