"""Thread coarsening: each thread handles several elements (or vectors) at once, so several
independent loads are in flight per thread and index arithmetic is amortised. The carrier is a
compile-time per-thread count.

Detected: an integer tuning constant with value >= 2 whose name says it is a per-thread count
(`UNROLL`, `ITEMS_PER_THREAD`, `ELEMS_PER_THREAD`, `VEC_PER_THREAD`, `COARSEN`, `ILP`, any
`..._PER_THREAD`; camelCase `kItemsPerThread` too), written as `#define NAME N` (typically inside
`#ifndef NAME` ... `#endif`; only the definition the preprocessor keeps counts), `constexpr int NAME
= N;` or a template parameter default `template <int NAME = N>`, and used by kernel code as an array
extent or a loop bound, directly or through template arguments (`kernel<BLOCK, ROW_SUM_UNROLL>`
whose `UNROLL` sizes `float4 v[UNROLL]`, followed through nested templates).

Locus: the constant's name (`ROW_SUM_UNROLL`); `function:NAME` for a template default or a
constant declared inside a function. Deoptimize sets the value to 1 (config records the old
value); NotApplicable when an array extent would become zero. Reoptimize sets it to the
configuration's value (4 by default), on natural code for the named constant, or the first
per-thread-count constant whose value is 1. On natural code with no such constant, a
one-element-per-thread kernel (`klineage.mechanisms.elementwise`) is coarsened: a new
`#ifndef PREFIX_ITEMS_PER_THREAD` count (the configuration's value), each thread taking that many
block-strided elements, all loads issued before the math, the host grid divided by the count; a
flat-index kernel accessed off the index whose body declares what it loads, then stores, gets the
same with the declared values kept per item.
"""
from __future__ import annotations

import re

from klineage.mechanisms.base import Applied, Family, Feature, Form, Kernel, Mechanism, NotApplicable, detail, \
    number_loci
from klineage.parse import semantics, syntax
from klineage.parse.syntax import Edit, Node, walk

_NAME = re.compile(r"(?:^|_)(?:UNROLL|COARSEN|COARSENING|COARSE|ILP)(?:_|$)|PER_THREAD(?:_|$)")
_VALUE = re.compile(rb"\s*\(?\s*(\d+)[uUlL]*\s*\)?\s*(?://.*|/\*.*)?$", re.S)
_MAX_DEPTH = 6


def _snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).upper()
    return s[2:] if re.match(r"K_[A-Z]", s) else s


def per_thread_name(name: str) -> bool:
    return bool(_NAME.search(_snake(name)))


_ITEMS = re.compile(r"(?:^|_)(?:ITEMS|ELEMS|ELEMENTS|VECS|VALUES|OUTS|OUTPUTS)(?:_|$)")


def item_name(name: str) -> bool:
    """A count name that says per thread only by its use (`kItems`, `VECS`): a count of items sizing
    a register array is a per-thread count; the same name sizing a shared tile is not."""
    return bool(_ITEMS.search(_snake(name)))


def _register_extent(size: Node) -> bool:
    """The array whose extent `size` is, is a local (register) array, not __shared__ or static."""
    decl = next((a for a in syntax.ancestors(size) if a.type in ("declaration", "field_declaration",
                                                                 "parameter_declaration")), None)
    if decl is None or decl.type != "declaration":
        return False
    words = {c.text.decode() for c in decl.children if c.type in ("type_qualifier", "storage_class_specifier")}
    return syntax.enclosing_function(decl) is not None and not words & {"__shared__", "static", "extern", "__constant__"}


