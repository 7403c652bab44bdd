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
"""
from __future__ import annotations

import re
from dataclasses import dataclass


from klineage.mechanisms.base import Kernel, NotApplicable, squash
from klineage.mechanisms.vector_forms import (declarators, insert_at, line_start, strip_parens, top_level,
                                              vector_features)
from klineage.parse import syntax
from klineage.parse.syntax import Edit, Node, walk

# element type -> (bytes, 16-byte vector type, component fields or None for packed 2-byte lanes)
ELEMENTS = {
    "float": (4, "float4", "xyzw"), "int": (4, "int4", "xyzw"), "unsigned int": (4, "uint4", "xyzw"),
    "unsigned": (4, "uint4", "xyzw"), "double": (8, "double2", "xy"),
    "__nv_bfloat16": (2, "uint4", None), "nv_bfloat16": (2, "uint4", None),
    "__half": (2, "uint4", None), "half": (2, "uint4", None),
}
# 2-byte lanes: bits -> value, value -> bits
_BITS = {"__nv_bfloat16": ("__ushort_as_bfloat16", "__bfloat16_as_ushort"),
         "nv_bfloat16": ("__ushort_as_bfloat16", "__bfloat16_as_ushort"),
         "__half": ("__ushort_as_half", "__half_as_ushort"), "half": ("__ushort_as_half", "__half_as_ushort")}
_INDEX_TYPES = {"int", "long", "long int", "long long", "long long int", "int64_t", "int32_t", "ptrdiff_t",
                "unsigned", "unsigned int", "unsigned long", "unsigned long long", "uint64_t", "uint32_t",
                "size_t", "signed", "signed int", "long unsigned int"}
_WIDE = {"long long", "long long int", "int64_t", "ptrdiff_t", "long", "long int", "unsigned long long",
         "uint64_t", "size_t", "unsigned long", "long unsigned int"}
_FLAT = {"blockIdx.x*blockDim.x+threadIdx.x", "blockDim.x*blockIdx.x+threadIdx.x",
         "threadIdx.x+blockIdx.x*blockDim.x", "threadIdx.x+blockDim.x*blockIdx.x"}
_THREAD_VARS = {"threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize"}
_BANNED_CALL = re.compile(r"__syncthreads\w*|__syncwarp|__shfl\w*|atomic\w+|__ballot\w*|__any\w*|__all\w*|"
                          r"__activemask|__match\w*|__reduce\w*|printf|__nanosleep|__threadfence\w*|"
                          r"cooperative_groups|__trap|assert")
_CAST = re.compile(r"\((?:const\s+)?(?:unsigned|signed|long|int|short|size_t|ptrdiff_t|u?int(?:32|64)_t|\s)+\)")
COUNT_SUFFIX = "ITEMS_PER_THREAD"
# the corpus's convention for a tuning constant (the sweep materializer reads the same form)
TUNABLE = re.compile(r"#ifndef (\w+)\s*\n\s*#define \1 (\d+)\b[^\n]*\n\s*#endif")
DEFAULT_COUNT = 4
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


def _strip(n: Node | None) -> Node | None:
    """Parentheses and casts off an expression."""
    while n is not None:
        if n.type == "parenthesized_expression" and n.named_child_count == 1:
            n = n.named_children[0]
        elif n.type == "cast_expression":
            n = n.child_by_field_name("value")
        else:
            return n
    return n


# ---------------------------------------------------------------- the description

@dataclass
class Ptr:
    name: str
    elem: str          # element type, qualifiers off (`float`, `__nv_bfloat16`)
    const: bool
    read: bool = False
    written: bool = False


@dataclass
class Launch:
    grid: Node      # the formula node `(N + M - 1) / M` the rewrite replaces
    count: str         # N as written in the formula
    block: str         # the launch's block-size argument as written
    per_block: str     # M, normalised


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


def _item_loop(I: str, c: str, count: str, etype: str, e: str, first: str, bound: str,
               index: tuple[str, str] | None = None) -> list[str]:
    """The head of a loop over a thread's `count` items: item `c` starts at element `e` = `first`,
    the loop ends at the first item past `bound`, and `index` (type, name), when given, is bound to
    `e` for the body."""
    h = [f"{I}for (int {c} = 0; {c} < {count}; ++{c}) {{",
         f"{I}    const {etype} {e} = {first};",
         f"{I}    if ({e} >= {bound}) break;"]
    if index is not None:
        h.append(f"{I}    const {index[0]} {index[1]} = {e};")
    return h


def emit_phased(ph: Phased, count: str) -> str:
    """Coarsening of a load-then-store kernel: `count` block-strided items per thread, the
    declarations that load run for every item first (their values kept per item in registers),
    then the stores of every item."""
    nm = _Names(ph.names)
    I = ph.head_indent or "    "
    base, c = nm("base"), nm("c")
    arrs = {v: nm(f"{v}_c") for v, _ in ph.locals}
    data = ph.k.tree.data
    wide = ph.index_type in _WIDE
    e = ph.index if wide else nm("e")
    etype = ph.index_type if wide else "long long"

    def renamed(a: int, b: int) -> str:
        edits = [Edit(n.start_byte - a, n.end_byte - a, f"{arrs[n.text.decode()]}[{c}]") for n in ph.renames
                 if a <= n.start_byte < b]
        return syntax.apply_edits(data[a:b].decode(), edits)

    def head():
        return _item_loop(I, c, count, etype, e, f"{base} + (long long){c} * blockDim.x", ph.bound,
                          None if wide else (ph.index_type, ph.index))
    lines = ["{"]
    lines += _comment(I, f"coarsening: every thread takes {count} items (the work of {count} threads of the "
                         f"one-item kernel), block-strided (coalesced across the warp). What the items load is "
                         f"declared for every item first, kept per item in registers, so all of the thread's loads "
                         f"are in flight before the math; then every item stores.")
    lines.append(f"{I}const long long {base} = (long long)blockIdx.x * blockDim.x * {count} + threadIdx.x;")
    lines += [f"{I}{t} {arrs[v]}[{count}];" for v, t in ph.locals]
    lines += head()
    loads = ph.loads
    for j, n in enumerate(loads):
        if n.type == "comment":
            if j and loads[j - 1].end_point.row == n.start_point.row:
                continue  # a trailing comment, written with its statement
            lines.append(f"{I}    {ph.k.tree.text_of(n)}")
            continue
        init = n.children_by_field_name("declarator")[0]
        v = init.child_by_field_name("declarator").text.decode()
        val = init.child_by_field_name("value")
        text = f"{I}    {arrs[v]}[{c}] = {renamed(val.start_byte, val.end_byte)};"
        nxt = loads[j + 1] if j + 1 < len(loads) else None
        if nxt is not None and nxt.type == "comment" and nxt.start_point.row == n.end_point.row:
            text += "  " + ph.k.tree.text_of(nxt)
        lines.append(text)
    lines.append(f"{I}}}")
    lines += head()
    a, b = ph.stores
    for line in renamed(a, b).split("\n"):
        if line.startswith(ph.indent):
            line = line[len(ph.indent):]
        lines.append((I + "    " + line).rstrip() if line.strip() else "")
    lines.append(f"{I}}}")
    lines.append(ph.outer_indent + "}")
    return "\n".join(lines)


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


# ---------------------------------------------------------------- the host launch

def _launch(k: Kernel, flat: Flat, factors: list[str]) -> Launch | str:
    """The single launch of the kernel and its grid formula `(N + M - 1) / M`, with M the launch's
    block size times `factors` (the elements per thread the kernel has now)."""
    launches = []
    for n in walk(k.tree.root):
        if n.type == "call_expression" and any(c.type == "kernel_call_syntax" for c in n.children):
            f = n.child_by_field_name("function")
            if f is not None and k.tree.text_of(f) == flat.kernel:
                launches.append(n)
            elif f is not None and f.type == "template_function" and \
                    f.child_by_field_name("name").text.decode() == flat.kernel:
                launches.append(n)
    if len(launches) != 1:
        return f"{flat.kernel} is launched {len(launches)} times in this file: the rewrite needs its one launch"
    call = launches[0]
    if call.child_by_field_name("function").type != "identifier":
        return f"the launch of {flat.kernel} names template arguments"
    cfg = next(c for c in call.children if c.type == "kernel_call_syntax")
    conf = [c for c in cfg.named_children if c.type != "comment"]
    args = [a for a in call.child_by_field_name("arguments").named_children if a.type != "comment"]
    names = [p[0] for p in _params(flat.fn)]
    if len(conf) < 2 or len(args) != len(names):
        return f"the launch of {flat.kernel} does not pass grid, block and every parameter"
    narg = _norm(k.tree.text_of(args[names.index(flat.bound)]))
    block = k.tree.text_of(conf[1])
    grid = _strip(conf[0])
    host = syntax.enclosing_function(call)
    if grid is not None and grid.type == "identifier":
        gname = grid.text.decode()
        inits, others = [], []
        for n in walk(host):
            if n.type == "init_declarator" and n.child_by_field_name("declarator").type == "identifier" \
                    and n.child_by_field_name("declarator").text.decode() == gname:
                inits.append(n)
            elif n.type == "assignment_expression" and _strip(n.child_by_field_name("left")) is not None \
                    and k.tree.text_of(_strip(n.child_by_field_name("left"))) == gname:
                others.append(n)
            elif n.type == "update_expression" and k.tree.text_of(_strip(n.child_by_field_name("argument"))) == gname:
                others.append(n)
            elif n.type == "pointer_expression" and n.child_by_field_name("operator").type == "&" and \
                    k.tree.text_of(_strip(n.child_by_field_name("argument"))) == gname:
                others.append(n)
        if len(inits) != 1 or others or inits[0].start_byte > call.start_byte:
            return f"the grid {gname} is not set once from a formula before the launch"
        formula = inits[0].child_by_field_name("value")
    else:
        formula = conf[0]
    f = _strip(formula)
    if f is None or f.type != "binary_expression" or f.child_by_field_name("operator").type != "/":
        return f"the grid {squash(k.tree.text_of(formula))} is not (N + B - 1) / B"
    m = _norm(k.tree.text_of(f.child_by_field_name("right")))
    count = _count_text(k, f.child_by_field_name("left"), m)
    if count is None or _norm(count) != narg:
        return (f"the grid {squash(k.tree.text_of(f))} is not ({squash(k.tree.text_of(args[names.index(flat.bound)]))}"
                f" + B - 1) / B for the kernel's bound {flat.bound}")
    want = "*".join(factors + [_norm(block)])
    if m != want:
        return (f"the grid divides by {m}, not by the elements one block covers ({want.replace('*', ' * ')}): "
                f"the kernel and the launch disagree in a way this rewrite does not follow")
    return Launch(f, count, block, m)


def _count_text(k: Kernel, left: Node, m: str) -> str | None:
    """N as written, when the numerator is N + M - 1 (or N + (M - 1)); None otherwise."""
    def bare(n):
        while n is not None and n.type == "parenthesized_expression" and n.named_child_count == 1:
            n = n.named_children[0]
        return n

    def op(n, o):
        return n is not None and n.type == "binary_expression" and n.child_by_field_name("operator").type == o

    n = bare(left)
    if op(n, "-") and _norm(k.tree.text_of(n.child_by_field_name("right"))) == "1":
        s = bare(n.child_by_field_name("left"))
        if op(s, "+") and _norm(k.tree.text_of(s.child_by_field_name("right"))) == m:
            return k.tree.text_of(s.child_by_field_name("left"))
    if op(n, "+"):
        right = _norm(k.tree.text_of(n.child_by_field_name("right")))
        if right == f"{m}-1" or (m.isdigit() and right.isdigit() and int(right) == int(m) - 1):
            return k.tree.text_of(n.child_by_field_name("left"))
    return None


def grid_edit(launch: Launch, block: str, factors: list[str]) -> Edit:
    per = " * ".join(factors + [block])
    per_p = per if re.fullmatch(r"\w+", per) else f"({per})"
    return Edit(launch.grid.start_byte, launch.grid.end_byte, f"({launch.count} + {per} - 1) / {per_p}")


# ---------------------------------------------------------------- emitting the tiled form

class _Names:
    def __init__(self, taken: set[str]):
        self.taken = set(taken)

    def __call__(self, want: str) -> str:
        n = want
        while n in self.taken:
            n += "_"
        self.taken.add(n)
        return n


def _vec_load(p: Ptr, arr: str, ci: str, e: str, ind: str, nm: _Names) -> list[str]:
    size, vtype, fields = ELEMENTS[p.elem]
    tmp = nm(f"{p.name}_vec")
    out = [f"{ind}const {vtype} {tmp} = *reinterpret_cast<const {vtype}*>({p.name} + {e});"]
    if fields:
        parts = [f"{arr}[{ci}][{j}] = {tmp}.{f};" for j, f in enumerate(fields)]
    else:
        from_bits = _BITS[p.elem][0]
        parts = []
        for j, f in enumerate("xyzw"):
            parts.append(f"{arr}[{ci}][{2 * j}] = {from_bits}((unsigned short){tmp}.{f});")
            parts.append(f"{arr}[{ci}][{2 * j + 1}] = {from_bits}((unsigned short)({tmp}.{f} >> 16));")
    per_line = 4 if fields else 2
    for j in range(0, len(parts), per_line):
        out.append(ind + " ".join(parts[j:j + per_line]))
    return out


def _vec_store(p: Ptr, arr: str, ci: str, e: str, ind: str) -> list[str]:
    size, vtype, fields = ELEMENTS[p.elem]
    if fields:
        vals = [f"{arr}[{ci}][{j}]" for j in range(len(fields))]
        return [f"{ind}*reinterpret_cast<{vtype}*>({p.name} + {e}) = make_{vtype}({', '.join(vals)});"]
    to_bits = _BITS[p.elem][1]
    words = [f"(unsigned){to_bits}({arr}[{ci}][{2 * j}]) | ((unsigned){to_bits}({arr}[{ci}][{2 * j + 1}]) << 16)"
             for j in range(4)]
    lines = [f"{ind}*reinterpret_cast<uint4*>({p.name} + {e}) = make_uint4("]
    lines += [f"{ind}    {w}{',' if j < 3 else ');'}" for j, w in enumerate(words)]
    return lines


def _body_text(flat: Flat, subst: dict[str, str], indent: str) -> list[str]:
    """The body statements with every p[index] replaced by subst[p], re-indented to `indent`."""
    a, b = flat.region
    edits = [Edit(n.start_byte - a, n.end_byte - a, subst[p]) for n, p in flat.accesses]
    text = syntax.apply_edits(flat.k.tree.data[a:b].decode(), edits)
    out = []
    for line in text.split("\n"):
        if line.startswith(flat.indent):
            line = line[len(flat.indent):]
        out.append((indent + line).rstrip() if line.strip() else "")
    return out


def _comment(indent: str, text: str) -> list[str]:
    import textwrap
    return [f"{indent}// {ln}" for ln in textwrap.wrap(text, 100 - len(indent) - 3)]


def emit(flat: Flat, vec: bool, count: str) -> str:
    """The kernel's new body (a compound statement) in the tiled form: `count` items per thread,
    each one element (vec False) or one 16-byte vector of every pointer (vec True)."""
    nm = _Names(flat.names)
    I = flat.head_indent or "    "
    outer = flat.outer_indent
    base, c = nm("base"), nm("c")
    arrs = {p.name: nm(f"{p.name}_v") for p in flat.ptrs}
    N = flat.bound
    loaded = [p for p in flat.ptrs if p.read]
    stored = [p for p in flat.ptrs if p.written]
    pnames = ", ".join(p.name for p in flat.ptrs)
    lines = ["{"]
    if vec:
        V = flat.lanes
        aligned, e, k = nm("aligned"), nm("e"), nm("k")
        vt = ELEMENTS[flat.ptrs[0].elem][1]
        vec_first = f"({base} + (long long){c} * blockDim.x) * {V}"  # the item's first element
        lines += _comment(I, f"vector_access: every thread takes {count} block-strided 16-byte vectors: {V} "
                             f"consecutive elements of each of {pnames}. A vector that lies wholly below {N} while "
                             f"every base pointer is 16-byte aligned is read and written as one {vt}; otherwise "
                             f"element by element (the {N} % {V} tail, a misaligned base). Every load comes before "
                             f"any store: an in-place call reads each element before it is overwritten.")
        lines += [
            f"{I}const bool {aligned} = (({' | '.join(f'(unsigned long long){p.name}' for p in flat.ptrs)}) & 15ull) == 0;",
            f"{I}const long long {base} = (long long)blockIdx.x * blockDim.x * {count} + threadIdx.x;",
        ]
        lines += [f"{I}{p.elem} {arrs[p.name]}[{count}][{V}];" for p in flat.ptrs]
        if loaded:
            lines += _item_loop(I, c, count, "long long", e, vec_first, N)
            lines.append(f"{I}    if ({aligned} && {e} + {V} <= {N}) {{")
            for p in loaded:
                lines += _vec_load(p, arrs[p.name], c, e, I + "        ", nm)
            lines += [f"{I}    }} else {{",
                      f"{I}        for (int {k} = 0; {k} < {V} && {e} + {k} < {N}; ++{k}) {{"]
            lines += [f"{I}            {arrs[p.name]}[{c}][{k}] = {p.name}[{e} + {k}];" for p in loaded]
            lines += [f"{I}        }}", f"{I}    }}", f"{I}}}"]
        lines += _item_loop(I, c, count, "long long", e, vec_first, N)
        lines += [f"{I}    for (int {k} = 0; {k} < {V}; ++{k}) {{",
                  f"{I}        if ({e} + {k} >= {N}) break;"]
        if flat.uses_index:
            lines.append(f"{I}        const {flat.index_type} {flat.index} = {e} + {k};")
        lines += _body_text(flat, {p.name: f"{arrs[p.name]}[{c}][{k}]" for p in flat.ptrs}, I + "        ")
        lines += [f"{I}    }}", f"{I}    if ({aligned} && {e} + {V} <= {N}) {{"]
        for p in stored:
            lines += _vec_store(p, arrs[p.name], c, e, I + "        ")
        lines += [f"{I}    }} else {{",
                  f"{I}        for (int {k} = 0; {k} < {V} && {e} + {k} < {N}; ++{k}) {{"]
        lines += [f"{I}            {p.name}[{e} + {k}] = {arrs[p.name]}[{c}][{k}];" for p in stored]
        lines += [f"{I}        }}", f"{I}    }}", f"{I}}}"]
    else:
        i = flat.index
        wide = flat.index_type in _WIDE
        e = i if wide else nm("e")
        etype = flat.index_type if wide else "long long"
        lines += _comment(I, f"coarsening: every thread takes {count} elements, block-strided (coalesced across "
                             f"the warp); all of its loads are issued before the math, and every load comes before "
                             f"any store.")
        lines += [
            f"{I}const long long {base} = (long long)blockIdx.x * blockDim.x * {count} + threadIdx.x;",
        ]
        lines += [f"{I}{p.elem} {arrs[p.name]}[{count}];" for p in flat.ptrs]

        def head():
            return _item_loop(I, c, count, etype, e, f"{base} + (long long){c} * blockDim.x", N,
                              None if wide else (flat.index_type, i))
        if loaded:
            lines += head()
            lines += [f"{I}    {arrs[p.name]}[{c}] = {p.name}[{i}];" for p in loaded]
            lines.append(f"{I}}}")
        lines += head()
        lines += _body_text(flat, {p.name: f"{arrs[p.name]}[{c}]" for p in flat.ptrs}, I + "    ")
        lines += [f"{I}    {p.name}[{i}] = {arrs[p.name]}[{c}];" for p in stored]
        lines.append(f"{I}}}")
    lines.append(outer + "}")
    return "\n".join(lines)


# ---------------------------------------------------------------- finding kernels, reading the tiled form back

def flat_kernels(k: Kernel) -> tuple[list[Flat], list[str]]:
    """Flat kernels of the source (each a __global__ function), and why the other kernels are not."""
    found, why = [], []
    for fn in syntax.functions(k.tree):
        if "__global__" not in syntax.function_qualifiers(fn) or not k.live(fn):
            continue
        got = _kernel_spec(k, fn)
        (found if isinstance(got, Flat) else why).append(got)
    return found, why


_TILED_BASE = re.compile(r"const long long (\w+) = \(long long\)blockIdx\.x \* blockDim\.x \* (\w+) \+ threadIdx\.x;")


def tiled_scalar(k: Kernel, fn: Node) -> tuple[Flat, str] | None:
    """(the flat description, the count's name) when kernel `fn` is exactly the tiled form with items
    of one element that `emit` writes for some flat kernel; None otherwise."""
    body = fn.child_by_field_name("body")
    stmts = [c for c in body.named_children if c.type != "comment"] if body is not None else []
    if len(stmts) < 3:
        return None
    m = _TILED_BASE.fullmatch(squash(k.tree.text_of(stmts[0])))
    if not m:
        return None
    base, count = m.group(1), m.group(2)
    loops = [s for s in stmts if s.type == "for_statement"]
    if not loops or stmts[-1] is not loops[-1]:
        return None
    compute = loops[-1].child_by_field_name("body")
    parts = [c for c in compute.named_children]
    # the array of each pointer, from `p[i] = p_v[c];` (stores) and `p_v[c] = p[i];` (loads)
    arr_of: dict[str, str] = {}
    pat = re.compile(r"(\w+)\[(\w+)\] = (\w+)\[(\w+)\];")
    for loop in loops:
        for c in loop.child_by_field_name("body").named_children:
            mm = pat.fullmatch(squash(k.tree.text_of(c)))
            if mm and loop is not loops[-1]:
                arr_of[mm.group(1)] = mm.group(3)
    params = {n for n, *_ in _params(fn)}
    stores = []
    for c in reversed(parts):
        mm = pat.fullmatch(squash(k.tree.text_of(c)))
        if not mm or mm.group(1) not in params:
            break
        arr_of[mm.group(3)] = mm.group(1)
        stores.append(c)
    if not stores:
        return None
    # the loop head: `const T e = base + ...; if (e >= N) break; [const T i = e;]`
    decl = parts[0]
    mm = re.fullmatch(r"const ([\w ]+?) (\w+) = " + re.escape(base) + r" \+ \(long long\)(\w+) \* blockDim\.x;",
                      squash(k.tree.text_of(decl)))
    if not mm:
        return None
    etype, e, cvar = mm.groups()
    guard = parts[1]
    mg = re.fullmatch(r"if \(" + re.escape(e) + r" >= (.+)\) break;", squash(k.tree.text_of(guard)))
    if not mg:
        return None
    bound = mg.group(1)
    idx = 2
    index, itype = e, etype
    mi = re.fullmatch(r"const ([\w ]+?) (\w+) = " + re.escape(e) + ";", squash(k.tree.text_of(parts[2]))) \
        if len(parts) > 2 else None
    if mi and mi.group(1) not in _WIDE and etype == "long long":
        itype, index = mi.groups()
        idx = 3
    first_body = parts[idx] if idx < len(parts) else None
    if first_body is None or first_body in stores:
        return None
    a = line_start(k.tree.data, first_body.start_byte)
    z = [p for p in parts if p not in stores][-1].end_byte
    text = k.tree.data[a:z].decode()
    for arr, p in arr_of.items():
        text = re.sub(r"\b" + re.escape(arr) + r"\[" + re.escape(cvar) + r"\]", f"{p}[{index}]", text)
    ind = k.tree.data[a:first_body.start_byte].decode()
    I = k.tree.data[line_start(k.tree.data, stmts[0].start_byte):stmts[0].start_byte].decode()
    lines = [ln[len(ind):] if ln.startswith(ind) else ln for ln in text.split("\n")]
    inner = "\n".join((I + ln) if ln.strip() else "" for ln in lines)
    head = k.tree.data[top_level(fn).start_byte:body.start_byte].decode()
    outer = k.tree.data[line_start(k.tree.data, top_level(fn).start_byte):top_level(fn).start_byte].decode()
    naive = (f"{head}{{\n{I}{itype} {index} = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
             f"{I}if ({index} >= {bound}) return;\n{inner}\n{outer}}}")
    at, end = top_level(fn).start_byte, top_level(fn).end_byte
    rebuilt = Kernel((k.tree.data[:at] + naive.encode() + k.tree.data[end:]).decode())
    rfn = next((f for f in syntax.functions(rebuilt.tree) if syntax.function_name(f) == syntax.function_name(fn)),
               None)
    if rfn is None:
        return None
    spec = _kernel_spec(rebuilt, rfn)
    if not isinstance(spec, Flat):
        return None
    if squash(emit(spec, False, count)) != squash(k.tree.text_of(body)):
        return None
    return spec, count


def count_name(k: Kernel, flat: Flat) -> str:
    """A name for the per-thread count: the prefix of the file's tuning constants (AXPBY_BLOCK ->
    AXPBY_ITEMS_PER_THREAD), else the kernel's name without _kernel / _naive."""
    tun = [m.group(1) for m in TUNABLE.finditer(k.source) if "_" in m.group(1)]
    if tun:
        prefix = tun[0].rsplit("_", 1)[0]
    else:
        words = [w for w in flat.kernel.upper().split("_") if w not in ("KERNEL", "NAIVE", "") ]
        prefix = "_".join(words) or "KL"
    name = f"{prefix}_{COUNT_SUFFIX}"
    while re.search(r"\b" + re.escape(name) + r"\b", k.source):
        name = "KL_" + name
    return name


