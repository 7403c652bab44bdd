"""`klineage heldout`: every held-out instance under every condition, behind the gate, into one report.

Conditions, each built on the apply loop (klineage.apply.loop.apply) so that every candidate is
gated, compared trial by trial, re-measured in another worker process before it is kept, and stored:

  idiom            the instance's idiom-only kernel at its default configuration (no search);
  skills           retrieval from the library + `sweep` on the idiom kernel (points steered by the
                   retrieved skills' example configurations); for reductions with a naive start,
                   then `rules` + `sweep` from the naive kernel with the budget left; the better arm
                   (by its kept measurement in the search) is the result;
  control-random   `sweep` on the idiom kernel over points drawn at random (seeded per instance)
                   from the same axes' default and neighbours, the library unused;
  control-foreign  exactly the `skills` procedure, the library cut to skills whose every source
                   workload is of an unrelated family (config `foreign`: a family map);
  llm              the llm materializer from the idiom kernel, only when a key is set; otherwise a
                   row NOT_RUN with the reason.

With `structural` on, the searching conditions apply structural rewrites (a shape rewriter's,
klineage.mechanisms.shapes: a warp or block per row, shuffles, online softmax, vectors, a register
cache, tiling ...) before sweeping, one per step under the same budget, in one arm from the same
start: the naive kernel for reductions that have one, else the idiom kernel:

  skills           the retrieved skills a shape rewriter adds (rank order, their cards' parameters),
                   then the steered sweep;
  control-random   the same rewriters without the library: every mechanism they add, in one order
                   drawn at random (seeded per instance), at the rewriters' own parameters, then the
                   random sweep;
  control-foreign  the skills procedure with the foreign library;
  control-structural  the same rewriters in the random control's seeded order at their own
                   parameters, each rewrite that passes the gate kept (faster or not) and the next
                   written on it; then every kernel of that chain (its start too) is an arm swept on
                   its own axes by the unsteered sweep, the budget the rewrites left split evenly
                   over the arms (the fastest by the search's measurement first); no card is read;
so the comparison isolates what the cards know of when (and with what) to apply each rewrite. With
`idiom_arm`, a reduction searched from its naive start keeps its idiom kernel as an arm too: the
condition's own sweep of it (steered, random or unsteered as the condition sweeps) with the budget
the arms before it left, at least its start evaluation, so no condition ends below the idiom kernel
by its search measurement.

Budget: every condition may gate at most `budget` candidate kernels per instance (the apply loop's
budget_steps, summed over arms). Not counted, and the same for every condition: the start kernel's
own evaluation, the round-2 re-measure of a faster candidate, the check of a baked sweep winner, and
a sweep point nvcc refused (a configuration the kernel's static checks reject; recorded, and the arm's
`gate_evaluations.refused` counts them): control-random then draws on past it, as the steered sweep
goes on to its next point (klineage.apply.loop.spends_budget).

The reported figure of every condition is a final measurement of its final kernel: `final_rounds`
gate evaluations (rounds 3, 4, ...), each in a worker process of its own, on every benchmark and
probe shape at the gate's seeds; speedup and 95% interval as klineage.heldout.stats says. A
condition whose final kernel fails any round is FAILED and counts in geomeans at `failure_speedup`.

Reference: the instance's primary reference (FlagGems), or its VENDOR_FALLBACK (`vendor`): `auto`
evaluates the idiom kernel against the primary and switches to the fallback only when that
evaluation failed inside the reference (its error names the vendor call, flag_gems or triton);
`primary` / `fallback` force one. Every row says which reference ran and why.

A run's id is the hash of its inputs (instances by content, configuration, library); rows are
written as each condition is decided, so the same command resumes a killed run, reusing decided
rows and stored evaluations; a replay reads the recorded evaluations and gives the same report.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from klineage import settings
from klineage.apply.engine import gate_for, spends_budget
from klineage.apply.loop import ApplyConfig, apply
from klineage.apply.materialize import check_sweep_axes
from klineage.errors import ReplayMissingError
from klineage.gate.gate import DEFAULT_TIMING, Gate, GateConfig, GateResult, kernel_hash
from klineage.heldout import stats
from klineage.heldout.instances import Instance
from klineage.heldout.sources import foreign_library, produced_source, random_seed, skill_sources

CONDITIONS = ("idiom", "skills", "control-random", "control-foreign", "control-structural", "llm")
UNSTEERED = ("control-random", "control-structural")  # the conditions that read no card
COMPLETE = ("PASSED", "FAILED")  # decided rows a resumed run reuses
FIRST_FINAL_ROUND = 3            # round 1: the search; round 2: the loop's re-measure
MEMORY_BOUND = ("reduction", "elementwise", "scan", "selection", "transpose", "positional")
TENSOR_CORE = ("gemm", "convolution", "attention", "linear_attention")
# "Unrelated" by the kind of work: tensor-core instances get skills mined only from memory-bound
# operators, reductions get skills mined only from tensor-core operators.
DEFAULT_FOREIGN = {"gemm": MEMORY_BOUND, "attention": MEMORY_BOUND, "reduction": TENSOR_CORE}
ENV_KEYS = ("gpu", "capability", "sm_count", "driver", "nvcc", "torch", "torch_cuda", "triton",
            "clock_max_sm_mhz", "clock_max_mem_mhz", "power_limit_w")


@dataclass
class HeldoutConfig:
    conditions: tuple[str, ...] = CONDITIONS
    budget: int = 12
    seed: int = 0
    final_rounds: int = 2
    admission: bool = True    # retrieval offers admitted skills only (off: every skill, for ablation)
    vendor: str = "auto"      # auto | primary | fallback
    failure_speedup: float = 0.1
    foreign: dict = field(default_factory=lambda: {k: tuple(v) for k, v in DEFAULT_FOREIGN.items()})
    timing: dict = field(default_factory=dict)  # overrides of the gate's timing settings
    model: str | None = None
    budget_usd: float | None = None
    # rounds of the steered sweep (skills, control-foreign; klineage.apply.loop.ApplyConfig.sweep_rounds)
    sweep_rounds: int = 1
    # how the sweep counts its grid when it chooses its axes: "source" or "buildable"
    # (klineage.apply.loop.ApplyConfig.sweep_axes); every searching condition uses the same
    sweep_axes: str = "source"
    # structural rewrites before sweeping, in one arm from the naive start of a reduction (else the
    # idiom kernel); the controls take the same rewriters without the library (module docstring)
    structural: bool = False
    # with `structural`: a reduction searched from its naive start keeps its idiom kernel as an arm,
    # swept with the budget the arms before it left (module docstring)
    idiom_arm: bool = False

    def __post_init__(self):
        bad = sorted(set(self.conditions) - set(CONDITIONS))
        if bad:
            raise ValueError(f"unknown condition {bad[0]!r}: choose from {', '.join(CONDITIONS)}")
        self.conditions = tuple(c for c in CONDITIONS if c in self.conditions)
        if self.vendor not in ("auto", "primary", "fallback"):
            raise ValueError(f"vendor {self.vendor!r}: choose auto, primary or fallback")
        if self.budget < 0 or self.final_rounds < 1 or self.sweep_rounds < 1 or not 0 < self.failure_speedup < 1:
            raise ValueError("budget >= 0, final_rounds >= 1, sweep_rounds >= 1 and 0 < failure_speedup < 1")
        check_sweep_axes(self.sweep_axes)
        if not self.structural and self.conditions == CONDITIONS:  # the default: every condition the mode has
            self.conditions = tuple(c for c in CONDITIONS if c != "control-structural")
        if not self.structural and ("control-structural" in self.conditions or self.idiom_arm):
            raise ValueError("control-structural and idiom_arm need structural = true (structural rewrites before "
                             "the sweep)")
        self.foreign = {k: tuple(sorted(v)) for k, v in sorted(self.foreign.items())}

    def to_dict(self) -> dict:
        return {"conditions": list(self.conditions), "budget": self.budget, "seed": self.seed,
                "final_rounds": self.final_rounds, "admission": self.admission, "vendor": self.vendor,
                "failure_speedup": self.failure_speedup, "foreign": {k: list(v) for k, v in self.foreign.items()},
                "timing": {**DEFAULT_TIMING, **self.timing}, "model": self.model, "budget_usd": self.budget_usd,
                **({"sweep_rounds": self.sweep_rounds} if self.sweep_rounds != 1 else {}),
                **({"sweep_axes": self.sweep_axes} if self.sweep_axes != "source" else {}),
                **({"structural": True} if self.structural else {}),
                **({"idiom_arm": True} if self.idiom_arm else {})}

    def gate_config(self) -> GateConfig:
        return GateConfig(timing={**DEFAULT_TIMING, **self.timing})


@dataclass(frozen=True)
class Arm:
    """One search of a condition: a configuration of the search engine (klineage.apply.loop.apply)
    from the instance's `start` kernel ("idiom" or "naive"; with `source`, that kernel, which `start`
    then names), under the budget its arms have left (at most `share` of it when set)."""
    name: str
    start: str
    materializers: tuple[str, ...]
    sweep: dict | None = None       # ApplyConfig.sweep: None (steered) or the random control's draw
    structural: dict | None = None  # ApplyConfig.structural
    source: str | None = None
    share: int | None = None
    unsteered: bool = False         # the steered sweep with no library (retrieval offers nothing)

    def config(self, cfg: HeldoutConfig, budget: int) -> ApplyConfig:
        llm = self.name == "llm"
        return ApplyConfig(materializers=self.materializers, budget_steps=budget, admission=cfg.admission,
                           sweep=self.sweep, sweep_rounds=cfg.sweep_rounds if self.sweep is None else 1,
                           sweep_axes=cfg.sweep_axes, budget_usd=cfg.budget_usd if llm else None,
                           model=cfg.model if llm else None, structural=self.structural)


def run_id_for(instances: list[Instance], cfg: HeldoutConfig, library: list[dict]) -> str:
    blob = json.dumps({"instances": [i.identity() for i in instances], "config": cfg.to_dict(),
                       "library": sorted(s["skill_id"] for s in library)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def llm_status(replay: bool, model: str | None = None, budget_usd: float | None = None,
               env=os.environ) -> tuple[object | None, str | None]:
    """(the llm materializer, None) when the llm condition can run; (None, the reason) when not."""
    if not env.get("ANTHROPIC_API_KEY"):
        return None, "not run: ANTHROPIC_API_KEY is not set (the llm condition runs only with a key)"
    if replay:
        return None, "not run: --replay, and the held-out check records no model exchanges to replay"
    from klineage.apply.llm import LLMMaterializer
    from klineage.llm import DEFAULT_MODEL, AnthropicBackend
    backend = AnthropicBackend(model or DEFAULT_MODEL, env=env)
    return LLMMaterializer(backend, budget_usd=budget_usd, model=model), None


# -- the reference -------------------------------------------------------------------------------------

_VENDOR_RE = re.compile(r"\bin vendor\b|flag_gems|triton", re.I)


def implicates_reference(res: GateResult) -> bool:
    """Whether a failed evaluation failed inside the performance reference, not the candidate."""
    return res.status.value == "RUNTIME_ERROR" and bool(_VENDOR_RE.search(res.error_message or ""))


def _last_line(text: str | None) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[:240]


def select_reference(inst: Instance, gate: Gate, mode: str, replay: bool, origin: str):
    """(workload, {"used", "name", "reason"}); ReplayMissingError when a replay lacks the record."""
    primary = {"used": "primary", "name": inst.workload.vendor_name}
    if mode == "primary":
        return inst.workload, {**primary, "reason": "--vendor primary"}
    if mode == "fallback":
        if inst.has_fallback:
            return inst.fallback(), {"used": "fallback", "name": inst.fallback_name, "reason": "--vendor fallback"}
        return inst.workload, {**primary, "reason": "--vendor fallback, but the instance has no VENDOR_FALLBACK"}
    res = gate.evaluate(inst.starts["idiom"][1], inst.workload, origin=origin, replay=replay)
    if implicates_reference(res):
        why = f"the primary reference failed while the idiom kernel was timed ({res.error_kind}: {_last_line(res.error_message)})"
        if inst.has_fallback:
            return inst.fallback(), {"used": "fallback", "name": inst.fallback_name, "reason": why}
        return inst.workload, {**primary, "reason": why + "; the instance has no VENDOR_FALLBACK"}
    if res.passed:
        return inst.workload, {**primary, "reason": "auto: the primary reference ran"}
    return inst.workload, {**primary, "reason": f"auto: the idiom kernel failed ({res.status.value}) before the "
                                                "reference was timed; the primary is kept"}


# -- one instance ----------------------------------------------------------------------------------------

class _FinalGates:
    """The gates of the final rounds: `gate.repeat(round)`, a worker process of its own for each round,
    shared by every kernel of that round."""

    def __init__(self, gate: Gate, rounds: int):
        self.gates = [gate.repeat(FIRST_FINAL_ROUND + k) for k in range(rounds)]

    def evaluate(self, k: int, source: str, wl, flags: tuple[str, ...], origin: str, replay: bool) -> GateResult:
        return gate_for(self.gates[k], flags).evaluate(source, wl, origin=origin, replay=replay)

    def close(self) -> None:
        for g in self.gates:
            g.close()


def _shape_id(shape: dict) -> str:
    return json.dumps(shape, sort_keys=True)


class _InstanceRun:
    def __init__(self, ctx: "_Run", inst: Instance):
        self.ctx, self.inst = ctx, inst
        self.wl, self.reference = None, None

    def origin(self, what: str) -> str:
        return f"heldout {self.ctx.run_id} {self.inst.name} {what}"

    def decide_reference(self) -> None:
        c = self.ctx
        self.wl, self.reference = select_reference(self.inst, c.gate, c.cfg.vendor, c.replay, self.origin("idiom"))

    def row(self, cond: str, status: str, reason: str | None = None, **kw) -> dict:
        return {"instance": self.inst.name, "condition": cond, "family": self.inst.family, "status": status,
                "reason": reason, "reference": self.reference, **kw}

    # the conditions ----------------------------------------------------------------------------------

    def idiom(self) -> dict:
        return self.finalize("idiom", self.inst.starts["idiom"][1], (), arms=[], used=0, library=None)

    def arms(self, cond: str) -> tuple[list[Arm], list[dict]]:
        """The condition's arms (each a configuration of the search engine from a start) and the
        library it retrieves from; control-structural's sweep arms follow from its first arm's
        rewrites (structural_arms)."""
        c, inst = self.ctx, self.inst
        if c.cfg.structural and cond != "llm":
            start = "naive" if inst.family == "reduction" and "naive" in inst.starts else "idiom"
            seed = random_seed(c.cfg.seed, inst.name)
            if cond == "control-random":
                arms = [Arm("random", start, ("rules", "sweep"), {"mode": "random", "points": c.cfg.budget, "seed": seed},
                            {"mode": "random", "seed": seed})]
                library = []
            elif cond == "control-structural":
                arms = [Arm("rewrites", start, ("rules",), structural={"mode": "random", "seed": seed, "keep": "passing"})]
                library = []
            else:
                library = c.library if cond == "skills" else c.foreign(inst.family)
                arms = [Arm("structural", start, ("rules", "sweep"), structural={"mode": "library"})]
            if c.cfg.idiom_arm and start != "idiom":
                arms.append(self.idiom_arm(cond, seed))
            return arms, library
        if cond == "control-random":
            seed = random_seed(c.cfg.seed, inst.name)
            return [Arm("random", "idiom", ("sweep",), {"mode": "random", "points": c.cfg.budget, "seed": seed})], []
        if cond == "llm":
            return [Arm("llm", "idiom", ("llm",))], c.library
        arms = [Arm("sweep", "idiom", ("sweep",))]
        if inst.family == "reduction" and "naive" in inst.starts:
            arms.append(Arm("rules", "naive", ("rules", "sweep")))
        return arms, (c.library if cond == "skills" else c.foreign(inst.family))

    def idiom_arm(self, cond: str, seed: int) -> Arm:
        """A reduction's idiom kernel as an arm of a structural condition searched from its naive start:
        swept as the condition sweeps (idiom_arm)."""
        if cond == "control-random":
            return Arm("idiom", "idiom", ("sweep",), {"mode": "random", "points": self.ctx.cfg.budget, "seed": seed})
        return Arm("idiom", "idiom", ("sweep",), unsteered=cond == "control-structural")

    def structural_arms(self, run: dict, left: int) -> list[Arm]:
        """control-structural's sweep arms after its rewrites (`run`, the first arm's search): the
        chain's start and every rewrite that passed, each swept on its own axes by the unsteered sweep,
        `left` split evenly over them, the fastest by the search's measurement first (ties in chain order)."""
        steps = run["steps"]
        chain = [(steps[0], self.inst.starts[run["start_kind"]][1], run["start_kind"])] if steps and steps[0].get(
            "accepted") else []
        names = [run["start_kind"]]
        for st in steps[1:]:
            if st["kind"] == "candidate" and st.get("accepted"):
                names.append(st.get("skill") or "rewrite")
                chain.append((st, self.ctx.store.get_kernel(st["kernel_hash"])["source"], "+".join(names)))
        scored = sorted(enumerate(chain), key=lambda ic: (-(_search_score(self.ctx.store.get_evaluation(
            ic[1][0]["eval_key"])) or 0.0), ic[0]))
        n = len(scored)
        return [Arm(f"sweep {label}", label, ("sweep",), source=src, share=left // n + (1 if k < left % n else 0),
                    unsteered=True) for k, (_, (_, src, label)) in enumerate(scored)]

    def search(self, cond: str) -> dict:
        c, inst = self.ctx, self.inst
        arms, library = self.arms(cond)
        done, used, trajectory = [], 0, []
        while arms:
            arm = arms.pop(0)
            left = c.cfg.budget - used
            if left <= 0 and done and arm.name != "idiom" and arm.share is None:
                done.append({"arm": arm.name, "start": arm.start, "skipped": "the budget was spent by the arms before"})
                continue
            left = max(0, left if arm.share is None else min(left, arm.share))
            if arm.source is not None:
                start, origin = arm.source, f"{c.root_text}/{inst.name} {arm.start}"
            else:
                rel, start = inst.starts[arm.start]
                origin = f"{c.root_text}/{rel}"
            llm = c.llm_for_instance() if arm.name == "llm" else None
            run = apply(c.store, c.gate, self.wl, start, origin, arm.config(c.cfg, left), llm=llm,
                        replay=c.replay, progress=c.step_progress(inst.name, cond),
                        skills=[] if arm.unsteered else library)
            used += run["summary"]["evaluated"]
            trajectory += run["steps"]
            rec = _arm_record(arm.name, arm.start, run)
            if llm is not None:
                rec["spent_usd"] = run["summary"]["spent_usd"]
            if rec.get("best_eval_key"):
                rec["best_score"] = _search_score(c.store.get_evaluation(rec["best_eval_key"]))
            done.append(rec)
            if arm.name == "rewrites" and run["stop_reason"] != "start_failed":
                arms[0:0] = self.structural_arms({**run, "start_kind": arm.start}, c.cfg.budget - used)
        lib = None if cond in UNSTEERED else sorted(s["name"] for s in library)
        curve = budget_curve(trajectory, c.cfg.budget, lambda key: _search_score(c.store.get_evaluation(key)))
        best = max((a for a in done if a.get("best_eval_key")), key=lambda a: a["best_score"] or 0.0, default=None)
        sources = {id(a): a.pop("_source", None) for a in done}  # the kernels stay in the store, not in the row
        if best is None:
            why = "; ".join(f"{a['arm']}: {a.get('stop_reason') or a.get('skipped')} {a.get('start_error') or ''}".strip()
                            for a in done)
            return self.row(cond, "FAILED", f"no arm produced a correct kernel ({why})", arms=done,
                            evaluations_used=used, budget=c.cfg.budget, library=lib, skills_used=[], budget_curve=curve)
        best["chosen"] = True
        return self.finalize(cond, sources[id(best)], tuple(best["best_flags"]), arms=done, used=used, library=lib,
                             budget_curve=curve)

    def finalize(self, cond: str, source: str, flags: tuple[str, ...], arms: list, used: int, library,
                 budget_curve: list | None = None) -> dict:
        c = self.ctx
        recs = []
        for k in range(c.cfg.final_rounds):
            res = c.finals.evaluate(k, source, self.wl, flags, self.origin(f"{cond} final round {FIRST_FINAL_ROUND + k}"),
                                    c.replay)
            recs.append(c.store.get_evaluation(res.eval_key))
        base = {"kernel_hash": kernel_hash(source), "produced_hash": kernel_hash(produced_source(source, flags)),
                "flags": list(flags), "final_eval_keys": [r["eval_key"] for r in recs], "arms": arms,
                "evaluations_used": used, "budget": c.cfg.budget if cond != "idiom" else 0, "library": library,
                "correctness": _correctness(recs), "env": _env(recs),
                "skills_used": _skills_used(arms, c.library, c.sources),
                **({"budget_curve": budget_curve} if budget_curve is not None else {})}
        bad = [(FIRST_FINAL_ROUND + k, r) for k, r in enumerate(recs) if r["status"] != "PASSED"]
        if bad:
            rnd, r = bad[0]
            why = f"final round {rnd}: {r['status']}: {r['result'].get('error_kind') or ''} " \
                  f"{_last_line(r['result'].get('error_message'))}".strip()
            return self.row(cond, "FAILED", why, **base)
        by_shape: dict[str, list[dict]] = {}
        order = []
        for r in recs:
            for tm in r["result"]["timing"]:
                sid = _shape_id(tm["shape"])
                if sid not in by_shape:
                    order.append(sid)
                by_shape.setdefault(sid, []).append(tm)
        per_shape = [{"shape": json.loads(s), **stats.shape_speedup(by_shape[s])} for s in order]
        if not per_shape:
            return self.row(cond, "FAILED", "the final evaluation holds no timing of a benchmark shape", **base)
        inst = stats.combine_shapes(per_shape)
        lat = [p["latency_us"] for p in per_shape]
        refs = [p["reference_us"] for p in per_shape]
        return self.row(cond, "PASSED", None, speedup=inst["speedup"], ci95=inst["ci95"], log_var=inst["log_var"],
                        df=inst["df"], n_trials=inst["n_trials"], latency_us=stats.geo(lat), reference_us=stats.geo(refs),
                        per_shape=[{k: v for k, v in p.items() if k not in ("log_mean", "log_var")} for p in per_shape],
                        **base)