def _template_counts(k: Kernel, seen: set[str]) -> list[Feature]:
    """Template parameters without a default that carry a per-thread count, their value taken from the
    file's one instantiation (`silu_mul<256, 4><<<...>>>`). Seen, not rewritten: the count lives at
    the launch."""
    from klineage.mechanisms.codescan import scan
    s = scan(k)
    out = []
    for fn in s.fns:
        values = _literal_template_arguments(k, s, fn)
        for name, value in values.items():
            locus = f"{fn.name}:{name}"
            if value < 2 or locus in seen or not (per_thread_name(name) or item_name(name)):
                continue
            uses = _uses(k, name, fn.node, None)
            if not per_thread_name(name):
                uses = [u for u in uses if u[0] == "extent" and _register_extent(u[2])]
            if not uses or not _device(fn.node):
                continue
            out.append(Feature(Coarsening.NAME, locus, k.lines(fn.node)[:1] * 2, anchor="per-thread count",
                               detail=detail(value=value, form="template argument",
                                             uses=",".join(sorted({u[0] for u in uses})), functions=fn.name),
                               removable=False, path=f"{fn.name} > template parameter {name}"))
    return out


def _literal_template_arguments(k: Kernel, s, fn) -> dict[str, int]:
    """Template parameters of `fn` the file instantiates one way only with an integer literal (a named
    constant passed as the argument is a feature of its own: the constant)."""
    values = s.template_values(fn)
    if not values:
        return {}
    decl = fn.node.parent
    params = _template_params(decl) if decl is not None and decl.type == "template_declaration" else []
    insts = [n for n in walk(k.tree.root) if n.type == "template_function" and
             k.tree.text_of(n.child_by_field_name("name")) == fn.name and n.child_by_field_name("arguments") is not None]
    out = {}
    for i, name in enumerate(params):
        texts = {k.tree.text_of(a) for n in insts for j, a in enumerate(
            x for x in n.child_by_field_name("arguments").named_children if x.type != "comment") if j == i}
        if name in values and len(texts) == 1 and re.fullmatch(r"\d+[uUlL]*", texts.pop()):
            out[name] = values[name]
    return out


def _grid_stride_loops(k: Kernel) -> list[Feature]:
    """Grid-stride loops: the index advances by a stride built from gridDim (`i += blockDim.x *
    gridDim.x`, or a variable holding such a product), so a grid smaller than the problem gives each
    thread (warp, tile) several items. Seen, not rewritten: the count is chosen at launch."""
    from klineage.mechanisms.codescan import assignments, base_name, scan
    s = scan(k)
    out = []
    for fn in s.fns:
        if not _device(fn.node):
            continue
        grid_vars = {base_name(lhs) for lhs, op, rhs, _ in assignments(fn.node)
                     if op == "=" and "gridDim" in rhs.text.decode()} - {None}
        items = []
        for lp in s.loops(fn):
            if not k.live(lp.node):
                continue
            upd = lp.node.child_by_field_name("update") if lp.node.type == "for_statement" else None
            steps = [upd] if upd is not None else [st for _, _, _, st in assignments(lp.body)]
            for st in steps:
                text = re.sub(r"\s+", " ", st.text.decode())
                m = re.search(r"\b(\w+) \+= (.+)$|\b(\w+) = \3 \+ (.+)$", text)
                if not m:
                    continue
                stride = m.group(2) or m.group(4)
                if "gridDim" in stride or set(re.findall(r"[A-Za-z_]\w*", stride)) & grid_vars:
                    items.append((f"{fn.name}:grid_stride:{m.group(1) or m.group(3)}", (lp, stride)))
                    break
        for locus, (lp, stride) in number_loci(items):
            out.append(Feature(Coarsening.NAME, locus, k.lines(lp.node), anchor="grid-stride loop",
                               detail=detail(form="grid-stride loop", stride=stride.rstrip(";").strip()),
                               removable=False, path=syntax.node_path(k.tree, lp.node)))
    return out


_THREAD = re.compile(r"\b(?:threadIdx|blockIdx|blockDim)\b")


