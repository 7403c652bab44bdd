"""Executors: where a mining run's compiles and gate evaluations run.

  serial  (default) everything in this process, one thing at a time: the gate's own worker
  local   one gate worker per visible GPU, nvcc on a CPU pool sized to the cores (exec/local.py)
  ray     compile tasks on CPUs and gate tasks on GPUs of a Ray cluster (exec/ray_exec.py)

The choice changes where work runs, never what is mined: walks (one per target) and the analysis
pass's independent steps run as concurrent units, each writing into a journal that the driver
commits to the database in unit order, so every executor leaves the same library (canonical dump)
as the serial run. `make_executor("serial")` is None: mining then runs its loops as plain loops,
and a Gate given no executor builds and evaluates through a SerialExecutor of its own
(klineage/exec/serial.py), the same interface as the others.
"""
from __future__ import annotations

from klineage.exec.base import Executor, ExecutorClosed, ExecutorError

EXECUTORS = ("serial", "local", "ray")


def make_executor(name: str, ray_address: str | None = None, **kw) -> Executor | None:
    """The executor called `name` (None for serial); ExecutorError when it cannot start."""
    if name == "serial":
        if ray_address:
            raise ExecutorError("--ray-address needs --executor ray")
        return None
    if name == "local":
        if ray_address:
            raise ExecutorError("--ray-address needs --executor ray")
        from klineage.exec.local import LocalExecutor
        return LocalExecutor(**kw)
    if name == "ray":
        from klineage.exec.ray_exec import RayExecutor
        return RayExecutor(address=ray_address, **kw)
    raise ExecutorError(f"unknown executor {name!r}: choose one of {', '.join(EXECUTORS)}")


__all__ = ["EXECUTORS", "Executor", "ExecutorClosed", "ExecutorError", "make_executor"]
