"""Static rules about execution and the target: warp masks, dtype intrinsics, fast math, launch
bounds, unroll pragmas (the hardware rule sits with the rule table)."""
from __future__ import annotations

import re

from klineage.parse.source import Region, Src, _names, _pre, block_facts, template_values
from klineage.parse import syntax
from klineage.parse.text import split_top_level

_WARP_CALL = re.compile(r"\b(__shfl(?:_xor|_down|_up)?_sync|__ballot_sync|__any_sync|__all_sync|"
                        r"__match_(?:any|all)_sync|__reduce_\w+_sync)\s*\(\s*([^,()]+)")
_FULL = re.compile(r"^(?:0x[fF]{8}[uUlL]*|~0[uUlL]*|-1|~0x0[uU]?|0XFFFFFFFF[uU]?)$")


def _is_full(src: Src, mask: str) -> bool:
    mask = mask.strip()
    if _FULL.match(mask):
        return True
    v = src.value(mask)
    return v is not None and (v & 0xFFFFFFFF) == 0xFFFFFFFF


def _early_exits(src: Src, fn_name: str, before: int) -> list[int]:
    """Lines of `return` under a condition, or lane-dependent branches, before line `before` of `fn_name`."""
    out = []
    for fnode in syntax.functions(src.tree):
        if syntax.function_name(fnode) != fn_name:
            continue
        for n in syntax.walk(fnode):
            if n.type == "return_statement" and n.start_point.row + 1 < before and src.live(n.start_point.row + 1):
                if any(a.type == "if_statement" for a in syntax.ancestors(n) if a.start_byte >= fnode.start_byte):
                    out.append(n.start_point.row + 1)
    return out


def _lane_branch(src: Src, line: int) -> int | None:
    """Line of an `if` on the thread/lane index that encloses `line`, if any."""
    for n in syntax.walk(src.tree.root):
        if n.type == "if_statement" and n.start_point.row + 1 < line <= n.end_point.row + 1:
            cond = n.child_by_field_name("condition")
            cons = n.child_by_field_name("consequence")
            if cons is not None and cons.start_point.row + 1 <= line and cond is not None and \
                    re.search(r"threadIdx|\blane\w*\b|\btid\b", src.tree.text_of(cond)):
                return n.start_point.row + 1
    return None


def rule_warp_masks(src: Src, reg: Region, feature: dict | None, mechanism: str) -> list[dict]:
    sites = [(ln, m.group(1)) for ln, m in src.find(_WARP_CALL, reg.core) if _is_full(src, m.group(2))]
    by_fn: dict[str, list] = {}
    for ln, call in sites:
        f = src.fn_at(ln)
        by_fn.setdefault(f.name if f else "<file>", []).append((ln, call))
    out = []
    for fname, ss in by_fn.items():
        chain = {fname} | src.callers({fname})
        kernels = {f.name for f in src.functions if f.name in chain and f.space == "global"}
        notes, probe, lines = [], None, [ln for ln, _ in ss]
        exits = _early_exits(src, fname, min(lines))
        for g in chain - {fname}:
            calls = [ln for ln, _ in src.find(r"\b(?:" + "|".join(map(re.escape, src.refs[g] & chain)) + r")\b",
                                                   src.lines_of({g}))] if src.refs.get(g, set()) & chain else []
            if calls and src.sem.function(g) and src.sem.function(g).space != "host":
                exits += _early_exits(src, g, min(calls))
        branch = [b for b in (_lane_branch(src, ln) for ln in lines) if b]
        if exits or branch:
            probe = "ragged_size"
            notes.append(f"lanes may leave before the call (line {_names(str(x) for x in sorted(set(exits + branch)))}): "
                         "the shape must keep whole warps active")
            lines += exits + branch
        facts, dep = block_facts(src, kernels)
        vals = sorted({v for _, _, v in facts if v is not None})
        bad = [v for v in vals if v % 32]
        if dep:
            probe = "ragged_size"
            notes.append("the launch block size depends on the shape ("
                         + _names(f"`{e}` at line {ln}" for ln, e, v in facts if v is None) + ")")
        elif bad:
            notes.append(f"violated statically: a launch uses {bad[0]} threads per block")
        elif vals:
            notes.append(f"launch block sizes {', '.join(map(str, vals))} are multiples of 32")
        calls = _names(c for _, c in ss)
        cond = (f"blockDim a multiple of 32 and all 32 lanes of each warp reach {calls} with the full mask "
                f"0xffffffff in {fname}" + ("; " + "; ".join(notes) if notes else ""))
        out.append(_pre(src, "pipeline", cond,
                        "a full-mask warp collective with exited or inactive lanes is undefined: garbage partial "
                        "results or a hang", f"{calls}(0xffffffff, ...) in {fname}", lines, probe))
    return out



