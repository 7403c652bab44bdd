"""Reading a row kernel's scalar form off its source: the row index and guard, the passes, their
accumulators and accesses, the combines after them, the helpers and the launch."""
from __future__ import annotations

import re

from klineage.mechanisms.base import Kernel, squash
from klineage.mechanisms.elementwise import _FLAT, _norm
from klineage.mechanisms.shapes.rowwise.model import (_BANNED, _FLOATING, _HELPER, _KL_WORDS, _MAX_FNS, _NA, _TEAM,
                                                      _WARP_ROW, Acc, Access, Launch, Online, Pass, Row, _elem, _ids,
                                                      _indent_at, _line_start, _strip)
from klineage.parse import syntax
from klineage.parse.syntax import walk

# ---------------------------------------------------------------- reading the scalar form

def _params(fn) -> list[tuple[str, str, bool]]:
    """(name, type text, is pointer) of a function's parameters."""
    decl = fn.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    out = []
    if decl is None:
        return out
    for p in decl.child_by_field_name("parameters").named_children:
        if p.type != "parameter_declaration":
            continue
        d = p.child_by_field_name("declarator")
        ptr = False
        while d is not None and d.type in ("pointer_declarator", "reference_declarator"):
            ptr = ptr or d.type == "pointer_declarator"
            d = d.child_by_field_name("declarator") or (d.named_children[-1] if d.named_children else None)
        if d is None or d.type != "identifier":
            continue
        typ = p.child_by_field_name("type")
        quals = " ".join(c.text.decode() for c in p.children if c.type == "type_qualifier")
        out.append((d.text.decode(), f"{quals} {typ.text.decode() if typ else ''}".strip(), ptr))
    return out


def _top_decl(st) -> list[tuple[str, str, bool, object]]:
    """(name, type, pointer, value node) of each declarator of a top-level declaration."""
    typ = st.child_by_field_name("type")
    quals = " ".join(c.text.decode() for c in st.children if c.type == "type_qualifier")
    t = f"{quals} {typ.text.decode() if typ else ''}".strip()
    out = []
    for d in st.named_children:
        val = None
        if d.type == "init_declarator":
            val = d.child_by_field_name("value")
            d = d.child_by_field_name("declarator")
        ptr = False
        while d is not None and d.type == "pointer_declarator":
            ptr = True
            d = d.child_by_field_name("declarator")
        if d is not None and d.type == "identifier":
            out.append((d.text.decode(), t, ptr, val))
    return out


def _kernels(k: Kernel) -> list:
    return [f for f in syntax.functions(k.tree) if "__global__" in syntax.function_qualifiers(f)]


def read_row(source: str) -> Row:
    """The row kernel of `source` in its scalar form (no decorations); raises _NA with the reason."""
    k = Kernel(source)
    cands, why = [], []
    for fn in _kernels(k):
        try:
            cands.append(_read_kernel(k, fn))
        except _NA as e:
            why.append(f"{syntax.function_name(fn)}: {e}")
    if not cands:
        raise _NA("; ".join(why) or "no __global__ kernel in the file")
    if len(cands) > 1:
        raise _NA(f"{len(cands)} row kernels in one file ({', '.join(c.kernel for c in cands)}): the rewrite "
                  "needs one")
    return cands[0]


