"""The search engine every apply run is a configuration of: strategies that produce candidates, a
budget, and the state of one search (klineage.apply.loop.apply builds it from an ApplyConfig; each
held-out condition is an ApplyConfig, klineage.heldout.run).

  Strategy     one way of producing candidates for the current best kernel:
                 StructuralRewrites  a shape rewriter's mechanism (the library's, or the random
                                     control's seeded order); when it has one, that is the round
                 RetrievedRewrites   the next retrieved skill not tried on the best, written by the
                                     rules backend (its family's reoptimize) or by the llm
                 SteeredSweep        the next points of the best's sweep order, steered by the
                                     retrieved skills (the foreign control: a foreign library)
                 RandomSweep         the whole grid in one seeded order, the library unused
  Budget       steps (gated candidates, spends_budget), wall seconds, dollars
               (the llm materializer's own limit, which stops the search when spent)
  Search       the loop state: best kernel, steps, what was tried, the sweep's rounds; `run` gates
               each round's candidates in strategy order and keeps a faster one only after a
               re-measure in another worker process.
"""
from __future__ import annotations

import collections
import random
import time
from dataclasses import dataclass, field, replace

from klineage.apply.materialize import MAX_SWEEP, Candidate, bake, tunables
from klineage.apply.retrieve import retrieve, target_facts
from klineage.gate.gate import Gate, GateResult, kernel_hash
from klineage.gate.compare import compare_timing


# -- the pieces every strategy reads ------------------------------------------------------------------

@dataclass
class Best:
    """The search's current best kernel: its source, gate result, sweep flags and the skills kept."""
    source: str
    result: GateResult
    flags: tuple[str, ...] = ()
    history: list[str] = field(default_factory=list)  # skill names kept, in order

    @property
    def key(self) -> str:
        """What was tried on this best is keyed by its source and flags."""
        return kernel_hash(self.source) + "|" + ",".join(self.flags)


def beats_best(new: GateResult, best: GateResult, noise: float) -> tuple[bool, list[dict]]:
    """(faster beyond the noise in every trial of every case, the cases of compare_timing)."""
    cases = compare_timing(new, best)
    ok = bool(cases) and all(all(r > 1 + max(noise, c["spread"]) for r in c["trial_speedups"]) for c in cases)
    return ok, cases


def gate_for(gate: Gate, flags: tuple[str, ...], round_: int = 1) -> Gate:
    """The gate of a candidate: its sweep flags added; round 2 (a re-measure) in the repeat worker of
    `gate`, a process other than the search's."""
    if round_ != 1:
        gate = gate.repeat(round_)
    if not flags:
        return gate
    return gate.with_config(replace(gate.config, extra_flags=tuple(gate.config.extra_flags) + tuple(flags)))


def gate_feedback(res: GateResult) -> str:
    return f"{res.status.value}: {res.error_kind or ''} {res.error_message or ''}".strip()


def spends_budget(step: dict) -> bool:
    """Whether a step counts against budget_steps: every gated candidate but a sweep point nvcc refused
    (nvcc_error: not a compile that timed out or ran out of memory, which says nothing of the point).
    Such a point is a hole in the declared space (the kernel's own static checks reject that
    configuration: attention's rows per warp, gemm's 256 x 256 tile), not a kernel: nothing ran, and a
    condition that happens to propose more of them, the random control drawing blindly from the grid
    or a card naming another kernel's tile, must not lose evaluations to it."""
    return step["kind"] == "candidate" and not (step["backend"] == "sweep" and step["status"] == "COMPILE_ERROR"
                                                and step.get("error_kind") == "nvcc_error")


def family(source: str) -> str:
    """The kernel up to the values of its tunables: a baked sweep winner is of its start's family."""
    return kernel_hash(bake(source, {n: 0 for n in tunables(source)}))


def config_key(source: str, point: dict) -> tuple:
    """A kernel family and the configuration a sweep point gives it: its tunables' defaults with the
    point applied (a baked winner and the flags that gave it are the same configuration)."""
    return config_keys(source)(point)


def config_keys(source: str):
    """config_key of `source` as a function of the point: the family and tunables read once."""
    fam, tun = family(source), tunables(source)
    return lambda point: (fam, tuple(sorted({**tun, **point}.items())))


