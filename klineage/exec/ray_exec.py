"""A cluster through Ray: compile tasks on CPUs, gate tasks on GPUs, one writer in the driver.

- compile task (`num_cpus=1`): `compile_kernel` on whichever node runs it; returns the
  CompileResult (as a dict). The build stays in that node's cache.
- gate task (`num_cpus=1, num_gpus=1`): builds the kernel again on its own node (a cache hit when the
  compile task ran there) and runs it in a GateWorker pinned to the GPU Ray assigned, kept alive in
  the Ray worker process for the next task of the same worker group. Ray gives a task with
  `num_gpus=1` the device to itself: that is the per-device lock.
- replay and CPU-only clusters: a replayed evaluation is a lookup in the driver's database, so it
  never becomes a task and asks for no GPU; only its compile runs remotely (a CPU task). A live
  evaluation on a cluster with no GPU raises NoDeviceError at once instead of waiting forever for a
  GPU that no node has.
- failures: Ray retries a task whose worker process died (`max_retries`, default 3). Results come
  back to the driver only from the attempt that finished, and the driver records them by
  evaluation key through its journal, so a retried task is recorded once. A task that fails every
  attempt stops the run with an ExecutorError; nothing of it is recorded as the kernel's fault.

Nodes other than the driver's need klineage importable and the workload files at the same paths
(a shared checkout); a generated probe workload is shipped as text and written under the node's
data directory when its path is missing there.
"""
from __future__ import annotations

import hashlib
import os
import signal
import time
from pathlib import Path

from klineage.errors import NoDeviceError
from klineage.exec.base import Executor, ExecutorError, request_key

# gate workers kept per GPU in a Ray worker process: the search's, and one per repeat round (the apply
# loop's round 2 and the held-out check's final rounds 3 and 4 each keep one: Gate.repeat)
MAX_WORKERS_PER_GPU = 4
_WORKERS: dict = {}      # in a Ray worker process: (group, gpu) -> GateWorker, oldest first


def compile_result_from_dict(d: dict):
    from klineage.gate.compile import CompileResult, KernelResources
    d = dict(d)
    resources = [KernelResources(**r) for r in d.pop("resources", [])]
    return CompileResult(**d, resources=resources)


def _remote_compile(source: str, arch: str, flags: list, hook) -> dict:
    if hook is not None:
        hook("compile")
    from klineage.gate.compile import compile_kernel
    t0 = time.perf_counter()
    res = compile_kernel(source, arch, tuple(flags))
    out = res.to_dict()
    return {"result": out, "busy_s": time.perf_counter() - t0, "pid": os.getpid()}


def _gate_worker(group: str, gpu: str):
    from klineage.gate.pool import GateWorker
    w = _WORKERS.get((group, gpu))
    if w is None:
        same = [k for k in _WORKERS if k[1] == gpu]
        while len(same) >= MAX_WORKERS_PER_GPU:
            _WORKERS.pop(same.pop(0)).close()
        w = _WORKERS[(group, gpu)] = GateWorker(gpu=gpu)
    return w


def _local_workload(path: str, text: str | None) -> str:
    if Path(path).is_file() or text is None:
        return path
    from klineage import settings
    d = settings.data_dir() / "remote_workloads" / hashlib.sha256(text.encode()).hexdigest()[:16]
    f = d / "workload.py"
    if not f.is_file():
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".workload.{os.getpid()}.tmp"
        tmp.write_text(text)
        tmp.replace(f)
    return str(d)


