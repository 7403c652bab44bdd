"""Row-wise reductions and normalisations: one output row from one input row (sum, max, softmax,
RMSNorm, LayerNorm, a fused residual add + norm, cross entropy), and the structural rewrites that
make them fast.

The start is the plainest such kernel, one thread per row walking its row serially in passes:

    __global__ void k(const T* x, ..., int rows, int cols, ...) {
        int r = blockIdx.x * blockDim.x + threadIdx.x;
        if (r >= rows) return;
        ... per-row declarations ...
        float acc = 0.0f;
        for (int c = 0; c < cols; ++c) acc += f(x[r * cols + c]);      // a pass: reduces the row
        ... per-row scalar code ...
        for (int c = 0; c < cols; ++c) out[r * cols + c] = g(x[..c], acc);   // a pass: writes the row
        out2[r] = ...;                                                 // a per-row store
    }
    ... k<<<grid, block, 0, stream>>>(...);   // grid = rows / block, rounded up

A pass is a top-level `for` over the row's columns from 0 to `cols` by 1 whose body writes no
variable declared outside it except reduction accumulators (`a += e`, `a = a + e`, `a = fmaxf(a, e)`,
fminf, max, min), reads no element another element's iteration writes, and neither breaks nor returns.

Each rewrite adds one mechanism and keeps everything else; they compose in any order the card
library (or a random control) asks for, except where a reason says why not:

  warp_per_row     the row shared by a warp: `r` becomes the warp's index, each pass walks the row
                   from the lane with stride 32 (coalesced), each accumulator is combined across the
                   warp after its pass (a shared-memory tree), per-row stores go to lane 0; the host
                   launches a warp per row (the block size a tuning constant, from the card);
  block_per_row    the same with a whole block per row (stride blockDim.x, a block-wide tree, one
                   block per row, a power-of-two block size from the card);
  warp_reduction   the combines through warp shuffles (a butterfly of __shfl_xor_sync; a block adds
                   its warps' partials through shared memory) instead of shared-memory trees;
  online_softmax   a max pass followed by a pass summing exp(y - max) becomes one pass with a running
                   max and a rescaled running sum (combined as max, rescale, sum across the row's
                   threads);
  vector_access    every pass reads (anchor "global load") or writes (anchor "global store") its
                   row through 16-byte vectors of VEC elements, the lanes' bodies applied per element,
                   with the row's tail and rows whose bases are not 16-byte aligned element by element;
  register_cache   passes that read the same row: when the row fits ITEMS units per thread (a tuning
                   constant, from the card), the first pass keeps what it reads in registers and the
                   later ones read those, so the row is read from memory once; longer rows take the
                   passes as they were.

The combines are device functions (`kl_row_sum`, `kl_row_max`, `kl_row_min`) written before the
kernel, so moving between warp and block, or between trees and shuffles, rewrites only them, the
row index and the launch. vector_access and register_cache are decorations read back to the passes
they decorate (the element-by-element loop each keeps verbatim) before any other rewrite, and
rewritten after it; a decorated kernel that does not read back exactly (edited by hand) is left
alone. Anything this module does not understand gives NotApplicable with the reason, never a kernel.
Correctness is the gate's business; semantics are those of the thread-per-row kernel for each row.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from klineage.mechanisms.base import Applied, Kernel, NotApplicable, squash
from klineage.mechanisms.elementwise import _FLAT, _balanced, _norm
from klineage.mechanisms.shapes.base import Shape, ShapeRewriter, register
from klineage.parse import syntax
from klineage.parse.syntax import Edit, walk

WARP = "warp_per_row"
BLOCK = "block_per_row"
SHUFFLE = "warp_reduction"
ONLINE = "online_softmax"
VECTOR = "vector_access"
CACHE = "register_cache"
MECHANISMS = (WARP, BLOCK, SHUFFLE, ONLINE, VECTOR, CACHE)

DEFAULT_THREADS = {WARP: 256, BLOCK: 256}
DEFAULT_ITEMS = 4
VECTOR_BYTES = 16
ELEM_BYTES = {"float": 4, "int": 4, "unsigned int": 4, "unsigned": 4, "double": 8, "__nv_bfloat16": 2,
              "nv_bfloat16": 2, "__half": 2, "half": 2}
_FLOATING = {"float", "double"}
_WARP_ROW = "(blockIdx.x * blockDim.x + threadIdx.x) / 32"
_BLOCK_ROW = "blockIdx.x"
_TEAM = {"warp": "const int kl_t = threadIdx.x % 32, kl_n = 32;  // the lane, and the lanes sharing a row",
         "block": "const int kl_t = threadIdx.x, kl_n = blockDim.x;  // the thread, and the threads sharing a row"}
_MAX_FNS = {"fmaxf": "max", "fmax": "max", "max": "max", "fminf": "min", "fmin": "min", "min": "min"}
_EXP_FNS = ("expf", "__expf", "exp")
_BANNED = re.compile(r"\b(?:__syncthreads\w*|__syncwarp|__shfl\w*|__ballot\w*|__any_sync|__all_sync|atomic\w+|"
                     r"cooperative_groups|this_thread_block|__threadfence\w*)\b")
_HELPER = re.compile(r"\bkl_row_(sum|max|min)\b")
_KL_WORDS = re.compile(r"\bkl_(?:t|n|nv|u|l|i|mx|ld\d+|st\d+|rc\d+|tree|part)\b")  # (kl_x, kl_m: an online pass's own)


def _strip(n):
    while n is not None and n.type == "parenthesized_expression" and n.named_child_count == 1:
        n = n.named_children[0]
    return n


def _ids(node) -> set[str]:
    return {n.text.decode() for n in walk(node) if n.type == "identifier"}


def _line_start(data: bytes, pos: int) -> int:
    return data.rfind(b"\n", 0, pos) + 1


def _indent_at(data: bytes, pos: int) -> str:
    start = _line_start(data, pos)
    lead = data[start:pos].decode()
    return lead if not lead.strip() else re.match(r"[ \t]*", lead).group(0)


def _elem(type_text: str) -> str:
    return " ".join(w for w in type_text.replace("*", " ").split()
                    if w not in ("const", "volatile", "__restrict__", "__restrict", "restrict"))


# ---------------------------------------------------------------- the description of a row kernel

@dataclass
class Acc:
    name: str
    op: str          # sum | max | min
    ctype: str       # float | double
    fn: str = ""     # the max / min function the kernel writes (fmaxf ...)


@dataclass
class Online:
    m: str
    s: str
    ctype: str
    fmax: str
    exp: str
    x: str
    y: str           # the exponent's operand ("" when it is x)


@dataclass
class Access:
    ptr: str
    base: str        # the index's row offset ("" for p[c])
    kind: str        # load | store
    start: int       # the subscript expression's bytes in the source
    end: int


@dataclass
class Pass:
    start: int               # the for statement's bytes (absolute)
    end: int
    header_end: int          # just after the header's `)`
    var: str
    vtype: str
    cond: str                # the condition's text
    init: tuple[int, int]    # the initial value's bytes
    update: tuple[int, int]  # the update's bytes
    body: tuple[int, int]    # the body statement's bytes
    accs: list[Acc]
    online: Online | None
    accesses: list[Access]
    indent: str
    combine_end: int = -1    # end of the combine statements after the pass (G form), else `end`

    @property
    def reads(self) -> set[str]:
        return {a.ptr for a in self.accesses if a.kind == "load"}

    @property
    def writes(self) -> set[str]:
        return {a.ptr for a in self.accesses if a.kind == "store"}


@dataclass
class Launch:
    call: tuple[int, int]
    grid: tuple[int, int]          # the bytes of the grid expression to rewrite
    block_text: str                # the launch's block argument as written
    block_edit: tuple[int, int] | None   # the bytes of the block expression to rewrite (None: a macro already)
    macro: str | None              # the tunable holding the block size, if any
    rows_arg: str


@dataclass
class Row:
    """A row kernel in its scalar form (decorations read back)."""
    source: str
    kernel: str
    gran: str                      # thread | warp | block
    row: str
    rows: str
    cols: str
    row_init: tuple[int, int]
    guard_end: int
    team: tuple[int, int] | None   # the kl_t / kl_n declaration (whole lines)
    passes: list[Pass]
    stores: list[tuple[int, int]]  # top-level statements that store per row (unguarded)
    guarded: list[tuple[int, int]] # top-level `if (kl_t == 0) ...` wrappers
    decls: dict[str, tuple[int, str]]  # top-level declared name -> (start byte, type)
    ptrs: dict[str, str]           # pointer name -> element type
    combine: str | None            # tree | shuffle (None: no helper yet)
    helpers: list[tuple[int, int]] # the helper definitions' bytes (whole lines)
    fn_start: int                  # the kernel definition's first byte (its line)
    body_indent: str
    launch: Launch | None
    bounds: int | None             # a literal __launch_bounds__ on the kernel
    prefix: str                    # for new tuning constants (ENTRY point upper-cased)
    facts: dict = field(default_factory=dict)

    @property
    def ops(self) -> list[tuple[str, str, str]]:
        """The (op, ctype, fn) the kernel's combines need, in first-use order."""
        out = []
        for p in self.passes:
            items = [(a.op, a.ctype, a.fn) for a in p.accs]
            if p.online is not None:
                items = [("max", p.online.ctype, p.online.fmax), ("sum", p.online.ctype, "")]
            for it in items:
                if it not in out:
                    out.append(it)
        return out


