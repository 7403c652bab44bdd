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
"""
from __future__ import annotations

import collections
import hashlib
import json
import random
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from klineage.apply.materialize import (MAX_SWEEP, Candidate, RulesMaterializer, bake, check_sweep_axes,
                                       make_buildable, make_sweep, tunables)
from klineage.apply.retrieve import PLATFORM_H200, retrieve, target_facts
from klineage.gate.gate import Gate, GateResult, kernel_hash
from klineage.lineage.walk import compare_timing
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
    platform: str = PLATFORM_H200
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
        return d


@dataclass
class Best:
    source: str
    result: GateResult
    flags: tuple[str, ...] = ()
    history: list[str] = field(default_factory=list)  # skill names kept, in order

    @property
    def key(self) -> str:
        """What was tried on this best is keyed by its source and flags."""
        return kernel_hash(self.source) + "|" + ",".join(self.flags)


def run_id_for(wl: Workload, start: str, cfg: ApplyConfig, skills: list[dict]) -> str:
    lib = sorted(s["skill_id"] for s in skills)
    blob = json.dumps({"workload": wl.content_hash, "start": kernel_hash(start), "config": cfg.to_dict(),
                       "library": lib}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _faster(new: GateResult, best: GateResult, noise: float) -> tuple[bool, list[dict]]:
    cases = compare_timing(new, best)
    ok = bool(cases) and all(all(r > 1 + max(noise, c["spread"]) for r in c["trial_speedups"]) for c in cases)
    return ok, cases


def _gate_for(gate: Gate, flags: tuple[str, ...], round_: int = 1) -> Gate:
    """The gate of a candidate: its sweep flags added; round 2 (a re-measure) in the repeat worker of
    `gate`, a process other than the search's."""
    if round_ != 1:
        gate = gate.repeat(round_)
    if not flags:
        return gate
    return gate.with_config(replace(gate.config, extra_flags=tuple(gate.config.extra_flags) + tuple(flags)))


def _feedback(res: GateResult) -> str:
    return f"{res.status.value}: {res.error_kind or ''} {res.error_message or ''}".strip()


