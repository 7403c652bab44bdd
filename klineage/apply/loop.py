"""The apply loop: one skill per step, every step behind the gate, the best kept only after a re-measure.

    start kernel --gate--> best
    repeat:  retrieve on the current best (skills already tried on it left out)
             a structural skill (one a shape rewriter adds, klineage.mechanisms.shapes, to a kernel
             of a shape it recognises in the best) not tried on the best yet comes first, alone: one
             per step, before any sweep point;
             else take the next (skill, backend) in rank order; sweep points are steered by every candidate
             gate the candidate; compare its timing trial by trial with the best's (compare_timing)
             faster beyond the noise in every trial of every case -> re-measure it in another
             worker process (round 2: Gate.repeat) and compare again; kept only if still faster
    stop:    budget of steps / dollars / wall clock spent, or no candidate left -- with the reason

Every step (skill, backend, flags, prompt hash, cost, gate status, timing, verdict) is stored as it is
decided (apply_steps), and the run row carries the configuration, the stop reason and the summary, so
`klineage apply show RUN` replays the trajectory from the database. A run's id is the hash of its
inputs (workload, start kernel, configuration, library): the same command resumes into the same
run, and a stored evaluation is never measured twice.

The loop is the search engine's (klineage.apply.engine: Search, its strategies and Budget); apply()
configures it from an ApplyConfig, as each held-out condition does (klineage.heldout.run.Arm).
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

from klineage.apply.engine import (Budget, RandomSweep, RetrievedRewrites, Search, SteeredSweep,
                                   StructuralRewrites)
from klineage.apply.materialize import RulesMaterializer, check_sweep_axes, make_buildable, make_sweep
from klineage.gate.compile import DEFAULT_ARCH
from klineage.gate.gate import Gate, kernel_hash
from klineage.workload import Workload

STOPS = ("budget_steps", "budget_usd", "budget_time", "no_candidates", "start_failed")


# What a run's config said of its target before ApplyConfig.arch: the runs built for DEFAULT_ARCH keep
# it in their id (recorded runs replay under their ids), whatever card measured them
LEGACY_PLATFORM = "NVIDIA H200 (sm_90)"


@dataclass
class ApplyConfig:
    materializers: tuple[str, ...] = ("rules", "sweep")
    budget_steps: int = 16
    budget_usd: float | None = None
    budget_s: float | None = None
    admission: bool | str = True  # True / "on": admitted skills only; "first": admitted first; False / "off"
    noise: float = 0.01
    # the target the run builds for: the gate's arch, and retrieval's platform scope before a result
    arch: str = DEFAULT_ARCH
    model: str | None = None
    # How the sweep draws its points: None, steered by the retrieved skills (sweep_points); or
    # {"mode": "random", "points": N, "seed": S}: N points drawn at random without the library
    # (klineage.apply.materialize.make_sweep). Left out of to_dict when None, so run ids of
    # steered runs are what they were before the option existed.
    sweep: dict | None = None
    # Rounds of the steered sweep: 1 sweeps the start's neighbourhood once (sweep_points); N > 1 sweeps
    # again around each kept winner (a coordinate search), and after a round that kept none takes the
    # next points of the same kernel's sweep order, skipping configurations this run already gated,
    # until N rounds, the budget, or an order with nothing new. Left out of to_dict when 1 (run ids as before).
    sweep_rounds: int = 1
    # How the sweep counts its grid when it chooses its axes (klineage.apply.materialize._axes):
    # "source", every configuration; "buildable", only those nvcc's front end accepts (the kernel's
    # static checks), and the steered sweep then proposes only those. Left out of to_dict when
    # "source" (run ids as before).
    sweep_axes: str = "source"
    # Structural rewrites (a shape rewriter's, klineage.mechanisms.shapes) in the rules backend: None,
    # none (the rules write what their family's reoptimize writes; skills no such rewrite adds are
    # skipped); {"mode": "library"}, the retrieved skills a shape rewriter adds to the best first, one
    # per step before any sweep point, each with its card's parameters; {"mode": "random", "seed": S},
    # the control without the library: every mechanism a shape rewriter adds, in one order drawn at
    # random (random.Random(S)), at the rewriters' own parameters, and no other rules;
    # {"mode": "random", "seed": S, "keep": "passing"}, the same order where every rewrite that passes
    # the gate becomes the best, faster or not (the structural control's chain of arms,
    # klineage.heldout.run). Left out of to_dict when None (run ids as before).
    structural: dict | None = None

    def __post_init__(self):
        if self.admission not in (True, False, "on", "first", "off"):
            raise ValueError(f"admission = {self.admission!r}: choose on, first or off (true / false: on / off)")
        check_sweep_axes(self.sweep_axes)
        check_structural(self.structural)

    def to_dict(self) -> dict:
        d = dict(self.__dict__, materializers=list(self.materializers))
        if d["sweep"] is None:
            del d["sweep"]
        if d["sweep_rounds"] == 1:
            del d["sweep_rounds"]
        if d["sweep_axes"] == "source":
            del d["sweep_axes"]
        if d["structural"] is None:
            del d["structural"]
        if d["arch"] == DEFAULT_ARCH:  # as run ids named the default target before `arch` (run ids as before)
            del d["arch"]
            d["platform"] = LEGACY_PLATFORM
        return d


def run_id_for(wl: Workload, start: str, cfg: ApplyConfig, skills: list[dict]) -> str:
    lib = sorted(s["skill_id"] for s in skills)
    blob = json.dumps({"workload": wl.content_hash, "start": kernel_hash(start), "config": cfg.to_dict(),
                       "library": lib}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def apply(store, gate: Gate, wl: Workload, start: str, start_origin: str, cfg: ApplyConfig,
          llm=None, replay: bool = False, progress=None, skills: list[dict] | None = None) -> dict:
    """Run the loop; returns the run dict (as stored, with steps and the best kernel's source).
    `skills` restricts the library (store.skills() rows) the run retrieves from; default: all of it."""
    skills = store.skills() if skills is None else list(skills)
    run_id = run_id_for(wl, start, cfg, skills)
    budget = Budget(cfg.budget_steps, cfg.budget_usd, cfg.budget_s, t0=time.monotonic())
    run = {"run_id": run_id, "workload": wl.name, "start_hash": kernel_hash(start), "config": cfg.to_dict(),
           "start_origin": start_origin}
    store.put_apply_run(run)
    search = Search(store, gate, wl, skills, cfg, run, budget, lambda: strategies(cfg, gate.config.arch, llm), llm=llm,
                    replay=replay, progress=progress)
    return search.run(start, start_origin)


def strategies(cfg: ApplyConfig, arch: str, llm=None) -> tuple[list, list]:
    """The search engine's strategies for `cfg` (klineage.apply.engine) on target `arch`: with the rules
    backend, the structural rewrites lead (a round of their own when one applies); then one strategy per
    materializer, in the configuration's order."""
    rules = RulesMaterializer(structural=cfg.structural is not None, arch=arch)
    sweep = make_sweep(cfg.sweep, make_buildable(cfg.sweep_axes, arch))
    keep = (cfg.structural or {}).get("keep") == "passing"
    leaders = [StructuralRewrites(rules, keeps_passing=keep)] if "rules" in cfg.materializers else []
    out = []
    for backend in cfg.materializers:
        if backend == "sweep":
            out.append((SteeredSweep if cfg.sweep is None else RandomSweep)(sweep, cfg.sweep_rounds))
        elif backend == "rules":  # the random control's rules: no library
            out.append(RetrievedRewrites("rules", rules, library=(cfg.structural or {}).get("mode") != "random"))
        elif backend == "llm":
            from klineage.apply.materialize import LLMBackendMaterializer
            out.append(RetrievedRewrites("llm", LLMBackendMaterializer(llm)))
        else:
            raise ValueError(f"materializer {backend!r}: choose rules, sweep or llm")
    return leaders, out


class _Unrecorded:
    """The store of a plan: the steps a search records before its first candidate are kept by the plan,
    nothing is written."""

    def put_apply_step(self, run_id, step):
        pass

    def put_apply_run(self, run):
        pass


def plan_first(skills: list[dict], wl: Workload, start: str, cfg: ApplyConfig, arch: str,
               bottleneck: dict | None = None, llm=None, memo: dict | None = None) -> dict:
    """What a live `apply` of `cfg` gates first on `start`, with nothing gated and no GPU touched: the
    search engine's own rounds (klineage.apply.engine.Search.candidates: retrieval, the structural
    rewrites first, the rules, the sweep, in the live order) on the start kernel until a round yields a
    candidate. The live run retrieves with the start's measured bottleneck class; the plan with
    `bottleneck` ({"class": "memory" | "compute" | "latency"}; None: unknown, every mechanism's
    bottleneck term 0.5). An llm entry is not sent: the plan names its skill.

    {"backend", "skill", "skill_id", "note", "config", "flags", "kernel_hash", "source", "passed_over":
    [the materialize steps recorded before it: skills no rewrite applied to, with the reason]}; backend
    None (with "stop") when the run would stop before gating anything. `memo` (a dict shared by plans of
    one kernel) keeps what each skill's materializer gave, so plans under several bottlenecks write each
    rewrite once."""
    from klineage.apply.engine import Best, Stop, config_key
    budget = Budget(max(cfg.budget_steps, 1))
    search = Search(_Unrecorded(), None, wl, skills, cfg, {"run_id": "plan"}, budget,
                    lambda: strategies(cfg, arch, llm), llm=llm, bottleneck=bottleneck or {"class": "unknown"})
    search.best = Best(start, None)
    search.swept.add(config_key(start, {}))
    search.leaders, search.strategies = search.plan()
    out: dict = {"backend": None}
    try:
        while True:
            before = len(search.tried), len(search.steps)
            for p, cand in _planned(search, {} if memo is None else memo):
                out = {"backend": p.strategy.backend, "skill": cand.skill, "skill_id": cand.skill_id,
                       "note": cand.note, "config": cand.config, "flags": list(cand.flags),
                       "kernel_hash": kernel_hash(cand.source) if cand.source else None, "source": cand.source}
                break
            if out["backend"] is not None or (len(search.tried), len(search.steps)) == before:
                break
    except Stop as stop:
        out["stop"] = stop.reason
    out["passed_over"] = [{"backend": st["backend"], "skill": st["skill"], "status": st["status"],
                           "note": st.get("note")} for st in search.steps]
    return out


def _planned(search, memo: dict):
    """search.candidates, an llm entry named rather than sent (its candidate: the skill, no source), and
    each materialization taken from `memo` when a plan of the same kernel made it."""
    from klineage.apply.materialize import Candidate
    live = search.materialize

    def materialize(p, bh):
        key = (p.strategy.backend, p.entry["skill_id"], bh)
        if p.strategy.backend == "llm":
            search.tried.add((bh, "llm" + p.entry["skill_id"]))
            return Candidate("", "llm", p.entry["skill_id"], p.entry["name"], note="the prompt for this skill (not sent)")
        if key in memo:
            cand, steps = memo[key]
            search.tried.add((bh, p.strategy.backend + p.entry["skill_id"]))
            for st in steps:
                search.record(dict(st))
            return cand
        n = len(search.steps)
        cand = live(p, bh)
        memo[key] = (cand, [dict(st) for st in search.steps[n:]])
        return cand
    search.materialize = materialize
    try:
        yield from search.candidates()
    finally:
        search.materialize = live


def check_structural(spec: dict | None) -> None:
    """Raise ValueError unless `spec` is None, {"mode": "library"} or {"mode": "random", "seed": S}
    (with "keep": "passing" or not)."""
    ok = spec is None or spec == {"mode": "library"} or (
        spec.get("mode") == "random" and set(spec) - {"keep"} == {"mode", "seed"} and isinstance(spec.get("seed"), int)
        and spec.get("keep", "passing") == "passing")
    if not ok:
        raise ValueError(f"structural {spec!r}: None (no structural rewrites), {{'mode': 'library'}} (the retrieved "
                         "skills') or {'mode': 'random', 'seed': S} (every shape rewriter's, in a seeded order; "
                         "with 'keep': 'passing', each rewrite that passes the gate is kept, faster or not)")


def write_outputs(run: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if run.get("best_source"):
        (out / "best.cu").write_text(run["best_source"])
    (out / "trajectory.json").write_text(json.dumps({k: v for k, v in run.items() if k != "best_source"},
                                                    indent=1, default=str) + "\n")
