"""Static preconditions: facts of the richer kernel (the one that has the mechanism) that say when the
mechanism is sound, read off its source without running it.

`static_preconditions(source, mechanism, feature)` runs the rules of `RULES` that the mechanism's
family names (Family.rules, Family.hardware; every rule for a mechanism no family declares, e.g. one
an LLM named) over the code near the feature: the functions its lines fall in ("core"), those plus
every function that calls them ("extended": a cast feeding a vector load often sits in the caller),
and for guards those plus their direct callees ("context": a head/tail split is often a helper).
Without a feature the whole kernel is in scope. Code in comments and in `#if` branches the
preprocessor removes is ignored.

Each precondition is a dict: category (one of the five), condition, fails_without, evidence
("static: <fact> at lines a-b"), lines [first, last] (1-based, in `source`), kernel (sha256[:12] of
`source`), probe (a probe kind in `PROBES` that can violate it, or None).

The source model and the facts rules share are in klineage.parse.source, the rules on memory in
`memory`, those on execution in `compute`; the hardware rule sits here beside its table.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from klineage.mechanisms.static.compute import (rule_dtype_intrinsics, rule_fast_math, rule_launch_bounds, rule_unroll,
                                             rule_warp_masks)
from klineage.mechanisms.static.memory import (rule_readonly_loads, rule_restrict, rule_shared_memory,
                                            rule_vector_casts)
from klineage.parse.source import Region, Src, _pre, region, span

__all__ = ["HARDWARE", "RULES", "Rule", "applies", "static_preconditions"]


# Hardware requirements: (name, code pattern, asm pattern, condition, fails_without). A family names
# the ones it may carry (Family.hardware).
HARDWARE = (
    ("cluster", r"__cluster_dims__|\bthis_cluster\s*\(|\bcluster_group\b|cudaLaunchAttributeClusterDimension|"
                r"\bmap_shared_rank\b|cudaFuncAttributeNonPortableClusterSizeAllowed",
     r"barrier\.cluster|%cluster_ctarank|\bmapa\.",
     "compute capability 9.0 or newer (sm_90+): thread-block clusters and distributed shared memory",
     "nvcc rejects __cluster_dims__ and the cluster API for older targets; a cluster launch fails on older GPUs"),
    ("wgmma", None, r"\bwgmma\.[\w.:]+",
     "the arch-specific sm_90a target only (wgmma exists on sm_90a: not sm_90, sm_80, sm_100 or sm_120)",
     "ptxas: Instruction 'wgmma.*' not supported on .target for every other arch"),
    ("setmaxnreg", None, r"\bsetmaxnreg\.[\w.]+",
     "an arch-specific target, sm_90a (or sm_100a): setmaxnreg is not in sm_80, sm_90, sm_100 or sm_120",
     "ptxas: Instruction 'setmaxnreg' not supported on .target"),
    ("tcgen05", None, r"\btcgen05\.[\w.:]+",
     "the arch-specific sm_100a family (tcgen05 tensor-core instructions)",
     "ptxas rejects tcgen05 for every other target"),
    ("tma", r"\bCUtensorMap\b|\bcuTensorMapEncode\w*|\bcp_async_bulk\w*|cudaTensorMap",
     r"cp\.async\.bulk[\w.:]*|mbarrier\.[\w.:]*expect_tx",
     "compute capability 9.0 or newer (sm_90+): the Tensor Memory Accelerator and bulk async copies",
     "ptxas: Feature 'cp.async.bulk' requires .target sm_90 or higher"),
    ("cp.async", r"__pipeline_memcpy_async|\bcuda::memcpy_async|\bcooperative_groups::memcpy_async|\bcg::memcpy_async",
     r"cp\.async\.(?:ca|cg)\.[\w.:]+|cp\.async\.(?:commit_group|wait_group|wait_all)",
     "compute capability 8.0 or newer (sm_80+): asynchronous global-to-shared copies (cp.async)",
     "ptxas: Feature 'cp.async' requires .target sm_80 or higher (the C++ APIs fall back to synchronous copies)"),
    ("mma.sync", None, r"\bmma\.sync\.aligned\.m16n8k16[\w.]*|\bldmatrix\.[\w.:]+",
     "compute capability 8.0 or newer for m16n8k16 mma.sync (sm_75+ for ldmatrix)",
     "ptxas rejects the instruction for older targets"),
    ("warp reduce", r"\b__reduce_(?:add|min|max|and|or|xor)_sync\s*\(", None,
     "compute capability 8.0 or newer (sm_80+): __reduce_*_sync warp reductions",
     "nvcc: identifier '__reduce_*_sync' is undefined for older targets"),
)


def rule_hardware(src: Src, reg: Region, feature: dict | None, mechanism: str) -> list[dict]:
    fam = _family(mechanism)
    out = []
    for name, code_pat, asm_pat, cond, fails in HARDWARE:
        if fam is not None and name not in fam.hardware:
            continue
        sites = [(ln, re.sub(r"\s*\($", "", m.group(0))) for ln, m in (src.find(code_pat, reg.core) if code_pat else [])]
        sites += src.find_asm(asm_pat, reg.core) if asm_pat else []
        if not sites:
            continue
        by: dict[str, list[int]] = {}
        for ln, t in sites:
            by.setdefault(t, []).append(ln)
        fact = "; ".join(f"{t} at {span(ls)}" for t, ls in by.items())
        lines = sorted({ln for ln, _ in sites})
        out.append(_pre(src, "hardware", cond, fails, fact, lines, None, evidence=f"static: {fact}"))
    return out


@dataclass(frozen=True)
class Rule:
    name: str
    run: Callable[[Src, Region, dict | None, str], list[dict]]


# every rule, in the order their preconditions are listed; a family names those that apply to it
# (Family.rules; `hardware` applies to a family that names a hardware need)
RULES = (
    Rule("vector_cast", rule_vector_casts),
    Rule("warp_mask", rule_warp_masks),
    Rule("shared_memory", rule_shared_memory),
    Rule("dtype_intrinsics", rule_dtype_intrinsics),
    Rule("fast_math", rule_fast_math),
    Rule("launch_bounds", rule_launch_bounds),
    Rule("unroll", rule_unroll),
    Rule("readonly_loads", rule_readonly_loads),
    Rule("restrict", rule_restrict),
    Rule("hardware", rule_hardware),
)


def _family(mechanism: str):
    """The mechanism's Family, or None for a name no family declares (it gets every rule)."""
    from klineage.mechanisms import family_specs
    return family_specs().get(mechanism)


def applies(rule: Rule, mechanism: str) -> bool:
    """Whether `rule` reads the preconditions of `mechanism`: a rule its family names (the hardware rule
    for a family with hardware needs); every rule for a mechanism no family declares."""
    fam = _family(mechanism)
    if fam is None:
        return True
    return bool(fam.hardware) if rule.name == "hardware" else rule.name in fam.rules


def static_preconditions(source: str, mechanism: str, feature: dict | None = None) -> list[dict]:
    """Static preconditions of `mechanism` in `source` (the richer kernel), near `feature` (a
    Feature.to_dict()) when given, else over the whole kernel. A mechanism no family declares gets
    every rule."""
    src = Src(source)
    reg = region(src, feature)
    out, seen = [], set()
    for rule in RULES:
        if not applies(rule, mechanism):
            continue
        for d in rule.run(src, reg, feature, mechanism):
            key = (d["category"], d["condition"], tuple(d["lines"]))
            if key not in seen:
                seen.add(key)
                out.append(d)
    return out
