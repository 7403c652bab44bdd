"""One-element-per-thread elementwise kernels, and the forward rewrites that reach them.

The plainest CUDA kernel there is, and the start of most new work, is *flat*: one thread per element,

    __global__ void k(const float* x, float* out, long long n, ...) {
        long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
        if (i >= n) return;                     // or: if (i < n) { ... }
        ... x[i] ... out[i] = ...;              // every pointer parameter accessed at [i] only
    }
    ... grid = (n + BLOCK - 1) / BLOCK; k<<<grid, BLOCK, ...>>>(x, out, n, ...);

The vector_access and coarsening families have no loop or helper call to act on there, so their
forward rewrites go through this module. Both produce one *tiled* form of the kernel, emitted from
the same description (`Flat`), in which every thread takes `COUNT` block-strided items:

- items of one element (coarsening of a flat kernel): all the loads of all items into registers,
  then the body once per item, each stored as it is done;
- items of one 16-byte vector, `VEC` elements of every pointer (vector_access): each pointer read
  and written as one `float4` / `int4` / `uint4` (2-byte types: 8 packed in a `uint4`) / `double2`
  when the vector lies wholly below the count and every base pointer is 16-byte aligned, element by
  element otherwise (the count % VEC tail, a misaligned base); the body applied per lane.

`COUNT` is a `#ifndef PREFIX_ITEMS_PER_THREAD` tuning constant, the coarsening family's carrier:
the vector rewrite writes it as 1 (coarsening off, what the backward walk leaves of an expert's
count) and coarsening sets it, as on any kernel with such a count; the coarsening rewrite of a flat
kernel writes it as 4. The host grid `(N + B - 1) / B` becomes `(N + F - 1) / F` with F the
elements one block now covers (`VEC * COUNT * B`).

Semantics are those of the flat kernel run for each element: each element is read, computed and
written by exactly one thread; all loads of a thread come before its first store, and a body may
not read one pointer after writing another, so an in-place call (out == x) reads every element
before it is overwritten. Anything this module does not understand (other index forms, accesses
off [i], thread indices, barriers, shuffles or atomics in the body, a host grid of another shape,
element types of different sizes) gives NotApplicable with the reason, never a kernel.

The tiled form with items of one element is also read back (`tiled_scalar`), so a coarsened flat
kernel can still be vectorized: the kernel it came from is rebuilt, analysed and re-emitted, and
the rewrite proceeds only when that re-emission is the current kernel exactly. Vectorizing then
coarsening and coarsening then vectorizing give the same kernel.

Coarsening also reaches a kernel with the flat index and bounds check whose pointers are accessed
at other indices (rope: `x[lo]`, `cos_tab[t * half + i]`), when its body is *loads then stores*:
declarations of one scalar each (what it loads and the index arithmetic), then statements that
store and load nothing (`Phased`). Each declared value becomes a per-item register array; the
declarations run for every item first, then the stores. A race-free kernel (no thread reads what
another writes) computes the same: each item's loads still precede its own stores, and no item
reads what another item writes. No vector form is attempted there (contiguity and alignment of
`lo` cannot be read off the text).

This module reads a kernel into its description; elementwise_emit.py writes the tiled form
(and reads it back), elementwise_rewrite.py holds the two rewrites and the host launch.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


from klineage.mechanisms.base import Kernel, squash
from klineage.mechanisms.vector_forms import declarators, line_start, strip_parens, top_level
from klineage.parse import syntax
from klineage.parse.syntax import Node, walk

# element type -> (bytes, 16-byte vector type, component fields or None for packed 2-byte lanes)
ELEMENTS = {
    "float": (4, "float4", "xyzw"), "int": (4, "int4", "xyzw"), "unsigned int": (4, "uint4", "xyzw"),
    "unsigned": (4, "uint4", "xyzw"), "double": (8, "double2", "xy"),
    "__nv_bfloat16": (2, "uint4", None), "nv_bfloat16": (2, "uint4", None),
    "__half": (2, "uint4", None), "half": (2, "uint4", None),
}
_INDEX_TYPES = {"int", "long", "long int", "long long", "long long int", "int64_t", "int32_t", "ptrdiff_t",
                "unsigned", "unsigned int", "unsigned long", "unsigned long long", "uint64_t", "uint32_t",
                "size_t", "signed", "signed int", "long unsigned int"}
_FLAT = {"blockIdx.x*blockDim.x+threadIdx.x", "blockDim.x*blockIdx.x+threadIdx.x",
         "threadIdx.x+blockIdx.x*blockDim.x", "threadIdx.x+blockDim.x*blockIdx.x"}
_THREAD_VARS = {"threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize"}
_BANNED_CALL = re.compile(r"__syncthreads\w*|__syncwarp|__shfl\w*|atomic\w+|__ballot\w*|__any\w*|__all\w*|"
                          r"__activemask|__match\w*|__reduce\w*|printf|__nanosleep|__threadfence\w*|"
                          r"cooperative_groups|__trap|assert")
_CAST = re.compile(r"\((?:const\s+)?(?:unsigned|signed|long|int|short|size_t|ptrdiff_t|u?int(?:32|64)_t|\s)+\)")
VECTOR_BYTES = 16
_LOOPS = ("for_statement", "while_statement", "do_statement", "for_range_loop")


def _norm(text: str) -> str:
    """Expression text without spaces, C-style integer casts or outer parentheses."""
    t = _CAST.sub("", re.sub(r"\s+", "", text))
    while t.startswith("(") and t.endswith(")") and _balanced(t[1:-1]):
        t = t[1:-1]
    return t


def _balanced(t: str) -> bool:
    depth = 0
    for ch in t:
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return False
    return depth == 0


def _elem(type_text: str) -> str:
    return " ".join(w for w in type_text.split() if w not in ("const", "volatile", "__restrict__", "__restrict"))


# ---------------------------------------------------------------- the description

@dataclass
class Ptr:
    name: str
    elem: str          # element type, qualifiers off (`float`, `__nv_bfloat16`)
    const: bool
    read: bool = False
    written: bool = False


@dataclass
class Flat:
    k: Kernel
    fn: Node
    kernel: str
    index: str
    index_type: str
    bound: str
    region: tuple[int, int]      # bytes of the body statements (line start of the first .. end of the last)
    indent: str                  # their indentation
    head_indent: str             # the indentation of the kernel's first statement
    outer_indent: str            # the indentation of the kernel's definition
    ptrs: list[Ptr]              # accessed pointer parameters, parameter order
    accesses: list[tuple[Node, str]]  # (p[i] subscript, pointer)
    uses_index: bool             # the body uses the index other than as [i]
    names: set[str]              # identifiers of the function

    @property
    def size(self) -> int:
        return ELEMENTS[self.ptrs[0].elem][0]

    @property
    def lanes(self) -> int:
        return VECTOR_BYTES // self.size


def _params(fn: Node) -> list[tuple[str, str, int]]:
    """(name, type text with qualifiers, pointer depth) of the function's parameters."""
    decl = fn.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    out = []
    for p in plist.named_children if plist is not None else []:
        if p.type != "parameter_declaration":
            continue
        quals = [c.text.decode() for c in p.children if c.type == "type_qualifier"]
        t = p.child_by_field_name("type")
        ttext = " ".join(quals + ([t.text.decode()] if t is not None else []))
        for name, pointers, array, ref in declarators(p):
            out.append((name, ttext, pointers + (1 if array else 0) + (9 if ref else 0)))
    return out


