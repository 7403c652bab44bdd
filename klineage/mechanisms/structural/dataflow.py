"""Structural families read from how values and indices flow through a function: online softmax
(a running maximum with a rescaled running sum), swizzled shared-memory indices, and register
tiles of accumulators.
"""
from __future__ import annotations

import re

from klineage.mechanisms.base import squash
from klineage.mechanisms.codescan import (MMA_CATEGORIES, Scan, assignments, base_name, call_args, callee_name,
                                          identifiers, qualified_callee, strip, subscripts)
from klineage.mechanisms.structural import _joined, _Structural
from klineage.parse.syntax import ancestors, walk


# ---- online softmax --------------------------------------------------------------------------

_MAX_FNS = {"fmaxf", "fmax", "max", "__hmax", "hmax", "__hmax_nan"}
_EXP_FNS = {"expf", "__expf", "exp2f", "exp2", "exp", "__exp2f", "hexp", "hexp2", "h2exp", "h2exp2"}
_FMA_FNS = {"fmaf", "fma", "__fmaf_rn", "__fmaf_rz", "__hfma", "__hfma2", "fmaf_rn"}


class OnlineSoftmax(_Structural):
    NAME = "online_softmax"
    DESCRIPTION = "online (single-pass) softmax: running max with rescaled running sum"
    ANCHOR = "running max / sum"

    def evidence(self, s, fn):
        live = [(l, op, r, st) for l, op, r, st in assignments(fn.node) if s.live(st.start_point.row + 1)]
        assigns = [(l, op, r) for l, op, r, st in live]
        maxed = {base_name(l) for l, op, r in assigns if op == "=" and (_is_call(r, _MAX_FNS) or _ternary_max(r))}
        maxed -= {None}
        pairs = set()
        for l, op, r, st in live:
            a, b, rs = base_name(l), base_name(r), strip(r)
            plain = rs.type in ("identifier", "subscript_expression", "field_expression")
            if op == "=" and a and b and a != b and plain and (a in maxed or b in maxed):
                pairs.add(frozenset((a, b)))
            elif op == "=" and a and b and a != b and plain and _raised_under(st, l, r):
                maxed.add(a)  # `if (x > m) { ...; m = x; }`: a running maximum written as a branch
                pairs.add(frozenset((a, b)))
        if not pairs:
            return None
        in_pair = set().union(*pairs)
        exp_fns = _EXP_FNS | {f.name for f in s.fns if "exp" in f.own and re.search(r"(?i)ex(?:p|2)", f.name)}
        derived: dict[str, set[str]] = {}
        for _ in range(2):
            for l, op, r in assigns:
                v = base_name(l)
                if not v or op != "=" or v in in_pair or any(_is_call(c, exp_fns) for c in walk(r)):
                    continue
                src = {i for i in identifiers(r) if i in in_pair} | set().union(*[derived.get(i, set())
                                                                                  for i in identifiers(r)])
                if src:
                    derived.setdefault(v, set()).update(src)

        def sides(node) -> set[str]:
            ids = _names(node)
            return {i for i in ids if i in in_pair} | set().union(*[derived.get(i, set()) for i in ids])

        factors = []
        for n in walk(fn.node):
            if _is_call(n, exp_fns) and s.live(n.start_point.row + 1):
                args = n.child_by_field_name("arguments")
                if args is not None and "-" in args.text.decode() and any(p <= sides(args) for p in pairs):
                    factors.append(n)
        if not factors:
            return None
        # names holding a rescale factor (`alpha = exp2f((m_prev - m) * scale)`), not self-updates using one
        fnames = {base_name(l) for l, op, r in assigns if op == "=" and any(_within(f, r) for f in factors)
                  and base_name(l) not in _names(r)} - {None}

        def scales(node) -> bool:
            return any(_within(f, node) for f in factors) or bool(identifiers(node) & fnames)

        rescaled = set()
        for l, op, r in assigns:
            acc = base_name(l)
            if not acc or acc in in_pair or acc in fnames:
                continue
            if op == "*=" and scales(r):
                rescaled.add(acc)
            elif op == "=":
                for b in walk(r):
                    if b.type == "binary_expression" and b.child_by_field_name("operator").type == "*":
                        x, y = b.child_by_field_name("left"), b.child_by_field_name("right")
                        if (base_name(x) == acc and scales(y)) or (base_name(y) == acc and scales(x)):
                            rescaled.add(acc)
                    elif _is_call(b, _FMA_FNS):
                        a2 = call_args(b)[:2]
                        if len(a2) == 2 and ((base_name(a2[0]) == acc and scales(a2[1]))
                                             or (base_name(a2[1]) == acc and scales(a2[0]))):
                            rescaled.add(acc)
        if not rescaled:
            return None
        new = {v for v in in_pair if v in maxed}
        lines = {n.start_point.row + 1 for n in walk(fn.node)
                 if n.type == "identifier" and n.text.decode() in new and s.live(n.start_point.row + 1)}
        return lines, ({"rescaled": ",".join(sorted(rescaled))} if len(rescaled) > 1 else {})


