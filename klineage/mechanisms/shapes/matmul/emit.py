"""A plan emitted as a whole kernel file from the generator's template (templates/matmul/matmul.cu.j2)."""
from __future__ import annotations

import re
import textwrap
from functools import lru_cache
from pathlib import Path

import jinja2

from klineage.mechanisms.shapes.matmul.plan import DT, FORM_ROLES, ROLE_INFO, WGMMA_NS, _SUFFIX, Entry, Form, Plan

TEMPLATES = Path(__file__).parents[1] / "templates" / "matmul"


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
