"""Reading a row kernel's scalar form off its source: the row index and guard, the passes, their
accumulators and accesses, the combines after them, the helpers and the launch."""
from __future__ import annotations

import re

from klineage.mechanisms.base import Kernel, squash
from klineage.mechanisms.elementwise import _CAST, _FLAT, _balanced, _norm
from klineage.mechanisms.shapes.rowwise.model import (_BANNED, _FLOATING, _HELPER, _KL_WORDS, _LINE_DECL, _MAX_FNS, _NA,
                                                      _WARP_ROW, Acc, Access, Launch, Online, Pass, Row, _elem, _ids,
                                                      _indent_at, _line_start, _strip, _team)
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


_ALIASES = {"threadIdx.x", "blockIdx.x", "blockDim.x"}
_LINE_RE = re.compile(r"kl_line<(?P<a>.+)\?kl_line:(?P<b>.+)-1")


def _row_index(k: Kernel, stmts: list) -> tuple[int, str, object, str]:
    """(position, name, initial value node, granularity) of the row index: the first top-level
    declaration of one variable from the flat thread index (a thread per row; names declared before
    it for threadIdx.x, blockIdx.x or blockDim.x read through), a block index (a block per row, or
    one thread per block), or one of this rewriter's (a warp per row, a line per lane)."""
    alias: dict[str, str] = {}
    for i, st in enumerate(stmts):
        if st.type != "declaration":
            continue
        ds = _top_decl(st)
        for name, _, ptr, val in ds:
            if val is not None and not ptr and _norm(k.tree.text_of(val)) in _ALIASES:
                alias[name] = _norm(k.tree.text_of(val))
        if len(ds) != 1 or ds[0][3] is None or ds[0][2]:
            continue
        text = k.tree.text_of(ds[0][3])
        for a, v in alias.items():
            if a != ds[0][0]:
                text = re.sub(rf"\b{re.escape(a)}\b", v, text)
        val = _norm(text)
        gran = ("thread" if val in _FLAT else "warp" if val == _norm(_WARP_ROW) else "block" if val == "blockIdx.x"
                else None)
        m = _LINE_RE.fullmatch(val)
        if gran is None and m and _norm(m["a"]) == _norm(m["b"]) and i > 0 and \
                squash(k.tree.text_of(stmts[i - 1])) == _LINE_DECL:
            gran = "line"
        if gran is not None and not (gran == "thread" and ds[0][0] in alias):
            return i, ds[0][0], ds[0][3], gran
    raise _NA(_no_row_index(k, stmts))


def _no_row_index(k: Kernel, stmts: list) -> str:
    """Why no statement is a row index this rewriter reads: the fact that blocked it."""
    for st in stmts:
        text = _norm(k.tree.text_of(st))
        if st.type == "for_statement" and re.search(r"\+=(?:blockDim\.x\*gridDim\.x|gridDim\.x\*blockDim\.x)", text):
            return (f"no row index: rows are walked by a grid-stride loop (line {st.start_point.row + 1}), which this "
                    "rewriter does not read (index each row by one thread: r = blockIdx.x * blockDim.x + threadIdx.x)")
    return ("no row index `r = blockIdx.x * blockDim.x + threadIdx.x` (one thread per row), nor one this "
            "rewriter wrote")


def _int_names(k: Kernel, params: list[tuple[str, str, bool]]) -> set[str]:
    """Integer parameters and object-like integer macros of the file: what a bound may be made of."""
    ints = {n for n, t, ptr in params if not ptr and re.search(r"\b(?:int|long|size_t|unsigned|int\d+_t|uint\d+_t)\b", t)}
    return ints | set(re.findall(r"#\s*define\s+(\w+)\s+\(?\d+\)?\s*(?://|$)", k.source, re.M))


