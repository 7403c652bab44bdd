"""Static rules about memory: vector casts, shared-memory sizes, read-only loads, restrict."""
from __future__ import annotations

import re

from klineage.gate.compile import KIB, SMEM_OPTIN_MAX, SMEM_STATIC_LIMIT, SMEM_STATIC_LIMIT_BY_TARGET, SMEM_TARGETS
from klineage.parse.source import ELEMENT_BYTES, Region, Src, _names, _pre, span, template_values
from klineage.parse.semantics import VECTOR_TYPES

_CAST_TEXT = re.compile(r"reinterpret_cast\s*<[^<>]*>|\(\s*(?:const\s+)?\w+\s*(?:const\s*)?\*\s*\)")


def _pointee_of(src: Src, ident: str, line: int) -> str | None:
    fn = src.fn_at(line)
    if fn:
        f = src.sem.function(fn.name)
        for p in (f.params if f else ()):
            if p.name == ident and p.pointee:
                return p.pointee
    best = None
    for (name, ln), t in src.sem.var_types.items():
        if name == ident and ln <= line and (best is None or ln > best[0]):
            best = (ln, t)
    if best and "*" in best[1]:
        return best[1].rsplit("*", 1)[0]
    return None


def _element(pointee: str | None) -> tuple[str, int] | None:
    if not pointee:
        return None
    t = re.sub(r"\b(const|volatile|__restrict__|__restrict)\b", "", pointee).strip()
    return (t, ELEMENT_BYTES[t]) if t in ELEMENT_BYTES else None