def _loop_counts(k: Kernel, named: set[str]) -> list[Feature]:
    """Per-thread counts written as loop structure, whatever their names: a `for` of constant trip
    count C (a literal, a template parameter or a compile-time constant) whose index, added to a
    thread's index scaled by C, reaches a pointer: columns a block-width apart (`c = base + k *
    blockDim.x` with `base += 4 * blockDim.x`), consecutive elements (`base = tid * 4; i = base + j`),
    rows of a block (`row = blockIdx.x * 4 + r`), a column of results (`C[(threadRow * TM + i) * N]`
    with `float acc[TM]`). Not this: a function holding a 2-D tile of results (two nested counted
    loops indexing one register array: register tiling), a count that sizes a shared array (the
    block's tile, which its threads share), or a count above 16 (a row or tile held in registers).
    Seen, not rewritten; one feature per function and count."""
    from klineage.mechanisms.codescan import scan
    from klineage.mechanisms.families.register_tiling import _register_tiles
    s = scan(k)
    out = []
    for fn in s.fns:
        if not _device(fn.node):
            continue
        shared = _shared_extent_names(fn.node)
        counted = [(lp, c) for lp in s.loops(fn) if k.live(lp.node) and (c := _trip_count(s, fn, lp))
                   and c not in shared and (s.value(c, fn) or 0) <= 16]
        if not counted or _two_d_tile(fn.node, [lp for lp in s.loops(fn) if lp.var]) or _register_tiles(s, fn):
            continue  # a 2-D tile of results per thread is register tiling
        defs = _definitions(fn.node)
        loop_vars = {lp.var for lp in s.loops(fn) if lp.var}
        threaded = _thread_names({n: r for n, r in defs.items() if n not in loop_vars})
        decl = fn.node.parent
        fixed = set(s.consts) | set(s.template_values(fn)) | set(
            _template_params(decl) if decl is not None and decl.type == "template_declaration" else [])
        pointers = _pointer_names(fn.node)
        found: dict[str, list] = {}
        for lp, count in counted:
            if count in named:
                continue
            if any(_scaled_sum(n, lp.var, count, defs, threaded, fixed) and _reaches_pointer(n, lp, pointers)
                   for n in walk(lp.body) if n.type == "binary_expression"
                   and n.child_by_field_name("operator").type == "+"):
                found.setdefault(count, []).append(lp)
        for count, loops in found.items():
            a = min(k.lines(lp.node)[0] for lp in loops)
            b = max(k.lines(lp.node)[1] for lp in loops)
            out.append(Feature(Coarsening.NAME, f"{fn.name}:loop:{count}", (a, b), anchor="per-thread count",
                               detail=detail(form="loop", count=count, loops=len(loops)), removable=False,
                               path=f"{fn.name} > loop of {count} items per thread"))
    return out


def _shared_extent_names(fn_node: Node) -> set[str]:
    """Names (and literals) in the extents of the function's __shared__ arrays."""
    out = set()
    for d in walk(fn_node):
        if d.type == "declaration" and "__shared__" in d.text.decode():
            for n in walk(d):
                if n.type == "array_declarator" and n.child_by_field_name("size") is not None:
                    out |= set(re.findall(r"[A-Za-z_]\w*|\d+", n.child_by_field_name("size").text.decode()))
    return out


def _trip_count(s, fn, lp) -> str | None:
    """C of `for (int j = 0; j < C; ++j)` when C is a literal >= 2, a template parameter of the
    function or a compile-time constant >= 2; else None."""
    node = lp.node
    if lp.var is None or node.type != "for_statement":
        return None
    init = node.child_by_field_name("initializer")
    if init is None or not re.search(r"=\s*0[uU]?\s*;?$", init.text.decode().strip()):
        return None
    cond = node.child_by_field_name("condition")
    m = re.fullmatch(rf"\s*\(?\s*{re.escape(lp.var)}\s*<\s*(\w+)\s*\)?\s*", cond.text.decode()) if cond else None
    upd = node.child_by_field_name("update")
    if m is None or upd is None or not re.fullmatch(rf"\s*(?:\+\+\s*{re.escape(lp.var)}|{re.escape(lp.var)}\s*\+\+|"
                                                    rf"{re.escape(lp.var)}\s*\+=\s*1)\s*", upd.text.decode()):
        return None
    bound = m.group(1)
    if bound.isdigit():
        return bound if int(bound) >= 2 else None
    value = s.value(bound, fn)
    decl = fn.node.parent
    params = _template_params(decl) if decl is not None and decl.type == "template_declaration" else []
    return bound if (value is not None and value >= 2) or (value is None and bound in params) else None


