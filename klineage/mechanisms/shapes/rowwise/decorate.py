"""The decorations of a row kernel: vector accesses and the register cache, rendered onto its scalar
form and read back off a decorated kernel."""
from __future__ import annotations

import re
from dataclasses import dataclass

from klineage.mechanisms.base import Kernel, squash
from klineage.mechanisms.shapes.rowwise.model import (DEFAULT_ITEMS, ELEM_BYTES, VECTOR_BYTES, _NA, Access, Pass, Row,
                                                      _elem, _line_start)
from klineage.mechanisms.shapes.rowwise.read import _code, _kernels, _params, _read_helpers, _whole_lines
from klineage.parse import syntax
from klineage.parse.syntax import Edit, walk

# ---------------------------------------------------------------- decorations: vectors and the register cache

_VEC_TYPES = {("float", 16): "float4", ("float", 8): "float2", ("double", 16): "double2",
              ("int", 16): "int4", ("int", 8): "int2", ("unsigned int", 16): "uint4", ("unsigned int", 8): "uint2",
              ("unsigned", 16): "uint4", ("unsigned", 8): "uint2"}
_PACKED = {16: "uint4", 8: "uint2", 4: "unsigned int"}
_NV_RE = re.compile(r"const (?P<t>[\w ]+) kl_nv = \((?P<a>.*)\) \? (?P<cols>\w+) / (?P<vec>\d+) : 0;")
_CACHE_RE = re.compile(r"if \((?:kl_nv \* \d+ == \w+ && kl_nv|\w+) <= (?P<items>\w+) \* kl_n\) \{")
_ITEMS_LINE = "units of its row each thread keeps in registers (register_cache)"


@dataclass(frozen=True)
class Deco:
    """The decorations of a row kernel: the accesses vectorized (load / store) and the register
    cache's tuning constant (None: no cache)."""
    vector: frozenset = frozenset()
    items: str | None = None


def _vtype(elem: str, nbytes: int) -> str:
    if ELEM_BYTES.get(elem) == nbytes:
        return elem
    return _VEC_TYPES.get((elem, nbytes)) or _PACKED[nbytes]


@dataclass
class _VPlan:
    vec: int
    per_pass: dict            # pass index -> list of (Access, slot name)
    exprs: list               # distinct (ptr, base) pointer expressions to align
    vtype: str


def _vector_plan(row: Row, kinds: frozenset) -> _VPlan:
    """Which accesses of which passes go through vectors, and the element count of a unit."""
    chosen: dict[int, list[Access]] = {}
    for i, p in enumerate(row.passes):
        if p.first or p.updates:
            continue  # a pass from another column than 0, or one that updates in place: element by element
        body = _body_statements(row, p)
        both = p.reads & p.writes
        sel = []
        for a in p.accesses:
            if a.kind not in kinds or a.ptr in both or a.stride or ELEM_BYTES.get(row.ptrs.get(a.ptr, "")) is None:
                continue
            if a.kind == "store" and not any(s <= a.start and a.end <= e for s, e in body):
                continue  # a conditional store: every lane of a vector must be written
            if a.ptr in row.decls and row.decls[a.ptr][0] >= row.passes[0].start:
                continue  # a pointer set after the first pass: its alignment is not known before it
            sel.append(a)
        if sel:
            chosen[i] = sel
    if not chosen:
        raise _NA(f"no {' or '.join(sorted(kinds))} of the row at the passes' column to vectorize")
    widest = max(ELEM_BYTES[row.ptrs[a.ptr]] for sel in chosen.values() for a in sel)
    vec = VECTOR_BYTES // widest
    first = row.passes[0].start
    known = set(row.decls) | {row.row} | set(_params_of(row))
    exprs, per_pass = [], {}
    for i, sel in chosen.items():
        slots = []
        order = list(dict.fromkeys((b.ptr, b.base, b.kind) for b in sel))
        for a in sel:
            key = (a.ptr, a.base)
            ids = set(re.findall(r"[A-Za-z_]\w*", a.base))
            late = [n for n in ids if n in row.decls and row.decls[n][0] >= first]
            if late or not ids <= known | {"long", "int", "unsigned", "size_t"}:
                raise _NA(f"the offset `{a.base}` of `{a.ptr}` is not known before the first pass")
            if key not in exprs:
                exprs.append(key)
            slots.append((a, f"kl_{'ld' if a.kind == 'load' else 'st'}{order.index((a.ptr, a.base, a.kind))}"))
        per_pass[i] = slots
    ctype = _elem(_params_of(row).get(row.cols, "int")) or "int"
    return _VPlan(vec, per_pass, exprs, ctype)