def apply(store, gate: Gate, wl: Workload, start: str, start_origin: str, cfg: ApplyConfig,
          llm=None, replay: bool = False, progress=None, skills: list[dict] | None = None) -> dict:
    """Run the loop; returns the run dict (as stored, with steps and the best kernel's source).
    `skills` restricts the library (store.skills() rows) the run retrieves from; default: all of it."""
    skills = store.skills() if skills is None else list(skills)
    run_id = run_id_for(wl, start, cfg, skills)
    t0 = time.monotonic()
    run = {"run_id": run_id, "workload": wl.name, "start_hash": kernel_hash(start), "config": cfg.to_dict(),
           "start_origin": start_origin}
    store.put_apply_run(run)
    steps: list[dict] = []
    structural: set[str] = set()  # skills the rules backend cannot write (no forward rewrite exists)

    def record(step: dict) -> None:
        step["seq"] = len(steps)
        steps.append(step)
        store.put_apply_step(run_id, step)
        if progress:
            progress(step)

    def evaluated() -> int:
        return sum(1 for st in steps if spends_budget(st))

    def finish(reason: str, best: Best | None, retrieval: dict | None) -> dict:
        summary = {"stop_reason": reason, "steps": len(steps), "evaluated": evaluated(),
                   "kept": best.history if best else [],
                   "spent_usd": round(getattr(llm, "spent_usd", 0.0) or 0.0, 6),
                   "wall_s": round(time.monotonic() - t0, 3)}
        if best is not None:
            summary["speedup_vs_start"] = [
                {"shape": c["shape"], "start_us": c["simpler_us"], "best_us": c["richer_us"], "speedup": c["speedup"]}
                for c in compare_timing(best.result, first)]
            summary["best_flags"] = list(best.flags)
        summary["rules_skipped_structural"] = sorted(structural)
        if retrieval is not None:
            summary["excluded"] = [{"name": e["name"], "reasons": e["reasons"]} for e in retrieval["excluded"]]
            summary["target"] = retrieval["target"]
        out = {**run, "best_hash": kernel_hash(best.source) if best else None, "stop_reason": reason,
               "summary": summary}
        store.put_apply_run(out)
        out["steps"] = list(steps)
        out["best_source"] = best.source if best else None
        return out

    def keep(step: dict, cand: Candidate) -> bool:
        """Re-measure a faster candidate in the round-2 worker; make it the best if it is still faster
        (a sweep point is baked into the source and gated as such). Rewrites the step's record."""
        nonlocal best
        again = _gate_for(gate, cand.flags, round_=2).evaluate(cand.source, wl, origin=f"apply {run_id} re-measure",
                                                              replay=replay)
        still, cases2 = _faster(again, best.result, cfg.noise) if again.passed else (False, [])
        step["remeasure"] = {"eval_key": again.eval_key, "status": again.status.value, "vs_best": cases2}
        if still:
            step["accepted"] = True
            name = cand.skill or f"sweep {cand.config}"
            new = Best(cand.source, again, cand.flags, best.history + [name])
            if cand.backend == "sweep":
                source = bake(cand.source, cand.config)
                baked = gate.evaluate(source, wl, origin=f"apply {run_id} sweep baked", replay=replay)
                step["baked"] = {"eval_key": baked.eval_key, "status": baked.status.value}
                if baked.passed:  # the baked source stands alone; else the flags stay with the kernel
                    new = Best(source, baked, (), new.history)
                if rounds[_family(new.source)] >= cfg.sweep_rounds:
                    exhausted.add(new.key)  # no sweep around its own winner
            best = new
        store.put_apply_step(run_id, step)
        return still

    first = gate.evaluate(start, wl, origin=start_origin, replay=replay)
    record({"kind": "start", "backend": "start", "skill_id": None, "skill": None, "kernel_hash": first.kernel_hash,
            "eval_key": first.eval_key, "status": first.status.value, "accepted": first.passed,
            "timing": first.timing, "note": "the start kernel",
            "error": None if first.passed else _feedback(first)})
    if not first.passed:
        return finish("start_failed", None, None)
    best = Best(start, first)
    tried: set[tuple[str, str]] = set()  # (kernel hash, skill id or sweep) already tried
    rounds: dict[str, int] = collections.Counter()  # sweep rounds per kernel up to its tunables' values
    exhausted: set[str] = set()  # best kernels whose sweep order is spent (the random control's: at once)
    swept: set[tuple] = {_config_key(start, {})}  # the configurations the sweep has gated (or started from)
    mats = {"rules": RulesMaterializer(structural=cfg.structural is not None), "sweep": make_sweep(cfg.sweep, make_buildable(cfg.sweep_axes, gate.config.arch))}
    if "llm" in cfg.materializers:
        from klineage.apply.materialize import LLMBackendMaterializer
        mats["llm"] = LLMBackendMaterializer(llm)
    feedback: str | None = None
    retrieval, retrieved_for = None, None
    while True:
        if evaluated() >= cfg.budget_steps:
            return finish("budget_steps", best, retrieval)
        if cfg.budget_s is not None and time.monotonic() - t0 >= cfg.budget_s:
            return finish("budget_time", best, retrieval)
        bh = best.key
        if retrieval is None or retrieved_for != bh:  # facts and ranking change only with the best kernel
            facts = target_facts(wl, best.source, cfg.platform, best.result)
            retrieval, retrieved_for = retrieve(skills, facts, admission=cfg.admission), bh
        queue: list[tuple[str, Candidate | None, dict | None]] = []
        structural_next = (_next_structural(cfg, retrieval, tried, bh, best.source, wl)
                           if "rules" in cfg.materializers else None)
        for backend in (() if structural_next is not None else cfg.materializers):
            if backend == "sweep":
                fam = _family(best.source)
                if bh not in exhausted and rounds[fam] < max(1, cfg.sweep_rounds):
                    # a round: the next points of this kernel's sweep order not gated yet; a round that
                    # keeps no winner is followed, rounds and budget allowing, by the next ones
                    key_of = _config_keys(best.source)  # the candidates' source is the best's
                    pts = mats["sweep"].propose_all(retrieved_skills(skills, retrieval), best.source, wl,
                                                    skip=lambda p: key_of(p) in swept)
                    if cfg.sweep is not None or len(pts) < MAX_SWEEP - 1:
                        exhausted.add(bh)
                    keyed = [(k, c) for k, c in ((key_of(c.config), c) for c in pts) if k not in swept]
                    if keyed:
                        rounds[fam] += 1
                    queue += [("sweep", c, None) for _, c in keyed]
                    swept.update(k for k, _ in keyed)
                continue
            random_rules = backend == "rules" and (cfg.structural or {}).get("mode") == "random"
            for c in ([] if random_rules else retrieval["candidates"]):  # the random control: no library
                if (bh, backend + c["skill_id"]) in tried:
                    continue
                if backend == "rules" and _structural(c["mechanism"]):
                    structural.add(c["name"])  # no forward rewrite exists: only the llm backend can write it
                    continue
                queue.append((backend, None, c))
                break
        if structural_next is not None:
            queue = [("rules", None, structural_next)]
        if not queue:
            return finish("no_candidates", best, retrieval)
        sweep_steps: list[tuple[dict, Candidate, GateResult]] = []
        for backend, cand, entry in queue:
            if evaluated() >= cfg.budget_steps:
                break
            if entry is not None:
                tried.add((bh, backend + entry["skill_id"]))
                skill = entry.get("skill") or _skill(skills, entry)
                try:
                    got = mats[backend].propose(skill, best.source, wl, feedback)
                except Exception as exc:  # BudgetExhausted, or a backend error: a stop or a recorded step
                    from klineage.apply.llm import BudgetExhausted
                    if isinstance(exc, BudgetExhausted):
                        return finish("budget_usd", best, retrieval)
                    record({"kind": "materialize", "backend": backend, "skill_id": entry["skill_id"],
                            "skill": entry["name"], "status": "MATERIALIZE_ERROR", "accepted": False,
                            "note": f"{type(exc).__name__}: {exc}", "terms": entry["terms"]})
                    continue
                if not got:
                    record({"kind": "materialize", "backend": backend, "skill_id": entry["skill_id"],
                            "skill": entry["name"], "status": "NO_REWRITE", "accepted": False,
                            "note": mats[backend].why_not(skill), "terms": entry["terms"]})
                    continue
                cand = got[0]
                if not cand.source:  # the model gave no kernel
                    record({"kind": "materialize", "backend": backend, "skill_id": entry["skill_id"],
                            "skill": entry["name"], "status": "NO_KERNEL", "accepted": False, "note": cand.note,
                            "exchange": cand.exchange, "terms": entry["terms"]})
                    feedback = cand.note
                    continue
            res = _gate_for(gate, cand.flags).evaluate(cand.source, wl, origin=f"apply {run_id} {backend}", replay=replay)
            step = {"kind": "candidate", "backend": backend, "skill_id": cand.skill_id, "skill": cand.skill,
                    "flags": list(cand.flags), "config": cand.config, "kernel_hash": res.kernel_hash,
                    "eval_key": res.eval_key, "status": res.status.value, "accepted": False, "note": cand.note,
                    "exchange": cand.exchange, "terms": entry["terms"] if entry else None, "timing": res.timing}
            if backend == "sweep":
                step["steered_by"] = list(cand.steered_by)
            if not res.passed:
                feedback = _feedback(res)
                step["feedback"] = feedback
                step["error_kind"] = res.error_kind
                record(step)
                continue
            feedback = None
            step["faster"], step["vs_best"] = _faster(res, best.result, cfg.noise)
            record(step)
            if backend == "sweep":  # every point first; the fastest is the one to keep
                sweep_steps.append((step, cand, res))
                continue
            if step["faster"] and keep(step, cand):
                break  # retrieve again on the new best
        winners = sorted((x for x in sweep_steps if x[0]["faster"]),
                         key=lambda x: -min(min(c["trial_speedups"]) for c in x[0]["vs_best"]))
        for step, cand, _res in winners[:1]:
            keep(step, cand)