def count_define(k: Kernel, flat: Flat, name: str, value: int) -> Edit:
    """Insert `#ifndef NAME / #define NAME value / #endif` after the last tuning constant before the
    kernel, or above the kernel."""
    text = (f"#ifndef {name}\n#define {name} {value}   // items per thread: elements, or 16-byte vectors "
            f"(coarsening; 1: off)\n#endif\n")
    kstart = top_level(flat.fn).start_byte
    last = None
    for m in TUNABLE.finditer(k.source):
        end = len(k.source[:m.end()].encode())
        if end <= kstart:
            last = end
    if last is not None:
        at = last + (1 if k.tree.data[last:last + 1] == b"\n" else 0)
        return Edit(at, at, text)
    at = insert_at(k, flat.fn)
    return Edit(at, at, text + "\n")


def not_flat(why: list[str]) -> NotApplicable:
    return NotApplicable("no one-element-per-thread kernel to rewrite: " + ("; ".join(why) or "no __global__ kernel"))


# ---------------------------------------------------------------- the two rewrites

def _replace_body(k: Kernel, fn: Node, text: str) -> Edit:
    body = fn.child_by_field_name("body")
    return Edit(body.start_byte, body.end_byte, text)


def vector_width(flat: Flat) -> str | None:
    """Why the flat kernel's pointers have no common 16-byte vector form, or None."""
    for p in flat.ptrs:
        if p.elem not in ELEMENTS:
            return f"{flat.kernel}: {p.name} points to {p.elem}: no 16-byte vector form for that type here"
    if len({ELEMENTS[p.elem][0] for p in flat.ptrs}) != 1:
        return (f"{flat.kernel}: the pointers accessed at [{flat.index}] have elements of different sizes "
                f"({', '.join(f'{p.name}: {p.elem}' for p in flat.ptrs)}): one vector width does not fit them all")
    return None