class _NA(Exception):
    """A reason this module does not rewrite the kernel (NotApplicable's text)."""


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
        body = _body_statements(row, p)
        both = p.reads & p.writes
        sel = []
        for a in p.accesses:
            if a.kind not in kinds or a.ptr in both or ELEM_BYTES.get(row.ptrs.get(a.ptr, "")) is None:
                continue
            if a.kind == "store" and not any(s <= a.start and a.end <= e for s, e in body):
                continue  # a conditional store: every lane of a vector must be written
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
            others = {b.base for q in row.passes for b in q.accesses if b.ptr == a.ptr}
            if len(readers) >= 2 and others == {a.base}:
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


# ---------------------------------------------------------------- the combines

def _combine_expr(op: str, fn: str, a: str, b: str) -> str:
    return f"{a} + {b}" if op == "sum" else f"{fn}({a}, {b})"


def _helper(op: str, ctype: str, fn: str, gran: str, combine: str) -> str:
    name, u = f"kl_row_{op}", "    "
    head = f"__device__ __forceinline__ {ctype} {name}({ctype} v) {{"
    step = ("v += __shfl_xor_sync(0xffffffffu, v, o);" if op == "sum"
            else f"v = {fn}(v, __shfl_xor_sync(0xffffffffu, v, o));")
    if gran == "warp" and combine == "tree":
        body = ["// the warp's 32 lanes meet in a shared-memory tree (the warp's own 32 slots)",
                f"__shared__ {ctype} kl_tree[1024];", f"{ctype}* s = kl_tree + (threadIdx.x & ~31u);",
                "const unsigned lane = threadIdx.x & 31u;", "s[lane] = v;", "__syncwarp();",
                "for (unsigned o = 16; o > 0; o >>= 1) {",
                f"{u}if (lane < o) s[lane] = {_combine_expr(op, fn, 's[lane]', 's[lane + o]')};",
                f"{u}__syncwarp();", "}", "v = s[0];", "__syncwarp();", "return v;"]
    elif gran == "block" and combine == "tree":
        body = ["// the block's threads meet in a shared-memory tree (blockDim.x a power of two)",
                f"__shared__ {ctype} kl_tree[1024];", "const unsigned t = threadIdx.x;", "kl_tree[t] = v;",
                "__syncthreads();", "for (unsigned o = blockDim.x / 2; o > 0; o >>= 1) {",
                f"{u}if (t < o) kl_tree[t] = {_combine_expr(op, fn, 'kl_tree[t]', 'kl_tree[t + o]')};",
                f"{u}__syncthreads();", "}", "v = kl_tree[0];", "__syncthreads();", "return v;"]
    elif gran == "warp":
        body = ["// the warp's 32 lanes combine in registers: a butterfly of shuffles, every lane gets the result",
                f"for (int o = 16; o > 0; o >>= 1) {step}", "return v;"]
    else:
        body = ["// each warp combines in registers (a butterfly of shuffles), then the warps' partials through",
                "// shared memory; every thread gets the result", f"for (int o = 16; o > 0; o >>= 1) {step}",
                f"__shared__ {ctype} kl_part[32];", "if ((threadIdx.x & 31u) == 0) kl_part[threadIdx.x >> 5] = v;",
                "__syncthreads();", "v = kl_part[0];",
                f"for (unsigned w = 1; w < blockDim.x / 32; ++w) v = {_combine_expr(op, fn, 'v', 'kl_part[w]')};",
                "__syncthreads();", "return v;"]
    return head + "\n" + "\n".join(u + b for b in body) + "\n}\n\n"