FP16, BF16 = "fp16 (__half / __half2)", "bf16 (__nv_bfloat16 / __nv_bfloat162)"
DTYPE_INTRINSICS = (
    (r"__half2float|__float2half(?:_r[nzdu])?|__floats2half2_rn|__float2half2_rn|__half22float2|"
     r"__float22half2_rn|__halves2half2|__half2half2|__half_as_u?short|__u?short_as_half", FP16),
    (r"__bfloat162float|__float2bfloat16(?:_r[nzdu])?|__floats2bfloat162_rn|__float22bfloat162_rn|"
     r"__bfloat1622float2|__float2bfloat162_rn|__bfloat162bfloat162|__bfloat16_as_u?short|__u?short_as_bfloat16",
     BF16),
    (r"__h(?:add|sub|mul|fma|div|max|min|abs|neg)2?|h2(?:exp|log|sqrt|rsqrt|rcp)|h(?:exp|log|sqrt|rsqrt|rcp)|"
     r"__low2float|__high2float|__low2half|__high2half", None),
    (r"__nv_cvt_\w*fp8\w*|__nv_fp8x?\d?_e[45]m[23]", "fp8 (e4m3 / e5m2)"),
    (r"__dp4a|__dp2a_lo|__dp2a_hi", "int8 packed four to a 32-bit word"),
)


def rule_dtype_intrinsics(src: Src, reg: Region, feature: dict | None, mechanism: str) -> list[dict]:
    scope = reg.extended or set(range(1, src.n_lines + 1))
    scope_text = "\n".join(src.code_lines[ln - 1] for ln in sorted(scope) if ln <= len(src.code_lines))
    found: dict[str, list[tuple[int, str]]] = {}
    for pat, dtype in DTYPE_INTRINSICS:
        hits = src.find(rf"\b(?:{pat})\s*\(", reg.extended)
        if not hits:
            continue
        if dtype is None:
            bf = bool(re.search(r"\b(?:__)?nv_bfloat162?\b", scope_text))
            hf = bool(re.search(r"\b(?:__)?half2?\b", scope_text))
            dtype = BF16 if bf and not hf else FP16 if hf and not bf else "fp16 or bf16 (__half2 / __nv_bfloat162)"
        found.setdefault(dtype, []).extend((ln, m.group(0).rstrip("( ")) for ln, m in hits)
    out = []
    for dtype, hits in found.items():
        hits.sort()
        calls = _names(c for _, c in hits)
        out.append(_pre(src, "data_types",
                        f"operands are {dtype}: the carrier computes or converts with {calls}; the entry "
                        "point's tensors must have that dtype",
                        f"another dtype is reinterpreted bit for bit (wrong values); the code does not carry over "
                        f"to other types without rewriting {calls}", calls, [ln for ln, _ in hits], None))
    return out


