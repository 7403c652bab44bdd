"""Tiled matrix products (mm, addmm, bmm, grouped mm): recognise one, write a structural skill into it.

Recognition reads a kernel file into a plan: its `extern "C"` entry points (which pointer is a, b, the
bias, the group offsets, the output; which integers are M, N, K, the batch or the group count), the
element type, the layout of b ([K, N] row-major, "N-major", as torch.mm takes it; or [N, K], "K-major",
as a linear layer stores its weight: read from the workload's inputs when one is given, else from how
a kernel indexes b), the mechanism kinds the detectors find, and its tuning constants by role.

A rewrite emits the whole file again from the plan and one more mechanism, from the generator's
template (templates/matmul/matmul.cu.j2): the same entry points with the same signatures and
semantics (bias, batch strides, group offsets), the same tuning-constant convention (`#ifndef NAME /
#define NAME <int> / #endif`, named as the kernel named them where a constant of that role exists),
the kernel's other mechanisms as they were (the forms below, and restrict / launch bounds / unroll /
vector access exactly when the kernel had them), and a fallback for calls the fast path cannot serve.
The forms, in the order the gemm ladder climbs them:

    naive -> smem_tiling -> register_tiling -> tensor_core_mma (mma.sync + ldmatrix) -> smem_swizzle
          -> async_copy (cp.async ring) -> wgmma -> tma (mbarrier ring) -> warp_specialization

Each step has its preconditions (what the kernel must already be, the element type, the target
architecture); a kernel that does not meet them gets NotApplicable with the reason. Every rewrite is
audited before it is returned: the detectors must see exactly the new mechanism added and no kind
lost (klineage.lineage.audit.audit_version, the versions audit), else NotApplicable.

Parameters come from the skill's configuration (a card's measured configuration, or flat NAME: value
pairs), each kept only where legal for the form, then the kernel's own values, then defaults.
"""
from __future__ import annotations

import re
import textwrap
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import jinja2

from klineage import tuning
from klineage.mechanisms.base import Applied, NotApplicable
from klineage.mechanisms.shapes.base import Shape, ShapeRewriter, register

TEMPLATES = Path(__file__).parent / "templates" / "matmul"

# Mechanism kinds the generator writes (the others in a kernel make it NotApplicable).
WRITTEN = frozenset({"register_tiling", "tensor_core_mma", "wgmma", "async_copy", "multistage_buffer", "tma",
                     "smem_swizzle", "warp_specialization", "restrict", "launch_bounds", "unroll", "vector_access"})
SMEM_LIMIT = 227 * 1024
WGMMA_NS = (64, 128, 256)

DTYPES = {  # C element type -> the generator's names
    "__nv_bfloat16": "bf16", "nv_bfloat16": "bf16", "__half": "f16", "half": "f16", "float": "f32"}