def _arm_record(name: str, start_kind: str, run: dict) -> dict:
    steps = run["steps"]
    start = steps[0] if steps else {}
    kept = [s for s in steps if s.get("accepted") and s["kind"] == "candidate"]
    rec = {"arm": name, "start": start_kind, "apply_run": run["run_id"], "materializers": run["config"]["materializers"],
           "budget": run["config"]["budget_steps"], "evaluated": run["summary"]["evaluated"],
           "stop_reason": run["stop_reason"], "kept": run["summary"]["kept"],
           "gate_evaluations": {"start": 1 if start.get("eval_key") else 0,
                                "candidates": run["summary"]["evaluated"],
                                "re_measures": sum(1 for s in steps if s.get("remeasure")),
                                "baked": sum(1 for s in steps if s.get("baked")),
                                **_refused(steps)},
           "steps": [{k: s.get(k) for k in ("seq", "backend", "skill", "config", "status", "accepted", "steered_by")
                      if s.get(k) is not None} for s in steps if s["kind"] != "start"],
           "best_hash": run.get("best_hash"), "best_flags": (run["summary"].get("best_flags") or []),
           "best_score": None, "_source": run.get("best_source")}
    if run["stop_reason"] == "start_failed":
        rec["start_error"] = f"(start {start.get('status')}: {_last_line(start.get('error'))})"
        return rec
    key = start.get("eval_key")
    if kept:
        last = kept[-1]
        if (last.get("baked") or {}).get("status") == "PASSED":
            key = last["baked"]["eval_key"]
        else:  # a re-measured winner; a rewrite kept because it passed has only its own evaluation
            key = (last.get("remeasure") or {}).get("eval_key") or last["eval_key"]
    rec["best_eval_key"] = key
    return rec