def _names(node) -> set[str]:
    """Variables and struct fields an expression reads (`md.m - m_new` -> md, m, m_new)."""
    return identifiers(node) | {n.text.decode() for n in walk(node) if n.type == "field_identifier"}


def _compares(cond, x, y) -> str | None:
    """'gt' when `cond` says x > y (`x > y`, `y < x`, with >= / <=), 'lt' when x < y, else None."""
    c = strip(cond)
    if c is not None and c.type == "condition_clause":
        c = strip(c.named_children[0]) if c.named_children else None
    if c is None or c.type != "binary_expression":
        return None
    op = c.child_by_field_name("operator").type
    left, right = (squash(c.child_by_field_name(f).text.decode()) for f in ("left", "right"))
    if (left, right) == (x, y):
        return {">": "gt", ">=": "gt", "<": "lt", "<=": "lt"}.get(op)
    if (left, right) == (y, x):
        return {">": "lt", ">=": "lt", "<": "gt", "<=": "gt"}.get(op)
    return None


def _ternary_max(node) -> bool:
    """`a > b ? a : b` (or `b < a ? a : b`): a maximum written as a conditional expression."""
    n = strip(node)
    if n is None or n.type != "conditional_expression":
        return False
    a, b = (n.child_by_field_name(f) for f in ("consequence", "alternative"))
    if a is None or b is None:
        return False
    return _compares(n.child_by_field_name("condition"), squash(a.text.decode()), squash(b.text.decode())) == "gt"


def _raised_under(stmt, lhs, rhs) -> bool:
    """`lhs = rhs` runs only when rhs > lhs: inside the then-branch of `if (rhs > lhs)`."""
    x, y = squash(rhs.text.decode()), squash(lhs.text.decode())
    for a in ancestors(stmt):
        if a.type == "if_statement":
            cons = a.child_by_field_name("consequence")
            if cons is not None and cons.start_byte <= stmt.start_byte < cons.end_byte:
                return _compares(a.child_by_field_name("condition"), x, y) == "gt"
            return False
        if a.type in ("function_definition", "for_statement", "while_statement"):
            return False
    return False


def _is_call(node, names: set[str]) -> bool:
    node = strip(node)
    return node is not None and node.type == "call_expression" and callee_name(node) in names


def _within(inner, outer) -> bool:
    return outer.start_byte <= inner.start_byte and inner.end_byte <= outer.end_byte


_TMA_SWIZZLE = re.compile(r"\bCU_TENSOR_MAP_SWIZZLE_(32B|64B|128B)\w*")
_DESC_SWIZZLE = re.compile(r"(?:\b([123])(?:ull|ULL|ul|UL|llu|LLU|ll|LL|u|U)?|\(\s*(?:uint64_t|unsigned long long)\s*\)"
                           r"\s*([123])|\buint64_t\s*\(\s*([123])\s*\))\s*\)?\s*<<\s*62\b|"
                           r"\blayout_type\w*\s*=\s*([123])\b")
_DESC_MODE = {"1": "128B", "2": "64B", "3": "32B"}