def spends_budget(step: dict) -> bool:
    """Whether a step counts against budget_steps: every gated candidate but a sweep point nvcc refused
    (nvcc_error: not a compile that timed out or ran out of memory, which says nothing of the point).
    Such a point is a hole in the declared space (the kernel's own static checks reject that
    configuration: attention's rows per warp, gemm's 256 x 256 tile), not a kernel: nothing ran, and a
    condition that happens to propose more of them, the random control drawing blindly from the grid
    or a card naming another kernel's tile, must not lose evaluations to it."""
    return step["kind"] == "candidate" and not (step["backend"] == "sweep" and step["status"] == "COMPILE_ERROR"
                                                and step.get("error_kind") == "nvcc_error")


def _family(source: str) -> str:
    """The kernel up to the values of its tunables: a baked sweep winner is of its start's family."""
    return kernel_hash(bake(source, {n: 0 for n in tunables(source)}))


def _config_key(source: str, point: dict) -> tuple:
    """A kernel family and the configuration a sweep point gives it: its tunables' defaults with the
    point applied (a baked winner and the flags that gave it are the same configuration)."""
    return _config_keys(source)(point)


def _config_keys(source: str):
    """_config_key of `source` as a function of the point: the family and tunables read once."""
    fam, tun = _family(source), tunables(source)
    return lambda point: (fam, tuple(sorted({**tun, **point}.items())))