def budget_curve(steps: list[dict], budget: int, score) -> list[float | None]:
    """The best speedup a search had reached after 0, 1, ... `budget` gated candidates: entry n is the
    highest search measurement (`score(eval_key)`: _search_score, the geomean over benchmark shapes of
    the reference's time over the kernel's, in the search's own worker) among the kernels that passed
    the gate by then, its arms' start kernels included (they cost no candidate; an arm's start counts
    from where that arm began). `steps` are the condition's apply steps, arm after arm; None until a
    kernel passed. Read from the recorded trajectory: no evaluation is made for it."""
    reached: list[tuple[int, float]] = []
    n = 0
    for st in steps:
        if st["kind"] == "candidate" and spends_budget(st):
            n += 1
        elif st["kind"] != "start":
            continue
        if st.get("status") == "PASSED" and st.get("eval_key"):
            sc = score(st["eval_key"])
            if sc is not None:
                reached.append((n, sc))
    return [max((sc for k, sc in reached if k <= m), default=None) for m in range(budget + 1)]


def _refused(steps: list[dict]) -> dict:
    """{"refused": n} for an arm whose sweep points nvcc refused n times (not counted in its budget);
    {} when none was, as in the runs recorded before such points were left out of the budget."""
    n = sum(1 for s in steps if s["kind"] == "candidate" and not spends_budget(s))
    return {"refused": n} if n else {}


