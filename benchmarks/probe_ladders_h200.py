"""Every rung of the named workloads' ladders (naive, versions/, expert) on the stress probes of
klineage.lineage.probe, on a GPU: which rung first fails which probe, with the gate's message.

    python benchmarks/probe_ladders_h200.py --out DIR cumsum cross_entropy cross_entropy_bf16 ...

A rung that fails a probe its predecessor passes is what the mining analysis turns into a
precondition and a risk; this script shows the whole table at once (the mining run records the same
evaluations per transition). Writes DIR/probe_ladders_h200.json.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def rungs(wl_dir: Path) -> list[Path]:
    return [wl_dir / "naive.cu", *sorted((wl_dir / "versions").glob("*.cu")), wl_dir / "expert.cu"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("workloads", nargs="+")
    args = ap.parse_args()
    from klineage.gate.gate import Gate
    from klineage.lineage.probe import Prober
    from klineage.store import open_store
    from klineage.workload import load_workload

    args.out.mkdir(parents=True, exist_ok=True)
    from klineage.gate.compile import compile_many
    t_build = time.perf_counter()
    compile_many([p.read_text() for n in args.workloads for p in rungs(ROOT / "expert_kernels" / n)])
    print(f"prebuild {time.perf_counter() - t_build:.1f} s", flush=True)
    store = open_store(args.out / "probe_ladders_h200.duckdb")
    gate = Gate(store=store)
    table = {}
    t0 = time.perf_counter()
    for name in args.workloads:
        wl_dir = ROOT / "expert_kernels" / name
        wl = load_workload(wl_dir)
        prober = Prober(gate, wl)
        rows, prev = [], None
        for path in rungs(wl_dir):
            res = prober.run(path.read_text())
            fails = {p["name"]: f"{p['status']}: {p['message']}" for p in res["probes"] if not p["ok"]}
            new = sorted(set(fails) - set(prev or {}))
            rows.append({"rung": str(path.relative_to(ROOT)), "failed": fails, "newly_failed": new})
            print(f"{name:20s} {path.name:28s} failed {len(fails):2d}/{len(res['probes'])}  new: "
                  + ("; ".join(f"{n} -> {fails[n][:160]}" for n in new) or "-"), flush=True)
            prev = fails
        table[name] = {"probes": [p.name for p in prober.probes], "rungs": rows}
    out = {"benchmark": "probe_ladders_h200",
           "wall_s": time.perf_counter() - t0, "workloads": table}
    (args.out / "probe_ladders_h200.json").write_text(json.dumps(out, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
