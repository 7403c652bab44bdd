"""The backward walk: from an expert kernel, remove one mechanism at a time behind the gate.

At each state the proposers are asked in order; the first candidate that passes all of
  1. the audit (exactly one mechanism gone at the declared locus, all others kept),
  2. the gate (compiles, correct on every benchmark and probe shape; it may be slower),
  3. forward re-derivation (reoptimize on the simpler kernel, or the next version) restoring the
     same features and reaching >= `min_rederive_ratio` of the richer kernel's speed in every trial
is accepted; every failed candidate is stored as a rejection with its evidence, and is not tried
again in this lineage. Search order: proposers in the given order; within `rules`, the families of
klineage.mechanisms.ORDER (dependents before what they depend on), loci in source order. The walk is
deterministic: equal inputs (kernel, workload, proposers, limits, recorded evaluations) give equal
lineages. It stops with one of
  complete         no mechanism a detector knows is left,
  no_proposal      mechanisms remain that no proposer could remove (listed by name), or a candidate
                   was refused at the last state (a ladder's next rung),
  step_limit       `max_steps` steps were accepted,
  rejection_limit  `max_rejections` candidates failed the gate, audit or re-derivation,
  start_failed     the starting kernel itself does not pass the gate.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Callable

from klineage.errors import ReplayMissingError
from klineage.gate.compare import compare_timing
from klineage.gate.gate import Gate, GateResult, kernel_hash
from klineage.errors import BudgetExhausted
from klineage.mechanisms.audit import audit_ladder_step, audit_rederived, audit_rules
from klineage.lineage.proposal import Proposal
from klineage.mechanisms import detect_all, order, registry
from klineage.mechanisms.base import Feature
from klineage.workload import Workload

WALK_VERSION = "1"


@dataclass(frozen=True)
class Limits:
    max_steps: int = 64
    max_rejections: int = 48
    min_rederive_ratio: float = 0.99


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def rederive_trials(richer: GateResult, rederived: GateResult, min_ratio: float) -> list[dict]:
    """The forward re-derivation check, per benchmark shape (the two results' timing in order): the
    speed ratio richer / re-derived of each timing trial (below 1: the re-derived kernel is slower)
    and `ok`, whether every one of them reaches `min_ratio`. A step is re-derived when every shape
    is ok."""
    trials = []
    for t_orig, t_red in zip(richer.timing, rederived.timing):
        ratios = [o / r for o, r in zip(t_orig["trial_medians_us"], t_red["trial_medians_us"])]
        trials.append({"shape": t_orig["shape"], "speed_ratios": ratios, "ok": min(ratios) >= min_ratio})
    return trials


def _env(res: GateResult) -> dict:
    e = res.env or {}
    return {k: e.get(k) for k in ("gpu", "driver", "nvcc", "torch", "capability")}


class Walker:
    def __init__(self, gate: Gate, workload: Workload, proposers: list, limits: Limits = Limits(),
                 replay: bool = False, progress: Callable[..., None] | None = None, rules_loci: str = "identity"):
        self.gate, self.workload, self.proposers, self.limits = gate, workload, proposers, limits
        self.rules_loci = rules_loci  # how the rules audit matches identical loci (audit_rules' `loci`)
        self.replay = replay
        self.progress = progress or (lambda *a, **k: None)
        self.missing: list[dict] = []
        self.known = {m.NAME for m in registry().values() if m.DETECTABLE}
        self.arch = gate.config.arch  # the target the audit's compiler evidence is built for
        self.evaluations: list[GateResult] = []
        self.launches: list[dict] = []  # launch configurations past the default each step is checked at

    def evaluate(self, source: str, origin: str | None, launch: dict | None = None) -> GateResult | None:
        """The gate's result (at launch configuration `launch`, else the workload's default), or None
        (listed in self.missing) when replay has no record of it."""
        wl = self.workload if launch is None else self.workload.with_launch(launch)
        try:
            res = self.gate.evaluate(source, wl, origin=origin, replay=self.replay)
        except ReplayMissingError as e:
            self.missing.append({"kernel_hash": kernel_hash(source), "workload": wl.name, "origin": origin,
                                 **({"launch": launch} if launch is not None else {}), "message": str(e)})
            self.progress("missing", kernel_hash=kernel_hash(source))
            return None
        self.evaluations.append(res)
        self.progress("evaluated", status=res.status.value, source=res.source)
        return res

    def lineage_id(self, start_source: str) -> str:
        return _digest({"walk": WALK_VERSION, "workload": self.workload.content_hash,
                        "start": kernel_hash(start_source), "proposers": [p.name for p in self.proposers],
                        "limits": asdict(self.limits), "order": list(order()),
                        "gate": {"seeds": list(self.gate.config.seeds), "timing": self.gate.config.timing,
                                 "arch": self.gate.config.arch}})

    def run(self, start_source: str, origin: str | None = None) -> dict:
        lid = self.lineage_id(start_source)
        lin = {"lineage_id": lid, "workload_name": self.workload.name, "workload_hash": self.workload.content_hash,
               "proposer": "+".join(p.name for p in self.proposers), "start_hash": kernel_hash(start_source),
               "config": {"limits": asdict(self.limits), "proposers": [p.name for p in self.proposers],
                          "order": list(order()), "origin": origin, "walk_version": WALK_VERSION},
               "states": [], "transitions": [], "rejections": [], "remaining": [], "missing": self.missing}
        cur_src, cur_origin = start_source, origin
        cur_res = self.evaluate(cur_src, origin)
        cur_feats = detect_all(cur_src)
        lin["states"].append(self._state(0, cur_src, cur_res, cur_feats, origin))
        self.launches = self._start_launches(lin, cur_src, cur_res, origin)
        if cur_res is None or not cur_res.passed:
            lin["termination"] = "start_failed"
            lin["remaining"] = sorted({f.mechanism for f in cur_feats})
            lin["start_status"] = cur_res.status.value if cur_res else "NOT_REPLAYED"
            return lin
        tried: set = set()
        gate_rejections = 0
        while True:
            if len(lin["transitions"]) >= self.limits.max_steps:
                lin["termination"] = "step_limit"
                break
            if gate_rejections >= self.limits.max_rejections:
                lin["termination"] = "rejection_limit"
                break
            accepted = None
            try:
                accepted, gate_rejections = self._round(lin, cur_src, cur_res, cur_feats, tried, gate_rejections)
            except BudgetExhausted as e:  # an llm proposer's budget is spent: the walk ends here, recorded
                lin["termination"] = "budget"
                lin["budget"] = str(e)
                break
            if accepted is None:
                if gate_rejections >= self.limits.max_rejections:
                    lin["termination"] = "rejection_limit"
                    break
                left = sorted({f.mechanism for f in cur_feats})
                # a candidate refused here (a ladder's next rung) also leaves the walk short of the end
                refused = any(r["step"] == len(lin["transitions"]) and r["kind"] != "not_applicable"
                              for r in lin["rejections"])
                lin["termination"] = "no_proposal" if left or refused else "complete"
                break
            prop, res, feats, trans = accepted
            lin["transitions"].append(trans)
            cur_src, cur_res, cur_feats, cur_origin = prop.source, res, feats, prop.origin
            lin["states"].append(self._state(len(lin["states"]), cur_src, cur_res, cur_feats, cur_origin))
            self.progress("step", mechanism=prop.mechanism, locus=prop.locus)
        lin["remaining"] = sorted({f.mechanism for f in cur_feats})
        for proposer in self.proposers:  # e.g. the rungs of a ladder the walk never stood on
            finish = getattr(proposer, "finish", None)
            if finish is not None:
                finish(lin)
        return lin

    def _round(self, lin, cur_src, cur_res, cur_feats, tried, gate_rejections):
        """One pass over the proposers on the current kernel: (accepted or None, gate rejections)."""
        accepted = None
        if True:
            for proposer in self.proposers:
                for prop in proposer.propose(cur_src, cur_feats, tried):
                    if isinstance(prop, tuple):
                        feat, reason = prop
                        tried.add(feat.key)
                        self._reject(lin, feat.mechanism, feat.locus, "not_applicable", reason)
                        continue
                    tried.add((prop.mechanism, prop.locus))
                    outcome = self._try(lin, proposer, prop, cur_src, cur_res, cur_feats)
                    if outcome is None:
                        gate_rejections += 1
                        if gate_rejections >= self.limits.max_rejections:
                            break
                        continue
                    accepted = outcome
                    break
                if accepted or gate_rejections >= self.limits.max_rejections:
                    break
        return accepted, gate_rejections

    # -- one candidate -----------------------------------------------------------------------------
    def _try(self, lin, proposer, prop: Proposal, cur_src, cur_res, cur_feats):
        step = len(lin["transitions"])
        feats = detect_all(prop.source)
        rung = {"rung": prop.config["previous"]} if prop.proposer == "versions" and prop.declared else {}
        if prop.audit is not None:  # a ladder step, audited by the ladder (klineage.lineage.ladder)
            audit = prop.audit
        elif prop.declared:  # one declared mechanism (the llm proposer): judged as a ladder step declaring it
            audit, mechs = audit_ladder_step(cur_feats, feats, (prop.mechanism,), self.known, self.arch)
            audit = self._one_mechanism(audit, mechs, prop, cur_feats)
        else:
            audit = audit_rules(cur_feats, feats, prop.mechanism, prop.locus, self.arch, self.rules_loci)
        if not audit["ok"]:
            self._reject(lin, prop.mechanism, prop.locus, "audit", audit["reason"], prop.source, audit=audit, **rung)
            return None
        res = self.evaluate(prop.source, prop.origin)
        if res is None:
            self._reject(lin, prop.mechanism, prop.locus, "replay_missing",
                         "no recorded evaluation of the simpler kernel", prop.source, **rung)
            return None
        if not res.passed:
            self._reject(lin, prop.mechanism, prop.locus, res.status.value.lower(),
                         f"{res.error_kind}: {res.error_message}", prop.source, res, **rung)
            return None
        launch = self._launches(lin, prop, **rung)
        if launch is None:
            return None
        red_src = proposer.rederive(prop)
        if red_src is None:
            self._reject(lin, prop.mechanism, prop.locus, "rederive_failed",
                         "the forward rewrite does not apply to the simpler kernel", prop.source, res)
            return None
        red_audit = audit_rederived(cur_feats, detect_all(red_src), self.arch)
        if not red_audit["ok"]:
            self._reject(lin, prop.mechanism, prop.locus, "rederive_audit", red_audit["reason"], red_src,
                         audit=red_audit)
            return None
        identical = kernel_hash(red_src) == kernel_hash(cur_src)
        red_res = cur_res if identical else self.evaluate(red_src, None)
        if red_res is None or not red_res.passed:
            self._reject(lin, prop.mechanism, prop.locus, "rederive_gate",
                         "the re-derived kernel does not pass the gate" if red_res else "not replayed", red_src,
                         red_res)
            return None
        trials = rederive_trials(cur_res, red_res, self.limits.min_rederive_ratio)
        if not all(t["ok"] for t in trials):
            self._reject(lin, prop.mechanism, prop.locus, "rederive_slow",
                         f"re-derived kernel below {self.limits.min_rederive_ratio}x of the original in a trial",
                         red_src, red_res, trials=trials)
            return None
        trans = {
            "transition_id": _digest([lin["lineage_id"], step, kernel_hash(cur_src), kernel_hash(prop.source)])[:32],
            "lineage_id": lin["lineage_id"], "step": step, "workload_name": self.workload.name,
            "proposer": prop.proposer, "mechanism": prop.mechanism, "locus": prop.locus,
            "anchor": prop.anchor or self._anchor(cur_feats, audit, prop), "declared": prop.declared,
            "richer_hash": kernel_hash(cur_src), "simpler_hash": kernel_hash(prop.source),
            "rederived_hash": kernel_hash(red_src), "rederived_identical": identical,
            "eval_richer": cur_res.eval_key, "eval_simpler": res.eval_key, "eval_rederived": red_res.eval_key,
            "features_richer": [f.to_dict() for f in cur_feats], "features_simpler": [f.to_dict() for f in feats],
            "audit": audit, "rederive_audit": red_audit, "rederive_trials": trials,
            "before": prop.before, "after": prop.after, "config": prop.config,
            "effects": compare_timing(cur_res, res), "env": _env(cur_res),
            "simpler_resources": (res.compile or {}).get("resources", []),
            "richer_resources": (cur_res.compile or {}).get("resources", []),
        }
        if prop.declared and prop.audit is None and audit.get("mechanisms", [prop.mechanism]) != [prop.mechanism]:
            # an llm step the evidence labels otherwise (with the forms no rule takes off that it also removed)
            trans["mechanism"], trans["mechanisms"] = "+".join(audit["mechanisms"]), list(audit["mechanisms"])
        if prop.mechanisms:  # a bundled ladder step: every mechanism it adds, by name
            trans["mechanisms"] = list(prop.mechanisms)
        domain = self.workload.for_kernel(cur_src)  # the richer kernel's valid inputs: the skill's precondition
        if domain.domain:
            trans["domain"] = domain.domain_preconditions()
        if launch:
            trans["launch"] = launch
        return prop, res, feats, trans

    def _launches(self, lin, prop: Proposal, **rung) -> list[dict] | None:
        """A workload with a LAUNCH axis runs its kernels at every launch configuration: the simpler
        kernel is gated at each one past the default (the step is refused, naming the configuration,
        where it fails), and the launch configurations it passed are listed; [] without an axis."""
        out = []
        for values in self.launches:
            res = self.evaluate(prop.source, prop.origin, values)
            if res is None:
                self._reject(lin, prop.mechanism, prop.locus, "replay_missing",
                             f"no recorded evaluation of the simpler kernel at launch {values}", prop.source,
                             launch=values, **rung)
                return None
            if not res.passed:
                self._reject(lin, prop.mechanism, prop.locus, res.status.value.lower(),
                             f"at launch {values}: {res.error_kind}: {res.error_message}", prop.source, res,
                             launch=values, **rung)
                return None
            out.append({"launch": values, "eval_key": res.eval_key})
        return out

    def _start_launches(self, lin, source: str, res, origin) -> list[dict]:
        """The launch configurations past the default that the walk checks each step at: those the
        start kernel passes at (recorded in the lineage with those it fails at)."""
        configs = self.workload.launch_configs()[1:]
        if not configs or res is None or not res.passed:
            return []
        ok, failed = [], []
        for values in configs:
            r = self.evaluate(source, origin, values)
            (ok if r is not None and r.passed else failed).append(values)
        lin["config"]["launch"] = {"checked": ok, "start_fails": failed}
        return ok

    @staticmethod
    def _one_mechanism(audit: dict, mechs: tuple[str, ...], prop: Proposal, cur_feats: list[Feature]) -> dict:
        """An llm step removes the one mechanism it declares. The evidence may see it remove, with that
        one, forms no rule takes off on their own (a grid-stride fallback read as coarsening): the step
        takes the evidence's label. It is refused when the evidence does not see the declared mechanism
        go, or sees another go that the rules could have taken off as a step of its own."""
        if not audit["ok"] or tuple(mechs) == (prop.mechanism,):
            return audit
        separable = sorted(m for m in set(mechs) - {prop.mechanism}
                           if any(f.mechanism == m and f.removable for f in cur_feats))
        if prop.mechanism in mechs and not separable:
            return audit
        why = (f"declared {prop.mechanism}, but the step adds {list(mechs)}"
               + (f": {separable} could come off as steps of their own" if separable and prop.mechanism in mechs else ""))
        return {**audit, "ok": False, "reason": why}

    def _anchor(self, cur_feats: list[Feature], audit: dict, prop: Proposal) -> str:
        added = set(audit.get("added_forward") or [])
        hit = next((f for f in cur_feats if f.mechanism in added), None)
        return hit.anchor if hit else "kernel structure"

    def _state(self, idx, src, res, feats, origin) -> dict:
        return {"idx": idx, "kernel_hash": kernel_hash(src), "eval_key": res.eval_key if res else None,
                "features": [f.to_dict() for f in feats], "origin": origin,
                "status": res.status.value if res else "NOT_REPLAYED",
                "latency_us": [t["latency_us"] for t in res.timing] if res and res.passed else []}

    def _reject(self, lin, mechanism, locus, kind, message, source=None, res=None, **extra):
        rec = {"step": len(lin["transitions"]), "mechanism": mechanism, "locus": locus, "kind": kind,
               "message": (message or "")[:2000], "kernel_hash": kernel_hash(source) if source else None,
               "eval_key": res.eval_key if res is not None else None,
               "status": res.status.value if res is not None else None}
        if res is not None and res.correctness:
            bad = [c for c in res.correctness if not c.get("ok")]
            rec["failing_shapes"] = [{"kind": c["kind"], "shape": c["shape"]} for c in bad][:8]
        rec.update(extra)
        lin["rejections"].append(rec)
        self.progress("rejected", kind=kind)
