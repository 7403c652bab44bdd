"""The tiled form of a one-element-per-thread kernel (klineage.mechanisms.elementwise): emitted
from its description (`Flat`, or `Phased` for a load-then-store body), and read back (`tiled_scalar`)
so a coarsened flat kernel can still be vectorized.
"""
from __future__ import annotations

import re

from klineage.mechanisms.base import Kernel, squash
from klineage.mechanisms.elementwise import ELEMENTS, Flat, Phased, Ptr, _kernel_spec, _params
from klineage.mechanisms.vector_forms import line_start, top_level
from klineage.parse import syntax
from klineage.parse.syntax import Edit, Node

# 2-byte lanes: bits -> value, value -> bits
_BITS = {"__nv_bfloat16": ("__ushort_as_bfloat16", "__bfloat16_as_ushort"),
         "nv_bfloat16": ("__ushort_as_bfloat16", "__bfloat16_as_ushort"),
         "__half": ("__ushort_as_half", "__half_as_ushort"), "half": ("__ushort_as_half", "__half_as_ushort")}
_WIDE = {"long long", "long long int", "int64_t", "ptrdiff_t", "long", "long int", "unsigned long long",
         "uint64_t", "size_t", "unsigned long", "long unsigned int"}


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


# ---------------------------------------------------------------- reading the tiled form back

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
