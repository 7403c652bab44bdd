"""The style gallery mined live on a GPU machine, recorded so any machine replays it.

    python benchmarks/mine_gallery_h200.py --out DIR [--config pipelines/mine_gallery.toml]
                                           [--time-limit S] [--check-kernels] [--dry-plan]

The live run (one device call, a few minutes on an H100 or H200): a fresh build cache, every kernel
the walks can visit built in parallel first (one nvcc per core), then `mine` over the configuration
(pipelines/mine_gallery.toml: every style-gallery ladder by the versions proposer, the
softmax_online expert by the rules, stress probes and static preconditions after the walks) into a
fresh database. It writes, CARD being the card it runs on (h100, h200: benchmarks/record_names.py),

    DIR/mine_gallery_CARD.json           summary: lineages, evaluations, phases, the GPU environment
    DIR/mine_gallery_CARD.jsonl.gz       every evaluation (what a replay reads)
    DIR/mine_gallery_CARD_dump.json.gz   the canonical dump of the library it stored
    DIR/mine_gallery.log                 (from the shell that runs it)

At `--time-limit` seconds (or on SIGTERM) it stops, exports what it measured and exits 3; a next
call with `--seed DIR_OF_THE_FIRST/mine_gallery_CARD.jsonl.gz` continues from those records (its
export holds them too). Back on this machine, commit DIR as benchmarks/results/mine_gallery_CARD/
(removing the record of another card it replaces): tests/test_mine_gallery_record.py then replays
the configuration from those records and compares lineages and skills with the dump, and
benchmarks/gallery_walk_labels.py scores the ladders' walks from them (its record,
benchmarks/results/gallery_walk_labels.json, is replayed by tests/test_gallery_walk_labels.py).

`--check-kernels` then runs every kernel file of the gallery's ladders (naive, versions, expert)
through a correctness-only gate on every benchmark and probe shape and writes
DIR/mine_gallery_CARD_check.json after each (a ladder walked by two proposers is checked once); a
time limit reached there keeps the mining record whole and marks the check as cut short.
`--dry-plan` (any machine, no GPU, no nvcc) prints what the live run will do: its targets, the steps
an all-accepting walk of each takes (the walk's proposals, audited, with the gate scripted to pass)
and the kernels the prebuild compiles; it writes DIR/mine_gallery_plan.json.

On the device, with .whlx carried (benchmarks/device_site.sh x):
    python3 -c "import tarfile; tarfile.open('.whlx/site.tar.xz').extractall('/tmp')"
    mkdir -p $OUT/g && PYTHONPATH=/tmp/site:$PWD python3 benchmarks/mine_gallery_h200.py --out $OUT/g \
        --check-kernels --time-limit 420 > $OUT/g/mine_gallery.log 2>&1
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
CONFIG = ROOT / "pipelines" / "mine_gallery.toml"
GALLERY = ROOT / "style_gallery" / "ladders"
STEM = "mine_gallery_{card}"  # the record's files, named by the card the run is on


def gallery_names(run) -> set[str]:
    return {t.workload_dir.name for t in run.targets}


def plan(config: Path) -> dict:
    """What the live run does, computed without a GPU or nvcc: per target, the lineage an
    all-accepting walk gives (the real proposers and audit, the gate scripted to pass), and the
    kernels the prebuild compiles."""
    from klineage.lineage.mine import load_config, proposal_log, rung_coverage
    from klineage.lineage.proposers import make_proposer
    from klineage.lineage.walk import Walker
    from klineage.workload import load_workload
    from mine_h200 import _AllPass, walk_sources

    run, _ = load_config(config)
    out = {"config": str(config.resolve().relative_to(ROOT)), "targets": [], "analysis": vars(run.analysis)
           if run.analysis else None, "gate": run.timing}
    for tgt in run.targets:
        wl = load_workload(tgt.workload_dir)
        prop = make_proposer(tgt.proposer, tgt.workload_dir)
        start = prop.top.source if tgt.proposer == "versions" else tgt.start.read_text()
        lin = Walker(_AllPass(), wl, [prop], run.limits).run(start, origin=str(tgt.start))
        entry = {"workload": wl.name, "proposer": tgt.proposer, "termination": lin["termination"],
                 "remaining": lin["remaining"], "mechanisms": [t["mechanism"] for t in lin["transitions"]],
                 "refused": [p for p in proposal_log(lin) if p["verdict"] != "accepted"],
                 "benchmark_cases": [dict(s) for s in wl.benchmark_cases],
                 "shapes_gated": len(wl.all_shapes())}
        if tgt.proposer == "versions":
            entry["rungs"] = rung_coverage(prop, lin)
        if wl.domain:
            entry["domain"] = wl.domain
        if wl.launch:
            entry["launch"] = wl.launch
        out["targets"].append(entry)
    out["kernels_to_build"] = len(walk_sources(run, gallery_names(run)))
    return out


def ladder_files(run) -> list[tuple[Path, Path]]:
    """(ladder folder, kernel file) for every kernel file of the configuration's ladders (naive,
    versions, expert), each ladder once."""
    return [(d, f) for d in dict.fromkeys(t.workload_dir for t in run.targets)
            for f in (d / "naive.cu", *sorted((d / "versions").glob("*.cu")), d / "expert.cu")]


def check_kernels(run, out: Path, stem: str) -> dict:
    """Every kernel file of the configuration's ladders through a correctness-only gate."""
    from klineage.gate.gate import Gate, GateConfig
    from klineage.workload import load_workload
    gate = Gate(None, GateConfig(timing={}))
    rows: list[dict] = []
    result: dict = {"kernels": rows, "passed": 0, "total": 0, "files": len(ladder_files(run))}
    try:
        for d, f in ladder_files(run):
            wl = load_workload(d)
            res = gate.evaluate(f.read_text(), wl, origin=str(f.relative_to(ROOT)))
            rows.append({"workload": wl.name, "kernel": f.name, "status": res.status.value,
                         "shapes": len(res.correctness), "error": res.error_message})
            print(f"check {wl.name}/{f.name}: {res.status.value} {res.error_message or ''}", flush=True)
            result = {"kernels": rows, "passed": sum(r["status"] == "PASSED" for r in rows), "total": len(rows),
                      "files": len(ladder_files(run))}
            (out / f"{stem}_check.json").write_text(json.dumps(result, indent=1))
    finally:
        gate.close()
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--config", type=Path, default=CONFIG)
    ap.add_argument("--time-limit", type=float, default=None, help="stop after this many seconds, exporting "
                    "what was measured (exit 3)")
    ap.add_argument("--check-kernels", action="store_true", help="first gate every gallery kernel file for "
                    "correctness")
    ap.add_argument("--dry-plan", action="store_true", help="print the plan (no GPU, no nvcc) and stop")
    ap.add_argument("--seed", type=Path, action="append", default=[], help="records of an earlier, interrupted "
                    "call (a .jsonl.gz or its folder) to continue from; repeatable")
    ns = ap.parse_args(argv)
    ns.out.mkdir(parents=True, exist_ok=True)
    if ns.dry_plan:
        p = plan(ns.config)
        (ns.out / "mine_gallery_plan.json").write_text(json.dumps(p, indent=1, default=str))
        print(json.dumps(p, indent=1, default=str))
        return 0

    from record_names import gpu_name, named
    gpu = gpu_name()
    if gpu is None:
        ap.error("no GPU (nvidia-smi shows none): the live run needs one; --dry-plan runs anywhere")
    stem = named(STEM, gpu)
    os.environ["KLINEAGE_HOME"] = tempfile.mkdtemp(prefix="klineage-gallery-")  # fresh build cache
    from klineage.gate.compile import compile_many
    from klineage.gate.gate import Gate
    from klineage.lineage.mine import load_config, run_mine
    from klineage.store import open_store
    from mine_h200 import walk_sources

    def on_term(*_):  # `timeout` or the time limit: stop, keep what was measured
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGALRM, on_term)
    if ns.time_limit:
        signal.setitimer(signal.ITIMER_REAL, ns.time_limit)
    run, _ = load_config(ns.config)
    result: dict = {"benchmark": stem, "config": str(ns.config.resolve().relative_to(ROOT)),
                    "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    db = ns.out / f"{stem}.duckdb"
    if db.exists():
        db.unlink()
    store = open_store(db)
    if ns.seed:
        from klineage.store.recorded import import_paths
        result["seeded"] = import_paths(store, ns.seed)
    gate = None
    rc = 0
    mined = False
    try:
        t0 = time.perf_counter()
        sources = walk_sources(run, gallery_names(run))
        if ns.check_kernels:
            sources.update(dict.fromkeys(f.read_text() for _, f in ladder_files(run)))
        built = compile_many(list(sources))
        result["prebuild"] = {"kernels": len(built), "ok": sum(r.ok for r in built),
                              "wall_s": time.perf_counter() - t0, "jobs": os.cpu_count()}
        print(f"prebuild: {result['prebuild']}", flush=True)
        gate = Gate(store, run.gate_config())
        summary = run_mine(run, store, gate, replay=False)
        live = [r for r in store.find_evaluations() if (r.get("env") or {}).get("gpu")]
        result["env"] = {k: live[0]["env"].get(k) for k in ("gpu", "driver", "nvcc", "torch", "capability",
                                                            "clock_sm_mhz", "worker_code")} if live else None
        result["summary"] = summary
        for l in summary["lineages"]:
            print(f"  {l['workload']}/{l['proposer']}: {l['steps']} steps, {l['rejections']} rejections, "
                  f"{l['termination']} {l['remaining']}: {' -> '.join(l['mechanisms'])}", flush=True)
        print(f"evaluations {summary['evaluations']}, skills {len(summary['skills'])}, "
              f"wall {summary['phases']['wall_s']:.1f} s", flush=True)
        with gzip.open(ns.out / f"{stem}_dump.json.gz", "wt", compresslevel=9) as fh:
            fh.write(json.dumps(store.canonical_dump(), indent=1, sort_keys=True, default=str))
        mined = True
        if ns.check_kernels:  # after the mining: a time limit reached here keeps the mining whole
            result["check"] = check_kernels(run, ns.out, stem)
    except KeyboardInterrupt:
        print("stopped at the time limit: exporting what was measured", flush=True)
        if mined:
            result["check_interrupted"] = True
        else:
            result["interrupted"] = True
            rc = 3
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        if gate is not None:
            gate.close()
        n = store.export_evaluations(ns.out / f"{stem}.jsonl.gz")
        store.close()
        db.unlink(missing_ok=True)
        result["exported_evaluations"] = n
        (ns.out / f"{stem}.json").write_text(json.dumps(result, indent=1, default=str))
        print(f"exported {n} evaluations to {ns.out}", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