def _search_score(rec: dict | None) -> float | None:
    """An arm's best as the search measured it: the geomean over benchmark shapes of the gate's
    speedup over the reference (None without timing)."""
    sp = [t.get("speedup_vs_vendor") for t in ((rec or {}).get("result") or {}).get("timing") or []]
    return stats.geo(sp) if sp and all(x for x in sp) else None


def _correctness(recs: list[dict]) -> dict:
    rounds = []
    for k, r in enumerate(recs):
        corr = r["result"].get("correctness") or []
        rounds.append({"round": FIRST_FINAL_ROUND + k, "status": r["status"], "shapes_checked": len(corr),
                       "shapes_passed": sum(1 for c in corr if c.get("ok")),
                       "benchmark": f"{sum(1 for c in corr if c.get('ok') and c.get('kind') == 'benchmark')}/"
                                    f"{sum(1 for c in corr if c.get('kind') == 'benchmark')}",
                       "probe": f"{sum(1 for c in corr if c.get('ok') and c.get('kind') == 'probe')}/"
                                f"{sum(1 for c in corr if c.get('kind') == 'probe')}",
                       "failed": [{"kind": c.get("kind"), "shape": c.get("shape")} for c in corr if not c.get("ok")][:8]})
    seeds = recs[0]["request"].get("seeds") if recs else []
    return {"seeds": seeds, "shapes": "benchmark and probe" if recs and all(
        any(s["kind"] == "probe" for s in r["request"].get("shapes", [])) for r in recs) else "benchmark",
            "rounds": rounds}


