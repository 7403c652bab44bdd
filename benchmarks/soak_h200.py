"""Soak: one gate session evaluates 500+ candidates (valid, invalid and hostile mixed) on the H200 with
no worker leak and no lost record.

    python benchmarks/soak_h200.py --out DIR [--count 520] [--budget-s 270] [--jobs N]
    python benchmarks/soak_h200.py --out DIR --dry-run [--compile 12]     (CPU: list, guard, a few builds)
    python benchmarks/soak_h200.py --out DIR --fake-worker --count 40     (CPU: the whole loop, scripted worker)

What "one mine/apply session" reduces to here: one Gate (klineage.gate.gate.Gate) on one store with one
worker (klineage.gate.pool.GateWorker), fed the candidates one after another through Gate.evaluate,
the call the mine walk and the apply loop make for every candidate; settings and -D flags go through
Gate.with_config sharing the worker, as apply's sweep does. The loop itself is this script's, not
`klineage mine` or `klineage apply`: those stop after a few dozen candidates, and cannot be fed
crashing or hostile kernels.

The candidates, each a distinct request (so every one must end as its own stored record):
  valid    every kernel of the corpus (expert_kernels/*: naive, expert, every ladder version) and of
           apply_workloads/*; -D sweep points of their tunable constants (#ifndef NAME / #define NAME
           <int>), halved and doubled; the same points baked into the source text;
  invalid  textual mutations of corpus kernels: the last ';' dropped (COMPILE_ERROR), a
           cudaDeviceSynchronize() in the entry (GUARD_REJECTED), the first launch removed (INCORRECT);
  hostile  every kernel of tests/gallery with the guard on and with it off, every kernel of
           tests/faults (host segfault, illegal address, trap, spin forever, device heap and device
           memory exhaustion, launch resources, nvcc hang and blow-up), the worker-killing ones twice.
Valid and invalid candidates are checked for correctness only (every shape, --seeds), the soak being
about robustness, not speed; hostile ones and every 25th valid one go through the whole gate (three
seeds, every shape, the activity check and a short timing run). nvcc runs on every core ahead of the
GPU (a thread pool building candidate i+1.. while candidate i is evaluated); a kernel that breaks
nvcc is left to the gate's own compile, under --nvcc-timeout-s and --nvcc-memory-mb.

Recorded: counts per status (and per category), candidates submitted vs records stored (every
submitted request's eval_key read back from the store), the worker processes alive at the start, after
every candidate (at most one) and at the end, workers started and replaced (and their distinct pids),
zombies, leftover working directories, the driver's open file descriptors, GPU processes left after
close, wall time and the environment (GPU, driver, nvcc, torch). Writes DIR/soak_h200.json,
DIR/soak_h200.log and DIR/soak_h200.jsonl.gz (the evaluations, as the other benchmarks export them,
compressed; `klineage evals import` reads it).
Needs duckdb on the GPU machine (carried as a wheel); nothing else outside the image.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from klineage.apply.materialize import bake, tunables  # noqa: E402  (the sweep's own reading of tuning constants)
from tests.support.headers import header, statuses  # noqa: E402  (the kernels' `// expect:` lines)

ENTRY = re.compile(r'extern\s+"C"[^;{]*\)\s*\{')
LAUNCH = re.compile(r"^[ \t]*[\w:]+(?:<[^<>;]*>)?\s*<<<[^;]*;", re.M)
SHORT_TIMING = {"warmup": 2, "reps": 5, "trials": 2, "floor_factor": 0.9}
NVCC_FAULTS = ("nvcc_hang.cu", "nvcc_memory_bomb.cu")
REPEATED_FAULTS = ("host_segfault.cu", "illegal_address.cu")  # a second copy: the worker replaced again
WORKER_MARKERS = ("klineage.gate.worker", "fake_worker.py")


@dataclass
class Cand:
    label: str
    category: str  # valid | invalid | hostile
    workload_dir: Path
    source: str
    flags: tuple[str, ...] = ()
    guard: bool = True
    full: bool = False  # the whole gate (timing included) rather than correctness only
    expect: str | None = None  # from a gallery or fault header
    meta: dict = field(default_factory=dict)


def sweep(source: str) -> list[dict[str, int]]:
    """Points over the first two tunables: each halved and doubled (values >= 1)."""
    tun = tunables(source)
    pts = []
    for name in list(tun)[:2]:
        for v in (tun[name] // 2, tun[name] * 2):
            if v >= 1 and v != tun[name]:
                pts.append({name: v})
    return pts


def mutate(source: str, kind: str) -> str | None:
    if kind == "drop_semicolon":
        i = source.rfind(";")
        return source[:i] + source[i + 1:] if i >= 0 else None
    if kind == "host_sync":
        m = ENTRY.search(source)
        return source[:m.end()] + "\n    cudaDeviceSynchronize();" + source[m.end():] if m else None
    if kind == "skip_launch":
        m = LAUNCH.search(source)
        return source[:m.start()] + "    /* soak: launch removed */" + source[m.end():] if m else None
    raise ValueError(kind)


def corpus_files() -> list[tuple[Path, Path]]:
    """(workload dir, kernel file) for every kernel of the corpus and of the apply workloads."""
    out = []
    for base in ("expert_kernels", "apply_workloads"):
        for d in sorted((ROOT / base).iterdir()):
            if not (d / "workload.py").is_file():
                continue
            files = sorted(d.glob("*.cu")) + sorted((d / "versions").glob("*.cu"))
            out += [(d, f) for f in files]
    return out


def _status(outcome: str | None) -> str | None:
    """The statuses a header's `dynamic: STATUS [error_kind] | ...` names, joined by ` | `."""
    return " | ".join(statuses(outcome)) or None