class SmemSwizzle(_Structural):
    NAME = "smem_swizzle"
    DESCRIPTION = ("swizzled shared-memory layouts against bank conflicts: XOR of a column (chunk) index with "
                   "masked row bits, or the TMA / wgmma-descriptor swizzle modes (128B, 64B, 32B)")
    ANCHOR = "shared index"

    def evidence(self, s, fn):
        lines, kinds, modes, masks = set(), set(), set(), set()
        if _has_shared(s):
            for x in walk(fn.node):
                if x.type != "binary_expression" or x.child_by_field_name("operator").type != "^":
                    continue
                if not s.live(x.start_point.row + 1):
                    continue
                mask = _xor_mask(x)
                if mask and _index_use(s, fn, x):
                    lines.add(x.start_point.row + 1)
                    kinds.add("xor")
                    masks.add(mask)
        for ln, m in s.find(fn, _TMA_SWIZZLE):
            lines.add(ln)
            kinds.add("tma")
            modes.add(m.group(1))
        if re.search(r"(?i)desc|>>\s*4\b", " ".join(s.code(i) for i in s.lines(fn))):
            for ln, m in s.find(fn, _DESC_SWIZZLE):
                lines.add(ln)
                kinds.add("wgmma_desc")
                modes.add(_DESC_MODE[next(g for g in m.groups() if g)])
        if not lines:
            return None
        return lines, {k: v for k, v in {"kind": _joined(kinds), "mode": _joined(modes), "mask": _joined(masks)}.items()
                       if v}


def _has_shared(s: Scan) -> bool:
    return any("__shared__" in line for line in s.code_lines)


def _xor_mask(x) -> str | None:
    """The mask when one operand of the XOR (or the XOR itself) is masked: `c ^ (r & 7)`, `(c ^ r) % 8`."""
    def masked(n):
        n = strip(n)
        while n is not None and n.type == "binary_expression" and \
                n.child_by_field_name("operator").type in (">>", "<<"):
            n = strip(n.child_by_field_name("left"))  # `(off & 0x380) >> 3`
        if n is None or n.type != "binary_expression" or n.child_by_field_name("operator").type not in ("&", "%"):
            return None
        for side in (n.child_by_field_name("right"), n.child_by_field_name("left")):
            side = strip(side)
            if side is not None and side.type in ("number_literal", "identifier"):
                text = side.text.decode()
                try:  # a parity bit (`& 1`, `% 2`) is no swizzle
                    if int(text.rstrip("uUlL"), 0) < 3:
                        return None
                except ValueError:
                    pass
                return text
        return None
    found = masked(x.child_by_field_name("left")) or masked(x.child_by_field_name("right"))
    if found:
        return found
    p = x.parent
    while p is not None and p.type == "parenthesized_expression":
        p = p.parent
    return masked(p) if p is not None else None


def _index_use(s: Scan, fn, x) -> bool:
    """The XOR feeds an index: a subscript, a variable later used as an index or offset, or the value a
    swizzle / offset helper returns."""
    for a in ancestors(x):
        if a.type == "subscript_argument_list":
            return True
        if a.type == "return_statement":
            return bool(re.search(r"(?i)swiz|swz|offset|addr|idx|index|chunk", fn.name)) or _called_as_index(s, fn.name)
        if a.type in ("init_declarator", "assignment_expression"):
            target = a.child_by_field_name("declarator" if a.type == "init_declarator" else "left")
            ty = a.parent.child_by_field_name("type") if a.type == "init_declarator" and a.parent is not None else None
            if ty is not None and ty.text.decode() in ("bool", "float", "double"):
                return False  # a flag or a value, not an index
            v = base_name(target)
            return v is not None and _used_as_index(fn.node, v, a)
        if a.type.endswith("_statement") or a.type == "declaration":
            return False
    return False


def _used_as_index(root, v: str, skip) -> bool:
    for n in walk(root):
        if n.type != "identifier" or n.text.decode() != v or _within(n, skip):
            continue
        for a in ancestors(n):
            if a.type == "subscript_argument_list":
                return True
            if a.type == "binary_expression" and a.child_by_field_name("operator").type == "+":
                return True
            if a.type in ("gnu_asm_input_operand", "gnu_asm_output_operand"):
                return True
            if a.type.endswith("_statement") or a.type == "declaration":
                break
    return False


def _called_as_index(s: Scan, name: str) -> bool:
    for f in s.fns:
        for n in walk(f.node):
            if n.type == "call_expression" and callee_name(n) == name:
                for a in ancestors(n):
                    if a.type == "subscript_argument_list" or (a.type == "binary_expression"
                                                                and a.child_by_field_name("operator").type == "+"):
                        return True
                    if a.type.endswith("_statement") or a.type == "declaration":
                        break
    return False


