"""`klineage apply` on the naive kernels of apply_workloads/ (matrix products, sums over one dimension,
softmax, log-softmax, LayerNorm, RMSNorm: structural_reach.py's classes): the shipped library, the
command's defaults (rules and sweep, its admission, the structural rewrites), a budget of 12 steps,
one call per kernel, each into a copy of the library of its own. Kernels are taken from one queue,
matrix products first, by --per-gpu runs at a time on each of the machine's GPUs (CUDA_VISIBLE_DEVICES),
until a deadline: a kernel that cannot start in time is recorded as not run. Runs that share a GPU
share its lock (klineage.gate.worker's GpuLock, KLINEAGE_GPU_LOCK): a gate worker times only while no
other run's kernel is on the card (their correctness calls may overlap each other), while the other
runs rewrite and compile; each evaluation records the time it waited (phases.gpu_wait_s).

    python benchmarks/apply_naive_gpu.py --out DIR [--budget-steps 12] [--deadline-s 480] [--gpus N]
                                         [--per-gpu 1] [--dry-run] [NAME ...]
    python benchmarks/apply_naive_gpu.py --out DIR --table RECORD     # the record's table, as docs/apply.md has it

Per kernel, from the run's trajectory and the gate's evaluations in its library copy: the stop
reason, the skills kept, every step, and per benchmark shape the naive start's, the best kernel's and
the PyTorch reference's latency (the workload's `vendor`, timed by the gate alternately with the
kernel in the same trials), the speedup over the start (the run's paired comparison) and over PyTorch
(the best kernel's evaluation). Writes DIR/apply_naive_<card>.json (<card> from the GPU the
evaluations name: h100, h200, ...; benchmarks/record_names.py) and DIR/runs.tar.gz (runs/<name>/:
best.cu, trajectory.json, the command's log; evals/<name>.jsonl.gz: each workload's evaluations, what
a CPU `--replay` of a run reads), and prints the record's table (what --table prints). --dry-run runs
`klineage apply --dry-run` instead (no GPU: each kernel's plan) and writes DIR/apply_naive_plan.json.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from queue import Empty, Queue

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from record_names import gpu_name, named  # noqa: E402
from structural_reach import APPLY, CLASSES, kernel_class  # noqa: E402

RESERVE_S = 60        # a kernel starts only with this much of the deadline left
RECORD = "apply_naive_{card}.json"


def kernels() -> list[str]:
    """The naive kernels of the four classes, matrix products first (their steps take longest)."""
    names = [p.parent.name for p in APPLY.glob("*/workload.py") if (p.parent / "naive.cu").is_file()]
    order = list(CLASSES)
    return sorted((n for n in names if kernel_class(n) in CLASSES), key=lambda n: (order.index(kernel_class(n)), n))


def gpu_count() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return len([ln for ln in out.splitlines() if ln.startswith("GPU ")])


def _cli(args: list[str], env: dict, timeout_s: float, log: Path) -> tuple[int | None, str]:
    cmd = [sys.executable, "-m", "klineage.cli", *args]
    with open(log, "w") as err:
        try:
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, timeout=timeout_s, cwd=ROOT)
        except subprocess.TimeoutExpired:
            return None, ""
    return r.returncode, r.stdout


def _timing(rec: dict | None) -> dict:
    """{shape key: timing entry} of an evaluation record."""
    out = {}
    for t in (rec or {}).get("result", {}).get("timing") or []:
        out[json.dumps(t["shape"], sort_keys=True)] = t
    return out


def _best_eval(traj: dict) -> str | None:
    """The eval_key of the run's best kernel as last measured: the last kept step's baked or re-measured
    evaluation; the start's when nothing was kept."""
    key = next((s["eval_key"] for s in traj["steps"] if s.get("kind") == "start"), None)
    for s in traj["steps"]:
        if s.get("accepted") and s.get("kind") != "start":
            baked = s.get("baked") or {}
            key = baked["eval_key"] if baked.get("status") == "PASSED" else (s.get("remeasure") or {}).get("eval_key", key)
    return key


