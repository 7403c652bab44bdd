"""Hardware scope by compilation: which target architectures the richer and the simpler kernel of a
transition build for, and the hardware preconditions that follow (an arch where the richer kernel
does not build but the simpler one does).

`compile_check` builds only a cubin (`nvcc -cubin`, the explicit -gencode form of
`klineage.gate.compile.arch_flags`, so sm_90a assembles wgmma), needs no GPU, and caches its verdict
on disk under the build cache (key: sha256 of source, arch, nvcc version and flags), so asking again
costs nothing. An arch this nvcc does not know ("Unsupported gpu architecture") is recorded as not
supported, never as a precondition. sm_100 and sm_120 need nvcc 12.8 or newer.
"""
from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from klineage import settings
from klineage.gate.compile import SCOPE_ARCHS, arch_flags, count_cached, nvcc_version, out_of_memory, run_nvcc
from klineage.parse.semantics import analyze

ARCHS = SCOPE_ARCHS  # one target of each generation (klineage.gate.compile)
CHECK_FLAGS = ("-cubin",)
CHECK_TIMEOUT_S = 120.0
UNSUPPORTED = "arch not supported by this nvcc"
_UNSUPPORTED_RE = re.compile(r"Unsupported gpu architecture|is not defined for option 'gpu-(?:name|architecture)'"
                             r"|Unknown option.*gencode|not a supported GPU architecture", re.I)


def cache_dir() -> Path:
    return settings.build_cache_dir() / "compile_checks"


def _key(source: str, arch: str, version: str, flags: list[str]) -> str:
    h = hashlib.sha256()
    for part in (source, arch, version, "\0".join(flags)):
        h.update(part.encode())
        h.update(b"\x1f")
    return h.hexdigest()


def _clean(line: str) -> str:
    """An nvcc/ptxas diagnostic without temporary paths (so cached messages are stable)."""
    line = re.sub(r"ptxas \S+\.ptx, line \d+; ", "ptxas ", line)
    line = re.sub(r"/\S*/(kernel\.cu)", r"\1", line)
    return re.sub(r"\s+", " ", line).strip()[:500]


def first_error(log: str) -> str:
    """The first error (or fatal) line of an nvcc log, cleaned; '' when there is none."""
    for line in log.splitlines():
        if re.search(r"\berror\b|\bfatal\b", line, re.I):
            return _clean(line)
    return ""


def recorded_file() -> Path:
    """Compile verdicts shipped with the library (the same nvcc gives the same verdict), so a replay
    on a 2-core CI machine need not rebuild every kernel for five architectures."""
    return settings.recorded_dir().parent / "compile_checks.jsonl"


_recorded: dict[str, dict] | None = None


def _recorded_checks() -> dict[str, dict]:
    global _recorded
    if _recorded is None:
        rows = {}  # filled before it is published: another thread sees all of it or loads it too
        f = recorded_file()
        if f.is_file():
            for line in f.read_text().splitlines():
                if line.strip():
                    row = json.loads(line)
                    rows[row["key"]] = row["check"]
        _recorded = rows
    return _recorded


def check_key(source: str, arch: str) -> str:
    """The key compile_check() caches and ships the verdict of `source` for `arch` under."""
    return _key(source, arch, nvcc_version(), [*CHECK_FLAGS, *arch_flags(arch)])


def export_checks(path: Path, keys: set[str] | None = None) -> int:
    """Every cached verdict (or those of `keys`) as JSON Lines {"key", "check"} sorted by key, merged
    with the shipped ones."""
    rows = dict(_recorded_checks())
    for f in sorted(cache_dir().glob("*/*.json")):
        if keys is not None and f.stem not in keys:
            continue
        try:
            rows[f.stem] = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
    Path(path).write_text("".join(json.dumps({"key": k, "check": rows[k]}, sort_keys=True) + "\n" for k in sorted(rows)))
    return len(rows)