# Fast-math intrinsics: name -> (condition, fails_without, probe). Error bounds are those of the CUDA
# C++ Programming Guide's table of intrinsic functions (single precision).
FAST_MATH = {
    "__expf": ("fp32 inputs of moderate magnitude: __expf's error is 2 + floor(|1.173 x|) ulp, growing "
               "with |x| (overflow to inf above x ~ 88.7, like expf)",
               "results drift from expf as |x| grows: tolerance failures on large inputs", "large_magnitude"),
    "__exp10f": ("fp32 inputs of moderate magnitude: __exp10f's error is 2 + floor(|2.97 x|) ulp",
                 "results drift from exp10f as |x| grows", "large_magnitude"),
    "__powf": ("fp32 inputs with moderate |y log2 x|: __powf is exp2(y * __log2f(x)) and its error grows "
               "with that product", "results drift from powf for large exponents", "large_magnitude"),
    "__logf": ("positive fp32 inputs; __logf has 2^-21.41 absolute error on [0.5, 2] and 3 ulp elsewhere "
               "(not logf's 1 ulp)", "last-bit differences from logf; NaN or -inf outside the domain", None),
    "__log2f": ("positive fp32 inputs; __log2f has 2^-22 absolute error on [0.5, 2] and 2 ulp elsewhere",
                "last-bit differences from log2f", None),
    "__log10f": ("positive fp32 inputs; __log10f has 2^-24 absolute error on [0.5, 2] and 3 ulp elsewhere",
                 "last-bit differences from log10f", None),
    "__fdividef": ("fp32 denominators with |y| <= 2^126: for 2^126 < |y| < 2^128 __fdividef(x, y) returns 0 "
                   "(NaN when x is inf); 2 ulp otherwise",
                   "quotients with huge denominators come back 0 instead of a tiny value", "large_magnitude"),
    "__sinf": ("fp32 inputs within [-pi, pi]: __sinf has 2^-21.41 absolute error there and no full range "
               "reduction outside it", "large arguments give inaccurate results", "large_magnitude"),
    "__cosf": ("fp32 inputs within [-pi, pi]: __cosf has 2^-21.19 absolute error there and no full range "
               "reduction outside it", "large arguments give inaccurate results", "large_magnitude"),
    "__sincosf": ("fp32 inputs within [-pi, pi] (as __sinf and __cosf)", "large arguments give inaccurate results",
                  "large_magnitude"),
    "__tanf": ("fp32 inputs well inside (-pi/2, pi/2): __tanf is __sinf / __cosf and degrades near the poles "
               "and outside [-pi, pi]", "large arguments give inaccurate results", "large_magnitude"),
    "rsqrtf": ("positive fp32 inputs; rsqrtf has 2 ulp error (not correctly rounded like 1.0f / sqrtf)",
               "last-bit differences from 1/sqrtf; inf for 0, NaN for negatives", None),
    "__frcp_rn": ("fp32 operands; __frcp_rn is IEEE round-to-nearest, so the only condition is the fp32 range "
                  "(1/x of |x| > 2^126 is subnormal)", "none beyond fp32: same value as 1.0f / x", None),
    "__frsqrt_rn": ("positive fp32 operands; __frsqrt_rn is correctly rounded", "none beyond fp32", None),
}


def rule_fast_math(src: Src, reg: Region, feature: dict | None, mechanism: str) -> list[dict]:
    want = (feature or {}).get("detail", {}).get("intrinsic")
    names = [want] if want in FAST_MATH else list(FAST_MATH)
    hits = src.find(r"\b(" + "|".join(map(re.escape, names)) + r")\s*\(", reg.core)
    by: dict[str, list[int]] = {}
    for ln, m in hits:
        by.setdefault(m.group(1), []).append(ln)
    out = []
    for name, lines in by.items():
        cond, fails, probe = FAST_MATH[name]
        out.append(_pre(src, "data_types", cond, fails, f"{name}(...)", lines, probe))
    return out


_LB = re.compile(r"__launch_bounds__\s*\(((?:[^()]|\([^()]*\))*)\)\s*([A-Za-z_]\w*)\s*\(")


