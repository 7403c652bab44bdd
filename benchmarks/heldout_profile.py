"""Profile evidence for the held-out instances where a condition's kernel falls short of its reference
(issue 8: "the per-family gap explained by profile evidence where it falls short").

    python benchmarks/heldout_profile.py --report DIR --out OUT [--instances A,B] [--conditions skills]
                                         [--below 1.0] [--calls 50]
    ncu --clock-control none --profile-from-start off --csv \
        --metrics "$(python benchmarks/heldout_profile.py --ncu-metrics)" \
        python benchmarks/heldout_profile.py --report DIR --ncu-pass [same selection] > OUT/ncu.csv
    python benchmarks/heldout_profile.py --merge-ncu OUT/ncu.csv OUT/heldout_profile.json

DIR is a held-out report folder (`klineage heldout --out DIR`, or benchmarks/heldout_h200.py's
DIR/report): heldout.json and kernels/<instance>/<condition>.cu, each kernel as it ran (sweep flags
written in). The instances profiled are those named, or else every one where some selected condition
PASSED with a speedup below --below. For each: the condition's kernel and the reference the report
used (the FlagGems op, or the instance's fallback when the report says so) at the benchmark case, in
the gate's window (L2 flushed, CUDA events around one call, interleaved call by call, the GPU kept
busy while the host launches) and as CUPTI
kernel records through torch.profiler (kernels per call, kernel time per call, kernel names), with
achieved TFLOP/s or TB/s from the workload's own formulas. `--ncu-pass` runs each a few times, untimed,
for ncu to read throughputs, tensor-pipe activity, occupancy, registers and shared memory per kernel:
only those calls, between cudaProfilerStart and cudaProfilerStop, so with --profile-from-start off ncu
replays none of the set-up (input generation, the reference's compilation and autotuning, warm-up).
Writes OUT/heldout_profile.json. Needs the same site as the held-out run (flag-gems and its wheels).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from profile_shortfalls import _kernel_times, _window, ncu_summary  # noqa: E402

# What ncu reads per kernel: time, SM and DRAM throughput, tensor-pipe activity, occupancy, and the
# launch's registers, shared memory and shape.
NCU_METRICS = ("gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
               "dram__throughput.avg.pct_of_peak_sustained_elapsed",
               "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
               "sm__warps_active.avg.pct_of_peak_sustained_active", "launch__registers_per_thread",
               "launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic",
               "launch__grid_size", "launch__block_size")
# A spin queued before each timed window (profile_shortfalls._window, through timed_call's spin_us):
# without it a FlagGems op's Python dispatch fell inside the window (layernorm 16384x4096: 112 us
# against 68.5 us of kernel time under CUPTI).
BACKLOG_US = 300.0


def select(report: dict, instances: list[str] | None, conditions: list[str], below: float) -> list[tuple[str, str]]:
    """(instance, condition) pairs to profile: the named instances under every selected condition that
    PASSED, or, without names, each pair that PASSED with a speedup below `below`."""
    out = []
    for inst in report["instances"]:
        for cond in conditions:
            row = inst["conditions"].get(cond)
            if not row or row.get("status") != "PASSED":
                continue
            if instances is not None:
                if inst["instance"] in instances:
                    out.append((inst["instance"], cond))
            elif row.get("speedup") is not None and row["speedup"] < below:
                out.append((inst["instance"], cond))
    return out


def _instance(report: dict, name: str) -> dict:
    return next(i for i in report["instances"] if i["instance"] == name)


def _workload(entry: dict, root: Path):
    """The workload of the report's instance `entry`, with the reference its rows used (primary or
    fallback), and that reference's report entry."""
    from klineage.heldout import load_instances
    (inst,) = load_instances(root, None, [entry["instance"]])
    ref = entry.get("reference") or {}
    return (inst.fallback() if ref.get("used") == "fallback" else inst.workload), ref


