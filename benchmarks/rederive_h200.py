"""The forward re-derivation check, measured on re-derivations that are other machine code.

A backward step is accepted only if re-deriving the richer kernel from the simpler one reaches at
least `min_rederive_ratio` (0.99) of the richer kernel's speed in every trial. Here the llm proposer
walks three version ladders against the scripted model server (tests/support/scripted_server.py):
each backward step is the next rung down, as mined, and each forward answer is the mechanism written
back into the simpler kernel by another route than the rung: the family's own reoptimize, in another
configuration than the rung's where the family takes one (`OTHER`: a padding of another stride that
is also conflict-free, launch bounds that also ask for a number of resident blocks), at every place
the rung has the mechanism, so the re-derived kernel has exactly the rung's features. A route is used
only when its cubin's machine code differs from the rung's (nvcc -cubin, the .text sections compared,
`cubin_code`); where no route gives other code (for most of these families the rung's code is what
any route writes), the answer is the rung itself and the walk reuses the richer kernel's measurement
(`identity`: no ratio is reported for it). A fourth walk (`worse`)
re-derives one mechanism in a configuration that keeps what it removes (`WORSE`: the transpose tile
padded by a whole row of banks, so every column read conflicts again): a genuinely slower kernel the
threshold must reject. Every other step of that walk is the rung itself, so no step above it (the
launch bounds, whose other route the transpose walk may reject) stops the walk before it.

    python3 benchmarks/rederive_h200.py --out $OUT                       # on the GPU machine, live
    python3 benchmarks/rederive_h200.py --out DIR --replay --import benchmarks/results/rederive_h100.jsonl.gz
    python3 benchmarks/rederive_h200.py --out DIR --routes               # the routes only (nvcc, no GPU)

One device call of about 3 minutes on an H100 or H200, from the repository root, carrying .whlx
(benchmarks/device_site.sh x: DuckDB, tree-sitter, libclang):

    python3 -c "import tarfile; tarfile.open('.whlx/site.tar.xz').extractall('/tmp')" && \\
      PYTHONPATH=/tmp/site:$PWD python3 benchmarks/rederive_h200.py --out $OUT

It writes, CARD being the card it ran on (h100, h200: benchmarks/record_names.py), DIR/rederive_CARD.json
(per walk: every accepted step with its route, the cubin and machine-code hashes of the richer and the
re-derived kernel, the per-trial speed ratios; every rejection, the rederive_slow ones with the ratios
that failed; over all: the ratios of the re-derivations measured, which are all other machine code),
DIR/rederive_CARD.log and the evaluations DIR/rederive_CARD.jsonl.gz. Copy the three into
benchmarks/results/ (removing the record of another card they replace; never into
skills_db/evaluations: the corpus replay imports those). tests/test_rederive_record.py replays the
record: the ratios are recomputed from the recorded evaluations, the cubins are built again here and
must differ, and with nvcc the walks are run again from the evaluations to the same decisions.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import struct
import sys
import tempfile
import time
import traceback
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

WORKLOADS = ("swiglu", "transpose", "row_sum")
# (name in the record, workload, the configurations the routes take)
WALKS = (("swiglu", "swiglu", "other"), ("transpose", "transpose", "other"), ("row_sum", "row_sum", "other"),
         ("transpose_worse", "transpose", "worse"))
GATE = {"warmup": 5, "reps": 25, "trials": 3}  # the corpus run's timing (pipelines/mine.toml)
LIMITS = {"max_steps": 16, "max_rejections": 8, "min_rederive_ratio": 0.99}
BUDGET_USD = 2.0
# The family's reoptimize in another configuration than the rung's: other machine code, the same
# features. Each family's configurations are tried in order; the first whose code differs is the route.
OTHER = {"smem_padding": [{"pad": " + 33"}],  # row stride 65 words: conflict-free, like the rung's 33
         # the block the family reads from the launch, and a number of resident blocks per SM (a
         # register cap): "MIN_BLOCKS" is replaced by the family's own launch-bounds text
         "launch_bounds": [{"min_blocks": n} for n in (2, 4, 8)]}
# ... and one that keeps what the mechanism removes: a 32x32 tile padded to 64 words a row puts every
# element of a column in the same bank again, as unpadded.
WORSE = {"smem_padding": [{"pad": " + 32"}]}
RECORD = "rederive_{card}.json"
CUBIN_FLAGS = ("-cubin", "-O3")  # the gate's optimisation, without line info (line numbers are not code)


# ---------------------------------------------------------------- cubins

@lru_cache(maxsize=None)
def cubin(source: str) -> bytes:
    """`source` built to a cubin for the gate's target (sm_90a) with nvcc under the gate's limits.
    RuntimeError when it does not build."""
    from klineage.gate.compile import DEFAULT_ARCH, arch_flags, run_nvcc
    with tempfile.TemporaryDirectory(prefix="klineage-cubin-") as tmp:
        d = Path(tmp)
        (d / "kernel.cu").write_text(source)
        code, log = run_nvcc([*CUBIN_FLAGS, *arch_flags(DEFAULT_ARCH), "-o", "kernel.cubin", "kernel.cu"], d)
        if code != 0:
            raise RuntimeError(f"nvcc -cubin failed ({code}): {log[-400:]}")
        return (d / "kernel.cubin").read_bytes()


def cubin_code(data: bytes) -> str:
    """sha256 over the machine code of a cubin: its .text.* sections (one per function), by name.
    Two cubins that differ only in metadata (a launch bound's occupancy hint, a symbol's order) have
    the same code."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not a 64-bit ELF cubin")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = heads[shstrndx]
    names = data[strtab[4]:strtab[4] + strtab[5]]

    def name(off: int) -> str:
        return names[off:names.index(b"\0", off)].decode()
    h = hashlib.sha256()
    for sec_name, off, size in sorted((name(n), off, size) for n, _, _, _, off, size in heads):
        if sec_name.startswith(".text."):
            h.update(sec_name.encode() + b"\0" + struct.pack("<Q", size) + data[off:off + size])
    return h.hexdigest()


