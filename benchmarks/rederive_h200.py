"""The forward re-derivation check, measured: walks whose re-derived kernels are not byte-identical.

A backward step is accepted only if re-deriving the richer kernel from the simpler one reaches at
least `min_rederive_ratio` (0.99) of the richer kernel's speed in every trial. The rules and versions
proposers re-derive byte for byte (reoptimize restores the text a deoptimize recorded; a ladder's
rung is the rung), so for them the walk compares the richer kernel's record with itself and the
ratio is 1 by identity. Here the llm proposer walks ladders against the scripted model server
(tests/support/scripted_server.py), whose forward answers are the rung re-typed the way a model
returns code (re-indented, a comment of its own): the same kernel, other bytes, so the gate measures
the re-derived kernel in an evaluation of its own and the walk's check compares two measurements.

    python3 benchmarks/rederive_h200.py --out $OUT                       # on the GPU machine, live
    python3 benchmarks/rederive_h200.py --out DIR --replay --import benchmarks/results/rederive_h200.jsonl.gz

One device call of about 4 minutes on the H200, from the repository root, carrying .whlx
(benchmarks/device_site.sh x: DuckDB, tree-sitter, libclang):

    python3 -c "import tarfile; tarfile.open('.whlx/site.tar.xz').extractall('/tmp')" && \
      PYTHONPATH=/tmp/site:$PWD python3 benchmarks/rederive_h200.py --out $OUT

then copy $OUT/rederive_h200.{json,log,jsonl.gz} into benchmarks/results/ (never into
skills_db/evaluations: the corpus replay imports those). tests/test_rederive_h200.py replays the
record: the ratios are recomputed from the recorded evaluations, and with nvcc the walks are run
again from them and must reach the same decisions.

Writes DIR/rederive_h200.json (per workload: every accepted step with its re-derived kernel's hash
and per-trial speed ratios, every rejection, wall time; over all: how many re-derivations were not
identical and the ratios' range), DIR/rederive_h200.log and the evaluations DIR/rederive_h200.jsonl.gz.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORKLOADS = ("swiglu", "transpose", "row_sum")
GATE = {"warmup": 5, "reps": 25, "trials": 3}  # the corpus run's timing (pipelines/mine.toml)
LIMITS = {"max_steps": 16, "max_rejections": 8, "min_rederive_ratio": 0.99}
BUDGET_USD = 2.0
NOTE = "// Re-derived: the optimization restored on the simpler kernel."


def retyped(source: str) -> str:
    """`source` as a model re-types it: a comment of its own on top, code indented by 2 spaces per
    level instead of 4 (preprocessor lines and continuation alignment kept), no trailing blanks. The
    same program: detectors and nvcc see the same kernel, the gate a new one."""
    out = [NOTE]
    for line in source.splitlines():
        m = re.match(r"^( {4,})(\S.*)$", line)
        if m and not m.group(2).startswith("#"):
            lead = len(m.group(1))
            line = " " * (lead // 4 * 2 + lead % 4) + m.group(2)
        out.append(line.rstrip())
    return "\n".join(out) + "\n"


def _log(fh, msg: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)
    fh.write(line + "\n")
    fh.flush()


def step_record(t: dict) -> dict:
    trials = t.get("rederive_trials") or []
    ratios = [r for tr in trials for r in tr["speed_ratios"]]
    return {"mechanism": t["mechanism"], "richer_hash": t["richer_hash"], "simpler_hash": t["simpler_hash"],
            "rederived_hash": t["rederived_hash"], "rederived_identical": t["rederived_identical"],
            "eval_richer": t["eval_richer"], "eval_simpler": t["eval_simpler"], "eval_rederived": t["eval_rederived"],
            "trials": trials, "min_ratio": min(ratios) if ratios else None}


def rejection_record(r: dict) -> dict:
    out = {"step": r["step"], "kind": r["kind"], "mechanism": r["mechanism"], "status": r.get("status"),
           "kernel_hash": r.get("kernel_hash"), "eval_key": r.get("eval_key"), "message": (r.get("message") or "")[:300]}
    if r.get("trials"):
        out["trials"] = r["trials"]  # a rederive_slow rejection: the ratios that failed the check
    return out


def walk_one(name: str, gate, replay: bool, log) -> dict:
    from klineage.apply.llm import LLMMaterializer
    from klineage.llm import DEFAULT_MODEL, OpenAICompatBackend
    from tests.support.scripted_server import ScriptedServer, mine_script
    from klineage.lineage.proposers import make_proposer
    from klineage.lineage.walk import Limits, Walker
    from klineage.workload import load_workload

    wl_dir = ROOT / "expert_kernels" / name
    wl = load_workload(wl_dir)
    script = mine_script(wl_dir, rederived=retyped)
    t0 = time.perf_counter()
    with ScriptedServer(script["replies"], script["default"]) as server:
        llm = LLMMaterializer(OpenAICompatBackend(server.url + "/v1", DEFAULT_MODEL, env={}), budget_usd=BUDGET_USD)
        walker = Walker(gate, wl, [make_proposer("llm", wl_dir, llm=llm)], Limits(**LIMITS), replay=replay)
        lin = walker.run((wl_dir / "expert.cu").read_text(), origin=f"expert_kernels/{name}/expert.cu")
    steps = [step_record(t) for t in lin["transitions"]]
    out = {"workload_hash": wl.content_hash, "lineage_id": lin["lineage_id"], "termination": lin["termination"],
           "expected_mechanisms": script["expect"]["mechanisms"], "steps": steps,
           "rejections": [rejection_record(r) for r in lin["rejections"]],
           "missing": len(walker.missing), "wall_s": round(time.perf_counter() - t0, 2),
           "sources": sorted({r.source for r in walker.evaluations})}
    mins = [s["min_ratio"] for s in steps if s["min_ratio"] is not None]
    log(f"{name}: {lin['termination']}, {len(steps)} steps ({sum(not s['rederived_identical'] for s in steps)} "
        f"re-derived non-identically), rejections {[r['kind'] for r in lin['rejections']]}, "
        f"min ratio per step {[round(m, 4) for m in mins]}, {out['wall_s']} s")
    return out


def summarize(walks: dict) -> dict:
    steps = [s for w in walks.values() for s in w["steps"]]
    ratios = [r for s in steps for t in s["trials"] for r in t["speed_ratios"]]
    slow = [r for w in walks.values() for r in w["rejections"] if r["kind"] == "rederive_slow"]
    slow_ratios = [x for r in slow for t in r.get("trials", []) for x in t["speed_ratios"]]
    every = ratios + slow_ratios
    return {"steps": len(steps), "non_identical": sum(not s["rederived_identical"] for s in steps),
            "rederive_slow_rejections": len(slow), "trial_ratios": len(every),
            "ratio_min": min(every) if every else None, "ratio_max": max(every) if every else None,
            "ratio_median": statistics.median(every) if every else None,
            "below_threshold": sum(x < LIMITS["min_rederive_ratio"] for x in every)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="expert_kernels/ folders with a versions/ ladder")
    ap.add_argument("--replay", action="store_true", help="recorded evaluations instead of a GPU")
    ap.add_argument("--import", dest="imports", type=Path, action="append", default=[],
                    help="evaluations (JSON Lines) to import first, e.g. benchmarks/results/rederive_h200.jsonl.gz")
    ap.add_argument("--no-prebuild", action="store_true", help="skip the parallel nvcc pass over the scripted kernels")
    ns = ap.parse_args(argv)
    ns.out.mkdir(parents=True, exist_ok=True)
    from klineage.gate import worker_code_hash
    from klineage.gate.compile import compile_many
    from klineage.gate.gate import DEFAULT_TIMING, Gate, GateConfig
    from klineage.lineage.llm_proposer import parse_proposal
    from klineage.llm import parse_kernel
    from tests.support.scripted_server import mine_script
    from klineage.store import open_store

    names = [n for n in ns.workloads.split(",") if n]
    fh = (ns.out / "rederive_h200.log").open("w")
    log = lambda msg: _log(fh, msg)
    mode = "replay" if ns.replay else "live"
    result: dict = {"benchmark": "rederive_h200", "mode": mode,
                    "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "command": " ".join(["python3", "benchmarks/rederive_h200.py", *(argv or sys.argv[1:])]),
                    "config": {"gate": GATE, "limits": LIMITS, "workloads": names, "rederived": retyped.__doc__.split(":")[0]},
                    "worker_code_hash": worker_code_hash(), "walks": {}}
    work = Path(tempfile.mkdtemp(prefix="klineage-rederive-"))
    store = open_store(work / "rederive.duckdb")
    try:
        for f in ns.imports:
            log(f"import {f}: {store.import_evaluations(f)}")
        if not ns.no_prebuild and not ns.replay:  # every scripted kernel built at once, one job per core
            srcs = []
            for n in names:
                for r in mine_script(ROOT / "expert_kernels" / n, rederived=retyped)["replies"]:
                    for parse in (lambda t: parse_proposal(t)["kernel"], parse_kernel):
                        try:
                            srcs.append(parse(r["text"]))
                            break
                        except Exception:  # not this kind of answer (a malformed one is scripted too)
                            continue
            t0 = time.perf_counter()
            built = compile_many(list(dict.fromkeys(srcs)))
            result["prebuild"] = {"kernels": len(built), "ok": sum(b.ok for b in built),
                                  "wall_s": round(time.perf_counter() - t0, 2)}
            log(f"prebuild: {result['prebuild']}")
        gate = Gate(store, GateConfig(timing={**DEFAULT_TIMING, **GATE}))  # as `klineage mine --config` builds it
        try:
            for n in names:
                try:
                    result["walks"][n] = walk_one(n, gate, ns.replay, log)
                except Exception as exc:  # a harness bug: recorded, the other walks still run
                    result["walks"][n] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]}
                    log(f"{n}: {result['walks'][n]['error']}")
        finally:
            gate.close()
        live = [r for r in store.find_evaluations() if (r.get("env") or {}).get("gpu")]
        result["env"] = {k: live[0]["env"].get(k) for k in ("gpu", "driver", "nvcc", "torch", "capability",
                                                            "clock_sm_mhz", "worker_code")} if live else None
        wl_hashes = [w["workload_hash"] for w in result["walks"].values() if "workload_hash" in w]
        result["exported_evaluations"] = store.export_evaluations(ns.out / "rederive_h200.jsonl.gz",
                                                                  workload_hashes=wl_hashes)
    finally:
        store.close()
    result["summary"] = summarize({n: w for n, w in result["walks"].items() if "steps" in w})
    log(f"summary: {result['summary']}")
    (ns.out / "rederive_h200.json").write_text(json.dumps(result, indent=1, default=str))
    fh.close()
    return 0 if all("steps" in w for w in result["walks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
