"""Gate the matmul shape rewriter's kernels on the held-out GEMM instances (and the gemm workload) in one
device call: correctness on every benchmark and probe shape, then speed against the held-out idiom
kernel, FlagGems (where its wheel is carried) and torch.

    # 1. on a CPU machine with nvcc and the repository's parsers: write every variant and build it for sm_90a
    python benchmarks/matmul_rewrites_h200.py prepare            # -> build/matmul_rewrites/ (~3 min, ~4 MB)
    # 2. on the GPU machine, carried with ["build/matmul_rewrites", ".whlg"] (.whlg: benchmarks/device_site.sh g):
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whlg/*.whl; \\
      PYTHONPATH=/tmp/site:$PWD python3 benchmarks/matmul_rewrites_h200.py run --out $OUT   # ~5 min

The variants (manifest.json lists each with its build, its ptxas resources and the rewriter's audit):
  speed        the held-out start kernels (gemm_mm.cu: mm, addmm, bmm; gemm_grouped.cu) and their rewrites
               +wgmma, +wgmma+tma, +wgmma+tma+warp_specialization and +tma (mma.sync fed by the TMA), with
               the configurations the shipped skill cards carry; checked and timed on every held-out GEMM
               instance (8);
  correctness  every rung of three chains, so each form the generator writes runs on a GPU once: naive mm /
               addmm / bmm and naive grouped kernels of the held-out signatures (b [K, N]) and the gemm
               ladder's naive kernel (b [N, K]) through smem_tiling, register_tiling, unroll, tensor_core_mma,
               smem_swizzle, async_copy, wgmma, tma, launch_bounds, warp_specialization; checked on the
               probe shapes of their workloads.
Each variant runs in a subprocess of its own with a time limit, so a kernel that hangs or faults is a
recorded result and the call goes on. `run` writes $OUT/matmul_rewrites_h200.json (environment, per
variant and instance: every check, the timings) and prints one line per variant and instance.
Correctness uses the gate's rule (klineage.gate.correctness.compare); timing the gate worker's window
(an L2 flush, CUDA events around one call), median of --reps calls over three rotated input sets.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PREPARED = ROOT / "build" / "matmul_rewrites"
HELDOUT = ROOT / "heldout"
FIXTURES = ROOT / "tests" / "mechanisms" / "shapes" / "kernels"
MM_INSTANCES = ("mm_2048", "mm_4096", "mm_8192", "addmm_4096", "bmm_16x2048", "bmm_32x1024")
GROUPED_INSTANCES = ("grouped_mm_g4", "grouped_mm_g8")
# (variant prefix, start kernel, workload that recognises it, instances it is gated on)
SPEED = [
    ("heldout_mm", HELDOUT / "kernels/gemm_mm.cu", HELDOUT / "mm_4096", MM_INSTANCES),
    ("heldout_grouped", HELDOUT / "kernels/gemm_grouped.cu", HELDOUT / "grouped_mm_g4", GROUPED_INSTANCES),
]
SPEED_STEPS = [(), ("wgmma",), ("wgmma", "tma"), ("wgmma", "tma", "warp_specialization"), ("tma",)]
CORRECTNESS = [
    ("naive_mm", FIXTURES / "naive_mm.cu", HELDOUT / "mm_4096", ("mm_2048", "addmm_4096", "bmm_16x2048")),
    ("naive_grouped", FIXTURES / "naive_grouped.cu", HELDOUT / "grouped_mm_g4", ("grouped_mm_g8",)),
    ("ladder", ROOT / "expert_kernels/gemm/naive.cu", None, ("expert_kernels/gemm",)),
]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def workload_dir(instance: str) -> Path:
    return ROOT / instance if "/" in instance else HELDOUT / instance


# ---- prepare (CPU) ------------------------------------------------------------------------------------------

def skill_configs(db: Path) -> dict:
    """mechanism -> the shipped card's carrier (its measured configurations), read from a copy of the library."""
    from klineage.store import open_store
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "skills.duckdb"
        shutil.copy(db, copy)
        store = open_store(copy)
        return {s["mechanism"]: {"carrier": (s.get("card") or {}).get("carrier") or {}} for s in store.skills()}


