"""Reach of the structural rewriters on the naive kernels of apply_workloads/: for each kernel, which
shape rewriters recognise it (and, for the others, the fact that blocked them), what each recognising
rewriter writes in one step from the naive kernel for every mechanism it knows (or its reason), the
ladder of states it walks (klineage.mechanisms.shapes.forward_states), and whether every candidate
written builds with nvcc. CPU only.

    python benchmarks/structural_reach.py [--out benchmarks/results/structural_reach.json] [--check]
                                          [--jobs N] [--no-build]

A kernel is reached when some rewriter writes at least one candidate from it and every candidate it
writes builds. The operator class of a kernel comes from its folder name (matmul_, bmm_, linear_:
matmul; sum_: reduction; softmax_, logsoftmax_, log_softmax: softmax; layernorm_, rmsnorm_: normalisation; the
rest: other, not counted). --check exits 1 unless each of the four classes is reached on at least
80% of its kernels and every candidate builds. --no-build records no builds (what the CPU test's
replay recomputes: the candidates, by content hash).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import platform
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

APPLY = ROOT / "apply_workloads"
RECORD = ROOT / "benchmarks" / "results" / "structural_reach.json"
CLASSES = {"matmul": ("matmul_", "bmm_", "linear_"), "reduction": ("sum_",),
           "softmax": ("softmax_", "logsoftmax_", "log_softmax"), "normalisation": ("layernorm_", "rmsnorm_")}
MIN_REACH = 0.8


def kernel_class(name: str) -> str:
    return next((c for c, prefixes in CLASSES.items() if name.startswith(prefixes)), "other")


def _hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def candidates(name: str) -> dict:
    """One kernel's entry without builds: per rewriter, recognised or its reason, the one-step rewrite
    of each mechanism it knows (hash or reason) and its ladder (mechanisms, hash); the sources by hash
    under "_sources" (not recorded)."""
    from klineage.mechanisms.base import Applied
    from klineage.mechanisms.shapes import Shape, forward_states, rewriters
    from klineage.workload import load_workload
    d = APPLY / name
    wl = load_workload(d)
    src = (d / "naive.cu").read_text()
    sources: dict[str, str] = {}
    rws = {}
    for rw in rewriters():
        shape = rw.recognise(src, wl)
        if not isinstance(shape, Shape):
            rws[rw.name] = {"recognised": False, "reason": shape.reason}
            continue
        steps = {}
        for mech in rw.mechanisms:
            res = rw.rewrite(src, shape, mech, {}, wl)
            if isinstance(res, Applied):
                sources[_hash(res.source)] = res.source
                steps[mech] = {"applied": True, "hash": _hash(res.source)}
            else:
                steps[mech] = {"applied": False, "reason": res.reason}
        ladder = []
        for s, mechs in forward_states(src, wl):
            sources[_hash(s)] = s
            ladder.append({"mechanisms": mechs, "hash": _hash(s)})
        rws[rw.name] = {"recognised": True, "operator": shape.facts.get("operator") or rw.name, "steps": steps,
                        "ladder": ladder}
    return {"class": kernel_class(name), "rewriters": rws, "_sources": sources}


def run(jobs: int = 2, build: bool = True, names: list[str] | None = None) -> dict:
    """The benchmark record (see the module docstring)."""
    from klineage.gate.compile import DEFAULT_ARCH, compile_kernel, nvcc_version
    names = names or sorted(p.parent.name for p in APPLY.glob("*/workload.py") if (p.parent / "naive.cu").is_file())
    kernels = {n: candidates(n) for n in names}
    sources = {h: s for k in kernels.values() for h, s in k.pop("_sources").items()}
    built: dict[str, dict] = {}
    if build:
        def one(h):
            res = compile_kernel(sources[h])
            return h, {"builds": res.ok, **({} if res.ok else {"log": res.log[-1500:]})}
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            built = dict(pool.map(one, sorted(sources)))
    for k in kernels.values():
        hashes = [st["hash"] for rw in k["rewriters"].values() if rw["recognised"]
                  for st in list(rw["steps"].values()) + rw["ladder"] if st.get("hash")]
        k["candidates"] = len(set(hashes))
        if build:
            k["failed_builds"] = sorted({h for h in hashes if not built[h]["builds"]})
            k["reached"] = bool(hashes) and not k["failed_builds"]
        else:
            k["reached"] = bool(hashes)
    classes = {}
    for c in CLASSES:
        members = [n for n, k in kernels.items() if k["class"] == c]
        reached = [n for n in members if kernels[n]["reached"]]
        classes[c] = {"kernels": len(members), "reached": len(reached),
                      "fraction": round(len(reached) / len(members), 4) if members else None,
                      "not_reached": sorted(set(members) - set(reached))}
    out = {"benchmark": "structural_reach", "kernels": kernels, "classes": classes,
           "candidates": len(sources)}
    if build:
        out["builds"] = sum(1 for b in built.values() if b["builds"])
        out["failed"] = {h: b["log"] for h, b in built.items() if not b["builds"]}
        out["environment"] = {"nvcc": nvcc_version(), "arch": DEFAULT_ARCH, "python": platform.python_version()}
    return out


def failures(rec: dict) -> list[str]:
    """What keeps the record from the targets: a class under MIN_REACH, a candidate that does not build."""
    out = [f"{c}: {v['reached']} of {v['kernels']} kernels reached (not {', '.join(v['not_reached'])})"
           for c, v in rec["classes"].items() if not v["kernels"] or v["fraction"] < MIN_REACH]
    if rec.get("builds") != rec["candidates"]:
        out.append(f"{rec['candidates'] - rec.get('builds', 0)} of {rec['candidates']} candidates do not build")
    return out


def table(rec: dict) -> str:
    lines = [f"{'kernel':28s} {'class':14s} {'recognised by':22s} {'one-step rewrites':52s} ladder  built"]
    for name, k in rec["kernels"].items():
        rws = [n for n, rw in k["rewriters"].items() if rw["recognised"]]
        steps = [m for rw in k["rewriters"].values() if rw["recognised"] for m, s in rw["steps"].items() if s["applied"]]
        ladder = sum(len(rw["ladder"]) for rw in k["rewriters"].values() if rw["recognised"])
        ok = ("-" if "failed_builds" not in k or not k["candidates"] else
              "all" if not k["failed_builds"] else f"{len(k['failed_builds'])} fail")
        lines.append(f"{name:28s} {k['class']:14s} {','.join(rws) or '-':22s} {','.join(steps) or '-':52s} "
                     f"{ladder:6d}  {ok}")
    lines.append("")
    for c, v in rec["classes"].items():
        lines.append(f"{c:14s} {v['reached']}/{v['kernels']} reached" + (f" ({v['fraction']:.0%})" if v["kernels"] else ""))
    if "builds" in rec:
        lines.append(f"candidates: {rec['candidates']}, built: {rec['builds']}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--no-build", action="store_true")
    ns = ap.parse_args()
    rec = run(jobs=ns.jobs, build=not ns.no_build)
    text = table(rec)
    print(text)
    if ns.out:
        ns.out.parent.mkdir(parents=True, exist_ok=True)
        ns.out.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
        ns.out.with_suffix(".txt").write_text(text + "\n")
    if ns.check:
        bad = failures(rec)
        for b in bad:
            print("FAIL:", b)
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
