"""The published baselines, run in our harness: the same gate, the same budget accounting and the
same trajectory records as `apply` (apply_runs / apply_steps, backend `baseline:<method>`), so the
methods compare under one gate and one budget.

  none           iterative refinement: the current best kernel and the last gate feedback, each call
  adaexplore     a memory of failure rules ("You cannot ...", one per distinct failure, with a
                 frequency score; rules scoring >= RULE_MIN enter the prompt) and a small tree search
                 over the kernels kept so far, mixing small edits and whole rewrites
  accelopt       a rolling memory of the last MEMORY slow -> fast pairs (what changed, the speedup)
  expert-source  the expert kernels' sources (expert_kernels/*/expert.cu) in the prompt, no skills

A replay with no record of a kernel makes a NOT_REPLAYED step (listed in the summary's `missing`)
instead of ending the run; the summary's `kept` names each kept step and its kernel.
"""
from __future__ import annotations

import difflib
import hashlib
import json
import random
import re
import time
from dataclasses import asdict
from pathlib import Path

from klineage import settings
from klineage.llm import BudgetExhausted, parse_kernel
from klineage.apply.engine import beats_best, gate_feedback
from klineage.apply.materialize import contract_text
from klineage.errors import ReplayMissingError
from klineage.gate.gate import kernel_hash
from klineage.templates import template_module

METHODS = ("none", "adaexplore", "accelopt", "expert-source")
RULE_MIN = 3
MEMORY = 5
EXPERT_CHARS = 60000  # the expert sources in one prompt, at most


def _templates():
    return template_module(Path(__file__).parent / "prompts", "baseline.j2")


def expert_sources(exclude: str | None = None) -> list[dict]:
    out, used = [], 0
    for p in sorted((settings.repo_root() / "expert_kernels").glob("*/expert.cu")):
        if p.parent.name == exclude:
            continue
        src = p.read_text()
        if used + len(src) > EXPERT_CHARS:
            break
        used += len(src)
        out.append({"name": p.parent.name, "source": src})
    return out


def failure_rule(res) -> str:
    """A 'You cannot ...' rule naming a gate failure class (digits and paths folded, so repeats count)."""
    msg = (res.error_message or "").splitlines()[0] if res.error_message else ""
    msg = re.sub(r"\d+", "N", re.sub(r"\S*/\S+", "FILE", msg))[:120]
    return f"You cannot submit a kernel that ends in {res.status.value} ({res.error_kind or 'error'}: {msg})"


def pair_summary(slow: str, fast: str, speedups: list[float]) -> str:
    d = list(difflib.unified_diff(slow.splitlines(), fast.splitlines(), lineterm="", n=0))
    added = [ln[1:].strip() for ln in d if ln.startswith("+") and not ln.startswith("+++")][:3]
    return f"{min(speedups):.2f}x faster after changing {sum(1 for ln in d if ln[:1] in '+-')} lines, e.g. " + \
        "; ".join(a[:80] for a in added if a)


class Baseline:
    def __init__(self, method: str, llm, seed: int = 0):
        if method not in METHODS:
            raise ValueError(f"unknown baseline method {method!r}: choose one of {', '.join(METHODS)}")
        self.method, self.llm = method, llm
        self.rules: dict[str, int] = {}
        self.pairs: list[str] = []
        self.rng = random.Random(seed)
        self.t = _templates()

    def prompt(self, wl, kernel: str, feedback: str | None, action: str | None) -> tuple[str, str]:
        experts = expert_sources(exclude=wl.name) if self.method == "expert-source" else []
        rules = [r for r, n in sorted(self.rules.items(), key=lambda x: (-x[1], x[0])) if n >= RULE_MIN] \
            if self.method == "adaexplore" else []
        pairs = self.pairs[-MEMORY:] if self.method == "accelopt" else []
        return (str(self.t.prefix(self.method, experts)),
                str(self.t.variable(self.method, kernel, contract_text(wl), feedback, rules, pairs, action)))


