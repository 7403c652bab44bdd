"""Kernel development bench for a GPU machine: build several kernels of one workload (and -D
variants of each) in parallel, check each on every benchmark and probe shape against the workload's
oracle with the gate's correctness rule, then time the ones that pass on the benchmark cases against
the workload's vendor reference.

    python benchmarks/kernel_dev.py WORKLOAD_DIR KERNEL.cu [KERNEL.cu ...] [--variant NAME=-DX=1,-DY=2 ...]
                                    [--out DIR] [--reps 30] [--no-probes]

This is the quick loop used while writing a kernel; the gate (`klineage gate`) stays the authority
for recorded evidence. Timing: the gate worker's own timed window (klineage.gate.worker.timed_call: an L2 flush
reading 4x the L2 size, CUDA events around one call) over rotated input sets, median of `--reps`
calls after warm-up; the vendor is timed
the same way in the same process. Needs only torch and nvcc (no duckdb, tree-sitter or libclang), so
it runs on the GPU machine without carried wheels.
"""
from __future__ import annotations

import argparse
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


class Runner:
    """One built kernel driven the way the gate's worker drives it (klineage.gate.worker: the ABI
    through Candidate, inputs and NaN-poisoned outputs at the shape's pointer offset), in this
    process; time_call below times it in the worker's window."""

    def __init__(self, wl, so_path: str):
        import torch
        from klineage.gate.worker import Candidate
        self.torch, self.wl = torch, wl
        self.kernel = Candidate(so_path, wl)

    def prepare(self, shape, seed):
        from klineage.gate.worker import alloc_outputs, place_inputs
        ins = place_inputs(self.wl, shape, self.wl.make_inputs(shape, seed, device="cuda"))
        outs = alloc_outputs(self.wl, shape)
        outs.update({k: ins[k] for k in outs if k in ins})  # inout arguments are their input buffers
        return ins, outs

    def call(self, shape, ins, outs) -> int:
        tensors = {**ins, **outs}
        return int(self.kernel.call(tensors, self.wl.scalars(shape), self.torch.cuda.current_stream()))


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
            torch.cuda.synchronize()
            if rc != 0:
                ok, why = False, f"entry returned cudaError {rc}"
                break
            for name, ref in wl.reference(ref_in, shape).items():
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
    return rows


def time_call(dev, fn, prepare, reps: int, warm: int = 5) -> dict:
    """Median of `reps` calls of fn(*inputs) in the gate's timed window, over 3 rotated input sets."""
    import torch
    from klineage.gate.worker import timed_call
    sets = [prepare(i) for i in range(3)]
    for i in range(warm):
        fn(*sets[i % 3])
    torch.cuda.synchronize()
    stream = torch.cuda.current_stream()
    ts = sorted(timed_call(dev, lambda i=i: fn(*sets[i % 3]), stream)[1] for i in range(reps))
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
    from klineage.gate.worker import Device
    wl = load_workload(ns.workload)
    dev = Device()
    variants = [("", [])] + [(v.split("=", 1)[0], v.split("=", 1)[1].split(",")) for v in ns.variant]
    work = Path(tempfile.mkdtemp(prefix="kdev"))
    jobs = [(k, name, defs) for k in ns.kernels for name, defs in variants]
    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as ex:
        builds = list(ex.map(lambda j: build(j[0], j[2], work, f"{j[0].stem}{'.' + j[1] if j[1] else ''}"), jobs))
    props = torch.cuda.get_device_properties(0)
    env = {"gpu": props.name, "torch": torch.__version__, "cuda": torch.version.cuda, "sm": props.multi_processor_count,
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
            vendor_t[json.dumps(case)] = time_call(dev, lambda ins, case=case: (wl.vendor(ins, case), 0)[1], prep,
                                                   ns.reps)
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
                    t = time_call(dev, lambda ins, outs, case=case: r.call(case, ins, outs), prep, ns.reps)
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
            vs = (f"vendor {t['vendor_us']:.1f} us speedup {t['speedup']:.3f}" if t["vendor_us"] is not None
                  else "vendor not timed")
            print(f"    {t['case']}: {t['median_us']:.1f} us (min {t['min_us']:.1f}) {vs} "
                  f"{t['tflops']:.0f} TFLOP/s {t['tbps']:.2f} TB/s", flush=True)
    if ns.out:
        ns.out.mkdir(parents=True, exist_ok=True)
        (ns.out / f"kernel_dev_{wl.name}_{ns.kernels[0].stem}.json").write_text(json.dumps(
            {"env": env, "workload": wl.name, "vendor": wl.vendor_name, "vendor_timing": vendor_t,
             "results": results}, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