def rule_vector_casts(src: Src, reg: Region, feature: dict | None, mechanism: str) -> list[dict]:
    casts = [c for c in src.sem.vector_casts if (reg.extended is None or c.line in reg.extended) and src.live(c.line)]
    groups: dict[str, list] = {}
    for c in casts:
        groups.setdefault(c.vector, []).append(c)
    sites: dict[str, list[tuple[int, str, tuple[str, int] | None]]] = {}
    for vec, cs in groups.items():
        for c in cs:
            line = src.code_lines[c.line - 1]
            texts = [re.sub(r"\s*([<>*()])\s*", r"\1", re.sub(r"\s+", " ", m.group(0)))
                     for m in _CAST_TEXT.finditer(line) if re.search(rf"\b{vec.lstrip('_')}\b", m.group(0))]
            text = ", ".join(dict.fromkeys(texts)) or f"cast to {c.to_type}"
            arg = re.search(r"(?:reinterpret_cast\s*<[^<>]*>|\(\s*(?:const\s+)?\w+\s*\*\s*\))\s*\(?\s*([A-Za-z_]\w*)", line)
            elem = _element(_pointee_of(src, arg.group(1), c.line)) if arg else None
            sites.setdefault(vec, []).append((c.line, text, elem))
    if not sites and feature and feature.get("detail", {}).get("vector") in VECTOR_TYPES:
        d = feature["detail"]
        a, b = feature["lines"][0], feature["lines"][-1]
        sites[d["vector"]] = [((a, b), f"{d['vector']} access ({d.get('form', 'deref')})", None)]
    if not sites:  # vector-typed pointer parameters of kernels: the caller made the vectors
        for f in src.sem.kernels():
            if reg.ext_fns is not None and f.name not in reg.ext_fns:
                continue
            for p in f.params:
                vec = p.pointee and next((v for v in VECTOR_TYPES if re.search(rf"\b{v}\b", p.pointee)), None)
                if vec:
                    sites.setdefault(vec, []).append((f.lines[0], f"parameter {p.type} {p.name} of {f.name}", None))
    out = []
    for vec, ss in sites.items():
        elem_t, lanes, nbytes = VECTOR_TYPES[vec]
        elems = {e for _, _, e in ss if e}
        per = None
        if len(elems) == 1:
            (et, eb), = elems
            if nbytes % eb == 0:
                elem_t, per = et, nbytes // eb
        per = per or lanes
        fns = {src.fn_at(x if isinstance(x, int) else x[0]) for x, _, _ in ss} - {None}
        names = {f.name for f in fns}
        # guards live in the function of the cast, a helper it calls, or the host code that dispatches to it
        gl = src.lines_of(names | src.callees(names) | src.callers(names)) or None
        lines = [x for x, _, _ in ss]
        fact = _names(t for _, t, _ in ss)
        align_pat = (rf"(?:\b(?:u?intptr_t|size_t|uint64_t|unsigned long long)\s*\)|reinterpret_cast\s*<\s*u?intptr_t)"
                     rf"[^;]*(?:&\s*(?:{nbytes - 1}|0x{nbytes - 1:x}|0x{nbytes - 1:X})[uU]?\b|%\s*{nbytes}[uU]?\b)"
                     r"|__builtin_assume_aligned|\balignof\s*\(|\bis_aligned\w*\s*\(")
        aguard = src.find(align_pat, gl)
        if aguard:
            ln = aguard[0][0]
            cond = (f"handled in code: the {vec} path depends on a {nbytes}-byte alignment check of the base "
                    f"address (`{src.text(ln)[:80]}` at line {ln}): misaligned pointers are peeled or sent elsewhere")
            afact = f"; alignment check at line {ln}"
        else:
            cond = (f"the base address of every {vec} access is {nbytes}-byte aligned (pointer offsets a "
                    f"multiple of {nbytes} bytes, e.g. no views starting mid-vector)")
            afact = ""
        out.append(_pre(src, "layout", cond,
                        f"a {nbytes}-byte {vec} access at an address not a multiple of {nbytes} faults "
                        "(cudaErrorMisalignedAddress)", fact, lines + ([aguard[0][0]] if aguard else []),
                        "misaligned_base", evidence=f"static: {fact} at {span(lines)}{afact}"))
        size_pat = rf"(?:%\s*{per}|&\s*(?:{per - 1}|0x{per - 1:x}))[uU]?\s*\)*\s*[!=]=\s*0"
        tail_pat = (r"\b\w*(?:tail|remainder|leftover)\w*\b|\brem\b|\b\w+_rem\b"
                    rf"|%\s*{per}[uU]?\b(?!\s*\)*\s*[!=]=)|&\s*~\s*\(?\s*{per - 1}"
                    rf"|\*\s*{per}\s*\+|/\s*{per}\s*\*\s*{per}\b")
        sguard = src.find(size_pat, gl)
        tguard = [] if sguard else src.find(tail_pat, gl)
        if sguard:
            ln = sguard[0][0]
            tguard = sguard
            cond = (f"handled in code: the {vec} path is taken only for sizes divisible by {per} "
                    f"(`{src.text(ln)[:80]}` at line {ln})")
            tfact = f"; size check at line {ln}"
        elif tguard:
            ln = tguard[0][0]
            cond = (f"handled in code: elements past the last whole {vec} ({per} {elem_t} each) are done by "
                    f"scalar code (`{src.text(ln)[:80]}` at line {ln})")
            tfact = f"; scalar remainder at line {ln}"
        else:
            cond = (f"element counts (row length, total size) divisible by {per}: each {vec} carries {per} "
                    f"{elem_t} and no scalar tail is visible")
            tfact = ""
        out.append(_pre(src, "layout", cond,
                        f"the last n % {per} elements are skipped or a {vec} access reads/writes past the end "
                        "of the buffer (wrong results or an illegal address)", fact,
                        lines + ([tguard[0][0]] if tguard else []), "ragged_size",
                        evidence=f"static: {fact} at {span(lines)}{tfact}"))
    return out


def _fits(static: int, dynamic: int = 0) -> list[str]:
    out = []
    for t in SMEM_TARGETS:
        smax = SMEM_STATIC_LIMIT_BY_TARGET.get(t, SMEM_STATIC_LIMIT)
        optin = SMEM_OPTIN_MAX.get(t, SMEM_OPTIN_MAX.get(t.rstrip("a")))
        if static <= smax and static + dynamic <= optin:
            out.append(t)
    return out