def _two_d_tile(fn_node: Node, loops: list) -> bool:
    """Two nested counted loops whose indices both subscript one local array (`acc[i][j]`,
    `acc[i * TN + j]`, `a.c[i][j]`)."""
    from klineage.mechanisms.codescan import base_name
    for outer in loops:
        for inner in loops:
            if inner is outer or not (outer.body.start_byte <= inner.node.start_byte < outer.body.end_byte):
                continue
            for n in walk(inner.body):
                if n.type != "subscript_expression":
                    continue
                top = n
                while top.parent is not None and top.parent.type == "subscript_expression" \
                        and top.parent.child_by_field_name("argument") == top:
                    top = top.parent
                ids = {x.text.decode() for x in walk(top) if x.type == "identifier"}
                root = next((x.text.decode() for x in walk(top) if x.type == "identifier"), None)
                if outer.var in ids and inner.var in ids and (_local_array(fn_node, base_name(top))
                                                              or _local_array(fn_node, root)):
                    return True
    return False


def _local_array(fn_node: Node, name: str | None) -> bool:
    """`name` is declared in the function as an array (or a struct holding one) without __shared__."""
    if not name:
        return False
    for d in walk(fn_node):
        if d.type != "declaration" or "__shared__" in d.text.decode() or "static" in d.text.decode():
            continue
        for n in walk(d):
            if n.type == "array_declarator" and n.text.decode().split("[")[0].strip() == name:
                return True
            if n.type == "identifier" and n.text.decode() == name and d.child_by_field_name("type") is not None \
                    and d.child_by_field_name("type").type in ("type_identifier", "struct_specifier"):
                return True  # a struct of accumulators
    return False


def _definitions(fn_node: Node) -> dict[str, list[Node]]:
    from klineage.mechanisms.codescan import assignments, base_name
    defs: dict[str, list[Node]] = {}
    for lhs, op, rhs, _ in assignments(fn_node):
        name = base_name(lhs)
        if name:
            defs.setdefault(name, []).append(rhs)
    return defs


def _thread_names(defs: dict[str, list[Node]]) -> set[str]:
    """Variables (transitively) computed from threadIdx / blockIdx / blockDim."""
    out: set[str] = set()
    for _ in range(4):
        for name, rhss in defs.items():
            if name not in out and any(_THREAD.search(r.text.decode()) or
                                       {x.text.decode() for x in walk(r) if x.type == "identifier"} & out
                                       for r in rhss):
                out.add(name)
    return out


def _thread_only(node: Node, threaded: set[str], fixed: set[str]) -> bool:
    """`node` is a thread's index: it reads threadIdx / blockIdx / blockDim or a variable computed from
    them, and otherwise only compile-time names and literals (no size, no loop index)."""
    ids = [x.text.decode() for x in walk(node) if x.type == "identifier"]
    return bool(_THREAD.search(node.text.decode()) or set(ids) & threaded) and all(
        i in threaded or i in fixed or _THREAD.fullmatch(i) for i in ids)