def _gpu_time(evals: Path) -> dict:
    """The seconds the run's evaluations held the GPU (their wall_s) and waited for it (gpu_wait_s)."""
    import gzip
    held = waited = 0.0
    with gzip.open(evals, "rt") as f:
        for line in f:
            r = json.loads(line).get("result") or {}
            held += r.get("wall_s") or 0.0
            waited += (r.get("phases") or {}).get("gpu_wait_s") or 0.0
    return {"gpu_s": round(held, 1), "gpu_wait_s": round(waited, 1)}


def one(name: str, out: Path, env: dict, budget_steps: int, deadline: float) -> dict:
    """Apply on one kernel; its record entry."""
    from klineage.store import open_store
    from klineage.workload import load_workload
    left = deadline - time.monotonic()
    entry = {"class": kernel_class(name), "gpu": env.get("CUDA_VISIBLE_DEVICES")}
    if left < RESERVE_S:
        return {**entry, "status": "not_run", "why": f"{left:.0f} s of the deadline left"}
    d = APPLY / name
    run_dir = out / "runs" / name
    run_dir.mkdir(parents=True, exist_ok=True)
    db = out / "db" / f"{name}.duckdb"
    db.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
    t0 = time.monotonic()
    rc, stdout = _cli(["apply", "--workload", str(d), "--start", str(d / "naive.cu"), "--db", str(db),
                       "--budget-steps", str(budget_steps), "--json", "--quiet", "--out", str(run_dir)],
                      env, left - 10, run_dir / "apply.log")
    entry["wall_s"] = round(time.monotonic() - t0, 1)
    wl = load_workload(d)
    store = open_store(db)
    try:
        (out / "evals").mkdir(exist_ok=True)
        entry["evaluations"] = store.export_evaluations(out / "evals" / f"{name}.jsonl.gz",
                                                        workload_hashes=[wl.content_hash])
        entry.update(_gpu_time(out / "evals" / f"{name}.jsonl.gz"))
        traj_path = run_dir / "trajectory.json"
        if rc is None or not traj_path.is_file():
            return {**entry, "status": "timeout" if rc is None else "error", "rc": rc,
                    "log": (run_dir / "apply.log").read_text()[-1500:]}
        traj = json.loads(traj_path.read_text())
        summ = traj["summary"]
        start = next(s for s in traj["steps"] if s.get("kind") == "start")
        first, best = store.get_evaluation(start["eval_key"]), store.get_evaluation(_best_eval(traj))
    finally:
        store.close()
    status = "start_failed" if traj["stop_reason"] == "start_failed" else "done"
    entry.update(status=status, rc=rc, run_id=traj["run_id"], stop_reason=traj["stop_reason"], kept=summ["kept"],
                 steps=[{k: s.get(k) for k in ("seq", "kind", "backend", "skill", "flags", "status", "accepted", "note")}
                        for s in traj["steps"]],
                 env=(best or first or {}).get("env"))
    t_first, t_best = _timing(first), _timing(best)
    paired = {json.dumps(c["shape"], sort_keys=True): c for c in summ.get("speedup_vs_start") or []}
    shapes = []
    for key, tf in t_first.items():
        tb = t_best.get(key, tf)
        pc = paired.get(key)
        shapes.append({"shape": tf["shape"], "naive_us": tf["latency_us"], "best_us": tb["latency_us"],
                       "torch_us": tb["vendor_latency_us"],
                       "speedup_vs_naive": pc["speedup"] if pc else 1.0,
                       "speedup_vs_torch": tb["speedup_vs_vendor"], "naive_vs_torch": tf["speedup_vs_vendor"]})
    entry["shapes"] = shapes
    return entry


