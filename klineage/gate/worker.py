"""The gate worker: the only module that touches the GPU.

Run as ``python -m klineage.gate.worker --fd N``: one process per GPU, started by
``klineage.gate.pool``. It reads JSON requests, one per line, on stdin and writes JSON messages to
file descriptor N (never stdout, which a candidate's printf could corrupt): ``progress`` heartbeats
while it works (at each phase, and between calls at least every HEARTBEAT_S, so the driver's stall
limit bounds one call, however many a phase makes) and one ``result`` per request. The driver kills
it when the heartbeats stop (a hang) or the process dies (a crash); after a CUDA error that leaves
the context unusable it replies and exits with ``fatal: true`` so the driver starts a fresh one.

Evaluation of one candidate:
 1. correctness on every benchmark and probe shape, several seeds: the same input buffers are
    refilled with each seed's data (a cache keyed on pointers returns stale answers), outputs are
    pre-filled with NaN, the candidate runs before the oracle, inputs are checked for mutation;
 2. the reference's first call on each benchmark shape in this process (a Triton reference compiles
    and autotunes there), in a phase of its own whose message declares its longer stall limit;
    then an activity check of one call under CUPTI (torch.profiler): every kernel must run on the
    stream the harness passed. After the correctness calls, the activity call and the timing, the
    device's persisting-L2 settings (the limit, which the worker sets to 0 at start, and the access
    policy window of the harness stream) must be as the worker left them; a candidate that changed
    them is rejected and the settings are put back, so no later candidate runs under them;
 3. timing on the benchmark shapes: fresh inputs for every call (rotated buffers refilled outside
    the window), the L2 flushed by writing a buffer of at least twice its size before every call,
    persisting L2 lines reset, CUDA events around the call only, warm-up then several trials,
    candidate and vendor reference alternating call by call in the same process, the statistic the
    median of per-trial medians; outputs of randomly chosen timed calls are re-checked; a time under
    the physical floor (bytes / measured copy bandwidth, FLOPs / measured peak) is rejected. With
    timing "backlog_us" > 0 a GPU spin is queued before each timed call, sized from each side's
    measured host-side dispatch, so a reference's Python dispatch cannot open idle time inside its
    window; every call's host-side time is recorded either way (host_dispatch_us).

Several workers on one GPU (concurrent runs sharing a card) set ``KLINEAGE_GPU_LOCK`` to one file
(GpuLock): a worker holds it exclusively from the reference's first call to the end of the timing
and for a bandwidth measurement, so no other worker's kernel runs while it measures; correctness
calls and the device's setup hold it shared. The drivers' CPU work (rewrites, nvcc) runs side by
side. The seconds a request waited for it are its ``phases.gpu_wait_s``, left out of its other
phases and its ``wall_s``.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import glob
import json
import os
import random
import statistics
import sys
import tempfile
import time
import traceback

import torch

from klineage.gate.correctness import compare_outputs, negative_controls
from klineage.workload import ALIAS_KEY, load_workload, shape_key

TORCH_DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "float64": torch.float64, "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8,
    "int8": torch.int8,
}
CTYPES_SCALAR = {"int": ctypes.c_int, "int64": ctypes.c_longlong, "float": ctypes.c_float}
CUDA_ERRORS = {
    0: "cudaSuccess", 1: "cudaErrorInvalidValue", 2: "cudaErrorMemoryAllocation",
    9: "cudaErrorInvalidConfiguration", 98: "cudaErrorInvalidDeviceFunction",
    209: "cudaErrorNoKernelImageForDevice", 400: "cudaErrorInvalidResourceHandle",
    700: "cudaErrorIllegalAddress", 701: "cudaErrorLaunchOutOfResources", 702: "cudaErrorLaunchTimeout",
    710: "cudaErrorAssert", 716: "cudaErrorMisalignedAddress", 719: "cudaErrorLaunchFailure",
}
CUDA_LIMIT_PERSISTING_L2 = 0x06
CUDA_STREAM_ATTR_ACCESS_POLICY_WINDOW = 1  # cudaStreamAttributeAccessPolicyWindow (cudaLaunchAttributeAccessPolicyWindow)
_STREAM_ATTR_BYTES = 256  # cudaStreamAttrValue (a union of 64 bytes in CUDA 12 and 13), with room to spare
_WINDOW_NUM_BYTES_AT = 8  # accessPolicyWindow = {void* base_ptr; size_t num_bytes; float hitRatio; ...}
MIN_TIMED_REPS = 5  # a workload's TIMING_BUDGET_S never cuts a trial below this many timed calls
SPIN_CYCLES_PER_US = 2000  # torch.cuda._sleep counts SM cycles: at least 1 us each up to 2 GHz (H200: 1980 MHz)
BACKLOG_CALIBRATION_CALLS = 6  # untimed calls per side whose host-side dispatch sizes the backlog (first dropped)
BACKLOG_MAX_US = 20_000.0
HEARTBEAT_S = 5.0  # a phase of many calls says it is alive between calls at least this often
# The reference's first call in a worker process may compile and autotune (FlagGems' Triton ops try
# every configuration of their tuning table: ~50 s for attention on an H100 host, more on a busy
# one). It runs once per workload and shape in a phase of its own, which may be silent this long.
REFERENCE_WARMUP_STALL_S = 600.0
GPU_LOCK_ENV = "KLINEAGE_GPU_LOCK"  # a file every worker sharing this GPU locks around its GPU work


def backlog_for(floor_us: float, dispatch_us: list[float]) -> float:
    """The spin (us) queued before each timed call of one side: twice the slowest host-side dispatch
    seen in calibration plus 20 us, at least `floor_us`, at most BACKLOG_MAX_US. The first calibration
    call is left out (a first call may compile or autotune)."""
    seen = dispatch_us[1:] or dispatch_us
    return min(BACKLOG_MAX_US, max(floor_us, 2.0 * max(seen, default=0.0) + 20.0))


def host_summary(host_us: list[float], spin_us: float | None) -> dict:
    """Host-side dispatch of the timed calls of one side: median, p90, max, and with a backlog how many
    calls took longer than the spin queued before them (their window may hold idle GPU time)."""
    v = sorted(host_us)
    if not v:
        return {}
    out = {"median_us": statistics.median(v), "p90_us": v[min(len(v) - 1, (9 * len(v)) // 10)], "max_us": v[-1]}
    if spin_us is not None:
        out["over_backlog"] = sum(1 for x in v if x > spin_us)
    return out


def fit_to_budget(budget_s: float, call_s: float, warmup: int, reps: int) -> tuple[int, int, dict | None]:
    """(warmup, reps, note) for a timing trial whose calls (candidate + vendor) take `call_s` each,
    when a trial may take `budget_s`: unchanged (note None) when they fit, else fewer, never under
    MIN_TIMED_REPS timed calls and one warm-up; the note records what was asked and why."""
    fit = int(budget_s // max(call_s, 1e-9))
    if fit >= warmup + reps:
        return warmup, reps, None
    note = {"budget_s": budget_s, "probe_call_s": round(call_s, 6), "asked": {"warmup": warmup, "reps": reps}}
    new_reps = max(MIN_TIMED_REPS, min(reps, fit - 2))
    return max(1, min(warmup, fit - new_reps)), new_reps, note


class CandidateFailure(Exception):
    """A candidate-caused failure with a gate status; `fatal` when the CUDA context is lost."""

    def __init__(self, status: str, kind: str, message: str, fatal: bool = False):
        super().__init__(message)
        self.status, self.kind, self.message, self.fatal = status, kind, message, fatal


class Channel:
    def __init__(self, fd: int):
        self.f = os.fdopen(fd, "w", buffering=1)
        self.phase, self.sent = "start", time.monotonic()

    def send(self, msg: dict) -> None:
        self.f.write(json.dumps(msg) + "\n")
        self.f.flush()

    def progress(self, phase: str, **kw) -> None:
        self.phase, self.sent = phase, time.monotonic()
        self.send({"event": "progress", "phase": phase, **kw})

    def beat(self) -> None:
        """A heartbeat in the current phase between two calls, at most every HEARTBEAT_S: the driver's
        stall limit then bounds one call (a candidate's, or the reference's), not a phase's many."""
        if time.monotonic() - self.sent >= HEARTBEAT_S:
            self.progress(self.phase)