def built(source: str) -> dict:
    """{"cubin": sha256 of the cubin, "code": cubin_code}."""
    data = cubin(source)
    return {"cubin": hashlib.sha256(data).hexdigest(), "code": cubin_code(data)}


# ---------------------------------------------------------------- routes

def restore(mechanism: str, richer: str, simpler: str, config: dict) -> str | None:
    """The family's reoptimize (with `config`) applied to `simpler` once per place `richer` has
    `mechanism`, or None when that does not give exactly `richer`'s features (by both kinds of
    evidence: klineage's own re-derivation audit)."""
    from klineage.mechanisms.audit import audit_rederived
    from klineage.mechanisms import Applied, Kernel, detect_all, registry
    fam = registry().get(mechanism)
    if fam is None or fam.STRUCTURAL:
        return None
    want = {f.key for f in detect_all(richer) if f.mechanism == mechanism}
    src = simpler
    for _ in range(len(want)):
        cfg = config
        if "min_blocks" in config:  # the family's own launch bounds for this kernel, and a block count
            natural = fam.reoptimize(Kernel(src), None, None)
            if not isinstance(natural, Applied):
                return None
            cfg = {"text": natural.config["text"].rstrip(")") + f", {config['min_blocks']})"}
        res = fam.reoptimize(Kernel(src), None, cfg)
        if not isinstance(res, Applied):
            return None
        src = res.source
    return src if audit_rederived(detect_all(richer), detect_all(src))["ok"] else None


def route(mechanism: str, richer: str, simpler: str, kind: str) -> dict:
    """How the forward step is written back: {"route": "other" | "worse" | "identity", "source",
    "config"}: the first configuration of the family (WORSE's where `kind` is "worse", OTHER's else)
    that restores the rung's features in other machine code; else the rung. The worse walk changes
    only the step WORSE names: each of its other steps is the rung."""
    worse = kind == "worse"
    for cfg in (WORSE if worse else OTHER).get(mechanism, []):
        src = restore(mechanism, richer, simpler, cfg)
        if src is not None and built(src)["code"] != built(richer)["code"]:
            return {"route": "worse" if worse else "other", "source": src, "config": cfg}
    return {"route": "identity", "source": richer, "config": None}


