"""Admission: a skill enters the library that downstream stages use only after a held-out roundtrip.

For a skill of mechanism M, mined from workloads W_S, the roundtrip takes kernels of *other*
workloads and looks for one where M's forward rewrite applies, adds M and nothing else, and the
skill's `requires` hold. The targets of a workload, tried in this order: its start kernels (an
expert's naive.cu, a held-out instance's naive and idiom kernels, an apply workload's naive.cu), the
states of its lineages (simplest first), then the kernels its start reaches along a shape
rewriter's ladder (klineage.mechanisms.shapes.forward_states: a warp shuffle needs a row shared by
a warp or block first). The forward rewrite is the mechanism family's `reoptimize` (audited by
loci: every feature kept, every added one of M), else a shape rewriter's structural rewrite
(audited by mechanism kinds and by the recogniser's reading, klineage.mechanisms.audit.audit_structural).
Both kernels go through the gate.

What is reproduced is the effect the card states, read from its median measured speedup as its
intent says it (effect_claim: faster at >= 1.005x, no measurable difference between, slower at
<= 0.995x). On the target, each benchmark case is labelled by its timing trials against
noise = max(1%, the two kernels' trial spreads): faster when every trial ratio base/new > 1 + noise,
slower when every one < 1 - noise, neutral otherwise. The skill is admitted when the rewritten
kernel passes and the target shows the card's effect in every case:

    faster  every case faster (the rewrite pays off beyond noise, every trial);
    neutral every case neutral: the card says the mechanism changes nothing measurable, and the
            target must show nothing either way. A target made faster or slower beyond noise does
            not reproduce the card (its effect there is another one) and is reported as such;
    slower  never: a card whose measured effect is a slowdown is not tried. The apply stage keeps a
            rewrite only when it is faster, so a reproduced slowdown would admit a skill it can
            only discard (status `slower`).

At most MAX_TARGETS workloads are tried per skill (sorted by name: equal inputs, equal verdicts),
one kernel each. A rewritten kernel that fails the gate is a real failure on that workload: it
becomes a risk of the skill, with the gate's status and message. Skills whose mechanism no rewrite
adds wait for a materializer (`pending`); skills with no other workload where it applies are
`no_target`. Every trial is kept in the card's verification log.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from klineage.errors import ReplayMissingError
from klineage.gate.compare import compare_timing
from klineage.gate.gate import Gate, kernel_hash
from klineage.lineage.lift import effect_claim
from klineage.mechanisms import shapes
from klineage.mechanisms.forward import has_forward_rewrite, rewrite_for
from klineage.records import SkillCard, as_card
from klineage.workload import Workload

MAX_TARGETS = 2
MIN_NOISE = 0.01
STATUSES = ("admitted", "not_reproduced", "failed", "no_target", "pending", "slower")
# what each status means (the report's legend and docs/when-knowledge.md show these)
MEANING = {"admitted": "reproduced its measured effect on a held-out workload",
           "not_reproduced": "passed on a held-out workload but did not reproduce its measured effect",
           "failed": "the rewrite failed the gate on every held-out workload tried",
           "no_target": "no other workload has a kernel where the rewrite applies",
           "pending": "no forward rewrite for this mechanism yet: a materializer (apply stage) will roundtrip it",
           "slower": "its measured effect is a slowdown, which apply would never keep: not tried"}


@dataclass
class Target:
    workload: Workload
    source: str
    origin: str


def candidate_kernels(wl: Workload, states: list[tuple[str, str]], starts: list[tuple[str, str]] | None = None) -> list[Target]:
    """The workload's start kernels (`starts`, (source, origin); by default its folder's naive.cu),
    then lineage states (given simplest first), deduplicated by hash."""
    out, seen = [], set()
    if starts is None:
        naive = Path(wl.path).parent / "naive.cu"
        # named by workload, not by this checkout's path, so a card reads the same on every machine
        starts = [(naive.read_text(), f"{wl.name}/naive.cu")] if naive.is_file() else []
    for src, origin in list(starts) + list(states):
        h = kernel_hash(src)
        if h not in seen:
            seen.add(h)
            out.append(Target(wl, src, origin))
    return out


_LADDERS: dict[tuple[str, str, str], list] = {}


def _ladder(source: str, skip: str, workload) -> list[tuple[str, list[str]]]:
    key = (kernel_hash(source), skip, workload.name)
    if key not in _LADDERS:
        _LADDERS[key] = shapes.forward_states(source, workload, skip=skip)
    return _LADDERS[key]


def _targets_of(tgts: list[Target], mechanism: str, structural: bool = True):
    """A workload's target kernels for `mechanism`: its listed ones, then (with `structural`) the
    kernels its first start reaches along the shape rewriters' ladders (without `mechanism`)."""
    yield from tgts
    if tgts and structural and shapes.knows(mechanism):
        first = tgts[0]
        seen = {kernel_hash(t.source) for t in tgts}
        for src, added in _ladder(first.source, mechanism, first.workload):
            if kernel_hash(src) not in seen:
                yield Target(first.workload, src, f"{first.origin} + {' + '.join(added)}")