def _with_helpers(source: str, gran: str, combine: str) -> str:
    """`source` with the combine functions its passes need, written for `gran` and `combine`."""
    row = read_row(source)
    k = Kernel(source)
    data = k.tree.data
    edits = [Edit(s, e + (1 if data[e:e + 1] == b"\n" else 0), "") for s, e in row.helpers]
    text = "".join(_helper(op, t, fn, gran, combine) for op, t, fn in row.ops) if gran != "thread" else ""
    edits.append(Edit(row.fn_start, row.fn_start, text))
    return syntax.apply_edits(source, edits)


# ---------------------------------------------------------------- the structural edits of the scalar form

def _threads(row: Row, gran: str, config: dict) -> int:
    """Threads per block for `gran` from the card's measured configurations (role "block"; names with
    WARP preferred for a warp per row, without for a block per row), clamped to the kernel's launch
    bounds; the default when the card names none."""
    vals = []
    for m in config.get("measured") or []:
        items = [it for it in m.get("values") or [] if it.get("role") == "block" and isinstance(it.get("value"), int)
                 and it.get("name") != "__launch_bounds__"]
        warp = [it for it in items if "WARP" in it["name"].upper()]
        other = [it for it in items if "WARP" not in it["name"].upper()]
        pick = (warp or other) if gran == "warp" else (other or warp)
        if pick:
            vals.append(pick[0]["value"])
    if config.get("threads"):
        vals = [int(config["threads"])]
    v = max(set(vals), key=lambda x: (vals.count(x), -x)) if vals else DEFAULT_THREADS[WARP if gran == "warp" else BLOCK]
    limit = row.bounds or 1024
    v = min(v, limit)
    if gran == "warp":
        v = max(32, v - v % 32)
    else:
        v = 1 << (v.bit_length() - 1)
    return max(32, v)