def _env(recs: list[dict]) -> dict | None:
    for r in recs:
        if r.get("env"):
            return {k: r["env"].get(k) for k in ENV_KEYS if r["env"].get(k) is not None}
    return None


def _skills_used(arms: list[dict], library: list[dict], sources: dict[str, list[str]]) -> list[dict]:
    """Every skill a search condition used: it named a value of a gated sweep point, or its rules
    (llm) rewrite was gated; `kept` when a kept step used it; with the workloads it was mined from."""
    ids = {s["name"]: s["skill_id"] for s in library}
    used: dict[str, dict] = {}
    for a in arms:
        for st in a.get("steps", []):
            if st.get("status") in ("NO_REWRITE", "MATERIALIZE_ERROR", "NO_KERNEL"):
                continue
            if a["arm"] in ("random", "rewrites") and st.get("backend") == "rules":
                continue  # the random and structural controls' rewrites come from no skill
            names = st.get("steered_by") or ([st["skill"]] if st.get("skill") else [])
            how = "steered a sweep point" if st.get("backend") == "sweep" else f"{st.get('backend')} rewrite gated"
            for n in names:
                u = used.setdefault(n, {"skill": n, "skill_id": ids.get(n), "uses": set(), "kept": False,
                                        "mined_from": sources.get(ids.get(n), [])})
                u["uses"].add(f"{a['arm']}: {how}")
                u["kept"] = u["kept"] or bool(st.get("accepted"))
    return [{**u, "uses": sorted(u["uses"])} for _, u in sorted(used.items())]


