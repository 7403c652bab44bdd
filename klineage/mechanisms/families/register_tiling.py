"""Register tiles of accumulators: a per-thread array updated with products in a loop."""
from __future__ import annotations

from klineage.mechanisms.base import Family, Form, squash
from klineage.mechanisms.codescan import (MMA_CATEGORIES, Scan, assignments, base_name, call_args, callee_name,
                                          identifiers, qualified_callee, strip, subscripts)
from klineage.mechanisms.families.online_softmax import _FMA_FNS, _is_call
from klineage.mechanisms.structural import _joined, _Structural
from klineage.parse.syntax import walk


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
        elif d.type in ("identifier", "field_identifier"):
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
    accumulated = _accumulated(s, fn) or _helper_tiles(s, fn, arrays)
    structs = _struct_tiles(s) if any(n not in arrays for n in accumulated) else {}
    for name, (how, lines) in accumulated.items():
        a = arrays.get(name) or next((dict(t, line=min(lines)) for ty, t in structs.items()
                                      if _local_type(fn, name) == ty), None)
        if a is None:
            continue
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


def _helper_tiles(s: Scan, fn, arrays: dict) -> dict[str, tuple[str, set[int]]]:
    """Tiles whose outer product a helper adds: `outer_product(regM, regN, threadResults)` where the
    helper accumulates products into that parameter under two loop indices (`acc[i * TN + j] +=`,
    `acc[i][j] = fmaf(...)`, `acc.c[i][j] += ...`). A local struct passed there counts when its type
    holds an array of two or more dimensions (name -> ("helper", lines))."""
    out: dict[str, tuple[str, set[int]]] = {}
    structs = _struct_tiles(s)
    for n in walk(fn.node):
        if n.type != "call_expression" or not s.live(n.start_point.row + 1):
            continue
        callee = callee_name(n)
        if callee not in s.by_name or callee == fn.name:
            continue
        args = call_args(n)
        for i in _tile_params(s, callee):
            if i >= len(args):
                continue
            root = next((x.text.decode() for x in walk(args[i]) if x.type == "identifier"), None)
            if root in arrays or _local_type(fn, root) in structs:
                h, ls = out.get(root, ("helper", set()))
                out[root] = (h, ls | {n.start_point.row + 1})
    return out


def _tile_params(s: Scan, name: str) -> set[int]:
    """Parameters of in-file function `name` it accumulates products into under two loop indices."""
    key = ("tile_params", name)
    if key in s.memo:
        return s.memo[key]
    out = set()
    for f in s.by_name.get(name, []):
        params = _param_names(f)
        loops = s.loops(f)
        for l, op, r, st in assignments(f.node):
            root = next((x.text.decode() for x in walk(l) if x.type == "identifier"), None)
            if root not in params:
                continue
            fma = (op in ("+=", "-=") and (_has_product(r) or any(_is_call(c, _FMA_FNS) for c in walk(r)))) or \
                (op == "=" and _is_call(r, _FMA_FNS)) or (op == "=" and _self_plus_product(r, base_name(l)))
            loop_vars = {lp.var for lp in loops if lp.var and lp.body.start_byte <= st.start_byte
                         and st.end_byte <= lp.body.end_byte}
            used = set().union(*[identifiers(i) for i in subscripts(l)]) & loop_vars if subscripts(l) else set()
            if fma and len(used) >= 2:
                out.add(params.index(root))
    s.memo[key] = out
    return out


def _struct_tiles(s: Scan) -> dict[str, dict]:
    """Struct types of the file with an array member of two or more dimensions: name -> the member's
    {"dims", "type"}."""
    if "struct_tiles" in s.memo:
        return s.memo["struct_tiles"]
    out = {}
    for n in walk(s.tree.root):
        if n.type in ("struct_specifier", "class_specifier") and n.child_by_field_name("body") is not None:
            name = n.child_by_field_name("name")
            for f in n.child_by_field_name("body").named_children:
                if f.type != "field_declaration" or name is None:
                    continue
                _, dims = _declarator_array(f.child_by_field_name("declarator"))
                ty = f.child_by_field_name("type")
                if len(dims) >= 2:
                    out[name.text.decode()] = {"dims": dims, "type": squash(ty.text.decode()) if ty else ""}
    s.memo["struct_tiles"] = out
    return out


def _local_type(fn, name: str | None) -> str | None:
    """The declared type of local variable `name` of `fn`."""
    for d in walk(fn.node):
        if d.type == "declaration":
            ty = d.child_by_field_name("type")
            for decl in d.children_by_field_name("declarator"):
                ident = decl.child_by_field_name("declarator") if decl.type == "init_declarator" else decl
                if ident is not None and ident.type == "identifier" and ident.text.decode() == name and ty is not None:
                    return squash(ty.text.decode())
    return None


def _has_product(node) -> bool:
    return any(b.type == "binary_expression" and b.child_by_field_name("operator").type == "*" for b in walk(node))


def _self_plus_product(r, name: str) -> bool:
    r = strip(r)
    if r is None or r.type != "binary_expression" or r.child_by_field_name("operator").type != "+":
        return False
    x, y = r.child_by_field_name("left"), r.child_by_field_name("right")
    return (base_name(x) == name and _has_product(y)) or (base_name(y) == name and _has_product(x))


FAMILY = Family(
    RegisterTiling, rank=280,
    forms=(
        Form("a per-thread accumulator array acc[TM][TN] updated by outer-product FMAs in loops", rewritable=False),
        Form("an array of MMA accumulator fragments (acc[MI][NI][4])", rewritable=False),
    ),
    forward=("shape",),
    addresses=frozenset(),  # none: see Family.addresses
)