def _read_kernel(k: Kernel, fn) -> Row:
    name = syntax.function_name(fn)
    body = fn.child_by_field_name("body")
    if body is None:
        raise _NA("no body")
    stmts = [s for s in body.named_children if s.type != "comment"]
    params = _params(fn)
    pnames = [p[0] for p in params]
    # the row index and its bounds check
    ri = None
    for i, st in enumerate(stmts):
        if st.type != "declaration":
            continue
        ds = _top_decl(st)
        if len(ds) == 1 and ds[0][3] is not None and not ds[0][2]:
            val = _norm(k.tree.text_of(ds[0][3]))
            gran = ("thread" if val in _FLAT else "warp" if val == _norm(_WARP_ROW)
                    else "block" if val == "blockIdx.x" else None)
            if gran is not None:
                ri = (i, st, ds[0][0], ds[0][3], gran)
                break
    if ri is None:
        raise _NA("no row index `r = blockIdx.x * blockDim.x + threadIdx.x` (one thread per row), nor one this "
                  "rewriter wrote")
    i, rdecl, row, rinit, gran = ri
    if gran == "thread" and _KL_WORDS.search(_code(k.tree.text_of(fn))):
        raise _NA(f"the kernel already uses a name this rewriter writes ({_KL_WORDS.search(_code(k.tree.text_of(fn)))[0]})")
    guard = stmts[i + 1] if i + 1 < len(stmts) else None
    rows = _guard(k, guard, row)
    if rows is None or rows not in pnames:
        raise _NA(f"the row index `{row}` is not followed by `if ({row} >= ROWS) return;` with ROWS a parameter")
    rest = stmts[i + 2:]
    team = None
    if gran != "thread":
        if not rest or squash(k.tree.text_of(rest[0])) != squash(_TEAM[gran].split("//")[0]):
            raise _NA("a cooperative row index without the rewriter's kl_t / kl_n declaration after its check")
        team = _whole_lines(k, rest[0])
        rest = rest[1:]
    decls: dict[str, tuple[int, str]] = {}
    ptrs = {p[0]: _elem(p[1]) for p in params if p[2]}
    for st in stmts[:i + 2] + rest:
        if st.type == "declaration":
            for dn, dt, dp, dv in _top_decl(st):
                decls[dn] = (st.start_byte, dt, k.tree.text_of(dv) if dv is not None else None)
                if dp:
                    ptrs[dn] = _elem(dt)
    passes, stores, guarded = [], [], []
    cols = None
    j = 0
    while j < len(rest):
        st = rest[j]
        j += 1
        if st.type == "for_statement":
            p = _read_pass(k, st, gran, decls, ptrs, pnames)
            if p is None:
                raise _NA(f"a loop (line {st.start_point.row + 1}) is not a pass over the row "
                                                        "(for c from 0 to COLS by 1, or the rewriter's strided form)")
            if cols is not None and p.cond != cols:
                raise _NA(f"passes bounded by different extents ({cols}, {p.cond})")
            cols = p.cond
            if gran != "thread":
                j = _read_combine(k, p, rest, j)
            passes.append(p)
            continue
        text = k.tree.text_of(st)
        if _BANNED.search(_code(text)) and not _HELPER.search(text):
            raise _NA(f"line {st.start_point.row + 1} synchronises or exchanges between threads: a row kernel "
                      "this rewriter reads has none outside its own combines")
        if _HELPER.search(text):
            raise _NA(f"a combine (line {st.start_point.row + 1}) that does not follow its pass")
        if st.type == "declaration":
            continue
        if st.type == "if_statement" and gran != "thread" and _is_lane0(k, st):
            guarded.append(_whole_lines(k, st))
            continue
        if any(n.type in ("for_statement", "while_statement", "do_statement") for n in walk(st)):
            raise _NA(f"a loop (line {st.start_point.row + 1}) that is not a top-level pass")
        if _writes_memory(k, st):
            stores.append((st.start_byte, st.end_byte))
        elif st.type == "return_statement" or any(n.type in ("return_statement", "break_statement")
                                                                               for n in walk(st)):
            raise _NA(f"a return (line {st.start_point.row + 1}) after the bounds check")
    if not passes:
        raise _NA("no pass over the row")
    if not any(p.accs or p.online for p in passes):
        raise _NA("no pass reduces the row (an elementwise kernel, not a row reduction)")
    cols_name = re.fullmatch(rf"{re.escape(passes[0].var)}\s*<\s*(\w+)", passes[0].cond)
    if cols_name is None:
        raise _NA(f"the passes' bound `{passes[0].cond}` is not `c < COLS`")
    _check_memory(passes, stores, k)
    _check_accumulators(k, passes, rest, decls)
    helpers, combine = _read_helpers(k)
    data = k.tree.data
    bounds = None
    for c in fn.children:
        m = re.search(r"__launch_bounds__\(\s*(\d+)\s*[,)]", k.tree.text_of(c))
        if m:
            bounds = int(m.group(1))
    launch = _read_launch(k, name, pnames, rows)
    host = _host_name(k, name)
    return Row(source=k.source, kernel=name, gran=gran, row=row, rows=rows, cols=cols_name.group(1),
               row_init=(rinit.start_byte, rinit.end_byte), guard_end=guard.end_byte, team=team, passes=passes,
               stores=stores, guarded=guarded, decls=decls, ptrs=ptrs, combine=combine, helpers=helpers,
               fn_start=_line_start(data, fn.start_byte), body_indent=_indent_at(data, stmts[0].start_byte),
               launch=launch, bounds=bounds, prefix=re.sub(r"\W", "_", host or name).upper())


