"""Retrieve: which library skills fit a new kernel, why the others do not, and in which order to try them.

The target is described by facts anyone can check:
  features      the detectors' features of the start kernel (mechanism, anchor)
  workload      dtypes, family, the sizes of its benchmark and probe shapes (divisible by 4, 8, 32?),
                whether the contract passes misaligned bases (shapes with the `offset` key) or asks
                for in-place calls (`IN_PLACE = True` in workload.py), the platform it runs on
  bottleneck    from a gate run of the start kernel: fraction of copy bandwidth and of the bf16
                tensor peak, and the class (memory / compute / latency), or "unknown" without one

A skill is a candidate when it is admitted (with admission "on"; "first" ranks the admitted ones
first, then the untried, then those admission tried that did not hold; "off" ignores admission, for
ablation), its measured
scope holds the target's platform exactly, its `requires` mechanisms are present, the mechanisms it
`provides` are absent, none of its `conflicts` is present, and its preconditions hold for the
workload. Preconditions are checked one by one, each with a verdict (holds / fails / unchecked) and
the reason; a skill mined from several kernels fits when the preconditions of one of them all hold.
Excluded skills are returned with every reason, so a user sees *why* a skill was not tried.

Ranking: score = 1.0 * effect + 0.5 * family + 0.3 * shape + 0.5 * bottleneck + 6.0 * operator, each
term shown:
  effect      log2 of the skill's median measured source speedup (clipped to [-1, 3])
  family      1 when a source workload has the target's operator family, else 0
  shape       1 - |log10(source elements / target elements)| / 3, best source case (0..1)
  bottleneck  1 when the skill's mechanism addresses the target's bottleneck class, 0.5 unknown, 0 not
  operator    what the kernels compute: 1 when a shape rewriter that recognises the target adds the
              skill's mechanism, or a source workload's naive kernel is of the target kernel's
              operator class (klineage.mechanisms.shapes.operator_class: matmul, row_reduction,
              strided_reduction, elementwise; a workload's FAMILY where no recogniser reads its
              kernel: scan, selection, attention, ...); 0 when the target's class is known and none
              is; 0.5 when it is not known. Its weight exceeds the span of all the other terms
              together (5.3), so a skill measured only on other computations ranks below every one
              that fits this kind
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from klineage import settings
from klineage.lineage.probe import KIND_TEXT
from klineage.errors import StoreError
from klineage.gate.compare import platform_of
from klineage.gate.compile import DEFAULT_ARCH
from klineage.mechanisms import detect_all, family_specs
from klineage.records import SkillCard, as_card
from klineage.records.skill_card import Precondition
from klineage.workload import ALIAS_KEY, OFFSET_KEY, Workload, load_workload

WEIGHTS = {"effect": 1.0, "family": 0.5, "shape": 0.3, "bottleneck": 0.5, "operator": 6.0}
DTYPE_WORDS = {"bf16": "bfloat16", "bfloat16": "bfloat16", "__nv_bfloat16": "bfloat16", "fp16": "float16",
               "half": "float16", "float16": "float16", "fp32": "float32", "float32": "float32"}


@dataclass
class TargetFacts:
    workload: str
    family: str
    dtypes: tuple[str, ...]
    platform: str
    mechanisms: set[str]
    features: list[list[str]]
    elements: int                      # elements of the largest benchmark shape (the first tensor dims)
    misaligned_bases: bool             # the contract passes pointers off 16-byte alignment
    ragged: bool                       # some shape has a dimension not divisible by 4
    tiny: bool                         # some shape has a dimension below 32
    in_place: bool                     # the contract asks for outputs aliasing inputs
    bottleneck: dict = field(default_factory=lambda: {"class": "unknown"})
    operator: str = ""                 # what the kernel computes (operator_class, else the FAMILY)
    reachable: set[str] = field(default_factory=set)  # mechanisms a recognising shape rewriter adds
    retyped: set[str] = field(default_factory=set)  # mechanisms a shape rewriter writes at the kernel's dtype

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["mechanisms"] = sorted(self.mechanisms)
        d["reachable"] = sorted(self.reachable)
        d["retyped"] = sorted(self.retyped)
        return d


def _dims(shape: dict) -> list[int]:
    return [v for k, v in shape.items() if k not in (OFFSET_KEY, ALIAS_KEY)]


def bottleneck_of(result) -> dict:
    """Bottleneck class of a PASSED gate result from its timing (fractions of the measured copy
    bandwidth and bf16 tensor peak); "unknown" without one."""
    if result is None or not getattr(result, "timing", None):
        return {"class": "unknown", "why": "no gate timing of the start kernel"}
    mem = max((t.get("bandwidth_fraction") or 0.0) for t in result.timing)
    comp = max((t.get("compute_fraction") or t.get("flops_fraction") or 0.0) for t in result.timing)
    if max(mem, comp) < 0.3:
        cls = "latency"
    else:
        cls = "memory" if mem >= comp else "compute"
    return {"class": cls, "memory_fraction": mem, "compute_fraction": comp, "source": result.eval_key}


def target_platform(arch: str, result=None) -> str:
    """The platform a target runs on, as a card's scope names platforms: the GPU and compute capability
    a gate result of the target ran on ("NVIDIA H200 (sm_90)"), else the architecture the run builds
    for, without its arch-specific suffix ("sm_80" for --arch sm_80, "sm_90" for sm_90a)."""
    env = getattr(result, "env", None) or {}
    return platform_of(env) if env.get("gpu") and env.get("capability") else "sm_" + _capability(arch)


def _capability(platform: str) -> str:
    """The compute capability digits a platform or architecture names ("90" for sm_90a), or ""."""
    m = re.search(r"sm_(\d+)", platform)
    return m.group(1) if m else ""


def holds_platform(measured: list[str], platform: str) -> bool:
    """Whether a verified scope's platforms hold the target's: one of the same compute capability."""
    cc = _capability(platform)
    return bool(cc) and any(_capability(m) == cc for m in measured)


def target_facts(wl: Workload, source: str, arch: str = DEFAULT_ARCH, start_result=None) -> TargetFacts:
    """The facts of a target kernel built for `arch`; its mechanisms are what the detectors see and
    what the shape rewriters read (a warp per row, a register cache: structural mechanisms no detector
    sees)."""
    from klineage.mechanisms.shapes import operator_class, reachable_mechanisms, retyped_mechanisms, shape_mechanisms
    feats = detect_all(source)
    shapes = [s for _, s in wl.all_shapes()]
    bench = max(wl.benchmark_cases, key=lambda s: math.prod(_dims(s)))
    return TargetFacts(
        workload=wl.name, family=getattr(wl.module, "FAMILY", ""), dtypes=tuple(wl.dtypes), platform=target_platform(arch, start_result),
        mechanisms={f.mechanism for f in feats} | shape_mechanisms(source, wl),
        features=sorted([f.mechanism, f.anchor] for f in feats),
        elements=math.prod(_dims(bench)),
        misaligned_bases=any(wl.pointer_offset(s) for s in shapes),
        ragged=any(d % 4 for s in shapes for d in _dims(s)),
        tiny=any(d < 32 for s in shapes for d in _dims(s)),
        in_place=bool(getattr(wl.module, "IN_PLACE", False)),
        bottleneck=bottleneck_of(start_result),
        operator=operator_class(source, wl) or getattr(wl.module, "FAMILY", ""),
        reachable=reachable_mechanisms(source, wl),
        retyped=retyped_mechanisms(source, wl))


def _probe_kind(item: Precondition) -> str | None:
    name = item.probe or ""
    kind = name.split(":", 1)[0]
    return kind if kind in KIND_TEXT else None


def _kind_verdict(kind: str, t: TargetFacts) -> tuple[str, str]:
    if kind == "misaligned_base":
        return ("fails", "the contract passes base pointers off 16-byte alignment") if t.misaligned_bases else \
            ("holds", "every shape of the contract passes aligned bases")
    if kind == "ragged_size":
        return ("fails", "the contract has a size not divisible by 4") if t.ragged else \
            ("holds", "every size of the contract is a multiple of 4")
    if kind == "tiny_size":
        return ("fails", "the contract has a size below 32") if t.tiny else ("holds", "every size is at least 32")
    if kind == "aliased_output":
        return ("fails", "the contract asks for in-place calls (IN_PLACE)") if t.in_place else \
            ("holds", "the contract passes distinct input and output buffers")
    return ("unchecked", "the contract does not bound input values; the risk stays on the card")


def check_precondition(category: str, item: Precondition, t: TargetFacts, mechanism: str = "") -> dict:
    """One precondition against the target: {category, condition, source, verdict, reason}. A statement
    about the operands' dtype holds for a `mechanism` a shape rewriter that recognises the target writes
    for the target's own element type (t.retyped: the matmul generator writes a whole kernel at it,
    under its own preconditions, a TF32 product under the workload's tolerance), not the carrier's."""
    out = {"category": category, "condition": item.condition, "source": item.source, "kernel": item.kernel}
    cond = item.condition
    src = item.source
    if cond.startswith("handled in code"):
        return {**out, "verdict": "holds", "reason": "the carrier itself handles the case"}
    if category == "hardware":
        m = re.findall(r"not (sm_\d+a?)", cond)
        arch = "sm_" + t.platform.split("sm_")[-1].rstrip(")") if "sm_" in t.platform else ""
        if m:
            bad = any(arch.rstrip("a") == a.rstrip("a") for a in m)
            return {**out, "verdict": "fails" if bad else "holds",
                    "reason": f"target platform {t.platform}" + (" is excluded" if bad else " is not among " + ", ".join(m))}
    head = cond.split(":")[0]
    if category == "data_types" and "operand" in head:  # a statement about the tensors' dtype, not the math
        words = {DTYPE_WORDS[w] for w in re.findall(r"\b(bf16|bfloat16|__nv_bfloat16|fp16|half|float16|fp32|float32)\b",
                                                     head)}
        if words and mechanism in t.retyped and not words & set(t.dtypes):
            return {**out, "verdict": "holds",
                    "reason": f"a shape rewriter writes {mechanism} for the workload's {', '.join(t.dtypes)} operands "
                              f"(the carrier's {', '.join(sorted(words))} is the mined kernel's)"}
        if words:
            ok = bool(words & set(t.dtypes))
            return {**out, "verdict": "holds" if ok else "fails",
                    "reason": f"workload dtypes {', '.join(t.dtypes)}" + ("" if ok else f"; the carrier needs {', '.join(sorted(words))}")}
    kind = _probe_kind(item)
    if kind:
        verdict, why = _kind_verdict(kind, t)
        return {**out, "verdict": verdict, "reason": why + (f" (violated on the H200 by probe {item.probe})"
                                                            if src == "probe" else "")}
    return {**out, "verdict": "unchecked",
            "reason": "a fact of the source kernel with no workload condition to test (stays on the card)"}


def check_preconditions(card: SkillCard, t: TargetFacts) -> tuple[bool, list[dict]]:
    """(fits, checks): fits when, for some source kernel of the skill, none of its preconditions
    (nor the kernel-independent ones) fails."""
    checks = [check_precondition(cat, it, t, card.mechanism) for cat, items in card.preconditions.items()
              for it in items]
    general = [c for c in checks if not c["kernel"]]
    kernels = sorted({c["kernel"] for c in checks if c["kernel"]})
    if any(c["verdict"] == "fails" for c in general):
        return False, checks
    if not kernels:
        return True, checks
    fits = any(all(c["verdict"] != "fails" for c in checks if c["kernel"] == k) for k in kernels)
    return fits, checks


def _names(pairs: list[list[str]]) -> list[str]:
    """The mechanisms of (anchor, mechanism) pairs."""
    return [p[-1] for p in pairs]


_FACTS: dict[str, tuple[str, tuple[str, ...]]] = {}


def workload_facts(workload: str) -> tuple[str, tuple[str, ...]]:
    """(family, dtypes) of a corpus workload by name (expert_kernels/ or apply_workloads/), or
    ("", ()) when no such workload loads."""
    if workload not in _FACTS:
        root = settings.repo_root()
        facts: tuple[str, tuple[str, ...]] = ("", ())
        for d in (root / "expert_kernels" / workload, root / "apply_workloads" / workload):
            if (d / "workload.py").is_file():
                try:
                    wl = load_workload(d)
                    facts = (getattr(wl.module, "FAMILY", ""), tuple(wl.dtypes))
                except Exception:  # a workload that no longer loads just has no family here
                    pass
                break
        _FACTS[workload] = facts
    return _FACTS[workload]


def _family(workload: str) -> str:
    return workload_facts(workload)[0]


_OPERATORS: dict[str, str] = {}


def workload_operator(workload: str) -> str:
    """The operator class of a corpus workload by name: what the recognisers read in its naive
    kernel (operator_class), else its FAMILY; "" when neither is there."""
    if workload not in _OPERATORS:
        from klineage.mechanisms.shapes import operator_class
        root = settings.repo_root()
        cls = ""
        for d in (root / "expert_kernels" / workload, root / "apply_workloads" / workload):
            if (d / "naive.cu").is_file():
                cls = operator_class((d / "naive.cu").read_text())
                break
        _OPERATORS[workload] = cls or _family(workload)
    return _OPERATORS[workload]


def operator_fit(card: SkillCard, mechanism: str, t: TargetFacts) -> float:
    """The operator term: 1 when a shape rewriter that recognises the target adds `mechanism`, or a
    source workload computes what the target does; 0.5 when the target's class is unknown; else 0."""
    if mechanism in t.reachable:
        return 1.0
    if not t.operator:
        return 0.5
    return 1.0 if any(workload_operator(c.workload) == t.operator for c in card.effects.per_case) else 0.0