def to_granularity(row: Row, gran: str, config: dict) -> str:
    """The thread-per-row kernel `row` with each row shared by a warp or a block."""
    if row.gran != "thread":
        raise _NA(f"the row is already shared by a {row.gran}: this rewriter shares a thread's row only")
    if row.launch is None:
        raise _NA("the kernel is not launched once in this file with grid, block and every argument")
    data = row.source.encode()
    ind = row.body_indent
    edits = [Edit(*row.row_init, _WARP_ROW if gran == "warp" else _BLOCK_ROW)]
    nl = data.find(b"\n", row.guard_end)
    edits.append(Edit(nl + 1, nl + 1, ind + _TEAM[gran] + "\n"))
    for p in row.passes:
        edits += [Edit(*p.init, "kl_t"), Edit(*p.update, f"{p.var} += kl_n")]
        lines = _combine_lines(p)
        if lines:
            edits.append(Edit(p.end, p.end, "".join("\n" + p.indent + ln for ln in lines)))
    for s, _ in row.stores:
        edits.append(Edit(s, s, "if (kl_t == 0) "))
    threads = _threads(row, gran, config)
    lau = row.launch
    macro = lau.macro or f"{row.prefix}_ROW_THREADS"
    grid = (f"({lau.rows_arg} + {macro} / 32 - 1) / ({macro} / 32)" if gran == "warp" else lau.rows_arg)
    edits.append(Edit(*lau.grid, grid))
    if lau.block_edit is not None:
        edits.append(Edit(*lau.block_edit, macro))
    src = syntax.apply_edits(row.source, edits)
    src = _with_block_macro(src, row, macro, threads, gran, own=lau.macro is None)
    return _with_helpers(src, gran, "tree")


