"""Shared-memory staging seen but not rewritten: the source forms the rewrite does not take
(SmemStaging.detect_more), and staged buffers read from the compiled PTX's data flow
(SmemStaging.compiled).
"""
from __future__ import annotations

import re

from klineage.mechanisms.base import Feature, Kernel, detail
from klineage.mechanisms.vector_forms import declarators, device_function
from klineage.parse import syntax
from klineage.parse.syntax import Node, node_path, walk

# loads through a cache hint or a scalar-load helper
_LOAD_CALLS = re.compile(r"__ld(g|cs|cg|ca|lu|cv)|kl_scalar_load_\w+")


def _staged_buffers(ck, fn) -> dict:
    """Shared arrays that stage a global operand: name -> (stores, reads). A store into the array takes
    a value loaded from global memory (through moves and selects only); some load from its shared
    buffer feeds arithmetic; and no store into the array is computed from the array's own loads (a
    tree reduction or a scan folding the array in place is not staging). Arrays are told apart by
    the name the source line of the store writes (one dynamic buffer often holds several), within
    the PTX symbol of the buffer."""
    from klineage.mechanisms.compiled import ARITH, MOVES
    through = MOVES + ("selp",)
    stores: dict[tuple[str, str], list] = {}
    folded: set[tuple[str, str]] = set()
    for i in fn.instrs:
        if i.op != "st" or i.space != "shared":
            continue
        syms = ck.shared_symbols(fn, i.operands[0])
        target = _stored_array(ck, i)
        values = [r for o in i.operands[1:] for r in _regs(o)]
        producers = [p for r in values for p in ck.values_from(fn, r, through=through)]
        if any(p.op == "ld" and p.space in ("global", "generic") for p in producers):
            for s in syms:
                stores.setdefault((s, target or s), []).append(i)
        deep = [p for r in values for p in ck.values_from(fn, r, through=through + ARITH, depth=8)]
        if any(p.op in ("ld", "wmma", "ldmatrix") and "shared" in p.space and syms & ck.shared_symbols(
                fn, _address(p)) and _reads_array(ck, p, target) for p in deep):
            folded |= {(s, target or s) for s in syms}
    out = {}
    for (sym, name), sts in stores.items():
        if (sym, name) in folded:
            continue
        reads = []
        for i in fn.instrs:
            if i.op in ("ld", "wmma", "ldmatrix") and i.space == "shared" and not i.has("shared::cluster") \
                    and sym in ck.shared_symbols(fn, _address(i)):
                uses = [u for d in i.dests for u in ck.values_to(fn, d)]
                if any(u.op in ARITH and u.op not in ("setp", "selp") for u in uses):
                    reads.append(i)
        if reads:
            out[name] = (sts, reads)
    return out


def _stored_array(ck, st) -> str | None:
    """The array a shared store writes, by the source line it comes from (`buf[t] = ...` -> buf)."""
    ln = ck.line(st)
    m = re.search(r"([A-Za-z_]\w*)\s*(?:\[[^=;]*\])+\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)", ck.text(ln)) if ln else None
    return m.group(1) if m else None


def _reads_array(ck, ld, name: str | None) -> bool:
    """Whether the source line of a shared load reads array `name` (unknown: assume it does). One
    buffer can hold several arrays (dynamic shared memory carved by pointers), so a value computed
    from one of them and stored into another does not fold the buffer onto itself."""
    ln = ck.line(ld)
    if name is None or not ln:
        return True
    return re.search(rf"\b{re.escape(name)}\s*\[", ck.text(ln)) is not None


def _regs(text: str) -> list[str]:
    return re.findall(r"%[\w]+", text)


def _address(i) -> str:
    return next((o for o in i.operands if o.lstrip().startswith("[")), "")


# ---- the forms the rewrite does not take: seen, not removable -------------------------------