def addresses(mechanism: str) -> frozenset[str]:
    """The bottleneck classes a mechanism works on (memory traffic, arithmetic, instruction and
    latency overhead): its family's (Family.addresses); none for a name no family declares."""
    fam = family_specs().get(mechanism)
    return fam.addresses if fam is not None else frozenset()


def rank_terms(card: SkillCard, mechanism: str, t: TargetFacts) -> dict:
    med = card.effects.median_speedup or 1.0
    cases = card.effects.per_case
    family = 1.0 if any(_family(c.workload) == t.family and t.family for c in cases) else 0.0
    shape = 0.0
    for c in cases:
        n = math.prod(v for k, v in c.shape.items() if k not in (OFFSET_KEY, ALIAS_KEY)) or 1
        shape = max(shape, 1.0 - min(1.0, abs(math.log10(n / max(t.elements, 1))) / 3.0))
    cls = t.bottleneck.get("class", "unknown")
    fit = 0.5 if cls == "unknown" else (1.0 if cls in addresses(mechanism) else 0.0)
    terms = {"effect": max(-1.0, min(3.0, math.log2(med))) if med > 0 else -1.0, "family": family,
             "shape": round(shape, 4), "bottleneck": fit, "operator": operator_fit(card, mechanism, t)}
    terms["score"] = round(sum(WEIGHTS[k] * v for k, v in terms.items()), 4)
    return terms