def _scaled(node: Node, count: str, defs, threaded, fixed, depth: int = 0) -> bool:
    """`node` holds, itself or through the definitions of the names it reads, a product of `count`
    and a thread index."""
    for n in walk(node):
        if n.type == "binary_expression" and n.child_by_field_name("operator").type == "*":
            x, y = n.child_by_field_name("left"), n.child_by_field_name("right")
            for a, b in ((x, y), (y, x)):
                if _bare(a) == count and _thread_only(b, threaded, fixed):
                    return True
    if depth < 3:
        for x in walk(node):
            if x.type == "identifier" and x.text.decode() in defs:
                if any(_scaled(r, count, defs, threaded, fixed, depth + 1) for r in defs[x.text.decode()]):
                    return True
    return False


def _bare(node: Node) -> str:
    t = node.text.decode().strip()
    while t.startswith("(") and t.endswith(")"):
        t = t[1:-1].strip()
    return t


def _scaled_sum(plus: Node, var: str, count: str, defs, threaded, fixed) -> bool:
    """`a + b`: one side is the loop index (or the index times a stride), the other a thread index
    scaled by the trip count."""
    x, y = plus.child_by_field_name("left"), plus.child_by_field_name("right")
    for a, b in ((x, y), (y, x)):
        if _linear(a, var) and var not in {n.text.decode() for n in walk(b) if n.type == "identifier"} \
                and _scaled(b, count, defs, threaded, fixed):
            return True
    return False


def _linear(node: Node, var: str) -> bool:
    """`j` or `j * stride` (`stride * j`), not `(j & 1)` or `j / 2`."""
    n = node
    while n.type == "parenthesized_expression" and n.named_children:
        n = n.named_children[0]
    if n.type == "identifier":
        return n.text.decode() == var
    if n.type == "binary_expression" and n.child_by_field_name("operator").type == "*":
        x, y = n.child_by_field_name("left"), n.child_by_field_name("right")
        for a, b in ((x, y), (y, x)):
            if a.type == "identifier" and a.text.decode() == var and \
                    var not in {i.text.decode() for i in walk(b) if i.type == "identifier"}:
                return True
    return False


def _pointer_names(fn_node: Node) -> set[str]:
    """Parameters and locals declared as pointers."""
    out = set()
    for d in walk(fn_node):
        if d.type in ("parameter_declaration", "declaration"):
            for n in walk(d):
                if n.type == "pointer_declarator":
                    ident = next((c for c in walk(n) if c.type == "identifier"), None)
                    if ident is not None:
                        out.add(ident.text.decode())
    return out


def _reaches_pointer(plus: Node, lp, pointers: set[str]) -> bool:
    """The sum (or the variable it is stored in) indexes a pointer in the loop body: `p[... sum ...]`,
    `p + sum`."""
    from klineage.mechanisms.codescan import base_name
    names = {None}
    top = plus
    while top.parent is not None and top.parent.type in ("binary_expression", "parenthesized_expression",
                                                          "cast_expression"):
        top = top.parent
    holder = top.parent
    if holder is not None and holder.type in ("init_declarator", "assignment_expression"):
        target = holder.child_by_field_name("declarator") or holder.child_by_field_name("left")
        names = {base_name(target)}
    uses = [plus] if names == {None} else [x for x in walk(lp.body) if x.type == "identifier"
                                          and x.text.decode() in names]
    for u in uses:
        for a in syntax.ancestors(u):
            if a.type == "subscript_expression" and base_name(a.child_by_field_name("argument")) in pointers \
                    and not _within_node(u, a.child_by_field_name("argument")):
                return True
            if a.type == "binary_expression" and a.child_by_field_name("operator").type == "+" and any(
                    base_name(a.child_by_field_name(f)) in pointers for f in ("left", "right")):
                return True
            if a.type in ("expression_statement", "declaration", "for_statement", "compound_statement"):
                break
    return False


def _within_node(inner: Node, outer: Node | None) -> bool:
    return outer is not None and outer.start_byte <= inner.start_byte and inner.end_byte <= outer.end_byte