def _structural(mechanism: str) -> bool:
    """Whether the rules backend's queue passes `mechanism` over: no reoptimize in its family. A shape
    rewriter's skills come through _next_structural instead, first, where one recognises the kernel
    (so a kernel no shape rewriter reads is searched as it was without them)."""
    from klineage.mechanisms import registry
    m = registry().get(mechanism)
    return m is None or bool(m.STRUCTURAL)


def check_structural(spec: dict | None) -> None:
    """Raise ValueError unless `spec` is None, {"mode": "library"} or {"mode": "random", "seed": S}."""
    ok = spec is None or spec == {"mode": "library"} or (
        spec.get("mode") == "random" and set(spec) == {"mode", "seed"} and isinstance(spec.get("seed"), int))
    if not ok:
        raise ValueError(f"structural {spec!r}: None (no structural rewrites), {{'mode': 'library'}} (the retrieved "
                         "skills') or {'mode': 'random', 'seed': S} (every shape rewriter's, in a seeded order)")


def structural_order(spec: dict | None) -> list[str]:
    """The mechanisms the random control's structural rewrites take, in its seeded order: every one a
    shape rewriter adds (sorted, then shuffled by random.Random(seed))."""
    from klineage.mechanisms.shapes import rewriters
    names = sorted({m for rw in rewriters() for m in rw.mechanisms})
    random.Random((spec or {}).get("seed", 0)).shuffle(names)
    return names


def _next_structural(cfg: ApplyConfig, retrieval: dict, tried: set, bh: str, source: str, wl) -> dict | None:
    """The next structural rewrite to gate on the best `bh` (`source`): the first retrieved skill
    whose mechanism a shape rewriter recognising the kernel adds, not tried on it yet (or, for the
    random control, the first such mechanism of its order), as a retrieval entry; None when none is left."""
    from klineage.mechanisms.shapes import recognises
    if cfg.structural is None:
        return None
    if cfg.structural["mode"] == "library":
        return next((c for c in retrieval["candidates"] if (bh, "rules" + c["skill_id"]) not in tried
                     and recognises(c["mechanism"], source, wl)), None)
    for m in structural_order(cfg.structural):
        sid = f"random:{m}"
        if (bh, "rules" + sid) not in tried and recognises(m, source, wl):
            return {"skill_id": sid, "name": m, "mechanism": m, "terms": None,
                    "skill": {"skill_id": sid, "name": m, "mechanism": m, "card": None}}
    return None


def _skill(skills: list[dict], entry: dict) -> dict:
    return next(s for s in skills if s["skill_id"] == entry["skill_id"])


def retrieved_skills(skills: list[dict], retrieval: dict) -> list[dict]:
    """The library rows of a retrieval's candidates, in rank order (what steers a sweep)."""
    return [_skill(skills, c) for c in retrieval["candidates"]]


def write_outputs(run: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if run.get("best_source"):
        (out / "best.cu").write_text(run["best_source"])
    (out / "trajectory.json").write_text(json.dumps({k: v for k, v in run.items() if k != "best_source"},
                                                    indent=1, default=str) + "\n")
