"""Mining wall time on a GPU machine, split into compile / correctness / timing, and the compile-cache
hit rate of a second, identical run.

    python benchmarks/mine_h200.py --out DIR

Run 1 mines pipelines/mine.toml into a fresh database with a fresh build cache (every kernel is
compiled and evaluated live); run 2 repeats the same command on the same database and cache (every
build should be a cache hit and every evaluation a stored record). Writes DIR/mine_h200.json, the
database DIR/mine_h200.duckdb and its evaluations as DIR/mine_h200.jsonl (the records the shipped
library is replayed from), and the canonical library dump DIR/mine_h200_dump.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--config", type=Path, default=ROOT / "pipelines" / "mine.toml")
    ns = ap.parse_args()
    ns.out.mkdir(parents=True, exist_ok=True)
    os.environ["KLINEAGE_HOME"] = tempfile.mkdtemp(prefix="klineage-mine-")  # fresh build cache

    from klineage.gate.gate import Gate
    from klineage.lineage.mine import load_config, run_mine
    from klineage.store import open_store

    db = ns.out / "mine_h200.duckdb"
    if db.exists():
        db.unlink()
    runs = []
    env = None
    for i in (1, 2):
        run, raw = load_config(ns.config)
        store = open_store(db)
        gate = Gate(store)
        t0 = time.perf_counter()
        summary = run_mine(run, store, gate, replay=False)
        summary["phases"]["command_wall_s"] = time.perf_counter() - t0
        if gate._worker is not None:
            env = gate._worker.env_info
        gate.close()
        if i == 2:
            dump = store.canonical_dump()
            (ns.out / "mine_h200_dump.json").write_text(json.dumps(dump, indent=1, sort_keys=True))
            n = store.export_evaluations(ns.out / "mine_h200.jsonl")
            summary["exported_evaluations"] = n
        store.close()
        runs.append({"run": i, **summary})
        print(f"run {i}: wall {summary['phases']['wall_s']:.1f} s, evaluations {summary['evaluations']}, "
              f"compile cache hit rate {summary['phases']['compile_cache_hit_rate']}", flush=True)
        for l in summary["lineages"]:
            print(f"  {l['workload']}/{l['proposer']}: {l['steps']} steps, {l['rejections']} rejections, "
                  f"{l['termination']} {l['remaining']}", flush=True)
    result = {"benchmark": "mine_h200", "config": str(ns.config.relative_to(ROOT)), "env": env, "runs": runs,
              "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (ns.out / "mine_h200.json").write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