def live_define(k: Kernel, node: Node) -> bool:
    return node.start_point.row + 1 in semantics.macro_lines(k.source)


def _constants(k: Kernel):
    """(locus, (name, value, digits (start, end), form, scope node, defining node)) of integer constants."""
    items = []
    for caps in k.tree.matches("tuning_constants"):
        name_node, value_node = caps["name"][0], caps["value"][0]
        name = name_node.text.decode()
        if "define" in caps:
            node = caps["define"][0]
            if not live_define(k, node):
                continue
            m = _VALUE.match(value_node.text)
            if not m:
                continue
            start = value_node.start_byte + m.start(1)
            items.append((name, (name, int(m.group(1)), (start, start + len(m.group(1))), "#define", None, node)))
            continue
        node = (caps.get("constexpr") or caps.get("default") or caps.get("const") or caps.get("member"))[0]
        if not k.live(node):
            continue
        m = re.fullmatch(r"(\d+)[uUlL]*", value_node.text.decode())
        if not m:
            continue
        if "member" in caps:
            owner = next((a for a in syntax.ancestors(node) if a.type in ("struct_specifier", "class_specifier")), None)
            oname = owner.child_by_field_name("name") if owner is not None else None
            locus = f"{oname.text.decode()}::{name}" if oname is not None else name
            span = (value_node.start_byte, value_node.start_byte + len(m.group(1)))
            items.append((locus, (name, int(m.group(1)), span, "static constexpr member", None, node)))
            continue
        if "default" in caps:
            tmpl = next((a for a in syntax.ancestors(node) if a.type == "template_declaration"), None)
            fn = next((c for c in tmpl.named_children if c.type == "function_definition"), None) if tmpl else None
            if fn is None:
                continue
            scope, form, locus = tmpl, "template default", f"{syntax.function_name(fn)}:{name}"
        else:
            fn = syntax.enclosing_function(node)
            scope, form = fn, "constexpr" if "constexpr" in caps else "const"
            locus = f"{syntax.function_name(fn)}:{name}" if fn is not None else name
        span = (value_node.start_byte, value_node.start_byte + len(m.group(1)))
        items.append((locus, (name, int(m.group(1)), span, form, scope, node)))
    items.sort(key=lambda it: it[1][5].start_byte)
    return number_loci(items)


def _templates(k: Kernel) -> dict[str, list[tuple[Node, Node]]]:
    """Function templates by name: (template_declaration, function_definition)."""
    out: dict[str, list] = {}
    for n in walk(k.tree.root):
        if n.type == "template_declaration":
            fn = next((c for c in n.named_children if c.type == "function_definition"), None)
            if fn is not None:
                out.setdefault(syntax.function_name(fn), []).append((n, fn))
    return out


def _template_params(tmpl: Node) -> list[str]:
    plist = tmpl.child_by_field_name("parameters")
    names = []
    for p in plist.named_children if plist is not None else []:
        if p.type == "comment":
            continue
        ident = p.child_by_field_name("declarator") or next(
            (c for c in p.named_children if c.type in ("identifier", "type_identifier")), None)
        names.append(ident.text.decode() if ident is not None else "")
    return names


def _device(fn: Node | None) -> bool:
    return fn is not None and bool({"__device__", "__global__"} & syntax.function_qualifiers(fn))


