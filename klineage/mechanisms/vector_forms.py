"""Vector accesses as the tree shows them: declarations and pointer types, the accesses a vector_access
rewrite takes, the scalar helpers it inserts (klineage.mechanisms.families.vector_access is the family; these are
also used by the elementwise, warp_reduction, smem_staging and smem_padding families)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from klineage.mechanisms.base import Feature, Kernel, detail, number_loci, squash
from klineage.parse import syntax
from klineage.parse.semantics import VECTOR_TYPES, vector_name
from klineage.parse.syntax import Node, node_path, walk

LOAD_HINTS = ("__ldg", "__ldcs", "__ldcg", "__ldca", "__ldlu", "__ldcv")
STORE_HINTS = ("__stcs", "__stcg", "__stwt", "__stwb")
_CASTS = ("reinterpret_cast", "static_cast", "const_cast")
_SUFFIX = {"__half2": "half2", "__nv_bfloat162": "bfloat162"}
_MAKE = {"__half2": "__halves2half2", "__nv_bfloat162": "__halves2bfloat162"}
_PARTS = {"__half2": ("__low2half(v)", "__high2half(v)"),
          "__nv_bfloat162": ("__low2bfloat16(v)", "__high2bfloat16(v)")}
_HELPER = re.compile(r"kl_scalar_(load|store)_(\w+)")
_BY_SUFFIX = {_SUFFIX.get(v, v): v for v in VECTOR_TYPES}
NAME = "vector_access"


# ---------------------------------------------------------------- declarations and pointer types
# (also used by the warp_reduction and smem_staging families)

@dataclass(frozen=True)
class Decl:
    """A declared name: its type text as written (qualifiers included), pointer depth, and form."""
    name: str
    type: str
    pointers: int
    array: bool
    reference: bool
    node: Node      # the declaration or parameter_declaration
    line: int


def strip_parens(n: Node | None) -> Node | None:
    while n is not None and n.type == "parenthesized_expression" and n.named_child_count == 1:
        n = n.named_children[0]
    return n


def paren(text: str) -> str:
    """`text` as an operand: bare for a name or number, parenthesised otherwise."""
    return text if re.fullmatch(r"[A-Za-z_]\w*|\d+[uUlL]*", text) else f"({text})"


def declarators(decl: Node):
    """(name, pointers, array, reference) for every declarator of a declaration."""
    for d in decl.children_by_field_name("declarator"):
        pointers, array, ref = 0, False, False
        while d is not None and d.type != "identifier":
            if d.type == "pointer_declarator":
                pointers += 1
            elif d.type == "array_declarator":
                array = True
            elif d.type == "reference_declarator":
                ref = True
            elif d.type not in ("init_declarator", "parenthesized_declarator"):
                d = None
                break
            d = d.child_by_field_name("declarator") or next(
                (c for c in d.named_children if c.type.endswith("declarator") or c.type == "identifier"), None)
        if d is not None:
            yield d.text.decode(), pointers, array, ref


def _type_text(decl: Node) -> str:
    quals = [c.text.decode() for c in decl.children if c.type == "type_qualifier"]
    t = decl.child_by_field_name("type")
    return " ".join(quals + ([t.text.decode()] if t is not None else []))


def _decl_in(k: Kernel, node: Node, name: str) -> Decl | None:
    for dname, pointers, array, ref in declarators(node):
        if dname != name:
            continue
        tname = _type_text(node)
        line = node.start_point.row + 1
        if re.search(r"\bauto\b", tname):  # deduced: ask libclang
            spelled = next((t for (n, ln), t in k.sem.var_types.items() if n == name
                            and line <= ln <= node.end_point.row + 1), None)
            if spelled is None:
                return None
            return Decl(name, spelled.replace("*", " ").replace("&", " ").strip(), spelled.count("*"),
                        "[" in spelled, "&" in spelled, node, line)
        return Decl(name, tname, pointers, array, ref, node, line)
    return None


def declared(k: Kernel, name: str, use: Node) -> Decl | None:
    """The declaration of `name` visible at `use`: a local of an enclosing block (declared before
    the use), a for-loop variable, a parameter, or a file-scope declaration."""
    for a in syntax.ancestors(use):
        if a.type in ("compound_statement", "translation_unit", "declaration_list"):
            found = None
            for c in a.named_children:
                if c.start_byte >= use.start_byte:
                    break
                if c.type == "declaration":
                    found = _decl_in(k, c, name) or found
            if found is not None:
                return found
        elif a.type == "for_statement":
            init = a.child_by_field_name("initializer")
            if init is not None and init.type == "declaration" and init.end_byte <= use.start_byte:
                found = _decl_in(k, init, name)
                if found is not None:
                    return found
        elif a.type == "function_definition":
            fdecl = a.child_by_field_name("declarator")
            while fdecl is not None and fdecl.type != "function_declarator":
                fdecl = fdecl.child_by_field_name("declarator")
            params = fdecl.child_by_field_name("parameters") if fdecl is not None else None
            for p in (params.named_children if params is not None else []):
                if p.type in ("parameter_declaration", "optional_parameter_declaration"):
                    found = _decl_in(k, p, name)
                    if found is not None:
                        return found
    return None


def _descriptor_vector(desc: Node) -> str | None:
    text = desc.text.decode()
    return vector_name(text) if text.count("*") == 1 and "&" not in text else None


def pointer_vector(k: Kernel, expr: Node | None) -> str | None:
    """The vector type an expression points to (`const float4*` -> 'float4'), else None."""
    e = strip_parens(expr)
    if e is None:
        return None
    if e.type == "identifier":
        d = declared(k, e.text.decode(), e)
        return vector_name(d.type) if d and d.pointers == 1 and not d.array and not d.reference else None
    if e.type == "binary_expression":
        op = e.child_by_field_name("operator").type
        if op in ("+", "-"):
            left = pointer_vector(k, e.child_by_field_name("left"))
            return left or (pointer_vector(k, e.child_by_field_name("right")) if op == "+" else None)
        return None
    if e.type == "update_expression":
        return pointer_vector(k, e.child_by_field_name("argument"))
    if e.type == "cast_expression":
        return _descriptor_vector(e.child_by_field_name("type"))
    if e.type == "pointer_expression" and e.child_by_field_name("operator").type == "&":
        arg = strip_parens(e.child_by_field_name("argument"))
        if arg is not None and arg.type == "subscript_expression":
            return pointer_vector(k, arg.child_by_field_name("argument"))
        return None
    if e.type == "call_expression":
        fn = e.child_by_field_name("function")
        if fn is not None and fn.type == "template_function" and fn.child_by_field_name("name").text.decode() in _CASTS:
            desc = next((c for c in fn.child_by_field_name("arguments").named_children
                         if c.type == "type_descriptor"), None)
            return _descriptor_vector(desc) if desc is not None else None
    return None


def device_function(node: Node) -> Node | None:
    fn = syntax.enclosing_function(node)
    if fn is None or not ({"__device__", "__global__"} & syntax.function_qualifiers(fn)):
        return None
    return fn


def statement_of(node: Node) -> Node:
    n = node
    while n.parent is not None and n.parent.type not in ("compound_statement", "translation_unit") and not (
            n.type.endswith("_statement") or n.type == "declaration"):
        n = n.parent
    return n


def top_level(fn: Node) -> Node:
    """The function's outermost node (its template_declaration, if any)."""
    while fn.parent is not None and fn.parent.type == "template_declaration":
        fn = fn.parent
    return fn


