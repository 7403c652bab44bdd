"""Kernel development bench for a GPU machine: build several kernels of one workload (and -D
variants of each) in parallel, check each on every benchmark and probe shape against the workload's
oracle with the gate's correctness rule, then time the ones that pass on the benchmark cases against
the workload's vendor reference.

    python benchmarks/kernel_dev.py WORKLOAD_DIR KERNEL.cu [KERNEL.cu ...] [--variant NAME=-DX=1,-DY=2 ...]
                                    [--out DIR] [--reps 30] [--no-probes]

This is the quick loop used while writing a kernel; the gate (`klineage gate`) stays the authority
for recorded evidence. Timing: CUDA events around one call, an L2 flush (a write of 4x the L2 size)
and rotated input sets before every call, median of `--reps` calls after warm-up; the vendor is timed
the same way in the same process. Needs only torch and nvcc (no duckdb, tree-sitter or libclang), so
it runs on the GPU machine without carried wheels.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from klineage.workload import load_workload  # noqa: E402

FLAGS = ["-O3", "-shared", "-Xcompiler", "-fPIC", "-Xptxas", "-v", "-lineinfo",
         "-gencode=arch=compute_90a,code=sm_90a"]


def build(src: Path, defines: list[str], workdir: Path, tag: str) -> dict:
    so = workdir / f"{tag}.so"
    t0 = time.perf_counter()
    proc = subprocess.run(["nvcc", *FLAGS, *defines, "-o", str(so), str(src)], capture_output=True, text=True,
                          timeout=600)
    log = proc.stdout + proc.stderr
    regs = [ln.strip() for ln in log.splitlines() if "registers" in ln or "spill" in ln or "C75" in ln]
    return {"tag": tag, "src": str(src), "defines": defines, "ok": proc.returncode == 0, "so": str(so),
            "build_s": round(time.perf_counter() - t0, 2), "ptxas": regs[-6:],
            "log": log[-3000:] if proc.returncode else ""}


def _ctypes_args(wl):
    types = []
    for a in wl.args:
        if a.kind == "ptr":
            types.append(ctypes.c_void_p)
        else:
            types.append({"int": ctypes.c_int, "int64": ctypes.c_longlong, "float": ctypes.c_float}[a.kind])
    return types + [ctypes.c_void_p]


def _alloc(torch, dims, dtype, offset, fill=None):
    """A tensor `offset` elements past a 256-byte aligned base, like the gate's worker."""
    n = 1
    for d in dims:
        n *= d
    es = torch.empty((), dtype=dtype).element_size()
    pad = 256 // es + 64
    base = torch.empty(n + pad, dtype=dtype, device="cuda")
    start = ((-base.data_ptr()) % 256) // es + offset
    t = base[start:start + n].view(*dims) if dims else base[start:start + 1]
    if fill is not None:
        t.copy_(fill)
    return t


class Runner:
    def __init__(self, wl, so_path: str):
        import torch
        self.torch, self.wl = torch, wl
        self.lib = ctypes.CDLL(so_path)
        self.fn = getattr(self.lib, wl.entry)
        self.fn.argtypes = _ctypes_args(wl)
        self.fn.restype = ctypes.c_int

    def prepare(self, shape, seed):
        torch, wl = self.torch, self.wl
        off = wl.pointer_offset(shape)
        host = wl.make_inputs(shape, seed, device="cuda")
        ins = {k: _alloc(torch, tuple(v.shape), v.dtype, off, v) for k, v in host.items()}
        outs = {}
        for name, (dims, dt) in wl.outputs(shape).items():
            dtype = getattr(torch, dt)
            if name in ins:
                outs[name] = ins[name]
            else:
                outs[name] = _alloc(torch, tuple(dims), dtype, off)
                if outs[name].is_floating_point():
                    outs[name].fill_(float("nan"))
        return ins, outs

    def call(self, shape, ins, outs) -> int:
        wl = self.wl
        sc = wl.scalars(shape)
        vals = []
        for a in wl.args:
            if a.kind == "ptr":
                t = outs.get(a.name) if a.role in ("out", "inout") else ins[a.name]
                vals.append(t.data_ptr())
            else:
                vals.append(sc[a.name])
        vals.append(self.torch.cuda.current_stream().cuda_stream)
        return int(self.fn(*vals))


def check(runner: Runner, shapes, seeds=(0, 1)) -> list[dict]:
    from klineage.gate.correctness import compare
    torch, wl = runner.torch, runner.wl
    rows = []
    for kind, shape in shapes:
        ok, why = True, ""
        for seed in seeds:
            ins, outs = runner.prepare(shape, seed)
            ref_in = {k: v.clone() for k, v in ins.items()}
            rc = runner.call(shape, ins, outs)
            err = torch.cuda.synchronize() or 0
            if rc != 0:
                ok, why = False, f"entry returned cudaError {rc}"
                break
            refs = wl.reference(ref_in, shape)
            for name, ref in refs.items():
                c = compare(outs[name], ref, wl.tolerance)
                if not c.ok:
                    ok, why = False, f"{name}: {c.reason}"
                    break
            probs = wl.check(ref_in, outs, shape) if ok else []
            if probs:
                ok, why = False, "; ".join(probs[:2])
            if not ok:
                break
        rows.append({"kind": kind, "shape": shape, "ok": ok, "why": why[:300]})
        del err
    return rows