class GpuLock:
    """The lock of the workers sharing one GPU (GPU_LOCK_ENV names its file; unset: no lock). Timing
    holds it exclusively: no other worker's kernel runs while a window is open. Work whose result does
    not depend on an idle card (correctness calls, the device's setup) holds it shared, beside other
    shared holders. A worker that wants it exclusively first takes a turnstile (a second file), which
    shared holders pass through, so a steady stream of correctness calls cannot starve a timing.
    While it waits inside a request the worker says so (phase "gpu_lock", a heartbeat every
    HEARTBEAT_S), so the driver's stall limit never counts the wait as a hang; before its "ready"
    message it waits silently, within the driver's start timeout. `waited` sums the seconds waited."""

    def __init__(self, path: str | None, chan: "Channel"):
        self.path, self.chan = path or None, chan
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644) if self.path else None
        self.turn = os.open(self.path + ".turn", os.O_RDWR | os.O_CREAT, 0o644) if self.path else None
        self.waited = 0.0

    def _take(self, fd: int, how: int, announce: bool) -> None:
        while True:
            try:
                fcntl.flock(fd, how | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if announce:
                    self.chan.beat()
                time.sleep(0.01)

    @contextlib.contextmanager
    def held(self, exclusive: bool = True, announce: bool = True):
        """Hold the lock (exclusively, or shared) for the block; yields the seconds waited for it."""
        if self.fd is None:
            yield 0.0
            return
        t0 = time.monotonic()
        if announce:
            phase = self.chan.phase
            self.chan.progress("gpu_lock")
        self._take(self.turn, fcntl.LOCK_EX, announce)
        try:
            self._take(self.fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, announce)
        finally:
            fcntl.flock(self.turn, fcntl.LOCK_UN)
        waited = time.monotonic() - t0
        self.waited += waited
        if announce:
            self.chan.progress(phase)
        try:
            yield waited
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)