def line_start(data: bytes, pos: int) -> int:
    return data.rfind(b"\n", 0, pos) + 1


# ---------------------------------------------------------------- accesses

@dataclass(frozen=True)
class _Access:
    node: Node            # the dereference, subscript or hint call
    target: Node          # what deoptimize replaces: the access (load) or the assignment (store)
    kind: str                # "load" | "store"
    vector: str
    address: str             # address text, as the helper call's argument
    form: str                # "deref" | "subscript" | the hint intrinsic
    hint: str | None
    function: str
    fn: Node
    value: str | None = None  # stored value text


def _use_context(node: Node):
    """('load'|'store'|None, assignment) for an access expression; None means skip it."""
    n = node
    while n.parent is not None and n.parent.type == "parenthesized_expression":
        n = n.parent
    p = n.parent
    if p is None:
        return None, None
    if p.type == "field_expression" and p.child_by_field_name("argument") == n:
        return None, None  # `p[i].x`: a scalar component access
    if p.type == "pointer_expression" and p.child_by_field_name("operator").type == "&":
        return None, None  # address taken, nothing accessed
    if p.type in ("update_expression", "sizeof_expression", "decltype"):
        return None, None
    if p.type == "assignment_expression" and p.child_by_field_name("left") == n:
        return ("store", p) if p.child_by_field_name("operator").type == "=" else (None, None)
    if p.type == "init_declarator" and any(c.type == "reference_declarator" for c in p.named_children):
        return None, None
    return "load", None


