"""Check and time the one-launch cumsum experiment (benchmarks/experiments/cumsum_lookback.cu) on an H200.

    python benchmarks/cumsum_lookback_h200.py --out DIR          (on the GPU machine; ~30-60 s)
    python benchmarks/cumsum_lookback_h200.py --build-only       (compile every variant, no GPU)
    python benchmarks/cumsum_lookback_h200.py                    (no GPU: says so and exits 0)

Standalone: torch + ctypes + nvcc, nothing from klineage. Each variant is built with
`nvcc -O3 -shared -Xcompiler -fPIC -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -lineinfo`
(the gate's flags) into a .so in a temporary folder, loaded with ctypes and called as the gate
calls it: cumsum(x, out, rows, cols, torch.cuda.current_stream().cuda_stream).

Variants: the experiment under a few tile configurations (-D macros; the first is the file's
default), expert_kernels/cumsum/expert.cu as it is, torch.cumsum, and a same-size copy (out.copy_(x),
a cudaMemcpyAsync device-to-device: the floor any one-read-one-write operator meets at that size).

1. Correctness, every experiment configuration and expert.cu, against torch.cumsum in float64 on
   the GPU, with the workload's tolerance (rtol 1e-4, atol 1e-5, 99.9% of elements): the benchmark
   shapes, the workload's probe shapes, and more: ragged and tiny long rows, row counts around the
   one-block-per-row threshold, rows long enough to need several segments, bases 1-3 floats past
   16-byte alignment (x and out alike, and x and out in different 16-byte phases), in-place calls
   (out is x), outputs pre-filled with NaN or with stale words that look like published slot words
   (high 32 bits = 1), x checked unchanged, and a determinism check (bitwise-equal results over
   repeated calls, x refreshed each time for in-place calls). expert.cu is not in-place safe on its
   long-row paths: its in-place results are recorded, not counted as failures.
2. Timing at 1 x 1048576 and 16384 x 4096: the gate's window (L2 flushed by writing a buffer of
   4x the L2 size before every call, CUDA events around the one call, input sets rotated so every
   call reads fresh data), variants interleaved call by call, median of many calls.
3. CUPTI (torch.profiler) at 1 x 1048576: kernels per call, summed kernel time, grid/block of each.
Prints a table; writes DIR/cumsum_lookback_h200.json.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import ctypes
import importlib.util
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = ROOT / "benchmarks" / "experiments" / "cumsum_lookback.cu"
EXPERT = ROOT / "expert_kernels" / "cumsum" / "expert.cu"
WORKLOAD = ROOT / "expert_kernels" / "cumsum" / "workload.py"
ARCH = "-gencode=arch=compute_90a,code=sm_90a"
FLAGS = ["-O3", "-shared", "-Xcompiler", "-fPIC", "-Xptxas", "-v", "-lineinfo", ARCH]

# name -> (source, -D flags). The first experiment row is the file's default configuration.
VARIANTS = {
    "onepass 256x4, 2/SM": (EXPERIMENT, []),
    "onepass 512x2, 2/SM": (EXPERIMENT, ["-DCUMSUM_OP_BLOCK=512", "-DCUMSUM_OP_VPT=2"]),
    "onepass 256x2, 4/SM": (EXPERIMENT, ["-DCUMSUM_OP_VPT=2", "-DCUMSUM_OP_CTAS_PER_SM=4"]),
    "onepass 512x4, 1/SM": (EXPERIMENT, ["-DCUMSUM_OP_BLOCK=512", "-DCUMSUM_OP_CTAS_PER_SM=1"]),
    "expert.cu": (EXPERT, []),
}
CASES = [(1, 1048576), (16384, 4096)]


def nvcc_path() -> str | None:
    return shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if os.path.exists(p)), None)


def build(name: str, src: Path, defines: list[str], tmp: Path) -> dict:
    nvcc = nvcc_path()
    so = tmp / (re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_") + ".so")
    cmd = [nvcc, *FLAGS, *defines, str(src), "-o", str(so)]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    log = p.stdout + p.stderr
    if p.returncode != 0:
        raise SystemExit(f"build of {name} failed:\n{' '.join(cmd)}\n{log[-3000:]}")
    regs = {}
    fn = None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            fn = m.group(1)
        m = re.search(r"Used (\d+) registers", line)
        if m and fn:
            short = re.sub(r"^_Z\d+", "", fn)[:60]
            regs[short] = int(m.group(1))
        if "spill" in line and fn and not re.search(r"0 bytes spill stores, 0 bytes spill loads", line):
            regs[re.sub(r"^_Z\d+", "", fn)[:60] + " SPILLS"] = line.strip()
    return {"name": name, "so": str(so), "cmd": " ".join(cmd), "build_s": round(time.time() - t0, 1),
            "registers": regs}


def build_all(tmp: Path) -> dict:
    with cf.ThreadPoolExecutor(max_workers=len(VARIANTS)) as ex:
        futs = {n: ex.submit(build, n, src, d, tmp) for n, (src, d) in VARIANTS.items()}
        return {n: f.result() for n, f in futs.items()}


def load_workload():
    spec = importlib.util.spec_from_file_location("cumsum_workload", WORKLOAD)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------ GPU part
def main_gpu(args, builds: dict) -> int:
    import torch

    wl = load_workload()
    tol = wl.TOLERANCE
    dry = args.dry_run  # the whole pipeline on the CPU, torch.cumsum standing in for every .so
    dev = torch.device("cpu" if dry else "cuda")
    wdev = "cpu" if dry else "cuda"
    if dry:
        import types
        props = types.SimpleNamespace(name="CPU dry run", multi_processor_count=0, L2_cache_size=2**20)
        stream = None
        sync = lambda: None

        class Event:  # host-clock stand-in for torch.cuda.Event
            def __init__(self, enable_timing=True):
                self.t = 0.0

            def record(self, stream=None):
                self.t = time.perf_counter()

            def synchronize(self):
                pass

            def elapsed_time(self, other):
                return (other.t - self.t) * 1e3
    else:
        props = torch.cuda.get_device_properties(0)
        stream = torch.cuda.current_stream()
        sync = torch.cuda.synchronize
        Event = torch.cuda.Event

    libs = {}
    for name, b in builds.items():
        if dry:
            libs[name] = (None, None)
            continue
        lib = ctypes.CDLL(b["so"])
        fn = lib.cumsum
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        fn.restype = ctypes.c_int
        libs[name] = (lib, fn)

    def call(name, x, out, rows, cols):
        if dry:
            out.copy_(torch.cumsum(x, dim=1))
            return
        rc = libs[name][1](x.data_ptr(), out.data_ptr(), rows, cols, torch.cuda.current_stream().cuda_stream)
        if rc != 0:
            raise RuntimeError(f"{name}: cumsum returned cudaError {rc} at {rows}x{cols}")

    def placed(rows, cols, off, fill=None):
        """An uninitialised (or filled) rows x cols fp32 tensor `off` floats past a 512-byte boundary."""
        n = rows * cols
        base = torch.empty(n + off + 8, dtype=torch.float32, device=dev)
        if fill == "nan":
            base.fill_(float("nan"))
        elif fill == "stale":
            # every 8-byte word: low half 1e30, high half 0x00000001 -- a "published" slot word
            iv = base.view(torch.int32)
            iv[0::2] = int(torch.tensor(1e30, dtype=torch.float32).view(torch.int32).item())
            iv[1::2] = 1
        return base[off:off + n].view(rows, cols)

    # ---------------------------------------------------------------- 1. correctness
    cases = []

    def case(rows, cols, xoff=0, ooff=0, inplace=False, fill="nan", tag=""):
        cases.append({"rows": rows, "cols": cols, "xoff": xoff, "ooff": ooff if not inplace else xoff,
                      "inplace": inplace, "fill": fill, "tag": tag})

    for r, c in CASES:
        case(r, c, tag="benchmark")
    for s in wl.PROBE_SHAPES:
        case(s["rows"], s["cols"], s.get("offset", 0), s.get("offset", 0), tag="probe")
        if "offset" not in s:
            case(s["rows"], s["cols"], inplace=True, tag="probe in-place (lineage aliased_output)")
    extra = [(1, 8193), (1, 8197), (1, 12289), (1, 1048577), (1, 1048573), (3, 300007), (9, 70001),
             (100, 9000), (263, 8200), (264, 8193), (1, 4194304), (2, 1500001), (1, 3000001)]
    for r, c in extra:
        case(r, c, tag="extra")
    for r, c in [(1, 1048576), (1, 300001), (2, 65537), (600, 8193), (1, 4194305), (9, 70001)]:
        for xo, oo in [(1, 1), (2, 2), (3, 3), (1, 0), (0, 3), (2, 1)]:
            case(r, c, xo, oo, tag="offset")
    for r, c, o in [(1, 1048576, 0), (1, 1048577, 3), (2, 65537, 1), (600, 8193, 2), (7, 4097, 3),
                    (1, 4194304, 0), (3, 300007, 1), (16384, 4096, 0), (100, 9000, 0)]:
        case(r, c, o, o, inplace=True, tag="in-place")
    for r, c in [(1, 1048576), (2, 65537), (9, 70001), (1, 4194304)]:
        case(r, c, tag="stale-slot prefill", fill="stale")
        case(r, c, 1, 2, tag="stale-slot prefill, phases differ", fill="stale")
    if args.quick or dry:
        cases = [c for c in cases if c["rows"] * c["cols"] <= (1_100_000 if dry else 4_200_000)]

    results = {n: [] for n in libs}
    failures = []
    seed = 0
    t_corr = time.time()
    for cs in cases:
        rows, cols = cs["rows"], cs["cols"]
        seed += 1
        x0 = wl.make_inputs({"rows": rows, "cols": cols}, seed, device=wdev)["x"]
        ref = x0.double().cumsum(dim=1)
        for name in libs:
            x = placed(rows, cols, cs["xoff"])
            x.copy_(x0)
            out = x if cs["inplace"] else placed(rows, cols, cs["ooff"], cs["fill"])
            try:
                call(name, x, out, rows, cols)
            except RuntimeError as exc:  # an error code from the entry: record it, keep going
                rec = {**cs, "error": str(exc), "passed": False}
                results[name].append(rec)
                failures.append({"variant": name, **rec})
                continue
            sync()
            err = (out.double() - ref).abs()
            ok = err <= tol["atol"] + tol["rtol"] * ref.abs()
            frac = float(ok.double().mean())
            rel = float((err / ref.abs().clamp_min(1.0)).max()) if out.isfinite().all() else float("inf")
            x_changed = (not cs["inplace"]) and not torch.equal(x, x0)
            passed = frac >= tol["min_matched"] and not x_changed
            rec = {**cs, "matched": frac, "max_rel_err": rel, "x_changed": x_changed, "passed": passed}
            results[name].append(rec)
            known = name == "expert.cu" and cs["inplace"]
            if not passed and not known:
                failures.append({"variant": name, **rec})
            del x, out
        del x0, ref
    # determinism: repeated calls give bitwise-equal outputs (fixed summation order)
    determinism = {}
    for name in libs:
        for rows, cols, off, inplace in [(1, 1048576, 0, False), (2, 65537, 3, True), (3, 300007, 0, False)]:
            x0 = wl.make_inputs({"rows": rows, "cols": cols}, 999, device=wdev)["x"]
            first, same = None, True
            for _ in range(args.repeat):
                x = placed(rows, cols, off)
                x.copy_(x0)
                out = x if inplace else placed(rows, cols, off, "nan")
                call(name, x, out, rows, cols)
                sync()
                if first is None:
                    first = out.clone()
                elif not torch.equal(out, first):
                    same = False
            key = f"{rows}x{cols}{' off' + str(off) if off else ''}{' in-place' if inplace else ''}"
            determinism.setdefault(name, {})[key] = same
            if not same and not (name == "expert.cu" and inplace):
                failures.append({"variant": name, "determinism": key})
    t_corr = time.time() - t_corr

    # ---------------------------------------------------------------- 2. timing
    l2 = int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)
    flush = torch.empty((4 * l2 if dry else max(4 * l2, 64 * 2**20)) // 4, dtype=torch.float32, device=dev)

    def window(fns: dict, bufs: list, calls: int, warmup: int = 10) -> dict:
        """Median window per variant: flush L2 (write 4x L2), events around one call, inputs rotated,
        variants interleaved (order reversed every other round)."""
        samples = {k: [] for k in fns}
        order = list(fns)
        ev = [(Event(enable_timing=True), Event(enable_timing=True)) for _ in order]
        for i in range(warmup + calls):
            x, out = bufs[i % len(bufs)]
            for j, k in enumerate(order if i % 2 == 0 else order[::-1]):
                flush.fill_(float(i & 7))
                s, e = ev[j]
                s.record(stream)
                fns[k](x, out)
                e.record(stream)
                e.synchronize()
                if i >= warmup:
                    samples[k].append(s.elapsed_time(e) * 1e3)
        res = {}
        for k, v in samples.items():
            v = sorted(v)
            res[k] = {"median_us": statistics.median(v), "p10_us": v[len(v) // 10], "p90_us": v[(9 * len(v)) // 10],
                      "n": len(v)}
        return res

    timing = {}
    t_time = time.time()
    for rows, cols in (CASES if not dry else [(1, 65536), (64, 4096)]):
        nbuf = 4 if rows * cols <= 4_200_000 else 3
        bufs = []
        for b in range(nbuf):
            x = wl.make_inputs({"rows": rows, "cols": cols}, 100 + b, device=wdev)["x"]
            bufs.append((x, torch.empty_like(x)))
        fns = {n: (lambda x, out, n=n, r=rows, c=cols: call(n, x, out, r, c)) for n in libs}
        fns["torch.cumsum"] = lambda x, out: torch.cumsum(x, dim=1, out=out)
        fns["copy (out.copy_(x))"] = lambda x, out: out.copy_(x)
        calls = args.calls if rows * cols <= 4_200_000 else max(20, args.calls // 5)
        w = window(fns, bufs, calls)
        bytes_moved = 2 * rows * cols * 4
        copy_us = w["copy (out.copy_(x))"]["median_us"]
        torch_us = w["torch.cumsum"]["median_us"]
        for k, v in w.items():
            v["tb_per_s"] = bytes_moved / (v["median_us"] * 1e-6) / 1e12
            v["fraction_of_copy"] = copy_us / v["median_us"]
            v["speedup_vs_torch"] = torch_us / v["median_us"]
        timing[f"{rows}x{cols}"] = {"bytes_moved": bytes_moved, "calls": calls, "input_sets": nbuf, "variants": w}
        del bufs
    # device copy bandwidth on 1 GiB (the reference number)
    big = torch.empty(2**20 if dry else 2**28, dtype=torch.float32, device=dev)
    big2 = torch.empty_like(big)
    big.normal_()
    ts = []
    for i in range(12):
        s, e = Event(enable_timing=True), Event(enable_timing=True)
        s.record(stream)
        big2.copy_(big)
        e.record(stream)
        e.synchronize()
        if i >= 2:
            ts.append(s.elapsed_time(e) * 1e-3)
    copy_1g_tb_s = 2 * big.numel() * 4 / statistics.median(ts) / 1e12
    del big, big2
    t_time = time.time() - t_time

    # ---------------------------------------------------------------- 3. CUPTI kernels at 1 x 1M
    cupti = {}
    if not args.no_profile and not dry:
        try:
            from torch.profiler import ProfilerActivity, profile
            rows, cols = CASES[0]
            x = wl.make_inputs({"rows": rows, "cols": cols}, 5, device="cuda")["x"]
            out = torch.empty_like(x)
            fns = {n: (lambda n=n: call(n, x, out, rows, cols)) for n in libs}
            fns["torch.cumsum"] = lambda: torch.cumsum(x, dim=1, out=out)
            fns["copy (out.copy_(x))"] = lambda: out.copy_(x)
            for f in fns.values():
                f()
            torch.cuda.synchronize()
            n_calls = 20
            for k, f in fns.items():
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(n_calls):
                        f()
                    torch.cuda.synchronize()
                fd, path = tempfile.mkstemp(suffix=".json")
                os.close(fd)
                prof.export_chrome_trace(path)
                with open(path) as fh:
                    evs = json.load(fh).get("traceEvents", [])
                os.unlink(path)
                kern = [e for e in evs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
                shapes = sorted({(e.get("name", "")[:70], str(e.get("args", {}).get("grid")),
                                  str(e.get("args", {}).get("block"))) for e in kern})
                cupti[k] = {"ops_per_call": len(kern) / n_calls,
                            "gpu_us_per_call": sum(float(e.get("dur", 0)) for e in kern) / n_calls,
                            "ops": [{"name": a, "grid": b, "block": c} for a, b, c in shapes]}
        except Exception as exc:  # the profile is extra evidence, never a reason to lose the run
            cupti = {"error": repr(exc)}

    # ---------------------------------------------------------------- report
    env = {"device": props.name, "sms": props.multi_processor_count, "l2_bytes": l2,
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "nvcc": next((l.strip() for l in subprocess.run([nvcc_path(), "--version"], capture_output=True,
                                                             text=True).stdout.splitlines() if "release" in l), "")
           if nvcc_path() else "",
           "python": platform.python_version()}
    report = {"env": env, "builds": builds, "copy_1GiB_tb_per_s": copy_1g_tb_s, "timing": timing,
              "cupti_1x1048576": cupti, "determinism": determinism,
              "correctness": {n: {"cases": len(v), "passed": sum(r["passed"] for r in v),
                                  "failed": [r for r in v if not r["passed"]]} for n, v in results.items()},
              "failures": failures, "seconds": {"correctness": t_corr, "timing": t_time}}
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "cumsum_lookback_h200.json").write_text(json.dumps(report, indent=1, default=str))

    print(f"\n{env['device']} ({env['sms']} SMs), torch {env['torch']}, {env['nvcc']}; "
          f"1 GiB copy {copy_1g_tb_s:.2f} TB/s")
    print("correctness (cases passed; expert.cu in-place failures are known and not counted):")
    for n, v in results.items():
        bad_ip = sum(1 for r in v if not r["passed"] and r["inplace"])
        bad = sum(1 for r in v if not r["passed"]) - bad_ip
        regs = ", ".join(f"{k.split('ILi')[0].replace('cumsum_', '')}{'/vec' if 'Lb1E' in k else ''}={r}"
                         for k, r in builds[n]["registers"].items() if "onepass" in k or "SPILLS" in k)
        regs = f"registers {regs}" if regs else ""
        print(f"  {n:24s} {sum(r['passed'] for r in v):3d}/{len(v)}  failed {bad}, failed in-place {bad_ip}; "
              f"deterministic {all(determinism[n].values())}  {regs}")
    for cname, t in timing.items():
        print(f"\n{cname}  ({t['bytes_moved'] / 1e6:.1f} MB moved, median of {t['calls']} calls, "
              f"{t['input_sets']} input sets, L2 flushed by a {flush.numel() * 4 >> 20} MiB write)")
        print(f"  {'variant':26s} {'median us':>10s} {'p10':>8s} {'p90':>8s} {'TB/s':>6s} {'of copy':>8s} {'vs torch':>9s}")
        for k, v in t["variants"].items():
            print(f"  {k:26s} {v['median_us']:10.2f} {v['p10_us']:8.2f} {v['p90_us']:8.2f} {v['tb_per_s']:6.2f} "
                  f"{100 * v['fraction_of_copy']:7.1f}% {v['speedup_vs_torch']:8.2f}x")
    if cupti and "error" not in cupti:
        print("\nCUPTI at 1x1048576 (GPU ops per call, summed GPU time per call, grid x block):")
        for k, v in cupti.items():
            g = "; ".join(f"{o['name'][:28]} {o['grid']}x{o['block']}" for o in v["ops"])
            print(f"  {k:26s} {v['ops_per_call']:4.1f} ops {v['gpu_us_per_call']:7.2f} us  {g}")
    elif cupti:
        print(f"\nCUPTI pass failed: {cupti['error']}")
    print(f"\nwrote {outdir / 'cumsum_lookback_h200.json'}; correctness {t_corr:.1f} s, timing {t_time:.1f} s")
    if failures:
        print(f"FAILURES ({len(failures)}):")
        for f in failures[:20]:
            print("  ", f)
        return 1
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT") or "cumsum_lookback_out", help="folder for the JSON")
    ap.add_argument("--calls", type=int, default=400, help="timed calls per variant at 1x1M (a fifth at 16384x4096)")
    ap.add_argument("--repeat", type=int, default=8, help="calls per determinism check")
    ap.add_argument("--quick", action="store_true", help="skip the correctness cases above 4.2M elements")
    ap.add_argument("--no-profile", action="store_true", help="skip the CUPTI pass")
    ap.add_argument("--build-only", action="store_true", help="compile every variant and exit (no GPU needed)")
    ap.add_argument("--dry-run", action="store_true",
                    help="no GPU, no nvcc: run the script's own logic on the CPU with torch.cumsum standing in "
                         "for every variant (small shapes, few calls); checks the script, not the kernels")
    args = ap.parse_args()

    t0 = time.time()
    if args.dry_run:
        args.calls, args.repeat = min(args.calls, 6), min(args.repeat, 2)
        builds = {n: {"name": n, "so": "", "cmd": "", "build_s": 0, "registers": {}} for n in VARIANTS}
        rc = main_gpu(args, builds)
        print(f"dry run done in {time.time() - t0:.1f} s (rc {rc})")
        return rc
    have_cuda = False
    if not args.build_only:
        try:
            import torch
            have_cuda = torch.cuda.is_available()
        except ImportError:
            have_cuda = False
        if not have_cuda:
            print("no CUDA device here: nothing to check or time (use --build-only to compile the variants)")
            return 0
    if nvcc_path() is None:
        print("nvcc not found on PATH")
        return 2
    with tempfile.TemporaryDirectory(prefix="cumsum_lookback_") as tmp:
        builds = build_all(Path(tmp))
        print(f"built {len(builds)} variants in {time.time() - t0:.1f} s: " +
              ", ".join(f"{n} ({b['build_s']} s)" for n, b in builds.items()))
        for n, b in builds.items():
            print(f"  {n}: registers {b['registers']}")
        if args.build_only:
            return 0
        rc = main_gpu(args, builds)
    print(f"total {time.time() - t0:.1f} s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