def worker(queue: "Queue[str]", out: Path, budget_steps: int, deadline: float, gpu: str | None) -> dict:
    """Runs kernels from the queue on one GPU until it is empty; with a lock file when runs share it."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
        env["KLINEAGE_GPU_LOCK"] = str(out / f"gpu{gpu}.lock")
    res = {}
    while True:
        try:
            n = queue.get_nowait()
        except Empty:
            return res
        try:
            res[n] = one(n, out, env, budget_steps, deadline)
        except Exception as exc:  # a kernel whose run breaks is a recorded result, not a dead benchmark
            res[n] = {"class": kernel_class(n), "status": "error", "why": f"{type(exc).__name__}: {exc}"}
        r = res[n]
        print(n, r["status"], r.get("stop_reason"), r.get("kept"),
              [round(s["speedup_vs_naive"], 2) for s in r.get("shapes", [])],
              [round(s["speedup_vs_torch"], 3) for s in r.get("shapes", [])], f"{r.get('wall_s')} s", flush=True)


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return round(math.exp(sum(math.log(x) for x in xs) / len(xs)), 4) if xs else None


def library_hash() -> str:
    """The hash of the shipped library's canonical dump, which every run copies: retrieval ranks by it."""
    from klineage.store import open_store
    store = open_store(ROOT / "skills_db" / "skills.duckdb", read_only=True)
    try:
        return store.library_hash()
    finally:
        store.close()


def pack_runs(out: Path) -> None:
    """Each run's trajectory, best kernel and log in one file, DIR/runs.tar.gz, in place of DIR/runs/: a device call
    returns files at most two folders below $OUT, and a bounded number of them, so runs/NAME/ would not
    come back. Unpack it beside the record (tar -xzf runs.tar.gz -C benchmarks/results/apply_naive)."""
    import tarfile
    with tarfile.open(out / "runs.tar.gz", "w:gz") as tar:
        for f in sorted((out / "runs").glob("*/*")):
            if f.name in ("trajectory.json", "best.cu", "apply.log"):
                tar.add(f, arcname=f.relative_to(out).as_posix())
        for f in sorted((out / "evals").glob("*.jsonl.gz")):
            tar.add(f, arcname=f.relative_to(out).as_posix())
    shutil.rmtree(out / "runs", ignore_errors=True)
    shutil.rmtree(out / "evals", ignore_errors=True)
    for f in out.glob("gpu*.lock*"):
        f.unlink()


def summary(results: dict) -> dict:
    """Per class: kernels, done, geometric means (over kernels, of each kernel's geometric mean over
    its shapes) of the speedup over the naive start and over PyTorch."""
    out = {}
    for c in CLASSES:
        rows = [r for r in results.values() if r["class"] == c]
        done = [r for r in rows if r["status"] == "done"]
        out[c] = {"kernels": len(rows), "done": len(done),
                  "speedup_vs_naive": _geomean([_geomean([s["speedup_vs_naive"] for s in r["shapes"]]) for r in done]),
                  "speedup_vs_torch": _geomean([_geomean([s["speedup_vs_torch"] for s in r["shapes"]]) for r in done]),
                  "kept_structural": sum(1 for r in done if any("/" in k for k in r["kept"]))}
    return out


def markdown(rec: dict) -> str:
    """The record as docs/apply.md shows it: the card, the call, and per kernel the stop, the geometric
    means over its shapes of the speedup over the naive start and over PyTorch, and the skills kept."""
    env, cfg = rec["env"] or {}, rec["config"]
    lines = [f"{env.get('gpu')}, driver {env.get('driver')}, nvcc {env.get('nvcc')}, torch {env.get('torch')}; "
             f"budget {cfg['budget_steps']}, {rec['gpus']} GPU, {cfg.get('per_gpu', 1)} runs at a time on it, "
             f"{rec['wall_s']:.0f} s for the call (`benchmarks/results/apply_naive/`).", "",
             "| kernel | class | stop | x naive | x PyTorch | kept, in order |", "|---|---|---|---|---|---|"]
    for n, r in rec["kernels"].items():
        sp = _geomean([s["speedup_vs_naive"] for s in r.get("shapes", [])])
        st = _geomean([s["speedup_vs_torch"] for s in r.get("shapes", [])])
        lines.append(f"| {n} | {r['class']} | {r.get('stop_reason') or r['status']} | {f'{sp:.2f}' if sp else '-'} | "
                     f"{f'{st:.3f}' if st else '-'} | {', '.join(r.get('kept') or []) or '-'} |")
    lines += ["", "| class | kernels | run | x naive | x PyTorch | a structural skill kept |", "|---|---|---|---|---|---|"]
    for c, v in rec["summary"].items():
        lines.append(f"| {c} | {v['kernels']} | {v['done']} | {v['speedup_vs_naive']:.2f} | {v['speedup_vs_torch']:.3f} | "
                     f"{v['kept_structural']} |")
    return "\n".join(lines)