def _code(text: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)


def _whole_lines(k: Kernel, node) -> tuple[int, int]:
    data = k.tree.data
    s = _line_start(data, node.start_byte)
    e = data.find(b"\n", node.end_byte)
    return s, (len(data) if e < 0 else e + 1)


def _guard(k: Kernel, st, row: str) -> str | None:
    if st is None or st.type != "if_statement" or st.child_by_field_name("alternative") is not None:
        return None
    cons = st.child_by_field_name("consequence")
    if cons is None or squash(k.tree.text_of(cons)) not in ("return;", "{ return; }"):
        return None
    c = squash(k.tree.text_of(st.child_by_field_name("condition"))).strip("() ")
    m = re.fullmatch(rf"{re.escape(row)} >= (\w+)|(\w+) <= {re.escape(row)}", c)
    return (m.group(1) or m.group(2)) if m else None


def _is_lane0(k: Kernel, st) -> bool:
    c = squash(k.tree.text_of(st.child_by_field_name("condition"))).strip("() ")
    return c == "kl_t == 0" and st.child_by_field_name("alternative") is None


def _writes_memory(k: Kernel, st) -> bool:
    for n in walk(st):
        if n.type == "assignment_expression" or (n.type == "update_expression"):
            left = _strip(n.child_by_field_name("left") or n.child_by_field_name("argument"))
            if left is not None and left.type in ("subscript_expression", "pointer_expression", "field_expression"):
                if left.type != "field_expression" or "->" in k.tree.text_of(left):
                    return True
        if n.type == "call_expression" and re.match(r"atomic|__st", k.tree.text_of(n.child_by_field_name("function"))):
            return True
    return False


def _read_pass(k: Kernel, st, gran: str, decls: dict, ptrs: dict, pnames: list[str]) -> Pass | None:
    init, cond, upd, body = (st.child_by_field_name(f) for f in ("initializer", "condition", "update", "body"))
    if init is None or cond is None or upd is None or body is None or init.type != "declaration":
        return None
    ds = _top_decl(init)
    if len(ds) != 1 or ds[0][3] is None or ds[0][2]:
        return None
    var, vtype, _, val = ds[0]
    want_init, want_upd = ("0", {f"++{var}", f"{var}++", f"{var}+=1", f"{var}={var}+1"}) if gran == "thread" \
        else ("kl_t", {f"{var}+=kl_n"})
    if _norm(k.tree.text_of(val)) != want_init or re.sub(r"\s", "", k.tree.text_of(upd)) not in want_upd:
        return None
    if not re.fullmatch(rf"{re.escape(var)}\s*<\s*\w+", k.tree.text_of(cond).strip()):
        return None
    btext = _code(k.tree.text_of(body))
    if _BANNED.search(btext) or any(n.type in ("break_statement", "return_statement", "goto_statement")
                                                                  for n in walk(body)):
        return None
    accs, online = _read_accumulators(k, body, var, decls)
    if accs is None:
        return None
    accesses = _read_accesses(k, body, var, ptrs)
    if accesses is None:
        return None
    rparen = [c for c in st.children if c.type == ")"]
    return Pass(st.start_byte, st.end_byte, rparen[-1].end_byte, var, vtype, k.tree.text_of(cond).strip(),
                (val.start_byte, val.end_byte), (upd.start_byte, upd.end_byte), (body.start_byte, body.end_byte),
                accs, online, accesses, _indent_at(k.tree.data, st.start_byte), st.end_byte)