def _block_assert(macro: str, gran: str, limit: int) -> str:
    if gran == "warp":
        return (f'static_assert({macro} % 32 == 0 && {macro} >= 32 && {macro} <= {limit}, '
                f'"{macro} (threads per block) must be a multiple of 32 from 32 to {limit}");\n')
    return (f'static_assert({macro} >= 32 && {macro} <= {limit} && ({macro} & ({macro} - 1)) == 0, '
            f'"{macro} (threads per block) must be a power of two from 32 to {limit}");\n')


def _with_block_macro(src: str, row: Row, macro: str, threads: int, gran: str, own: bool) -> str:
    note = ("threads per block: a warp per row, {m} / 32 rows a block" if gran == "warp"
            else "threads per block: a block per row").format(m=macro)
    line = f"#define {macro} {threads}  // {note}"
    assertion = _block_assert(macro, gran, row.bounds or 1024)
    if own:
        k = Kernel(src)
        fn = next(f for f in _kernels(k) if syntax.function_name(f) == row.kernel)
        at = len(k.tree.data[:_line_start(k.tree.data, fn.start_byte)].decode())
        return src[:at] + f"#ifndef {macro}\n{line}\n#endif\n" + assertion + src[at:]
    m = re.search(rf"^[ \t]*#[ \t]*define[ \t]+{macro}[ \t]+\d+[^\n]*$", src, re.M)
    if m is None:
        raise _NA(f"the block size {macro} is not a #define this rewriter can set")
    src = src[:m.start()] + line + src[m.end():]
    e = re.compile(r"^[ \t]*#[ \t]*endif[^\n]*\n", re.M).search(src, m.start())
    if e is None:
        raise _NA(f"{macro} is not inside #ifndef {macro} ... #endif")
    return src[:e.end()] + assertion + src[e.end():]


def to_shuffle(row: Row) -> str:
    """The cooperative kernel `row` with its combines through warp shuffles."""
    if row.gran == "thread":
        raise _NA("one thread per row: nothing to combine across threads (share the row with a warp or a "
                  "block first)")
    if row.combine == "shuffle":
        raise _NA("the combines are warp shuffles already")
    return _with_helpers(row.source, row.gran, "shuffle")


_EXP_CALL = re.compile(r"(?P<e>\w+)\((?P<y>.+) - (?P<m>\w+)\)")


def to_online(row: Row) -> str:
    """The kernel `row` with a max pass and the following sum-of-exponentials pass fused into one
    pass with a running max and a rescaled running sum."""
    if any(p.online for p in row.passes):
        raise _NA("the kernel already has an online (running max and sum) pass")
    data = row.source.encode()
    for i, a in enumerate(row.passes[:-1]):
        b = row.passes[i + 1]
        if len(a.accs) != 1 or a.accs[0].op != "max" or len(b.accs) != 1 or b.accs[0].op != "sum":
            continue
        m, s = a.accs[0], b.accs[0]
        if a.writes or b.writes or m.ctype != s.ctype or m.ctype not in _FLOATING:
            continue
        x = _single_update(row, a, m.name)
        y = _single_update(row, b, s.name)
        if x is None or y is None:
            continue
        ex = _EXP_CALL.fullmatch(y)
        if ex is None or ex["e"] not in _EXP_FNS or ex["m"] != m.name or re.search(
                rf"\b({re.escape(m.name)}|{re.escape(s.name)})\b", ex["y"]):
            continue
        gap_s = data.find(b"\n", a.combine_end) + 1
        gap_e = _line_start(data, b.start)
        gap = data[gap_s:gap_e].decode()
        if re.search(rf"\b{re.escape(m.name)}\b", _code(gap)):
            raise _NA(f"code between the max pass and the sum pass reads `{m.name}`")
        if any(st not in ("declaration",) for st in _statement_types(gap)):
            raise _NA("statements other than declarations between the max pass and the sum pass")
        one, zero = ("1.0f", "0.0f") if m.ctype == "float" else ("1.0", "0.0")
        yy = "kl_x" if _norm(ex["y"]) == _norm(x) else ex["y"]
        t, u, ind = m.ctype, "    ", a.indent
        body = [f"const {t} kl_x = {x};", f"const {t} kl_m = {m.fn}({m.name}, kl_x);",
                f"{s.name} = {s.name} * ({m.name} == kl_m ? {one} : {ex['e']}({m.name} - kl_m)) + "
                f"(kl_m == -INFINITY ? {zero} : {ex['e']}({yy} - kl_m));", f"{m.name} = kl_m;"]
        loop = data[a.start:a.header_end].decode() + " {\n" + "".join(f"{ind}{u}{ln}\n" for ln in body) + f"{ind}}}"
        merged = Pass(0, 0, 0, a.var, a.vtype, a.cond, (0, 0), (0, 0), (0, 0), [],
                      Online(m.name, s.name, t, m.fn, ex["e"], x, "" if yy == "kl_x" else yy), [], ind)
        combine = "".join("\n" + ind + ln for ln in _combine_lines(merged)) if row.gran != "thread" else ""
        end = b.combine_end if row.gran != "thread" else b.end
        new = gap + ind + loop + combine
        src = syntax.apply_edits(row.source, [Edit(_line_start(data, a.start), end, new)])
        return _with_helpers(src, row.gran, row.combine or "tree") if row.gran != "thread" else src
    raise _NA("no pass taking the row's max followed by a pass summing exp(y - max) (a softmax's or a "
              "logsumexp's two passes)")