def vectorize(k: Kernel):
    """vector_access on a flat kernel, or on the coarsened (items of one element) tiled form."""
    flats, why = flat_kernels(k)
    for flat in flats:
        if vector_width(flat):
            why.append(vector_width(flat))
            continue
        launch = _launch(k, flat, [])
        if isinstance(launch, str):
            why.append(launch)
            continue
        name = count_name(k, flat)
        lanes = flat.lanes
        edits = [_replace_body(k, flat.fn, emit(flat, True, name)), count_define(k, flat, name, 1),
                 grid_edit(launch, launch.block, [str(lanes), name])]
        return _applied(k, flat.fn, edits, "vector_access",
                        {"form": "flat elementwise", "kernel": flat.kernel, "lanes": lanes,
                         "vector": ELEMENTS[flat.ptrs[0].elem][1], "pointers": [p.name for p in flat.ptrs],
                         "count": name, "count_value": 1})
    for fn in syntax.functions(k.tree):
        if "__global__" not in syntax.function_qualifiers(fn):
            continue
        got = tiled_scalar(k, fn)
        if got is None:
            continue
        spec, name = got
        if vector_width(spec):
            why.append(vector_width(spec))
            continue
        launch = _launch(k, spec, [name])
        if isinstance(launch, str):
            why.append(launch)
            continue
        edits = [_replace_body(k, fn, emit(spec, True, name)),
                 grid_edit(launch, launch.block, [str(spec.lanes), name])]
        return _applied(k, fn, edits, "vector_access",
                        {"form": "coarsened elementwise", "kernel": spec.kernel, "lanes": spec.lanes,
                         "vector": ELEMENTS[spec.ptrs[0].elem][1], "pointers": [p.name for p in spec.ptrs],
                         "count": name})
    return not_flat(why)