_ARITH_OPS = {"+", "-", "*", "/", "%"}
_BARRIER = re.compile(r"\b__syncthreads\s*\(|\.sync\s*\(\s*\)|\bbar\.sync\b|__syncthreads_count|"
                      r"\bcg::sync\s*\(")


def _shared_roots(k: Kernel, fn: Node) -> dict[str, str]:
    """Names that point into shared memory in `fn`, each with the name it was set from: the
    `__shared__` arrays it can see (static, or dynamic `extern`) map to themselves; locals set from
    them map to their source (`float4* s4 = reinterpret_cast<float4*>(smem)` -> smem, `float* kt =
    smem + n` -> smem, `const float* row = kt + r * d` -> kt)."""
    from klineage.mechanisms.codescan import assignments
    roots: dict[str, str] = {}
    for caps in k.tree.matches("shared_decls"):
        decl = caps["decl"][0]
        owner = syntax.enclosing_function(decl)
        if owner is None or owner == fn:
            for name, *_ in declarators(decl):
                roots[name] = name
    for _ in range(4):
        for lhs, op, rhs, _ in assignments(fn):
            v = lhs.text.decode() if lhs.type == "identifier" else None
            if v is None or v in roots or op != "=":
                continue
            ids = [n.text.decode() for n in walk(rhs) if n.type == "identifier"]
            hit = next((i for i in ids if i in roots), None)
            if hit is not None and not _reads_value(rhs, roots):
                roots[v] = hit
    return roots


def _region(roots: dict[str, str], name: str, written: set[str]) -> set[str]:
    """`name` and the pointers derived from it that no store writes through: the accesses of one
    array, where a dynamic buffer is carved into several (each carved pointer written by its own
    stores is a region of its own)."""
    out, frontier = {name}, [name]
    while frontier:
        cur = frontier.pop()
        for v, src in roots.items():
            if src == cur and v != cur and v not in out and v not in written:
                out.add(v)
                frontier.append(v)
    return out


def _reads_value(rhs: Node, roots: dict[str, str]) -> bool:
    """The expression reads an element (`s[i]`, `*p`), rather than forming an address into the array."""
    for n in walk(rhs):
        if n.type == "subscript_expression" and _root_name(n) in roots:
            p = n.parent
            while p is not None and p.type == "parenthesized_expression":
                p = p.parent
            if not (p is not None and p.type == "pointer_expression" and p.child_by_field_name("operator").type == "&"):
                return True
    return False


def _root_name(n: Node | None) -> str | None:
    while n is not None and n.type not in ("identifier",):
        if n.type in ("subscript_expression", "field_expression", "pointer_expression", "parenthesized_expression",
                      "cast_expression"):
            n = n.child_by_field_name("argument") or n.child_by_field_name("value") or (
                n.named_children[0] if n.named_children else None)
        elif n.type == "call_expression":  # reinterpret_cast<float4*>(p)[i]
            args = n.child_by_field_name("arguments")
            n = args.named_children[0] if args is not None and args.named_children else None
        elif n.type == "binary_expression":
            n = n.child_by_field_name("left")
        else:
            return None
    return n.text.decode() if n is not None else None