def routes(workload: str, kind: str) -> list[dict]:
    """Per ladder step, top down: the mechanism, the rungs, the route and the builds of both kernels."""
    from klineage.gate.gate import kernel_hash
    from klineage.lineage.proposers import ladder_from_folder
    ladder = ladder_from_folder(ROOT / "expert_kernels" / workload)
    out = []
    for i in range(len(ladder) - 1, 0, -1):
        rich, simple = ladder[i], ladder[i - 1]
        r = route(rich.mechanism, rich.source, simple.source, kind)
        out.append({"mechanism": rich.mechanism, "richer": rich.label, "simpler": simple.label,
                    "richer_hash": kernel_hash(rich.source), "rederived_hash": kernel_hash(r["source"]),
                    "route": r["route"], "config": r["config"], "source": r["source"],
                    "richer_build": built(rich.source), "rederived_build": built(r["source"])})
    return out


def script_for(workload: str, kind: str) -> tuple[dict, list[dict]]:
    """The scripted server's answers for a walk and the routes its forward answers take."""
    from tests.support.scripted_server import mine_script
    rs = routes(workload, kind)
    by_rung = {r["richer"]: r["source"] for r in rs}
    return mine_script(ROOT / "expert_kernels" / workload, rederived=lambda rich, simple: by_rung[rich.label]), rs


# ---------------------------------------------------------------- the walks

def _log(fh, msg: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)
    fh.write(line + "\n")
    fh.flush()


def step_record(t: dict, by_hash: dict) -> dict:
    trials = t.get("rederive_trials") or []
    ratios = [r for tr in trials for r in tr["speed_ratios"]]
    r = by_hash[t["rederived_hash"]]
    return {"mechanism": t["mechanism"], "richer_hash": t["richer_hash"], "simpler_hash": t["simpler_hash"],
            "rederived_hash": t["rederived_hash"], "rederived_identical": t["rederived_identical"],
            "route": r["route"], "config": r["config"],
            "richer_cubin": r["richer_build"]["cubin"], "rederived_cubin": r["rederived_build"]["cubin"],
            "richer_code": r["richer_build"]["code"], "rederived_code": r["rederived_build"]["code"],
            "eval_richer": t["eval_richer"], "eval_simpler": t["eval_simpler"], "eval_rederived": t["eval_rederived"],
            "trials": trials, "min_ratio": min(ratios) if ratios and not t["rederived_identical"] else None}


def rejection_record(r: dict, by_hash: dict, states: list[dict]) -> dict:
    out = {"step": r["step"], "kind": r["kind"], "mechanism": r["mechanism"], "status": r.get("status"),
           "kernel_hash": r.get("kernel_hash"), "eval_key": r.get("eval_key"), "message": (r.get("message") or "")[:300]}
    if r.get("trials"):  # a rederive_slow rejection: the ratios that failed the check, and what was built
        red = by_hash[r["kernel_hash"]]
        out.update(trials=r["trials"], route=red["route"], config=red["config"], richer_hash=red["richer_hash"],
                   eval_richer=next(st["eval_key"] for st in states if st["kernel_hash"] == red["richer_hash"]),
                   richer_cubin=red["richer_build"]["cubin"],
                   rederived_cubin=red["rederived_build"]["cubin"], richer_code=red["richer_build"]["code"],
                   rederived_code=red["rederived_build"]["code"])
    return out