def _context(node: Node) -> str:
    """How an access `p[i]` is used: load | store | rmw | arg | none | bad."""
    n = node
    while n.parent is not None and n.parent.type == "parenthesized_expression":
        n = n.parent
    p = n.parent
    if p is None:
        return "bad"
    if p.type == "assignment_expression" and p.child_by_field_name("left") == n:
        return "store" if p.child_by_field_name("operator").type == "=" else "rmw"
    if p.type == "update_expression":
        return "rmw"
    if p.type in ("field_expression", "pointer_expression", "subscript_expression") and n != p.child_by_field_name("index"):
        return "bad"  # p[i].x, &p[i], p[i][j]
    if p.type == "init_declarator" and any(c.type == "reference_declarator" for c in p.named_children):
        return "bad"
    if p.type in ("sizeof_expression", "decltype"):
        return "none"
    if p.type == "argument_list":
        return "arg"
    return "load"


def _kernel_spec(k: Kernel, fn: Node, any_index: bool = False):
    """The flat description of kernel `fn`, or why it is not flat. With `any_index`, pointers may be
    accessed at any index, and the result is the load-then-store description (`Phased`)."""
    name = syntax.function_name(fn)
    if top_level(fn) is not fn:
        return f"{name} is a template"
    body = fn.child_by_field_name("body")
    if body is None:
        return f"{name} has no body"
    stmts = [c for c in body.named_children if c.type != "comment"]
    if len(stmts) < 3 and not (len(stmts) == 2 and stmts[1].type == "if_statement"):
        return f"{name}: not `index = blockIdx.x * blockDim.x + threadIdx.x; if (index >= n) return; body`"
    d = stmts[0]
    if d.type != "declaration" or len(d.children_by_field_name("declarator")) != 1:
        return f"{name}: the first statement does not declare the flat index"
    init = d.children_by_field_name("declarator")[0]
    if init.type != "init_declarator" or init.child_by_field_name("declarator").type != "identifier":
        return f"{name}: the first statement does not declare the flat index"
    index = init.child_by_field_name("declarator").text.decode()
    itype = _elem(" ".join([c.text.decode() for c in d.children if c.type == "type_qualifier"]
                           + [d.child_by_field_name("type").text.decode()]))
    if itype not in _INDEX_TYPES:
        return f"{name}: the index {index} has type {itype}, not an integer type this rewrite knows"
    if _norm(k.tree.text_of(init.child_by_field_name("value"))) not in _FLAT:
        return (f"{name}: {index} = {squash(k.tree.text_of(init.child_by_field_name('value')))} is not the flat "
                f"index blockIdx.x * blockDim.x + threadIdx.x")
    guard = stmts[1]
    if guard.type != "if_statement" or guard.child_by_field_name("alternative") is not None:
        return f"{name}: the statement after the index is not a bounds check `if ({index} >= n) return;`"
    cond = strip_parens(guard.child_by_field_name("condition").child_by_field_name("value"))
    cons = guard.child_by_field_name("consequence")
    if cond is None or cond.type != "binary_expression":
        return f"{name}: the bounds check is not a comparison of {index}"
    op = cond.child_by_field_name("operator").type
    left, right = (k.tree.text_of(strip_parens(cond.child_by_field_name(s))) for s in ("left", "right"))
    if (op, left) in ((">=", index), ("<", index)):
        bound, exits = right, op == ">="
    elif (op, right) in (("<=", index), (">", index)):
        bound, exits = left, op == "<="
    else:
        return f"{name}: the bounds check {squash(k.tree.text_of(cond))} is not `{index} >= n` or `{index} < n`"
    params = {p[0]: p for p in _params(fn)}
    if bound not in params or params[bound][2] != 0:
        return f"{name}: the bound {bound} is not a scalar parameter of the kernel"
    if exits:
        inner = [c for c in (cons.named_children if cons.type == "compound_statement" else [cons])
                 if c.type != "comment"]
        if len(inner) != 1 or inner[0].type != "return_statement" or inner[0].named_child_count:
            return f"{name}: the bounds check does not just return"
        region_nodes = [c for c in body.named_children if c.start_byte > guard.end_byte]
    else:
        if stmts[-1] is not guard or cons.type != "compound_statement":
            return f"{name}: code follows the `if ({index} < {bound}) {{...}}` block"
        region_nodes = list(cons.named_children)
    if not any(c.type != "comment" for c in region_nodes):
        return f"{name}: the body is empty"

    # the body: every pointer parameter accessed at [index] only; no thread indices, barriers, returns
    ptr_params = {n: (t, depth) for n, t, depth in _params(fn) if depth >= 1}
    accesses, uses_index = [], False
    local_names = set()
    by_ref = _by_reference(k)
    for top in region_nodes:
        for n in walk(top):
            if n.type in ("declaration",):
                for dn, *_ in declarators(n):
                    local_names.add(dn)
            if n.type in ("return_statement", "goto_statement", "labeled_statement", "lambda_expression",
                          "gnu_asm_expression", "asm_statement"):
                return f"{name}: the body has a {n.type.replace('_', ' ')}"
            if n.type in ("break_statement", "continue_statement") and not any(
                    a.type in _LOOPS + ("switch_statement",) for a in _between(n, top)):
                return f"{name}: the body has a {n.type.split('_')[0]} outside its own loops"
            if n.type == "storage_class_specifier" and n.text.decode() == "static":
                return f"{name}: the body declares a static variable"
            if n.type in ("__shared__",) or (n.type == "identifier" and n.text.decode() == "__shared__"):
                return f"{name}: the body uses shared memory"
            if n.type == "call_expression":
                callee = k.tree.text_of(n.child_by_field_name("function"))
                if _BANNED_CALL.fullmatch(callee.split("<")[0].split("::")[-1]) or "cooperative_groups" in callee:
                    return f"{name}: the body calls {callee}: lanes are not independent threads"
                if callee in by_ref:
                    return f"{name}: the body calls {callee}, which takes a non-const reference"
            target = None
            if n.type == "assignment_expression":
                target = n.child_by_field_name("left")
            elif n.type == "update_expression":
                target = n.child_by_field_name("argument")
            elif n.type == "pointer_expression" and n.child_by_field_name("operator").type == "&":
                target = n.child_by_field_name("argument")
            if target is not None:
                root = _root(target)
                if root is None or (root not in local_names and not (
                        root in ptr_params and strip_parens(target).type == "subscript_expression")):
                    return (f"{name}: the body writes or takes the address of {squash(k.tree.text_of(target))}, "
                            f"declared outside it: with several items per thread it would carry over from one item "
                            f"to the next")
            if n.type == "field_expression" and k.tree.text_of(n.child_by_field_name("operator")) == "->":
                return f"{name}: the body dereferences a pointer with ->"
            if n.type == "pointer_expression" and n.child_by_field_name("operator").type == "*":
                return f"{name}: the body dereferences {squash(k.tree.text_of(n))}: only p[{index}] is understood"
            if n.type == "subscript_expression":
                base = strip_parens(n.child_by_field_name("argument"))
                idx = k.tree.text_of(n.child_by_field_name("indices"))[1:-1].strip()
                bname = base.text.decode() if base is not None and base.type == "identifier" else None
                if bname in ptr_params:
                    if _norm(idx) != index and not any_index:
                        return f"{name}: {bname} is accessed at [{squash(idx)}], not at the flat index [{index}]"
                    if ptr_params[bname][1] != 1:
                        return f"{name}: {bname} is not a plain pointer"
                    accesses.append((n, bname))
                elif bname is None or bname not in local_names:
                    return (f"{name}: {squash(k.tree.text_of(n))} indexes memory that is not a pointer parameter "
                            f"or a local array")
            if n.type == "identifier":
                t = n.text.decode()
                if t in _THREAD_VARS:
                    return f"{name}: the body reads {t}: its meaning changes when a thread takes several items"
                if t in ptr_params and not (n.parent is not None and n.parent.type == "subscript_expression"
                                            and strip_parens(n.parent.child_by_field_name("argument")) == n):
                    return f"{name}: the body uses the pointer {t} other than as {t}[{index}]"
                if t == index and not _is_index_of_access(n, ptr_params):
                    uses_index = True
                    p = n.parent
                    if p is not None and ((p.type == "assignment_expression" and p.child_by_field_name("left") == n)
                                          or p.type == "update_expression"
                                          or (p.type == "pointer_expression" and p.child_by_field_name("operator").type == "&")):
                        return f"{name}: the body modifies or takes the address of the index {index}"
            if n.type in ("declaration", "parameter_declaration") and any(dn == index for dn, *_ in declarators(n)):
                return f"{name}: the body redeclares the index {index}"
    if not accesses:
        return f"{name}: the body accesses no pointer parameter at [{index}]"
    first = next(c for c in region_nodes)
    start = line_start(k.tree.data, first.start_byte)
    indent = k.tree.data[start:first.start_byte].decode()
    head = k.tree.data[line_start(k.tree.data, d.start_byte):d.start_byte].decode()
    top = top_level(fn)
    outer = k.tree.data[line_start(k.tree.data, top.start_byte):top.start_byte].decode()
    if indent.strip() or head.strip() or outer.strip():
        return f"{name}: the kernel's definition or a statement of it shares a line with other code"
    names = {n.text.decode() for n in walk(k.tree.root) if n.type in ("identifier", "type_identifier")}
    if any_index:
        return _phased(k, fn, name, index, itype, bound, region_nodes, accesses, ptr_params, indent, head, outer,
                       names)

    # read / written, and the order of reads and writes (an in-place call aliases the pointers)
    info: dict[str, Ptr] = {}
    events = []  # (position, kind, pointer)
    for node, p in accesses:
        ttext, _ = ptr_params[p]
        ptr = info.setdefault(p, Ptr(p, _elem(ttext), "const" in ttext.split()))
        ctx = _context(node)
        if ctx == "bad":
            return f"{name}: {squash(k.tree.text_of(node.parent))} uses {p}[{index}] other than as a value or a store"
        if ctx == "none":
            continue
        loop = _outer_loop(node, region_nodes)
        if ctx == "store":
            assign = node.parent
            while assign.type != "assignment_expression":
                assign = assign.parent
            ptr.written = True
            nested = _nested(assign, region_nodes)
            if nested:
                ptr.read = True  # a conditional store: unwritten lanes store back what was there
            events.append((loop.start_byte if loop is not None else assign.end_byte, "w", p))
        elif ctx in ("rmw", "arg"):
            if ctx == "arg" and ptr.const:
                ptr.read = True
                events.append((loop.end_byte if loop is not None else node.start_byte, "r", p))
                continue
            ptr.read = ptr.written = True
            events.append((loop.end_byte if loop is not None else node.start_byte, "r", p))
            events.append((loop.start_byte if loop is not None else node.end_byte, "w", p))
        else:
            ptr.read = True
            events.append((loop.end_byte if loop is not None else node.start_byte, "r", p))
        if ptr.written and ptr.const:
            return f"{name}: {p} is const but written"
    for pos, kind, p in events:
        if kind == "r":
            late = [q for qpos, qk, q in events if qk == "w" and q != p and qpos < pos]
            if late:
                return (f"{name}: {p}[{index}] is read after {late[0]}[{index}] is written: if the two alias (an "
                        f"in-place call) a register copy would read the old value")
    ptrs = [info[n] for n, *_ in _params(fn) if n in info]
    if not any(p.written for p in ptrs):
        return f"{name}: the body writes no pointer parameter"
    return Flat(k, fn, name, index, itype, bound, (start, region_nodes[-1].end_byte), indent, head, outer, ptrs,
                accesses, uses_index, names)


