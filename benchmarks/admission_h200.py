"""The admission roundtrips the shipped library lacks records of, measured on a GPU in one call.

Admission (klineage.lineage.admit) gates, for each skill, a kernel of another workload and the same
kernel with the skill's mechanism added. Which kernels those are follows from the code alone (no
result decides which target is tried), so the evaluations a corpus run still needs can be listed on
a CPU machine and measured on the GPU without running the corpus again:

  python benchmarks/admission_h200.py --plan [--config pipelines/mine.toml] [--out PLAN]   (CPU, nvcc)
      replays `klineage mine --config ... --replay` from skills_db/evaluations/; every gate
      evaluation it finds no record of (after nvcc built the kernel: a kernel that does not build
      is a record already) is written to PLAN (default benchmarks/results/admission_h200/
      admission_h200_plan.json.gz) instead of failing: workload folder, kernel source, origin.
  python benchmarks/admission_h200.py --run PLAN --out DIR [--time-limit S]                   (GPU)
      builds every planned kernel in parallel (one nvcc per core), then evaluates each with the
      corpus run's gate settings ([gate] of the config) and writes DIR/admission_h200.jsonl.gz
      (the records, content-addressed like every other) and DIR/admission_h200.json (the call).
  the device call, carried with [".whlh", ".whlg"] (benchmarks/device_site.sh h g: flag-gems is the
  held-out targets' reference) and the plan (an untracked file travels with the working tree):
      bash benchmarks/device_batch.sh admission \
          'python3 benchmarks/admission_h200.py --run PLAN --out $W --time-limit 520'

The plan lists the trials of `admission_rewrites = "structural"` whatever the config says. Back on
the CPU machine: `tar -xzf batch.tar.gz`, copy work/admission/admission_h200.jsonl.gz into
skills_db/evaluations/, set `admission_rewrites = "structural"` in pipelines/mine.toml and rebuild
the shipped library from records: `klineage run pipelines/mine.toml --db skills_db/skills.duckdb
--replay` into a removed skills.duckdb (it must then report no missing evaluation). A plan made before other code changes that
alter the walks or the admission targets is stale: make it again with the code that will replay.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PLAN = ROOT / "benchmarks" / "results" / "admission_h200" / "admission_h200_plan.json.gz"


class _Planning:
    """A replaying gate that answers an evaluation with no record by noting it (and answering a
    placeholder PASSED, so the run goes on to every evaluation it would make); nothing it invents is
    stored."""

    def __init__(self, gate, sink: dict):
        self._gate, self._sink = gate, sink
        self.config, self.store, self.compile_log = gate.config, gate.store, gate.compile_log

    def with_config(self, config, share_worker: bool = True):
        return _Planning(self._gate.with_config(config, share_worker), self._sink)

    def repeat(self, round_):
        return _Planning(self._gate.repeat(round_), self._sink)

    def close(self) -> None:
        self._gate.close()

    def evaluate(self, source, workload, origin=None, replay=False, **kw):
        from klineage.errors import ReplayMissingError
        from klineage.gate.gate import GateResult, Status, kernel_hash
        try:
            return self._gate.evaluate(source, workload, origin=origin, replay=True)
        except ReplayMissingError:
            key = (kernel_hash(source), workload.content_hash, self.config.round)
            self._sink.setdefault(key, {"workload": _folder(workload), "workload_name": workload.name,
                                        "kernel_hash": key[0], "round": self.config.round, "origin": origin,
                                        "source": source})
            timing = [{"shape": s, "latency_us": 1.0, "trial_medians_us": [1.0, 1.0, 1.0]}
                      for s in workload.benchmark_cases]
            return GateResult(Status.PASSED, key[0], workload.name, "planned-" + key[0][:16], "planned", {},
                              timing=timing, env={"gpu": "planned"})


def _folder(workload) -> str:
    return str(Path(workload.path).resolve().parent.relative_to(ROOT))


def make_plan(config: Path, out: Path) -> int:
    from klineage.gate.gate import Gate
    from klineage.lineage.mine import load_config, run_mine
    from klineage.store import open_store
    from klineage.store.recorded import import_recorded

    t0 = time.perf_counter()
    run, _ = load_config(config)
    if run.analysis is not None:  # the trials to measure are the structural ones, whatever the config replays
        run.analysis.admission_rewrites = "structural"
    sink: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "plan.duckdb")
        import_recorded(store)
        gate = _Planning(Gate(store, run.gate_config()), sink)
        summary = run_mine(run, store, gate, replay=True)
        store.close()
    items = sorted(sink.values(), key=lambda it: (it["workload"], it["round"], it["kernel_hash"]))
    rounds = sorted({it["round"] for it in items})
    plan = {"config": str(config.resolve().relative_to(ROOT)), "gate": run.gate_config().timing,
            "evaluations": items, "admission": summary.get("admission"),
            "made_in_s": round(time.perf_counter() - t0, 1)}
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(out, "wt") as f:
        json.dump(plan, f, indent=1)
    print(f"{len(items)} evaluations without a record ({len(rounds)} timing round(s): {rounds}), "
          f"{len({it['kernel_hash'] for it in items})} kernels, "
          f"{len({it['workload'] for it in items})} workloads -> {out}", flush=True)
    for w in sorted({it["workload"] for it in items}):
        print(f"  {w}: {sum(it['workload'] == w for it in items)}", flush=True)
    return 0


class _TimeLimit(BaseException):
    pass


def run_plan(path: Path, out: Path, time_limit: float | None) -> int:
    from klineage.gate.compile import compile_kernel
    from klineage.gate.gate import Gate, GateConfig
    from klineage.lineage.mine import load_config
    from klineage.store import open_store
    from klineage.workload import load_workload

    t0 = time.perf_counter()
    plan = json.loads(gzip.open(path, "rt").read())
    run, _ = load_config(ROOT / plan["config"])
    base = run.gate_config()
    if base.timing != plan["gate"]:
        print(f"the plan was made with gate timing {plan['gate']}, the config now says {base.timing}: make the "
              "plan again", flush=True)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    items = plan["evaluations"]
    kernels = {it["kernel_hash"]: it["source"] for it in items}
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        built = list(pool.map(lambda s: compile_kernel(s, base.arch, base.extra_flags), kernels.values()))
    pre = {"kernels": len(built), "ok": sum(b.ok for b in built), "wall_s": round(time.perf_counter() - t0, 1),
           "jobs": os.cpu_count()}
    print("prebuild:", pre, flush=True)
    db = Path(tempfile.mkdtemp()) / "admission.duckdb"
    store = open_store(db)

    def stop(*_):
        raise _TimeLimit
    signal.signal(signal.SIGTERM, stop)
    if time_limit:
        signal.signal(signal.SIGALRM, stop)
        signal.setitimer(signal.ITIMER_REAL, max(1.0, time_limit - (time.perf_counter() - t0)))
    gates: dict[int, Gate] = {}
    done, statuses, cut, env = 0, {}, False, None
    workloads: dict[str, object] = {}
    try:
        for it in items:
            wl = workloads.get(it["workload"]) or workloads.setdefault(it["workload"], load_workload(ROOT / it["workload"]))
            rnd = it["round"]
            if rnd not in gates:
                cfg = base if rnd == 1 else GateConfig(arch=base.arch, extra_flags=base.extra_flags, seeds=base.seeds,
                                                       timing=base.timing, shapes=base.shapes, round=rnd)
                gates[rnd] = Gate(store, cfg)
            res = gates[rnd].evaluate(it["source"], wl, origin=it.get("origin"))
            done += 1
            statuses[res.status.value] = statuses.get(res.status.value, 0) + 1
            env = env or res.env
            print(f"{time.perf_counter() - t0:7.1f}s {done}/{len(items)} {it['workload_name']} "
                  f"{it['kernel_hash'][:12]} r{rnd}: {res.status.value} "
                  f"{[round(t['latency_us'], 1) for t in res.timing]} {(res.error_message or '')[:120]}", flush=True)
    except _TimeLimit:
        cut = True
        print("time limit: stopping and exporting what was measured", flush=True)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for g in gates.values():
            try:
                g.close()
            except Exception:  # noqa: BLE001 - closing a worker must not lose the export
                pass
        n = store.export_evaluations(out / "admission_h200.jsonl.gz")
        store.close()
    record = {"benchmark": "admission_h200", "plan": str(path), "planned": len(items), "evaluated": done,
              "statuses": statuses, "prebuild": pre, "exported_evaluations": n, "cut_by_time_limit": cut,
              "env": env, "wall_s": round(time.perf_counter() - t0, 1),
              "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (out / "admission_h200.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    print(json.dumps({k: v for k, v in record.items() if k != "env"}), flush=True)
    return 3 if cut else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", action="store_true", help="list the evaluations a replay lacks (CPU, nvcc)")
    ap.add_argument("--config", type=Path, default=ROOT / "pipelines" / "mine.toml")
    ap.add_argument("--run", type=Path, default=None, metavar="PLAN", help="measure a plan's evaluations (GPU)")
    ap.add_argument("--out", type=Path, default=None, help="the plan file (--plan) or the output folder (--run)")
    ap.add_argument("--time-limit", type=float, default=None, help="seconds; then export what was measured, exit 3")
    ns = ap.parse_args()
    if ns.plan == (ns.run is not None):
        ap.error("give --plan or --run PLAN")
    if ns.plan:
        return make_plan(ns.config, ns.out or PLAN)
    if ns.out is None:
        ap.error("--run needs --out DIR")
    os.environ.setdefault("KLINEAGE_HOME", tempfile.mkdtemp(prefix="klineage-admission-"))
    return run_plan(ns.run, ns.out, ns.time_limit)


if __name__ == "__main__":
    sys.exit(main())