def _cudart():
    """The CUDA runtime library torch loaded, for device queries torch does not expose."""
    for path in sorted(set(glob.glob("/proc/self/maps"))):
        with open(path) as f:
            for line in f:
                if "libcudart.so" in line:
                    return ctypes.CDLL(line.split()[-1])
    for pattern in ("**/nvidia/cu*/lib/libcudart.so*", "**/nvidia/cuda_runtime/lib/libcudart.so*"):
        for root in sys.path:
            hits = glob.glob(os.path.join(root, pattern), recursive=True)
            if hits:
                return ctypes.CDLL(hits[0])
    return None


class Device:
    """Per-process device facts and measured ceilings, computed once."""

    def __init__(self):
        torch.cuda.init()
        self.props = torch.cuda.get_device_properties(0)
        self.l2_bytes = int(getattr(self.props, "L2_cache_size", 0) or 50 * 2**20)
        # Flush at least twice the L2 (the floor); four times leaves no doubt.
        self.flush = torch.ones(max(4 * self.l2_bytes, 256 * 2**20) // 4, dtype=torch.float32, device="cuda")
        self._flush_sink = torch.empty((), dtype=torch.float32, device="cuda")
        self.cudart = _cudart()
        self._copy_bw = None
        self._peak = None
        # The harness owns the persisting-L2 carve-out: none at all (a driver may default to a part of
        # the L2: 30% on the H200). What the worker leaves here is what every candidate must leave.
        self.persisting_l2_default = self.persisting_l2_limit()
        self._set_persisting_l2_limit(0)
        self.settings_baseline = self.l2_settings()

    def _set_persisting_l2_limit(self, value: int) -> None:
        if self.cudart is not None:
            self.cudart.cudaDeviceSetLimit(CUDA_LIMIT_PERSISTING_L2, ctypes.c_size_t(value))

    def _runtime(self, name: str):
        """A CUDA runtime function by name, None when the library (or that symbol) is not there."""
        return getattr(self.cudart, name, None) if self.cudart is not None else None

    def _stream_window_bytes(self) -> int | None:
        """num_bytes of the access policy window on the harness stream (0: none), None if unreadable."""
        get = self._runtime("cudaStreamGetAttribute")
        if get is None:
            return None
        buf = ctypes.create_string_buffer(_STREAM_ATTR_BYTES)
        rc = get(ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), CUDA_STREAM_ATTR_ACCESS_POLICY_WINDOW, buf)
        if rc != 0:
            self.cudart.cudaGetLastError()  # an unsupported query is no candidate's error
            return None
        return ctypes.c_size_t.from_buffer(buf, _WINDOW_NUM_BYTES_AT).value

    def l2_settings(self) -> dict:
        """The device settings a candidate could change to keep data in L2 across the flush."""
        return {"persisting_l2_limit": self.persisting_l2_limit(), "stream_window_bytes": self._stream_window_bytes()}

    def restore_l2_settings(self) -> None:
        """Put the persisting-L2 limit and the harness stream's window back as the worker set them,
        and demote every persisting line."""
        if self.cudart is None:
            return
        self._set_persisting_l2_limit(self.settings_baseline["persisting_l2_limit"] or 0)
        put = self._runtime("cudaStreamSetAttribute")
        if put is not None:
            put(ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), CUDA_STREAM_ATTR_ACCESS_POLICY_WINDOW,
                ctypes.create_string_buffer(_STREAM_ATTR_BYTES))  # num_bytes 0: no window
        self.cudart.cudaCtxResetPersistingL2Cache()
        self.cudart.cudaGetLastError()

    def flush_l2(self) -> None:
        # A read pass: it evicts (and writes back) every dirty line before the window opens, and
        # leaves only clean lines behind, so no write-back of the flush lands in the timed call.
        # Persisting lines are demoted first, so the read pass that follows evicts them too.
        if self.cudart is not None:
            self.cudart.cudaCtxResetPersistingL2Cache()
        torch.sum(self.flush, dim=0, out=self._flush_sink)

    def persisting_l2_limit(self) -> int | None:
        if self.cudart is None:
            return None
        v = ctypes.c_size_t(0)
        rc = self.cudart.cudaDeviceGetLimit(ctypes.byref(v), CUDA_LIMIT_PERSISTING_L2)
        return int(v.value) if rc == 0 else None

    def copy_bandwidth(self) -> float:
        """Device-to-device copy of 1 GiB, bytes read + written per second: the best of 20 copies
        after 30 warm-up copies (a fresh worker meets idle clocks; a median of a few cold copies
        under-read the ceiling by ~12% on the H200, which made an honest kernel look faster than
        physics)."""
        if self._copy_bw is None:
            n = 2**30 // 4
            a = torch.empty(n, dtype=torch.float32, device="cuda").fill_(1.0)
            b = torch.empty_like(a)
            times = []
            for i in range(50):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                b.copy_(a)
                e.record()
                e.synchronize()
                if i >= 30:
                    times.append(s.elapsed_time(e) / 1e3)
            self._copy_bw = 2 * 4 * n / min(times)
            del a, b
        return self._copy_bw

    def bf16_peak(self) -> float:
        """bf16 matrix product 8192^3 through torch (cuBLAS) on random data, FLOP/s (median of 10)."""
        if self._peak is None:
            n = 8192
            a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            times = []
            for i in range(13):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                torch.mm(a, b)
                e.record()
                e.synchronize()
                if i >= 3:
                    times.append(s.elapsed_time(e) / 1e3)
            self._peak = 2 * n**3 / statistics.median(times)
            del a, b
        return self._peak