def _bound_of(k: Kernel, cond, row: str) -> tuple[str, str] | None:
    """("exit" | "enter", bound text) of a bounds check on `row`: `row >= B` / `B <= row` / `!(row < B)`
    exit, `row < B` / `B > row` enter; None for any other condition."""
    cond = _strip(cond)
    neg = False
    while cond is not None and cond.type == "unary_expression" and k.tree.text_of(cond).lstrip().startswith("!"):
        neg = not neg
        cond = _strip(cond.child_by_field_name("argument"))
    if cond is None or cond.type != "binary_expression":
        return None
    op = cond.child_by_field_name("operator").type
    left, right = _strip(cond.child_by_field_name("left")), _strip(cond.child_by_field_name("right"))
    flip = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}
    if left.type == "identifier" and left.text.decode() == row:
        other = right
    elif right.type == "identifier" and right.text.decode() == row and op in flip:
        op, other = flip[op], left
    else:
        return None
    kind = {">=": "exit", "<": "enter"}.get(op)
    if kind is None:
        return None
    if neg:
        kind = "enter" if kind == "exit" else "exit"
    return kind, squash(k.tree.text_of(other))


def _expand(k: Kernel, expr: str, before: list) -> str:
    """`expr` with the names of locals declared before it (once, from a value) written as their values:
    `total` of `int total = batch * spatial;` becomes `batch * spatial`."""
    vals: dict[str, str] = {}
    for st in before:
        if st.type == "declaration":
            for name, _, ptr, val in _top_decl(st):
                vals[name] = None if (name in vals or ptr or val is None) else squash(k.tree.text_of(val))
    for _ in range(4):
        new = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: (v if re.fullmatch(r"[\w.]+", v) else f"({v})")
                     if (v := vals.get(m.group(0))) else m.group(0), expr)
        if new == expr:
            break
        expr = new
    while expr.startswith("(") and expr.endswith(")") and _balanced(expr[1:-1]):
        expr = expr[1:-1]
    return expr


def _guard_facts(k: Kernel, st, row: str, body_last: bool) -> tuple[str, str] | str:
    """("return" | "wrap", bound) of the bounds check `st` on `row`, or the reason it is none."""
    line = st.start_point.row + 1
    if st.type != "if_statement":
        return (f"the row index `{row}` is not checked against the row count before the row is walked (line "
                f"{line}: `if ({row} >= ROWS) return;` or `if ({row} < ROWS) {{ ... }}`)")
    cond = st.child_by_field_name("condition")
    cond = cond.child_by_field_name("value") or cond
    ctext = squash(k.tree.text_of(cond))
    if st.child_by_field_name("alternative") is not None:
        return f"the bounds check on `{row}` (line {line}) has an else branch"
    got = _bound_of(k, cond, row)
    if got is None:
        c = _strip(cond)
        if c is not None and c.type == "binary_expression" and c.child_by_field_name("operator").type in ("||", "&&"):
            return (f"the bounds check `{ctext}` (line {line}) tests more than the row index `{row}`: a grid of "
                    "outputs, not one row per thread")
        return (f"the row index `{row}` is not followed by a bounds check `{row} >= ROWS` or `{row} < ROWS` (line "
                f"{line} tests `{ctext}`)")
    kind, bound = got
    cons = st.child_by_field_name("consequence")
    if kind == "exit":
        if cons is None or squash(k.tree.text_of(cons)) not in ("return;", "{ return; }"):
            return f"the bounds check on `{row}` (line {line}) does more than return"
        return "return", bound
    if cons is None or cons.type != "compound_statement":
        return f"the bounds check `if ({ctext})` (line {line}) does not enclose a block"
    if not body_last:
        return f"statements follow the block of the bounds check `if ({ctext})` (line {line})"
    return "wrap", bound