def _trial_ratios(base, new) -> list[dict]:
    """Per benchmark case: the rewrite's speedup over its base (compare_timing, read with the
    rewritten kernel as the richer one), the noise, and the case's label (faster / slower when
    every trial is beyond the noise, neutral otherwise)."""
    out = []
    for e in compare_timing(new, base):
        noise = max([MIN_NOISE] + [t.get("spread", 0.0) for t in list(base.timing) + list(new.timing)
                                   if _key(t["shape"]) == _key(e["shape"])])
        trials = e["trial_speedups"]
        label = ("faster" if trials and all(r > 1 + noise for r in trials) else
                 "slower" if trials and all(r < 1 - noise for r in trials) else "neutral")
        out.append({"shape": e["shape"], "base_us": e["simpler_us"], "new_us": e["richer_us"],
                    "speedup": e["speedup"], "trial_speedups": trials, "noise": noise,
                    "beyond_noise": label == "faster", "label": label})
    return out


def outcome(cases: list[dict]) -> str:
    """The effect a trial shows: its cases' common label, `mixed` when they differ, `none` without one."""
    labels = {c["label"] for c in cases}
    return labels.pop() if len(labels) == 1 else ("mixed" if labels else "none")


def _key(shape: dict) -> tuple:
    return tuple(sorted(shape.items()))


CLAIM_TEXT = {"faster": "faster", "neutral": "no measurable difference", "slower": "slower"}


def admit_skill(card: SkillCard | dict, targets_by_workload: dict[str, list[Target]], gate: Gate, replay: bool = False,
                missing: list | None = None, structural: bool = True) -> dict:
    """The admission verdict of one skill card (a SkillCard, or a plain card validated as one):
    {"status", "claim", "trials", "risks", "reason"}."""
    card = as_card(card)
    mech = card.mechanism
    if not has_forward_rewrite(mech, structural):
        return {"status": "pending", "trials": [], "risks": [],
                "reason": "no forward rewrite for this mechanism yet: a materializer (apply stage) will roundtrip it"}
    median = card.effects.median_speedup
    claim = effect_claim(median)
    if claim == "slower":
        return {"status": "slower", "claim": claim, "trials": [], "risks": [],
                "reason": f"its measured effect is a slowdown (median {median:.3f}x): the apply stage keeps only "
                          "faster kernels, so a reproduced slowdown would admit nothing it can use; not tried"}
    sources = {c.workload for c in card.effects.per_case}
    requires = sorted({r[1] for r in card.requires})
    examples = [c for c in card.carrier.example_configuration if "version" not in c]
    trials, risks = [], []
    tried = 0
    for wname in sorted(targets_by_workload):
        if wname in sources or tried >= MAX_TARGETS:
            continue
        for tgt in _targets_of(targets_by_workload[wname], mech, structural):
            got = rewrite_for(mech, tgt.source, requires, examples[0] if examples else None, card=card,
                              workload=tgt.workload, structural=structural, arch=gate.config.arch)
            if got is None:
                continue
            new_src, how = got
            tried += 1
            trial = {"workload": wname, "base_hash": kernel_hash(tgt.source), "kernel_hash": kernel_hash(new_src),
                     "base_origin": tgt.origin, "claim": claim, **how}
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
                got_effect = outcome(cases)
                trial.update(cases=cases, outcome=got_effect, ok=got_effect == claim)
            trials.append(trial)
            break  # one target kernel per workload
    if not trials:
        status = "no_target"
    elif any(t.get("ok") for t in trials):
        status = "admitted"
    elif any(t.get("status") not in ("PASSED", None) for t in trials):
        status = "failed"
    else:
        status = "not_reproduced"
    shown = ", ".join(f"{t['workload']}: {t.get('outcome')}" for t in trials if t.get("outcome"))
    return {"status": status, "claim": claim, "trials": trials, "risks": risks,
            "reason": {"admitted": f"reproduced its effect ({CLAIM_TEXT[claim]}) on a held-out workload",
                       "not_reproduced": f"passed on a held-out workload but did not reproduce its effect "
                                         f"({CLAIM_TEXT[claim]}; there: {shown or 'no timing'})",
                       "failed": "the rewrite failed the gate on every held-out workload tried",
                       "no_target": "no other workload has a kernel where the rewrite applies"}[status]}