def _template_size(src: Src, v) -> tuple[int, str] | None:
    """Bytes of a shared array sized by template parameters, at the largest instantiation in the source."""
    m = re.match(r"^(.*?)((?:\[[^\]]+\])+)$", v.type.strip())
    if not m or not v.function:
        return None
    base = re.sub(r"\b(const|volatile)\b", "", m.group(1)).strip()
    elem = ELEMENT_BYTES.get(base) or (VECTOR_TYPES[base][2] if base in VECTOR_TYPES else None)
    tv = {p: max(vs) for p, vs in template_values(src, v.function).items() if vs}
    if elem is None or not tv:
        return None
    total = elem
    for dim in re.findall(r"\[([^\]]+)\]", m.group(2)):
        n = src.value(re.sub(r"[A-Za-z_]\w*", lambda w: str(tv.get(w.group(0), w.group(0))), dim))
        if n is None:
            return None
        total *= n
    used = [p for p in tv if re.search(rf"\b{p}\b", m.group(2))]
    return total, ", ".join(f"{p} = {tv[p]}" for p in used)


def rule_shared_memory(src: Src, reg: Region, feature: dict | None, mechanism: str) -> list[dict]:
    vs = [v for v in src.sem.shared if (reg.extended is None or v.line in reg.extended
                                          or (v.function is None and any(
                                              src.find(rf"\b{re.escape(v.name)}\b", reg.extended))))
          and src.live(v.line)]
    by_fn: dict[str, list] = {}
    for v in vs:
        by_fn.setdefault(v.function or "<file>", []).append(v)
    out = []
    table = ", ".join(f"{t} {SMEM_OPTIN_MAX[t] // KIB} KiB" for t in SMEM_OPTIN_MAX)
    for fname, group in by_fn.items():
        static = [v for v in group if not v.dynamic]
        dynamic = [v for v in group if v.dynamic]
        sizes = {v.name: (v.size_bytes, "") if v.size_bytes is not None else _template_size(src, v) or (None, "")
                 for v in static}
        known = sum(b for b, _ in sizes.values() if b is not None)
        unknown = [f"{v.name} ({v.type})" for v in static if sizes[v.name][0] is None]
        parts = [f"{name} {b} B" + (f" ({how})" if how else "") for name, (b, how) in sizes.items() if b is not None]
        fact = f"__shared__ in {fname}: " + _names(parts + [f"{u} size depends on template parameters" for u in unknown]
                                                   + [f"extern {v.name}[] dynamic" for v in dynamic])
        if static:
            fits = _fits(known)
            s = f"{known} B" + (f" plus {_names(unknown)} sized by template parameters" if unknown else "")
            if known <= SMEM_STATIC_LIMIT:
                cond = (f"static shared memory per block, {s}, fits the 48 KiB static limit on every arch "
                        f"({', '.join(fits)})" + ("; the template-sized arrays must keep the total under it"
                                                  if unknown else ""))
            else:
                cond = (f"static shared memory per block, {s}, exceeds the 48 KiB static limit: it builds only "
                        f"for {', '.join(fits) or 'no arch'} (ptxas accepts up to 227 KiB static for sm_90a only)")
            out.append(_pre(src, "storage", cond,
                            "ptxas rejects the kernel ('uses too much shared data'), or fewer blocks fit an SM",
                            fact, [v.line for v in static], None))
        if dynamic:
            optin = src.find(r"cudaFuncAttributeMaxDynamicSharedMemorySize", None)
            cond = (f"dynamic shared memory (extern __shared__ {', '.join(v.name for v in dynamic)}) is sized at "
                    f"launch, unknown statically: static {known} B + the launch's bytes must be <= 48 KiB, or "
                    f"<= the opt-in maximum per block after cudaFuncSetAttribute(MaxDynamicSharedMemorySize): "
                    f"{table}" + (f" (the opt-in call is at line {optin[0][0]})" if optin else
                                  " (no opt-in call in the source: 48 KiB is the limit)"))
            out.append(_pre(src, "storage", cond,
                            "the launch fails (too many resources requested / invalid argument) when the bytes "
                            "exceed the arch's limit", fact, [v.line for v in dynamic] + ([optin[0][0]] if optin else []),
                            None))
    return out


# dtype-specific intrinsics: (pattern, dtype). `__hadd2`-style math is overloaded for __half2 and
# __nv_bfloat162 (dtype None): the type names in scope decide.