def is_structural(mechanism: str) -> bool:
    """Whether the rules backend's queue passes `mechanism` over: no reoptimize in its family. A shape
    rewriter's skills come through next_structural instead, first, where one recognises the kernel
    (so a kernel no shape rewriter reads is searched as it was without them)."""
    from klineage.mechanisms import registry
    m = registry().get(mechanism)
    return m is None or bool(m.STRUCTURAL)


def structural_order(spec: dict | None) -> list[str]:
    """The mechanisms the random control's structural rewrites take, in its seeded order: every one a
    shape rewriter adds (sorted, then shuffled by random.Random(seed))."""
    from klineage.mechanisms.shapes import rewriters
    names = sorted({m for rw in rewriters() for m in rw.mechanisms})
    random.Random((spec or {}).get("seed", 0)).shuffle(names)
    return names


def next_structural(cfg, retrieval: dict, tried: set, bh: str, source: str, wl) -> dict | None:
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


def library_row(skills: list[dict], entry: dict) -> dict:
    return next(s for s in skills if s["skill_id"] == entry["skill_id"])


def retrieved_skills(skills: list[dict], retrieval: dict) -> list[dict]:
    """The library rows of a retrieval's candidates, in rank order (what steers a sweep)."""
    return [library_row(skills, c) for c in retrieval["candidates"]]



# -- the engine ----------------------------------------------------------------------------------------