def variants() -> list[dict]:
    """Every variant to build: name, start, workload folder, instances, steps, and whether it is timed.
    The correctness chains walk the rewriter's ladder (klineage.mechanisms.shapes.matmul)."""
    from klineage.mechanisms.shapes.matmul import RULES_STEPS, MatmulRewriter
    chain = MatmulRewriter.ladder
    out = []
    for prefix, start, wl, instances in SPEED:
        for steps in SPEED_STEPS:
            out.append({"name": "+".join((prefix,) + steps) if steps else f"{prefix}+idiom", "start": start,
                        "workload": wl, "instances": list(instances), "steps": list(steps), "speed": True})
    for prefix, start, wl, instances in CORRECTNESS:
        for i in range(len(chain) + 1):
            if i and chain[i - 1] in RULES_STEPS:
                continue  # the rules steps are gated with the structural step after them
            out.append({"name": "+".join((prefix,) + chain[:i]) if i else f"{prefix}+naive", "start": start,
                        "workload": wl, "instances": list(instances), "steps": list(chain[:i]), "speed": False})
    return out


def rewrite(src: str, step: str, config: dict, workload):
    """(new source, the rewrite's config) after one step of the matmul rewriter's ladder."""
    from klineage.mechanisms.base import Applied, NotApplicable
    from klineage.mechanisms.shapes import rewriters
    rw = next(r for r in rewriters() if r.name == "matmul")
    shape = rw.recognise(src, workload)
    res = shape if isinstance(shape, NotApplicable) else rw.rewrite(src, shape, step, config, workload)
    if not isinstance(res, Applied):
        raise SystemExit(f"{step}: {res.reason}")
    return res.source, res.config


def prepare(ns) -> int:
    from klineage.gate.compile import DEFAULT_ARCH, compile_many, nvcc_version
    from klineage.workload import load_workload
    configs = skill_configs(ns.db)
    out = ns.out
    (out / "kernels").mkdir(parents=True, exist_ok=True)
    plan, sources = [], []
    for v in variants():
        if ns.only and not any(o in v["name"] for o in ns.only):
            continue
        wl = load_workload(v["workload"] / "workload.py") if v["workload"] else None
        src, notes = v["start"].read_text(), []
        for step in v["steps"]:
            src, cfg = rewrite(src, step, configs.get(step, {}), wl)
            notes.append({"step": step, **({k: cfg[k] for k in ("values", "notes", "audit") if k in cfg})})
        path = out / "kernels" / f"{v['name']}.cu"
        path.write_text(src)
        plan.append({**{k: v[k] for k in ("name", "instances", "steps", "speed")},
                     "start": str(v["start"].relative_to(ROOT)), "source": str(path.relative_to(out)),
                     "rewrites": notes})
        sources.append(src)
    log(f"building {len(sources)} variants for sm_90a")
    builds = compile_many(sources, jobs=ns.jobs)
    bad = []
    for entry, b in zip(plan, builds):
        so = out / "kernels" / f"{entry['name']}.so"
        if b.ok:
            shutil.copy(b.so_path, so)
            entry["so"] = str(so.relative_to(out))
        else:
            bad.append(entry["name"])
            entry["build_log"] = b.log[-3000:]
        entry["resources"] = [{"kernel": r.name, "registers": r.registers, "spill_bytes": r.spill_store_bytes,
                               "stack_bytes": r.stack_bytes} for r in b.resources]
    # one solid xz archive: each library carries the same static CUDA runtime (45 MB loose, 2 MB packed)
    with tarfile.open(out / "kernels.tar.xz", "w:xz") as tar:
        for entry in plan:
            if "so" in entry:
                tar.add(out / entry["so"], arcname=Path(entry["so"]).name)
                (out / entry["so"]).unlink()
    (out / "manifest.json").write_text(json.dumps({"nvcc": nvcc_version(), "arch": DEFAULT_ARCH, "variants": plan},
                                                  indent=1) + "\n")
    spills = [e["name"] for e in plan if any(r["spill_bytes"] or r["stack_bytes"] for r in e["resources"])]
    log(f"{len(plan)} variants in {out} ({len(bad)} failed to build{': ' + ', '.join(bad) if bad else ''}; "
        f"{len(spills)} with spills or stack frames{': ' + ', '.join(spills) if spills else ''})")
    return 1 if bad else 0


# ---- run (GPU) ----------------------------------------------------------------------------------------------