def coarsen(k: Kernel, value: int):
    """coarsening on a flat kernel (`value` elements per thread through a new per-thread count), or
    on a flat-index kernel whose body declares what it loads, then stores (`value` items)."""
    flats, why = flat_kernels(k)
    for flat in flats:
        launch = _launch(k, flat, [])
        if isinstance(launch, str):
            why.append(launch)
            continue
        name = count_name(k, flat)
        edits = [_replace_body(k, flat.fn, emit(flat, False, name)), count_define(k, flat, name, value),
                 grid_edit(launch, launch.block, [name])]
        return _applied(k, flat.fn, edits, "coarsening",
                        {"form": "flat elementwise", "kernel": flat.kernel, "name": name, "value": str(value),
                         "previous": "flat", "pointers": [p.name for p in flat.ptrs]}, locus=name)
    for fn in syntax.functions(k.tree):
        if "__global__" not in syntax.function_qualifiers(fn) or not k.live(fn):
            continue
        if any(f.fn == fn for f in flats):
            continue
        ph = _kernel_spec(k, fn, any_index=True)
        if isinstance(ph, str):
            if ph not in why:
                why.append(ph)
            continue
        launch = _launch(k, ph, [])
        if isinstance(launch, str):
            why.append(launch)
            continue
        name = count_name(k, ph)
        edits = [_replace_body(k, fn, emit_phased(ph, name)), count_define(k, ph, name, value),
                 grid_edit(launch, launch.block, [name])]
        return _applied(k, fn, edits, "coarsening",
                        {"form": "loads then stores", "kernel": ph.kernel, "name": name, "value": str(value),
                         "previous": "flat", "registers": [v for v, _ in ph.locals]}, locus=name)
    return not_flat(why)


def _applied(k: Kernel, fn: Node, edits: list[Edit], mechanism: str, config: dict, locus: str | None = None):
    from klineage.mechanisms.base import Applied
    new = k.tree.edit(edits)
    if locus is None:
        kname = syntax.function_name(fn)
        feats = [f for f in vector_features(Kernel(new)) if f.locus.startswith(f"{kname}:")]
        locus = feats[0].locus if feats else kname
    body = fn.child_by_field_name("body")
    nk = Kernel(new)
    nfn = next(f for f in syntax.functions(nk.tree) if syntax.function_name(f) == syntax.function_name(fn))
    return Applied(new, mechanism, locus, before=k.tree.text_of(body),
                   after=nk.tree.text_of(nfn.child_by_field_name("body")), config=config)