def _remote_gate(source: str, arch: str, flags: list, payload: dict, workload_text: str | None, group: str,
                 stall_s: float, total_s: float, hook) -> dict:
    if hook is not None:
        hook("gate")
    import ray

    from klineage.gate.compile import compile_kernel
    ids = ray.get_gpu_ids()
    gpu = str(ids[0]) if ids else (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    built = compile_kernel(source, arch, tuple(flags))  # this node's cache; a hit where the compile ran here
    if not built.ok or not built.so_path:
        return {"status": "RUNTIME_ERROR", "error_kind": "remote_build",
                "error_message": f"the kernel did not build on the gate node: {built.error_message}"}
    w = _gate_worker(group, gpu)
    t0 = time.perf_counter()
    raw = dict(w.evaluate(dict(payload, so_path=built.so_path,
                               workload_path=_local_workload(payload["workload_path"], workload_text)),
                          stall_s=stall_s, total_s=total_s))
    raw["env"] = raw.get("env") or w.env_info
    return {"result": raw, "busy_s": time.perf_counter() - t0}


class KillOnce:
    """Fault injection (tests, soak runs): the `after`-th task of `kind` to start (counting from 0)
    kills its own Ray worker process with SIGKILL, once per `marker` file. Ray then retries it."""

    def __init__(self, marker: str | Path, kind: str = "compile", after: int = 0):
        self.marker, self.kind, self.after = str(marker), kind, after

    def __call__(self, kind: str) -> None:
        if kind != self.kind or os.path.exists(self.marker):
            return
        counter = self.marker + ".count"
        fd = os.open(counter, os.O_CREAT | os.O_APPEND | os.O_WRONLY)
        try:
            os.write(fd, b".")
        finally:
            os.close(fd)
        if os.path.getsize(counter) <= self.after:
            return
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)


class RayExecutor(Executor):
    name = "ray"

    def __init__(self, address: str | None = None, units: int | None = None, max_retries: int = 3,
                 task_hook=None, init_kwargs: dict | None = None):
        try:
            import ray
        except ImportError:
            raise ExecutorError("the ray executor needs Ray: pip install 'klineage[ray]' (or pip install ray), "
                                "or use --executor local") from None
        self._ray = ray
        self._owns = False
        if not ray.is_initialized():
            kw = {"include_dashboard": False, "log_to_driver": False, **(init_kwargs or {})}
            try:
                ray.init(address=address, **kw)
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise ExecutorError(f"cannot reach the Ray cluster at {address or 'a new local one'} ({e}): "
                                    "start it with `ray start --head` and pass --ray-address HOST:PORT, or "
                                    "leave --ray-address out for a local cluster") from e
            self._owns = True
        res = ray.cluster_resources()
        self.cluster_cpus, self.cluster_gpus = int(res.get("CPU", 0)), int(res.get("GPU", 0))
        super().__init__(units or max(2, self.cluster_cpus + 2 * self.cluster_gpus))
        self.max_retries = max_retries
        self._hook = task_hook
        self._compile_task = ray.remote(num_cpus=1, max_retries=max_retries)(_remote_compile)
        self._gate_task = ray.remote(num_cpus=1, num_gpus=1, max_retries=max_retries)(_remote_gate)
        self.compile_pids: set[int] = set()

    def describe(self) -> dict:
        return {"executor": self.name, "units": self.units, "cluster_cpus": self.cluster_cpus,
                "cluster_gpus": self.cluster_gpus, "max_retries": self.max_retries}

    def _get(self, ref, what: str):
        try:
            with self.blocking():
                return self._ray.get(ref)
        except self._ray.exceptions.RayError as e:
            raise ExecutorError(f"a {what} task failed on the Ray cluster after {self.max_retries} retries "
                                f"({type(e).__name__}: {str(e)[:300]}): check the nodes (`ray status`) and run again; "
                                "nothing of it was recorded") from e

    def compile(self, source: str, arch: str, flags: tuple[str, ...]):
        self.check_open()
        with self.claim(("build", request_key(source, arch, tuple(flags)))):
            out = self._get(self._compile_task.remote(source, arch, list(flags), self._hook), "compile")
        self._count(compile_requests=1, compile_busy_s=out["busy_s"])
        self.compile_pids.add(out["pid"])
        return compile_result_from_dict(out["result"])

    def evaluate_live(self, source, compiled, payload, group, flags, stall_s, total_s) -> dict:
        self.check_open()
        if self.cluster_gpus == 0:
            raise NoDeviceError("no GPU in the Ray cluster — add a GPU node, or pass --replay to use recorded "
                                "evaluations")
        wl = Path(payload["workload_path"])
        wl_file = wl / "workload.py" if wl.is_dir() else wl
        text = wl_file.read_text() if wl_file.is_file() else None
        ref = self._gate_task.remote(source, compiled.arch, list(flags),
                                     payload, text, group, stall_s, total_s, self._hook)
        out = self._get(ref, "gate")
        self.check_open()
        self._count(live_evaluations=1, gate_busy_s=out["busy_s"])
        return out["result"]

    def close(self) -> None:
        super().close()
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()