DT = {
    "bf16": {"T": "__nv_bfloat16", "T2": "__nv_bfloat162", "to_f": "__bfloat162float", "from_f": "__float2bfloat16_rn",
             "pair_f": "__floats2bfloat162_rn", "ptx": "bf16", "header": "cuda_bf16.h",
             "tma": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16"},
    "f16": {"T": "__half", "T2": "__half2", "to_f": "__half2float", "from_f": "__float2half_rn",
            "pair_f": "__floats2half2_rn", "ptx": "f16", "header": "cuda_fp16.h",
            "tma": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16"},
    "f32": {"T": "float", "T2": "float2", "to_f": "", "from_f": "", "pair_f": "make_float2", "ptx": "f32",
            "header": "", "tma": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32"},
}
_BATCH = {"batch", "batches", "nbatch", "num_batches", "batch_count", "bs", "b"}
_GROUPS = {"groups", "num_groups", "ngroups", "group_count", "g"}
_BIAS = {"bias", "c", "input", "self"}

# Tuning-constant roles the forms use: (role key, default value, comment)
ROLE_INFO = {
    "tile": (32, "square tile: k-slice width and output extent per block (tile x tile threads)"),
    "bm": (128, "output rows per block tile"),
    "bn": (128, "output columns per block tile"),
    "bk": (16, "k-extent of one staged slice"),
    "tm": (8, "output rows per thread"),
    "tn": (8, "output columns per thread"),
    "warps_m": (2, "warps along M; each owns BM / WARPS_M rows"),
    "warps_n": (4, "warps along N; each owns BN / WARPS_N columns"),
    "stages": (4, "shared-memory stages in the copy ring (at least 2)"),
    "group_m": (8, "block rows that sweep the N tiles together (L2 reuse)"),
}
FORM_ROLES = {
    "smem": ("tile", "group_m"),
    "regtile": ("bm", "bn", "bk", "tm", "tn", "group_m"),
    "mma": ("bm", "bn", "warps_m", "warps_n", "stages", "group_m"),
    "wgmma": ("bm", "bn", "stages", "group_m"),
}
DEFAULTS = {  # per form, where they differ from ROLE_INFO's
    "smem": {}, "regtile": {},
    "mma": {"bm": 128, "bn": 256, "warps_m": 2, "warps_n": 4},
    "wgmma": {"bm": 128, "bn": 256},
}
_SUFFIX = {"tile": "TILE", "bm": "BM", "bn": "BN", "bk": "BK", "tm": "TM", "tn": "TN", "warps_m": "WARPS_M",
           "warps_n": "WARPS_N", "stages": "STAGES", "group_m": "GROUP_M"}


# ---- the plan --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One `extern "C"` entry point and what its parameters are."""
    name: str
    params: str                 # the parameter list as written (kept verbatim)
    kind: str                   # mm | addmm | bmm | grouped_mm
    a: str
    b: str
    out: str
    M: str
    N: str
    K: str
    stream: str
    bias: str | None = None
    offs: str | None = None
    batch: str | None = None
    groups: str | None = None


@dataclass(frozen=True)
class Form:
    """Where a kernel stands on the ladder: its core, copy engine and structural options, and the
    annotations it carries (restrict, launch bounds, unroll pragmas, vector accesses)."""
    core: str                   # naive | smem | regtile | mma | wgmma
    copy: str = "sync"          # sync | cp_async | tma
    swizzle: bool = False
    ws: bool = False
    restrict: bool = False
    lb: bool = False
    unroll: bool = False
    vec: bool = False

    @property
    def tensor_cores(self) -> bool:
        return self.core in ("mma", "wgmma")


@dataclass(frozen=True)
class Plan:
    """What the generator needs of a kernel file: element type, b's layout, the entry points, the
    mechanism kinds present and the form they make, and the tuning constants by role."""
    dtype: str                  # bf16 | f16 | f32
    b_kmajor: bool
    entries: tuple[Entry, ...]
    kinds: frozenset[str]
    form: Form
    names: dict = field(default_factory=dict)    # role -> the kernel's constant name
    values: dict = field(default_factory=dict)   # role -> the kernel's value
    prefix: str = "MM"


# ---- recognition -----------------------------------------------------------------------------------------

_ENTRY = re.compile(r'extern\s+"C"\s+(?:__host__\s+)?cudaError_t\s+(\w+)\s*\(([^)]*)\)\s*\{')


def _params(text: str) -> list[tuple[bool, str, bool, str]]:
    """(const, type, pointer, name) of each parameter of a C parameter list; [] if one is unreadable."""
    out = []
    for raw in text.split(","):
        p = re.sub(r"\s+", " ", raw.strip())
        p = re.sub(r"\s*\*\s*", "* ", p).replace("* __restrict__", "*").replace("* __restrict", "*")
        m = re.match(r"^(const )?([\w ]+?)(\*)? ?(\w+)$", p.replace("* ", "*"))
        if not m:
            return []
        out.append((bool(m.group(1)), m.group(2).strip(), bool(m.group(3)), m.group(4)))
    return out


def _entry(name: str, text: str) -> Entry | str:
    """The entry point's roles, or why it is not a matrix product this rewriter reads."""
    ps = _params(text)
    if not ps:
        return f"{name}: unreadable parameter list"
    ins = [p for p in ps if p[2] and p[0] and p[1] in DTYPES]
    outs = [p for p in ps if p[2] and not p[0] and p[1] in DTYPES]
    offs = [p for p in ps if p[2] and p[1] in ("int", "int32_t")]
    ints = {p[3]: p for p in ps if not p[2] and p[1] in ("int", "int32_t")}
    streams = [p for p in ps if not p[2] and p[1] == "cudaStream_t"]
    low = {n.lower(): n for n in ints}
    if len(outs) != 1 or not 2 <= len(ins) <= 3 or len(streams) != 1:
        return f"{name}: not a product's signature (two or three element inputs, one output, a stream)"
    if len({p[1] for p in ins + outs}) != 1:
        return f"{name}: inputs and output of different element types"
    if not all(k in low for k in ("m", "n", "k")):
        return f"{name}: no M, N and K integer parameters"
    batch = next((low[n] for n in low if n in _BATCH and n not in ("m", "n", "k")), None)
    groups = next((low[n] for n in low if n in _GROUPS), None)
    read = {low["m"], low["n"], low["k"], batch, groups}
    extra = [n for n in ints if n not in read]
    if extra:
        return f"{name}: integer parameters this rewriter does not read ({', '.join(extra)})"
    if len(offs) > 1 or (offs and not groups) or (groups and not offs):
        return f"{name}: group offsets need one const int* and a group count"
    if offs and batch:
        return f"{name}: both a batch and groups"
    bias = None
    if len(ins) == 3:
        bias = next((p[3] for p in ins if p[3].lower() in _BIAS), ins[0][3])
    a, b = [p[3] for p in ins if p[3] != bias]
    kind = "grouped_mm" if offs else "bmm" if batch else "addmm" if bias else "mm"
    if bias and (offs or batch):
        return f"{name}: a bias with batches or groups is not written here"
    return Entry(name, text, kind, a, b, outs[0][3], low["m"], low["n"], low["k"], streams[0][3], bias=bias,
                 offs=offs[0][3] if offs else None, batch=batch, groups=groups)


def entries(source: str) -> tuple[list[Entry], list[str]]:
    """The file's matrix-product entry points, and why each other entry point is not one."""
    found, why = [], []
    for m in _ENTRY.finditer(source):
        e = _entry(m.group(1), m.group(2))
        (found if isinstance(e, Entry) else why).append(e)
    return found, why


def _dtype_of(e: Entry) -> str:
    ps = {p[3]: p for p in _params(e.params)}
    return DTYPES[ps[e.out][1]]


def _times(dim: str) -> re.Pattern:
    """`* K` or `K *` (also `d.K`, `(long long)K`) in an index: a stride of K elements."""
    cast = r"(?:\(\s*long long\s*\)|static_cast<long long>\()?"
    return re.compile(rf"\*\s*\(?\s*{cast}\s*(?:\w+\.)?{dim}\b|\b(?:\w+\.)?{dim}\s*\)?\s*\*")


_KMUL, _NMUL = _times("K"), _times("N")


def _b_layout_from_source(source: str) -> bool | None:
    """K-major (True) or N-major (False) b from a kernel's own indexing of it: the second element-pointer
    parameter of a __global__ function (or a pointer set from it), subscripted `b[n * K + k]` or
    `b[k * N + n]`; None when no kernel indexes b directly."""
    names = set()
    for m in re.finditer(r"__global__[^{;]*?\b\w+\s*\(([^()]*)\)\s*\{", source):
        ptrs = [p[3] for p in _params(m.group(1)) if p[2] and p[0] and p[1] not in ("int", "int32_t", "void")]
        if len(ptrs) >= 2:
            names.add(ptrs[1])
    for _ in range(2):  # and the pointers derived from it (`const T* bz = b + z * K * N;`)
        for name in list(names):
            names |= set(re.findall(rf"\b(\w+)\s*=\s*{re.escape(name)}\s*[+;]", source))
    for name in sorted(names):
        for m in re.finditer(rf"\b{re.escape(name)}\s*\[([^\];]*)\]", source):
            idx = m.group(1)
            k, n = bool(_KMUL.search(idx)), bool(_NMUL.search(idx))
            if k != n:
                return k
    return None


def _b_layout_from_workload(workload, e: Entry) -> bool | None | str:
    """K-major (True) / N-major (False) from the shapes of the workload's inputs; None when the workload
    is not about this entry; a reason when its inputs are not a product this rewriter writes."""
    if workload is None or getattr(workload, "entry", None) != e.name:
        return None
    shapes = sorted(list(workload.probe_shapes) + list(workload.benchmark_cases),
                    key=lambda s: sum(v for v in s.values() if isinstance(v, int)))
    scalars = [workload.scalars(s) for s in shapes]
    tried = [s for s, sc in zip(shapes, scalars) if {e.N, e.K} <= set(sc) and sc[e.K] != sc[e.N]]
    if not tried and shapes and e.K in shapes[0]:
        tried = [{**shapes[0], e.K: shapes[0][e.K] + 8}]
    for shape in tried[:1]:
        sc = workload.scalars(shape)
        ins = workload.make_inputs(shape, 0)
        if e.a not in ins or e.b not in ins:
            return f"the workload's inputs have no {e.a} and {e.b}"
        M, N, K = sc[e.M], sc[e.N], sc[e.K]
        a, b = tuple(ins[e.a].shape), tuple(ins[e.b].shape)
        if a[-2:] != (M, K):
            return f"{e.a} is {a}, not [.., M, K] row-major"
        if e.bias and tuple(ins[e.bias].shape) != (N,):
            return f"{e.bias} is {tuple(ins[e.bias].shape)}, not [N]"
        if b[-2:] == (K, N):
            return False
        if b[-2:] == (N, K):
            return True
        return f"{e.b} is {b}, neither [.., K, N] nor [.., N, K]"
    return None


def _form(kinds: frozenset[str], source: str) -> Form:
    if "wgmma" in kinds:
        core = "wgmma"
    elif "tensor_core_mma" in kinds:
        core = "mma"
    elif "register_tiling" in kinds:
        core = "regtile"
    elif re.search(r"__shared__", re.sub(r"//[^\n]*", "", source)):
        core = "smem"
    else:
        core = "naive"
    copy = "tma" if "tma" in kinds else "cp_async" if "async_copy" in kinds else "sync"
    return Form(core, copy, "smem_swizzle" in kinds, "warp_specialization" in kinds, "restrict" in kinds,
                "launch_bounds" in kinds, "unroll" in kinds, "vector_access" in kinds)


_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+\(?(\d+)\)?[ \t]*(?://[^\n]*)?$", re.M)


def _role_of(name: str) -> str | None:
    """The generator's role of a tuning constant named `name` (GEMM_BLOCK_M -> bm), or None."""
    r, ax = tuning.role(name), tuning.axis(name)
    canon = tuning.canonical(name)
    if r == "tile" and ax:
        return {"M": "bm", "N": "bn", "K": "bk"}[ax]
    if r == "stages":
        return "stages"
    if r == "warps" and re.search(r"_M$", canon):
        return "warps_m"
    if r == "warps" and re.search(r"_N$", canon):
        return "warps_n"
    if re.search(r"GROUP_M$", canon):
        return "group_m"
    if re.search(r"(?:^|_)(?:T|THREAD_|PER_THREAD_)M$", canon):
        return "tm"
    if re.search(r"(?:^|_)(?:T|THREAD_|PER_THREAD_)N$", canon):
        return "tn"
    if re.search(r"(?:^|_)TILE$", canon):
        return "tile"
    return None


def _constants(source: str) -> tuple[dict, dict, str]:
    """(role -> name, role -> value, prefix) of the source's integer #defines with a role."""
    names, values, prefixes = {}, {}, {}
    for m in _DEFINE.finditer(source):
        name, value = m.group(1), int(m.group(2))
        if "_" in name:
            pre = name.split("_")[0]
            prefixes[pre] = prefixes.get(pre, 0) + 1
        role = _role_of(name)
        if role and role not in names:
            names[role], values[role] = name, value
    prefix = max(prefixes, key=lambda p: (prefixes[p], p)) if prefixes else "MM"
    return names, values, prefix


def recognise_plan(source: str, workload=None) -> Plan | NotApplicable:
    """The plan of a matrix-product kernel file, or NotApplicable naming why it is not one."""
    from klineage.mechanisms import detect_all
    found, why = entries(source)
    if not found:
        return NotApplicable('no extern "C" entry point of a matrix product' + (f" ({'; '.join(why)})" if why else ""))
    if why:
        return NotApplicable(f"entry points that are not matrix products: {'; '.join(why)}")
    dtypes = {_dtype_of(e) for e in found}
    if len(dtypes) != 1:
        return NotApplicable("entry points of different element types")
    layout = None
    for e in found:
        got = _b_layout_from_workload(workload, e)
        if isinstance(got, str):
            return NotApplicable(got)
        if got is not None:
            layout = got
    if layout is None:
        layout = _b_layout_from_source(source)
    if layout is None:
        return NotApplicable("the layout of b ([K, N] or [N, K]) is not readable from the source: no kernel indexes "
                             "it directly; pass the workload")
    feats = detect_all(source)
    kinds = frozenset(f.mechanism for f in feats)
    other = sorted(kinds - WRITTEN)
    if other:
        return NotApplicable(f"the kernel also carries {', '.join(other)}, which the matmul generator does not write")
    names, values, prefix = _constants(source)
    return Plan(dtypes.pop(), layout, tuple(found), kinds, _form(kinds, source), names, values, prefix)


def present(plan: Plan) -> list[str]:
    """The rewriter's mechanisms the kernel has: the detected kinds, and shared-memory tiling (which no
    detector sees) wherever the operands are staged in shared memory."""
    have = set(plan.kinds) | ({"smem_tiling"} if plan.form.core != "naive" else set())
    return sorted(have & set(MatmulRewriter.mechanisms))


def plan_facts(plan: Plan) -> dict:
    """The plan as Shape.facts: plain data (rebuilt by plan_of), with "mechanisms" as the audit reads it."""
    return {"operation": sorted({e.kind for e in plan.entries}), "dtype": plan.dtype,
            "b_layout": "[N, K] (K-major)" if plan.b_kmajor else "[K, N] (N-major)",
            "entries": [asdict(e) for e in plan.entries], "mechanisms": present(plan), "kinds": sorted(plan.kinds),
            "form": asdict(plan.form), "names": dict(plan.names), "values": dict(plan.values), "prefix": plan.prefix}


def plan_of(facts: dict) -> Plan:
    return Plan(facts["dtype"], facts["b_layout"].startswith("[N, K]"), tuple(Entry(**e) for e in facts["entries"]),
                frozenset(facts["kinds"]), Form(**facts["form"]), dict(facts["names"]), dict(facts["values"]),
                facts["prefix"])


# ---- the step a mechanism takes --------------------------------------------------------------------------


def target_form(plan: Plan, mechanism: str, arch: str) -> Form | NotApplicable:
    """The form `mechanism` takes the kernel to, or why it cannot (its preconditions)."""
    f = plan.form
    sixteen = plan.dtype in ("bf16", "f16")
    hopper = re.fullmatch(r"sm_(\d+)a?", arch)
    sm = int(hopper.group(1)) if hopper else 0
    if mechanism == "smem_tiling":
        if f.core != "naive":
            return NotApplicable("the kernel already stages its operands in shared memory")
        return replace(f, core="smem")
    if mechanism == "register_tiling":
        if f.core in ("regtile", "mma", "wgmma"):
            return NotApplicable("the kernel already accumulates a tile of outputs per thread in registers")
        if f.core == "naive":
            return NotApplicable("register tiling here tiles the shared-memory slices of a tiled kernel: apply "
                                 "smem_tiling first")
        return replace(f, core="regtile")
    if mechanism == "tensor_core_mma":
        if f.tensor_cores:
            return NotApplicable("the kernel already runs its products on tensor cores")
        if not sixteen:
            return NotApplicable(f"{plan.dtype} operands: mma.sync here takes bf16 or fp16 (tf32 would change the "
                                 "numerics)")
        if f.core != "regtile":
            return NotApplicable("the mma.sync fragments replace a register tile of outputs: apply register_tiling "
                                 "first")
        if not f.unroll:
            return NotApplicable("the loops over the MMA fragments must be unrolled (#pragma unroll), or the "
                                 "accumulators move to local memory: apply unroll first")
        return replace(f, core="mma", copy="sync", swizzle=False)
    if mechanism == "smem_swizzle":
        if f.swizzle:
            return NotApplicable("the kernel's shared-memory tiles are already swizzled")
        if f.core != "mma":
            return NotApplicable("the swizzle here permutes the 16-byte chunks that ldmatrix reads: the kernel has no "
                                 "mma.sync operand tiles")
        return replace(f, swizzle=True)
    if mechanism == "async_copy":
        if f.copy != "sync":
            return NotApplicable("the kernel already copies its tiles asynchronously")
        if not f.tensor_cores:
            return NotApplicable("the cp.async ring here feeds tensor-core tiles of 128-byte rows: apply "
                                 "tensor_core_mma first")
        return replace(f, copy="cp_async")
    if mechanism == "wgmma":
        if f.core == "wgmma":
            return NotApplicable("the kernel already uses warpgroup MMA")
        if f.core != "mma":
            return NotApplicable("wgmma replaces mma.sync tiles: apply tensor_core_mma first")
        if not f.swizzle:
            return NotApplicable("wgmma here reads 128-byte swizzled tiles through its descriptors: apply "
                                 "smem_swizzle first")
        if arch != "sm_90a":
            return NotApplicable(f"wgmma needs the arch-specific sm_90a target (this target is {arch})")
        return replace(f, core="wgmma")
    if mechanism == "tma":
        if f.copy == "tma":
            return NotApplicable("the kernel already loads its tiles with the TMA")
        if not f.tensor_cores or f.copy != "cp_async":
            return NotApplicable("the TMA ring here replaces a cp.async ring of tensor-core tiles: apply async_copy "
                                 "first")
        if not f.swizzle:
            return NotApplicable("the TMA here writes 128-byte swizzled tiles: apply smem_swizzle first")
        if sm < 90:
            return NotApplicable(f"the TMA needs sm_90 or newer (this target is {arch})")
        return replace(f, copy="tma")
    if mechanism == "warp_specialization":
        if f.ws:
            return NotApplicable("the kernel is already warp-specialized")
        if f.core != "wgmma" or f.copy != "tma":
            return NotApplicable("warp specialization here gives the TMA ring to a producer warpgroup feeding wgmma "
                                 "consumers: apply wgmma and tma first")
        if not f.lb:
            return NotApplicable("the producer/consumer register split (setmaxnreg) needs __launch_bounds__ to size "
                                 "the registers: apply launch_bounds first")
        if arch != "sm_90a":
            return NotApplicable(f"setmaxnreg and wgmma need the sm_90a target (this target is {arch})")
        return replace(f, ws=True)
    return NotApplicable(f"the matmul rewriter does not write {mechanism}")


# ---- parameters ------------------------------------------------------------------------------------------


def card_values(config: dict) -> dict:
    """role -> value of a skill configuration: flat {NAME: int} pairs; or a card's carrier (or the card
    itself) with its measured configuration ([{"workload", "values": [{name, value, role, axis}]}], the
    gemm workload's kernel first; under "measured" as admission passes it) and example configuration
    ([{name, value}]); or one "values" list. The first value found for a role wins, flat pairs first."""
    out: dict = {}
    carrier = config.get("carrier") if isinstance(config.get("carrier"), dict) else config
    items: list[dict] = [{"name": k, "value": v} for k, v in config.items() if type(v) is int]
    groups = (carrier.get("measured_configuration") or carrier.get("measured")
              or ([{"values": config["values"]}] if "values" in config else []))
    groups = sorted(groups, key=lambda g: g.get("workload") != "gemm") if isinstance(groups, list) else []
    for g in groups:
        items += [it for it in g.get("values") or [] if isinstance(it, dict)]
    examples = carrier.get("example_configuration")
    items += [it for it in examples if isinstance(it, dict)] if isinstance(examples, list) else []
    for it in items:
        role = _role_of(str(it.get("name", "")))
        if role and isinstance(it.get("value"), int) and role not in out:
            out[role] = it["value"]
    return out


def legal(form: Form, v: dict, b_kmajor: bool) -> str:
    """Why the values `v` (role -> int) cannot build the form; '' when they can."""
    c = form.core
    if c == "smem":
        return "" if 1 <= v["tile"] <= 32 else "tile must be 1 to 32"
    if c == "regtile":
        bm, bn, bk, tm, tn = (v[k] for k in ("bm", "bn", "bk", "tm", "tn"))
        if min(bm, bn, bk, tm, tn) < 1 or bm % tm or bn % tn:
            return "BM / BN must be multiples of TM / TN"
        threads = (bm // tm) * (bn // tn)
        if not 32 <= threads <= 1024 or (bm + bn) * bk * 4 > 48 * 1024:
            return "threads or static shared memory out of range"
        if (tm * tn + tm + tn + 56) * threads > 65536:  # accumulators, operands, addresses: no spills
            return "the accumulators of a block exceed the register file"
        if form.vec and tn % 2:
            return "pair stores need an even TN"
        return ""
    stages = v.get("stages", 4) if form.copy != "sync" else 1
    if form.copy != "sync" and stages < 2:
        return "at least 2 stages"
    if c == "mma":
        bm, bn, wm, wn = v["bm"], v["bn"], v["warps_m"], v["warps_n"]
        if min(bm, bn, wm, wn) < 1 or bm % (16 * wm) or bn % (16 * wn) or wm * wn > 32:
            return "BM / BN must be multiples of 16 x WARPS_M / WARPS_N"
        if (bm // wm // 16) * (bn // wn // 8) * 4 > 128:
            return "a warp tile over 128 accumulators per thread"
    else:
        bm, bn = v["bm"], v["bn"]
        if bm not in (64, 128) or bn not in WGMMA_NS or (form.ws and bm != 128):
            return "wgmma tiles: BM 64 or 128 (128 with warp specialization), BN 64, 128 or 256"
    if not b_kmajor and bn % 64:
        return "BN must be a multiple of 64 (b staged in 64-column panels)"
    barriers = (2 if form.ws else 1) * stages * 8 if form.copy == "tma" else 0
    if stages * (bm + bn) * 128 + barriers + 1024 > SMEM_LIMIT:
        return "the stages exceed 227 KB of shared memory"
    return ""


def choose(plan: Plan, form: Form, config: dict) -> tuple[dict, list[str]]:
    """role -> value for the form: per role the card's value, else the kernel's, else the default, each kept
    only if the whole set stays legal; and notes on values not taken."""
    roles = FORM_ROLES[form.core]
    if form.copy == "sync" and form.tensor_cores:
        roles = tuple(r for r in roles if r != "stages")
    base = {r: DEFAULTS[form.core].get(r, ROLE_INFO[r][0]) for r in roles}
    if legal(form, base, plan.b_kmajor):
        raise AssertionError(f"defaults of {form.core} illegal: {legal(form, base, plan.b_kmajor)}")
    card = card_values(config)
    notes = []
    v = dict(base)
    for source_name, src in (("kernel", plan.values), ("card", card)):  # the card's values win
        trial = dict(v)
        for r in roles:
            if r in src:
                trial[r] = src[r]
        if not legal(form, trial, plan.b_kmajor):
            v = trial
            continue
        for r in roles:  # one at a time, so one illegal value does not drop the others
            if r in src and src[r] != v[r]:
                one = {**v, r: src[r]}
                if legal(form, one, plan.b_kmajor):
                    notes.append(f"{source_name} {r}={src[r]} not used: {legal(form, one, plan.b_kmajor)}")
                else:
                    v = one
    if form.tensor_cores and form.copy != "sync":
        while legal(form, v, plan.b_kmajor) and v["stages"] > 2:  # shrink the ring to fit
            v["stages"] -= 1
    return v, notes


# ---- emission --------------------------------------------------------------------------------------------


def _wgmma_variants() -> list[dict]:
    out = []
    for n in WGMMA_NS:
        regs = n // 2
        ds = [f"%{i}" for i in range(regs)]
        dl = [("{" if i == 0 else "") + ", ".join(ds[i:i + 16]) + ("}, " if i + 16 >= regs else ", ")
              for i in range(0, regs, 16)]
        os_ = [f'"+f"(d[{i}])' for i in range(regs)]
        ol = [", ".join(os_[i:i + 8]) + ("," if i + 8 < regs else "") for i in range(0, regs, 8)]
        out.append({"n": n, "regs": regs, "dlines": dl, "olines": ol})
    return out


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    # CUDA's asm operand lists ({%0, ...}) clash with jinja's default block and comment delimiters
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             block_start_string="<%", block_end_string="%>", comment_start_string="<#",
                             comment_end_string="#>",
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True, autoescape=False)
    return env.get_template("matmul.cu.j2")


_OPS = {"mm": "out = a @ b", "addmm": "out = bias + a @ b (bias: N elements, added to every row in fp32)",
        "bmm": "out[i] = a[i] @ b[i] for each of the batch's dense problems",
        "grouped_mm": "out[offs[g-1]:offs[g]] = a[offs[g-1]:offs[g]] @ b[g] for each group g (offs: int32 cumulative "
                      "row ends on the device)"}


def _call(e: Entry) -> str:
    return ", ".join([e.a, e.b, e.bias or "nullptr", e.offs or "nullptr", e.out, e.batch or "1", e.groups or "0",
                      e.M, e.N, e.K, e.stream])


def _header(plan: Plan, form: Form, v: dict, names: dict) -> list[str]:
    dt = {"bf16": "bf16", "f16": "fp16", "f32": "fp32"}[plan.dtype]
    b = "b [N, K] row-major (K-major: out = a @ b^T)" if plan.b_kmajor else "b [K, N] row-major"
    lines = [f"Tiled matrix product: {dt} in and out, fp32 accumulation; a [M, K] row-major, {b}, out [M, N] "
             "row-major."]
    for e in plan.entries:
        lines.append(f"  {e.name}: {_OPS[e.kind].replace('a @ b', 'a @ b^T') if plan.b_kmajor else _OPS[e.kind]}")
    core = {"smem": "one output per thread from tile x tile slices of a and b staged in shared memory",
            "regtile": "a TM x TN tile of outputs per thread accumulated in registers from k-slices staged in "
                       "shared memory",
            "mma": "tensor cores: mma.sync m16n8k16 with fp32 accumulators in registers, operands read with "
                   "ldmatrix from 64-wide k-tiles in shared memory, WARPS_M x WARPS_N warps per block tile",
            "wgmma": "tensor cores: warpgroup MMA (wgmma.mma_async m64nNk16, sm_90a), both operands read from shared "
                     "memory through matrix descriptors, fp32 accumulators in registers, a warpgroup per 64 rows"}
    lines.append("Mechanisms:")
    lines.append(f"  * {core[form.core]};")
    if form.swizzle:
        lines.append("  * the 128-byte XOR swizzle of the shared tiles (chunk c of row r at c ^ (r % 8));")
    if form.copy == "cp_async":
        lines.append("  * k-tiles copied with cp.async into a ring of STAGES shared-memory stages, one barrier per "
                     "k-tile;")
    if form.copy == "tma":
        lines.append("  * k-tiles loaded by the TMA (3D tensor maps, 128-byte swizzle by the copy engine) into a ring "
                     "of STAGES stages completing on mbarriers with transaction counts;")
    if form.ws:
        lines.append("  * warp specialization: a producer warpgroup (one thread) drives the TMA, consumer warpgroups "
                     "compute; setmaxnreg moves registers to the consumers; full/empty mbarriers per stage;")
    if not plan.b_kmajor and form.tensor_cores:
        lines.append("  * b staged as 64-column panels of 128-byte k-rows"
                     + (" and read transposed (MN-major descriptors)" if form.core == "wgmma" else
                        " and read with ldmatrix.trans") + ";")
    lines.append("  * GROUP_M block rows sweep the N tiles together (L2 reuse).")
    if form.tensor_cores:
        need = "K a multiple of 8" if plan.b_kmajor else "K and N multiples of 8"
        lines.append(f"The fast path needs {need} and 16-byte aligned a and b; other calls take a plain tiled "
                     "kernel: slower, any shape.")
    out = []
    for ln in lines:
        for role in ("stages", "group_m", "warps_m", "warps_n"):
            if role in names:
                ln = re.sub(rf"\b{_SUFFIX[role]}\b", names[role], ln)
        indent = re.match(r" *(?:\* )?", ln).group(0)
        out += textwrap.wrap(ln, 110, subsequent_indent=" " * len(indent), break_on_hyphens=False)
    return out


def emit(plan: Plan, form: Form, values: dict) -> str:
    """The kernel file of `plan` at `form` with the tuning constants `values` (role -> int)."""
    names = {r: plan.names.get(r) or f"{plan.prefix}_{_SUFFIX[r]}" for r in values}
    taken = set()
    for r in list(names):  # two roles never share a name
        while names[r] in taken:
            names[r] += "_"
        taken.add(names[r])
    tunables = [{"name": names[r], "value": values[r], "comment": ROLE_INFO[r][1]
                 .replace("BM / WARPS_M", f"{names.get('bm', 'BM')} / {names.get('warps_m', '')}")
                 .replace("BN / WARPS_N", f"{names.get('bn', 'BN')} / {names.get('warps_n', '')}")}
                for r in FORM_ROLES[form.core] if r in values]
    fallback = None
    if form.tensor_cores:
        fallback = "regtile" if "register_tiling" in plan.kinds else "smem"
    ctx = {
        "header": _header(plan, form, values, names), "dt": DT[plan.dtype], "b_kmajor": plan.b_kmajor,
        "core": form.core, "copy": form.copy, "swizzle": form.swizzle, "ws": form.ws, "restrict": form.restrict,
        "lb": form.lb, "unroll": form.unroll, "vec": form.vec, "fallback": fallback, "tunables": tunables,
        "nm": {r: names.get(r, "") for r in ROLE_INFO},
        "wgmma_variants": _wgmma_variants(),
        "entries": [{"name": e.name, "params": e.params, "call": _call(e),
                     "comment": [f"{e.name}: {_OPS[e.kind]}" + (" (b^T)" if plan.b_kmajor else "")]}
                    for e in plan.entries],
    }
    return _template().render(**ctx)


# ---- the rewriter ----------------------------------------------------------------------------------------


_KERNEL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)\s*)?(\w+)\s*\(")


def _main_kernel(source: str) -> str:
    """The __global__ function carrying the most detected features (the first on a tie)."""
    from klineage.mechanisms import detect_all
    names = [m.group(1) for m in _KERNEL.finditer(source)]
    if not names:
        return "<file>"
    loci = [f.locus.split(":")[0] for f in detect_all(source)]
    return max(names, key=lambda n: (loci.count(n), -names.index(n)))


def _kernel_text(source: str, name: str) -> str:
    i = source.find(f"{name}(")
    start = source.rfind("__global__", 0, i) if i >= 0 else -1
    if start < 0:
        return ""
    depth, j = 0, source.find("{", i)
    for k in range(j, len(source)):
        depth += {"{": 1, "}": -1}.get(source[k], 0)
        if depth == 0:
            return source[start:k + 1]
    return source[start:]


# The rules families a ladder step takes between structural ones (the gemm ladder's order): their own
# forward rewrites, not this generator's.
RULES_STEPS = ("unroll", "launch_bounds")


@register
class MatmulRewriter(ShapeRewriter):
    name = "matmul"
    mechanisms = ("smem_tiling", "register_tiling", "tensor_core_mma", "smem_swizzle", "async_copy", "wgmma", "tma",
                  "warp_specialization")
    # from a naive kernel to the H200 expert's form; tensor_core_mma needs unrolled fragment loops and the
    # warp-specialized register split needs launch bounds, which the rules families add
    ladder = ("smem_tiling", "register_tiling", "unroll", "tensor_core_mma", "smem_swizzle", "async_copy", "wgmma",
              "tma", "launch_bounds", "warp_specialization")

    def recognise(self, source: str, workload=None) -> Shape | NotApplicable:
        try:
            plan = recognise_plan(source, workload)
            if isinstance(plan, NotApplicable):
                return plan
            return Shape(self.name, _main_kernel(source), plan_facts(plan))
        except Exception as exc:  # a kernel this reader trips on is not one it recognises
            return NotApplicable(f"the matmul reader failed on this kernel ({type(exc).__name__}: {exc})")

    def rewrite(self, source: str, shape: Shape, mechanism: str, config: dict,
                workload=None) -> Applied | NotApplicable:
        try:
            return self._rewrite(source, shape, mechanism, config, workload)
        except Exception as exc:  # never raises: a plan the generator trips on is a reason, not a crash
            return NotApplicable(f"the matmul generator failed ({type(exc).__name__}: {exc})")

    def _rewrite(self, source: str, shape: Shape, mechanism: str, config: dict, workload) -> Applied | NotApplicable:
        from klineage.gate.compile import DEFAULT_ARCH
        from klineage.lineage.audit import audit_version
        from klineage.mechanisms import Kernel, detect_all, registry
        if mechanism in RULES_STEPS:  # a ladder step of a rules family (see `ladder`)
            return registry()[mechanism].reoptimize(Kernel(source), None, None)
        plan = plan_of(shape.facts)
        arch = str(config.get("arch") or DEFAULT_ARCH)
        form = target_form(plan, mechanism, arch)
        if isinstance(form, NotApplicable):
            return form
        values, notes = choose(plan, form, config)
        new = emit(plan, form, values)
        known = {m.NAME for m in registry().values() if m.DETECTABLE}
        audit = audit_version(detect_all(new), detect_all(source), mechanism, known)
        if not audit["ok"]:
            return NotApplicable(f"the written kernel fails the audit: {audit['reason']}")
        # and as this rewriter reads it (shared-memory tiling, which no detector sees): exactly `mechanism` added
        again = recognise_plan(new, workload)
        if isinstance(again, NotApplicable):
            return NotApplicable(f"the written kernel is not read back as a matrix product: {again.reason}")
        was, now = set(present(plan)), set(present(again))
        if was - now or now - was != {mechanism}:
            return NotApplicable(f"the written kernel reads as {sorted(now)} against {sorted(was)} before "
                                 f"(expected {mechanism} added)")
        kernel = f"matmul_{form.core}_kernel"
        names = {r: n for r, n in zip(values, [t for t in _tunable_names(new, values)])}
        return Applied(new, mechanism, f"{kernel}:{mechanism}", before=_kernel_text(source, shape.kernel),
                       after=_kernel_text(new, kernel),
                       config={"form": asdict(form), "values": {names[r]: v for r, v in values.items()},
                               "notes": notes, "audit": {k: audit[k] for k in ("added_forward", "lost_forward")}})


def _tunable_names(source: str, values: dict) -> list[str]:
    """The names the written file gives the roles of `values`, in their order."""
    names, _, _ = _constants(source)
    return [names.get(r, r) for r in values]