def _global_read(k: Kernel, rhs: Node, roots: dict[str, str], locals_from_global: set[str]) -> bool:
    """The expression is a value read from global memory and nothing more: an element of a pointer that
    is not shared memory (a parameter or a pointer derived from one), directly, through a cast, a
    cache hint, a conversion call or a ternary guard, or a local (or its field) that was loaded so. A
    value computed from global reads (a partial sum) is not."""
    n = rhs
    while n is not None and n.type in ("parenthesized_expression", "cast_expression"):
        n = n.child_by_field_name("value") if n.type == "cast_expression" else (
            n.named_children[0] if n.named_children else None)
    if n is None:
        return False
    if n.type == "conditional_expression":
        branches = [n.child_by_field_name("consequence"), n.child_by_field_name("alternative")]
        reads = [b for b in branches if b is not None and b.type not in ("number_literal", "call_expression")
                 or (b is not None and b.type == "call_expression" and _global_read(k, b, roots, locals_from_global))]
        return bool(reads) and all(_global_read(k, b, roots, locals_from_global) for b in reads)
    if n.type in ("identifier", "field_expression"):
        r = n.text.decode() if n.type == "identifier" else _root_name(n)
        return r in locals_from_global
    if n.type in ("subscript_expression", "pointer_expression"):
        if n.type == "pointer_expression" and n.child_by_field_name("operator").type != "*":
            return False
        r = _root_name(n)
        return (r is not None and r not in roots) or r in locals_from_global
    if n.type == "call_expression":
        f = n.child_by_field_name("function")
        args = [a for a in (n.child_by_field_name("arguments").named_children if n.child_by_field_name("arguments")
                            else []) if a.type != "comment"]
        if f is not None and _LOAD_CALLS.fullmatch(f.text.decode()):
            return True
        if f is not None and f.type == "template_function":  # reinterpret_cast<const float4*>(p)[i] forms
            return False
        # a conversion of one loaded value (__half2float(g[i]), __ldg(p), float(x))
        return len(args) == 1 and _global_read(k, args[0], roots, locals_from_global)
    return False


def _other_stagings(k: Kernel, taken: set[str], mechanism: str) -> list[Feature]:
    """Staging in the forms the rewrite does not take: 2-D tiles (`As[ty][tx] = A[...]`), copies by a
    strided loop or by edge threads (halos), dynamic `extern __shared__` buffers carved or
    reinterpreted as vector types, the staged values read back into arithmetic (or handed to an MMA
    load) after a barrier. Not staging: a shared array folded onto itself (a tree reduction or a scan
    writes values read from the same array), or one whose reads only move data (a transpose)."""
    from klineage.mechanisms.codescan import assignments
    out = []
    for fn in syntax.functions(k.tree):
        if device_function(fn) is None and not ({"__device__", "__global__"} & syntax.function_qualifiers(fn)):
            continue
        if not _BARRIER.search(k.tree.text_of(fn)):
            continue
        roots = _shared_roots(k, fn)
        if not roots:
            continue
        name = syntax.function_name(fn)
        # locals holding values loaded from global memory: every assignment to them is such a load
        writes: dict[str, list] = {}
        for lhs, op, rhs, _ in assignments(fn):
            if lhs.type == "identifier":
                writes.setdefault(lhs.text.decode(), []).append((op, rhs))
        for n in walk(fn):
            if n.type == "update_expression":
                arg = n.child_by_field_name("argument")
                if arg is not None and arg.type == "identifier":
                    writes.setdefault(arg.text.decode(), []).append(("++", arg))
        from_global: set[str] = set()
        for _ in range(2):
            for v, ws in writes.items():
                if v not in roots and all(op == "=" and _global_read(k, rhs, roots, from_global) for op, rhs in ws):
                    from_global.add(v)
        stores = [(lhs, op, rhs, st, _root_name(lhs)) for lhs, op, rhs, st in assignments(fn)
                  if lhs.type != "identifier" and k.live(st)]  # not a declaration or a scalar
        stores = [x for x in stores if x[4] in roots]
        written = {x[4] for x in stores}
        copies: dict[str, list] = {}
        folded: set[str] = set()
        for lhs, op, rhs, st, w in stores:
            region = _region(roots, w, written)
            mine = {v for v, b in _locals_read_from(fn, {x: x for x in region}).items()}
            if _reads_value(rhs, {x: x for x in region}) or op != "=" or \
                    any(n.type == "identifier" and n.text.decode() in mine for n in walk(rhs)):
                folded.add(w)
            elif _global_read(k, rhs, roots, from_global):
                copies.setdefault(w, []).append(st)
        for base, sts in copies.items():
            if base in folded or f"{name}:stage:{base}" in taken:
                continue
            reads = _compute_reads(k, fn, _region(roots, base, written))
            if not reads:
                continue
            first = sts[0]
            out.append(Feature(mechanism, f"{name}:stage:{base}", (k.lines(first)[0], k.lines(reads[-1])[1]),
                               anchor="shared staging",
                               detail=detail(array=base, form="general", reads=len(reads), copies=len(sts)),
                               removable=False, path=node_path(k.tree, first)))
    return out