_LOAD_HINT = re.compile(r"\b(__ldg|__ldcs|__ldcg|__ldca|__ldlu|__ldcv)\s*\(")


def _call_arg(code: str, start: int) -> str:
    """The argument text of a call whose '(' ends at `start` (balanced parentheses)."""
    depth, i = 1, start
    while i < len(code) and depth:
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        i += 1
    return re.sub(r"\s+", " ", code[start:i - 1]).strip()
READONLY = {
    "__ldg": ("read-only path (ld.global.nc)", True),
    "ld.global.nc": ("read-only path (ld.global.nc)", True),
    "__ldca": ("cache-all load", False), "__ldcg": ("L2-only load (bypasses L1)", False),
    "__ldcs": ("evict-first streaming load", False), "__ldlu": ("last-use load", False),
    "__ldcv": ("volatile (don't cache) load", False),
}


def rule_readonly_loads(src: Src, reg: Region, feature: dict | None, mechanism: str) -> list[dict]:
    scope = reg.feature if reg.feature and src.find(_LOAD_HINT, reg.feature) else reg.core
    hits: dict[str, list] = {}
    for ln, m in src.find(_LOAD_HINT, scope):
        hits.setdefault(m.group(1), []).append((ln, _call_arg(src.code, m.end())))
    for ln, s in src.find_asm(r"ld\.global\.nc[\w.:]*", scope):
        hits.setdefault("ld.global.nc", []).append((ln, "asm operand"))
    out = []
    for name, ss in hits.items():
        what, nc = READONLY[name]
        args = _names(a for _, a in ss)
        written = []
        for f in src.sem.kernels():
            if src.fn_at(ss[0][0]) and src.fn_at(ss[0][0]).name != f.name:
                continue
            for p in f.params:
                if p.pointee and any(re.search(rf"\b{re.escape(p.name)}\b", a) for _, a in ss) and \
                        src.find(rf"\b{re.escape(p.name)}\s*\[[^\]]*\]\s*(?:[-+*/|&^]?=)(?!=)", src.lines_of({f.name})):
                    written.append(p.name)
        if nc:
            cond = (f"the buffers read through {name} ({args}) are not written by any thread of the same kernel "
                    "during the launch (read-only for the kernel's lifetime)")
            fails = "the non-coherent read-only path may return stale data written in the same launch: wrong results"
        else:
            cond = (f"the buffers read through {name} ({what}: {args}) are read-only for the launch and read "
                    "once; the hint is a cache policy, correctness does not depend on it")
            fails = "data that is re-read misses in cache: slower, not wrong"
        if written:
            cond += f"; violated statically: {', '.join(written)} is also written by the kernel"
        out.append(_pre(src, "pipeline", cond, fails, f"{name}({args})", [ln for ln, _ in ss], None))
    return out


def rule_restrict(src: Src, reg: Region, feature: dict | None, mechanism: str) -> list[dict]:
    out = []
    for f in src.sem.functions:
        if feature and f.name not in reg.core_fns:
            continue
        rp = [p for p in f.params if p.restrict]
        if not rp:
            continue
        a = f.lines[0]
        body = next((i for i in range(a, f.lines[1] + 1) if "{" in src.code_lines[i - 1]), a)
        lines = [i for i in range(a, body + 1) if re.search(r"__restrict", src.code_lines[i - 1])] or [a]
        outs = [p.name for p in rp if p.pointee and not p.pointee.startswith("const")]
        ins = [p.name for p in rp if p.name not in outs]
        names = ", ".join(p.name for p in rp)
        if len(rp) == 1:
            cond = (f"{names} is the only pointer through which {f.name} touches its buffer (no other argument "
                    "or global aliases it)")
        else:
            cond = (f"the pointers {names} of {f.name} do not alias: inputs ({', '.join(ins) or 'none'}) and "
                    f"outputs ({', '.join(outs) or 'none'}) are distinct, non-overlapping buffers (no in-place call)")
        out.append(_pre(src, "layout", cond,
                        "the compiler may cache or reorder loads across stores through another pointer: an in-place "
                        "or overlapping call gives wrong results", f"__restrict__ on {names} ({f.name})", lines, None))
    return out
