"""`mine`: walk every expert kernel of a corpus, store the lineages, lift and store the skills.

Inputs are workload folders (holding workload.py and expert.cu), folders of such folders (the
corpus, e.g. expert_kernels/), or expert .cu files. A run configuration (pipelines/mine.toml) names
the paths, the proposers per path and the limits; it is validated strictly.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from klineage.errors import KLineageError, read_source, read_toml
from klineage.exec.serial import SerialExecutor
from klineage.settings import display_path
from klineage.lineage.analyze import AnalysisConfig, analyze_transitions, run_admission, workload_dirs
from klineage.lineage.lift import lift
from klineage.lineage.proposers import PROPOSERS, make_proposer
from klineage.lineage.walk import Limits, Walker
from klineage.workload import load_workload


class MineConfigError(KLineageError):
    """A bad mining configuration or path; the message names the fix."""
    exit_code = 2


@dataclass
class Target:
    workload_dir: Path
    start: Path
    proposer: str


@dataclass
class MineRun:
    targets: list[Target]
    limits: Limits = field(default_factory=Limits)
    analysis: AnalysisConfig | None = None  # None: lineages and skills only, no probes/rounds/admission
    timing: dict = field(default_factory=dict)  # overrides of the gate's timing settings ([gate] table)
    arch: str | None = None  # the build target ([gate] arch, --arch); None: the gate's default
    rules_loci: str = "identity"  # [walk] rules_loci: how the rules audit matches identical loci

    def gate_config(self):
        from klineage.gate.gate import gate_config_for
        return gate_config_for({**self.timing, **({"arch": self.arch} if self.arch else {})})


def _workload_dirs(path: Path) -> list[Path]:
    if path.is_file():
        if path.suffix != ".cu":
            raise MineConfigError(f"{path} is not a .cu kernel or a workload folder: pass expert_kernels/ "
                                  "or a folder holding workload.py and expert.cu")
        return [path.parent]
    if not path.is_dir():
        raise MineConfigError(f"{path} does not exist: pass expert_kernels/ or a workload folder")
    if (path / "workload.py").is_file():
        return [path]
    found = sorted(p for p in path.iterdir() if (p / "workload.py").is_file() and (p / "expert.cu").is_file())
    if not found:
        raise MineConfigError(f"{path} holds no workload folder (workload.py + expert.cu): check the path")
    return found


def targets_for(paths: list[Path], proposer: str) -> list[Target]:
    if proposer not in PROPOSERS:
        raise MineConfigError(f"unknown proposer {proposer!r}: choose rules or versions")
    out = []
    for p in paths:
        for d in _workload_dirs(Path(p)):
            start = Path(p) if Path(p).is_file() else d / "expert.cu"
            if not start.is_file():
                raise MineConfigError(f"{d} has no expert.cu to start from: add it or pass the kernel file")
            if proposer == "versions" and not (d / "versions").is_dir():
                if Path(p) == d or Path(p).is_file():
                    raise MineConfigError(f"{d} has no versions/ ladder for the versions proposer: add one or "
                                          "use --proposer rules")
                continue  # a corpus folder: only the workloads with a ladder
            out.append(Target(d, start, proposer))
    return out


def load_config(path: Path) -> tuple[MineRun, dict]:
    """(run, raw configuration) from a TOML file; MineConfigError naming any unknown key or bad value
    (klineage.config.MineFile)."""
    from klineage.config import MineFile, validate
    _, raw = read_toml(path, MineConfigError, "a mining configuration such as pipelines/mine.toml")
    if raw.get("kind", "mine") != "mine":
        raise MineConfigError(f"{path}: kind = {raw['kind']!r}: a mining configuration has kind = \"mine\"")
    cfg = validate(MineFile, raw, path, MineConfigError)
    # the values as the file wrote them, in its order (validated: the same values, strictly typed)
    lim, gate_tab = raw.get("limits", {}), raw.get("gate", {})
    analysis = AnalysisConfig(**raw["analysis"]) if "analysis" in raw else None
    targets = []
    base = Path(path).resolve().parent.parent  # pipelines/ sits at the repository root
    for t in cfg.target:
        paths = [p if Path(p).is_absolute() else base / p for p in t.paths]
        targets += targets_for([Path(p) for p in paths], t.proposer)
    if not targets:
        raise MineConfigError(f"{path}: no [[target]] entries: add at least one with paths and proposer")
    timing = {k: v for k, v in gate_tab.items() if k != "arch"}
    return MineRun(targets, Limits(**lim), analysis, timing, gate_tab.get("arch"),
                   raw.get("walk", {}).get("rules_loci", "identity")), raw


def run_mine(run: MineRun, store, gate, replay: bool = False,
             progress: Callable[..., None] | None = None, llm=None, executor=None) -> dict:
    """Walk every target, store each lineage, re-lift the whole library; returns a summary.

    `executor` (klineage.exec; None: serial, in this process) runs the walks, and the analysis
    pass's independent steps, as concurrent units whose database writes are committed in target
    order: the library is the serial run's. With an llm proposer the walks run one at a time (the
    model budget is spent in target order)."""
    from klineage.gate.compile import calls_since, nvcc_calls
    t0, nvcc0 = time.perf_counter(), nvcc_calls()
    check_ladders(run)
    summary = {"lineages": [], "missing": [], "evaluations": {}, "phases": {}, "warnings": []}
    evals = []
    known: dict = {}  # workload name -> folder, for the analysis pass
    executor = executor or SerialExecutor()
    gate = executor.bind(gate)

    def walk(tgt: Target):
        wl = load_workload(tgt.workload_dir)
        proposer = make_proposer(tgt.proposer, tgt.workload_dir, llm=llm, arch=gate.config.arch)
        label = f"{wl.name}/{tgt.proposer}"
        walker = Walker(gate, wl, [proposer], run.limits, replay=replay, rules_loci=run.rules_loci,
                        progress=(lambda ev, _l=label, **kw: progress(_l, ev, **kw)) if progress else None)
        start = proposer.top.source if tgt.proposer == "versions" else read_source(tgt.start)
        return tgt, wl, walker, walker.run(start, origin=display_path(tgt.start))

    walks = executor.map(walk, run.targets, sequential=any(t.proposer == "llm" for t in run.targets))
    for tgt, wl, walker, lin in walks:
        known[wl.name] = tgt.workload_dir
        # a replay without the start kernel's record walked nothing: no lineage to store (a later run
        # with the record walks it), and the missing record is listed
        stored = not (lin["termination"] == "start_failed" and lin.get("start_status") == "NOT_REPLAYED")
        if stored:
            store.put_lineage(lin)
        evals += walker.evaluations
        summary["missing"] += walker.missing
        summary["warnings"] += step_warnings(lin, f"{wl.name}/{tgt.proposer}")
        summary["lineages"].append({"lineage_id": lin["lineage_id"], "workload": wl.name, "proposer": tgt.proposer,
                                    "steps": len(lin["transitions"]), "rejections": len(lin["rejections"]),
                                    "termination": lin["termination"] if stored else "not_replayed",
                                    "remaining": lin["remaining"], "stored": stored,
                                    "mechanisms": [t["mechanism"] for t in lin["transitions"]]})
    source_of = lambda h: (store.get_kernel(h) or {}).get("source")
    transitions, rejections = store.transitions(), store.rejections()
    t_walk = time.perf_counter()
    analysis = None
    if run.analysis is not None:
        workloads = workload_dirs(transitions, known)
        prog = (lambda ev, **kw: progress("analysis", ev, **kw)) if progress else None
        analysis = analyze_transitions(transitions, source_of, gate, workloads, run.analysis, replay, prog,
                                       executor=executor)
        if run.analysis.admission:
            draft = lift(transitions, rejections, source_of, analysis)
            run_admission(draft, transitions, source_of, gate, workloads, analysis, replay, executor=executor,
                          rewrites=run.analysis.admission_rewrites)
        evals += analysis.evaluations
        summary["missing"] += analysis.missing
    skills = lift(transitions, rejections, source_of, analysis)
    store.put_skills(skills)
    by_source: dict[str, int] = {}
    for r in evals:
        by_source[r.source] = by_source.get(r.source, 0) + 1
    comp = gate.compile_log
    live = [r for r in evals if r.source == "live"]
    summary["evaluations"] = {"total": len(evals), "by_source": by_source,
                              "by_status": _count(r.status.value for r in evals)}
    summary["phases"] = {
        "wall_s": time.perf_counter() - t0,
        "compile_s": sum(c["seconds"] for c in comp if not c["cached"]),
        "compile_requests": len(comp), "compile_cache_hits": sum(c["cached"] for c in comp),
        "compile_cache_hit_rate": (sum(c["cached"] for c in comp) / len(comp)) if comp else None,
        "correctness_s": sum((r.phases or {}).get("correctness_s", 0.0) for r in live),
        "timing_s": sum((r.phases or {}).get("timing_s", 0.0) for r in live),
        "gate_wall_s": sum(r.wall_s or 0.0 for r in live),
        "live_evaluations": len(live),
        "walk_s": t_walk - t0,
        "analysis_s": time.perf_counter() - t_walk,
        "analysis_evaluations": len(analysis.evaluations) if analysis else 0,
    }
    summary["nvcc"] = calls_since(nvcc0)  # every nvcc and ptxas run of the run, by purpose, and what needed none
    if analysis is not None:
        summary["admission"] = _count(v["status"] for v in analysis.admission.values())
    summary["skills"] = [{"skill_id": s["skill_id"], "name": s["name"]} for s in skills]
    return summary


def step_warnings(lin: dict, label: str) -> list[str]:
    """The warnings the audits of a walked lineage's steps carry (a ladder step that reshapes its launch
    and declares nothing), each naming the lineage and step."""
    out = [f"{label} step {t['step'] + 1}: {w}" for t in lin["transitions"] for w in (t.get("audit") or {}).get("warnings", [])]
    out += [f"{label} step {r['step'] + 1} (refused): {w}" for r in lin["rejections"]
            for w in (r.get("audit") or {}).get("warnings", [])]
    return out


def _count(items) -> dict:
    out: dict[str, int] = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out


# ---------------------------------------------------------------------------- dry run (no GPU)
ASSUMED = "assumed passed"


class CompileOnlyGate:
    """The gate of a dry run: guard and nvcc only. A kernel that builds is marked PASSED with source
    "assumed" (nothing ran: no correctness, no timing); a guard or build failure is its real status.
    Never starts a gate worker, so it never touches a GPU."""

    def __init__(self, config=None):
        from klineage.gate.gate import GateConfig
        self.config = config or GateConfig()
        self.compile_log: list[dict] = []

    def evaluate(self, source: str, workload, origin: str | None = None, replay: bool = False):
        from klineage.gate.compile import compile_kernel
        from klineage.gate.gate import GateResult, Status, kernel_hash
        from klineage.gate.guard import check_source
        khash = kernel_hash(source)
        guard = check_source(source, workload)
        if self.config.guard and not guard.ok:
            return GateResult(Status.GUARD_REJECTED, khash, workload.name, f"dry-{khash[:16]}", "static",
                              guard.to_dict(), error_kind="static_guard", error_message=guard.summary)
        built = compile_kernel(source, self.config.arch, tuple(self.config.extra_flags))
        self.compile_log.append({"kernel_hash": khash, "cached": built.cached, "seconds": built.seconds, "ok": built.ok})
        if not built.ok:
            return GateResult(Status.COMPILE_ERROR, khash, workload.name, f"dry-{khash[:16]}", "static",
                              guard.to_dict(), compile=built.to_dict(), error_kind=built.error_kind,
                              error_message=built.error_message)
        return GateResult(Status.PASSED, khash, workload.name, f"dry-{khash[:16]}", "assumed", guard.to_dict(),
                          compile=built.to_dict(), error_message=f"{ASSUMED}: built with nvcc, not run")

    def close(self):
        pass


def check_ladders(run: MineRun) -> None:
    """Read every versions target's ladder, so a bad declaration is an error before anything is built."""
    for tgt in run.targets:
        if tgt.proposer == "versions":
            make_proposer("versions", tgt.workload_dir)