# ---- register tiling -------------------------------------------------------------------------


class RegisterTiling(_Structural):
    NAME = "register_tiling"
    DESCRIPTION = ("register tiling: each thread accumulates a 2-D tile of outputs in a register array "
                   "(acc[TM][TN] updated by outer-product FMAs in unrolled loops, or an array of MMA accumulator "
                   "fragments acc[MI][NI][4])")
    ANCHOR = "register accumulator tile"
    PRECONDITIONS = {
        "storage": [{"condition": "the accumulator tile and its operand fragments fit the per-thread register "
                                  "budget (255 registers; fewer at the occupancy the launch bounds ask for)",
                     "fails_without": "spills to local memory, or fewer resident warps per SM"}],
        "pipeline": [{"condition": "the loops over the tile are fully unrolled, so every index into the "
                                   "accumulator array is a compile-time constant",
                      "fails_without": "the array moves to local memory (stack frame, LDL/STL): slower"}],
        "layout": [{"condition": "the block's output extent is a multiple of the per-thread tile times the "
                                 "threads, or the edges are guarded",
                    "fails_without": "stores past the matrix edge, or outputs never written"}],
    }

    def evidence(self, s, fn):
        tiles = _register_tiles(s, fn)
        if not tiles:
            return None
        lines = set().union(*[t["lines"] for t in tiles.values()])
        info = {"arrays": ",".join(tiles), "tile": ",".join(t["tile"] for t in tiles.values()),
                "accumulate": _joined(t["how"] for t in tiles.values())}
        dtypes = {t["dtype"] for t in tiles.values() if t["dtype"]}
        if dtypes:
            info["dtype"] = _joined(dtypes)
        return lines, info


_SIMPLE_TYPES = {"float", "double", "half", "__half", "half2", "__half2", "__nv_bfloat16", "__nv_bfloat162", "int",
                 "float2", "float4"}


def _declarator_array(d):
    """(name, extents outer first) of an array declarator, through references / parentheses."""
    dims = []
    while d is not None:
        if d.type == "array_declarator":
            size = d.child_by_field_name("size")
            dims.append(size)
            d = d.child_by_field_name("declarator")
        elif d.type in ("parenthesized_declarator", "reference_declarator", "init_declarator"):
            d = d.child_by_field_name("declarator") or (d.named_children[0] if d.named_children else None)
        elif d.type == "identifier":
            return d.text.decode(), list(reversed(dims))
        else:
            return None, []
    return None, []


def _arrays(s: Scan, fn) -> dict[str, dict]:
    """Register-resident arrays of a function: non-shared, non-static local arrays and array parameters."""
    out = {}
    decls = [n for n in walk(fn.node) if n.type in ("declaration", "parameter_declaration")]
    for d in decls:
        words = {c.text.decode() for c in d.children if c.type in ("type_qualifier", "storage_class_specifier")}
        if words & {"__shared__", "static", "extern", "__constant__", "constexpr"} or \
                (d.type == "declaration" and "const" in words):
            continue
        ty = d.child_by_field_name("type")
        tname = squash(s.tree.text_of(ty)) if ty is not None else ""
        for decl in d.children_by_field_name("declarator"):
            name, dims = _declarator_array(decl)
            if name and dims:
                out[name] = {"dims": dims, "line": d.start_point.row + 1, "type": tname}
    return out


def _acc_params(s: Scan, name: str, depth: int = 0) -> set[int]:
    """Indices of the parameters of in-file function `name` that it accumulates into (asm "+f"/"+r"
    operands, or register tiles it accumulates)."""
    key = ("acc_params", name)
    if key not in s.memo:
        s.memo[key] = set()  # a recursive call sees no accumulator parameters
        s.memo[key] = _find_acc_params(s, name, depth)
    return s.memo[key]


def _find_acc_params(s: Scan, name: str, depth: int) -> set[int]:
    out = set()
    for f in s.by_name.get(name, []):
        params = _param_names(f)
        rw = {base_name(n.named_children[-1]) for n in walk(f.node) if n.type == "gnu_asm_output_operand"
              and "+" in (n.child_by_field_name("constraint") or n).text.decode()[:3] and n.named_children}
        out |= {i for i, p in enumerate(params) if p in rw}
        if depth < 3:
            acc = _accumulated(s, f, depth + 1)
            out |= {i for i, p in enumerate(params) if p in acc}
    return out