@dataclass
class Phased:
    """A flat-index kernel whose body first declares what it loads (at any index), then stores."""
    k: Kernel
    fn: Node
    kernel: str
    index: str
    index_type: str
    bound: str
    head_indent: str
    outer_indent: str
    names: set[str]
    loads: list[Node]          # the declarations that load (and the comments among them)
    locals: list[tuple[str, str]]  # (name, type) declared by them
    stores: tuple[int, int]       # bytes of the statements from the first store on
    indent: str
    renames: list[Node]        # identifiers naming those locals, in their initialisers and the stores


def _phased(k, fn, name, index, itype, bound, region_nodes, accesses, ptr_params, indent, head, outer, names):
    reads, writes = [], []
    for node, p in accesses:
        ctx = _context(node)
        if ctx == "bad":
            return f"{name}: {squash(k.tree.text_of(node.parent))} uses an element of {p} other than as a value or a store"
        const = "const" in ptr_params[p][0].split()
        if ctx in ("load", "rmw") or (ctx == "arg"):
            reads.append(node)
        if ctx in ("store", "rmw") or (ctx == "arg" and not const):
            writes.append(node)
    tops = [c for c in region_nodes if c.type != "comment"]

    def within(node, top):
        return top.start_byte <= node.start_byte < top.end_byte
    first = next((j for j, t in enumerate(tops) if any(within(w, t) for w in writes)), None)
    if first is None:
        return f"{name}: the body writes no pointer parameter"
    if first == 0:
        return (f"{name}: the body's first statement stores: it is not declarations that load, then statements "
                f"that store")
    late = [r for r in reads if r.start_byte >= tops[first].start_byte]
    if late:
        return (f"{name}: {squash(k.tree.text_of(late[0]))} is read after the first store: the loads of every item "
                f"cannot all come first")
    locs = []
    for t in tops[:first]:
        decls = list(declarators(t)) if t.type == "declaration" else []
        inits = t.children_by_field_name("declarator") if t.type == "declaration" else []
        if len(decls) != 1 or decls[0][1:] != (0, False, False) or inits[0].type != "init_declarator":
            return (f"{name}: {squash(k.tree.text_of(t))} is not a declaration of one scalar with an initialiser: "
                    f"the statements before the first store must be")
        ttext = " ".join([c.text.decode() for c in t.children if c.type == "type_qualifier"]
                         + [t.child_by_field_name("type").text.decode()])
        if re.search(r"\b(auto|constexpr|static|extern)\b", ttext):
            return f"{name}: {squash(k.tree.text_of(t))}: a deduced or static declaration cannot become an array"
        locs.append((decls[0][0], _elem(ttext)))
    mine = {n for n, _ in locs}
    declared = [dn for t in region_nodes for n in walk(t) if n.type in ("declaration", "parameter_declaration")
                for dn, *_ in declarators(n)]
    if len(declared) != len(set(declared)) and any(declared.count(v) > 1 for v in mine):
        return f"{name}: a name the loads declare is declared again in the body"
    renames = []
    for t in tops:
        for n in walk(t):
            if n.type == "identifier" and n.text.decode() in mine:
                p = n.parent
                if p is not None and p.type == "init_declarator" and p.child_by_field_name("declarator") == n:
                    continue
                renames.append(n)
    start = line_start(k.tree.data, tops[first].start_byte)
    return Phased(k, fn, name, index, itype, bound, head, outer, names,
                  [c for c in region_nodes if c.end_byte <= tops[first].start_byte], locs,
                  (start, region_nodes[-1].end_byte), indent, renames)


