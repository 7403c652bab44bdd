"""Admission: a skill enters the library that downstream stages use only after a held-out roundtrip.

For a skill of mechanism M, mined from workloads W_S, the roundtrip takes kernels of *other*
workloads (their naive kernel, then the states of their lineages, simplest first) and looks for
one where M's forward rewrite (`reoptimize`) applies, adds M and nothing else (an audit over the
detectors' features), and the skill's `requires` hold. Both kernels go through the gate; the skill
is admitted when the rewritten kernel passes and is faster than its base beyond noise in every
timing trial of some target:

    every trial ratio base/new > 1 + noise,  noise = max(1%, the two kernels' trial spreads)

At most MAX_TARGETS workloads are tried per skill (sorted by name: equal inputs, equal verdicts).
A rewritten kernel that fails the gate is a real failure on that workload: it becomes a risk of the
skill, with the gate's status and message. Skills with no forward rewrite (mined from a version
ladder only) wait for a materializer (`pending`); skills with no other workload to try are
`no_target`. Every trial is kept in the card's verification log.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from klineage.errors import ReplayMissingError
from klineage.gate.gate import Gate, kernel_hash
from klineage.lineage.walk import compare_timing
from klineage.mechanisms import Applied, Kernel, detect_all, registry
from klineage.workload import Workload

MAX_TARGETS = 2
MIN_NOISE = 0.01
STATUSES = ("admitted", "not_faster", "failed", "no_target", "pending")
# what each status says, as cards give it for their reason (the report's legend shows these)
MEANING = {"admitted": "faster beyond noise on a held-out workload",
           "not_faster": "passed on a held-out workload but not faster beyond noise",
           "failed": "the rewrite failed the gate on every held-out workload tried",
           "no_target": "no other workload has a kernel where the rewrite applies",
           "pending": "no forward rewrite for this mechanism yet: a materializer (apply stage) will roundtrip it"}


@dataclass
class Target:
    workload: Workload
    source: str
    origin: str


def _mech_kinds(source: str) -> set[str]:
    return {f.mechanism for f in detect_all(source)}


def candidate_kernels(wl: Workload, states: list[tuple[str, str]]) -> list[Target]:
    """naive.cu, then lineage states (given simplest first), deduplicated by hash."""
    out, seen = [], set()
    naive = Path(wl.path).parent / "naive.cu"
    # named by workload, not by this checkout's path, so a card reads the same on every machine
    items = ([(naive.read_text(), f"{wl.name}/naive.cu")] if naive.is_file() else []) + list(states)
    for src, origin in items:
        h = kernel_hash(src)
        if h not in seen:
            seen.add(h)
            out.append(Target(wl, src, origin))
    return out


def rewrite_for(mechanism: str, source: str, requires: list[str], config: dict | None = None) -> tuple[str, dict] | None:
    """M's forward rewrite on `source` if it adds M (and nothing else) where `requires` hold."""
    mech = registry().get(mechanism)
    if mech is None or mech.STRUCTURAL:
        return None
    base = {f.key for f in detect_all(source)}
    kinds = {m for m, _ in base}
    if not set(requires) <= kinds:
        return None
    for cfg in ([config] if config else []) + [None]:
        try:
            res = mech.reoptimize(Kernel(source), None, cfg)
        except Exception:  # a rewrite that trips on an unfamiliar kernel simply does not apply
            continue
        if not isinstance(res, Applied):
            continue
        new = {f.key for f in detect_all(res.source)}
        added = new - base
        if base <= new and added and all(m == mechanism for m, _ in added):
            return res.source, {"locus": res.locus, "config": res.config, "added": sorted(map(list, added))}
    return None


def _trial_ratios(base, new) -> list[dict]:
    """Per benchmark case: the rewrite's speedup over its base (compare_timing, read with the
    rewritten kernel as the richer one) and whether every trial is beyond the noise."""
    out = []
    for e in compare_timing(new, base):
        noise = max([MIN_NOISE] + [t.get("spread", 0.0) for t in list(base.timing) + list(new.timing)
                                   if _key(t["shape"]) == _key(e["shape"])])
        out.append({"shape": e["shape"], "base_us": e["simpler_us"], "new_us": e["richer_us"],
                    "speedup": e["speedup"], "trial_speedups": e["trial_speedups"], "noise": noise,
                    "beyond_noise": all(r > 1 + noise for r in e["trial_speedups"])})
    return out


def _key(shape: dict) -> tuple:
    return tuple(sorted(shape.items()))


def admit_skill(card: dict, targets_by_workload: dict[str, list[Target]], gate: Gate, replay: bool = False,
                missing: list | None = None) -> dict:
    """The admission verdict of one skill card: {"status", "trials", "risks"}."""
    mech = card["mechanism"]
    m = registry().get(mech)
    if m is None or m.STRUCTURAL:
        return {"status": "pending", "trials": [], "risks": [],
                "reason": MEANING["pending"]}
    sources = {c["workload"] for c in card["effects"]["per_case"]}
    requires = sorted({r[1] for r in card.get("requires", [])})
    examples = [c for c in card["carrier"].get("example_configuration", []) if "version" not in c]
    trials, risks = [], []
    tried = 0
    for wname in sorted(targets_by_workload):
        if wname in sources or tried >= MAX_TARGETS:
            continue
        for tgt in targets_by_workload[wname]:
            got = rewrite_for(mech, tgt.source, requires, examples[0] if examples else None)
            if got is None:
                continue
            new_src, how = got
            tried += 1
            trial = {"workload": wname, "base_hash": kernel_hash(tgt.source), "kernel_hash": kernel_hash(new_src),
                     "base_origin": tgt.origin, **how}
            try:
                base = gate.evaluate(tgt.source, tgt.workload, origin=tgt.origin, replay=replay)
                new = gate.evaluate(new_src, tgt.workload, origin=None, replay=replay)
            except ReplayMissingError as e:
                if missing is not None:
                    missing.append({"kernel_hash": trial["kernel_hash"], "workload": wname, "what": "admission",
                                    "message": str(e)})
                trial.update(status="NOT_REPLAYED", ok=False)
                trials.append(trial)
                break
            trial.update(eval_base=base.eval_key, eval_new=new.eval_key, status=new.status.value,
                         base_status=base.status.value)
            if not base.passed:
                trial.update(ok=False, message="the target's base kernel does not pass the gate")
            elif not new.passed:
                msg = f"{new.error_kind}: {new.error_message}"[:400]
                trial.update(ok=False, message=msg)
                risks.append({"kind": "roundtrip", "workload": wname, "status": new.status.value, "message": msg,
                              "eval_key": new.eval_key, "locus": how["locus"], "failing_shapes": []})
            else:
                cases = _trial_ratios(base, new)
                trial.update(cases=cases, ok=bool(cases) and all(c["beyond_noise"] for c in cases))
            trials.append(trial)
            break  # one target kernel per workload
    if not trials:
        status = "no_target"
    elif any(t.get("ok") for t in trials):
        status = "admitted"
    elif any(t.get("status") not in ("PASSED", None) for t in trials):
        status = "failed"
    else:
        status = "not_faster"
    return {"status": status, "trials": trials, "risks": risks,
            "reason": MEANING[status]}