def _uses(k: Kernel, name: str, scope: Node, skip: Node | None, depth: int = 0, seen=None) -> list[tuple]:
    """Kernel-code uses of `name` under `scope`: ('extent', function, size node) / ('loop', function,
    loop), following template arguments into the templates they instantiate."""
    seen = seen if seen is not None else set()
    if depth > _MAX_DEPTH:
        return []
    templates = _templates(k)
    out = []
    for n in walk(scope):
        if n.type not in ("identifier", "type_identifier") or n.text.decode() != name:
            continue
        if skip is not None and skip.start_byte <= n.start_byte < skip.end_byte:
            continue
        if not k.live(n):
            continue
        fn = syntax.enclosing_function(n)
        if _device(fn):
            for a in syntax.ancestors(n):
                if a.type == "array_declarator":
                    size = a.child_by_field_name("size")
                    if size is not None and size.start_byte <= n.start_byte < size.end_byte:
                        out.append(("extent", syntax.function_name(fn), size))
                    break
                if a.type == "for_statement":
                    body = a.child_by_field_name("body")
                    if body is None or n.start_byte < body.start_byte:
                        out.append(("loop", syntax.function_name(fn), a))
                        break
                if a.type in ("compound_statement", "function_definition"):
                    break
        targs = next((a for a in syntax.ancestors(n) if a.type == "template_argument_list"), None)
        if targs is None or targs.parent is None or targs.parent.type != "template_function":
            continue
        callee = targs.parent.child_by_field_name("name").text.decode()
        argv = [a for a in targs.named_children if a.type != "comment"]
        idx = next((i for i, a in enumerate(argv) if a.start_byte <= n.start_byte < a.end_byte), None)
        for tmpl, tfn in templates.get(callee, []):
            params = _template_params(tmpl)
            if idx is None or idx >= len(params) or not params[idx] or not _device(tfn):
                continue
            key = (tmpl.start_byte, params[idx])
            if key in seen:
                continue
            seen.add(key)
            out.extend(_uses(k, params[idx], tfn, None, depth + 1, seen))
    return out


def _zero_extents(k: Kernel, uses: list[tuple], name: str) -> list[str]:
    """Array extents that would evaluate to 0 with the count set to 1."""
    bad = []
    for kind, fn, node in uses:
        if kind != "extent":
            continue
        text = re.sub(r"\b[A-Za-z_]\w*\b", "1", k.tree.text_of(node))  # the count (and names) as 1
        if re.fullmatch(r"[\d\s+\-*/%()]+", text):
            try:
                if eval(text.replace("/", "//"), {"__builtins__": {}}) == 0:
                    bad.append(f"{fn}: [{k.tree.text_of(node)}]")
            except (ZeroDivisionError, SyntaxError):
                bad.append(f"{fn}: [{k.tree.text_of(node)}]")
    return bad


def _kernel_uses(k: Kernel, name: str, form: str, scope: Node | None, node: Node) -> list[tuple]:
    if form == "template default":
        fn = next(c for c in scope.named_children if c.type == "function_definition")
        return _uses(k, name, fn, None)
    return _uses(k, name, scope if scope is not None else k.tree.root, node)


