"""A plan emitted as a whole kernel file from the generator's template (templates/matmul/matmul.cu.j2)."""
from __future__ import annotations

import re
import textwrap
from functools import lru_cache
from pathlib import Path

import jinja2

from klineage import tuning
from klineage.mechanisms.shapes.matmul.plan import (DT, FORM_ROLES, ROLE_INFO, WGMMA_NS, _SUFFIX, Entry, Form, Plan,
                                                    _role_of)

TEMPLATES = Path(__file__).parents[1] / "templates" / "matmul"
ESIZE = {"bf16": 2, "f16": 2, "f32": 4}


def _transposed(plan: Plan) -> str:
    """How the stored operands stand in the product: " (b^T)", " (a^T)", " (a^T, b^T)" or ""."""
    t = [x for x, y in (("a^T", plan.a_mmajor), ("b^T", plan.b_kmajor)) if y]
    return f" ({', '.join(t)})" if t else ""


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
    a = "a [K, M] row-major (M-major: out = a^T @ b)" if plan.a_mmajor else "a [M, K] row-major"
    lines = [f"Tiled matrix product: {dt} in and out, fp32 accumulation; {a}, {b}, out [M, N] row-major."]
    for e in plan.entries:
        lines.append(f"  {e.name}: {_product(_OPS[e.kind], plan)}")
    core = {"smem": "one output per thread from tile x tile slices of a and b staged in shared memory",
            "regtile": "a TM x TN tile of outputs per thread accumulated in registers from k-slices staged in "
                       "shared memory",
            "mma": "tensor cores: mma.sync m16n8k16 with fp32 accumulators in registers, operands read with "
                   "ldmatrix from 64-wide k-tiles in shared memory, WARPS_M x WARPS_N warps per block tile",
            "mma_tf32": "tensor cores: mma.sync m16n8k8 on TF32 operands (each fp32 element rounded to a 10-bit "
                        "mantissa, cvt.rna) with fp32 accumulators in registers, operands read from 32-wide k-tiles "
                        "in shared memory, WARPS_M x WARPS_N warps per block tile",
            "wgmma": "tensor cores: warpgroup MMA (wgmma.mma_async m64nNk16, sm_90a), both operands read from shared "
                     "memory through matrix descriptors, fp32 accumulators in registers, a warpgroup per 64 rows"}
    lines.append("Mechanisms:")
    lines.append(f"  * {core[form.core + ('_tf32' if plan.dtype == 'f32' and form.core == 'mma' else '')]};")
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
    if not plan.b_kmajor and form.tensor_cores and plan.dtype != "f32":
        lines.append("  * b staged as 64-column panels of 128-byte k-rows"
                     + (" and read transposed (MN-major descriptors)" if form.core == "wgmma" else
                        " and read with ldmatrix.trans") + ";")
    if form.tensor_cores and plan.dtype == "f32" and (plan.a_mmajor or not plan.b_kmajor):
        which = " and ".join(x for x, y in (("a", plan.a_mmajor), ("b", not plan.b_kmajor)) if y)
        lines.append(f"  * {which} staged as 32-column panels of 128-byte k-rows, fragments read a word at a time;")
    lines.append("  * GROUP_M block rows sweep the N tiles together (L2 reuse).")
    if form.tensor_cores:
        ce = 4 if plan.dtype == "f32" else 8
        dims = ["K"] + (["N"] if not plan.b_kmajor else []) + (["M"] if plan.a_mmajor else [])
        need = f"K a multiple of {ce}" if len(dims) == 1 else f"{', '.join(dims[:-1])} and {dims[-1]} multiples of {ce}"
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


def _product(op: str, plan: Plan) -> str:
    """The entry's operation with the operands as the plan stores them (a^T, b^T)."""
    return op.replace("a @ b", ("a^T" if plan.a_mmajor else "a") + " @ " + ("b^T" if plan.b_kmajor else "b"))


# how the sweep (klineage.tuning) must read the constant of each role: its role there (None: none, a value
# swept by doubling and halving) and, for a tile extent, its axis
SWEEP_READS = {"tile": (None,), "bm": ("tile", "M"), "bn": ("tile", "N"), "bk": ("tile", "K"), "tm": (None, "factor"),
               "tn": (None, "factor"), "warps_m": ("warps",), "warps_n": ("warps",), "stages": ("stages",),
               "group_m": (None, "factor")}


def reads_as(name: str, role: str) -> bool:
    """Whether a constant named `name` reads as the generator's `role` both here (plan._role_of) and to
    the sweep (klineage.tuning: a tile extent with its axis, a warp count, a pipeline depth; the others
    as no thread count)."""
    if _role_of(name) != role:
        return False
    want = SWEEP_READS[role]
    if want[0] == "tile":
        return tuning.role(name) == "tile" and tuning.axis(name) == want[1]
    return tuning.role(name) in want


def tunable_name(plan: Plan, role: str) -> str:
    """The name the written kernel gives the constant of `role`: the kernel's own, else its prefix's
    (GEMM_BM), where the sweep reads it in that role; else the generator's own (MM_BM)."""
    for name in (plan.names.get(role), f"{plan.prefix}_{_SUFFIX[role]}"):
        if name and reads_as(name, role):
            return name
    return f"MM_{_SUFFIX[role]}"


def emit(plan: Plan, form: Form, values: dict) -> str:
    """The kernel file of `plan` at `form` with the tuning constants `values` (role -> int)."""
    names = {r: tunable_name(plan, r) for r in values}
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
        "a_mmajor": plan.a_mmajor, "f32": plan.dtype == "f32", "ce": 16 // ESIZE[plan.dtype],
        "esz": ESIZE[plan.dtype], "pc": 128 // ESIZE[plan.dtype], "bk": 128 // ESIZE[plan.dtype],
        "core": form.core, "copy": form.copy, "swizzle": form.swizzle, "ws": form.ws, "restrict": form.restrict,
        "lb": form.lb, "unroll": form.unroll, "vec": form.vec, "fallback": fallback, "tunables": tunables,
        "nm": {r: names.get(r, "") for r in ROLE_INFO},
        "wgmma_variants": _wgmma_variants(),
        "entries": [{"name": e.name, "params": e.params, "call": _call(e),
                     "comment": [f"{e.name}: {_OPS[e.kind]}" + _transposed(plan)]}
                    for e in plan.entries],
    }
    return _template().render(**ctx)
