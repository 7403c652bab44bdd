"""The apply stage on a GPU machine: three workloads no lineage was mined from (apply_workloads/),
each from its naive kernel, with the shipped library and the rules + sweep materializers.

    python benchmarks/apply_h200.py --out DIR [--admission on|off] [--budget-steps N] [NAME ...]

For each workload: a copy of skills_db/skills.duckdb, `klineage.apply.loop.apply`, then the final
kernel gated again on every benchmark and probe shape (the gate's default: all shapes) in a fresh
worker. Writes DIR/apply_h200.json (per workload: stop reason, skills kept, speedups over the start,
the final kernel's status on all shapes, the environment) and DIR/<name>_best.cu, and exports the
evaluations to DIR/apply_h200_<name>.jsonl (what a CPU replay of these runs reads).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
WORKLOADS = ("axpby", "gelu", "rope")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--admission", choices=("on", "off"), default="on")
    ap.add_argument("--budget-steps", type=int, default=12)
    ap.add_argument("names", nargs="*", default=list(WORKLOADS))
    ns = ap.parse_args()
    from klineage.apply.loop import ApplyConfig, apply
    from klineage.gate.gate import Gate, GateConfig
    from klineage.store import open_store
    from klineage.workload import load_workload

    ns.out.mkdir(parents=True, exist_ok=True)
    db = ns.out / "apply_h200.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
    store = open_store(db)
    gate = Gate(store)
    cfg = ApplyConfig(materializers=("rules", "sweep"), budget_steps=ns.budget_steps, admission=ns.admission == "on")
    results = {}
    try:
        for name in ns.names:
            wl_dir = ROOT / "apply_workloads" / name
            wl = load_workload(wl_dir)
            t0 = time.perf_counter()
            run = apply(store, gate, wl, (wl_dir / "naive.cu").read_text(), str(wl_dir / "naive.cu"), cfg)
            final = None
            if run["best_source"]:
                (ns.out / f"{name}_best.cu").write_text(run["best_source"])
                fresh = gate.with_config(GateConfig(round=3), share_worker=False)
                res = fresh.evaluate(run["best_source"], wl, origin=f"apply {name} final")
                final = {"status": res.status.value, "eval_key": res.eval_key,
                         "shapes_checked": len(res.correctness), "shapes_passed": sum(1 for c in res.correctness if c["ok"])}
                fresh.close()
            results[name] = {"run_id": run["run_id"], "stop_reason": run["stop_reason"],
                             "kept": run["summary"]["kept"], "speedup_vs_start": run["summary"].get("speedup_vs_start"),
                             "steps": [{k: s.get(k) for k in ("seq", "backend", "skill", "flags", "status", "accepted", "note")}
                                       for s in run["steps"]],
                             "excluded": run["summary"].get("excluded"), "final_gate": final,
                             "wall_s": time.perf_counter() - t0}
            print(name, run["stop_reason"], run["summary"]["kept"], run["summary"].get("speedup_vs_start"), final,
                  flush=True)
        env = gate._worker.env_info if gate._worker is not None else None
    finally:
        gate.close()
        n = 0
        for name in ns.names:  # only this run's workloads (the library copy holds the corpus records too)
            n += store.export_evaluations(ns.out / f"apply_h200_{name}.jsonl",
                                          workload_hash=load_workload(ROOT / "apply_workloads" / name).content_hash)
        store.close()
    (ns.out / "apply_h200.json").write_text(json.dumps({"benchmark": "apply_h200", "env": env, "exported": n,
                                                        "config": cfg.to_dict(), "workloads": results},
                                                       indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