def walk_one(name: str, workload: str, kind: str, gate, replay: bool, log) -> dict:
    from klineage.apply.llm import LLMMaterializer
    from klineage.lineage.proposers import make_proposer
    from klineage.lineage.walk import Limits, Walker
    from klineage.llm import DEFAULT_MODEL, OpenAICompatBackend
    from klineage.workload import load_workload
    from tests.support.scripted_server import ScriptedServer

    wl_dir = ROOT / "expert_kernels" / workload
    wl = load_workload(wl_dir)
    script, rs = script_for(workload, kind)
    by_hash = {r["rederived_hash"]: r for r in rs}
    t0 = time.perf_counter()
    with ScriptedServer(script["replies"], script["default"]) as server:
        llm = LLMMaterializer(OpenAICompatBackend(server.url + "/v1", DEFAULT_MODEL, env={}), budget_usd=BUDGET_USD)
        walker = Walker(gate, wl, [make_proposer("llm", wl_dir, llm=llm)], Limits(**LIMITS), replay=replay)
        lin = walker.run((wl_dir / "expert.cu").read_text(), origin=f"expert_kernels/{workload}/expert.cu")
    steps = [step_record(t, by_hash) for t in lin["transitions"]]
    out = {"workload": workload, "routes": kind, "workload_hash": wl.content_hash, "lineage_id": lin["lineage_id"],
           "termination": lin["termination"], "expected_mechanisms": script["expect"]["mechanisms"], "steps": steps,
           "rejections": [rejection_record(r, by_hash, lin["states"]) for r in lin["rejections"]],
           "missing": len(walker.missing), "wall_s": round(time.perf_counter() - t0, 2),
           "sources": sorted({r.source for r in walker.evaluations})}
    log(f"{name}: {lin['termination']}, {len(steps)} steps, routes {[s['route'] for s in steps]}, rejections "
        f"{[r['kind'] for r in lin['rejections']]}, min ratio of the measured steps "
        f"{[round(s['min_ratio'], 4) for s in steps if s['min_ratio'] is not None]}, {out['wall_s']} s")
    return out