def _params_of(row: Row) -> dict[str, str]:
    k = Kernel(row.source)
    fn = next(f for f in _kernels(k) if syntax.function_name(f) == row.kernel)
    return {n: t for n, t, _ in _params(fn)}


def _body_statements(row: Row, p: Pass) -> list[tuple[int, int]]:
    """Byte ranges of the expression statements that run unconditionally in the pass body."""
    k = Kernel(row.source)
    node = next(n for n in walk(k.tree.root) if n.start_byte == p.body[0] and n.end_byte == p.body[1])
    items = node.named_children if node.type == "compound_statement" else [node]
    return [(n.start_byte, n.end_byte) for n in items if n.type == "expression_statement"]


def _ptr_expr(ptr: str, base: str) -> str:
    return ptr if not base else f"{ptr} + {base}"


def _unit_addr(ptr: str, base: str, unit: str, vec: int) -> str:
    return f"{_ptr_expr(ptr, base)} + (long long){unit} * {vec}"


def _subst(row: Row, p: Pass, repl: dict[tuple[int, int], str]) -> str:
    """The pass body's text with the accesses at the given bytes replaced."""
    data = row.source.encode()
    s, e = p.body
    out, pos = [], s
    for (a, b), text in sorted(repl.items()):
        out += [data[pos:a].decode(), text]
        pos = b
    out.append(data[pos:e].decode())
    return "".join(out)


def _body_lines(row: Row, p: Pass, repl: dict) -> list[str]:
    """The pass body with accesses replaced, as lines indented relative to the pass."""
    lines = _subst(row, p, repl).split("\n")
    return [lines[0]] + [ln[len(p.indent):] if ln.startswith(p.indent) else ln for ln in lines[1:]]


def _lane_loop(row: Row, p: Pass, unit: str, vec: int, repl: dict, pre: list[str], post: list[str]) -> list[str]:
    """Lines of one unit's work, relative to the unit's scope: `pre`, the body once per element of
    the unit, `post`."""
    u = "    "
    body = _body_lines(row, p, repl)
    uses = bool(re.search(rf"\b{re.escape(p.var)}\b", _code("\n".join(body))))
    if vec > 1:
        col = [f"{u}const {p.vtype} {p.var} = {unit} * {vec} + kl_l;"] if uses else []
        return pre + [f"for (int kl_l = 0; kl_l < {vec}; ++kl_l) {{"] + col + [u + b for b in body] + ["}"] + post
    return pre + ([f"const {p.vtype} {p.var} = {unit};"] if uses else []) + body + post


def _v_parts(row: Row, p: Pass, slots: list, vec: int, unit: str, cached: dict | None = None,
             first_reads: set | None = None, item: str = "") -> tuple[list[str], dict, list[str]]:
    """(loads before the body, access replacements, stores after it) of one unit of pass `p`."""
    pre, post, repl, done = [], [], {}, set()
    elem_of = lambda a: row.ptrs[a.ptr]
    for a, slot in slots:
        nbytes = ELEM_BYTES[elem_of(a)] * vec
        vt = _vtype(elem_of(a), nbytes)
        key = (a.ptr, a.base)
        if cached is not None and key in cached and a.kind == "load":
            rc = cached[key]
            if key in (first_reads or set()) and key not in done:
                pre.append(f"{rc}[{item}] = *reinterpret_cast<const {vt}*>({_unit_addr(a.ptr, a.base, unit, vec)});")
                done.add(key)
            repl[(a.start, a.end)] = f"reinterpret_cast<const {elem_of(a)}*>(&{rc}[{item}])[kl_l]"
            continue
        if slot not in done:
            done.add(slot)
            if a.kind == "load":
                pre.append(f"const {vt} {slot} = *reinterpret_cast<const {vt}*>({_unit_addr(a.ptr, a.base, unit, vec)});")
            else:
                pre.append(f"{vt} {slot};")
                post.append(f"*reinterpret_cast<{vt}*>({_unit_addr(a.ptr, a.base, unit, vec)}) = {slot};")
        cast = "const " if a.kind == "load" else ""
        repl[(a.start, a.end)] = f"reinterpret_cast<{cast}{elem_of(a)}*>(&{slot})[kl_l]"
    return pre, repl, post