_ONLINE_RE = re.compile(
    r"\{ const (?P<t>\w+) kl_x = (?P<x>.+?); const (?P=t) kl_m = (?P<f>\w+)\((?P<m>\w+), kl_x\); "
    r"(?P<s>\w+) = (?P=s) \* \((?P=m) == kl_m \? 1\.0f? : (?P<e>\w+)\((?P=m) - kl_m\)\) \+ "
    r"\(kl_m == -INFINITY \? 0\.0f? : (?P=e)\((?P<y>.+) - kl_m\)\); (?P=m) = kl_m; \}")


def _read_accumulators(k: Kernel, body, var: str, decls: dict) -> tuple[list[Acc] | None, Online | None]:
    """The pass's reduction accumulators (variables declared before it and only reduced in it), or
    (None, None) when it writes such a variable otherwise."""
    om = _ONLINE_RE.fullmatch(squash(k.tree.text_of(body)))
    if om is not None:
        on = Online(om["m"], om["s"], om["t"], om["f"], om["e"], om["x"], "" if om["y"] == "kl_x" else om["y"])
        return [], on
    accs: dict[str, Acc] = {}
    assigned = set()
    for n in walk(body):
        if n.type == "update_expression":
            a = _strip(n.child_by_field_name("argument"))
            if a is not None and a.type == "identifier" and a.text.decode() in decls:
                return None, None
        if n.type != "assignment_expression":
            continue
        left = _strip(n.child_by_field_name("left"))
        if left is None or left.type != "identifier":
            continue
        v = left.text.decode()
        if v == var:
            return None, None
        if v not in decls:
            continue  # declared inside the body
        assigned.add(v)
        op = n.child_by_field_name("operator").type
        right = n.child_by_field_name("right")
        typ = _elem(decls[v][1])
        if typ not in _FLOATING and typ not in ("int", "long long", "unsigned int", "unsigned"):
            return None, None
        acc = None
        if op == "+=" and v not in _ids(right):
            acc = Acc(v, "sum", typ)
        elif op == "=":
            r = _strip(right)
            if r.type == "binary_expression" and r.child_by_field_name("operator").type == "+":
                a, b = _strip(r.child_by_field_name("left")), _strip(r.child_by_field_name("right"))
                if a.type == "identifier" and a.text.decode() == v and v not in _ids(b):
                    acc = Acc(v, "sum", typ)
                elif b.type == "identifier" and b.text.decode() == v and v not in _ids(a):
                    acc = Acc(v, "sum", typ)
            elif r.type == "call_expression":
                f = k.tree.text_of(r.child_by_field_name("function"))
                args = [x for x in r.child_by_field_name("arguments").named_children if x.type != "comment"]
                if f in _MAX_FNS and len(args) == 2:
                    a, b = _strip(args[0]), _strip(args[1])
                    if a.type == "identifier" and a.text.decode() == v and v not in _ids(b):
                                                      acc = Acc(v, _MAX_FNS[f], typ, f)
                    elif b.type == "identifier" and b.text.decode() == v and v not in _ids(a):
                                                      acc = Acc(v, _MAX_FNS[f], typ, f)
        if acc is None or (v in accs and (accs[v].op, accs[v].fn) != (acc.op, acc.fn)):
            return None, None
        accs[v] = acc
    # an accumulator is read nowhere in the body but in its own updates
    for v in accs:
        uses = [n for n in walk(body) if n.type == "identifier" and n.text.decode() == v]
        updates = [n for n in walk(body) if n.type == "assignment_expression"
                   and _strip(n.child_by_field_name("left")).type == "identifier"
                   and _strip(n.child_by_field_name("left")).text.decode() == v]
        if len(uses) != sum(1 if u.child_by_field_name("operator").type == "+=" else 2 for u in updates):
            return None, None
    return list(accs.values()), None


