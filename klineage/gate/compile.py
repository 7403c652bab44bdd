"""Compile a kernel source with nvcc into a shared object, keeping the ptxas resource report.

Builds are cached by the content hash of (source, flags, nvcc version, arch), so an identical
request never runs nvcc twice; `compile_many` runs nvcc jobs in parallel on a thread pool (nvcc is
a subprocess, so threads suffice) and is the only compile path, off the GPU.

A hostile source can make nvcc hang (a constexpr evaluation that runs for days) or blow up (template
instantiations that grow without end). Every nvcc runs in a session of its own under an address-space
cap (RLIMIT_AS, inherited by cudafe++, cicc, ptxas and the host compiler) with its temporary files in
the build's own folder; past its time limit the whole session is killed with SIGKILL, not just nvcc,
so no orphaned compiler stage keeps running. Both come back as a CompileResult with ok=False.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from klineage import settings
from klineage.errors import InputError

DEFAULT_ARCH = "sm_90a"
# the targets a gate may build for (--arch, [gate] arch): Ampere to Blackwell, with the arch-specific
# "a" forms where nvcc 13 has them (wgmma and setmaxnreg assemble for sm_90a only)
ARCHS = ("sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_103", "sm_103a",
         "sm_120", "sm_120a", "sm_121")
# What the rest of KLineage knows of targets is read off ARCHS: the arch-specific targets, those from
# one on, the compile scope a mined step is checked over (one target of each generation), and the
# shared memory each target gives a block.
ARCH_SPECIFIC = tuple(a for a in ARCHS if a.endswith("a"))
SCOPE_ARCHS = tuple(a for a in ARCHS if a in ("sm_80", "sm_89", "sm_90a", "sm_100", "sm_120"))
KIB = 1024
# Shared memory per block, from the CUDA C++ Programming Guide's per-arch figures (technical
# specifications per compute capability): a static `__shared__` allocation is limited to 48 KiB;
# dynamic shared memory above 48 KiB needs cudaFuncSetAttribute(MaxDynamicSharedMemorySize), up to
# the opt-in maximum below.
SMEM_STATIC_LIMIT = 48 * KIB
SMEM_OPTIN_MAX = {"sm_80": 163 * KIB, "sm_86": 99 * KIB, "sm_89": 99 * KIB, "sm_90": 227 * KIB,
                  "sm_100": 227 * KIB, "sm_120": 99 * KIB}
# Observed, not in the guide: ptxas (nvcc 13.0) accepts static shared memory up to the opt-in
# maximum for the arch-specific sm_90a target ("0x38c00 max"; 0xc000 for sm_90 and the others), and
# an H200 launches a 227 KiB static kernel built for sm_90a without any attribute.
SMEM_STATIC_LIMIT_BY_TARGET = {"sm_90a": 227 * KIB}
SMEM_TARGETS = tuple(a for a in ARCHS if a in SMEM_OPTIN_MAX or a in SMEM_STATIC_LIMIT_BY_TARGET)


def targets_from(first: str) -> tuple[str, ...]:
    """The targets from `first` on (sm_90 and newer, ...), in ARCHS order."""
    return ARCHS[ARCHS.index(first):]

BASE_FLAGS = ("-O3", "-shared", "-Xcompiler", "-fPIC", "-Xptxas", "-v", "-lineinfo")
COMPILE_TIMEOUT_S = 120.0  # KLINEAGE_NVCC_TIMEOUT_S overrides
NO_NVCC = "nvcc not found on PATH: install the CUDA toolkit (nvcc 13) or add it to PATH"
COMPILE_MEMORY_MB = 8192  # address space of each compiler process; KLINEAGE_NVCC_MEMORY_MB overrides (0: no cap)


@dataclass
class KernelResources:
    name: str
    registers: int = 0
    shared_bytes: int = 0
    stack_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    barriers: int = 0


@dataclass
class CompileResult:
    ok: bool
    build_key: str
    arch: str
    flags: list[str]
    nvcc_version: str
    log: str
    so_path: str | None = None
    seconds: float = 0.0
    cached: bool = False
    resources: list[KernelResources] = field(default_factory=list)
    error_kind: str | None = None  # "nvcc_error" | "timeout" | "memory_limit" | "no_nvcc"
    error_message: str | None = None

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["resources"] = [dict(r.__dict__) for r in self.resources]
        return d

    @property
    def spills(self) -> bool:
        return any(r.spill_load_bytes or r.spill_store_bytes for r in self.resources)


@lru_cache(maxsize=None)
def nvcc_version(nvcc: str = "nvcc") -> str:
    """The nvcc release line ('13.0, V13.0.88'), or '' when nvcc is not on PATH."""
    exe = shutil.which(nvcc)
    if exe is None:
        return ""
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    m = re.search(r"release ([\d.]+, V[\d.]+)", out)
    return m.group(1) if m else out.strip().splitlines()[-1]


def arch_flags(arch: str) -> list[str]:
    """nvcc target flags: the explicit -gencode form, which assembles wgmma for sm_90a."""
    num = arch.removeprefix("sm_")
    return [f"-gencode=arch=compute_{num},code=sm_{num}"]


def build_key(source: str, flags: list[str], arch: str, version: str) -> str:
    h = hashlib.sha256()
    for part in (source, "\0".join(flags), arch, version):
        h.update(part.encode())
        h.update(b"\x1f")
    return h.hexdigest()


_FN_RE = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_STACK_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers")
_SMEM_RE = re.compile(r"(\d+) bytes smem")
_BAR_RE = re.compile(r"used (\d+) barriers")


def parse_ptxas(log: str) -> list[KernelResources]:
    """Per-kernel registers, shared memory, stack and spills from a ptxas -v report."""
    kernels: list[KernelResources] = []
    cur: KernelResources | None = None
    for line in log.splitlines():
        if m := _FN_RE.search(line):
            cur = KernelResources(name=m.group(1))
            kernels.append(cur)
            continue
        if cur is None:
            continue
        if m := _STACK_RE.search(line):
            cur.stack_bytes, cur.spill_store_bytes, cur.spill_load_bytes = map(int, m.groups())
        if m := _USED_RE.search(line):
            cur.registers = int(m.group(1))
            if s := _SMEM_RE.search(line):
                cur.shared_bytes = int(s.group(1))
            if b := _BAR_RE.search(line):
                cur.barriers = int(b.group(1))
    return kernels


def compile_limits() -> tuple[float, int]:
    """(seconds, MiB): nvcc's wall-clock limit and each compiler process's address-space cap, from
    KLINEAGE_NVCC_TIMEOUT_S and KLINEAGE_NVCC_MEMORY_MB when set."""
    out = []
    for var, default, kind in (("KLINEAGE_NVCC_TIMEOUT_S", COMPILE_TIMEOUT_S, float),
                               ("KLINEAGE_NVCC_MEMORY_MB", COMPILE_MEMORY_MB, int)):
        raw = os.environ.get(var, "").strip()
        try:
            val = kind(raw) if raw else default
        except ValueError:
            raise InputError(f"{var}={raw!r} is not a number: set it to a {kind.__name__} or unset it") from None
        if val < 0:
            raise InputError(f"{var}={raw!r} is negative: set it to a positive value or unset it")
        out.append(val)
    return out[0], out[1]


# What this process asked of nvcc, by purpose: tool runs (nvcc or ptxas started) with their wall seconds,
# and answers that needed no run (the on-disk cache, a shipped record). Read with nvcc_calls().
PURPOSES = ("build", "ptx", "front_end", "compile_check")
_CALLS: dict[str, dict[str, float]] = {p: {"runs": 0, "seconds": 0.0, "cached": 0, "recorded": 0} for p in PURPOSES}
_CALLS_LOCK = threading.Lock()


def _count(purpose: str, **add) -> None:
    with _CALLS_LOCK:
        c = _CALLS.setdefault(purpose, {"runs": 0, "seconds": 0.0, "cached": 0, "recorded": 0})
        for k, v in add.items():
            c[k] += v


def nvcc_calls() -> dict[str, dict[str, float]]:
    """A copy of this process's counts, by purpose (build: the gate's shared objects; ptx: PTX with line
    info and ptxas's report, the compiler evidence; front_end: the sweep's buildable check;
    compile_check: the compile scope): {runs, seconds, cached, recorded}. `runs` counts every nvcc or
    ptxas process started, `seconds` their wall time; `cached` and `recorded` the answers that
    started none. Subtract two copies (calls_since) to count one stage."""
    with _CALLS_LOCK:
        return {p: dict(c) for p, c in _CALLS.items()}


def calls_since(before: dict) -> dict[str, dict[str, float]]:
    """The counts of nvcc_calls() since `before` (an earlier copy), with a "total" entry."""
    now = nvcc_calls()
    out = {p: {k: c[k] - before.get(p, {}).get(k, 0) for k in c} for p, c in now.items()}
    out["total"] = {k: sum(c[k] for c in out.values()) for k in ("runs", "seconds", "cached", "recorded")}
    return out


def _run_nvcc(cmd: list[str], cwd: Path, timeout_s: float, memory_mb: int,
              purpose: str = "build") -> tuple[int | None, str]:
    """Run nvcc in a new session, its temporary files under `cwd`, each compiler process capped to
    `memory_mb` of address space. Returns (exit code, output); exit code None when it ran past
    `timeout_s`, in which case the whole session (nvcc and every stage it started) was killed. Counted
    under `purpose` (nvcc_calls)."""
    t0 = time.perf_counter()
    try:
        return _run_session(cmd, cwd, timeout_s, memory_mb)
    finally:
        _count(purpose, runs=1, seconds=time.perf_counter() - t0)


def _run_session(cmd: list[str], cwd: Path, timeout_s: float, memory_mb: int) -> tuple[int | None, str]:
    env = dict(os.environ, TMPDIR=str(cwd), TMP=str(cwd), TEMP=str(cwd))
    # The cap is set by a shell that then becomes nvcc (exec): no preexec_fn, which is unsafe under
    # compile_many's threads. `ulimit -v` takes KiB; a refusal (a lower hard limit) keeps the lower one.
    if memory_mb:
        cmd = ["/bin/sh", "-c", 'ulimit -v "$0" 2>/dev/null; exec "$@"', str(memory_mb * 1024), *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd, env=env,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        return proc.returncode, out.decode(errors="replace")
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:  # every writer of the pipe is dead now, so this returns at once
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a stage left the session and holds the pipe: stop reading
            proc.stdout.close()
            proc.wait()
            out = b""
        return None, (out or b"").decode(errors="replace")


def run_nvcc(args: list[str], cwd: Path, timeout_s: float | None = None,
             memory_mb: int | None = None, purpose: str = "compile_check") -> tuple[int | None, str]:
    """Run `nvcc ARGS` in `cwd` under the same limits as every build here (compile_limits(): the
    memory cap per compiler process; the whole process group killed past the time limit), counted
    under `purpose`. (exit code, output); exit code None when it ran past `timeout_s`."""
    default_timeout, default_memory = compile_limits()
    return _run_nvcc(["nvcc", *args], cwd, default_timeout if timeout_s is None else timeout_s,
                     default_memory if memory_mb is None else memory_mb, purpose)


def count_cached(purpose: str, recorded: bool = False) -> None:
    """Count an answer to `purpose` that started no nvcc (a cached verdict, a shipped record)."""
    _count(purpose, **({"recorded": 1} if recorded else {"cached": 1}))


def compile_kernel(source: str, arch: str = DEFAULT_ARCH, extra_flags: tuple[str, ...] = (),
                   cache_dir: Path | None = None, timeout_s: float | None = None,
                   memory_mb: int | None = None) -> CompileResult:
    """Build `source` into a cached shared object. Never raises for a bad kernel: a failed, hung
    or runaway nvcc comes back as a CompileResult with ok=False and the log. `timeout_s` and
    `memory_mb` default to compile_limits()."""
    flags = list(BASE_FLAGS) + arch_flags(arch) + list(extra_flags)
    version = nvcc_version()
    key = build_key(source, flags, arch, version)
    if not version:
        return CompileResult(False, key, arch, flags, "", "", error_kind="no_nvcc",
                             error_message=NO_NVCC)
    default_timeout, default_memory = compile_limits()
    timeout_s = default_timeout if timeout_s is None else timeout_s
    memory_mb = default_memory if memory_mb is None else memory_mb
    root = Path(cache_dir or settings.build_cache_dir())
    out_dir = root / key[:2] / key
    meta_path = out_dir / "build.json"
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text())
            res = _from_meta(meta, out_dir)
            if res.so_path is None or Path(res.so_path).is_file():
                res.cached = True
                count_cached("build")
                return res
        except (ValueError, KeyError, TypeError):
            pass  # a damaged cache entry is rebuilt
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="build-", dir=root))
    src = tmp / "kernel.cu"
    src.write_text(source)
    so = tmp / "kernel.so"
    t0 = time.perf_counter()
    code, log = _run_nvcc(["nvcc", *flags, "-o", str(so), str(src)], tmp, timeout_s, memory_mb)
    seconds = time.perf_counter() - t0
    log = log.replace(str(tmp) + "/", "")
    if code is None:
        shutil.rmtree(tmp, ignore_errors=True)
        return CompileResult(False, key, arch, flags, version, log, seconds=seconds, error_kind="timeout",
                             error_message=f"nvcc ran past its time limit of {timeout_s:g} s; it and every "
                                           "compiler stage it started were killed")
    ok = code == 0 and so.is_file()
    res = CompileResult(ok, key, arch, flags, version, log, seconds=seconds, resources=parse_ptxas(log))
    if not ok:
        res.error_kind = "nvcc_error"
        res.error_message = _first_error(log) or f"nvcc exited with {code}"
        if memory_mb and out_of_memory(log, code):
            # Not cached: the outcome depends on the cap, which a later run may raise.
            shutil.rmtree(tmp, ignore_errors=True)
            res.error_kind = "memory_limit"
            res.error_message = (f"nvcc ran out of memory under its cap of {memory_mb} MiB per compiler process "
                                 f"({res.error_message})")
            return res
    # Publish atomically: a concurrent identical build loses the rename and keeps the winner.
    meta = res.to_dict()
    meta["so_path"] = "kernel.so" if ok else None
    (tmp / "build.json").write_text(json.dumps(meta, indent=1))
    src.unlink(missing_ok=True)
    for leftover in tmp.iterdir():  # nvcc's own temporaries, when a stage left any behind
        if leftover.name not in ("build.json", "kernel.so"):
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(tmp, out_dir)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    res.so_path = str(out_dir / "kernel.so") if ok else None
    return res



PTX_FLAGS = ("-O3", "-lineinfo")


@dataclass
class PtxResult:
    """PTX with line info for one source, and what ptxas says of it (registers, shared bytes, spills).
    `ptx` is "" unless ok."""
    ok: bool
    key: str
    arch: str
    flags: list[str]
    nvcc_version: str
    ptx: str = ""
    log: str = ""
    seconds: float = 0.0
    cached: bool = False
    resources: list[KernelResources] = field(default_factory=list)
    error_kind: str | None = None  # "nvcc_error" | "timeout" | "memory_limit" | "no_nvcc"
    error_message: str | None = None


def compile_ptx(source: str, arch: str = DEFAULT_ARCH, extra_flags: tuple[str, ...] = (),
                cache_dir: Path | None = None, timeout_s: float | None = None,
                memory_mb: int | None = None) -> PtxResult:
    """`source` compiled to PTX with line info (`nvcc -ptx -lineinfo`, no GPU needed), then assembled by
    `ptxas -v` for its resource report; cached beside the builds by the same kind of key, so a kernel
    state is compiled to PTX once. Both tools run like a build (own session, the memory cap, killed
    whole past the time limit, which covers the two steps together). Never raises for a bad kernel:
    a failure comes back with ok=False and the log."""
    flags = list(PTX_FLAGS) + arch_flags(arch) + list(extra_flags)
    plain = build_key(source, ["-ptx", *flags], arch, "")
    rec = _recorded_ptx(plain)
    if rec is not None:
        count_cached("ptx", recorded=True)
        return _seen_ptx(plain, rec)
    version = nvcc_version()
    key = build_key(source, ["-ptx", *flags], arch, version)
    if not version:
        return PtxResult(False, key, arch, flags, "", error_kind="no_nvcc", error_message=NO_NVCC)
    default_timeout, default_memory = compile_limits()
    timeout_s = default_timeout if timeout_s is None else timeout_s
    memory_mb = default_memory if memory_mb is None else memory_mb
    root = Path(cache_dir or settings.build_cache_dir()) / "ptx"
    out_dir = root / key[:2] / key
    meta_path = out_dir / "ptx.json"
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text())
            meta["resources"] = [KernelResources(**r) for r in meta["resources"]]
            res = PtxResult(**meta)
            res.ptx = (out_dir / "kernel.ptx").read_text() if res.ok else ""
            res.cached = True
            count_cached("ptx")
            return _seen_ptx(plain, res)
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged cache entry is compiled again
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="ptx-", dir=root))
    try:
        (tmp / "kernel.cu").write_text(source)
        t0 = time.perf_counter()
        code, log = _run_nvcc(["nvcc", "-ptx", *flags, "-o", str(tmp / "kernel.ptx"), str(tmp / "kernel.cu")], tmp,
                              timeout_s, memory_mb, "ptx")
        if code == 0:
            left = max(1.0, timeout_s - (time.perf_counter() - t0))
            code2, log2 = _run_nvcc(["ptxas", "-v", f"-arch={arch}", "-o", str(tmp / "kernel.cubin"),
                                     str(tmp / "kernel.ptx")], tmp, left, memory_mb, "ptx")
            log += log2
            code = code2 if code2 is None or code2 != 0 else 0
        seconds = time.perf_counter() - t0
        log = log.replace(str(tmp) + "/", "")
        res = PtxResult(code == 0, key, arch, flags, version, log=log, seconds=seconds)
        if code is None:
            res.error_kind = "timeout"
            res.error_message = (f"nvcc -ptx / ptxas ran past the time limit of {timeout_s:g} s; every compiler stage "
                                 "was killed")
            return res
        if code != 0:
            res.error_kind = "nvcc_error"
            res.error_message = _first_error(log) or f"the PTX compile exited with {code}"
            if memory_mb and out_of_memory(log, code):
                res.error_kind = "memory_limit"
                return res  # not cached: the outcome depends on the cap
        else:
            res.ptx = (tmp / "kernel.ptx").read_text()
            res.resources = parse_ptxas(log)
        meta = {k: v for k, v in res.__dict__.items() if k not in ("ptx", "cached")}
        meta["resources"] = [dict(r.__dict__) for r in res.resources]
        (tmp / "ptx.json").write_text(json.dumps(meta, indent=1))
        for leftover in tmp.iterdir():
            if leftover.name not in ("ptx.json", "kernel.ptx"):
                shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else leftover.unlink(missing_ok=True)
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(tmp, out_dir)
        except OSError:
            pass  # a concurrent identical compile published first
        return _seen_ptx(plain, res)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# Compiler evidence recorded with the corpus (skills_db/compiler/*.ptx.jsonl.xz): PtxResults by a key
# without nvcc's version (source, flags, arch), answered before the cache and nvcc, so a replay reads
# the compiler evidence the recorded run saw on any machine, nvcc or not. Held compressed; kept for
# export (export_ptx_records) only while collect_ptx(True).
PTX_SUFFIX = ".ptx.jsonl.xz"
_PTX_RECORDED: dict[str, bytes] = {}
_PTX_SEEN: dict[str, dict] = {}
_PTX_COLLECT = {"on": False}
_PTX_FIELDS = ("ok", "arch", "flags", "nvcc_version", "ptx", "log", "seconds", "resources", "error_kind",
               "error_message")


def _recorded_ptx(plain: str) -> PtxResult | None:
    with _FE_LOCK:
        blob = _PTX_RECORDED.get(plain)
    if blob is None:
        return None
    import zlib
    rec = json.loads(zlib.decompress(blob))
    rec["resources"] = [KernelResources(**r) for r in rec["resources"]]
    return PtxResult(key=rec.pop("key"), cached=True, **rec)


def _seen_ptx(plain: str, res: PtxResult) -> PtxResult:
    """`res`, kept for export_ptx_records while collect_ptx is on (a definite answer: not a time limit
    or the memory cap, which say nothing of the kernel)."""
    if _PTX_COLLECT["on"] and res.error_kind not in ("timeout", "memory_limit", "no_nvcc"):
        rec = {k: getattr(res, k) for k in _PTX_FIELDS}
        rec["resources"] = [dict(r.__dict__) for r in res.resources]
        with _FE_LOCK:
            _PTX_SEEN[plain] = {"plain": plain, "key": res.key, **rec}
    return res


def collect_ptx(on: bool = True) -> None:
    """Keep every PTX result this process gets from now on, for export_ptx_records."""
    _PTX_COLLECT["on"] = on


def export_ptx_records(path: Path) -> int:
    """Write the PTX results kept since collect_ptx(True) to PATH (*.ptx.jsonl.xz: one JSON object a line,
    sorted by key, xz-compressed: runs of similar kernels compress well together); their count."""
    import lzma
    with _FE_LOCK:
        recs = [_PTX_SEEN[k] for k in sorted(_PTX_SEEN)]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    with lzma.open(part, "wt", preset=9 | lzma.PRESET_EXTREME) as fh:
        for r in recs:
            fh.write(json.dumps(r, sort_keys=True) + "\n")
    os.replace(part, path)
    return len(recs)


def load_ptx_records(path: Path, replay: bool = False) -> int:
    """Take the PTX results of a file export_ptx_records wrote as this process's first answers; their
    count. Outside a replay only when they were made by the nvcc this machine has, or it has none; in a
    replay always (they are what the recorded run's audits read). InputError for a file that is not
    such a record."""
    import lzma
    import zlib
    here = nvcc_version()
    n = 0
    try:
        with lzma.open(path, "rt") as fh:
            for line in fh:
                if not line.strip():
                    continue
                rec = json.loads(line)
                plain = rec.pop("plain")
                if not replay and here and rec.get("nvcc_version") != here:
                    continue
                with _FE_LOCK:
                    _PTX_RECORDED[plain] = zlib.compress(json.dumps(rec).encode(), 6)
                n += 1
    except (OSError, ValueError, KeyError, lzma.LZMAError) as exc:
        raise InputError(f"{path}: not a PTX record ({exc}); write one with "
                         "klineage.gate.compile.export_ptx_records or remove it") from None
    return n

# Front-end answers by a key without nvcc's version (source, flags, arch): those loaded from a record
# (load_front_end_answers) are answered first; every definite answer this process got is kept for
# export_front_end_answers, so a run's sweep axes replay where no nvcc is.
_FE_RECORDED: dict[str, bool] = {}
_FE_SEEN: dict[str, bool] = {}
_FE_LOCK = threading.Lock()
_SOURCE_ERROR_RE = re.compile(r"kernel\.cu\(\d+\): (?:catastrophic )?error|kernel\.cu:\d+:\d+: (?:fatal )?error|#error")


def _fe_key(source: str, flags: list[str], arch: str) -> str:
    return build_key(source, flags, arch, "")


def front_end_accepts(source: str, arch: str = DEFAULT_ARCH, extra_flags: tuple[str, ...] = (),
                      cache_dir: Path | None = None, timeout_s: float | None = None) -> bool | None:
    """Whether nvcc's front end (`nvcc -cuda`: the preprocessor and cudafe++, which evaluate the
    kernel's static_asserts and #errors) accepts `source` with these flags; about 1 s against a full
    build's 5-30 s. A recorded answer (load_front_end_answers) comes first. True or False is cached on
    disk beside the builds, by the same kind of key: False only when nvcc named an error in the
    kernel. None (not cached) when it ran past its time limit, out of memory, or failed for another
    reason. A point the front end accepts can still fail later (ptxas), and then counts as any
    refused build does. Raises InputError when nvcc is not on PATH and no answer was recorded."""
    flags = ["-cuda"] + arch_flags(arch) + list(extra_flags)
    plain = _fe_key(source, flags, arch)
    with _FE_LOCK:
        got = _FE_RECORDED.get(plain)
    if got is not None:
        count_cached("front_end", recorded=True)
    else:
        got = _front_end(source, flags, arch, cache_dir, timeout_s)
    if got is not None:
        with _FE_LOCK:
            _FE_SEEN[plain] = got
    return got


def _front_end(source: str, flags: list[str], arch: str, cache_dir: Path | None, timeout_s: float | None) -> bool | None:
    version = nvcc_version()
    if not version:
        raise InputError(f"{NO_NVCC} (telling which sweep points build asks nvcc's front end), or replay with "
                         "the run's recorded answers (*.front_end.json.gz beside its records)")
    key = build_key(source, flags, arch, version)
    root = Path(cache_dir or settings.build_cache_dir()) / "front_end"
    mark = root / key[:2] / key
    if mark.is_file():
        text = mark.read_text().strip()
        if text in ("accepted", "refused"):
            count_cached("front_end")
            return text == "accepted"
    default_timeout, memory_mb = compile_limits()
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="front-", dir=root))
    try:
        (tmp / "kernel.cu").write_text(source)
        code, log = _run_nvcc(["nvcc", *flags, "-o", str(tmp / "kernel.ii"), str(tmp / "kernel.cu")], tmp,
                              default_timeout if timeout_s is None else timeout_s, memory_mb, "front_end")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if code is None or (code != 0 and not _SOURCE_ERROR_RE.search(log)):
        return None  # not an answer about the kernel (a time limit, memory, the machine): asked again later
    mark.parent.mkdir(parents=True, exist_ok=True)
    part = mark.with_name(f"{key}.{os.getpid()}.{threading.get_ident()}.part")
    part.write_text("accepted" if code == 0 else "refused")
    os.replace(part, mark)
    return code == 0


FRONT_END_SUFFIX = ".front_end.json.gz"


def export_front_end_answers(path: Path) -> int:
    """Write every definite front-end answer this process got (PATH, named *.front_end.json.gz) with
    nvcc's version; their count."""
    import gzip
    with _FE_LOCK:
        answers = dict(sorted(_FE_SEEN.items()))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as fh:
        json.dump({"nvcc": nvcc_version(), "answers": answers}, fh)
    return len(answers)


def load_front_end_answers(path: Path, replay: bool = False) -> int:
    """Take the answers of a file export_front_end_answers wrote as this process's first answers; their
    count. Outside a replay they are taken only from the nvcc this machine has (the same version) or
    where it has none; in a replay always, since they are what the recorded run saw. Raises InputError
    for a file that is not such a record."""
    import gzip
    try:
        with gzip.open(path, "rt") as fh:
            data = json.load(fh)
        answers = data["answers"]
        if not all(isinstance(k, str) and isinstance(v, bool) for k, v in answers.items()):
            raise ValueError("answers must map keys to true or false")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path}: not a front-end answer record ({exc}); write one with "
                         "klineage.gate.compile.export_front_end_answers or remove it") from None
    here = nvcc_version()
    if not replay and here and data.get("nvcc") != here:
        return 0
    with _FE_LOCK:
        _FE_RECORDED.update(answers)
    return len(answers)