def _read_kernel(k: Kernel, fn) -> Row:
    name = syntax.function_name(fn)
    body = fn.child_by_field_name("body")
    if body is None:
        raise _NA("no body")
    stmts = [s for s in body.named_children if s.type != "comment"]
    params = _params(fn)
    pnames = [p[0] for p in params]
    i, row, rinit, gran = _row_index(k, stmts)
    rdecl = stmts[i]
    for st in stmts[:i]:
        if st.type != "declaration":
            raise _NA(f"line {st.start_point.row + 1}: a statement before the row index `{row}`")
    if gran == "thread" and _KL_WORDS.search(_code(k.tree.text_of(fn))):
        raise _NA(f"the kernel already uses a name this rewriter writes ({_KL_WORDS.search(_code(k.tree.text_of(fn)))[0]})")
    # the bounds check: after declarations that follow the row index
    g = i + 1
    while g < len(stmts) and stmts[g].type == "declaration":
        g += 1
    if g >= len(stmts):
        raise _NA(f"the row index `{row}` is not followed by `if ({row} >= ROWS) return;` with ROWS a parameter")
    guard = stmts[g]
    facts = _guard_facts(k, guard, row, g == len(stmts) - 1)
    if isinstance(facts, str):
        raise _NA(facts)
    style, rows = facts
    rows = _expand(k, rows, stmts[:g])
    ints = _int_names(k, params)
    stray = sorted(set(re.findall(r"[A-Za-z_]\w*", _CAST.sub("", rows))) - ints)
    if stray:
        raise _NA(f"the row index `{row}` is bounded by `{rows}`, not by integer parameters ({', '.join(stray)} "
                  "is none)")
    if gran == "line":
        m = _LINE_RE.fullmatch(_norm(k.tree.text_of(rinit)))
        if _norm(m["a"]) != _norm(rows):
            raise _NA(f"the line index is clamped to `{m['a']}` but checked against `{rows}`")
    if style == "wrap":
        inner = guard.child_by_field_name("consequence")
        rest = [s for s in inner.named_children if s.type != "comment"]
        guard_end = next(c for c in inner.children if c.type == "{").end_byte
    else:
        rest = stmts[g + 1:]
        guard_end = guard.end_byte
    team = None
    launch = _read_launch(k, name, pnames, rows)
    if gran == "block" and not (rest and squash(k.tree.text_of(rest[0])) == squash(_team("block").split("//")[0])):
        if launch is None or launch.block_text.strip() != "1":
            raise _NA(f"the row index `{row}` is the block index, but the block's threads do not share the row (no "
                      "kl_t / kl_n declaration) and the launch does not give each block one thread")
        gran = "thread"  # one thread per block: a thread per row
    if gran != "thread":
        want = _team(gran, rows).split("//")[0]
        if not rest or squash(k.tree.text_of(rest[0])) != squash(want):
            raise _NA("a cooperative row index without the rewriter's kl_t / kl_n declaration after its check")
        team = _whole_lines(k, rest[0])
        rest = rest[1:]
    decls: dict[str, tuple[int, str]] = {}
    ptrs = {p[0]: _elem(p[1]) for p in params if p[2]}
    for st in stmts[:g] + rest:
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
            if isinstance(p, str):
                raise _NA(f"a loop (line {st.start_point.row + 1}) is not a pass over the row: {p}")
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
    host = _host_name(k, name)
    strided = [a for p in passes for a in p.accesses if a.stride]
    first = rest[0] if rest else stmts[0]
    return Row(source=k.source, kernel=name, gran=gran, row=row, rows=rows, cols=cols_name.group(1),
               row_init=(rinit.start_byte, rinit.end_byte), guard_end=guard_end, team=team, passes=passes,
               stores=stores, guarded=guarded, decls=decls, ptrs=ptrs, combine=combine, helpers=helpers,
               fn_start=_line_start(data, fn.start_byte), body_indent=_indent_at(data, first.start_byte),
               launch=launch, bounds=bounds, prefix=re.sub(r"\W", "_", host or name).upper(),
               row_decl=(rdecl.start_byte, rdecl.end_byte), layout="strided" if strided else "contiguous",
               stride=strided[0].stride if strided else "")


def _code(text: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)


def _whole_lines(k: Kernel, node) -> tuple[int, int]:
    data = k.tree.data
    s = _line_start(data, node.start_byte)
    e = data.find(b"\n", node.end_byte)
    return s, (len(data) if e < 0 else e + 1)


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