def rule_launch_bounds(src: Src, reg: Region, feature: dict | None, mechanism: str) -> list[dict]:
    out = []
    # read off the source (libclang does not report the attribute on every non-template kernel)
    for ln, m in src.find(_LB, None):
        f = src.sem.function(m.group(2))
        if f is None or (feature and f.name not in reg.core_fns):
            continue
        bounds = re.sub(r"\s+", " ", m.group(1).strip())
        args = split_top_level(bounds)
        n_txt = args[0]
        vals = set()
        tvals = template_values(src, f.name)
        if n_txt in tvals:
            vals = tvals[n_txt]
        elif (v := src.value(n_txt)) is not None:
            vals.add(v)
        n_desc = n_txt + (f" = {', '.join(map(str, sorted(vals)))}" if vals and str(min(vals)) != n_txt else "")
        cond = f"every launch of {f.name} uses at most {n_desc} threads per block (blockDim.x*y*z <= {n_txt})"
        if len(args) > 1:
            cond += (f"; ptxas caps registers so {args[1]} blocks of that size fit one SM "
                     "(minBlocksPerMultiprocessor)")
        facts, dep = block_facts(src, {f.name})
        over = [(ln, v) for ln, _, v in facts if v is not None and vals and v > max(vals)]
        if over:
            cond += f"; violated statically: the launch at line {over[0][0]} uses {over[0][1]} threads"
        elif dep:
            cond += "; the launch block size depends on the shape (" + _names(
                f"`{e}` at line {ln}" for ln, e, v in facts if v is None) + ")"
        elif facts:
            cond += "; launch block sizes: " + _names(f"{e} = {v}" if v is not None and e != str(v) else e
                                                      for _, e, v in facts)
        out.append(_pre(src, "pipeline", cond,
                        "a launch with more threads per block fails with cudaErrorLaunchOutOfResources ('too many "
                        "resources requested for launch')" + ("; the register cap can spill to local memory"
                                                              if len(args) > 1 else ""),
                        f"__launch_bounds__({bounds}) on {f.name}", [ln], "ragged_size" if dep else None))
    return out


_BUILTINS = {"threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize"}
_PRAGMA_UNROLL = re.compile(r"#\s*pragma\s+unroll\b\s*(\S*)")
_KEYWORDS = {"int", "unsigned", "long", "short", "char", "const", "auto", "size_t", "int64_t", "int32_t", "uint32_t",
             "uint64_t", "sizeof", "true", "false", "signed", "float", "double", "static_cast", "constexpr"}


def rule_unroll(src: Src, reg: Region, feature: dict | None, mechanism: str) -> list[dict]:
    out = []
    for n in syntax.walk(src.tree.root):
        if n.type != "preproc_call":
            continue
        m = _PRAGMA_UNROLL.match(src.tree.text_of(n).strip())
        ln = n.start_point.row + 1
        if not m or m.group(1) == "1" or (reg.core is not None and ln not in (reg.feature or reg.core)):
            continue
        loop = n.next_named_sibling
        while loop is not None and loop.type == "comment":
            loop = loop.next_named_sibling
        if loop is None or loop.type != "for_statement" or not src.live(loop.start_point.row + 1):
            continue
        parts = {f: loop.child_by_field_name(f) for f in ("initializer", "condition", "update")}
        text = {f: src.tree.text_of(p) if p is not None else "" for f, p in parts.items()}
        loop_vars = set(re.findall(r"([A-Za-z_]\w*)\s*=(?!=)", text["initializer"]))
        loop_vars |= set(re.findall(r"([A-Za-z_]\w*)\s*(?:\+\+|--|[-+*/|&^]=|<<=|>>=|=(?!=))", text["update"]))
        loop_vars |= set(re.findall(r"(?:\+\+|--)\s*([A-Za-z_]\w*)", text["update"]))
        fn = src.fn_at(ln)
        tparams = set(src.template_params(fn.name)) if fn else set()
        idents = set(re.findall(r"(?<![\w.])([A-Za-z_]\w*)", " ".join(text.values()))) - _KEYWORDS - loop_vars
        runtime = sorted((i for i in idents if not (i in src.macros or i in tparams or i.isupper())),
                         key=lambda i: (i in _BUILTINS, i))
        if not runtime:
            continue  # compile-time trip count: nothing is assumed
        header = re.sub(r"\s+", " ", src.tree.text_of(loop).split(")")[0] + ")")
        factor = m.group(1)
        cond = (f"the trip count of `{header}` is a runtime value ({', '.join(runtime)}): "
                + (f"the compiler unrolls by {factor} and keeps a remainder loop, so the gain needs trip counts "
                   f"of at least {factor}" if factor else
                   "a full unroll is impossible; the compiler unrolls by a factor of its choice (or not at all)"))
        out.append(_pre(src, "pipeline", cond,
                        "nothing breaks: short trip counts run mostly the remainder (no gain, more code and "
                        "registers)", f"#pragma unroll{' ' + factor if factor else ''} over {header}",
                        [(ln, loop.start_point.row + 1)], "tiny_size"))
    return out
