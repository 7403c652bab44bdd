"""The gate: guard, compile, and the GPU worker behind them.

``worker_code_hash()`` names the code whose behaviour the GPU records of the gallery and fault
kernels prove (benchmarks/results/gate_h200_gallery_faults.json): the worker that runs candidates
and carries the dynamic defences (correctness, activity check, device settings, timing, rechecks,
physical floor), the correctness rule it applies, and the driver that turns a hang or a crash into
a record. The guard and the build are checked on the CPU by the tests themselves, so they are not
part of it.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

WORKER_MODULES = ("worker.py", "correctness.py", "pool.py")


def worker_code_hash() -> str:
    """sha256 over the names and bytes of WORKER_MODULES (in that order)."""
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for name in WORKER_MODULES:
        data = (here / name).read_bytes()
        h.update(f"klineage/gate/{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()