def _read_pass(k: Kernel, st, gran: str, decls: dict, ptrs: dict, pnames: list[str]) -> Pass | str:
    """The pass `st` is, or the fact that makes it none."""
    init, cond, upd, body = (st.child_by_field_name(f) for f in ("initializer", "condition", "update", "body"))
    if init is None or cond is None or upd is None or body is None or init.type != "declaration":
        return "its header is not `for (int c = 0; c < COLS; ++c)`"
    ds = _top_decl(init)
    if len(ds) != 1 or ds[0][3] is None or ds[0][2]:
        return "it declares more than its column"
    var, vtype, _, val = ds[0]
    want_upd = {f"++{var}", f"{var}++", f"{var}+=1", f"{var}={var}+1"} if gran == "thread" else {f"{var}+=kl_n"}
    start = _norm(k.tree.text_of(val))
    m = re.fullmatch(r"(\d+)" if gran == "thread" else r"kl_t(?:\+(\d+))?", start)
    if m is None:
        return f"its column starts at `{k.tree.text_of(val)}`, not at a constant"
    first = int(m.group(1) or 0)
    if first > 1024:
        return f"its column starts at {first}"
    if re.sub(r"\s", "", k.tree.text_of(upd)) not in want_upd:
        return f"its column steps by `{k.tree.text_of(upd)}`, not by one"
    if not re.fullmatch(rf"{re.escape(var)}\s*<\s*\w+", k.tree.text_of(cond).strip()):
        return f"its bound `{k.tree.text_of(cond)}` is not `{var} < COLS`"
    btext = _code(k.tree.text_of(body))
    if _BANNED.search(btext) or any(n.type in ("break_statement", "continue_statement", "return_statement",
                                               "goto_statement") for n in walk(body)):
        return "it breaks, continues, returns or synchronises"
    inner = next((n for n in walk(body) if n.type in ("for_statement", "while_statement", "do_statement")), None)
    if inner is not None:
        return f"it holds another loop (line {inner.start_point.row + 1}): a nest, not a pass over one row"
    accs, online = _read_accumulators(k, body, var, decls)
    if accs is None:
        return "a variable declared before it is written otherwise than reduced (a scan, or a carried value)"
    accesses = _read_accesses(k, body, var, ptrs)
    if isinstance(accesses, str):
        return accesses
    rparen = [c for c in st.children if c.type == ")"]
    return Pass(st.start_byte, st.end_byte, rparen[-1].end_byte, var, vtype, k.tree.text_of(cond).strip(),
                (val.start_byte, val.end_byte), (upd.start_byte, upd.end_byte), (body.start_byte, body.end_byte),
                accs, online, accesses, _indent_at(k.tree.data, st.start_byte), st.end_byte, first)