def environment(dev: Device) -> dict:
    env = {
        "gpu": torch.cuda.get_device_name(0),
        "sm_count": dev.props.multi_processor_count,
        "capability": f"{dev.props.major}.{dev.props.minor}",
        "l2_bytes": dev.l2_bytes,
        "memory_bytes": dev.props.total_memory,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
    }
    try:
        import triton
        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    try:
        import subprocess
        q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.mem,clocks.max.sm,"
                            "clocks.max.mem,power.limit,temperature.gpu", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=20).stdout.strip().split(", ")
        keys = ["driver", "clock_sm_mhz", "clock_mem_mhz", "clock_max_sm_mhz", "clock_max_mem_mhz",
                "power_limit_w", "temperature_c"]
        env.update(dict(zip(keys, q)))
    except Exception as exc:  # nvidia-smi missing is recorded, not fatal
        env["driver"] = f"unknown ({type(exc).__name__})"
    from klineage.gate import worker_code_hash
    from klineage.gate.compile import nvcc_version
    env["nvcc"] = nvcc_version()
    env["worker_code"] = worker_code_hash()
    env["persisting_l2_default_bytes"] = dev.persisting_l2_default
    env["l2_settings"] = dev.settings_baseline
    return env


class Candidate:
    """A loaded shared object whose entry point follows the workload's ABI."""

    def __init__(self, so_path: str, workload):
        self.workload = workload
        try:
            self.lib = ctypes.CDLL(so_path, mode=ctypes.RTLD_LOCAL)
        except OSError as exc:
            raise CandidateFailure("RUNTIME_ERROR", "load_error", f"cannot load {so_path}: {exc}")
        try:
            self.fn = getattr(self.lib, workload.entry)
        except AttributeError:
            raise CandidateFailure("RUNTIME_ERROR", "missing_entry",
                                   f"shared object exports no {workload.entry}; declare {workload.c_signature}")
        self.fn.restype = ctypes.c_int
        self.fn.argtypes = [ctypes.c_void_p if a.kind == "ptr" else CTYPES_SCALAR[a.kind]
                            for a in workload.args] + [ctypes.c_void_p]

    def call(self, tensors: dict, scalars: dict, stream: torch.cuda.Stream) -> int:
        args = [tensors[a.name].data_ptr() if a.kind == "ptr" else scalars[a.name] for a in self.workload.args]
        return self.fn(*args, stream.cuda_stream)


def _sync(where: str) -> None:
    try:
        torch.cuda.synchronize()
    except RuntimeError as exc:
        msg = str(exc).strip().splitlines()[0]
        raise CandidateFailure("RUNTIME_ERROR", "cuda_error", f"{where}: {msg}", fatal=True)


def settings_changed(baseline: dict, now: dict, where: str) -> CandidateFailure | None:
    """The rejection of a candidate after which the device's L2 settings differ from the worker's."""
    if now == baseline:
        return None
    what = "; ".join(f"{k} {baseline.get(k)} -> {now.get(k)}" for k in sorted(set(baseline) | set(now))
                     if baseline.get(k) != now.get(k))
    return CandidateFailure("GUARD_REJECTED", "persisting_l2",
                            f"{where}: the candidate changed the device's persisting-L2 settings ({what}); "
                            "persisting lines survive the cache flush (the settings were put back)")


def _check_rc(rc: int, where: str) -> None:
    if rc != 0:
        name = CUDA_ERRORS.get(rc, f"cudaError {rc}")
        # A launch-configuration error leaves the context usable; anything else may not.
        raise CandidateFailure("RUNTIME_ERROR", "launch_error", f"{where}: entry returned {name} ({rc})",
                               fatal=rc not in (1, 9, 98, 209, 701))


def trace_events(prof) -> list[dict]:
    """The events of a finished torch.profiler run, read back from its Chrome trace."""
    fd, trace_path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(trace_path)
        with open(trace_path) as f:
            return json.load(f).get("traceEvents", [])
    finally:
        os.unlink(trace_path)


def refresh_inputs(workload, shape, buf: dict, seed: int) -> None:
    """Overwrite the input tensors in place with a fresh draw, so no call sees the last call's data."""
    for k, v in workload.make_inputs(shape, seed, device="cuda").items():
        buf[k].copy_(v)


def timed_call(dev: Device, call, stream, spin_us: float = 0.0, host: list | None = None) -> tuple[int, float]:
    """The gate's timed window: flush L2, then CUDA events around one call on `stream`.
    Returns the call's return code and its latency in microseconds.

    `spin_us` > 0 queues a spin that long after the flush: the start event fires when it ends, so a
    host-side dispatch shorter than it (a Triton op's Python wrapper, say) runs while the GPU is busy
    and stays out of the window. `host` gets the call's host-side time in us."""
    dev.flush_l2()
    if spin_us > 0:
        torch.cuda._sleep(int(spin_us * SPIN_CYCLES_PER_US))
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(stream)
    t0 = time.perf_counter()
    rc = call()
    if host is not None:
        host.append((time.perf_counter() - t0) * 1e6)
    e.record(stream)
    _check_rc(rc, "timed call")
    e.synchronize()
    return rc, s.elapsed_time(e) * 1e3