def dry_run(names: list[str], out: Path) -> int:
    """`klineage apply --dry-run --json` on each kernel: the plan (no GPU)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    plans = {}
    (out / "runs").mkdir(parents=True, exist_ok=True)
    db = out / "plan_library.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
    for n in names:
        d = APPLY / n
        rc, stdout = _cli(["apply", "--workload", str(d), "--start", str(d / "naive.cu"), "--db", str(db),
                           "--budget-steps", "12", "--dry-run", "--json"],
                          env, 600, out / "runs" / f"{n}.plan.log")
        plan = json.loads(stdout) if rc == 0 and stdout.strip() else None
        plans[n] = {"class": kernel_class(n), "rc": rc, "plan": plan}
        cands = (plan or {}).get("retrieved") or (plan or {}).get("candidates") or []
        print(n, rc, [c.get("name") for c in cands[:3]] if isinstance(cands, list) else "", flush=True)
    db.unlink()
    (out / "apply_naive_plan.json").write_text(json.dumps(plans, indent=1, default=str) + "\n")
    return 0 if all(p["rc"] == 0 for p in plans.values()) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-steps", type=int, default=12)
    ap.add_argument("--deadline-s", type=float, default=480.0)
    ap.add_argument("--gpus", type=int, default=None, help="GPUs to use (default: every one nvidia-smi lists)")
    ap.add_argument("--per-gpu", type=int, default=1,
                    help="runs at a time on each GPU (their GPU work serialised by the GPU's lock)")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--table", type=Path, help="print a record's Markdown table (docs/apply.md) and exit")
    ap.add_argument("names", nargs="*")
    ns = ap.parse_args()
    if ns.table:
        print(markdown(json.loads(ns.table.read_text())))
        return 0
    t0 = time.monotonic()
    deadline = t0 + ns.deadline_s
    names = ns.names or kernels()
    ns.out.mkdir(parents=True, exist_ok=True)
    if ns.dry_run:
        return dry_run(names, ns.out)
    n_gpu = ns.gpus or gpu_count()
    if n_gpu < 1:
        print("no GPU: nvidia-smi lists none (run on a GPU machine, or pass --dry-run)", file=sys.stderr)
        return 2
    queue: Queue[str] = Queue()
    for n in names:
        queue.put(n)
    slots = [str(i) for i in range(n_gpu) for _ in range(max(1, ns.per_gpu))]
    with ThreadPoolExecutor(max_workers=len(slots)) as pool:
        parts = list(pool.map(lambda g: worker(queue, ns.out, ns.budget_steps, deadline, g), slots))
    results = {n: r for part in parts for n, r in part.items()}
    results = {n: results[n] for n in names}
    env = next((r["env"] for r in results.values() if r.get("env")), None)
    rec = {"benchmark": "apply_naive_gpu", "env": env, "gpus": n_gpu, "wall_s": round(time.monotonic() - t0, 1),
           "config": {"budget_steps": ns.budget_steps, "deadline_s": ns.deadline_s, "library": library_hash(),
                      "per_gpu": ns.per_gpu,
                      "gpu_lock": "runs sharing a GPU hold its lock (KLINEAGE_GPU_LOCK) over every evaluation",
                      "command": "klineage apply --workload apply_workloads/NAME --start apply_workloads/NAME/naive.cu "
                                 f"--db COPY_OF_skills_db/skills.duckdb --budget-steps {ns.budget_steps} --json"},
           "kernels": results, "summary": summary(results)}
    path = ns.out / named(RECORD, (env or {}).get("gpu") or gpu_name())
    path.write_text(json.dumps(rec, indent=1, default=str) + "\n")
    shutil.rmtree(ns.out / "db", ignore_errors=True)  # the library copies: the evaluations are exported
    pack_runs(ns.out)
    print(markdown(rec))
    print(json.dumps(rec["summary"], indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