def dry_run(run: MineRun, progress: Callable[..., None] | None = None, llm=None) -> dict:
    """Walk every target with compile-only gating (CompileOnlyGate) and store nothing; returns, per
    lineage, every proposal in the order it was made with the audit's verdict and reason, where the
    walk ended, and for a ladder the rungs it stood on."""
    check_ladders(run)
    gate = CompileOnlyGate(run.gate_config())
    out = {"dry_run": True, "gate": f"compile-only: guard and nvcc; a kernel that builds is {ASSUMED} (nothing runs)",
           "lineages": []}
    for tgt in run.targets:
        wl = load_workload(tgt.workload_dir)
        proposer = make_proposer(tgt.proposer, tgt.workload_dir, llm=llm, arch=gate.config.arch)
        label = f"{wl.name}/{tgt.proposer}"
        walker = Walker(gate, wl, [proposer], run.limits, rules_loci=run.rules_loci,
                        progress=(lambda ev, _l=label, **kw: progress(_l, ev, **kw)) if progress else None)
        start = proposer.top.source if tgt.proposer == "versions" else read_source(tgt.start)
        lin = walker.run(start, origin=display_path(tgt.start))
        entry = {"workload": wl.name, "proposer": tgt.proposer, "start": display_path(tgt.start),
                 "termination": lin["termination"], "remaining": lin["remaining"],
                 "steps": len(lin["transitions"]), "proposals": proposal_log(lin),
                 "mechanisms": [t["mechanism"] for t in lin["transitions"]]}
        if lin["termination"] == "start_failed":
            entry["start_status"] = lin.get("start_status")
        if wl.domain:
            entry["domain"] = {"conditions": [p["condition"] for p in wl.domain_preconditions()],
                               "probe_shapes_not_run": len(wl.probe_shapes) - (len(wl.all_shapes())
                                                                               - len(wl.benchmark_cases))}
        if tgt.proposer == "versions":
            entry["rungs"] = rung_coverage(proposer, lin)
        entry["warnings"] = step_warnings(lin, label)
        out["lineages"].append(entry)
    out["compile"] = {"requests": len(gate.compile_log), "cache_hits": sum(c["cached"] for c in gate.compile_log),
                      "failed": sum(not c["ok"] for c in gate.compile_log)}
    return out