def _empty_at(dims, dtype, offset: int, device="cuda") -> torch.Tensor:
    """An uninitialised contiguous tensor whose data starts `offset` elements past an aligned
    allocation (the caching allocator hands out 512-byte-aligned blocks)."""
    if not offset:
        return torch.empty(dims, dtype=dtype, device=device)
    n = 1
    for d in dims:
        n *= int(d)
    return torch.empty(n + offset, dtype=dtype, device=device)[offset:].view(tuple(dims))


def place_inputs(workload, shape, tensors: dict) -> dict:
    """Copies of `tensors` at the shape's pointer offset (plain clones when it has none)."""
    off = workload.pointer_offset(shape)
    out = {}
    for k, v in tensors.items():
        t = _empty_at(v.shape, v.dtype, off, v.device)
        t.copy_(v)
        out[k] = t
    return out


def alloc_outputs(workload, shape) -> dict:
    outs = {}
    off = workload.pointer_offset(shape)
    for name, (dims, dtype) in workload.outputs(shape).items():
        t = _empty_at(dims, TORCH_DTYPES[dtype], off)
        t.fill_(float("nan") if t.is_floating_point() else torch.iinfo(t.dtype).min)
        outs[name] = t
    return outs


def alias_outputs(workload, shape, bufs: dict, outs: dict) -> dict:
    """For a shape with the reserved alias key: point each output at an input of the same shape and
    dtype (an in-place call; inputs taken in declaration order, each at most once). Returns
    {output: input} and rebinds `outs` in place; {} for any other shape."""
    if not shape.get(ALIAS_KEY):
        return {}
    pairs, used = {}, set()
    for name, t in list(outs.items()):
        for src in workload.input_names:
            b = bufs.get(src)
            if src not in used and b is not None and b.shape == t.shape and b.dtype == t.dtype:
                pairs[name] = src
                used.add(src)
                outs[name] = b
                break
    return pairs


def _poison(outs: dict) -> None:
    for t in outs.values():
        t.fill_(float("nan") if t.is_floating_point() else torch.iinfo(t.dtype).min)