def _join(lines: list[str], ind: str) -> str:
    return "\n".join((ind + ln) if ln else ln for ln in "\n".join(lines).split("\n"))


def _v_pass(row: Row, p: Pass, plan: _VPlan, slots: list) -> str:
    """The vector form of pass `p`: whole lines from the pass's line start to its end."""
    data = row.source.encode()
    ind, u = p.indent, "    "
    pre, repl, post = _v_parts(row, p, slots, plan.vec, "kl_u")
    inner = _lane_loop(row, p, "kl_u", plan.vec, repl, pre, post)
    tail_head = (data[p.start:p.init[0]].decode() + f"kl_nv * {plan.vec} + kl_t" + data[p.init[1]:p.header_end].decode())
    lines = [f"for ({p.vtype} kl_u = kl_t; kl_u < kl_nv; kl_u += kl_n) {{"] + [u + x for x in inner] + ["}"]
    return _join(lines, ind) + "\n" + ind + tail_head + data[p.header_end:p.end].decode()


def _nv_line(row: Row, plan: _VPlan) -> str:
    conds = []
    for ptr, base in plan.exprs:
        nbytes = ELEM_BYTES[row.ptrs[ptr]] * plan.vec
        conds.append(f"reinterpret_cast<unsigned long long>({_ptr_expr(ptr, base)}) % {nbytes} == 0")
    return (f"const {plan.vtype} kl_nv = ({' && '.join(conds)}) ? {row.cols} / {plan.vec} : 0;"
            f"  // {plan.vec}-element units of the row (0: a misaligned row, element by element)")


def _cacheable(row: Row) -> list[tuple[str, str]]:
    """(pointer, offset) pairs two or more passes read at their column and nothing writes."""
    written = set().union(*[p.writes for p in row.passes])
    out = []
    for p in row.passes:
        for a in p.accesses:
            key = (a.ptr, a.base)
            if a.kind != "load" or a.ptr in written or key in out or ELEM_BYTES.get(row.ptrs.get(a.ptr, "")) is None:
                continue
            readers = [q for q in row.passes if any((b.ptr, b.base) == key and b.kind == "load" for b in q.accesses)]
            others = {(b.base, b.stride) for q in row.passes for b in q.accesses if b.ptr == a.ptr}
            if len(readers) >= 2 and others == {(a.base, "")} and not any(q.first for q in readers):
                out.append(key)
    return out


def render(row: Row, deco: Deco, items_value: int | None = None) -> str:
    """The scalar row kernel `row` with the decorations `deco`: vectors, then the register cache."""
    if not deco.vector and deco.items is None:
        return row.source
    if row.gran == "thread":
        raise _NA("one thread per row: share the row with a warp or a block first "
                  "(warp_per_row / block_per_row), then vectorize or cache it")
    data = row.source.encode()
    plan = _vector_plan(row, deco.vector) if deco.vector else None
    edits: list[Edit] = []
    region = None
    cached: dict = {}
    if deco.items is not None:
        keys = _cacheable(row)
        if not keys:
            raise _NA("no row that two passes read (and nothing writes) to keep in registers")
        cached = {k: f"kl_rc{i}" for i, k in enumerate(keys)}
        readers = [i for i, p in enumerate(row.passes) if any((a.ptr, a.base) in cached and a.kind == "load"
                                                                                             for a in p.accesses)]
        lo, hi = readers[0], readers[-1]
        region = (lo, hi)
        start = _line_start(data, row.passes[lo].start)
        end = row.passes[hi].combine_end
        end = data.find(b"\n", end) + 1 if data.find(b"\n", end) >= 0 else len(data)
        _check_region(row, start, end)
    # the passes outside the region, vectorized in place
    for i, p in enumerate(row.passes):
        if region is not None and region[0] <= i <= region[1]:
            continue
        if plan is not None and i in plan.per_pass:
            edits.append(Edit(_line_start(data, p.start), p.end, _v_pass(row, p, plan, plan.per_pass[i])))
    if region is not None:
        lo, hi = region
        ind = row.passes[lo].indent
        stream = _region_text(row, start, end, lambda i, p: _v_pass(row, p, plan, plan.per_pass[i])
                                                            if plan is not None and i in plan.per_pass else None)
        unit = plan.vec if plan is not None and "load" in deco.vector else 1
        cache_text = _region_text(row, start, end, lambda i, p: _cached_pass(row, p, i, plan, cached, unit))
        rc_decls = []
        for (ptr, base), rc in cached.items():
            t = _vtype(row.ptrs[ptr], ELEM_BYTES[row.ptrs[ptr]] * unit)
            rc_decls.append(f"{ind}    {t} {rc}[{deco.items}];")
        cond = (f"kl_nv * {unit} == {row.cols} && kl_nv <= {deco.items} * kl_n" if unit > 1
                else f"{row.cols} <= {deco.items} * kl_n")
        text = (f"{ind}if ({cond}) {{  // register_cache: the row fits its threads' registers, read once\n"
                + "\n".join(rc_decls) + "\n" + _indent_block(cache_text, "    ")
                + f"{ind}}} else {{\n" + _indent_block(stream, "    ") + f"{ind}}}\n")
        edits.append(Edit(start, end, text))
    if plan is not None:
        first = row.passes[0]
        at = _line_start(data, first.start)
        edits.append(Edit(at, at, first.indent + _nv_line(row, plan) + "\n"))
    out = syntax.apply_edits(row.source, edits)
    if deco.items is not None:
        out = _with_items_macro(out, row, deco.items, items_value)
    return out