def _single_update(row: Row, p: Pass, acc: str) -> str | None:
    """For a pass whose body is the one statement updating `acc`: its operand (x of `m = fmaxf(m, x)`,
    e of `s += e` / `s = s + e`)."""
    text = squash(row.source.encode()[p.body[0]:p.body[1]].decode())
    text = text[1:-1].strip() if text.startswith("{") and text.endswith("}") else text
    if text.count(";") != 1:
        return None
    text = text.rstrip(";").strip()
    a = re.escape(acc)
    for pat in (rf"{a} \+= (?P<e>.+)", rf"{a} = {a} \+ (?P<e>.+)", rf"{a} = \w+\({a}, (?P<e>.+)\)"):
        mm = re.fullmatch(pat, text)
        if mm and _balanced(mm["e"]):
            return mm["e"]
    return None


def _statement_types(text: str) -> list[str]:
    k = Kernel("void kl_probe() {\n" + text + "\n}\n")
    fn = syntax.functions(k.tree)
    if not fn:
        return ["?"]
    return [c.type for c in fn[0].child_by_field_name("body").named_children if c.type != "comment"]


# ---------------------------------------------------------------- reading a kernel, applying a mechanism

def analyse(source: str) -> tuple[Row, Deco, int | None]:
    """(the scalar form, its decorations, the cache constant's value) of a row kernel; raises _NA
    with the reason when the source is none, or when its decorations do not read back to it exactly."""
    scalar, deco, items = undecorate(source)
    row = read_row(scalar)
    if deco.vector or deco.items:
        again = render(row, deco, items)
        if again != source:
            raise _NA("the kernel's vector or register-cache form was changed after this rewriter wrote it: it "
                      "does not read back")
    return row, deco, items


def present(row: Row, deco: Deco) -> set[str]:
    """The mechanisms of this family the kernel has, as this module reads them."""
    out = set()
    if row.gran == "warp":
        out.add(WARP)
    if row.gran == "block":
        out.add(BLOCK)
    if row.combine == "shuffle":
        out.add(SHUFFLE)
    if any(p.online for p in row.passes):
        out.add(ONLINE)
    if deco.vector:
        out.add(VECTOR)
    if deco.items is not None:
        out.add(CACHE)
    return out


def _kinds(config: dict) -> frozenset:
    anchor = (config.get("anchor") or "").lower()
    if "store" in anchor:
        return frozenset({"store"})
    if "load" in anchor:
        return frozenset({"load"})
    return frozenset({"load", "store"})


