"""Compile verdicts for the hardware-scope analysis, computed ahead of a GPU run and shipped.

    python benchmarks/scope_checks.py [--config pipelines/mine.toml] [--only fmha,gdn] [--jobs N]

The analysis pass compiles both kernels of every accepted step for five architectures
(klineage/lineage/scope.py). Those are CPU builds, and the verdict depends only on the source, the arch
and the nvcc build, so they need not spend GPU-machine time: this script builds every kernel an
all-accepting walk of the configuration visits (benchmarks/mine_h200.walk_sources) for every arch, in
parallel, and merges the verdicts into skills_db/compile_checks.jsonl, which a run on any machine with
the same nvcc reads instead of building. A kernel the real walk visits that the all-accepting one does
not is still built on demand.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=ROOT / "pipelines" / "mine.toml")
    ap.add_argument("--only", default="", help="comma-separated workload names (default: every target)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ns = ap.parse_args()

    from mine_h200 import walk_sources

    from klineage.lineage.mine import load_config
    from klineage.lineage.scope import ARCHS, check_key, compile_check, export_checks, recorded_file

    run, _raw = load_config(ns.config)
    sources = list(walk_sources(run, {w for w in ns.only.split(",") if w} or None))
    tasks = [(s, a) for s in sources for a in ARCHS]
    t0 = time.perf_counter()
    done = [0]

    def one(t):
        r = compile_check(*t)
        done[0] += 1
        if done[0] % 25 == 0:
            print(f"{done[0]}/{len(tasks)} checks, {time.perf_counter() - t0:.0f} s", flush=True)
        return r

    with ThreadPoolExecutor(max_workers=ns.jobs) as pool:
        results = list(pool.map(one, tasks))
    n = export_checks(recorded_file(), {check_key(*t) for t in tasks})
    print(f"{len(sources)} kernels x {len(ARCHS)} archs: {sum(r['cached'] for r in results)} already known, "
          f"{sum(r['ok'] for r in results)} build; {n} verdicts in {recorded_file()} "
          f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