def _check_region(row: Row, start: int, end: int) -> None:
    """The region the cache duplicates declares nothing the code after it uses."""
    data = row.source.encode()
    after = _code(data[end:].decode())
    for name, (pos, *_) in row.decls.items():
        if start <= pos < end and re.search(rf"\b{re.escape(name)}\b", after.split("\n}", 1)[0]):
            raise _NA(f"`{name}` is declared between the cached passes and used after them")


def _region_text(row: Row, start: int, end: int, pass_text) -> str:
    data = row.source.encode()
    out, pos = [], start
    for i, p in enumerate(row.passes):
        if not (start <= p.start < end):
            continue
        new = pass_text(i, p)
        if new is None:
            continue
        s = _line_start(data, p.start)
        out += [data[pos:s].decode(), new]
        pos = p.end
    out.append(data[pos:end].decode())
    return "".join(out)


def _indent_block(text: str, by: str) -> str:
    return "".join((by + ln) if ln.strip() else ln for ln in text.splitlines(keepends=True))


def _dedent_block(text: str, by: str) -> str | None:
    out = []
    for ln in text.splitlines(keepends=True):
        if ln.strip():
            if not ln.startswith(by):
                return None
            ln = ln[len(by):]
        out.append(ln)
    return "".join(out)


def _cached_pass(row: Row, p: Pass, i: int, plan: _VPlan | None, cached: dict, unit: str | int) -> str:
    ind, u = p.indent, "    "
    unit = int(unit)
    first = {key for key in cached
             if next(j for j, q in enumerate(row.passes) if any((a.ptr, a.base) == key and a.kind == "load"
                                                                                              for a in q.accesses)) == i}
    nu = "kl_nv" if unit > 1 else row.cols
    if unit > 1:
        slots = plan.per_pass.get(i, [])
        pre, repl, post = _v_parts(row, p, slots, unit, "kl_u", cached, first, "kl_i")
        inner = _lane_loop(row, p, "kl_u", unit, repl, pre, post)
    else:
        pre, repl = [], {}
        for a in p.accesses:
            key = (a.ptr, a.base)
            if key in cached and a.kind == "load":
                repl[(a.start, a.end)] = f"{cached[key]}[kl_i]"
                if key in first and not any(x.startswith(f"{cached[key]}[kl_i] =") for x in pre):
                    pre.append(f"{cached[key]}[kl_i] = {row.source.encode()[a.start:a.end].decode()};")
        inner = [f"const {p.vtype} {p.var} = kl_u;"] + pre + _body_lines(row, p, repl)
    lines = [f"for (int kl_i = 0; kl_i < {_items_name(row)}; ++kl_i) {{",
             f"{u}const {p.vtype} kl_u = kl_t + kl_i * kl_n;",
             f"{u}if (kl_u < {nu}) {{"] + [u * 2 + x for x in inner] + [f"{u}}}", "}"]
    return _join(lines, ind)


def _items_name(row: Row) -> str:
    return f"{row.prefix}_CACHE_ITEMS"