def run_baseline(method: str, store, gate, wl, start: str, origin: str, llm, max_iters: int = 20,
                 budget_s: float | None = None, noise: float = 0.01, replay: bool = False, seed: int = 0) -> dict:
    """Run one method to its budget; the trajectory is stored like an apply run's."""
    b = Baseline(method, llm, seed)
    cfg = {"method": method, "max_iters": max_iters, "budget_usd": llm.budget_usd, "model": llm.model, "seed": seed}
    run_id = hashlib.sha256(json.dumps({"w": wl.content_hash, "s": kernel_hash(start), "c": cfg},
                                       sort_keys=True).encode()).hexdigest()[:16]
    run = {"run_id": run_id, "workload": wl.name, "start_hash": kernel_hash(start), "config": cfg}
    store.put_apply_run(run)
    t0 = time.monotonic()
    steps: list[dict] = []

    def record(step):
        step["seq"] = len(steps)
        steps.append(step)
        store.put_apply_step(run_id, step)

    missing: list[str] = []

    def evaluate(src: str, where: str):
        """The gate's result, or None (listed in `missing`) when a replay has no record of it."""
        try:
            return gate.evaluate(src, wl, origin=where, replay=replay)
        except ReplayMissingError:
            missing.append(kernel_hash(src))
            return None

    first = evaluate(start, origin)
    if first is None:
        record({"kind": "start", "backend": f"baseline:{method}", "status": "NOT_REPLAYED", "accepted": False,
                "kernel_hash": kernel_hash(start)})
    else:
        record({"kind": "start", "backend": f"baseline:{method}", "status": first.status.value,
                "accepted": first.passed, "kernel_hash": first.kernel_hash, "eval_key": first.eval_key,
                "timing": first.timing})
    reason = "start_failed"
    best_src, best_res = start, first
    pool = [(start, first)]  # adaexplore's tree: every kernel kept so far
    feedback = None
    if first is not None and first.passed:
        reason = "budget_steps"
        for i in range(max_iters):
            if budget_s is not None and time.monotonic() - t0 >= budget_s:
                reason = "budget_time"
                break
            action, base_src, base_res = None, best_src, best_res
            if method == "adaexplore":
                action = "edit" if i % 2 == 0 else "rewrite"
                if len(pool) > 1 and b.rng.random() < 0.3:
                    base_src, base_res = b.rng.choice(pool)
            try:
                ex = llm.ask(*b.prompt(wl, base_src, feedback, action), parse=parse_kernel)
            except BudgetExhausted:
                reason = "budget_usd"
                break
            step = {"kind": "candidate", "backend": f"baseline:{method}", "skill": None, "action": action,
                    "exchange": asdict(ex), "accepted": False, "note": action or "refine"}
            if ex.kernel is None:
                step.update(status="NO_KERNEL", feedback=ex.error)
                feedback = f"your answer had no kernel: {ex.error}"
                record(step)
                continue
            res = evaluate(ex.kernel, f"baseline {run_id}")
            if res is None:
                step.update(status="NOT_REPLAYED", kernel_hash=kernel_hash(ex.kernel),
                            feedback="no recorded evaluation of this kernel")
                record(step)
                continue
            step.update(status=res.status.value, kernel_hash=res.kernel_hash, eval_key=res.eval_key, timing=res.timing)
            if not res.passed:
                feedback = gate_feedback(res)
                step["feedback"] = feedback
                b.rules[failure_rule(res)] = b.rules.get(failure_rule(res), 0) + 1
                record(step)
                continue
            faster, cases = beats_best(res, best_res, noise)
            step["vs_best"] = cases
            feedback = ("faster: " if faster else "correct but not faster than the best: ") + \
                ", ".join(f"{c['speedup']:.3f}x" for c in cases)
            if faster:
                step["accepted"] = True
                b.pairs.append(pair_summary(best_src, ex.kernel, [min(c["trial_speedups"]) for c in cases]))
                best_src, best_res = ex.kernel, res
                pool.append((ex.kernel, res))
            record(step)
    kept = [f"step {s['seq']} {s['kernel_hash'][:12]}" for s in steps if s["kind"] == "candidate" and s["accepted"]]
    summary = {"stop_reason": reason, "steps": len(steps), "calls": sum(1 for s in steps if s["kind"] == "candidate"),
               "spent_usd": round(llm.spent_usd, 6), "kept": kept, "rules": b.rules, "memory": b.pairs[-MEMORY:],
               "missing": missing}
    out = {**run, "best_hash": kernel_hash(best_src), "stop_reason": reason, "summary": summary}
    store.put_apply_run(out)
    return {**out, "steps": steps, "best_source": best_src}
