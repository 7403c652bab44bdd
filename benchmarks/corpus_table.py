"""The expert corpus against its vendor references, from recorded gate evaluations (no GPU needed).

    python benchmarks/corpus_table.py [--config pipelines/mine.toml] [--db skills_db/skills.duckdb]
                                      [--json OUT.json] [--md OUT.md]

For every workload of the shipped corpus run (the targets of pipelines/mine.toml, the whole corpus):
the expert's PASSED evaluation (newest), per benchmark case: expert latency, vendor-reference latency
(timed in the same worker, alternating call by call), speedup, bytes moved (the workload's bytes_moved
formula), achieved bandwidth and its fraction of the measured device copy bandwidth, achieved TFLOP/s
and its fraction of the measured bf16 tensor-core peak (recorded by the worker for compute-bound cases
only), and whether every benchmark and probe shape passed.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def corpus_dirs(config: Path = ROOT / "pipelines" / "mine.toml") -> list[Path]:
    """The workload folders a mining configuration walks (each once, sorted)."""
    from klineage.lineage.mine import load_config
    run, _raw = load_config(config)
    return sorted({t.workload_dir for t in run.targets})


def table(store, dirs: list[Path] | None = None) -> list[dict]:
    from klineage.gate.gate import kernel_hash
    from klineage.workload import load_workload

    rows = []
    for d in (corpus_dirs() if dirs is None else dirs):
        wl = load_workload(d)
        recs = [r for r in store.find_evaluations(kernel_hash=kernel_hash((d / "expert.cu").read_text()),
                                                  workload_hash=wl.content_hash)
                if r["request"].get("timing") and "round" not in r["request"]]
        if not recs:
            rows.append({"workload": wl.name, "status": "NOT_MEASURED"})
            continue
        rec = recs[0]
        res = rec["result"]
        shapes = res.get("correctness", [])
        for t in res.get("timing", []):
            rows.append({
                "workload": wl.name, "status": rec["status"], "case": t["shape"],
                "expert_us": t["latency_us"], "vendor_us": t["vendor_latency_us"], "vendor": wl.vendor_name,
                "speedup_vs_vendor": t["speedup_vs_vendor"], "bytes_moved": t["bytes_moved"],
                "achieved_TBps": t["achieved_bytes_per_s"] / 1e12, "copy_TBps": t["copy_bandwidth_bytes_per_s"] / 1e12,
                "fraction_of_copy": t["bandwidth_fraction"], "spread": t["spread"],
                "achieved_TFLOPs": t["achieved_flops_per_s"] / 1e12,
                "peak_TFLOPs": t["peak_flops_per_s"] / 1e12 if t.get("peak_flops_per_s") else None,
                "fraction_of_peak": t.get("flops_fraction"),
                "shapes_checked": len(shapes), "shapes_passed": sum(1 for s in shapes if s["ok"]),
                "timing": {k: t[k] for k in ("warmup", "reps", "trials", "statistic")},
                "eval_key": rec["eval_key"], "gpu": rec["gpu"],
            })
        if rec["status"] != "PASSED":
            rows.append({"workload": wl.name, "status": rec["status"],
                         "error": (res.get("error_kind"), res.get("error_message"))})
    return rows


def markdown(rows: list[dict]) -> str:
    out = ["| workload | case | expert (us) | vendor (us) | vendor | speedup | TB/s | of copy BW | TFLOP/s "
           "| of bf16 peak | shapes passed |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "case" not in r:
            out.append(f"| {r['workload']} | - | {r['status']} | | | | | | | | |")
            continue
        case = ",".join(f"{k}={v}" for k, v in r["case"].items())
        out.append(f"| {r['workload']} | {case} | {r['expert_us']:.1f} | {r['vendor_us']:.1f} | {r['vendor']} | "
                   f"{r['speedup_vs_vendor']:.2f}x | {r['achieved_TBps']:.2f} | {100 * r['fraction_of_copy']:.0f}% | "
                   f"{r['achieved_TFLOPs']:.1f} | "
                   + (f"{100 * r['fraction_of_peak']:.0f}% of {r['peak_TFLOPs']:.0f}" if r.get("fraction_of_peak") else "-")
                   + f" | {r['shapes_passed']}/{r['shapes_checked']} |")
    return "\n".join(out) + "\n"


def main() -> int:
    from klineage.store import open_store
    from klineage.store.recorded import import_recorded

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path, default=None, help="a database with the evaluations (default: the "
                    "shipped records imported into a temporary database)")
    ap.add_argument("--config", type=Path, default=ROOT / "pipelines" / "mine.toml",
                    help="the mining configuration whose workloads are tabled")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path)
    ns = ap.parse_args()
    if ns.db is None:
        import tempfile
        store = open_store(Path(tempfile.mkdtemp()) / "t.duckdb")
        import_recorded(store)
    else:
        store = open_store(ns.db, read_only=True)  # e.g. the shipped library: only read
    rows = table(store, corpus_dirs(ns.config))
    store.close()
    md = markdown(rows)
    print(md)
    if ns.json:
        ns.json.write_text(json.dumps(rows, indent=1, default=str))
    if ns.md:
        ns.md.write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