def _accesses(k: Kernel) -> list[tuple[str, _Access]]:
    found: list[_Access] = []
    for caps in k.tree.matches("derefs"):
        node = (caps.get("deref") or caps.get("subscript"))[0]
        fn = device_function(node)
        if fn is None or _HELPER.fullmatch(syntax.function_name(fn)) or not k.live(node):
            continue
        if "deref" in caps:
            ptr = caps["address"][0]
            address, form = k.tree.text_of(strip_parens(ptr)), "deref"
        else:
            ptr = caps["base"][0]
            inner = k.tree.text_of(caps["index"][0])[1:-1].strip()
            address, form = f"{k.tree.text_of(ptr)} + {paren(inner)}", "subscript"
        kind, assign = _use_context(node)
        if kind is None:
            continue
        vec = pointer_vector(k, ptr)
        if vec is None:
            continue
        target = assign if assign is not None else node
        value = k.tree.text_of(assign.child_by_field_name("right")) if assign is not None else None
        found.append(_Access(node, target, kind, vec, address, form, None, syntax.function_name(fn), fn, value))
    for caps in k.tree.matches("calls"):
        callee, call = caps["callee"][0].text.decode(), caps["call"][0]
        argv = [a for a in caps["args"][0].named_children if a.type != "comment"]
        if not ((callee in LOAD_HINTS and len(argv) == 1) or (callee in STORE_HINTS and len(argv) == 2)):
            continue
        fn = device_function(call)
        if fn is None or not k.live(call):
            continue
        vec = pointer_vector(k, argv[0])
        if vec is None:
            continue
        kind = "load" if callee in LOAD_HINTS else "store"
        found.append(_Access(call, call, kind, vec, k.tree.text_of(strip_parens(argv[0])), callee, callee,
                             syntax.function_name(fn), fn,
                             k.tree.text_of(argv[1]) if kind == "store" else None))
    found.sort(key=lambda a: a.node.start_byte)
    return number_loci([(f"{a.function}:{a.kind}:{squash(a.address)}", a) for a in found])


# ---------------------------------------------------------------- forms seen, not rewritten

_PTX_VECTOR = re.compile(r"^(ld|st)\.global(?:\.[\w:]+)*\.v[248]\.")


def _pack_types(k: Kernel) -> set[str]:
    """Struct types declared with an alignment of their own (`struct alignas(16) Pack`, `struct
    __align__(8) Pair`, `alignas(sizeof(T) * N)`): loads and stores of one are vector accesses."""
    out = set()
    for n in walk(k.tree.root):
        if n.type in ("struct_specifier", "class_specifier") and n.child_by_field_name("body") is not None:
            name = n.child_by_field_name("name")
            head = k.tree.data[n.start_byte:(name.end_byte if name is not None else n.start_byte)].decode()
            if name is not None and re.search(r"\balignas\s*\(|__align__\s*\(", head):
                out.add(name.text.decode())
    return out


def _other_forms(k: Kernel, taken: set[str]) -> list[Feature]:
    """Vector accesses the rewrite does not take (seen, not removable): hand-written PTX .v2/.v4
    global loads and stores, and accesses through a pointer to an aligned pack struct."""
    items = []
    from klineage.mechanisms.codescan import asm_ops
    for op in asm_ops(k):
        m = _PTX_VECTOR.match(op.opcode)
        if m:
            items.append((f"{op.function}:{'load' if m.group(1) == 'ld' else 'store'}:asm:{op.opcode}",
                          (op.node, "load" if m.group(1) == "ld" else "store", op.opcode, "inline PTX")))
    packs = _pack_types(k)
    if packs:
        for caps in k.tree.matches("derefs"):
            node = (caps.get("deref") or caps.get("subscript"))[0]
            fn = device_function(node)
            if fn is None or not k.live(node):
                continue
            ptr = caps.get("address", caps.get("base"))[0]
            pack = _pointee_pack(k, ptr, packs)
            kind, _ = _use_context(node)
            if pack is None or kind is None:
                continue
            if "deref" in caps:
                address = k.tree.text_of(strip_parens(ptr))
            else:
                address = f"{k.tree.text_of(ptr)} + {paren(k.tree.text_of(caps['index'][0])[1:-1].strip())}"
            items.append((f"{syntax.function_name(fn)}:{kind}:{squash(address)}", (node, kind, pack, "aligned struct")))
    items = [(loc, v) for loc, v in items if loc not in taken]
    return [Feature(NAME, locus, k.lines(node), anchor=f"global {kind}",
                    detail=detail(vector=what, form=via), removable=False, path=node_path(k.tree, node))
            for locus, (node, kind, what, via) in number_loci(items)]