_OOM_RE = re.compile(r"out of memory|std::bad_alloc|cannot allocate memory|memory exhausted", re.I)


def out_of_memory(log: str, code: int) -> bool:
    """Whether a failed nvcc ran out of memory: a stage said so, or nvcc itself died by a signal."""
    return bool(_OOM_RE.search(log)) or code < 0


def _from_meta(meta: dict, out_dir: Path) -> CompileResult:
    resources = [KernelResources(**r) for r in meta.pop("resources")]
    so_name = meta.pop("so_path")
    meta.pop("cached", None)
    res = CompileResult(**meta, resources=resources)
    res.so_path = str(out_dir / so_name) if so_name else None
    return res


_KERNEL_FILE_RE = re.compile(r'(?<![\w./-])kernel\.cu(?=[(:"\s]|$)')


def named(text: str | None, path: str | None) -> str:
    """nvcc's words about a build, with the file every build compiles (`kernel.cu`, in a folder of its
    own) named as the user's `path`: `kernel.cu(27): error` reads `mykernel.cu(27): error`."""
    text = text or ""
    return _KERNEL_FILE_RE.sub(str(path), text) if path else text


def compiler_messages(log: str, limit: int = 12) -> list[str]:
    """The lines of a failed build's log worth showing: each error and warning with the source line and
    caret nvcc prints under it, at most `limit`, then how many more."""
    lines = [l.rstrip() for l in (log or "").splitlines()]
    out, i = [], 0
    while i < len(lines):
        l = lines[i]
        if re.search(r"\b(error|warning)\b", l, re.I) and not l.lower().startswith("ptxas info"):
            out.append(l)
            # nvcc's front end prints the offending line and a caret under it
            if i + 2 < len(lines) and lines[i + 2].strip() == "^":
                out += [lines[i + 1], lines[i + 2]]
                i += 2
        i += 1
    more = len(out) - limit
    return out[:limit] + ([f"... {more} more lines"] if more > 0 else [])


def _first_error(log: str) -> str | None:
    for line in log.splitlines():
        if "error" in line.lower():
            return line.strip()[:500]
    return None


def compile_many(sources: list[str], arch: str = DEFAULT_ARCH, extra_flags: tuple[str, ...] = (),
                 jobs: int | None = None, cache_dir: Path | None = None) -> list[CompileResult]:
    """Compile several sources in parallel (one nvcc per job), results in input order."""
    jobs = jobs or max(1, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda s: compile_kernel(s, arch, extra_flags, cache_dir), sources))
