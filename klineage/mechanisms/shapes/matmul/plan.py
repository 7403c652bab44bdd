"""A matmul kernel file read into a plan: the generator's constants by role, the Entry / Form / Plan
records, and recognition (entry points, element type, b's layout, mechanism kinds, tuning constants)."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from klineage import tuning
from klineage.mechanisms.base import NotApplicable

# The structural mechanisms the rewriter adds (MatmulRewriter.mechanisms)
MECHANISMS = ("smem_tiling", "register_tiling", "tensor_core_mma", "smem_swizzle", "async_copy", "wgmma", "tma",
              "warp_specialization")
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
    a_mmajor: bool = False      # a stored [K, M] (M-major: column m of a^T is row m of the product)


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


_CALL = re.compile(r"\{\s*return\s+launch_matmul\(([^;]*)\);\s*\}")


def _generated(name: str, params: str, source: str, end: int) -> Entry | None:
    """The entry point of a file this generator wrote (`return launch_matmul(a, b, bias, offs, out, batch,
    groups, M, N, K, stream);`), its roles read positionally; None for any other body."""
    m = _CALL.match(source, end - 1)
    if not m:
        return None
    args = [a.strip() for a in m.group(1).split(",")]
    if len(args) != 11:
        return None
    a, b, bias, offs, out, batch, groups, M, N, K, stream = args
    bias, offs = (None if x == "nullptr" else x for x in (bias, offs))
    batch = None if batch == "1" else batch
    groups = None if groups == "0" else groups
    kind = "grouped_mm" if offs else "bmm" if batch else "addmm" if bias else "mm"
    return Entry(name, params, kind, a, b, out, M, N, K, stream, bias=bias, offs=offs, batch=batch, groups=groups)


def entries(source: str) -> tuple[list[Entry], list[str]]:
    """The file's matrix-product entry points read by their parameters' names (or, in a file this
    generator wrote, by its call), and why each other entry point is not one."""
    found, why = [], []
    for m in _ENTRY.finditer(source):
        e = _generated(m.group(1), m.group(2), source, m.end()) or _entry(m.group(1), m.group(2))
        (found if isinstance(e, Entry) else why).append(e)
    return found, why


def computed_entries(source: str) -> tuple[list[Entry], bool, bool, str] | str:
    """(entry points, a [K, M], b [N, K], element type) of a file whose entry points launch a plain
    product, read by what its kernel computes (read.read_product); the fact that blocked it otherwise."""
    from klineage.mechanisms.shapes.matmul.read import Refused, read_product
    names = [m.group(1) for m in _ENTRY.finditer(source)]
    params = {m.group(1): m.group(2) for m in _ENTRY.finditer(source)}
    if not names:
        return 'no extern "C" cudaError_t entry point'
    try:
        got, a_mmajor, b_kmajor, dtype = read_product(source, names)
    except Refused as exc:
        return str(exc) if exc.definite else f"{exc} (not followed)"
    out = [Entry(g["name"], params[g["name"]], g["kind"], g["a"], g["b"], g["out"], g["M"], g["N"], g["K"],
                 g["stream"], bias=g["bias"], batch=g["batch"]) for g in got]
    return out, a_mmajor, b_kmajor, dtype


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


def _size(expr: str, scalars: dict) -> int | None:
    """The value of a size the generator's call passes (`N`, `M*K`) for the workload's scalars."""
    import sympy
    names = set(re.findall(r"[A-Za-z_]\w*", expr))
    if not names <= set(scalars):
        return None
    v = sympy.sympify(expr, locals={n: sympy.Symbol(n) for n in names}).subs(
        {sympy.Symbol(n): scalars[n] for n in names})
    return int(v) if v.is_number else None


def _a_mmajor_from_source(source: str) -> bool:
    """Whether this generator's file reads a stored [K, M] (its `a_at` indexes a[k * M + m])."""
    m = re.search(r"a_at\([^)]*\)\s*\{\s*return[^;]*\[([^\];]*)\]", source)
    return bool(m and re.search(r"\bk\)?\s*\*\s*d\.M\b", m.group(1)))