def _read_accesses(k: Kernel, body, var: str, ptrs: dict) -> list[Access] | None:
    """Subscripts of pointers at the pass's column (`p[c]`, `p[b + c]`, `p[c + b]`); None when the
    body writes memory another column's iteration reads (any write not at such an index)."""
    out = []
    for n in walk(body):
        if n.type != "subscript_expression":
            continue
        arg = _strip(n.child_by_field_name("argument"))
        idx = n.child_by_field_name("indices")
        if arg is None or arg.type != "identifier" or arg.text.decode() not in ptrs or idx is None:
            continue
        items = [x for x in idx.named_children if x.type != "comment"]
        if len(items) != 1:
            continue
        base = _column_base(k, _strip(items[0]), var)
        p = n.parent
        while p is not None and p.type == "parenthesized_expression":
            p = p.parent
        kind = "load"
        if p is not None and p.type == "assignment_expression" and _strip(p.child_by_field_name("left")) == n:
            kind = "store" if p.child_by_field_name("operator").type == "=" else "update"
        if p is not None and p.type == "update_expression":
            kind = "update"
        if base is None:
            if kind != "load":
                return None  # a write off the column
            continue
        if kind == "update":
            return None
        out.append(Access(arg.text.decode(), base, kind, n.start_byte, n.end_byte))
    # a pointer the pass writes is read at no other offset in it
    for a in out:
        if a.kind == "store" and any(b.ptr == a.ptr and b.base != a.base for b in out):
            return None
    return out


def _column_base(k: Kernel, idx, var: str) -> str | None:
    if idx is None:
        return None
    if idx.type == "identifier" and idx.text.decode() == var:
        return ""
    if idx.type == "binary_expression" and idx.child_by_field_name("operator").type == "+":
        a, b = idx.child_by_field_name("left"), idx.child_by_field_name("right")
        sa, sb = _strip(a), _strip(b)
        if sb.type == "identifier" and sb.text.decode() == var and var not in _ids(a):
            return k.tree.text_of(a)
        if sa.type == "identifier" and sa.text.decode() == var and var not in _ids(b):
            return k.tree.text_of(b)
    return None


def _read_combine(k: Kernel, p: Pass, rest: list, j: int) -> int:
    """In a cooperative kernel: check the statements after pass `p` are its combines; the index past them."""
    want = _combine_lines(p)
    got = []
    while len(got) < len(want) and j < len(rest):
        got.append(squash(k.tree.text_of(rest[j])))
        j += 1
    if got != [squash(w) for w in want]:
        line = k.tree.data[:p.start].count(b"\n") + 1
        raise _NA(f"the pass at line {line} is not followed by the combines "
                  "this rewriter writes")
    if want:
        p.combine_end = _whole_lines(k, rest[j - 1])[1] - 1
    return j


def _combine_lines(p: Pass) -> list[str]:
    if p.online is not None:
        o = p.online
        return [f"const {o.ctype} kl_mx = kl_row_max({o.m});",
                f"{o.s} = {o.m} == kl_mx ? {o.s} : {o.s} * {o.exp}({o.m} - kl_mx);",
                f"{o.s} = kl_row_sum({o.s});", f"{o.m} = kl_mx;"]
    return [f"{a.name} = kl_row_{a.op}({a.name});" for a in p.accs]


_ZERO = re.compile(r"\(?\s*(?:\w+\s*\()?\s*0(?:\.0*)?[fFuUlL]*\s*\)?\s*\)?")


def _check_accumulators(k: Kernel, passes: list[Pass], rest: list, decls: dict) -> None:
    """Each accumulator is reduced by one pass, from its declaration, and a sum starts at zero: the
    row's threads each start from the declared value, so only an identity (0 for a sum; any row
    value for a max or min, which may be counted more than once) gives the one-thread result."""
    seen: dict[str, int] = {}
    for p in passes:
        accs = [(a.name, a.op) for a in p.accs] + ([(p.online.m, "max"), (p.online.s, "sum")] if p.online else [])
        for name, op in accs:
            if name in seen:
                raise _NA(f"`{name}` is reduced by two passes: the second would add to the row's combined value")
            seen[name] = p.start
            pos, _, init = decls[name]
            if op == "sum" and (init is None or not _ZERO.fullmatch(init.strip())):
                raise _NA(f"the sum `{name}` starts from {init!r}, not 0: every thread sharing the row would add it")
            for st in rest:
                if pos < st.start_byte < p.start and st.type != "for_statement":
                    if re.search(rf"\b{re.escape(name)}\s*(?:[-+*/%&|^]?=(?!=)|\+\+|--)", _code(k.tree.text_of(st))):
                                                      raise _NA(f"`{name}` is written between its declaration and its pass")