def _root(n: Node) -> str | None:
    """The variable an lvalue names: `v`, `a[j]`, `s.f` -> v, a, s."""
    n = strip_parens(n)
    while n is not None and n.type in ("subscript_expression", "field_expression"):
        n = strip_parens(n.child_by_field_name("argument"))
    return n.text.decode() if n is not None and n.type == "identifier" else None


def _by_reference(k: Kernel) -> set[str]:
    """Functions of the file with a non-const reference parameter."""
    out = set()
    for fn in syntax.functions(k.tree):
        decl = fn.child_by_field_name("declarator")
        while decl is not None and decl.type != "function_declarator":
            decl = decl.child_by_field_name("declarator")
        plist = decl.child_by_field_name("parameters") if decl is not None else None
        for p in plist.named_children if plist is not None else []:
            if any(c.type == "reference_declarator" for c in walk(p)) and \
                    "const" not in [c.text.decode() for c in p.children if c.type == "type_qualifier"]:
                out.add(syntax.function_name(fn))
    return out


def _between(n: Node, top: Node):
    a = n
    while a is not None and a != top.parent:
        yield a
        a = a.parent


def _outer_loop(n: Node, region: list[Node]) -> Node | None:
    """The outermost loop of the body that contains `n`, if any."""
    found = None
    tops = {(r.start_byte, r.end_byte) for r in region}
    a = n.parent
    while a is not None:
        if a.type in _LOOPS:
            found = a
        if (a.start_byte, a.end_byte) in tops:
            break
        a = a.parent
    return found


def _nested(assign: Node, region: list[Node]) -> bool:
    """True when the assignment is not a plain top-level statement of the body."""
    st = assign.parent
    return not (st is not None and st.type == "expression_statement"
                and any(st.start_byte == r.start_byte and st.end_byte == r.end_byte for r in region))


def _is_index_of_access(n: Node, ptr_params) -> bool:
    p = n.parent
    while p is not None and p.type == "parenthesized_expression":
        p = p.parent
    if p is None or p.type != "subscript_argument_list":
        return False
    sub = p.parent
    base = strip_parens(sub.child_by_field_name("argument")) if sub is not None else None
    return base is not None and base.type == "identifier" and base.text.decode() in ptr_params


# ---------------------------------------------------------------- finding kernels

def flat_kernels(k: Kernel) -> tuple[list[Flat], list[str]]:
    """Flat kernels of the source (each a __global__ function), and why the other kernels are not."""
    found, why = [], []
    for fn in syntax.functions(k.tree):
        if "__global__" not in syntax.function_qualifiers(fn) or not k.live(fn):
            continue
        got = _kernel_spec(k, fn)
        (found if isinstance(got, Flat) else why).append(got)
    return found, why