def time_call(torch, fn, prepare, reps: int, warm: int = 5) -> dict:
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(4 * l2 // 4, dtype=torch.float32, device="cuda")
    sets = [prepare(i) for i in range(3)]
    for i in range(warm):
        fn(*sets[i % 3])
    torch.cuda.synchronize()
    ts = []
    for i in range(reps):
        flush.fill_(float(i))
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(*sets[i % 3])
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1000.0)
    ts.sort()
    return {"median_us": ts[len(ts) // 2], "min_us": ts[0], "p90_us": ts[int(len(ts) * 0.9)]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workload", type=Path)
    ap.add_argument("kernels", nargs="+", type=Path)
    ap.add_argument("--variant", action="append", default=[], help="NAME=-DX=1,-DY=2 (applied to every kernel)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--no-probes", action="store_true")
    ap.add_argument("--no-vendor", action="store_true")
    ns = ap.parse_args()
    import torch
    wl = load_workload(ns.workload)
    variants = [("", [])] + [(v.split("=", 1)[0], v.split("=", 1)[1].split(",")) for v in ns.variant]
    work = Path(tempfile.mkdtemp(prefix="kdev"))
    jobs = [(k, name, defs) for k in ns.kernels for name, defs in variants]
    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as ex:
        builds = list(ex.map(lambda j: build(j[0], j[2], work, f"{j[0].stem}{'.' + j[1] if j[1] else ''}"), jobs))
    dev = torch.cuda.get_device_properties(0)
    env = {"gpu": dev.name, "torch": torch.__version__, "cuda": torch.version.cuda, "sm": dev.multi_processor_count,
           "nvcc": subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1],
           "driver": subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True).stdout.strip()}
    shapes = [("benchmark", s) for s in wl.benchmark_cases] + ([] if ns.no_probes else
                                                               [("probe", s) for s in wl.probe_shapes])
    results = []
    vendor_t = {}
    if not ns.no_vendor:
        for case in wl.benchmark_cases:
            def prep(i, case=case):
                return (wl.make_inputs(case, 100 + i, device="cuda"),)
            vendor_t[json.dumps(case)] = time_call(torch, lambda ins, case=case: wl.vendor(ins, case), prep, ns.reps)
    for b in builds:
        row = {k: v for k, v in b.items() if k != "so"}
        if not b["ok"]:
            results.append(row)
            print(f"{b['tag']}: BUILD FAILED\n{b['log'][-1500:]}", flush=True)
            continue
        try:
            r = Runner(wl, b["so"])
            row["checks"] = check(r, shapes)
            row["passed"] = all(c["ok"] for c in row["checks"])
            row["timing"] = []
            if all(c["ok"] for c in row["checks"] if c["kind"] == "benchmark"):
                for case in wl.benchmark_cases:
                    def prep(i, case=case):
                        return r.prepare(case, 100 + i)
                    t = time_call(torch, lambda ins, outs, case=case: r.call(case, ins, outs), prep, ns.reps)
                    v = vendor_t.get(json.dumps(case))
                    t["vendor_us"] = v["median_us"] if v else None
                    t["speedup"] = (v["median_us"] / t["median_us"]) if v else None
                    t["tflops"] = wl.flops(case) / (t["median_us"] * 1e-6) / 1e12
                    t["tbps"] = wl.bytes_moved(case) / (t["median_us"] * 1e-6) / 1e12
                    t["case"] = case
                    row["timing"].append(t)
        except Exception as exc:  # a crash of one kernel is a row, not the end of the run
            row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        results.append(row)
        fails = [c for c in row.get("checks", []) if not c["ok"]]
        print(f"{b['tag']}: build {b['build_s']}s {b['ptxas'][-1] if b['ptxas'] else ''} "
              f"checks {sum(1 for c in row.get('checks', []) if c['ok'])}/{len(row.get('checks', []))}"
              + (f" FIRST FAIL {fails[0]['shape']}: {fails[0]['why']}" if fails else "")
              + (f" ERROR {row['error']}" if "error" in row else ""), flush=True)
        for t in row.get("timing", []):
            print(f"    {t['case']}: {t['median_us']:.1f} us (min {t['min_us']:.1f}) vendor {t['vendor_us']:.1f} us "
                  f"speedup {t['speedup']:.3f} {t['tflops']:.0f} TFLOP/s {t['tbps']:.2f} TB/s", flush=True)
    if ns.out:
        ns.out.mkdir(parents=True, exist_ok=True)
        (ns.out / f"kernel_dev_{wl.name}_{ns.kernels[0].stem}.json").write_text(json.dumps(
            {"env": env, "workload": wl.name, "vendor": wl.vendor_name, "vendor_timing": vendor_t,
             "results": results}, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