def build_candidates(count: int, seed: int = 20261204) -> list[Cand]:
    rs = ROOT / "expert_kernels" / "row_sum"
    hostile: list[Cand] = []
    for p in sorted((ROOT / "tests" / "gallery").glob("*.cu")):
        text, h = p.read_text(), header(p.read_text())
        hostile.append(Cand(f"gallery {p.name}", "hostile", rs, text, full=True, expect=h.get("expect"),
                            meta={"pitfall": h.get("pitfall")}))
        hostile.append(Cand(f"gallery {p.name} (guard off)", "hostile", rs, text, guard=False, full=True,
                            expect=_status(h.get("dynamic")), meta={"pitfall": h.get("pitfall")}))
    for p in sorted((ROOT / "tests" / "faults").glob("*.cu")):
        text, h = p.read_text(), header(p.read_text())
        hostile.append(Cand(f"fault {p.name}", "hostile", rs, text, full=True, expect=h.get("expect"),
                            meta={"fault": h.get("fault")}))
        if "dynamic" in h:
            hostile.append(Cand(f"fault {p.name} (guard off)", "hostile", rs, text, guard=False, full=True,
                                expect=_status(h["dynamic"]), meta={"fault": h.get("fault")}))
        if p.name in REPEATED_FAULTS:  # another kernel hash: evaluated afresh, not read from the store
            hostile.append(Cand(f"fault {p.name} (copy 2)", "hostile", rs, text + "\n// soak: a second copy\n",
                                full=True, expect=h.get("expect"), meta={"fault": h.get("fault")}))
    valid: list[Cand] = []
    invalid: list[Cand] = []
    kinds = ("drop_semicolon", "host_sync", "skip_launch")
    for i, (d, f) in enumerate(corpus_files()):
        text = f.read_text()
        rel = str(f.relative_to(ROOT))
        valid.append(Cand(rel, "valid", d, text))
        for pt in sweep(text):
            flags = tuple(f"-D{k}={v}" for k, v in sorted(pt.items()))
            valid.append(Cand(f"{rel} {' '.join(flags)}", "valid", d, text, flags=flags, meta={"sweep": pt}))
            valid.append(Cand(f"{rel} baked {pt}", "valid", d, bake(text, pt), meta={"sweep": pt, "baked": True}))
        kind = kinds[i % len(kinds)]
        mutated = mutate(text, kind)
        if mutated is not None and mutated != text:
            invalid.append(Cand(f"{rel} mutated {kind}", "invalid", d, mutated, meta={"mutation": kind}))
    rng = random.Random(seed)
    # every hostile and invalid candidate; valid ones fill the count (a deterministic sample)
    n_valid = max(0, count - len(hostile) - len(invalid))
    rng.shuffle(valid)
    chosen = valid[:n_valid]
    for j, c in enumerate(chosen):
        c.full = j % 25 == 0
    cands = hostile + invalid + chosen
    rng.shuffle(cands)
    # the compiler breakers first: the gate's own nvcc waits out their limits while the build pool
    # gets ahead of the GPU, instead of the GPU waiting on them later
    cands.sort(key=lambda c: not any(c.label == f"fault {n}" for n in NVCC_FAULTS))
    # one request per candidate: drop any two that would be the same request
    seen, out = set(), []
    for c in cands:
        key = (c.source, c.flags, c.guard, c.full, str(c.workload_dir))
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out[:count]  # below the hostile and invalid total (a rehearsal), a sample of everything