class Stop(Exception):
    """The search ends now, for `reason` (one of klineage.apply.loop.STOPS)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class Budget:
    """What a search may spend: `steps` candidates that count (spends_budget), `seconds` of wall
    clock (None: no limit) and `usd` (None: no limit; enforced by the llm materializer, whose
    BudgetExhausted ends the search as budget_usd)."""
    steps: int
    usd: float | None = None
    seconds: float | None = None
    t0: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self, used: int) -> bool:
        """Whether another candidate may be gated after `used` counted ones."""
        return used < self.steps

    def stop(self, used: int) -> str | None:
        """The stop reason a new round meets, or None while steps and time are left."""
        if not self.left(used):
            return "budget_steps"
        if self.seconds is not None and self.elapsed() >= self.seconds:
            return "budget_time"
        return None


@dataclass
class Pending:
    """A candidate of a round: made already (a sweep point), or a retrieval entry to materialize."""
    strategy: "Strategy"
    cand: Candidate | None = None
    entry: dict | None = None


class Strategy:
    """One way of producing candidates. `queue(search)` gives this round's; `batch`: every one of
    them is gated before the fastest is kept (a sweep), else the first faster one is kept at once
    (`keeps_passing`: the first that passes, faster or not)."""
    backend = ""
    batch = False
    keeps_passing = False
    materializer = None

    def queue(self, search: "Search") -> list[Pending]:
        raise NotImplementedError


class StructuralRewrites(Strategy):
    """A shape rewriter's next mechanism for the best, alone in its round (next_structural); nothing
    without a `structural` spec. With "keep": "passing" in the spec, a rewrite that passes the gate
    becomes the best whether or not it is faster (`keeps_passing`)."""
    backend = "rules"

    def __init__(self, materializer, keeps_passing: bool = False):
        self.materializer, self.keeps_passing = materializer, keeps_passing

    def queue(self, s: "Search") -> list[Pending]:
        entry = next_structural(s.cfg, s.retrieval, s.tried, s.best.key, s.best.source, s.wl)
        return [] if entry is None else [Pending(self, entry=entry)]


class RetrievedRewrites(Strategy):
    """The highest-ranked retrieved skill not tried on the best, written by `materializer` (rules:
    skills without a forward rewrite are passed over and listed; `library=False`, the random
    control's rules: none)."""

    def __init__(self, backend: str, materializer, library: bool = True):
        self.backend, self.materializer, self.library = backend, materializer, library

    def queue(self, s: "Search") -> list[Pending]:
        for c in (s.retrieval["candidates"] if self.library else []):
            if (s.best.key, self.backend + c["skill_id"]) in s.tried:
                continue
            if self.backend == "rules" and is_structural(c["mechanism"]):
                s.structural.add(c["name"])  # no forward rewrite exists: only the llm backend can write it
                continue
            return [Pending(self, entry=c)]
        return []


class SteeredSweep(Strategy):
    """A round of the best's sweep order not gated yet (klineage.apply.materialize.SweepMaterializer):
    `rounds` rounds per kernel family; a best whose order is spent is not swept again."""
    backend = "sweep"
    batch = True

    def __init__(self, materializer, rounds: int = 1):
        self.materializer, self.rounds = materializer, rounds

    def spent(self, points: list[Candidate]) -> bool:
        """Whether a round of `points` spends the kernel's order (fewer than a full round)."""
        return len(points) < MAX_SWEEP - 1

    def queue(self, s: "Search") -> list[Pending]:
        bh, fam = s.best.key, family(s.best.source)
        if bh in s.exhausted or s.rounds[fam] >= max(1, self.rounds):
            return []
        # a round: the next points of this kernel's sweep order not gated yet; a round that keeps no
        # winner is followed, rounds and budget allowing, by the next ones
        key_of = config_keys(s.best.source)  # the candidates' source is the best's
        pts = self.materializer.propose_all(retrieved_skills(s.skills, s.retrieval), s.best.source, s.wl,
                                            skip=lambda p: key_of(p) in s.swept)
        if self.spent(pts):
            s.exhausted.add(bh)
        keyed = [(k, c) for k, c in ((key_of(c.config), c) for c in pts) if k not in s.swept]
        if keyed:
            s.rounds[fam] += 1
        s.swept.update(k for k, _ in keyed)
        return [Pending(self, cand=c) for _, c in keyed]


class RandomSweep(SteeredSweep):
    """The random control's sweep (RandomSweepMaterializer): its whole seeded order in one round, the
    budget cutting it; the best's order is spent at once."""

    def spent(self, points: list[Candidate]) -> bool:
        return True


class Search:
    """The state of one apply run and its loop. `plan()` gives the strategies: leaders, one of which,
    when it has a candidate, makes the round alone, and the others, queued in order."""

    def __init__(self, store, gate, wl, skills, cfg, run: dict, budget: Budget, plan, llm=None, replay: bool = False,
                 progress=None, bottleneck: dict | None = None):
        self.store, self.gate, self.wl, self.skills, self.cfg = store, gate, wl, skills, cfg
        self.run_row, self.run_id, self.budget = run, run["run_id"], budget
        self.plan = plan  # () -> (leaders, strategies), made once the start kernel passed
        self.leaders: list[Strategy] = []
        self.strategies: list[Strategy] = []
        self.llm, self.replay, self.progress = llm, replay, progress
        self.steps: list[dict] = []
        self.structural: set[str] = set()  # skills the rules backend cannot write (no forward rewrite exists)
        self.tried: set[tuple[str, str]] = set()  # (best key, backend + skill id) already tried
        self.rounds: dict[str, int] = collections.Counter()  # sweep rounds per kernel family
        self.exhausted: set[str] = set()  # best kernels whose sweep order is spent (the random control's: at once)
        self.swept: set[tuple] = set()  # the configurations the sweep has gated (or started from)
        self.feedback: str | None = None
        self.retrieval, self.retrieved_for = None, None
        self.first = self.best = None
        self.bottleneck = bottleneck  # assumed while the best has no gate result (a plan: klineage.apply.loop.plan_first)
        self.passed: GateResult | None = None  # the last candidate that passed the gate

    # -- the record ---------------------------------------------------------------------------------
    def record(self, step: dict) -> None:
        step["seq"] = len(self.steps)
        self.steps.append(step)
        self.store.put_apply_step(self.run_id, step)
        if self.progress:
            self.progress(step)

    def evaluated(self) -> int:
        return sum(1 for st in self.steps if spends_budget(st))

    def finish(self, reason: str) -> dict:
        best, retrieval = self.best, self.retrieval
        summary = {"stop_reason": reason, "steps": len(self.steps), "evaluated": self.evaluated(),
                   "kept": best.history if best else [],
                   "spent_usd": round(getattr(self.llm, "spent_usd", 0.0) or 0.0, 6),
                   "wall_s": round(self.budget.elapsed(), 3)}
        if best is not None:
            summary["speedup_vs_start"] = [
                {"shape": c["shape"], "start_us": c["simpler_us"], "best_us": c["richer_us"], "speedup": c["speedup"]}
                for c in compare_timing(best.result, self.first)]
            summary["best_flags"] = list(best.flags)
        summary["rules_skipped_structural"] = sorted(self.structural)
        if retrieval is not None:
            summary["excluded"] = [{"name": e["name"], "reasons": e["reasons"]} for e in retrieval["excluded"]]
            summary["target"] = retrieval["target"]
        out = {**self.run_row, "best_hash": kernel_hash(best.source) if best else None, "stop_reason": reason,
               "summary": summary}
        self.store.put_apply_run(out)
        out["steps"] = list(self.steps)
        out["best_source"] = best.source if best else None
        return out

    # -- the loop -----------------------------------------------------------------------------------
    def run(self, start: str, start_origin: str) -> dict:
        try:
            self.begin(start, start_origin)
            while True:
                self.round()
        except Stop as stop:
            return self.finish(stop.reason)

    def begin(self, start: str, start_origin: str) -> None:
        first = self.gate.evaluate(start, self.wl, origin=start_origin, replay=self.replay)
        self.record({"kind": "start", "backend": "start", "skill_id": None, "skill": None,
                     "kernel_hash": first.kernel_hash, "eval_key": first.eval_key, "status": first.status.value,
                     "accepted": first.passed, "timing": first.timing, "note": "the start kernel",
                     "error": None if first.passed else gate_feedback(first)})
        if not first.passed:
            raise Stop("start_failed")
        self.first, self.best = first, Best(start, first)
        self.swept.add(config_key(start, {}))
        self.leaders, self.strategies = self.plan()

    def retrieve(self) -> None:
        """Retrieve on the best (facts and ranking change only with the best kernel)."""
        bh = self.best.key
        if self.retrieval is None or self.retrieved_for != bh:
            facts = target_facts(self.wl, self.best.source, self.cfg.arch, self.best.result)
            if self.best.result is None and self.bottleneck is not None:
                facts.bottleneck = dict(self.bottleneck)
            self.retrieval, self.retrieved_for = retrieve(self.skills, facts, admission=self.cfg.admission), bh

    def queue(self) -> list[Pending]:
        for st in self.leaders:
            got = st.queue(self)
            if got:
                return got
        return [p for st in self.strategies for p in st.queue(self)]

    def candidates(self, go=lambda: True):
        """The round's candidates in the order they are gated, (pending, candidate): retrieve on the best,
        queue the strategies, materialize each retrieval entry (a materializer that gives nothing is
        recorded and passed over) while `go()` holds. Stop("no_candidates") when nothing is queued.
        The live round gates what this yields; a plan (klineage.apply.loop.plan_first) takes the first."""
        self.retrieve()
        bh = self.best.key
        queue = self.queue()
        if not queue:
            raise Stop("no_candidates")
        for p in queue:
            if not go():
                break
            cand = p.cand
            if p.entry is not None:
                cand = self.materialize(p, bh)
                if cand is None:
                    continue
            yield p, cand

    def round(self) -> None:
        """One round: retrieve on the best, gate the strategies' candidates, keep a faster one."""
        reason = self.budget.stop(self.evaluated())
        if reason:
            raise Stop(reason)
        batch: list[tuple[dict, Candidate]] = []
        for p, cand in self.candidates(lambda: self.budget.left(self.evaluated())):
            step = self.gate_candidate(p, cand)
            if step is not None and p.strategy.keeps_passing:
                self.adopt(step, cand)
                break
            if step is None or not step["faster"]:
                continue
            if p.strategy.batch:  # every point first; the fastest is the one to keep
                batch.append((step, cand))
            elif self.keep(step, cand):
                break  # retrieve again on the new best (a sweep's winner so far kept first)
        winners = sorted(batch, key=lambda x: -min(min(c["trial_speedups"]) for c in x[0]["vs_best"]))
        for step, cand in winners[:1]:
            self.keep(step, cand)

    def materialize(self, p: Pending, bh: str) -> Candidate | None:
        """The entry's candidate from its strategy's materializer; None (recorded) when it gives none."""
        entry, backend, mat = p.entry, p.strategy.backend, p.strategy.materializer
        self.tried.add((bh, backend + entry["skill_id"]))
        skill = entry.get("skill") or library_row(self.skills, entry)
        def head(status: str) -> dict:
            return {"kind": "materialize", "backend": backend, "skill_id": entry["skill_id"], "skill": entry["name"],
                    "status": status, "accepted": False}
        try:
            got = mat.propose(skill, self.best.source, self.wl, self.feedback)
        except Exception as exc:  # BudgetExhausted, or a backend error: a stop or a recorded step
            from klineage.llm import BudgetExhausted
            if isinstance(exc, BudgetExhausted):
                raise Stop("budget_usd") from exc
            self.record({**head("MATERIALIZE_ERROR"), "note": f"{type(exc).__name__}: {exc}",
                         "terms": entry["terms"]})
            return None
        if not got:
            self.record({**head("NO_REWRITE"), "note": mat.why_not(skill), "terms": entry["terms"]})
            return None
        cand = got[0]
        if not cand.source:  # the model gave no kernel
            self.record({**head("NO_KERNEL"), "note": cand.note, "exchange": cand.exchange,
                         "terms": entry["terms"]})
            self.feedback = cand.note
            return None
        return cand

    def gate_candidate(self, p: Pending, cand: Candidate) -> dict | None:
        """Gate one candidate and record its step; the step when it passed (with `faster`), else None."""
        backend, entry = p.strategy.backend, p.entry
        res = gate_for(self.gate, cand.flags).evaluate(cand.source, self.wl, origin=f"apply {self.run_id} {backend}",
                                                       replay=self.replay)
        step = {"kind": "candidate", "backend": backend, "skill_id": cand.skill_id, "skill": cand.skill,
                "flags": list(cand.flags), "config": cand.config, "kernel_hash": res.kernel_hash,
                "eval_key": res.eval_key, "status": res.status.value, "accepted": False, "note": cand.note,
                "exchange": cand.exchange, "terms": entry["terms"] if entry else None, "timing": res.timing}
        if backend == "sweep":
            step["steered_by"] = list(cand.steered_by)
        if not res.passed:
            self.feedback = gate_feedback(res)
            step["feedback"] = self.feedback
            step["error_kind"] = res.error_kind
            self.record(step)
            return None
        self.feedback = None
        step["faster"], step["vs_best"] = beats_best(res, self.best.result, self.cfg.noise)
        self.record(step)
        self.passed = res
        return step

    def adopt(self, step: dict, cand: Candidate) -> None:
        """Make a candidate that passed the best, faster or not (the structural control's chain: each
        rewrite that passes is kept as an arm of its own); no re-measure decides it."""
        step["accepted"], step["kept_because"] = True, "passed"
        self.best = Best(cand.source, self.passed, cand.flags, self.best.history + [cand.skill or "rewrite"])
        self.store.put_apply_step(self.run_id, step)

    def keep(self, step: dict, cand: Candidate) -> bool:
        """Re-measure a faster candidate in the round-2 worker; make it the best if it is still faster
        (a sweep point is baked into the source and gated as such). Rewrites the step's record."""
        best, wl, run_id = self.best, self.wl, self.run_id
        again = gate_for(self.gate, cand.flags, round_=2).evaluate(cand.source, wl, origin=f"apply {run_id} re-measure",
                                                                  replay=self.replay)
        still, cases2 = beats_best(again, best.result, self.cfg.noise) if again.passed else (False, [])
        step["remeasure"] = {"eval_key": again.eval_key, "status": again.status.value, "vs_best": cases2}
        if still:
            step["accepted"] = True
            name = cand.skill or f"sweep {cand.config}"
            new = Best(cand.source, again, cand.flags, best.history + [name])
            if cand.backend == "sweep":
                source = bake(cand.source, cand.config)
                baked = self.gate.evaluate(source, wl, origin=f"apply {run_id} sweep baked", replay=self.replay)
                step["baked"] = {"eval_key": baked.eval_key, "status": baked.status.value}
                if baked.passed:  # the baked source stands alone; else the flags stay with the kernel
                    new = Best(source, baked, (), new.history)
                if self.rounds[family(new.source)] >= self.cfg.sweep_rounds:
                    self.exhausted.add(new.key)  # no sweep around its own winner
            self.best = new
        self.store.put_apply_step(run_id, step)
        return still
