"""Prove the gate on a GPU: experts and naive kernels, the cheating gallery, the fault kernels, and
the gate's own numbers (compile time, evaluation wall time, spread across fresh workers, agreement
with independent timers). Writes everything under --out; run on the GPU machine:

    python benchmarks/gate_h200.py --out $OUT
    python benchmarks/gate_h200.py --out $OUT --gallery-faults-only --json-name 'gate_{card}_gallery_faults.json'

The second form runs only the gallery (every kernel of tests/gallery, guard on and off) and the fault
kernels (every kernel of tests/faults, and with the guard off those whose header has a `dynamic:`
outcome), then one honest kernel to show the run went on: each entry records its status and error
kind next to the header's expectation, the kernel's hash, and the hash of the gate worker's code that
judged it (klineage.gate.worker_code_hash, and each covered module's digest); the report holds the
row_sum workload's hash and writes the evaluations beside it (NAME.jsonl.gz). `{card}` in --json-name
is the card the run is on (h100, h200: benchmarks/record_names.py). tests/test_recorded_gallery_faults.py
compares all of it with the files as they are now, so a change to the gate's code, a kernel or a
header fails until this is run again. It takes about 4 minutes on an H100 or H200; one device call,
from the repository root, carrying .whlx (benchmarks/device_site.sh x; DuckDB for the store):

    python3 -c "import tarfile; tarfile.open('.whlx/site.tar.xz').extractall('/tmp')" && \
      PYTHONPATH=/tmp/site:$PWD python3 benchmarks/gate_h200.py --out $OUT --gallery-faults-only \
      --json-name 'gate_{card}_gallery_faults.json'

then copy $OUT/gate_*_gallery_faults.{json,log,jsonl.gz} into benchmarks/results/ (removing the
record of another card they replace). nvcc runs under
--nvcc-timeout-s / --nvcc-memory-mb (the gate's defaults are 120 s and 8 GiB), so the nvcc-breaking
faults end quickly.

The JSON it writes is committed under benchmarks/results/ with the records (evaluations.jsonl)
that `klineage gate --replay` replays on a machine without a GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from klineage.gate import worker_code_digests, worker_code_hash  # noqa: E402
from klineage.gate.compile import compile_kernel  # noqa: E402
from klineage.gate.gate import Gate, GateConfig, kernel_hash  # noqa: E402
from klineage.gate.pool import GateWorker  # noqa: E402
from klineage.store import open_store  # noqa: E402
from klineage.workload import load_workload  # noqa: E402
from tests.support.headers import header, outcome_met  # noqa: E402  (the kernels' `// expect:` lines)
from benchmarks.record_names import gpu_name, named  # noqa: E402

RECORD = "gate_{card}_gallery_faults.json"  # the gallery and faults record, named by its card
RECORD_COMMAND = f"python3 benchmarks/gate_h200.py --out $OUT --gallery-faults-only --json-name '{RECORD}'"


_LOG: list = []  # the open log file under --out, once main() has made it


def log(msg: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)
    for f in _LOG:
        f.write(line + "\n")
        f.flush()


def summary(res) -> dict:
    out = {"status": res.status.value, "error_kind": res.error_kind, "error_message": res.error_message,
           "wall_s": res.wall_s, "source": res.source}
    if res.timing:
        out["timing"] = [{k: t[k] for k in ("shape", "latency_us", "vendor_latency_us", "speedup_vs_vendor",
                                            "spread", "achieved_bytes_per_s", "bandwidth_fraction",
                                            "copy_bandwidth_bytes_per_s", "floor_us", "trial_medians_us")}
                         for t in res.timing]
    if res.activity:
        out["activity_kernel_time_us"] = res.activity.get("kernel_time_us")
        out["activity_kernels"] = [k["name"][:80] for k in res.activity.get("kernels", [])][:4]
    return out


def outcome(res) -> dict:
    """A gallery or fault evaluation as the record keeps it; `worker_code` is the hash the worker
    that judged it reported (None when no worker ran: a guard rejection, a compile error)."""
    return {"status": res.status.value, "error_kind": res.error_kind, "error_message": (res.error_message or "")[:400],
            "wall_s": res.wall_s, "source": res.source, "worker_code": (res.env or {}).get("worker_code")}


def _trace_kernels(prof) -> list[dict]:
    from klineage.gate.worker import trace_events
    return sorted((e for e in trace_events(prof) if e.get("cat") == "kernel"), key=lambda e: e["ts"])


def independent_timers(so_path: str, workload, shape: dict, calls: int = 40) -> dict:
    """Time the candidate with two other clocks and compare.

    CUPTI (torch.profiler) records the GPU's own start and end of every kernel. It runs over the very
    calls the gate's method makes (fresh inputs, the worker's L2 flush, events around the call), so
    the two clocks read the same executions and the ratio shows the events' own overhead and nothing
    else. triton's do_bench is a second, different method (its flush writes, no fresh inputs)."""
    import torch
    import triton.testing
    from torch.profiler import ProfilerActivity, profile
    from klineage.gate.worker import Candidate, Device, alloc_outputs, refresh_inputs, timed_call
    dev = Device()
    cand = Candidate(so_path, workload)
    buf = workload.make_inputs(shape, 7, device="cuda")
    outs = alloc_outputs(workload, shape)
    scal = workload.scalars(shape)
    stream = torch.cuda.current_stream()
    fn = lambda: cand.call({**buf, **outs}, scal, stream)
    do_bench_us = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3
    # Which kernels are the candidate's: profile one bare call.
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = {e["name"] for e in _trace_kernels(prof)}
    event_us = []
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            refresh_inputs(workload, shape, buf, 90_000 + i)
            event_us.append(timed_call(dev, fn, stream)[1])
    # Per call: first candidate kernel start to last candidate kernel end, in one group of
    # consecutive candidate kernels (harness kernels separate the calls).
    spans, cur = [], None
    for e in _trace_kernels(prof):
        if e["name"] in names:
            t0, t1 = float(e["ts"]), float(e["ts"]) + float(e["dur"])
            cur = [t0, t1] if cur is None else [cur[0], t1]
        elif cur is not None:
            spans.append(cur[1] - cur[0])
            cur = None
    if cur is not None:
        spans.append(cur[1] - cur[0])
    skip = 5
    pairs = list(zip(event_us[skip:], spans[skip:])) if len(spans) == len(event_us) else []
    ratios = [a / b for a, b in pairs if b > 0]
    return {"do_bench_median_us": do_bench_us,
            "cupti_kernel_median_us": statistics.median(spans[skip:]) if len(spans) > skip else None,
            "events_same_calls_median_us": statistics.median(event_us[skip:]),
            "cupti_calls": len(spans), "calls": calls, "candidate_kernels": sorted(n[:80] for n in names),
            "events_over_cupti_same_calls_median": statistics.median(ratios) if ratios else None}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="fewer gallery entries (smoke test)")
    ap.add_argument("--skip-gallery", action="store_true", help="skip the gallery and fault sections")
    ap.add_argument("--spread-only", action="store_true", help="only the spread and agreement section")
    ap.add_argument("--workers", type=int, default=5, help="fresh workers for the spread measurement")
    ap.add_argument("--skip-compile", action="store_true", help="skip the cold compile-time section")
    ap.add_argument("--skip-experts", action="store_true", help="skip the experts and naive kernels section")
    ap.add_argument("--skip-spread", action="store_true", help="skip the spread and agreement section")
    ap.add_argument("--gallery-faults-only", action="store_true",
                    help="only the gallery and the faults (= --skip-compile --skip-experts --skip-spread)")
    ap.add_argument("--nvcc-timeout-s", type=float, default=20.0, help="the gate's nvcc time limit for this run")
    ap.add_argument("--nvcc-memory-mb", type=int, default=4096, help="the gate's nvcc memory cap for this run")
    ap.add_argument("--json-name", default="gate_bench.json",
                    help="file name of the report under --out; {card} is the card it runs on (h100, h200)")
    ns = ap.parse_args()
    if ns.gallery_faults_only:
        ns.skip_compile = ns.skip_experts = ns.skip_spread = True
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("KLINEAGE_BUILD_CACHE", tempfile.mkdtemp(prefix="kl-builds-"))
    os.environ["KLINEAGE_NVCC_TIMEOUT_S"] = str(ns.nvcc_timeout_s)
    os.environ["KLINEAGE_NVCC_MEMORY_MB"] = str(ns.nvcc_memory_mb)
    if "{card}" in ns.json_name:
        gpu = gpu_name()
        if gpu is None:
            ap.error("--json-name names the card ({card}) but nvidia-smi shows no GPU: run it on the GPU machine")
        ns.json_name = named(ns.json_name, gpu)
    report_path = out / ns.json_name
    _LOG.append(open(out / (ns.json_name.removesuffix(".json") + ".log"), "w"))
    report: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "flags": {k: getattr(ns, k) for k in ("skip_compile", "skip_experts", "skip_spread",
                                                            "skip_gallery", "spread_only", "quick")},
                    "nvcc_limits": {"timeout_s": ns.nvcc_timeout_s, "memory_mb": ns.nvcc_memory_mb},
                    "worker_code_hash": worker_code_hash(),
                    "worker_code_files": worker_code_digests(), "command": " ".join(["python3", *sys.argv])}
    store = open_store(out / "gate.duckdb")
    wl = {n: load_workload(ROOT / "expert_kernels" / n) for n in ("row_sum", "swiglu")}
    report["workload_hash"] = {n: w.content_hash for n, w in wl.items()}

    # 1. compile time per candidate, cold cache, one at a time
    sources = sorted((ROOT / "expert_kernels").glob("*/*.cu")) + sorted((ROOT / "tests" / "gallery").glob("*.cu"))
    ctimes = []
    for p in [] if ns.skip_compile else sources:
        r = compile_kernel(p.read_text())
        ctimes.append({"kernel": str(p.relative_to(ROOT)), "seconds": r.seconds, "ok": r.ok, "cached": r.cached})
    fresh = [c["seconds"] for c in ctimes if not c["cached"]]
    report["compile"] = {"per_candidate": ctimes, "median_s": statistics.median(fresh) if fresh else None}
    if fresh:
        log(f"compile median {report['compile']['median_s']:.2f} s over {len(ctimes)} sources")

    worker = GateWorker()
    report["environment"] = worker.start()
    gate = Gate(store, GateConfig(), worker=worker)

    # 2. experts and naive kernels, every shape
    report["kernels"] = {}
    for name, w in ({} if ns.spread_only or ns.skip_experts else wl).items():
        for variant in ("expert", "naive"):
            path = ROOT / "expert_kernels" / name / f"{variant}.cu"
            try:
                res = gate.evaluate_file(path, w, remeasure=True)
                report["kernels"][f"{name}/{variant}"] = summary(res)
                log(f"{name}/{variant}: {res.status.value} {res.error_message or ''}")
                if res.timing:
                    for t in res.timing:
                        log(f"   {t['shape']}: {t['latency_us']:.1f} us, {t['bandwidth_fraction']*100:.1f}% copy bw, "
                            f"{t['speedup_vs_vendor']:.3f}x vendor")
            except Exception:
                report["kernels"][f"{name}/{variant}"] = {"harness_error": traceback.format_exc()}
                log(traceback.format_exc())
    json.dump(report, open(report_path, "w"), indent=1, default=str)

    # 3. gallery: guard on (the gate as shipped) and guard off (the dynamic defenses alone)
    gallery = [] if ns.skip_gallery else sorted((ROOT / "tests" / "gallery").glob("*.cu"))
    if ns.quick:
        gallery = gallery[:3]
    report["gallery"] = []
    dyn_gate = Gate(store, GateConfig(guard=False, stall_s=30), worker=worker)
    for p in gallery:
        h = header(p)
        entry = {"kernel": p.name, **h, "kernel_hash": kernel_hash(p.read_text())}
        for label, g in (("guarded", gate), ("unguarded", dyn_gate)):
            try:
                res = g.evaluate_file(p, wl["row_sum"], remeasure=True)
                entry[label] = outcome(res)
            except Exception:
                entry[label] = {"harness_error": traceback.format_exc()[-800:]}
            entry[label]["worker_alive_after"] = worker.alive()
        entry["expect_met"] = outcome_met(entry["guarded"], h.get("expect")) and \
            outcome_met(entry["unguarded"], h.get("dynamic"))
        log(f"gallery {p.name}: guarded {entry['guarded'].get('status')} unguarded {entry['unguarded'].get('status')}"
            f" ({entry['unguarded'].get('error_kind')})")
        report["gallery"].append(entry)
    json.dump(report, open(report_path, "w"), indent=1, default=str)

    # 4. faults: each a record, the worker replaced, the run going on
    report["faults"] = []
    fault_gate = Gate(store, GateConfig(stall_s=25, shapes="benchmark"), worker=worker)
    dyn_fault_gate = fault_gate.with_config(GateConfig(stall_s=25, shapes="benchmark", guard=False))
    for p in [] if ns.skip_gallery else sorted((ROOT / "tests" / "faults").glob("*.cu")):
        h = header(p)
        entry = {"kernel": p.name, **h, "kernel_hash": kernel_hash(p.read_text())}
        for label, g in (("guarded", fault_gate), ("unguarded", dyn_fault_gate)):
            if label == "unguarded" and "dynamic" not in h:
                continue
            t0 = time.perf_counter()
            try:
                got = outcome(g.evaluate_file(p, wl["row_sum"], remeasure=True))
            except Exception:
                got = {"harness_error": traceback.format_exc()[-800:]}
            got["driver_s"] = time.perf_counter() - t0
            got["worker_restarted_before_next"] = not worker.alive()
            got["worker_starts"] = worker.starts
            if label == "guarded":
                entry.update(got)  # the flat fields, as before
            else:
                entry["unguarded"] = got
        entry["expect_met"] = outcome_met(entry, h.get("expect")) and \
            ("dynamic" not in h or outcome_met(entry["unguarded"], h["dynamic"]))
        report["faults"].append(entry)
        log(f"fault {p.name}: {entry.get('status')} {entry.get('error_kind')}"
            + (f"; guard off: {entry['unguarded'].get('status')} {entry['unguarded'].get('error_kind')}"
               if "unguarded" in entry else "") + f" ({entry.get('driver_s', 0):.1f} s)")
    # the run goes on: a good kernel still passes after the faults
    if not ns.spread_only:
        res = gate.evaluate_file(ROOT / "expert_kernels" / "row_sum" / "expert.cu", wl["row_sum"], remeasure=True)
        report["after_faults"] = {"status": res.status.value, "worker_starts": worker.starts}
    json.dump(report, open(report_path, "w"), indent=1, default=str)

    # 5. spread of one kernel in 5 fresh workers, and agreement with independent timers
    spread = {}
    for name in () if ns.skip_spread else ("swiglu", "row_sum"):
        path = ROOT / "expert_kernels" / name / "expert.cu"
        lat = []
        for i in range(ns.workers):
            w5 = GateWorker()
            w5.start()
            g5 = Gate(None, GateConfig(shapes="benchmark"), worker=w5)
            r5 = g5.evaluate_file(path, wl[name])
            w5.close()
            lat.append(r5.timing[0]["latency_us"] if r5.timing else None)
            if not r5.timing:
                log(f"  worker {i}: {r5.status.value} {r5.error_kind} {(r5.error_message or '')[:300]}")
        good = [x for x in lat if x]
        spread[name] = {"shape": wl[name].benchmark_cases[0], "latencies_us": lat,
                        "spread": (max(good) - min(good)) / statistics.median(good) if good else None}
        log(f"spread {name}: {lat}")
        if not good:
            continue
        so = compile_kernel(path.read_text()).so_path
        ind = independent_timers(so, wl[name], wl[name].benchmark_cases[0])
        gate_lat = statistics.median(good)
        ind["gate_latency_us"] = gate_lat
        ind["do_bench_ratio"] = gate_lat / ind["do_bench_median_us"]
        ind["cupti_ratio"] = gate_lat / ind["cupti_kernel_median_us"] if ind["cupti_kernel_median_us"] else None
        ind["within_5pct"] = ind["cupti_ratio"] is not None and abs(ind["cupti_ratio"] - 1) <= 0.05
        spread[name]["independent"] = ind
        log(f"independent {name}: {ind}")
    report["spread_and_agreement"] = spread
    evals = [v.get("wall_s") for v in report["kernels"].values() if v.get("wall_s")]
    report["evaluation_wall_s_median"] = statistics.median(evals) if evals else None
    report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    worker.close()
    evals_name = "evaluations.jsonl" if ns.json_name == "gate_bench.json" else \
        ns.json_name.removesuffix(".json") + ".jsonl.gz"
    n = store.export_evaluations(out / evals_name)
    store.close()
    (out / "gate.duckdb").unlink(missing_ok=True)
    report["evaluations_exported"] = n
    json.dump(report, open(report_path, "w"), indent=1, default=str)
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