def compile_check(source: str, arch: str, timeout_s: float = CHECK_TIMEOUT_S) -> dict:
    """Does `source` build for `arch`? {"arch", "ok", "message", "nvcc", "supported", "cached"}; never
    raises for a bad kernel or a missing nvcc."""
    version = nvcc_version()
    if not version:
        return {"arch": arch, "ok": False, "message": "nvcc not found on PATH", "nvcc": "", "supported": False,
                "cached": False}
    flags = [*CHECK_FLAGS, *arch_flags(arch)]
    key = _key(source, arch, version, flags)
    path = cache_dir() / key[:2] / f"{key}.json"
    shipped = _recorded_checks().get(key)
    if shipped is not None:
        count_cached("compile_check", recorded=True)
        return dict(shipped, cached=True)
    if path.is_file():
        try:
            rec = json.loads(path.read_text())
            rec["cached"] = True
            count_cached("compile_check")
            return rec
        except (OSError, ValueError):
            pass  # a damaged entry is rebuilt
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="check-", dir=path.parent))
    try:
        (tmp / "kernel.cu").write_text(source)
        code, log = run_nvcc([*flags, "-o", "kernel.cubin", "kernel.cu"], tmp, timeout_s)
        if code is None:
            return {"arch": arch, "ok": False, "message": f"nvcc ran past {timeout_s:.0f} s and was killed",
                    "nvcc": version, "supported": True, "cached": False}  # not cached: may pass next time
        ok = code == 0 and (tmp / "kernel.cubin").is_file()
        message = "" if ok else (first_error(log) or f"nvcc exited with {code}")
        if not ok and out_of_memory(log, code):  # depends on the cap, which a later run may raise
            return {"arch": arch, "ok": False, "message": f"nvcc ran out of memory under its cap ({message})",
                    "nvcc": version, "supported": True, "cached": False}
        supported = ok or not _UNSUPPORTED_RE.search(log)
        if not supported:
            message = f"{UNSUPPORTED}: {message}"
        rec = {"arch": arch, "ok": ok, "message": message, "nvcc": version, "supported": supported}
        part = tmp / "check.json"
        part.write_text(json.dumps(rec))
        os.replace(part, path)  # atomic: a concurrent identical check just overwrites the same verdict
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rec["cached"] = False
    return rec


def _failure_lines(message: str, simpler: str, richer: str) -> list[int] | None:
    """Lines of the richer source the failure points at: nvcc's `kernel.cu(N)`, the source line of the
    instruction or feature ptxas names, the kernel ptxas names, else the lines the richer kernel adds."""
    m = re.search(r"kernel\.cu\((\d+)\)", message)
    if m:
        return [int(m.group(1))] * 2
    lines = richer.splitlines()
    m = re.search(r"(?:Instruction|Feature) '([^']+)'", message)
    if m:
        hits = [i for i, t in enumerate(lines, 1) if m.group(1) in t and not t.lstrip().startswith("//")]
        if hits:
            return [hits[0], hits[-1]]
    m = re.search(r"Entry function '_Z(\d+)", message)
    if m:
        start = message.index(m.group(0)) + len(m.group(0))
        name = message[start:start + int(m.group(1))]
        f = analyze(richer).function(name)
        if f:
            return list(f.lines)
    added = [j for tag, _, _, j1, j2 in difflib.SequenceMatcher(None, simpler.splitlines(), lines,
                                                                autojunk=False).get_opcodes()
             if tag in ("replace", "insert") for j in range(j1 + 1, j2 + 1)]
    return [added[0], added[-1]] if added else None


def hardware_scope(simpler: str, richer: str, archs=ARCHS, jobs: int | None = None) -> dict:
    """Compile both kernels for every arch in parallel. Returns {"compile_checked": {arch: {"simpler",
    "richer", "message", "supported"}}, "preconditions": [hardware preconditions: one per arch where the
    richer kernel fails and the simpler one builds], "archs_ok": [archs where the richer kernel builds],
    "nvcc": version}."""
    archs = tuple(archs)
    tasks = list(dict.fromkeys((src, a) for a in archs for src in (simpler, richer)))
    workers = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = dict(zip(tasks, pool.map(lambda t: compile_check(*t), tasks)))
    version = nvcc_version()
    kernel = hashlib.sha256(richer.encode()).hexdigest()[:12]
    checked, pre, ok_archs = {}, [], []
    for a in archs:
        s, r = results[(simpler, a)], results[(richer, a)]
        if not (s["supported"] and r["supported"]):
            msg = r["message"] if not r["supported"] else s["message"]
            checked[a] = {"simpler": False, "richer": False, "message": msg or UNSUPPORTED, "supported": False}
            continue
        msg = r["message"] if not r["ok"] else s["message"] if not s["ok"] else ""
        checked[a] = {"simpler": s["ok"], "richer": r["ok"], "message": msg, "supported": True}
        if r["ok"]:
            ok_archs.append(a)
    for a in archs:
        c = checked[a]
        if c["supported"] and c["simpler"] and not c["richer"]:
            pre.append({"category": "hardware",
                        "condition": f"the target is not {a}: the richer kernel builds for "
                                     f"{', '.join(ok_archs) or 'none of the checked archs'}",
                        "fails_without": f"nvcc rejects the richer kernel for {a} (the simpler one builds): "
                                         f"{c['message']}",
                        "evidence": f"compile: nvcc {version} for {a}: {c['message']}",
                        "lines": _failure_lines(c["message"], simpler, richer), "kernel": kernel, "probe": None})
    return {"compile_checked": checked, "preconditions": pre, "archs_ok": ok_archs, "nvcc": version}