def card_of(row: dict) -> SkillCard:
    """The validated card of a library row (store.skills()); StoreError naming the skill when the
    stored card is not a skill card."""
    try:
        return as_card(row["card"])
    except ValueError as exc:
        first = str(exc).splitlines()
        raise StoreError(f"skill {row.get('name')!r} ({row.get('skill_id')}) holds a card that is not a skill card "
                         f"({' '.join(first[:3])}): re-mine the library (klineage mine), or pass --db with "
                         "one this version mined") from exc


# admission "first": admitted skills, then those admission could not try (no rewrite yet, no other
# workload to try it on), then those it tried that did not hold (a slowdown, not reproduced, failed)
ADMISSION_TIER = {"admitted": 0, "pending": 1, "no_target": 1, "not_run": 1,
                  "not_reproduced": 2, "slower": 2, "failed": 2}


def retrieve(skills: list[dict], t: TargetFacts, admission: bool | str = True, tried: set[str] | None = None) -> dict:
    """{"candidates": [ranked entries], "excluded": [{skill_id, name, reasons, checks}], "admission":
    {mode, excluded, ranked_after}} for `skills` (store.skills() rows: skill_id, name, mechanism,
    card), each card read as a SkillCard. `admission`: True or "on" (only admitted skills), "first"
    (admitted skills ranked before the others), False or "off" (admission ignored)."""
    mode = {True: "on", False: "off"}.get(admission, admission) if isinstance(admission, bool) else str(admission)
    if mode not in ("on", "first", "off"):
        raise ValueError(f"admission {admission!r}: choose on, first or off")
    cands, excluded = [], []
    for s in skills:
        card, mech = card_of(s), s["mechanism"]
        reasons = []
        adm = card.admission.status
        if mode == "on" and adm != "admitted":
            reasons.append(f"not admitted ({adm}: {card.admission.reason})".rstrip(": )") + ")")
        measured = card.scope.measured_platforms or card.scope.platforms
        if not holds_platform(measured, t.platform):
            reasons.append(f"verified scope {measured} does not hold the target platform {t.platform}")
        fam = family_specs().get(mech)
        if fam is not None and fam.scope and not any(_capability(a) == _capability(t.platform) for a in fam.scope):
            reasons.append(f"{mech} needs one of {', '.join(fam.scope)}: the target platform {t.platform} lacks it")
        missing = [m for m in _names(card.requires) if m not in t.mechanisms]
        if missing:
            reasons.append(f"requires {', '.join(missing)}, absent from the start kernel")
        present = [m for m in _names(card.provides) if m in t.mechanisms]
        if present:
            reasons.append(f"provides {', '.join(sorted(set(present)))}, already in the start kernel")
        clash = [m for m in _names(card.conflicts) if m in t.mechanisms]
        if clash:
            reasons.append(f"conflicts with {', '.join(clash)} in the start kernel")
        fits, checks = check_preconditions(card, t)
        if not fits:
            for c in checks:
                if c["verdict"] == "fails":
                    reasons.append(f"precondition ({c['category']}) fails: {c['condition']} — {c['reason']}")
        if tried and s["skill_id"] in tried:
            reasons.append("already tried on this kernel")
        entry = {"skill_id": s["skill_id"], "name": s["name"], "mechanism": mech, "admission": adm}
        if reasons:
            excluded.append({**entry, "reasons": reasons, "checks": checks})
        else:
            cands.append({**entry, "terms": rank_terms(card, mech, t), "checks": checks})
    first = mode == "first"
    cands.sort(key=lambda c: (ADMISSION_TIER.get(c["admission"], 1) if first else 0, -c["terms"]["score"], c["name"]))
    counts = {"mode": mode, "excluded": sum(any(r.startswith("not admitted") for r in e["reasons"]) for e in excluded),
              "ranked_after": sum(c["admission"] != "admitted" for c in cands) if first else 0}
    return {"target": t.to_dict(), "candidates": cands, "excluded": excluded, "admission": counts}
