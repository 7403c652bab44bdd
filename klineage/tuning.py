"""Tuning constants of a CUDA kernel: the role a constant plays, and the quantitative configuration a
kernel is written at (its tile extents, thread and warp counts, pipeline depth, per-thread factors,
occupancy hint).

A constant's role comes from its name (first match in ROLES' order; camelCase names such as
kThreads are read as K_THREADS). A tile extent also has an axis, M, N or K (GEMM_BM, ATTN_BLOCK_N,
TILE_K). `configuration(source)` lists every integer constant with a role, from

    #define NAME <int>                 (inside #ifndef NAME ... #endif too: the default)
    constexpr int NAME = <int>;
    __launch_bounds__(<int>[, ...])    (a literal thread count)

in file order, the first definition of a name only, each value within its role's plausible range
(so a byte count named ..._VEC_PER_CTA is not read as a vector factor). Nothing here measures
anything: it reads source text.
"""
from __future__ import annotations

import re

# (a tile extent, BLOCK_M / BN ..., is not a thread count: its neighbours are halvings and doublings;
# nor is a warp count, GEMM_WARPS_M, an occupancy hint, CONV_MIN_BLOCKS / ..._BLOCKS_PER_SM, or a
# pipeline depth, GEMM_STAGES, whose neighbours are one stage more and one fewer)
ROLES = {"tile": re.compile(r"BLOCK_[MNK]\b|(?<![A-Z])B[MNK]\b|TILE_[MNK]\b"), "warps": re.compile(r"WARPS"),
         "occupancy": re.compile(r"MIN_BLOCKS|BLOCKS_PER_SM"), "stages": re.compile(r"STAGES"),
         "block": re.compile(r"BLOCK|THREADS"),
         "factor": re.compile(r"UNROLL|VEC|COARSEN|ITEMS|PER_THREAD|ILP")}
AXIS_RE = re.compile(r"(?:BLOCK_|TILE_|(?<![A-Z])B)([MNK])\b")
# the values a constant of each role can plausibly hold, inclusive
BOUNDS = {"tile": (8, 512), "warps": (1, 32), "occupancy": (1, 16), "stages": (2, 16), "block": (32, 1024),
          "factor": (1, 64)}

_DEFINE_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+\(?(\d+)u?\)?[ \t]*(?://[^\n]*)?$", re.M)
_CONSTEXPR_RE = re.compile(r"\bconstexpr\s+(?:unsigned\s+|const\s+)?(?:int|long|uint32_t|int32_t|size_t)\s+(\w+)\s*=\s*(\d+)u?\s*;")
_BOUNDS_RE = re.compile(r"__launch_bounds__\(\s*(\d+)\s*(?:,[^)]*)?\)")
LAUNCH_BOUNDS = "__launch_bounds__"


def canonical(name: str) -> str:
    """NAME as ROLES reads it: camelCase split at its humps and upper-cased (kBlockM -> K_BLOCK_M)."""
    if name.upper() == name:
        return name
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).upper()


def role(name: str) -> str | None:
    """The role of a constant named `name` (first match in ROLES' order), or None."""
    if name == LAUNCH_BOUNDS:
        return "block"
    text = canonical(name)
    for r, pat in ROLES.items():
        if pat.search(text):
            return r
    return None


def axis(name: str) -> str | None:
    """M, N or K for a tile extent (GEMM_BM, ATTN_BLOCK_N, kBlockK); None for anything else."""
    if role(name) != "tile":
        return None
    m = AXIS_RE.search(canonical(name))
    return m.group(1) if m else None


def plausible(role_name: str, value: int) -> bool:
    lo, hi = BOUNDS[role_name]
    return lo <= value <= hi


def configuration(source: str) -> list[dict]:
    """[{name, value, role[, axis]}] of the source's integer constants that have a role, in file order."""
    found: list[tuple[int, str, int]] = []
    for rx in (_DEFINE_RE, _CONSTEXPR_RE):
        found += [(m.start(), m.group(1), int(m.group(2))) for m in rx.finditer(source)]
    found += [(m.start(), LAUNCH_BOUNDS, int(m.group(1))) for m in _BOUNDS_RE.finditer(source)]
    out, seen = [], set()
    for _, name, value in sorted(found):
        r = role(name)
        if r is None or name in seen or not plausible(r, value):
            continue
        seen.add(name)
        item = {"name": name, "value": value, "role": r}
        if axis(name):
            item["axis"] = axis(name)
        out.append(item)
    return out


def matches(name: str, item: dict) -> bool:
    """Whether a configuration item (of another kernel) speaks to the constant `name`: the same role,
    and for tile extents the same axis."""
    r = role(name)
    if r is None or item.get("role") != r:
        return False
    return r != "tile" or axis(name) is None or item.get("axis") in (None, axis(name))