def _locals_read_from(fn: Node, roots: dict[str, str]) -> dict[str, str]:
    """Locals (scalars or register arrays) that hold values read from a shared array: name -> array."""
    from klineage.mechanisms.codescan import assignments
    out: dict[str, str] = {}
    for _ in range(2):
        for lhs, op, rhs, _ in assignments(fn):
            v = _root_name(lhs)
            if v is None or v in roots:
                continue
            for n in walk(rhs):
                if n.type == "subscript_expression" and _root_name(n) in roots and \
                        _reads_value(n, roots):
                    out[v] = roots[_root_name(n)]
                elif n.type == "identifier" and n.text.decode() in out and n.text.decode() != v:
                    out.setdefault(v, out[n.text.decode()])
    return out


_MATH_CALLS = re.compile(r"(?:__)?(?:f?max|f?min|fmaf?|exp|exp2|log|sqrt|rsqrt|pow|tanh|dot|dp4a|h\w+2)\w*$|"
                         r".*(?:load_matrix|ldmatrix|ldsm|mma|wgmma|fragment|outer|accumulate|fma).*")


def _feeds_compute(n: Node, depth: int = 3) -> bool:
    """The value `n` (a read, or a local holding one) is an operand of arithmetic: a binary arithmetic
    expression, a compound assignment, a math or MMA call, or any of these through conversion calls
    (`__half2float(s[i]) * w`) and struct fields."""
    p = n.parent
    while p is not None and p.type in ("parenthesized_expression", "field_expression", "cast_expression") or \
            (p is not None and p.type == "subscript_expression" and p.child_by_field_name("argument") == n):
        n, p = p, p.parent
    if p is None:
        return False
    if p.type == "subscript_expression":
        return False  # an index into something else
    if p.type == "binary_expression" and p.child_by_field_name("operator").type in _ARITH_OPS:
        return True
    if p.type == "assignment_expression" and p.child_by_field_name("operator").type in ("+=", "-=", "*=") and \
            p.child_by_field_name("right") == n:
        return True
    if p.type == "pointer_expression" and p.child_by_field_name("operator").type == "&":
        n, p = p, p.parent  # &As[r][c] handed to an MMA load
    if p is not None and p.type == "argument_list" and p.parent is not None and p.parent.type == "call_expression":
        from klineage.mechanisms.codescan import callee_name
        if _MATH_CALLS.fullmatch(callee_name(p.parent) or ""):
            return True
        return depth > 0 and _feeds_compute(p.parent, depth - 1)
    return False


def _compute_reads(k: Kernel, fn: Node, names: set[str]) -> list:
    """Reads through `names` (one shared array and its pointers) that feed arithmetic or an MMA load,
    directly or through a local they are loaded into."""
    from klineage.mechanisms.codescan import assignments
    roots = {n: n for n in names}
    hits = []
    value_vars: dict[str, Node] = {}
    for lhs, op, rhs, st in assignments(fn):
        v = _root_name(lhs)
        if v is not None and v not in roots and _reads_value(rhs, {n: n for n in names}):
            value_vars.setdefault(v, st)
    for n in walk(fn):
        if n.type == "subscript_expression" and _root_name(n) in names and k.live(n) and \
                n.parent is not None and n.parent.type != "subscript_expression" and _feeds_compute(n):
            hits.append(n)
    for v, st in value_vars.items():
        for n in walk(fn):
            if n.type == "identifier" and n.text.decode() == v and n.start_byte > st.end_byte and _feeds_compute(n):
                hits.append(n)
                break
    return sorted(hits, key=lambda x: x.start_byte)