def proposal_log(lin: dict) -> list[dict]:
    """Every proposal of a walked lineage in the order it was made: the refused ones of each step
    (recorded with the step they were tried at), then the accepted one; rungs never reached last."""
    out = []
    for k in range(len(lin["transitions"]) + 1):
        for r in lin["rejections"]:
            if r["step"] == k and r["kind"] != "not_on_chain":
                out.append({"step": k + 1, "mechanism": r["mechanism"], "locus": r["locus"], "verdict": "refused",
                            "stage": r["kind"], "reason": r["message"], **({"rung": r["rung"]} if r.get("rung") else {})})
        if k < len(lin["transitions"]):
            t = lin["transitions"][k]
            a = t["audit"]
            why = (f"removed exactly this, kept the {a['kept']} other features"
                   if a.get("kind") == "rules" else f"adds forward {a.get('added_forward') or 'nothing detected'}"
                   + (f", declared {a['declared']}" if a.get("declared") else "")
                   + (f" ({a['disagrees']})" if a.get("disagrees") else ""))
            out.append({"step": k + 1, "proposer": t["proposer"], "mechanism": t["mechanism"], "locus": t["locus"],
                        "verdict": "accepted", "stage": "audit", "reason": why, "gate": ASSUMED,
                        **({"mechanisms": t["mechanisms"]} if t.get("mechanisms") else {})})
    out += [{"step": None, "mechanism": r["mechanism"], "locus": r["locus"], "verdict": "not_walked",
             "stage": "not_on_chain", "reason": r["message"], "rung": r["rung"]}
            for r in lin["rejections"] if r["kind"] == "not_on_chain"]
    return out