def _items(config: dict) -> int:
    """Units per thread of the register cache: the card's measured per-thread factor (role "factor"),
    the most common over its kernels; DEFAULT_ITEMS when it names none."""
    vals = [it["value"] for m in config.get("measured") or [] for it in (m.get("values") or [])[:]
            if it.get("role") == "factor" and isinstance(it.get("value"), int) and 1 <= it["value"] <= 64]
    if config.get("items"):
        vals = [int(config["items"])]
    return max(set(vals), key=lambda x: (vals.count(x), -x)) if vals else DEFAULT_ITEMS


def add(source: str, mechanism: str, config: dict | None = None) -> tuple[str, dict]:
    """(`source` with `mechanism` added, the parameters chosen); raises _NA with the reason."""
    config = config or {}
    row, deco, items = analyse(source)
    have = present(row, deco)
    if mechanism in have:
        raise _NA(f"the kernel has {mechanism} already")
    chosen: dict = {}
    if mechanism in (WARP, BLOCK):
        if {WARP, BLOCK} & have:
            raise _NA(f"the row is shared by a {row.gran} already")
        if deco.vector or deco.items:
            raise _NA("a decorated kernel is one shared by a warp or block already")
        gran = "warp" if mechanism == WARP else "block"
        chosen["threads"] = _threads(row, gran, config)
        scalar = to_granularity(row, gran, {**config, "threads": chosen["threads"]})
    elif mechanism == SHUFFLE:
        scalar = to_shuffle(row)
    elif mechanism == ONLINE:
        scalar = to_online(row)
    elif mechanism == VECTOR:
        kinds = _kinds(config)
        deco = replace(deco, vector=deco.vector | kinds)
        chosen["accesses"] = sorted(kinds)
        scalar = row.source
    elif mechanism == CACHE:
        items = _items(config)
        deco = replace(deco, items=_items_name(row))
        chosen["items"] = items
        scalar = row.source
    else:
        raise _NA(f"{mechanism} is not a row-wise mechanism")
    new_row = read_row(scalar)
    out = render(new_row, deco, items)
    if out == source:
        raise _NA(f"{mechanism} changes nothing in this kernel")
    return out, chosen


@register
class RowwiseRewriter(ShapeRewriter):
    """Row-wise reductions and normalisations (this module's docstring)."""
    name = "rowwise"
    mechanisms = MECHANISMS
    ladder = (BLOCK, SHUFFLE, ONLINE, VECTOR, CACHE)

    def recognise(self, source: str, workload=None) -> Shape | NotApplicable:
        try:
            row, deco, _ = analyse(source)
        except _NA as e:
            return NotApplicable(f"not a row-wise reduction: {e}")
        except Exception as e:  # a parse this module did not foresee: not a kernel it knows
            return NotApplicable(f"not a row-wise reduction: {type(e).__name__}: {e}")
        ops = sorted({op for op, _, _ in row.ops} | ({"online"} if ONLINE in present(row, deco) else set()))
        return Shape("rowwise", row.kernel, {
            "granularity": row.gran, "combine": row.combine, "passes": len(row.passes), "ops": ops,
            "pointers": dict(row.ptrs), "rows": row.rows, "cols": row.cols,
            "vector": sorted(deco.vector), "cache": deco.items, "mechanisms": sorted(present(row, deco))})

    def rewrite(self, source: str, shape: Shape, mechanism: str, config: dict, workload=None) -> Applied | NotApplicable:
        if mechanism not in self.mechanisms:
            return NotApplicable(f"{mechanism} is not a row-wise mechanism")
        try:
            out, chosen = add(source, mechanism, config)
        except _NA as e:
            return NotApplicable(str(e))
        except Exception as e:  # never raise for a kernel this module misreads
            return NotApplicable(f"the {mechanism} rewrite failed on this kernel: {type(e).__name__}: {e}")
        return Applied(out, mechanism, f"{shape.kernel}:{mechanism}", before=_kernel_text(source, shape.kernel),
                       after=_kernel_text(out, shape.kernel), config={"shape": "rowwise", **chosen})


def _kernel_text(source: str, name: str) -> str:
    k = Kernel(source)
    fn = next((f for f in _kernels(k) if syntax.function_name(f) == name), None)
    return k.tree.text_of(fn) if fn is not None else ""