def _with_items_macro(src: str, row: Row, name: str, value: int | None) -> str:
    if re.search(rf"#ifndef {name}\b", src):
        return src
    block = (f"#ifndef {name}\n#define {name} {value or DEFAULT_ITEMS}  // {_ITEMS_LINE}\n#endif\n"
             f'static_assert({name} >= 1 && {name} <= 64, "{name} must be between 1 and 64");\n')
    at = _macro_anchor(src, row)
    return src[:at] + block + src[at:]


def _macro_anchor(src: str, row: Row) -> int:
    """Where the rewriter's tuning constants go: after the block size's static_assert, or before the
    combine functions / the kernel."""
    m = re.search(r"static_assert\([^\n]*\"[^\n]*threads per block[^\n]*\"\);\n", src)
    if m:
        return m.end()
    k = Kernel(src)
    fn = next(f for f in _kernels(k) if syntax.function_name(f) == row.kernel)
    starts = [s for s, _ in _read_helpers(k)[0]] + [_line_start(k.tree.data, fn.start_byte)]
    return len(k.tree.data[:min(starts)].decode())


def undecorate(source: str) -> tuple[str, Deco, int | None]:
    """(the scalar form, its decorations, the cache constant's value) of a row kernel this module
    decorated; the source itself with no decorations when it has none. Raises _NA when a decoration
    does not read back."""
    k = Kernel(source)
    data = k.tree.data
    deco_items, items_value = None, None
    edits = []
    # the register cache: its if / else, the else branch the passes as they were
    for n in walk(k.tree.root):
        if n.type != "if_statement":
            continue
        head = squash(data[n.start_byte:data.find(b"{", n.start_byte) + 1].decode())
        m = _CACHE_RE.fullmatch(head)
        if not m or n.child_by_field_name("alternative") is None:
            continue
        alt = n.child_by_field_name("alternative")
        blk = next((c for c in alt.named_children if c.type == "compound_statement"), alt)
        if blk.type != "compound_statement":
            raise _NA("a register cache whose else branch is not a block")
        inner_s = data.find(b"\n", blk.start_byte) + 1
        inner_e = _line_start(data, blk.end_byte)
        stream = _dedent_block(data[inner_s:inner_e].decode(), "    ")
        if stream is None:
            raise _NA("a register cache whose streaming branch is not indented as this rewriter writes it")
        s, e = _whole_lines(k, n)
        edits.append(Edit(s, e, stream))
        deco_items = m["items"]
    out = syntax.apply_edits(source, edits) if edits else source
    if deco_items is not None:
        mm = re.search(rf"#ifndef {deco_items}\n#define {deco_items} (\d+)[^\n]*\n#endif\nstatic_assert[^\n]*\n", out)
        if mm is None:
            raise _NA(f"the cache's constant {deco_items} is not defined as this rewriter writes it")
        items_value = int(mm.group(1))
        out = out[:mm.start()] + out[mm.end():]
    # the vectors: the kl_nv line, each vector loop and its tail
    k = Kernel(out)
    data = k.tree.data
    kinds, edits = set(), []
    for n in walk(k.tree.root):
        if n.type == "declaration" and _NV_RE.fullmatch(squash(k.tree.text_of(n).split("//")[0]).strip()):
            edits.append(Edit(*_whole_lines(k, n), ""))
        if n.type != "for_statement" or not squash(k.tree.text_of(n)).startswith("for (") or \
                not re.match(r"for \([\w ]+ kl_u = kl_t; kl_u < kl_nv; kl_u \+= kl_n\)", squash(k.tree.text_of(n))):
            continue
        tail = n.next_named_sibling
        vec = re.search(r"kl_l < (\d+);", k.tree.text_of(n))
        init = tail.child_by_field_name("initializer") if tail is not None and tail.type == "for_statement" else None
        val = init.named_children[-1].child_by_field_name("value") if init is not None and init.named_children else None
        if vec is None or val is None or squash(k.tree.text_of(val)) != f"kl_nv * {vec.group(1)} + kl_t":
            raise _NA("a vector loop without its element-by-element tail")
        text = k.tree.text_of(n)
        kinds |= {"load"} if "kl_ld" in text or "kl_rc" in text else set()
        kinds |= {"store"} if "kl_st" in text else set()
        edits += [Edit(_line_start(data, n.start_byte), _line_start(data, tail.start_byte), ""),
                  Edit(val.start_byte, val.end_byte, "kl_t")]
    out = syntax.apply_edits(out, edits) if edits else out
    return out, Deco(frozenset(kinds), deco_items), items_value