def rung_coverage(proposer, lin: dict) -> dict:
    """The rungs of a ladder the walk stood on (top first) out of all of them, with each other rung's reason."""
    on = [proposer.rung_of_hash(s["kernel_hash"]) for s in lin["states"]]
    walked = [proposer.ladder[i].label for i in dict.fromkeys(i for i in on if i is not None)]
    missed = [{"rung": r["rung"], "reason": r["message"]} for r in lin["rejections"] if r["kind"] == "not_on_chain"]
    return {"total": len(proposer.ladder), "walked": len(walked), "fraction": len(walked) / len(proposer.ladder),
            "chain": walked, "not_walked": missed}


def format_dry_run(d: dict) -> str:
    """The text form of a dry run."""
    lines = [f"dry run ({d['gate']})"]
    for l in d["lineages"]:
        head = f"{l['workload']}/{l['proposer']} from {l['start']}: {l['steps']} steps, {l['termination']}"
        if l["remaining"]:
            head += f" (left: {', '.join(l['remaining'])})"
        lines.append(head)
        if l.get("start_status"):
            lines.append(f"  the starting kernel is {l['start_status']}: nothing to walk")
        if l.get("domain"):
            lines.append(f"  domain: {'; '.join(l['domain']['conditions'])} "
                         f"(probe shapes outside it, not run: {l['domain']['probe_shapes_not_run']})")
        if l.get("rungs"):
            r = l["rungs"]
            lines.append(f"  rungs walked: {r['walked']}/{r['total']} ({100 * r['fraction']:.0f}%): "
                         + " -> ".join(r["chain"]))
        for w in l.get("warnings", []):
            lines.append(f"  warning: {w}")
        for p in l["proposals"]:
            where = f"{p['mechanism']} @ {p['locus']}" + (f" (rung {p['rung']})" if p.get("rung") else "")
            if p["verdict"] == "accepted":
                lines.append(f"  {p['step']:>3} accepted  {where}: {p['reason']}; {p['gate']}")
            elif p["verdict"] == "refused":
                lines.append(f"  {p['step']:>3} refused   {where} [{p['stage']}]: {p['reason']}")
            else:
                lines.append(f"      not walked {where}: {p['reason']}")
    c = d.get("compile", {})
    lines.append(f"compiled {c.get('requests', 0)} kernels ({c.get('cache_hits', 0)} from the build cache, "
                 f"{c.get('failed', 0)} failed); nothing was run or stored")
    return "\n".join(lines)
