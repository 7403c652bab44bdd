"""Mining wall time on a GPU machine, split into compile / correctness / timing, and the compile-cache
hit rate of a second, identical run.

    python benchmarks/mine_h200.py --out DIR [--config pipelines/mine.toml] [--walk-only]
                                   [--seed-recorded] [--runs 2] [--prebuild [--prebuild-all]]

Run 1 mines the configuration into a fresh database with a fresh build cache; run 2 repeats the same
command on the same database and cache (every build should be a cache hit and every evaluation a
stored record). Options:

  --walk-only      walk and lift only (no analysis pass: no probes, repeat rounds or admission)
  --seed-recorded  import skills_db/evaluations/*.jsonl first, so a run continues from recorded
                   evaluations (used to split one corpus run over two device calls)
  --prebuild-only W1,W2  restrict --prebuild to those workloads
  --prebuild       before run 1, build in parallel (one nvcc per core) every kernel file of the corpus
                   and every kernel an all-accepting walk would visit; timed and reported apart
                   ("prebuild"), so run 1's compile figures are only the builds the walk still waited on

Writes DIR/mine_h200.json, the database DIR/mine_h200.duckdb, its evaluations DIR/mine_h200.jsonl
(what the shipped library is replayed from) and the canonical library dump DIR/mine_h200_dump.json.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


class _AllPass:
    """A stand-in gate for enumerating the kernels a walk would visit if every step were accepted."""

    def __init__(self):
        from klineage.gate.gate import GateConfig
        self.config, self.compile_log, self.store, self.seen = GateConfig(), [], None, {}

    def evaluate(self, source, workload, origin=None, replay=False):
        from klineage.gate.gate import GateResult, Status, kernel_hash
        self.seen[kernel_hash(source)] = source
        timing = [{"shape": s, "latency_us": 1.0, "trial_medians_us": [1.0, 1.0, 1.0]} for s in workload.benchmark_cases]
        return GateResult(Status.PASSED, kernel_hash(source), workload.name, "k", "scripted", {}, timing=timing,
                          env={"gpu": "none", "capability": "9.0"})


def walk_sources(run, only: set[str] | None = None) -> dict[str, None]:
    """Every corpus kernel file and every kernel an all-accepting walk of `run`'s targets visits (in
    the workloads `only`, when given), as an ordered set of sources."""
    from klineage.lineage.proposers import make_proposer
    from klineage.lineage.walk import Walker
    from klineage.workload import load_workload

    sources = {}
    for p in sorted((ROOT / "expert_kernels").rglob("*.cu")):
        if not only or p.relative_to(ROOT / "expert_kernels").parts[0] in only:
            sources[p.read_text()] = None
    for tgt in run.targets:
        if only and tgt.workload_dir.name not in only:
            continue
        g = _AllPass()
        wl = load_workload(tgt.workload_dir)
        prop = make_proposer(tgt.proposer, tgt.workload_dir)
        start = prop.top.source if tgt.proposer == "versions" else tgt.start.read_text()
        Walker(g, wl, [prop], run.limits).run(start, origin=str(tgt.start))
        for s in g.seen.values():
            sources[s] = None
    return sources


def prebuild(run, only: set[str] | None = None, store=None) -> dict:
    """Build in parallel what the run will build: walk_sources(), less the kernels the (seeded)
    `store` already has an evaluation of (all of them without a store: when new probes or rounds
    will run on kernels whose walk evaluations are recorded)."""
    from klineage.gate.compile import compile_many

    t0 = time.perf_counter()
    sources = walk_sources(run, only)
    if store is not None:
        from klineage.gate.gate import kernel_hash
        stored = store.evaluated_kernels()
        sources = {s: None for s in sources if kernel_hash(s) not in stored}
    results = compile_many(list(sources))
    return {"kernels": len(results), "ok": sum(r.ok for r in results), "cached": sum(r.cached for r in results),
            "wall_s": time.perf_counter() - t0, "jobs": os.cpu_count()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--config", type=Path, default=ROOT / "pipelines" / "mine.toml")
    ap.add_argument("--walk-only", action="store_true")
    ap.add_argument("--seed-recorded", action="store_true")
    ap.add_argument("--prebuild", action="store_true")
    ap.add_argument("--runs", type=int, default=2, choices=(1, 2))
    ap.add_argument("--prebuild-only", default="", help="comma-separated workload names: prebuild only their "
                    "kernels (those whose evaluations are not recorded yet); the rest build on demand")
    ap.add_argument("--prebuild-all", action="store_true", help="prebuild recorded kernels too (for an analysis "
                    "pass that evaluates them again, e.g. after a workload's probe set changed)")
    ns = ap.parse_args()
    ns.out.mkdir(parents=True, exist_ok=True)
    os.environ["KLINEAGE_HOME"] = tempfile.mkdtemp(prefix="klineage-mine-")  # fresh build cache

    from klineage.gate.gate import Gate
    from klineage.lineage.mine import load_config, run_mine
    from klineage.store import open_store
    from klineage.store.recorded import import_recorded

    def on_term(*_):  # `timeout` sends SIGTERM: stop the run and keep what was measured
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    db = ns.out / "mine_h200.duckdb"
    if db.exists():
        db.unlink()
    runs = []
    env = None
    seeded = None
    pre = None
    for i in range(1, ns.runs + 1):
        run, raw = load_config(ns.config)
        if ns.walk_only:
            run.analysis = None
        store = open_store(db)
        if i == 1 and ns.seed_recorded:
            seeded = import_recorded(store)
        if i == 1 and ns.prebuild:
            pre = prebuild(run, {w for w in ns.prebuild_only.split(",") if w} or None,
                           None if ns.prebuild_all else store)
            print(f"prebuild: {pre}", flush=True)
        gate = Gate(store, run.gate_config())
        t0 = time.perf_counter()
        try:
            summary = run_mine(run, store, gate, replay=False)
        except (KeyboardInterrupt, Exception) as exc:  # a time limit or a bug: keep what was measured
            n = store.export_evaluations(ns.out / "mine_h200.jsonl")
            why = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"failed ({type(exc).__name__}: {exc})"
            print(f"{why} in run {i}: {n} evaluations exported", flush=True)
            gate.close()
            store.close()
            if not isinstance(exc, KeyboardInterrupt):
                raise
            return 3
        summary["phases"]["command_wall_s"] = time.perf_counter() - t0
        if gate._worker is not None:
            env = gate._worker.env_info
        gate.close()
        if i == ns.runs:
            dump = store.canonical_dump()
            (ns.out / "mine_h200_dump.json").write_text(json.dumps(dump, indent=1, sort_keys=True, default=str))
            summary["exported_evaluations"] = store.export_evaluations(ns.out / "mine_h200.jsonl")
        store.close()
        runs.append({"run": i, **summary})
        print(f"run {i}: wall {summary['phases']['wall_s']:.1f} s, evaluations {summary['evaluations']}, "
              f"compile cache hit rate {summary['phases']['compile_cache_hit_rate']}, "
              f"admission {summary.get('admission')}", flush=True)
        for l in summary["lineages"]:
            print(f"  {l['workload']}/{l['proposer']}: {l['steps']} steps, {l['rejections']} rejections, "
                  f"{l['termination']} {l['remaining']}", flush=True)
        if summary["missing"]:
            print(f"  missing: {len(summary['missing'])}", flush=True)
    result = {"benchmark": "mine_h200", "config": str(ns.config.resolve().relative_to(ROOT)), "env": env, "runs": runs,
              "walk_only": ns.walk_only, "seeded_from_recorded": seeded, "prebuild": pre,
              "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (ns.out / "mine_h200.json").write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