def _check_memory(passes: list[Pass], stores: list, k: Kernel) -> None:
    written = set().union(*[p.writes for p in passes])
    for p in passes:
        for a in p.accesses:
            if a.ptr in written and a.kind == "load":
                w = next(b for q in passes for b in q.accesses if b.ptr == a.ptr and b.kind == "store")
                if w.base != a.base:
                    raise _NA(f"`{a.ptr}` is written and read at different offsets")
    for s, e in stores:
        text = k.tree.data[s:e].decode()
        for w in written:
            if re.search(rf"\b{re.escape(w)}\s*\[", text):
                raise _NA(f"a per-row statement reads or writes `{w}`, which a pass writes")


def _read_helpers(k: Kernel) -> tuple[list[tuple[int, int]], str | None]:
    spans, kinds = [], set()
    for f in syntax.functions(k.tree):
        if _HELPER.fullmatch(syntax.function_name(f) or ""):
            spans.append(_whole_lines(k, f))
            kinds.add("shuffle" if "__shfl_xor_sync" in k.tree.text_of(f) else "tree")
    if len(kinds) > 1:
        raise _NA("combine functions of two kinds (trees and shuffles)")
    return spans, (kinds.pop() if kinds else None)


def _host_name(k: Kernel, kernel: str) -> str | None:
    for f in syntax.functions(k.tree):
        if "__global__" in syntax.function_qualifiers(f) or "__device__" in syntax.function_qualifiers(f):
            continue
        if re.search(rf"\b{re.escape(kernel)}\s*(?:<[^<>]*>)?\s*<<<", k.tree.text_of(f)):
            return syntax.function_name(f)
    return None


def _read_launch(k: Kernel, kernel: str, pnames: list[str], rows: str) -> Launch | None:
    calls = [n for n in walk(k.tree.root) if n.type == "call_expression"
             and any(c.type == "kernel_call_syntax" for c in n.children)
             and k.tree.text_of(n.child_by_field_name("function")) == kernel]
    if len(calls) != 1:
        return None
    call = calls[0]
    cfg = next(c for c in call.children if c.type == "kernel_call_syntax")
    conf = [c for c in cfg.named_children if c.type != "comment"]
    args = [a for a in call.child_by_field_name("arguments").named_children if a.type != "comment"]
    if len(conf) < 2 or len(args) != len(pnames):
        return None
    host = syntax.enclosing_function(call)
    tunables = set(re.findall(r"#ifndef (\w+)\s*\n\s*#define \1 \d+", k.source))

    def local_init(node):
        """The initializer of a local `T name = value;` the launch argument names, once, before it."""
        node = _strip(node)
        if node is None or node.type != "identifier" or host is None:
            return None
        found = []
        for n in walk(host):
            if n.type == "init_declarator" and n.child_by_field_name("declarator").type == "identifier" \
                    and n.child_by_field_name("declarator").text.decode() == node.text.decode():
                found.append(n.child_by_field_name("value"))
            elif n.type == "assignment_expression" and k.tree.text_of(_strip(n.child_by_field_name("left"))) == \
                    node.text.decode():
                return None
        return found[0] if len(found) == 1 and found[0].start_byte < call.start_byte else None

    g = local_init(conf[0]) or conf[0]
    b = local_init(conf[1])
    btext = k.tree.text_of(b if b is not None else conf[1]).strip()
    macro = btext if btext in tunables else None
    block_edit = None if macro else ((b.start_byte, b.end_byte) if b is not None else (conf[1].start_byte,
                                                                                                                     conf[1].end_byte))
    return Launch((call.start_byte, call.end_byte), (g.start_byte, g.end_byte), k.tree.text_of(conf[1]),
                  block_edit, macro, k.tree.text_of(args[pnames.index(rows)]).strip())