def _pointee_pack(k: Kernel, expr, packs: set[str]) -> str | None:
    e = strip_parens(expr)
    if e is None:
        return None
    if e.type == "identifier":
        d = declared(k, e.text.decode(), e)
        if d is not None and d.pointers == 1 and not d.array:
            base = re.sub(r"<.*", "", d.type.replace("const", "").replace("volatile", "")).strip()
            return base if base in packs else None
        return None
    if e.type == "binary_expression" and e.child_by_field_name("operator").type in ("+", "-"):
        return _pointee_pack(k, e.child_by_field_name("left"), packs)
    return None


# ---------------------------------------------------------------- helpers

def helper_name(kind: str, vec: str) -> str:
    return f"kl_scalar_{kind}_{_SUFFIX.get(vec, vec)}"


def helper_text(kind: str, vec: str) -> str:
    elem, lanes, _ = VECTOR_TYPES[vec]
    name = helper_name(kind, vec)
    if kind == "load":
        make = _MAKE.get(vec, f"make_{vec}")
        args = ", ".join(f"s[{i}]" for i in range(lanes))
        return (f"__device__ __forceinline__ {vec} {name}(const {vec}* p) {{\n"
                f"    const {elem}* s = reinterpret_cast<const {elem}*>(p);\n"
                f"    return {make}({args});\n"
                f"}}\n")
    parts = _PARTS.get(vec) or tuple(f"v.{c}" for c in "xyzw"[:lanes])
    stores = " ".join(f"d[{i}] = {p};" for i, p in enumerate(parts))
    return (f"__device__ __forceinline__ void {name}({vec}* p, {vec} v) {{\n"
            f"    {elem}* d = reinterpret_cast<{elem}*>(p);\n"
            f"    {stores}\n"
            f"}}\n")


def _helper_defs(k: Kernel, name: str) -> list[Node]:
    return [f for f in syntax.functions(k.tree) if syntax.function_name(f) == name]


def _helper_calls(k: Kernel):
    """Calls of kl_scalar_* helpers: (call, kind, vector, argv, function node), source order."""
    out = []
    for caps in k.tree.matches("calls"):
        m = _HELPER.fullmatch(caps["callee"][0].text.decode())
        if not m or m.group(2) not in _BY_SUFFIX:
            continue
        call = caps["call"][0]
        argv = [a for a in caps["args"][0].named_children if a.type != "comment"]
        out.append((call, m.group(1), _BY_SUFFIX[m.group(2)], argv, syntax.enclosing_function(call)))
    return out


def insert_at(k: Kernel, fn: Node) -> int:
    """Line start of the function's outermost node, above the comment lines directly over it."""
    node = top_level(fn)
    while True:
        prev = node.prev_named_sibling
        if prev is None or prev.type != "comment" or prev.end_point.row + 1 != node.start_point.row:
            break
        if k.tree.data[line_start(k.tree.data, prev.start_byte):prev.start_byte].strip():
            break  # a trailing comment of code on that line
        node = prev
    return line_start(k.tree.data, node.start_byte)



def vector_features(k: Kernel) -> list[Feature]:
    """The vector accesses the rewrite takes (the vector_access family's source detector)."""
    out = []
    for locus, a in _accesses(k):
        _, lanes, nbytes = VECTOR_TYPES[a.vector]
        out.append(Feature(NAME, locus, k.lines(a.target), anchor=f"global {a.kind}",
                           detail=detail(vector=a.vector, lanes=lanes, bytes=nbytes, form=a.form),
                           path=node_path(k.tree, a.node)))
    return out
