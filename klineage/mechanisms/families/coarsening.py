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
        return _template_counts(k, {f.locus for f in self.detect(k)}) + _grid_stride_loops(k)

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