class Coarsening(Mechanism):
    NAME = "coarsening"
    DESCRIPTION = "thread coarsening: several elements / vectors per thread via a compile-time count"
    PRECONDITIONS = {
        "layout": [{"condition": "the problem size covers BLOCK*COUNT elements per block, or the kernel has a "
                                 "bounds-checked remainder path",
                    "fails_without": "the last block reads and writes past the end of the buffers"}],
        "pipeline": [{"condition": "the grid is sized from the same count (blocks = ceil(n / (BLOCK*COUNT)))",
                      "fails_without": "elements are skipped or processed twice"},
                     {"condition": "the code stays valid with the count set to 1 (no zero-length arrays, no "
                                   "COUNT/2 extents)",
                      "fails_without": "the coarsening cannot be switched off: the deoptimized kernel does not "
                                       "compile"}],
        "storage": [{"condition": "COUNT elements of registers per thread fit the register budget",
                     "fails_without": "register spills to local memory; the kernel gets slower"}],
    }

    def detect(self, k: Kernel) -> list[Feature]:
        out = []
        for locus, (name, value, span, form, scope, node) in _constants(k):
            if value < 2 or not (per_thread_name(name) or item_name(name)):
                continue
            uses = _kernel_uses(k, name, form, scope, node)
            if not per_thread_name(name):
                uses = [u for u in uses if u[0] == "extent" and _register_extent(u[2])]
            if not uses:
                continue
            kinds = sorted({u[0] for u in uses})
            fns = sorted({u[1] for u in uses})
            line = node.start_point.row + 1
            lines = (line, line) if form == "#define" else k.lines(node)
            out.append(Feature(self.NAME, locus, lines, anchor="per-thread count",
                               detail=detail(value=value, form=form, uses=",".join(kinds), functions=",".join(fns)),
                               path=(f"{k.function_of(node)} > " if scope is not None else "file > ")
                               + f"{form} {name}"))
        return out

    def detect_more(self, k: Kernel) -> list[Feature]:
        named = self.detect(k)
        counts = _template_counts(k, {f.locus for f in named})
        return counts + _grid_stride_loops(k) + _loop_counts(k, {f.locus.rpartition(":")[2] for f in named + counts})

    def deoptimize(self, k: Kernel, feature: Feature):
        hit = dict(_constants(k)).get(feature.locus)
        if hit is None:
            return NotApplicable(f"no tuning constant {feature.locus}")
        name, value, span, form, scope, node = hit
        if value < 2:
            return NotApplicable(f"{name} is already {value}")
        uses = _kernel_uses(k, name, form, scope, node)
        zero = _zero_extents(k, uses, name)
        if zero:
            return NotApplicable(f"{name} = 1 gives zero-length arrays ({'; '.join(zero)}): the count cannot be "
                                 f"switched off")
        return self._set(k, feature.locus, hit, "1", {"name": name, "value": str(value), "form": form})

    def reoptimize(self, k: Kernel, locus: str | None = None, config: dict | None = None):
        config = config or {}
        value = str(config.get("value", 4))
        if not re.fullmatch(r"\d+", value) or int(value) < 2:
            return NotApplicable(f"a per-thread count must be an integer >= 2, not {value}")
        consts = _constants(k)
        if locus is None:
            locus = next((loc for loc, (name, v, span, form, scope, node) in consts
                          if v == 1 and per_thread_name(name) and _kernel_uses(k, name, form, scope, node)), None)
            if locus is None:
                # natural code with no count: a one-element-per-thread kernel gets one
                from klineage.mechanisms.elementwise_rewrite import coarsen
                got = coarsen(k, int(value))
                if got.ok:
                    return got
                return NotApplicable(f"no per-thread count constant set to 1 that kernel code uses, and {got.reason}")
        hit = dict(consts).get(locus)
        if hit is None:
            return NotApplicable(f"no tuning constant {locus}")
        name, v, span, form, scope, node = hit
        return self._set(k, locus, hit, value, {"name": name, "value": value, "previous": str(v), "form": form})

    def _set(self, k: Kernel, locus: str, hit, value: str, config: dict):
        name, old, (a, b), form, scope, node = hit
        new = k.tree.edit([Edit(a, b, value)])
        text = k.tree.text_of(node).rstrip("\n")
        rel_a, rel_b = a - node.start_byte, b - node.start_byte
        after = (node.text[:rel_a] + value.encode() + node.text[rel_b:]).decode().rstrip("\n")
        return Applied(new, self.NAME, locus, before=text, after=after, config=config)


FAMILY = Family(
    Coarsening, rank=60,
    forms=(
        Form("a per-thread count >= 2 (#define, constexpr, or template default) used as an array extent or a loop "
             "bound"),
        Form("a template parameter without a default carrying a per-thread count, its value from the file's one "
             "instantiation", rewritable=False),
        Form("a grid-stride loop (the index advances by a stride built from gridDim)", rewritable=False),
    ),
    forward=("reoptimize",),
    anchor_query='(preproc_def name: (identifier) @name (#match? @name "(UNROLL|PER_THREAD|COARSEN|ILP|ITEMS)"))',
    addresses=frozenset({"latency", "memory"}),
)