def _torch_reference(wl):
    """torch's own op for the instance's entry (cuBLAS or ATen's grouped GEMM), as a second vendor."""
    import torch
    ops = {"mm": lambda i: torch.mm(i["a"], i["b"]), "addmm": lambda i: torch.addmm(i["bias"], i["a"], i["b"]),
           "bmm": lambda i: torch.bmm(i["a"], i["b"]),
           "grouped_mm": lambda i: torch._grouped_mm(i["a"], i["b"], offs=i["offs"]),
           "gemm": lambda i: i["x"] @ i["weight"].t()}
    return ops.get(wl.entry)


def time_fn(dev, fn, inputs: list, reps: int, warm: int = 5) -> dict:
    import torch
    from klineage.gate.worker import timed_call
    for i in range(warm):
        fn(inputs[i % len(inputs)])
    torch.cuda.synchronize()
    stream = torch.cuda.current_stream()
    ts = sorted(timed_call(dev, lambda i=i: fn(inputs[i % len(inputs)]), stream)[1] for i in range(reps))
    return {"median_us": ts[len(ts) // 2], "min_us": ts[0], "p90_us": ts[int(len(ts) * 0.9)]}


def run_variant(entry: dict, reps: int, prepared: Path) -> dict:
    """Check (and for speed variants time) one built variant on each of its instances, in this process."""
    import torch
    from klineage.gate.correctness import compare
    from klineage.gate.worker import Candidate, Device, alloc_outputs, place_inputs
    from klineage.workload import load_workload
    dev = Device()
    res = {}
    for inst in entry["instances"]:
        wl = load_workload(workload_dir(inst) / "workload.py")
        cand = Candidate(str(prepared / entry["so"]), wl)
        shapes = ([("benchmark", s) for s in wl.benchmark_cases] if entry["speed"] else []) + \
            [("probe", s) for s in wl.probe_shapes]
        checks = []
        for kind, shape in shapes:
            row = {"kind": kind, "shape": shape, "ok": True, "why": ""}
            for seed in (0, 1):
                ins = wl.make_inputs(shape, seed, device="cuda")
                bufs, outs = place_inputs(wl, shape, ins), alloc_outputs(wl, shape)
                rc = cand.call({**bufs, **outs}, wl.scalars(shape), torch.cuda.current_stream())
                torch.cuda.synchronize()
                if rc != 0:
                    row.update(ok=False, why=f"seed {seed}: entry returned cudaError {rc}")
                    break
                for name, ref in wl.reference(ins, shape).items():
                    c = compare(outs[name], ref, wl.tolerance)
                    if not c.ok:
                        row.update(ok=False, why=f"seed {seed}: {name}: {c.reason}")
                        break
                if not row["ok"]:
                    break
            checks.append(row)
        r = {"checks": checks, "passed": all(c["ok"] for c in checks), "timing": []}
        if entry["speed"] and all(c["ok"] for c in checks if c["kind"] == "benchmark"):
            for case in wl.benchmark_cases:
                sets = []
                for i in range(3):
                    ins = place_inputs(wl, case, wl.make_inputs(case, 100 + i, device="cuda"))
                    sets.append({**ins, **alloc_outputs(wl, case)})
                t = time_fn(dev, lambda ts: cand.call(ts, wl.scalars(case), torch.cuda.current_stream()), sets, reps)
                t["tflops"] = wl.flops(case) / (t["median_us"] * 1e-6) / 1e12
                r["timing"].append({"case": case, **t})
        res[inst] = r
    return res


def run_vendors(instances: list[str], reps: int, out: dict, save) -> None:
    """FlagGems (the workload's vendor; where it cannot be imported, the reason) and torch per instance,
    into `out`, saved after each (FlagGems autotunes on its first calls)."""
    from klineage.gate.worker import Device
    from klineage.workload import load_workload
    dev = Device()
    for inst in instances:
        wl = load_workload(workload_dir(inst) / "workload.py")
        case = wl.benchmark_cases[0]
        sets = [wl.make_inputs(case, 100 + i, device="cuda") for i in range(3)]
        row = {"case": case}
        try:
            row["vendor"] = {"name": wl.vendor_name, **time_fn(dev, lambda i: wl.vendor(i, case), sets, reps)}
        except Exception as exc:  # no FlagGems wheel carried, or a FlagGems failure: recorded, not fatal
            row["vendor"] = {"name": wl.vendor_name, "error": f"{type(exc).__name__}: {exc}"[:300]}
        op = _torch_reference(wl)
        if op is not None:
            row["torch"] = time_fn(dev, op, sets, reps)
        out[inst] = row
        save()


def environment() -> dict:
    import torch
    props = torch.cuda.get_device_properties(0)
    nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    return {"gpu": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
            "cuda": torch.version.cuda, "nvcc": nvcc[-1] if nvcc else ""}


def run(ns, child=None, env=None) -> int:
    """Every prepared variant through `child` (a subprocess each, _child), then the vendors; the record to
    $OUT/matmul_rewrites_h200.json. `child` and `env` are replaced in tests (no GPU)."""
    child, env = child or _child, env or environment
    manifest = json.loads((ns.prepared / "manifest.json").read_text())
    if (ns.prepared / "kernels.tar.xz").exists():
        with tarfile.open(ns.prepared / "kernels.tar.xz") as tar:
            tar.extractall(ns.prepared / "kernels", filter="data")
    ns.out.mkdir(parents=True, exist_ok=True)
    record = {"environment": env(), "variants": {}, "vendors": {}}
    t0 = time.time()
    todo = [v for v in manifest["variants"] if not ns.only or any(o in v["name"] for o in ns.only)]
    by_name = {v["name"]: v for v in todo}
    for v in todo:
        if "so" not in v:
            record["variants"][v["name"]] = {"status": "build failed", "error": v.get("build_log", "")}
    # a subprocess per timed variant, one per correctness chain (the chain's rungs one after another)
    groups = [[v["name"]] for v in todo if v["speed"] and "so" in v]
    chains: dict = {}
    for v in todo:
        if not v["speed"] and "so" in v:
            chains.setdefault(v["name"].split("+")[0], []).append(v["name"])
    groups += list(chains.values())
    for group in groups:
        pending = list(group)
        while pending:
            if time.time() - t0 > ns.time_limit:
                for name in pending:
                    record["variants"][name] = {"status": "not run: the call's time limit", "error": ""}
                break
            done, status, error = child(["variant", *pending], ns)
            for name in pending:
                if name in done:
                    r = done[name]
                    record["variants"][name] = {"status": "error" if "error" in r else "ok",
                                                "error": r.get("error", ""), "results": r.get("results", {})}
            rest = [n for n in pending if n not in done]
            if rest and status != "ok":  # the child died or hung in the first variant it did not report
                record["variants"][rest[0]] = {"status": status, "error": error}
                rest = rest[1:]
            pending = rest  # a fresh process takes the rest: a fault may have left the CUDA context unusable
    for name, rec in record["variants"].items():
        rec.update(steps=by_name[name]["steps"], resources=by_name[name]["resources"])
        _print_variant(name, rec)
    speed_instances = sorted({i for v in todo if v["speed"] for i in v["instances"]})
    if speed_instances and time.time() - t0 < ns.time_limit:
        done, status, error = child(["vendors", *speed_instances], ns)
        record["vendors"] = done.get("vendors", {"status": status, "error": error})
    _print_speed(record)
    path = ns.out / "matmul_rewrites_h200.json"
    path.write_text(json.dumps(record, indent=1, default=str) + "\n")
    log(f"wrote {path} in {time.time() - t0:.0f} s")
    return 0


def _child(args: list[str], ns) -> tuple[dict, str, str]:
    """Run this script's `one` command in a fresh process; it writes its results after each variant. A
    hang (no new result within --variant-timeout), a fault or a poisoned CUDA context ends only that
    process. Returns (results so far, "ok" | "crashed" | "timeout", the process's last output)."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = Path(f.name)
    cmd = [sys.executable, __file__, "one", "--prepared", str(ns.prepared), "--reps", str(ns.reps), "--result",
           str(out), *args]
    logf = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, text=True)
    last, seen, status = time.time(), -1, "ok"
    try:
        while proc.poll() is None:
            time.sleep(0.5)
            size = out.stat().st_size if out.exists() else 0
            if size != seen:
                seen, last = size, time.time()
            elif time.time() - last > ns.variant_timeout:
                proc.kill()
                proc.wait()
                status = "timeout"
        if status == "ok" and proc.returncode != 0:
            status = "crashed"
        done = json.loads(out.read_text()) if out.exists() and out.stat().st_size else {}
        logf.seek(0)
        text = logf.read()[-2000:]
        error = f"no result within {ns.variant_timeout:.0f} s (a hang?); " + text if status == "timeout" else text
        return done, status, error if status != "ok" else ""
    finally:
        out.unlink(missing_ok=True)
        logf.close()


def one(ns) -> int:
    """The child's work: every variant named (stopping at the first that raises), or the vendors; the
    results file rewritten after each."""
    done: dict = {}

    def save():
        tmp = ns.result.with_suffix(".tmp")
        tmp.write_text(json.dumps(done, default=str))
        tmp.replace(ns.result)

    if ns.what[0] == "vendors":
        done["vendors"] = {}
        run_vendors(ns.what[1:], ns.reps, done["vendors"], save)
        return 0
    manifest = {v["name"]: v for v in json.loads((ns.prepared / "manifest.json").read_text())["variants"]}
    for name in ns.what[1:]:
        try:
            done[name] = {"results": run_variant(manifest[name], ns.reps, ns.prepared)}
        except Exception as exc:  # a CUDA fault poisons the context: report it and let a fresh process go on
            done[name] = {"error": f"{type(exc).__name__}: {exc}"[:1000]}
            save()
            return 3
        save()
    return 0


def _print_variant(name: str, rec: dict) -> None:
    if rec["status"] != "ok":
        log(f"{name}: {rec['status'].upper()} {rec.get('error', '')[-300:]}")
        return
    for inst, r in rec.get("results", {}).items():
        fails = [c for c in r["checks"] if not c["ok"]]
        t = "".join(f" {x['median_us']:.1f} us {x['tflops']:.0f} TFLOP/s" for x in r["timing"])
        log(f"{name} on {inst}: {len(r['checks']) - len(fails)}/{len(r['checks'])} shapes pass{t}"
            + (f"; first failure {fails[0]['shape']}: {fails[0]['why'][:200]}" if fails else ""))


def _print_speed(record: dict) -> None:
    """Per instance: each timed variant's latency against the idiom kernel, FlagGems and torch."""
    rows = {}
    for name, rec in record["variants"].items():
        for inst, r in (rec.get("results") or {}).items():
            for t in r.get("timing", []):
                rows.setdefault(inst, {})[name] = t["median_us"]
    for inst, by in sorted(rows.items()):
        ven = record["vendors"].get(inst, {}) if isinstance(record["vendors"], dict) else {}
        fg = (ven.get("vendor") or {}).get("median_us")
        th = (ven.get("torch") or {}).get("median_us")
        idiom = next((us for n, us in by.items() if n.endswith("+idiom")), None)
        for name, us in sorted(by.items(), key=lambda x: x[1]):
            parts = [f"{us:9.1f} us"]
            if idiom:
                parts.append(f"x{idiom / us:.2f} vs idiom")
            if fg:
                parts.append(f"x{fg / us:.2f} vs FlagGems")
            if th:
                parts.append(f"x{th / us:.2f} vs torch")
            log(f"{inst:14s} {name:45s} " + ", ".join(parts))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="write and build every variant (CPU)")
    p.add_argument("--db", type=Path, default=ROOT / "skills_db" / "skills.duckdb")
    p.add_argument("--out", type=Path, default=PREPARED)
    p.add_argument("--jobs", type=int, default=max(1, os.cpu_count() or 1))
    p.add_argument("--only", nargs="*", default=[], help="variants whose name contains one of these")
    r = sub.add_parser("run", help="check and time the prepared variants (GPU)")
    r.add_argument("--prepared", type=Path, default=PREPARED)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--reps", type=int, default=30)
    r.add_argument("--only", nargs="*", default=[], help="variants whose name contains one of these")
    r.add_argument("--variant-timeout", type=float, default=240.0)
    r.add_argument("--time-limit", type=float, default=540.0, help="seconds after which no new variant starts")
    o = sub.add_parser("one", help=argparse.SUPPRESS)
    o.add_argument("--prepared", type=Path, default=PREPARED)
    o.add_argument("--reps", type=int, default=30)
    o.add_argument("--result", type=Path, required=True)
    o.add_argument("what", nargs="+")
    ns = ap.parse_args(argv)
    return {"prepare": prepare, "run": run, "one": one}[ns.cmd](ns)


if __name__ == "__main__":
    raise SystemExit(main())