def summarize(walks: dict) -> dict:
    """Over every walk: the steps, those re-derived by another route and measured (each pair of
    kernels once: a pair two walks share is counted once), their
    ratios and those of the rederive_slow rejections (each the ratio of two kernels of different
    machine code)."""
    steps = [s for w in walks.values() for s in w["steps"]]
    pairs = {}
    for s in steps:
        if not s["rederived_identical"]:
            pairs.setdefault((s["richer_hash"], s["rederived_hash"]), s)
    measured = list(pairs.values())
    ratios = [r for s in measured for t in s["trials"] for r in t["speed_ratios"]]
    slow = [r for w in walks.values() for r in w["rejections"] if r["kind"] == "rederive_slow"]
    slow_ratios = [x for r in slow for t in r["trials"] for x in t["speed_ratios"]]
    every = ratios + slow_ratios
    return {"steps": len(steps), "identity": sum(s["rederived_identical"] for s in steps), "measured": len(measured),
            "measured_other_code": sum(s["richer_code"] != s["rederived_code"] for s in measured),
            "rederive_slow_rejections": len(slow),
            "rejected_other_code": sum(r["richer_code"] != r["rederived_code"] for r in slow),
            "trial_ratios": len(every), "ratio_min": min(every) if every else None,
            "ratio_max": max(every) if every else None, "ratio_median": statistics.median(every) if every else None,
            "below_threshold": sum(x < LIMITS["min_rederive_ratio"] for x in every)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--replay", action="store_true", help="recorded evaluations instead of a GPU")
    ap.add_argument("--import", dest="imports", type=Path, action="append", default=[],
                    help="evaluations (JSON Lines) to import first, e.g. benchmarks/results/rederive_h100.jsonl.gz")
    ap.add_argument("--routes", action="store_true", help="only the routes of every walk and their cubins "
                    "(nvcc, no GPU): DIR/rederive_routes.json")
    ap.add_argument("--no-prebuild", action="store_true", help="skip the parallel nvcc pass over the scripted kernels")
    ns = ap.parse_args(argv)
    ns.out.mkdir(parents=True, exist_ok=True)
    if ns.routes:
        got = {name: [{k: v for k, v in r.items() if k != "source"} for r in routes(wl, kind)]
               for name, wl, kind in WALKS}
        (ns.out / "rederive_routes.json").write_text(json.dumps(got, indent=1))
        for name, rs in got.items():
            print(f"{name}: " + ", ".join(f"{r['mechanism']} {r['route']}" for r in rs))
        return 0
    from record_names import gpu_name, named
    if ns.replay:
        stem = "rederive_replay"
    else:
        gpu = gpu_name()
        if gpu is None:
            ap.error("no GPU (nvidia-smi shows none): run it on the GPU machine, or pass --replay")
        stem = named(RECORD, gpu).removesuffix(".json")
    from klineage.gate import worker_code_hash
    from klineage.gate.compile import compile_many
    from klineage.gate.gate import DEFAULT_TIMING, Gate, GateConfig
    from klineage.lineage.llm_proposer import parse_proposal
    from klineage.llm import parse_kernel
    from klineage.store import open_store

    fh = (ns.out / f"{stem}.log").open("w")
    log = lambda msg: _log(fh, msg)  # noqa: E731
    result: dict = {"benchmark": "rederive", "mode": "replay" if ns.replay else "live",
                    "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "command": " ".join(["python3", "benchmarks/rederive_h200.py", *(argv or sys.argv[1:])]),
                    "config": {"gate": GATE, "limits": LIMITS, "walks": [list(w) for w in WALKS],
                               "other": OTHER, "worse": WORSE, "cubin_flags": list(CUBIN_FLAGS)},
                    "worker_code_hash": worker_code_hash(), "walks": {}}
    work = Path(tempfile.mkdtemp(prefix="klineage-rederive-"))
    store = open_store(work / "rederive.duckdb")
    try:
        for f in ns.imports:
            log(f"import {f}: {store.import_evaluations(f)}")
        if not ns.no_prebuild and not ns.replay:  # every scripted kernel built at once, one job per core
            srcs = []
            for _, wl, kind in WALKS:
                for r in script_for(wl, kind)[0]["replies"]:
                    for parse in (lambda t: parse_proposal(t)["kernel"], parse_kernel):
                        try:
                            srcs.append(parse(r["text"]))
                            break
                        except Exception:  # not this kind of answer (a malformed one is scripted too)
                            continue
            t0 = time.perf_counter()
            done = compile_many(list(dict.fromkeys(srcs)))
            result["prebuild"] = {"kernels": len(done), "ok": sum(b.ok for b in done),
                                  "wall_s": round(time.perf_counter() - t0, 2)}
            log(f"prebuild: {result['prebuild']}")
        gate = Gate(store, GateConfig(timing={**DEFAULT_TIMING, **GATE}))  # as `klineage mine --config` builds it
        try:
            for name, wl, kind in WALKS:
                try:
                    result["walks"][name] = walk_one(name, wl, kind, gate, ns.replay, log)
                except Exception as exc:  # a harness bug: recorded, the other walks still run
                    result["walks"][name] = {"error": f"{type(exc).__name__}: {exc}",
                                             "traceback": traceback.format_exc()[-2000:]}
                    log(f"{name}: {result['walks'][name]['error']}")
        finally:
            gate.close()
        live = [r for r in store.find_evaluations() if (r.get("env") or {}).get("gpu")]
        result["env"] = {k: live[0]["env"].get(k) for k in ("gpu", "driver", "nvcc", "torch", "capability",
                                                            "clock_sm_mhz", "worker_code")} if live else None
        wl_hashes = sorted({w["workload_hash"] for w in result["walks"].values() if "workload_hash" in w})
        result["exported_evaluations"] = store.export_evaluations(ns.out / f"{stem}.jsonl.gz",
                                                                  workload_hashes=wl_hashes)
    finally:
        store.close()
    result["summary"] = summarize({n: w for n, w in result["walks"].items() if "steps" in w})
    log(f"summary: {result['summary']}")
    (ns.out / f"{stem}.json").write_text(json.dumps(result, indent=1, default=str))
    fh.close()
    return 0 if all("steps" in w for w in result["walks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