# -- the run ------------------------------------------------------------------------------------------

class _Run:
    def __init__(self, store, gate, instances, cfg, root, replay, llm, llm_reason, progress):
        self.store, self.gate, self.instances, self.cfg = store, gate, instances, cfg
        self.root = Path(root)
        self.root_text = settings.display_path(root)
        self.replay, self.llm, self.llm_reason, self.progress = replay, llm, llm_reason, progress
        self.library = store.skills()
        self.sources = skill_sources(store, self.library)
        self.run_id = run_id_for(instances, cfg, self.library)
        self.finals = _FinalGates(gate, cfg.final_rounds)

    def llm_for_instance(self):
        """The llm materializer for one instance: the run's backend, a spending budget of its own
        (`budget_usd` is per instance; one materializer for the whole run would let the first
        instances spend what the later ones were given)."""
        from klineage.apply.llm import LLMMaterializer
        m = self.llm
        return LLMMaterializer(m.backend, budget_usd=m.budget_usd, model=m.model, max_tokens=m.max_tokens)

    def foreign(self, family: str) -> list[dict]:
        return foreign_library(self.library, self.sources, tuple(self.cfg.foreign.get(family, ())))

    def step_progress(self, inst: str, cond: str):
        if self.progress is None:
            return None
        return lambda step: self.progress("step", instance=inst, condition=cond, step=step)


