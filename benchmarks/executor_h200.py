"""Mining throughput of the local executor against the serial baseline on one GPU host.

    python benchmarks/executor_h200.py --out DIR [--workloads row_sum,swiglu] [--proposers rules,versions]
                                       [--modes serial,local] [--analysis] [--time-limit-s 540]
                                       [--replay] [--dry-run]

Each mode mines the same targets (walks only unless --analysis) into a fresh database with a fresh
build cache, live on the GPU, and reports:

  evaluations_per_min   gate evaluations (and live ones) per minute of wall time
  compile utilisation   nvcc busy seconds / (wall seconds x cores): serial runs one nvcc at a time,
                        local runs them on a pool sized to the cores, overlapped with the GPU
  gate busy fraction    seconds a gate worker was evaluating / wall seconds (per GPU for local)
  GPU utilisation       `nvidia-smi --query-gpu=utilization.gpu -lms 200` sampled in the background:
                        mean and the fraction of samples above 0, per GPU

and whether both modes walked the same lineages. Writes DIR/executor_h200.json (after every mode,
so a cut run keeps what it measured) with the environment (GPU, driver, nvcc, torch, cores, commit).

Limits: each mode gets --time-limit-s / (number of modes) seconds; a mode past it is stopped and
recorded with `interrupted: true` and its partial figures, and the next mode runs. SIGTERM (e.g.
from `timeout`) stops the run and writes what was measured. --replay mines from the recorded
evaluations (no GPU: a CPU check of the whole path; only the compile figures mean anything);
--dry-run only prints and writes the plan.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_WORKLOADS = "row_sum,swiglu"
MODES = ("serial", "local")


class ModeTimeout(BaseException):
    """A mode ran past its share of the time limit (SIGALRM)."""


class Terminated(BaseException):
    """SIGTERM: stop everything and write what was measured."""


def _run(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def environment() -> dict:
    from klineage.exec.base import cpu_count
    from klineage.gate.compile import nvcc_version
    gpus = [dict(zip(("name", "driver", "memory_mib"), (x.strip() for x in line.split(","))))
            for line in _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader,nounits"]).splitlines() if line.strip()]
    try:
        import torch
        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    return {"gpus": gpus, "gpu": gpus[0]["name"] if gpus else None, "driver": gpus[0]["driver"] if gpus else None,
            "nvcc": nvcc_version(), "torch": torch_version, "python": sys.version.split()[0], "cores": cpu_count(),
            "commit": _run(["git", "-C", str(ROOT), "rev-parse", "HEAD"]) or None,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


class GpuSampler:
    """nvidia-smi sampling utilization.gpu every 200 ms in the background (none without nvidia-smi)."""

    def __init__(self, path: Path):
        self.path, self.proc, self._f = path, None, None

    def start(self) -> "GpuSampler":
        try:
            self._f = open(self.path, "w")
            self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits",
                                          "-lms", "200"], stdout=self._f, stderr=subprocess.DEVNULL)
        except FileNotFoundError:
            self.proc = None
        return self

    def stop(self) -> dict | None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self._f is not None:
            self._f.close()
        if self.proc is None:
            return None
        per: dict[str, list[float]] = {}
        for line in self.path.read_text().splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 2 and parts[1].replace(".", "", 1).isdigit():
                per.setdefault(parts[0], []).append(float(parts[1]))
        return {g: {"samples": len(v), "mean_pct": sum(v) / len(v), "busy_fraction": sum(x > 0 for x in v) / len(v)}
                for g, v in sorted(per.items()) if v}


def select_run(config: Path, workloads: list[str], proposers: list[str], analysis: bool):
    from klineage.lineage.mine import load_config
    run, _ = load_config(config)
    run.targets = [t for t in run.targets if t.workload_dir.name in workloads and t.proposer in proposers]
    if not analysis:
        run.analysis = None
    return run


def run_mode(mode: str, run, out: Path, replay: bool, limit_s: float) -> dict:
    """Mine `run` once with `mode`; returns the figures (partial, `interrupted`, when cut off)."""
    from klineage.exec.base import cpu_count
    from klineage.exec.local import LocalExecutor
    from klineage.gate.gate import Gate
    from klineage.lineage.mine import run_mine
    from klineage.store import open_store
    from klineage.store.recorded import import_recorded

    os.environ["KLINEAGE_BUILD_CACHE"] = tempfile.mkdtemp(prefix=f"klineage-builds-{mode}-")  # fresh build cache
    db = out / f"executor_{mode}.duckdb"
    if db.exists():
        db.unlink()
    store = open_store(db)
    if replay:
        import_recorded(store)
    before = store.counts()["evaluations"]
    gate = Gate(store, run.gate_config())
    executor = LocalExecutor() if mode == "local" else None
    sampler = GpuSampler(out / f"executor_{mode}_gpu.csv").start()
    interrupted, summary, stop = None, None, None
    t0 = time.perf_counter()
    signal.alarm(max(1, int(limit_s)))
    try:
        summary = run_mine(run, store, gate, replay=replay, executor=executor)
    except ModeTimeout:
        interrupted = f"mode ran past its {limit_s:.0f} s share of the time limit"
    except Terminated as e:
        interrupted, stop = "SIGTERM", e
    finally:
        signal.alarm(0)
        wall = time.perf_counter() - t0
        gpu = sampler.stop()
        if executor is not None:
            if interrupted:
                executor.commit_pending()  # what units measured before the cut
            ex_stats = executor.stats()
            executor.close()
        else:
            ex_stats = None
        gate.close()
    comp = gate.compile_log
    cores = cpu_count()
    recorded = store.counts()["evaluations"] - before
    store.close()
    if summary is not None:
        ev, ph = summary["evaluations"], summary["phases"]
        total, live = ev["total"], ph["live_evaluations"]
        gate_busy = ex_stats["gate_busy_s"] if ex_stats else ph["gate_wall_s"]
    else:  # cut off: every evaluation past the guard compiled first; new records are the live ones
        total, live = len(comp), (0 if replay else recorded)
        gate_busy = ex_stats["gate_busy_s"] if ex_stats else None
    compile_busy = ex_stats["compile_busy_s"] if ex_stats else sum(c["seconds"] for c in comp if not c["cached"])
    compile_slots = ex_stats["compile_jobs"] if ex_stats else 1
    res = {
        "mode": mode, "interrupted": interrupted, "wall_s": wall,
        "evaluations": total, "live_evaluations": live, "recorded_evaluations": recorded,
        "evaluations_per_min": total / wall * 60 if wall else None,
        "live_evaluations_per_min": live / wall * 60 if wall else None,
        "compile": {"requests": len(comp), "builds": sum(not c["cached"] for c in comp), "busy_s": compile_busy,
                    "cores": cores, "slots": compile_slots,
                    "utilisation_of_cores": compile_busy / (wall * cores) if wall else None,
                    "utilisation_of_slots": compile_busy / (wall * compile_slots) if wall else None},
        "gate": {"busy_s": gate_busy, "busy_fraction": gate_busy / wall if gate_busy is not None and wall else None,
                 "per_gpu_busy_s": ex_stats.get("gpu_busy_s") if ex_stats else None},
        "gpu_utilisation": gpu, "executor": ex_stats,
        "lineages": [{k: l[k] for k in ("workload", "proposer", "steps", "rejections", "termination", "mechanisms")}
                     for l in summary["lineages"]] if summary else None,
        "phases": summary["phases"] if summary else None, "missing": len(summary["missing"]) if summary else None,
    }
    if stop is not None:
        res["_terminated"] = True
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--config", type=Path, default=ROOT / "pipelines" / "mine.toml")
    ap.add_argument("--workloads", default=DEFAULT_WORKLOADS, help="comma-separated workload folder names")
    ap.add_argument("--proposers", default="rules,versions")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--analysis", action="store_true", help="also run the analysis pass (default: walks only)")
    ap.add_argument("--time-limit-s", type=float, default=540.0)
    ap.add_argument("--replay", action="store_true", help="from recorded evaluations (no GPU; a CPU check)")
    ap.add_argument("--dry-run", action="store_true", help="print and write the plan; mine nothing")
    ns = ap.parse_args(argv)
    modes = [m for m in ns.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        ap.error(f"--modes: {bad or 'none'}: choose from {', '.join(MODES)}")
    if ns.time_limit_s <= 0:
        ap.error("--time-limit-s must be positive")
    workloads = [w for w in ns.workloads.split(",") if w]
    run = select_run(ns.config, workloads, [p for p in ns.proposers.split(",") if p], ns.analysis)
    if not run.targets:
        ap.error(f"no target of {ns.config} matches --workloads {ns.workloads} and --proposers {ns.proposers}")
    ns.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("KLINEAGE_HOME", tempfile.mkdtemp(prefix="klineage-exec-bench-"))  # probes, checks
    result = {"benchmark": "executor_h200", "config": str(ns.config), "workloads": workloads,
              "targets": [f"{t.workload_dir.name}/{t.proposer}" for t in run.targets], "modes": modes,
              "analysis": ns.analysis, "replay": ns.replay, "time_limit_s": ns.time_limit_s,
              "env": environment(), "runs": [], "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    path = ns.out / "executor_h200.json"
    if ns.dry_run:
        result["dry_run"] = True
        path.write_text(json.dumps(result, indent=1, default=str))
        print(json.dumps({k: result[k] for k in ("targets", "modes", "analysis", "replay", "time_limit_s", "env")},
                         indent=1, default=str))
        return 0
    if threading.current_thread() is not threading.main_thread():
        raise SystemExit("run executor_h200.py as a program (it uses signals for its time limits)")

    def on_alarm(*_):
        raise ModeTimeout()

    def on_term(*_):
        raise Terminated()
    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_term)
    share = ns.time_limit_s / len(modes)
    code = 0
    for mode in modes:
        print(f"{mode}: mining {', '.join(result['targets'])} (limit {share:.0f} s)", flush=True)
        try:
            res = run_mode(mode, run, ns.out, ns.replay, share)
        except Terminated:
            result["runs"].append({"mode": mode, "interrupted": "SIGTERM before any figure"})
            res = {"_terminated": True}
        terminated = res.pop("_terminated", False)
        if "wall_s" in res:
            result["runs"].append(res)
            print(f"{mode}: {res['wall_s']:.1f} s, {res['evaluations']} evaluations "
                  f"({res['evaluations_per_min']:.1f}/min, live {res['live_evaluations']}), compile busy "
                  f"{res['compile']['busy_s']:.1f} s = {res['compile']['utilisation_of_cores']:.0%} of "
                  f"{res['compile']['cores']} cores, gate busy {res['gate']['busy_fraction'] or 0:.0%}, "
                  f"GPU {res['gpu_utilisation']}{'  INTERRUPTED: ' + res['interrupted'] if res['interrupted'] else ''}",
                  flush=True)
        done = [r for r in result["runs"] if r.get("wall_s") and not r.get("interrupted")]
        if {r["mode"] for r in done} >= {"serial", "local"}:
            s = next(r for r in done if r["mode"] == "serial")
            l = next(r for r in done if r["mode"] == "local")
            result["comparison"] = {
                "wall_speedup": s["wall_s"] / l["wall_s"],
                "evaluations_per_min_ratio": l["evaluations_per_min"] / s["evaluations_per_min"],
                "same_lineages": s["lineages"] == l["lineages"]}
        path.write_text(json.dumps(result, indent=1, default=str))
        if terminated:
            code = 3
            break
    print(json.dumps(result.get("comparison"), default=str), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