def _b_layout_from_workload(workload, e: Entry, a_mmajor: bool = False) -> bool | None | str:
    """K-major (True) / N-major (False) from the shapes of the workload's inputs; None when the workload
    is not about this entry or its shapes cannot tell (K = N); a reason when its inputs are not a
    product this rewriter writes (a is [.., K, M] where `a_mmajor`, else [.., M, K])."""
    if workload is None or getattr(workload, "entry", None) != e.name:
        return None
    shapes = sorted(list(workload.probe_shapes) + list(workload.benchmark_cases),
                    key=lambda s: sum(v for v in s.values() if isinstance(v, int)))
    scalars = [workload.scalars(s) for s in shapes]
    sizes = [(s, tuple(_size(x, sc) for x in (e.M, e.N, e.K))) for s, sc in zip(shapes, scalars)]
    tried = [s for s, (M, N, K) in sizes if None not in (M, N, K) and K != N]
    if not tried and shapes and e.K in shapes[0] and {e.M, e.N, e.K} != {e.K}:
        tried = [{**shapes[0], e.K: shapes[0][e.K] + 8}]
    for shape in tried[:1]:
        sc = workload.scalars(shape)
        ins = workload.make_inputs(shape, 0)
        if e.a not in ins or e.b not in ins:
            return f"the workload's inputs have no {e.a} and {e.b}"
        M, N, K = (_size(x, sc) for x in (e.M, e.N, e.K))
        a, b = tuple(ins[e.a].shape), tuple(ins[e.b].shape)
        want = (K, M) if a_mmajor else (M, K)
        if a[-2:] != want:
            return f"{e.a} is {a}, not [.., {'K, M' if a_mmajor else 'M, K'}] row-major"
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
    """The plan of a matrix-product kernel file, or NotApplicable naming why it is not one.

    Its entry points are read, in this order: as this generator writes them (`return launch_matmul(...)`);
    by what the kernel they launch computes (a plain product, klineage.mechanisms.shapes.matmul.read: the
    layouts come from its indexing); by their parameters' names (M, N, K, a batch or group count: tiled
    kernels, whose layout of b comes from the workload or from how a kernel indexes it)."""
    from klineage.mechanisms import detect_all
    found, why = entries(source)
    a_mmajor, layout = False, None
    generated = bool(found) and not why and all(_CALL.match(source, m.end() - 1) for m in _ENTRY.finditer(source))
    computed = None if generated else computed_entries(source)
    if isinstance(computed, tuple):
        found, a_mmajor, layout, dtype = computed
        why = []
        for e in found:
            got = _b_layout_from_workload(workload, e, a_mmajor)
            if isinstance(got, str):
                return NotApplicable(got)
            if got is not None and got != layout:
                return NotApplicable(f"the kernel reads {e.b} as {'[N, K]' if layout else '[K, N]'}, and the "
                                     f"workload's {e.b} is {'[N, K]' if got else '[K, N]'}")
    elif computed is not None and not computed.endswith("(not followed)") and _form(frozenset(), source).core == "naive":
        # a kernel of one thread per output that does not compute a plain product: its names say nothing more
        return NotApplicable(f"not a plain matrix product: {computed}")
    elif not found or why:
        named = ('no extern "C" entry point of a matrix product' + (f" ({'; '.join(why)})" if why else "")) \
            if not found else f"entry points that are not matrix products: {'; '.join(why)}"
        return NotApplicable(named if computed is None or "no extern" in computed else
                             f"{named}; read by what it computes, {computed}")
    dtypes = {dtype} if isinstance(computed, tuple) else {_dtype_of(e) for e in found}
    if len(dtypes) != 1:
        return NotApplicable("entry points of different element types")
    if layout is None:
        a_mmajor = _a_mmajor_from_source(source)
        for e in found:
            got = _b_layout_from_workload(workload, e, a_mmajor)
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
    return Plan(dtypes.pop(), layout, tuple(found), kinds, _form(kinds, source), names, values, prefix, a_mmajor)


def present(plan: Plan) -> list[str]:
    """The rewriter's mechanisms the kernel has: the detected kinds, and shared-memory tiling (which no
    detector sees) wherever the operands are staged in shared memory."""
    have = set(plan.kinds) | ({"smem_tiling"} if plan.form.core != "naive" else set())
    return sorted(have & set(MECHANISMS))


# the forms written for 16-bit operands with a K-major a only
SIXTEEN_BIT_K_MAJOR = ("wgmma", "tma", "warp_specialization")


def refused(plan: Plan) -> list[str]:
    """The rewriter's mechanisms this kernel's element type and layout cannot take (fp32 operands, or a
    stored [K, M]: no wgmma, TMA or warp specialization here)."""
    return list(SIXTEEN_BIT_K_MAJOR) if plan.dtype == "f32" or plan.a_mmajor else []


def plan_facts(plan: Plan) -> dict:
    """The plan as Shape.facts: plain data (rebuilt by plan_of), with "mechanisms" as the audit reads it."""
    return {"operation": sorted({e.kind for e in plan.entries}), "dtype": plan.dtype,
            "b_layout": "[N, K] (K-major)" if plan.b_kmajor else "[K, N] (N-major)",
            "a_layout": "[K, M] (M-major)" if plan.a_mmajor else "[M, K] (K-major)",
            "entries": [asdict(e) for e in plan.entries], "mechanisms": present(plan), "kinds": sorted(plan.kinds),
            "refuses": refused(plan), "retyped": [m for m in MECHANISMS if m not in refused(plan)],
            "form": asdict(plan.form), "names": dict(plan.names), "values": dict(plan.values), "prefix": plan.prefix}


def plan_of(facts: dict) -> Plan:
    return Plan(facts["dtype"], facts["b_layout"].startswith("[N, K]"), tuple(Entry(**e) for e in facts["entries"]),
                frozenset(facts["kinds"]), Form(**facts["form"]), dict(facts["names"]), dict(facts["values"]),
                facts["prefix"], facts.get("a_layout", "").startswith("[K, M]"))