# -- process accounting ---------------------------------------------------------------------------

def _proc_stat(pid: str) -> tuple[str, int] | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1])
    except (OSError, IndexError, ValueError):
        return None


def worker_processes() -> dict:
    """This process's worker children: live pids and zombies."""
    me = os.getpid()
    live, zombies = [], []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        st = _proc_stat(pid)
        if st is None or st[1] != me:
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(m in cmd for m in WORKER_MARKERS):
            (zombies if st[0] == "Z" else live).append(int(pid))
    return {"live": sorted(live), "zombies": sorted(zombies)}


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def workdirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("klineage-run-*")}


def gpu_processes() -> list[str]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return []
    return [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]


# -- the run --------------------------------------------------------------------------------------

class Log:
    def __init__(self, path: Path):
        self.f = open(path, "w")

    def __call__(self, msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        self.f.write(line + "\n")
        self.f.flush()


def environment_extra() -> dict:
    from klineage.gate.compile import compile_limits, nvcc_version
    return {"python": sys.version.split()[0], "cpus": os.cpu_count(), "nvcc": nvcc_version(),
            "nvcc_limits": dict(zip(("timeout_s", "memory_mb"), compile_limits()))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--count", type=int, default=520, help="candidates to submit (at least every hostile and invalid one)")
    ap.add_argument("--budget-s", type=float, default=270.0, help="submit no new candidate after this many seconds")
    ap.add_argument("--jobs", type=int, default=None, help="parallel nvcc (default: cores - 2)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1], help="seeds of the correctness-only candidates")
    ap.add_argument("--stall-s", type=float, default=10.0, help="a worker silent this long is killed (TIMEOUT)")
    ap.add_argument("--nvcc-timeout-s", type=float, default=15.0, help="the gate's nvcc time limit")
    ap.add_argument("--nvcc-memory-mb", type=int, default=2048, help="the gate's nvcc memory cap")
    ap.add_argument("--dry-run", action="store_true", help="CPU: build the list, guard it, compile --compile of them")
    ap.add_argument("--compile", type=int, default=12, help="with --dry-run: how many candidates to build")
    ap.add_argument("--fake-worker", action="store_true",
                    help="CPU rehearsal: the scripted worker of tests/gate/fake_worker.py (every build 'passes')")
    ns = ap.parse_args()
    ns.out.mkdir(parents=True, exist_ok=True)
    os.environ["KLINEAGE_HOME"] = tempfile.mkdtemp(prefix="klineage-soak-")  # a fresh build cache
    os.environ["KLINEAGE_NVCC_TIMEOUT_S"] = str(ns.nvcc_timeout_s)
    os.environ["KLINEAGE_NVCC_MEMORY_MB"] = str(ns.nvcc_memory_mb)
    log = Log(ns.out / "soak_h200.log")

    from klineage.gate.compile import compile_kernel
    from klineage.gate.gate import Gate, GateConfig
    from klineage.gate.guard import check_source
    from klineage.gate.pool import GateWorker
    from klineage.store import open_store
    from klineage.workload import load_workload

    t_start = time.perf_counter()
    cands = build_candidates(ns.count)
    workloads = {d: load_workload(d) for d in {c.workload_dir for c in cands}}
    by_cat = Counter(c.category for c in cands)
    log(f"{len(cands)} candidates: {dict(by_cat)}")
    # which builds the gate will ask for: not the guard-rejected ones, not the compiler breakers
    guard_ok = [check_source(c.source, workloads[c.workload_dir]).ok or not c.guard for c in cands]
    to_build = [i for i, c in enumerate(cands) if guard_ok[i] and not any(n in c.label for n in NVCC_FAULTS)]
    result: dict = {"benchmark": "soak_h200", "mode": "dry-run" if ns.dry_run else "fake-worker" if ns.fake_worker
                    else "live", "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(ns).items()},
                    "candidates_by_category": dict(by_cat), "static_guard_rejections": guard_ok.count(False)}
    out_json = ns.out / "soak_h200.json"

    if ns.dry_run:
        pick = sorted(set(to_build[:: max(1, len(to_build) // max(1, ns.compile))][:ns.compile]))
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=ns.jobs or max(1, (os.cpu_count() or 2) - 2)) as pool:
            built = list(pool.map(lambda i: compile_kernel(cands[i].source, extra_flags=cands[i].flags), pick))
        result["dry_run"] = {"built": [{"label": cands[i].label, "ok": r.ok, "error_kind": r.error_kind,
                                        "seconds": round(r.seconds, 2)} for i, r in zip(pick, built)],
                             "build_wall_s": time.perf_counter() - t0, "would_build": len(to_build)}
        for b in result["dry_run"]["built"]:
            log(f"built {b['label']}: {'ok' if b['ok'] else b['error_kind']} in {b['seconds']} s")
        result["environment"] = environment_extra()
        out_json.write_text(json.dumps(result, indent=1, default=str) + "\n")
        log(f"dry run: {len(cands)} candidates, {len(to_build)} to build; wrote {out_json}")
        shutil.rmtree(os.environ["KLINEAGE_HOME"], ignore_errors=True)
        return 0

    db = ns.out / "soak_h200.duckdb"
    db.unlink(missing_ok=True)
    store = open_store(db)
    command = [sys.executable, str(ROOT / "tests" / "gate" / "fake_worker.py")] if ns.fake_worker else None
    worker = GateWorker(command=command) if command else GateWorker()
    quick = GateConfig(seeds=tuple(ns.seeds), timing={}, stall_s=ns.stall_s, total_s=120.0)
    full = GateConfig(timing=dict(SHORT_TIMING), stall_s=ns.stall_s, total_s=180.0)
    gate = Gate(store, quick, worker=worker)
    records: list[dict] = []
    max_live, zombies_seen = 0, 0
    stopped_by_budget = False
    accounting = {"workers_at_start": worker_processes(), "driver_fds_at_start": open_fds()}
    before_dirs = workdirs()
    jobs = ns.jobs or max(1, (os.cpu_count() or 2) - 2)
    pool = ThreadPoolExecutor(max_workers=jobs)
    t_build0 = time.perf_counter()
    built_at: list[float] = []
    builds = {}
    for i in to_build:  # in evaluation order: the pool stays ahead of the GPU
        builds[i] = pool.submit(compile_kernel, cands[i].source, GateConfig().arch, cands[i].flags, None, 120.0, 8192)
        builds[i].add_done_callback(lambda _f: built_at.append(time.perf_counter()))
    t0 = time.perf_counter()
    worker.start()  # now, while the first builds run (the first evaluation would start it anyway)
    log(f"worker started in {time.perf_counter() - t0:.1f} s: {json.dumps(worker.env_info, default=str)[:300]}")
    interrupted = False

    def on_term(*_):  # `timeout` sends SIGTERM: stop submitting, and still write what was recorded
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    try:
        for i, c in enumerate(cands):
            if time.perf_counter() - t_start > ns.budget_s:
                stopped_by_budget = True
                log(f"budget of {ns.budget_s:.0f} s spent: {i} of {len(cands)} candidates submitted")
                break
            if i in builds:
                try:
                    builds[i].result()  # built ahead; the gate finds it in the cache
                except Exception:  # noqa: BLE001 -- the gate builds it again and reports what went wrong
                    pass
            cfg = replace(full if c.full else quick, extra_flags=c.flags, guard=c.guard)
            g = gate.with_config(cfg)  # shares the one worker
            t0 = time.perf_counter()
            entry = {"i": i, "label": c.label, "category": c.category, "workload": workloads[c.workload_dir].name,
                     "flags": list(c.flags), "guard": c.guard, "full": c.full, "expect": c.expect, **c.meta}
            try:
                res = g.evaluate(c.source, workloads[c.workload_dir], origin=f"soak {c.label}")
                entry.update(status=res.status.value, error_kind=res.error_kind, eval_key=res.eval_key,
                             source=res.source, error_message=(res.error_message or "")[:240])
            except Exception as exc:  # a harness error: recorded, and the soak goes on
                entry.update(status="HARNESS_ERROR", error_kind=type(exc).__name__,
                             error_message="".join(traceback.format_exception(exc))[-1200:])
            entry["seconds"] = round(time.perf_counter() - t0, 3)
            procs = worker_processes()
            max_live = max(max_live, len(procs["live"]))
            zombies_seen = max(zombies_seen, len(procs["zombies"]))
            entry["worker_pid"] = worker.proc.pid if worker.proc is not None else None
            entry["worker_starts"] = worker.starts
            records.append(entry)
            log(f"{i + 1}/{len(cands)} {entry['status']:<14} {entry.get('error_kind') or '':<18} "
                f"{entry['seconds']:6.2f} s  {c.category:<7} {c.label[:90]}")
    except KeyboardInterrupt:
        interrupted = True
        log(f"interrupted after {len(records)} candidates; writing what was recorded")
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # builds still running finish (each within its limit)
        accounting["workers_at_end_before_close"] = worker_processes()
        env = worker.env_info
        starts = worker.starts
        gate.close()
        time.sleep(0.5)
        accounting["workers_after_close"] = worker_processes()
        accounting["driver_fds_at_end"] = open_fds()
        accounting["workdirs_left"] = sorted(workdirs() - before_dirs)
        accounting["gpu_processes_after_close"] = gpu_processes()
        keys = [r["eval_key"] for r in records if r.get("eval_key")]
        stored = store.evaluation_keys()
        n_exported = store.export_evaluations(ns.out / "soak_h200.jsonl")
        plain = ns.out / "soak_h200.jsonl"  # gzip-compressed like the shipped records (import reads .gz)
        (ns.out / "soak_h200.jsonl.gz").write_bytes(gzip.compress(plain.read_bytes()))
        plain.unlink()
        store.close()
        db.unlink(missing_ok=True)
    wall = time.perf_counter() - t_start
    statuses = Counter(r["status"] for r in records)
    per_cat: dict = {}
    for r in records:
        per_cat.setdefault(r["category"], Counter())[r["status"]] += 1
    hostile = [{k: r.get(k) for k in ("label", "expect", "status", "error_kind", "guard")}
               for r in records if r["category"] == "hostile"]
    result.update({
        "environment": {**(env or {}), **environment_extra()},
        "candidates_submitted": len(records),
        "candidates_planned": len(cands),
        "stopped_by_budget": stopped_by_budget,
        "interrupted": interrupted,
        "records_stored": len(set(keys) & stored),
        "distinct_eval_keys": len(set(keys)),
        "records_missing": sorted(set(keys) - stored),
        "harness_errors": [r for r in records if r["status"] == "HARNESS_ERROR"],
        "status_counts": dict(statuses),
        "status_counts_by_category": {k: dict(v) for k, v in per_cat.items()},
        "workers": {"alive_at_start": len(accounting["workers_at_start"]["live"]),
                    "alive_at_end_before_close": len(accounting["workers_at_end_before_close"]["live"]),
                    "alive_after_close": len(accounting["workers_after_close"]["live"]),
                    "zombies_after_close": len(accounting["workers_after_close"]["zombies"]),
                    "max_alive_after_any_candidate": max_live, "max_zombies_after_any_candidate": zombies_seen,
                    "started": starts, "replaced": max(0, starts - 1),
                    "workdirs_left": accounting["workdirs_left"],
                    "driver_fds_at_start": accounting["driver_fds_at_start"],
                    "driver_fds_at_end": accounting["driver_fds_at_end"],
                    "gpu_processes_after_close": accounting["gpu_processes_after_close"]},
        "compile": {"prebuilt": len(to_build), "jobs": jobs,
                    "prebuild_wall_s": (max(built_at) - t_build0) if built_at else None,
                    "prebuild_failures": sum(1 for f in builds.values()
                                             if f.done() and not f.cancelled() and not f.result().ok),
                    "gate_compiles": len(gate.compile_log),
                    "gate_compile_cache_hits": sum(1 for e in gate.compile_log if e["cached"]),
                    "gate_compile_failures": sum(1 for e in gate.compile_log if not e["ok"])},
        "hostile": hostile,
        "evaluations_exported": n_exported,
        "wall_s": wall,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "records": records,
    })
    out_json.write_text(json.dumps(result, indent=1, default=str) + "\n")
    shutil.rmtree(os.environ["KLINEAGE_HOME"], ignore_errors=True)  # this run's build cache
    log(f"submitted {len(records)}, stored {result['records_stored']}, statuses {dict(statuses)}")
    log(f"workers started {starts}, alive after close {result['workers']['alive_after_close']}, "
        f"max alive {max_live}, wall {wall:.1f} s; wrote {out_json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