_ONLINE_RE = re.compile(
    r"\{ (?P<pre>(?:(?!const \w+ kl_x = )[^;{}]+; )*)const (?P<t>\w+) kl_x = (?P<x>.+?); "
    r"const (?P=t) kl_m = (?P<f>\w+)\((?P<m>\w+), kl_x\); "
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
        elif op == "=" and v not in _ids(right) and _conditional_extreme(k, n, v, typ) is not None:
            acc = _conditional_extreme(k, n, v, typ)
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


_DEFAULT_FN = {("max", "float"): "fmaxf", ("min", "float"): "fminf", ("max", "double"): "fmax",
               ("min", "double"): "fmin"}


def _conditional_extreme(k: Kernel, assign, v: str, typ: str) -> Acc | None:
    """The accumulator of `if (e > v) v = e;` (a max; `<` a min), the assignment `assign` its only
    statement: the kernel's own comparison, combined across threads by fmaxf / fminf (max / min for
    integers)."""
    st = assign.parent
    if st is None or st.type != "expression_statement":
        return None
    host = st.parent
    if host is not None and host.type == "compound_statement" and host.named_child_count == 1:
        host = host.parent
    if host is None or host.type != "if_statement" or host.child_by_field_name("alternative") is not None:
        return None
    cond = host.child_by_field_name("condition")
    cond = _strip(cond.child_by_field_name("value") or cond)
    if cond is None or cond.type != "binary_expression":
        return None
    op = cond.child_by_field_name("operator").type
    a, b = _strip(cond.child_by_field_name("left")), _strip(cond.child_by_field_name("right"))
    e = _norm(k.tree.text_of(assign.child_by_field_name("right")))
    if b.type == "identifier" and b.text.decode() == v and _norm(k.tree.text_of(a)) == e:
        kind = {">": "max", ">=": "max", "<": "min", "<=": "min"}.get(op)
    elif a.type == "identifier" and a.text.decode() == v and _norm(k.tree.text_of(b)) == e:
        kind = {"<": "max", "<=": "max", ">": "min", ">=": "min"}.get(op)
    else:
        return None
    if kind is None:
        return None
    return Acc(v, kind, typ, _DEFAULT_FN.get((kind, typ), kind))


def _read_accesses(k: Kernel, body, var: str, ptrs: dict) -> list[Access] | str:
    """Subscripts of pointers at the pass's column (`p[c]`, `p[b + c]`, `p[(b * C + c) * L + l]`, through
    local index variables); the reason when the body writes memory another column's iteration reads
    (any write not at such an index, an accumulator kept in memory)."""
    out = []
    local = _locals(k, body, var)
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
        lin = _linear(k, _strip(items[0]), var, local)
        p = n.parent
        while p is not None and p.type == "parenthesized_expression":
            p = p.parent
        kind = "load"
        if p is not None and p.type == "assignment_expression" and _strip(p.child_by_field_name("left")) == n:
            kind = "store" if p.child_by_field_name("operator").type == "=" else "update"
        if p is not None and p.type == "update_expression":
            return f"it increments `{squash(k.tree.text_of(n))}` in memory"
        if lin is None:
            if kind == "update" and not _depends(items[0], var, local):
                return (f"it accumulates into memory (`{squash(k.tree.text_of(p))}`): a reduction this rewriter "
                        "reads keeps its accumulator in a variable and stores it after the pass")
            if kind != "load":
                return f"it writes `{squash(k.tree.text_of(n))}`, off its column"
            continue
        out.append(Access(arg.text.decode(), lin[0], kind, n.start_byte, n.end_byte, lin[1]))
    # a pointer the pass writes is read at no other offset in it
    for a in out:
        if a.kind != "load" and any(b.ptr == a.ptr and (b.base, b.stride) != (a.base, a.stride) for b in out):
            return f"it writes `{a.ptr}` at its column and reads it at another offset"
    return out


def _locals(k: Kernel, body, var: str) -> dict:
    """Index variables the pass body declares once from its column and never assigns
    (`int idx = r * cols + c;`): name -> initial value node."""
    out, assigned = {}, set()
    for n in walk(body):
        if n.type == "init_declarator":
            d, v = n.child_by_field_name("declarator"), n.child_by_field_name("value")
            if d is not None and d.type == "identifier" and v is not None and v.type != "argument_list":
                name = d.text.decode()
                out[name] = None if name in out else v
        elif n.type in ("assignment_expression", "update_expression"):
            t = _strip(n.child_by_field_name("left") or n.child_by_field_name("argument"))
            if t is not None and t.type == "identifier":
                assigned.add(t.text.decode())
    return {n: v for n, v in out.items() if v is not None and n not in assigned and n != var}


def _depends(node, var: str, local: dict, depth: int = 0) -> bool:
    """Whether `node` reads the column `var`, directly or through a local index variable."""
    ids = _ids(node)
    return var in ids or depth > 8 or any(_depends(local[n], var, local, depth + 1) for n in ids & set(local))


def _linear(k: Kernel, idx, var: str, local: dict, depth: int = 0) -> tuple[str, str] | None:
    """(base, stride) of an index linear in the column `var`: base + var * stride, stride "" for 1
    (`r * cols + c`, `(b * C + c) * L + l`, `c * L + base`, a local index declared from one); None
    when it is not linear in the column with a step free of it."""
    idx = _strip(idx)
    if idx is None or depth > 8:
        return None
    if idx.type == "cast_expression":
        return _linear(k, idx.child_by_field_name("value"), var, local, depth + 1)
    if idx.type == "identifier":
        name = idx.text.decode()
        if name == var:
            return "", ""
        if name in local:
            return _linear(k, local[name], var, local, depth + 1)
        return None
    if idx.type != "binary_expression":
        return None
    op = idx.child_by_field_name("operator").type
    a, b = idx.child_by_field_name("left"), idx.child_by_field_name("right")
    free = lambda x: not _depends(x, var, local)
    if op == "+":
        for one, other in ((b, a), (a, b)):
            if free(other):
                got = _linear(k, one, var, local, depth + 1)
                if got is None:
                    return None
                base = k.tree.text_of(other) if not got[0] else (
                    f"{k.tree.text_of(other)} + {got[0]}" if one is b else f"{got[0]} + {k.tree.text_of(other)}")
                return base, got[1]
        return None
    if op == "*":
        for one, other in ((a, b), (b, a)):
            if free(other):
                got = _linear(k, one, var, local, depth + 1)
                if got is None:
                    return None
                f = k.tree.text_of(_strip(other))
                f = f if re.fullmatch(r"[\w.]+", f) else f"({f})"
                base = f"({got[0]}) * {f}" if got[0] else ""
                stride = f if not got[1] else f"{got[1]} * {f}"
                return base, ("" if stride == "1" else stride)
        return None
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
    """A pointer the passes write is read only where it is written (each column's own element), and
    no per-row statement touches it."""
    written = set().union(*[p.writes for p in passes])
    for p in passes:
        for a in p.accesses:
            if a.ptr in written and a.kind == "load":
                w = next(b for q in passes for b in q.accesses if b.ptr == a.ptr and b.kind != "load")
                if (w.base, w.stride) != (a.base, a.stride):
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


def _host_expr(expr: str, pnames: list[str], args: list) -> str:
    """The kernel-side expression `expr` of its parameters, written with the launch's arguments."""
    def sub(m):
        name = m.group(0)
        if name not in pnames:
            return name
        text = args[pnames.index(name)].strip()
        return text if re.fullmatch(r"[\w.]+", text) else f"({text})"
    return re.sub(r"\b[A-Za-z_]\w*\b", sub, expr)


def _first_dim(node):
    """The x extent of a launch dimension: the node itself, or the first argument of `dim3(x, ...)` /
    `dim3 v(x, ...)`; (node, the other extents' texts)."""
    node = _strip(node)
    args = None
    if node is not None and node.type in ("argument_list", "parameter_list"):
        args = node
    elif node is not None and node.type == "call_expression" and \
            node.child_by_field_name("function").text.decode() == "dim3":
        args = node.child_by_field_name("arguments")
    if args is None:
        return node, []
    items = [a for a in args.named_children if a.type != "comment"]
    return (items[0] if items else node), [a.text.decode().strip() for a in items[1:]]


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
        """The initializer of a local `T name = value;` (or `dim3 name(...)`) the launch argument names,
        once, before it."""
        node = _strip(node)
        if node is None or node.type != "identifier" or host is None:
            return None
        found = []
        for n in walk(host):
            if n.type == "init_declarator" and n.child_by_field_name("declarator").type == "identifier" \
                    and n.child_by_field_name("declarator").text.decode() == node.text.decode():
                found.append(n.child_by_field_name("value") or next(
                    (c for c in n.named_children if c.type == "argument_list"), None))
            elif n.type == "function_declarator" and n.parent is not None and n.parent.type == "declaration" \
                    and k.tree.text_of(n.child_by_field_name("declarator")) == node.text.decode():
                found.append(n.child_by_field_name("parameters"))  # `dim3 block(THREADS);` as C++ reads it
            elif n.type == "assignment_expression" and k.tree.text_of(_strip(n.child_by_field_name("left"))) == \
                    node.text.decode():
                return None
        return found[0] if len(found) == 1 and found[0] is not None and found[0].start_byte < call.start_byte \
            else None

    g, _ = _first_dim(local_init(conf[0]) or conf[0])
    b, more = _first_dim(local_init(conf[1]) or conf[1])
    if any(x != "1" for x in more):
        return None  # a block of more than one dimension
    btext = k.tree.text_of(b).strip()
    macro = btext if btext in tunables else None
    block_edit = None if macro else (b.start_byte, b.end_byte)
    return Launch((call.start_byte, call.end_byte), (g.start_byte, g.end_byte), btext, block_edit, macro,
                  _host_expr(rows, pnames, [k.tree.text_of(a) for a in args]))