class Evaluator:
    def __init__(self, chan: Channel, lock: GpuLock | None = None):
        self.chan = chan
        self.lock = lock or GpuLock(None, chan)
        self.dev = Device()
        self.env = environment(self.dev)
        self.warm: set[tuple[str, str]] = set()  # (workload hash, shape) whose reference ran in this process

    # -- the reference's first call ----------------------------------------------------------
    def warm_reference(self, workload, shapes) -> None:
        """Call the reference once on each benchmark shape it has not run on in this process, in the
        phase "reference", which declares its own stall limit (REFERENCE_WARMUP_STALL_S): its JIT
        compile and autotuning happen here, before the candidate's timing, not inside a phase whose
        limit is sized for one call. A reference that fails here fails again where it is timed."""
        for shape in shapes:
            key = (workload.content_hash, shape_key(shape))
            if key in self.warm:
                continue
            self.chan.progress("reference", shape=shape_key(shape), stall_s=REFERENCE_WARMUP_STALL_S)
            inputs = place_inputs(workload, shape, workload.make_inputs(shape, 777, device="cuda"))
            try:
                workload.vendor(inputs, shape)
            except RuntimeError as exc:  # named as the reference's, so a run can fall back from it
                raise RuntimeError(f"in vendor, the reference's first call: {exc}") from exc
            _sync("after the reference's first call")
            del inputs
            self.warm.add(key)

    # -- correctness -------------------------------------------------------------------------
    def correctness(self, cand: Candidate, workload, shapes, seeds) -> list[dict]:
        stream = torch.cuda.current_stream()
        report = []
        for kind, shape in shapes:
            self.chan.progress("correctness", shape=shape_key(shape))
            bufs = None
            outs = alloc_outputs(workload, shape)
            scal = workload.scalars(shape)
            per_seed = []
            aliased: dict = {}
            for seed in seeds:
                self.chan.beat()
                fresh = workload.make_inputs(shape, seed, device="cuda")
                if bufs is None:
                    bufs = place_inputs(workload, shape, fresh)
                    aliased = alias_outputs(workload, shape, bufs, outs)
                else:  # same pointers, new contents
                    for k, v in fresh.items():
                        bufs[k].copy_(v)
                _poison({k: v for k, v in outs.items() if k not in aliased})  # an aliased output holds its input
                _sync("before the call")
                rc = cand.call({**bufs, **outs}, scal, stream)
                _check_rc(rc, f"shape {shape_key(shape)} seed {seed}")
                _sync(f"shape {shape_key(shape)} seed {seed}")
                mutated = [k for k in workload.input_names
                           if k not in aliased.values() and not torch.equal(bufs[k], fresh[k])]
                refs = workload.reference(fresh, shape)
                cmp = compare_outputs(outs, refs, workload.tolerance)
                problems = workload.check(fresh, outs, shape)
                entry = {"seed": seed, "ok": all(c.ok for c in cmp.values()) and not mutated and not problems,
                         "outputs": {k: c.to_dict() for k, c in cmp.items()}, "mutated_inputs": mutated,
                         "check": problems}
                if kind == "benchmark" and seed == seeds[0]:
                    entry["negative_controls"] = negative_controls(workload, fresh, refs, shape)
                per_seed.append(entry)
                del fresh, refs
            report.append({"kind": kind, "shape": shape, "ok": all(s["ok"] for s in per_seed), "seeds": per_seed})
            del bufs, outs
            torch.cuda.empty_cache()
        return report

    # -- activity check ----------------------------------------------------------------------
    def activity(self, cand: Candidate, workload, shape) -> dict:
        """One call under CUPTI: which kernels ran, on which streams, for how long."""
        self.chan.progress("activity", shape=shape_key(shape))
        stream = torch.cuda.current_stream()
        inputs = place_inputs(workload, shape, workload.make_inputs(shape, 12345, device="cuda"))
        outs = alloc_outputs(workload, shape)
        scal = workload.scalars(shape)
        _sync("before the activity check")
        limit_before = self.dev.persisting_l2_limit()  # the worker's (0) unless an earlier call changed it
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            marker = torch.empty(1, device="cuda").fill_(0)  # a harness kernel: names our stream
            rc = cand.call({**inputs, **outs}, scal, stream)
            torch.cuda.synchronize()
        _check_rc(rc, "activity check")
        limit_after = self.dev.persisting_l2_limit()
        kernels = [e for e in trace_events(prof) if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
        harness_stream = None
        cand_kernels = []
        for e in kernels:
            name = e.get("name", "")
            if "fill" in name.lower() and harness_stream is None:
                harness_stream = e.get("args", {}).get("stream")
                continue
            cand_kernels.append({"name": name[:200], "stream": e.get("args", {}).get("stream"),
                                 "dur_us": float(e.get("dur", 0.0)), "cat": e.get("cat")})
        off_stream = [k for k in cand_kernels if harness_stream is not None and k["stream"] != harness_stream]
        del marker, inputs, outs
        return {
            "available": bool(kernels),
            "harness_stream": harness_stream,
            "kernels": cand_kernels[:64],
            "kernel_count": len(cand_kernels),
            "kernel_time_us": sum(k["dur_us"] for k in cand_kernels if k["cat"] == "kernel"),
            "off_stream": off_stream[:16],
            "persisting_l2_limit_before": limit_before,
            "persisting_l2_limit_after": limit_after,
        }

    # -- timing ------------------------------------------------------------------------------
    def timing(self, cand: Candidate, workload, shape, cfg: dict) -> dict:
        warmup, reps, trials = int(cfg["warmup"]), int(cfg["reps"]), int(cfg["trials"])
        rng = random.Random(cfg.get("seed", 0))
        stream = torch.cuda.current_stream()
        scal = workload.scalars(shape)
        in_bytes = sum(t.numel() * t.element_size() for t in workload.make_inputs(shape, 0, device="cuda").values())
        nsets = max(2, min(4, int(cfg.get("rotation_bytes", 4 * 2**30) // max(1, in_bytes))))
        sets = [workload.make_inputs(shape, 1000 + i, device="cuda") for i in range(nsets)]
        if workload.pointer_offset(shape):
            sets = [place_inputs(workload, shape, s) for s in sets]
        outs = alloc_outputs(workload, shape)
        vend_inputs = sets  # the vendor reads the same rotated buffers
        samples = {"candidate": [], "vendor": []}
        per_trial = {"candidate": [], "vendor": []}
        rechecks = []
        seed_counter = [50_000]

        def vendor(buf: dict) -> int:
            workload.vendor(buf, shape)
            return 0

        def the_call(which: str, buf: dict):
            if which == "candidate":
                return lambda: cand.call({**buf, **outs}, scal, stream)
            return lambda: vendor(buf)

        # With a backlog (timing "backlog_us" > 0), each side's host-side dispatch is measured first,
        # in untimed calls after a sync, and sizes the spin queued before each of its timed calls.
        floor_us = float(cfg.get("backlog_us", 0) or 0)
        spin = {"candidate": 0.0, "vendor": 0.0}
        host: dict[str, list[float]] = {"candidate": [], "vendor": []}
        if floor_us > 0:
            for which in spin:
                seen: list[float] = []
                for i in range(BACKLOG_CALIBRATION_CALLS):
                    self.chan.beat()
                    _sync("before a dispatch calibration call")
                    t0 = time.perf_counter()
                    _check_rc(the_call(which, sets[i % nsets])(), "dispatch calibration call")
                    seen.append((time.perf_counter() - t0) * 1e6)
                spin[which] = backlog_for(floor_us, seen)
            _sync("after dispatch calibration")

        def timed(which: str, buf: dict, keep: bool = False) -> float:
            seed_counter[0] += 1
            refresh_inputs(workload, shape, buf, seed_counter[0])
            return timed_call(self.dev, the_call(which, buf), stream, spin[which], host[which] if keep else None)[1]

        budget = workload.timing_budget_s
        fitted = None
        if budget:  # the workload caps a trial's seconds: size warm-up and reps from one call of each
            probe_s = (timed("candidate", sets[0]) + timed("vendor", sets[0])) * 1e-6
            warmup, reps, fitted = fit_to_budget(budget, probe_s, warmup, reps)
        for trial in range(trials):
            self.chan.progress("timing", shape=shape_key(shape), trial=trial)
            check_at = set(rng.sample(range(reps), k=min(3, reps))) | {reps - 1}
            t_c, t_v = [], []
            for i in range(warmup + reps):
                buf = sets[i % nsets]
                order = ("candidate", "vendor") if (i + trial) % 2 == 0 else ("vendor", "candidate")
                for which in order:
                    self.chan.beat()
                    us = timed(which, buf, keep=i >= warmup)
                    if i >= warmup:
                        (t_c if which == "candidate" else t_v).append(us)
                        if which == "candidate" and (i - warmup) in check_at:
                            _sync("timed call")
                            refs = workload.reference(buf, shape)
                            cmp = compare_outputs(outs, refs, workload.tolerance)
                            problems = workload.check(buf, outs, shape)
                            rechecks.append({"trial": trial, "call": i - warmup,
                                             "ok": all(c.ok for c in cmp.values()) and not problems,
                                             "reason": "; ".join([c.reason for c in cmp.values() if not c.ok]
                                                                 + problems)})
            _sync("after a timing trial")
            samples["candidate"].append(t_c)
            samples["vendor"].append(t_v)
            per_trial["candidate"].append(statistics.median(t_c))
            per_trial["vendor"].append(statistics.median(t_v))
        del sets, vend_inputs, outs
        torch.cuda.empty_cache()
        cand_us = statistics.median(per_trial["candidate"])
        vend_us = statistics.median(per_trial["vendor"])
        all_c = sorted(x for t in samples["candidate"] for x in t)
        bytes_moved, flops = workload.bytes_moved(shape), workload.flops(shape)
        bw = self.dev.copy_bandwidth()
        floor_s = bytes_moved / bw
        peak = None
        if bytes_moved and flops / bytes_moved > 50:  # compute-heavy: the FLOP floor can dominate
            peak = self.dev.bf16_peak()
            floor_s = max(floor_s, flops / peak)
        q = lambda p: all_c[min(len(all_c) - 1, int(p * len(all_c)))]
        return {
            "shape": shape,
            "method": "cuda_events",
            "statistic": "median of per-trial medians",
            "warmup": warmup, "reps": reps, "trials": trials, "input_sets": nsets,
            **({"fitted_to_budget": fitted} if fitted else {}),
            "l2_flush_bytes": self.dev.flush.numel() * 4,
            "latency_us": cand_us,
            "vendor_latency_us": vend_us,
            "trial_medians_us": per_trial["candidate"],
            "vendor_trial_medians_us": per_trial["vendor"],
            "spread": (max(per_trial["candidate"]) - min(per_trial["candidate"])) / cand_us,
            "p10_us": q(0.10), "p90_us": q(0.90), "min_us": all_c[0],
            "speedup_vs_vendor": vend_us / cand_us,
            "bytes_moved": bytes_moved, "flops": flops,
            "achieved_bytes_per_s": bytes_moved / (cand_us * 1e-6),
            "achieved_flops_per_s": flops / (cand_us * 1e-6),
            "copy_bandwidth_bytes_per_s": bw,
            "bandwidth_fraction": bytes_moved / (cand_us * 1e-6) / bw,
            "peak_flops_per_s": peak,
            "flops_fraction": (flops / (cand_us * 1e-6) / peak) if peak else None,
            "floor_us": floor_s * 1e6,
            "rechecks": rechecks,
            # host-side time of each timed call; with a backlog, the spin queued before each call
            "host_dispatch_us": {k: host_summary(v, spin[k] if floor_us > 0 else None) for k, v in host.items()},
            **({"backlog_us": dict(spin)} if floor_us > 0 else {}),
        }

    # -- device settings ---------------------------------------------------------------------
    def check_settings(self, where: str) -> None:
        """CandidateFailure (GUARD_REJECTED, persisting_l2) when the candidate's calls so far left the
        L2 settings other than the worker set them; they are put back first."""
        now = self.dev.l2_settings()
        failure = settings_changed(self.dev.settings_baseline, now, where)
        if failure is not None:
            self.dev.restore_l2_settings()
            raise failure

    def _measure(self, result: dict, cand: Candidate, workload, bench: list, cfg: dict) -> None:
        """The reference's first calls, the activity check and the timing of every benchmark shape:
        what must run on a card no other worker is using (under GpuLock, exclusively)."""
        self.warm_reference(workload, bench)

        act = self.activity(cand, workload, bench[0])
        result["activity"] = act
        if act["off_stream"]:
            k = act["off_stream"][0]
            raise CandidateFailure("GUARD_REJECTED", "off_stream_work",
                                   f"kernel {k['name']} ran on stream {k['stream']}, not the harness "
                                   f"stream {act['harness_stream']}: work outside the timed stream")
        self.check_settings("after the activity call")
        for shape in bench:
            tm = self.timing(cand, workload, shape, cfg)
            result["timing"].append(tm)
            self.check_settings(f"after the timed calls of {shape_key(shape)}")
            bad_re = [r for r in tm["rechecks"] if not r["ok"]]
            if bad_re:
                raise CandidateFailure("INCORRECT", "timed_output_wrong",
                                       f"{shape_key(shape)}: output of timed call {bad_re[0]['call']} "
                                       f"(trial {bad_re[0]['trial']}) wrong: {bad_re[0]['reason']}")
            if tm["latency_us"] < cfg.get("floor_factor", 0.9) * tm["floor_us"]:
                raise CandidateFailure("GUARD_REJECTED", "implausible_speed",
                                       f"{shape_key(shape)}: {tm['latency_us']:.2f} us is under the "
                                       f"physical floor {tm['floor_us']:.2f} us (bytes / measured "
                                       "bandwidth, FLOPs / measured peak)")

    # -- one request -------------------------------------------------------------------------
    def evaluate(self, req: dict) -> dict:
        t0 = time.perf_counter()
        self.lock.waited = 0.0  # the phases and wall_s below leave out the time waited for the GPU
        result = {"status": None, "env": self.env, "correctness": [], "activity": None, "timing": []}
        try:
            workload = load_workload(req["workload_path"])
            cand = Candidate(req["so_path"], workload)
            shapes = [(s["kind"], s["shape"]) for s in req["shapes"]]
            with self.lock.held(exclusive=False):
                result["correctness"] = self.correctness(cand, workload, shapes, req["seeds"])
                self.check_settings("after the correctness calls")
            t_checked = time.perf_counter()
            result["phases"] = {"correctness_s": t_checked - t0 - self.lock.waited, "timing_s": 0.0}
            waited_before = self.lock.waited
            bad = [c for c in result["correctness"] if not c["ok"]]
            if bad:
                first = bad[0]
                seed = next(s for s in first["seeds"] if not s["ok"])
                why = "; ".join([f"{k}: {v['reason']}" for k, v in seed["outputs"].items() if not v["ok"]]
                                + [f"check: {p}" for p in seed["check"][:3]])
                if seed["mutated_inputs"]:
                    why = f"inputs mutated: {seed['mutated_inputs']}" + (f"; {why}" if why else "")
                raise CandidateFailure("INCORRECT", "wrong_values",
                                       f"{len(bad)} of {len(shapes)} shapes fail; first {first['kind']} "
                                       f"{shape_key(first['shape'])} seed {seed['seed']}: {why}")
            bench = [s for k, s in shapes if k == "benchmark"]
            if req.get("timing") and bench:
                with self.lock.held(exclusive=True):
                    self._measure(result, cand, workload, bench, req["timing"])
            result["phases"]["timing_s"] = time.perf_counter() - t_checked - (self.lock.waited - waited_before)
            result["status"] = "PASSED"
        except CandidateFailure as f:
            result.update(status=f.status, error_kind=f.kind, error_message=f.message, fatal=f.fatal)
        except torch.cuda.OutOfMemoryError as exc:
            result.update(status="RUNTIME_ERROR", error_kind="out_of_memory", error_message=str(exc)[:500],
                          fatal=False)
        except RuntimeError as exc:  # CUDA errors surfacing inside torch ops
            msg = str(exc)
            fatal = "CUDA" in msg or "cuda" in msg
            result.update(status="RUNTIME_ERROR", error_kind="cuda_error" if fatal else "runtime_error",
                          error_message=msg.strip()[:1000], fatal=fatal)
        if not result.get("fatal") and self.dev.l2_settings() != self.dev.settings_baseline:
            self.dev.restore_l2_settings()  # a candidate rejected for something else changed them too
            result["l2_settings_restored"] = True
        result["wall_s"] = time.perf_counter() - t0 - self.lock.waited
        if self.lock.fd is not None:
            result.setdefault("phases", {})["gpu_wait_s"] = round(self.lock.waited, 3)
        return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fd", type=int, required=True)
    ns = ap.parse_args(argv)
    chan = Channel(ns.fd)
    lock = GpuLock(os.environ.get(GPU_LOCK_ENV), chan)
    try:
        with lock.held(exclusive=False, announce=False):
            ev = Evaluator(chan, lock)
    except Exception as exc:
        chan.send({"event": "fatal", "error_kind": "no_device", "error_message": f"{type(exc).__name__}: {exc}"})
        return 3
    chan.send({"event": "ready", "env": ev.env})
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        if req.get("op") == "exit":
            break
        if req.get("op") == "evaluate":
            try:
                res = ev.evaluate(req)
            except Exception as exc:  # a harness bug: report it, never hang the driver
                res = {"status": "RUNTIME_ERROR", "error_kind": "harness_error",
                       "error_message": "".join(traceback.format_exception(exc))[-2000:], "fatal": True}
            chan.send({"event": "result", "id": req.get("id"), "result": res})
            if res.get("fatal"):
                return 4
        elif req.get("op") == "ping":
            chan.send({"event": "pong", "id": req.get("id")})
        elif req.get("op") == "bandwidth":
            with lock.held():
                bw = ev.dev.copy_bandwidth()
            chan.send({"event": "result", "id": req.get("id"), "result": {"copy_bandwidth_bytes_per_s": bw}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