def _param_names(f) -> list[str]:
    decl = f.node.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    params = decl.child_by_field_name("parameters") if decl is not None else None
    out = []
    for p in params.named_children if params is not None else []:
        d = p.child_by_field_name("declarator")
        ids = [n for n in walk(d) if n.type == "identifier"] if d is not None else []
        out.append(ids[0].text.decode() if ids else "")
    return out


def _accumulated(s: Scan, fn, depth: int = 0) -> dict[str, tuple[str, set[int]]]:
    """Arrays of `fn` that something accumulates into: name -> (how, lines)."""
    arrays = _arrays(s, fn)
    out: dict[str, tuple[str, set[int]]] = {}

    def add(name, how, line):
        h, ls = out.get(name, (how, set()))
        out[name] = ("mma" if "mma" in (h, how) else how, ls | {line})

    loops = s.loops(fn)
    for l, op, r, st in assignments(fn.node):
        name, line = base_name(l), st.start_point.row + 1
        if name not in arrays or not s.live(line):
            continue
        fma = (op in ("+=", "-=") and (_has_product(r) or any(_is_call(c, _FMA_FNS) for c in walk(r)))) or \
            (op == "=" and _is_call(r, _FMA_FNS) and name in identifiers(call_args(strip(r))[-1])) or \
            (op == "=" and _self_plus_product(r, name))
        if not fma:
            continue
        dims = len(arrays[name]["dims"])
        loop_vars = {lp.var for lp in loops if lp.var and lp.body.start_byte <= st.start_byte
                     and st.end_byte <= lp.body.end_byte}
        idx = subscripts(l)
        used = set().union(*[identifiers(i) for i in idx]) & loop_vars if idx else set()
        flat = dims == 1 and "*" in s.tree.text_of(arrays[name]["dims"][0] or l) and idx and "*" in idx[0].text.decode()
        if len(used) >= 2 and (dims >= 2 or flat):
            add(name, "fma", line)
    for n in walk(fn.node):
        if n.type != "call_expression" or not s.live(n.start_point.row + 1):
            continue
        callee, args = callee_name(n), call_args(n)
        wmma = qualified_callee(n).endswith("mma_sync") and callee == "mma_sync"
        acc_idx = {0} if wmma else _acc_params(s, callee, depth) if callee in s.by_name and depth < 4 else set()
        for i in acc_idx:
            if i < len(args) and base_name(args[i]) in arrays:
                add(base_name(args[i]), "mma", n.start_point.row + 1)
    for n in walk(fn.node):
        if n.type == "gnu_asm_output_operand" and n.named_children and s.live(n.start_point.row + 1):
            c = n.child_by_field_name("constraint")
            name = base_name(n.named_children[-1])
            if c is not None and "+" in c.text.decode() and name in arrays and fn.own & MMA_CATEGORIES:
                add(name, "mma", n.start_point.row + 1)
    return out


def _register_tiles(s: Scan, fn) -> dict[str, dict]:
    arrays = _arrays(s, fn)
    out = {}
    for name, (how, lines) in _accumulated(s, fn).items():
        a = arrays[name]
        if len(a["dims"]) < 2 and how == "mma":
            continue
        dims = []
        for d in a["dims"]:
            text = squash(s.tree.text_of(d)) if d is not None else "?"
            v = s.value(text)
            dims.append(str(v) if v is not None else text)
        base = a["type"].split("<")[0].split("::")[-1]
        out[name] = {"tile": "x".join(dims), "how": how, "lines": lines | {a["line"]},
                     "dtype": a["type"] if a["type"] in _SIMPLE_TYPES else ("fragment" if base == "fragment" else "")}
    return out


def _has_product(node) -> bool:
    return any(b.type == "binary_expression" and b.child_by_field_name("operator").type == "*" for b in walk(node))


def _self_plus_product(r, name: str) -> bool:
    r = strip(r)
    if r is None or r.type != "binary_expression" or r.child_by_field_name("operator").type != "+":
        return False
    x, y = r.child_by_field_name("left"), r.child_by_field_name("right")
    return (base_name(x) == name and _has_product(y)) or (base_name(y) == name and _has_product(x))