def run_heldout(store, gate: Gate, instances: list[Instance], cfg: HeldoutConfig, root: Path, replay: bool = False,
                llm=None, llm_reason: str | None = None, progress=None, corpus: dict | None = None) -> dict:
    """Run (or resume) the check; returns the report (klineage.heldout.report schema). Raises
    NoDeviceError when a live evaluation is needed and no GPU exists; a replay that lacks records
    gives rows with status MISSING (listed in the report), never an invented figure. `corpus` is the
    expert corpus the memorization audit compares with (klineage.heldout.records; default: as it is now)."""
    from klineage.heldout.report import build_report
    run = _Run(store, gate, instances, cfg, root, replay, llm, llm_reason, progress)
    store.put_heldout_run({"run_id": run.run_id, "root": run.root_text, "config": cfg.to_dict(), "status": "running"})
    done = {(r["instance"], r["condition"]) for r in store.heldout_results(run.run_id) if r["status"] in COMPLETE}
    try:
        for inst in instances:
            ir = _InstanceRun(run, inst)
            todo = [c for c in cfg.conditions if (inst.name, c) not in done]
            if not todo:
                continue
            try:
                ir.decide_reference()
            except ReplayMissingError as exc:
                for cond in todo:
                    _put(run, ir.row(cond, "MISSING", str(exc)))
                continue
            for cond in todo:
                if cond == "llm" and run.llm is None:
                    row = ir.row(cond, "NOT_RUN", llm_reason or "not run: no model configured")
                else:
                    try:
                        row = ir.idiom() if cond == "idiom" else ir.search(cond)
                    except ReplayMissingError as exc:
                        row = ir.row(cond, "MISSING", str(exc))
                _put(run, row)
    finally:
        run.finals.close()
    rows = store.heldout_results(run.run_id)
    report = build_report(store, run.run_id, run.root, cfg, instances, rows, run.library, run.sources, corpus)
    status = "missing" if report["missing"] else "complete"
    store.put_heldout_run({"run_id": run.run_id, "root": run.root_text, "config": cfg.to_dict(), "status": status,
                           "report": report})
    return report


def _put(run: _Run, row: dict) -> None:
    run.store.put_heldout_result(run.run_id, row)
    if run.progress:
        run.progress("row", row=row)


def write_outputs(report: dict, store, out: Path) -> dict:
    """Write out/heldout.json, out/heldout.txt and out/kernels/<instance>/<condition>.cu (each final
    kernel as it ran, sweep flags written in); returns their paths."""
    from klineage.report.text import format_heldout
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "heldout.json", "text": out / "heldout.txt", "kernels": []}
    paths["json"].write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    paths["text"].write_text(format_heldout(report) + "\n")
    for inst in report["instances"]:
        for cond, row in inst["conditions"].items():
            k = store.get_kernel(row["kernel_hash"]) if row.get("kernel_hash") else None
            if k is None:
                continue
            p = out / "kernels" / inst["instance"] / f"{cond}.cu"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(produced_source(k["source"], row.get("flags")))
            paths["kernels"].append(p)
    return paths
