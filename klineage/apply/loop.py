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


@dataclass
class ApplyConfig:
    materializers: tuple[str, ...] = ("rules", "sweep")
    budget_steps: int = 16
    budget_usd: float | None = None
    budget_s: float | None = None
    admission: bool = True
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
    # random (random.Random(S)), at the rewriters' own parameters, and no other rules. Left out of
    # to_dict when None (run ids as before).
    structural: dict | None = None

    def __post_init__(self):
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
        if d["arch"] == DEFAULT_ARCH:
            del d["arch"]
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
    search = Search(store, gate, wl, skills, cfg, run, budget, lambda: strategies(cfg, gate, llm), llm=llm,
                    replay=replay, progress=progress)
    return search.run(start, start_origin)


def strategies(cfg: ApplyConfig, gate: Gate, llm=None) -> tuple[list, list]:
    """The search engine's strategies for `cfg` (klineage.apply.engine): with the rules backend, the
    structural rewrites lead (a round of their own when one applies); then one strategy per
    materializer, in the configuration's order."""
    rules = RulesMaterializer(structural=cfg.structural is not None, arch=gate.config.arch)
    sweep = make_sweep(cfg.sweep, make_buildable(cfg.sweep_axes, gate.config.arch))
    leaders = [StructuralRewrites(rules)] if "rules" in cfg.materializers else []
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


def check_structural(spec: dict | None) -> None:
    """Raise ValueError unless `spec` is None, {"mode": "library"} or {"mode": "random", "seed": S}."""
    ok = spec is None or spec == {"mode": "library"} or (
        spec.get("mode") == "random" and set(spec) == {"mode", "seed"} and isinstance(spec.get("seed"), int))
    if not ok:
        raise ValueError(f"structural {spec!r}: None (no structural rewrites), {{'mode': 'library'}} (the retrieved "
                         "skills') or {'mode': 'random', 'seed': S} (every shape rewriter's, in a seeded order)")


def write_outputs(run: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if run.get("best_source"):
        (out / "best.cu").write_text(run["best_source"])
    (out / "trajectory.json").write_text(json.dumps({k: v for k, v in run.items() if k != "best_source"},
                                                    indent=1, default=str) + "\n")