def profile_pair(dev, report: dict, rdir: Path, root: Path, name: str, cond: str, calls: int, ncu_pass: bool) -> dict:
    import torch
    from klineage.gate.compile import compile_kernel
    from klineage.gate.worker import Candidate, alloc_outputs

    entry = _instance(report, name)
    wl, ref = _workload(entry, root)
    src = (rdir / "kernels" / name / f"{cond}.cu").read_text()
    built = compile_kernel(src)
    if not built.ok:
        return {"error": f"build failed: {built.log[-1500:]}"}
    cand = Candidate(built.so_path, wl)
    stream = torch.cuda.current_stream()
    shape = dict(wl.benchmark_cases[0])
    inputs = wl.make_inputs(shape, 1, device="cuda")
    outs = alloc_outputs(wl, shape)
    scal = wl.scalars(shape)
    fns = {f"{cond} kernel": lambda: cand.call({**inputs, **outs}, scal, stream),
           f"reference ({ref.get('used', 'primary')})": lambda: (wl.vendor(inputs, shape), 0)[1]}
    for f in fns.values():  # compile the reference's Triton kernels and warm both up before anything is timed
        f()
    torch.cuda.synchronize()
    if ncu_pass:
        torch.cuda.profiler.start()
        try:
            for _ in range(3):
                for f in fns.values():
                    f()
            torch.cuda.synchronize()
        finally:
            torch.cuda.profiler.stop()
        return {}
    window = _window(dev, fns, calls, backlog_us=BACKLOG_US)
    flops, moved = wl.flops(shape), wl.bytes_moved(shape)
    info = {}
    for label, f in fns.items():
        cupti = _kernel_times(f, 20)
        kt = cupti["kernel_us_per_call"]
        info[label] = {"window": {**window[label], "backlog_us": BACKLOG_US}, "cupti": cupti,
                       "kernel_tb_per_s": moved / (kt * 1e-6) / 1e12 if kt else None,
                       "kernel_tflop_per_s": flops / (kt * 1e-6) / 1e12 if (flops and kt) else None}
    info[f"{cond} kernel"]["resources"] = [r.__dict__ for r in built.resources]
    row = entry["conditions"][cond]
    return {"instance": name, "condition": cond, "shape": shape, "reference": ref,
            "report_speedup": row.get("speedup"), "report_ci95": row.get("ci95"),
            "flags": row.get("flags"), "bytes_moved": moved, "flops": flops, "variants": info}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", type=Path, help="a held-out report folder (heldout.json, kernels/)")
    ap.add_argument("--root", type=Path, default=ROOT / "heldout", help="the held-out instances")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--instances", default=None)
    ap.add_argument("--conditions", default="skills")
    ap.add_argument("--below", type=float, default=1.0)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--ncu-pass", action="store_true", help="run each kernel a few times, untimed, for ncu")
    ap.add_argument("--merge-ncu", nargs=2, metavar=("NCU_CSV", "JSON"),
                    help="add the per-kernel medians of an ncu --csv report to a heldout_profile.json")
    ap.add_argument("--ncu-metrics", action="store_true", help="print the metrics for ncu's --metrics and exit")
    ns = ap.parse_args()
    if ns.ncu_metrics:
        print(",".join(NCU_METRICS))
        return 0
    if ns.merge_ncu:
        csv_path, json_path = map(Path, ns.merge_ncu)
        rec = json.loads(json_path.read_text())
        rec["ncu"] = {"metrics": list(NCU_METRICS), "kernels": ncu_summary(csv_path.read_text(), None)}
        json_path.write_text(json.dumps(rec, indent=1) + "\n")
        return 0
    if ns.report is None or (ns.out is None and not ns.ncu_pass):
        ap.error("--report is required, and --out unless --ncu-pass")
    report = json.loads((ns.report / "heldout.json").read_text())
    names = [x for x in ns.instances.split(",") if x] if ns.instances else None
    pairs = select(report, names, [c for c in ns.conditions.split(",") if c], ns.below)
    if not pairs:
        print("nothing to profile: no selected condition PASSED below the threshold", file=sys.stderr)
        return 0
    from klineage.gate.worker import Device, environment
    dev = Device()
    t0 = time.perf_counter()
    cases = [profile_pair(dev, report, ns.report, ns.root, n, c, ns.calls, ns.ncu_pass) for n, c in pairs]
    if ns.ncu_pass:
        return 0
    rec = {"benchmark": "heldout_profile", "report_run": report.get("run_id"), "env": environment(dev),
           "wall_s": round(time.perf_counter() - t0, 1), "cases": cases}
    ns.out.mkdir(parents=True, exist_ok=True)
    (ns.out / "heldout_profile.json").write_text(json.dumps(rec, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
