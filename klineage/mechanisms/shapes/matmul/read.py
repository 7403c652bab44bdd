"""A plain matrix product read by what it computes: one thread per output element, a loop that reduces
over k, and the stores, read with klineage.parse.loopnest (index arithmetic, loop nests, accesses and
the conditions each statement runs under). Names are not read: the operands are the two arrays the
reduction multiplies, the output the array the sum is stored to, and

  the output's column  the index term the output is contiguous in (stride 1);
  its row              the other term the output and one operand (a) share;
  a batch              a term the output and both operands share (a blockIdx component, an outer loop);
  K                    the reduction loop's bound; M, N and the batch count what bounds the row,
                       the column and the batch (a bounds check around the body or an early return
                       before it, a loop, or the launch's grid);
  layouts              which of each operand's two terms has stride 1: a [M, K] or [K, M], b [K, N]
                       or [N, K]; every stride must be the dense one (a's rows K elements apart ...).

The entry point's arguments reach the kernel through its launch (and any host helper it calls on
the way): the sizes and pointers the generator's call passes are what the launch passes, in the
entry's own names. A kernel that does not read so is refused with the fact that blocked it.
"""
from __future__ import annotations

import sympy

from klineage.parse import loopnest, syntax
from klineage.parse.loopnest import FunctionRead, Step, strip

ZERO = sympy.Integer(0)
ONE = sympy.Integer(1)
FMA = {"fmaf", "fma", "__fmaf_rn", "__fmaf_rz", "__fmaf_ru", "__fmaf_rd", "__fma_rn"}
DTYPES = {"__nv_bfloat16": "bf16", "nv_bfloat16": "bf16", "__half": "f16", "half": "f16", "float": "f32"}


class Refused(Exception):
    """The kernel does not read as a plain matrix product; the message is the fact that blocked it.
    `definite`: False where the reader met code it does not follow (a while loop, a goto), which says
    nothing about what the kernel computes."""

    def __init__(self, why: str, definite: bool = True):
        super().__init__(why)
        self.definite = definite


def _moving(s: sympy.Symbol, movers: set[str]) -> bool:
    return s.name.split(".")[0] in loopnest.POSITION or s.name in movers


def _terms(expr: sympy.Expr, movers: set[str]) -> dict:
    """{coefficient: the index term it multiplies}: each monomial split into its moving factors (the
    thread's position, the loops' counters) and the rest; raw blockIdx / threadIdx terms of one
    dimension whose coefficients differ by a number are one term (`(16 * by + ty) * N`)."""
    out: dict = {}
    for mono, num in sympy.expand(expr).as_coefficients_dict().items():
        moving, rest = ONE, ONE
        for f in mono.as_ordered_factors():
            if any(_moving(s, movers) for s in f.free_symbols):
                moving *= f
            else:
                rest *= f
        coef = sympy.Integer(num) * rest if isinstance(num, (int, sympy.Integer)) else num * rest
        out[coef] = out.get(coef, ZERO) + moving
    # raw position terms of one dimension, coefficients a number apart: one index
    merged: dict = {}
    for coef, term in sorted(out.items(), key=lambda kv: sympy.default_sort_key(kv[0])):
        dims = {s.name.split(".")[1] for s in term.free_symbols if s.name.split(".")[0] in loopnest.POSITION}
        raw = dims and all(s.name.split(".")[0] in loopnest.POSITION for s in term.free_symbols)
        for c2 in list(merged):
            t2 = merged[c2]
            d2 = {s.name.split(".")[1] for s in t2.free_symbols if s.name.split(".")[0] in loopnest.POSITION}
            raw2 = d2 and all(s.name.split(".")[0] in loopnest.POSITION for s in t2.free_symbols)
            ratio = sympy.simplify(coef / c2)
            if raw and raw2 and dims == d2 and len(dims) == 1 and ratio.is_number:
                if ratio.is_integer:
                    merged[c2] = sympy.expand(t2 + ratio * term)
                else:
                    merged[coef] = sympy.expand(term + sympy.simplify(c2 / coef) * merged.pop(c2))
                break
        else:
            merged[coef] = term
    return merged


def _same(a: sympy.Expr, b: sympy.Expr) -> bool:
    return sympy.expand(a - b) == 0


def _find(terms: dict, term: sympy.Expr) -> sympy.Expr | None:
    """The coefficient of `term` among `terms`, None when it is not one of them."""
    return next((c for c, t in terms.items() if _same(t, term)), None)


def _text(e: sympy.Expr) -> str:
    return str(e).replace(" ", "")


class _Kernel:
    """The product one __global__ function computes (read_kernel)."""

    def __init__(self, fn, read: FunctionRead):
        self.fn, self.r = fn, read
        self.name = read.name
        self.optional_bias = False
        self.store_conds: tuple = ()

    def refuse(self, why: str, definite: bool = True):
        raise Refused(f"{self.name}: {why}", definite)

    # -- the reduction --------------------------------------------------------------------------------
    def temps(self, step: Step) -> dict:
        """name -> initialiser node of the locals declared before `step` inside its innermost loop."""
        out = {}
        for s in self.r.steps:
            if s is step:
                break
            if s.kind == "decl" and s.value is not None and s.loops and step.loops and s.loops[-1] is step.loops[-1]:
                out[s.target] = s.value
        return out

    def factors(self, node, temps: dict) -> list:
        """The factors of a product `x * y` (through parentheses, conversions and temporaries)."""
        node = strip(node)
        if node.type == "identifier" and node.text.decode() in temps:
            return self.factors(temps[node.text.decode()], temps)
        if node.type == "binary_expression" and node.child_by_field_name("operator").type == "*":
            return self.factors(node.child_by_field_name("left"), temps) + \
                self.factors(node.child_by_field_name("right"), temps)
        return [node]

    def accumulation(self) -> tuple[Step, object, list]:
        """(the step, the accumulator (a local's name, or the output element node), the product's two
        factor nodes) of the one statement that sums a product over a loop."""
        found = []
        for s in self.r.steps:
            if s.kind != "assign" or not s.loops or s.value is None:
                continue
            target, op, value = s.target, s.op, s.value
            acc = target.text.decode() if target.type == "identifier" else target
            prod = None
            if op == "+=":
                prod = value
            elif op == "=":
                v = strip(value)
                name = target.text.decode()
                if v.type == "binary_expression" and v.child_by_field_name("operator").type == "+":
                    left, right = v.child_by_field_name("left"), v.child_by_field_name("right")
                    if strip(left).text.decode() == name:
                        prod = right
                    elif strip(right).text.decode() == name:
                        prod = left
                elif v.type == "call_expression" and loopnest.call_name(v) in FMA:
                    args = loopnest.call_args(v)
                    if len(args) == 3 and strip(args[2]).text.decode() == name:
                        found.append((s, acc, [strip(args[0]), strip(args[1])]))
                        continue
            if prod is not None:
                found.append((s, acc, self.factors(prod, self.temps(s))))
        if not found:
            self.refuse("no loop accumulates a product (`acc += x[i] * y[j]`)")
        if len(found) > 1:
            self.refuse(f"{len(found)} statements accumulate in loops ({', '.join(s.node.text.decode()[:40] for s, _, _ in found)}): "
                        "a plain product has one")
        step, acc, fac = found[0]
        if len(fac) != 2:
            self.refuse(f"the accumulated term `{step.value.text.decode()}` is not a product of two elements"
                        + (" (it scales the product)" if len(fac) > 2 else ""))
        return step, acc, fac

    def element(self, node, env) -> tuple[str, sympy.Expr]:
        got = self.r.element(node, env)
        if got is None:
            self.refuse(f"`{node.text.decode()}` is not an element of a pointer parameter")
        arr, idx = got
        p = self.r.param(arr)
        if p is None or not p.pointer:
            self.refuse(f"`{node.text.decode()}` reads `{arr}`, not a pointer parameter")
        return arr, idx

    # -- everything ------------------------------------------------------------------------------------
    def read(self) -> dict:
        r = self.r
        if r.unread:
            self.refuse(f"a loop or branch this reader does not follow ({r.unread[0]} ...)", definite=False)
        step, acc, fac = self.accumulation()
        kloop = step.loops[-1]
        if not kloop.var or kloop.bound is None or kloop.step != ONE or kloop.start != ZERO:
            self.refuse(f"the reduction loop `{kloop.node.text.decode().splitlines()[0][:60]}` does not count k from 0 "
                        "by 1 to a bound")
        k = sympy.Symbol(kloop.var)
        outer = [lp for lp in step.loops[:-1]]
        movers = set(r.positions) | {lp.var for lp in step.loops if lp.var}
        (x_arr, x_idx), (y_arr, y_idx) = (self.element(f, step.env) for f in fac)
        # the accumulator: its start and where the sum goes
        store, bias = self.store(step, acc, kloop)
        o_arr, o_idx = store
        if o_arr in (x_arr, y_arr):
            self.refuse(f"the output `{o_arr}` is also an operand")
        # a flat index split into a row and a column (q = i / X, r = i % X) reads as q * X + r
        flat = {}
        for q, dq in r.positions.items():
            for rr, dr in r.positions.items():
                if isinstance(dq, loopnest.Div) and isinstance(dr, loopnest.Mod) and dq.args == dr.args \
                        and isinstance(dq.args[0], sympy.Symbol):
                    flat[dq.args[0]] = sympy.Symbol(q) * dq.args[1] + sympy.Symbol(rr)
        if flat:
            o_idx, x_idx, y_idx = (sympy.expand(e.subs(flat)) for e in (o_idx, x_idx, y_idx))
        to = _terms(o_idx, movers)
        tx, ty = _terms(x_idx, movers), _terms(y_idx, movers)
        col = to.get(ONE)
        if col is None:
            self.refuse(f"the output `{o_arr}[{_text(o_idx)}]` has no term of stride 1")
        if any(not t.free_symbols for t in to.values()):
            self.refuse(f"the output index `{_text(o_idx)}` has a constant offset")
        kx, ky = _find(tx, k), _find(ty, k)
        if kx is None or ky is None:
            self.refuse(f"the product `{x_arr}[{_text(x_idx)}] * {y_arr}[{_text(y_idx)}]` does not index both operands "
                        f"by the loop counter {k} alone")
        # which operand is a (shares the output's row) and which b (shares its column)
        if _find(tx, col) is not None and _find(ty, col) is None:
            (x_arr, tx, kx), (y_arr, ty, ky) = (y_arr, ty, ky), (x_arr, tx, kx)
        if _find(ty, col) is None:
            self.refuse(f"neither operand is indexed by the output's column `{col}` (the term of stride 1 in "
                        f"{o_arr}[{_text(o_idx)}])" + (": the output is stored column-major" if _find(tx, col) else ""))
        others = {c: t for c, t in to.items() if c != ONE}
        row = batch = None
        alone = [t for t in others.values() if _find(tx, t) is not None and _find(ty, t) is None]
        if len(alone) > 1:
            self.refuse(f"the output's index terms {', '.join(map(str, alone))} are all read by a alone: b is shared "
                        "across the batch (no batch term in its index), which the generator does not write")
        for c, t in others.items():
            in_a, in_b = _find(tx, t) is not None, _find(ty, t) is not None
            if in_a and in_b:
                batch = (c, t)
            elif in_a and not in_b and row is None:
                row = (c, t)
            else:
                self.refuse(f"the output's index term `{t}` is not read by a alone (a row) nor by both operands (a "
                            "batch)")
        if row is None:
            self.refuse(f"no index term of the output `{o_arr}[{_text(o_idx)}]` is shared with an operand (its row)")
        rterm, cterm = row[1], col
        extra_a = [t for t in tx.values() if not any(_same(t, u) for u in (rterm, k) + ((batch[1],) if batch else ()))]
        extra_b = [t for t in ty.values() if not any(_same(t, u) for u in (cterm, k) + ((batch[1],) if batch else ()))]
        if extra_a or extra_b:
            self.refuse(f"an operand is indexed by more than its row / column, k and the batch: "
                        f"{x_arr}[{_text(x_idx)}], {y_arr}[{_text(y_idx)}]")
        # bounds: the loop's, and what bounds the row, the column, the batch
        conds = list(step.conds) + list(self.store_conds)
        K = kloop.bound
        M, N = self.bound(rterm, conds, outer), self.bound(cterm, conds, outer)
        if M is None:
            self.refuse(f"nothing bounds the output row `{rterm}`: no `{rterm} < M` check around the body nor an "
                        "early return before it")
        if N is None:
            self.refuse(f"nothing bounds the output column `{cterm}`: no `{cterm} < N` check around the body nor an "
                        "early return before it")
        nb, from_grid = None, None
        if batch is not None:
            nb = self.bound(batch[1], conds, outer)
            if nb is None:
                z = r.positions.get(str(batch[1]), batch[1]) if isinstance(batch[1], sympy.Symbol) else batch[1]
                dim = next((i for i, d in enumerate("xyz") if _same(z, sympy.Symbol(f"blockIdx.{d}"))), None)
                if dim is None:
                    self.refuse(f"nothing bounds the batch index `{batch[1]}` (a check, a loop, or a grid extent: the "
                                "index is not a blockIdx component)")
                from_grid = dim
        # layouts and dense strides: a [M, K] or [K, M], b [K, N] or [N, K]
        a_mmajor = self.layout("a", x_arr, ("row", _find(tx, rterm), M), ("k", kx, K))
        b_kmajor = self.layout("b", y_arr, ("k", ky, K), ("column", _find(ty, cterm), N))
        if not _same(row[0], N):
            self.refuse(f"the output's rows are {_text(row[0])} elements apart, not N = {_text(N)}")
        if batch is not None:
            for arr, terms, want in ((x_arr, tx, M * K), (y_arr, ty, K * N), (o_arr, to, M * N)):
                got = _find(terms, batch[1])
                if not _same(got, want):
                    self.refuse(f"`{arr}` moves {_text(got)} elements a batch, not {_text(sympy.expand(want))} (dense "
                                "batches)")
        if bias is not None:
            b_arr, b_idx = bias
            if not _same(b_idx, cterm):
                self.refuse(f"the sum adds `{b_arr}[{_text(b_idx)}]`: a bias is read here only at the output's "
                            f"column ({b_arr}[{cterm}])")
        types = {}
        for arr in (x_arr, y_arr, o_arr) + ((bias[0],) if bias else ()):
            t = r.param(arr).type.replace("const", "").replace("__restrict__", "").split()
            types[arr] = DTYPES.get(t[-1] if t else "")
        if len(set(types.values())) != 1 or None in types.values():
            self.refuse(f"operand and output element types {types}: one of float, __half or __nv_bfloat16 for all")
        return {"a": x_arr, "b": y_arr, "out": o_arr, "bias": bias[0] if bias else None, "M": M, "N": N, "K": K,
                "batch": nb, "from_grid": from_grid, "a_mmajor": a_mmajor, "b_kmajor": b_kmajor,
                "dtype": types[o_arr], "batched": batch is not None,
                "optional_bias": self.optional_bias}

    def layout(self, role: str, arr: str, first: tuple, second: tuple) -> bool:
        """Whether the operand is stored transposed against the layout a product takes (a [M, K], b [K,
        N]; `first` and `second` its indices, each (name, stride read, extent)): False when the second
        index has stride 1 and the first the second's extent, True (a [K, M], b [N, K]) the other way
        round; refused otherwise."""
        (n1, s1, e1), (n2, s2, e2) = first, second
        if s2 == ONE and _same(s1, e2):
            return False
        if s1 == ONE and _same(s2, e1):
            return True
        dims = "M, K" if role == "a" else "K, N"
        flip = ", ".join(reversed(dims.split(", ")))
        self.refuse(f"{role} `{arr}` is read with strides {_text(s1)} ({n1}) and {_text(s2)} ({n2}): neither "
                    f"[{dims}] nor [{flip}] dense ({n1 if n1 != 'k' else 'K'} extent {_text(e1)}, "
                    f"{n2 if n2 != 'k' else 'K'} extent {_text(e2)})")

    def bound(self, term: sympy.Expr, conds, outer) -> sympy.Expr | None:
        """What bounds the index term: a condition `term < X` the statements run under, an outer loop
        over it from 0 by 1, or, for the quotient and remainder of one flat index by X (`row = i / X`,
        `col = i % X`) under `i < Y * X`, Y and X."""
        for c in conds:
            if c.rhs is not None and _same(c.lhs, term):
                return c.rhs
        d = self.r.positions.get(str(term)) if isinstance(term, sympy.Symbol) else term
        if isinstance(d, (loopnest.Div, loopnest.Mod)):
            flat, by = d.args
            for c in conds:
                if c.rhs is not None and _same(c.lhs, flat):
                    if isinstance(d, loopnest.Mod):
                        return by
                    q = sympy.cancel(c.rhs / by)
                    if sympy.fraction(q)[1] == 1:
                        return q
        for lp in outer:
            if lp.var and _same(sympy.Symbol(lp.var), term) and lp.start == ZERO and lp.step == ONE:
                return lp.bound
        return None


    def start_bias(self, start, acc: str):
        """(bias array, index) of an accumulator that starts at `bias[col]`, or at `bias != nullptr ?
        bias[col] : 0` (a bias an entry point may pass as nullptr); refused for any other start."""
        init = start.value.text.decode() if start is not None and start.value is not None else "nothing"
        v = strip(start.value) if start is not None and start.value is not None else None
        if v is not None and v.type == "conditional_expression":
            c = strip(v.child_by_field_name("condition"))
            yes, no = v.child_by_field_name("consequence"), v.child_by_field_name("alternative")
            got = self.r.element(yes, start.env) if yes is not None else None
            names = _identifiers(c) - {"nullptr", "NULL"}
            if got is not None and no is not None and _is_zero(no) and names == {got[0]}:
                self.optional_bias = True
                return got
        elif v is not None:
            got = self.r.element(v, start.env)
            if got is not None:
                return got
        self.refuse(f"the accumulator `{acc}` starts at {init}, not 0 (nor a bias)")

    def store(self, step: Step, acc, kloop):
        """((array, index) the sum is stored to, (bias array, index) or None); checks the accumulator
        starts at zero. Sets store_conds, the conditions the store runs under."""
        r = self.r
        steps = r.steps
        i = steps.index(step)
        if not isinstance(acc, str):  # accumulated in memory: out[i] += x * y, zeroed before the loop
            got = self.element(acc, step.env)
            zeroed = any(s.kind == "assign" and s.op == "=" and not isinstance(s.target, str)
                         and s.target.type != "identifier" and steps.index(s) < i
                         and r.element(s.target, s.env) == got and _is_zero(s.value) for s in steps)
            if not zeroed:
                self.refuse(f"`{acc.text.decode()}` accumulates onto what the output held (not zeroed before the loop)")
            self.store_conds = ()
            return got, None
        start = next((s for s in reversed(steps[:i]) if s.kind == "decl" and s.target == acc), None)
        bias = None
        if start is None or start.value is None or not _is_zero(start.value):
            bias = self.start_bias(start, acc)
        if r.written.get(acc, 0) != 1:
            self.refuse(f"the accumulator `{acc}` is written outside the reduction too")
        after = [s for s in steps[i + 1:] if s.kind == "assign" and not isinstance(s.target, str)
                 and s.target.type != "identifier" and kloop not in s.loops]
        stores = [s for s in after if acc in _identifiers(s.value)]
        if len(stores) != 1:
            self.refuse(f"the sum `{acc}` is stored {len(stores)} times after its loop (one store of it is a product)")
        st = stores[0]
        if st.op != "=":
            self.refuse(f"the sum is stored with `{st.op}` (`{st.node.text.decode()}`): onto what the output held")
        self.store_conds = st.conds
        where = self.element(st.target, st.env)
        v = strip(st.value)
        if bias is not None and not (v.type == "identifier" and v.text.decode() == acc):
            self.refuse(f"the sum starts at a bias and is stored as `{st.value.text.decode()}`")
        if not (v.type == "identifier" and v.text.decode() == acc):
            if v.type == "binary_expression" and v.child_by_field_name("operator").type == "+":
                left, right = strip(v.child_by_field_name("left")), strip(v.child_by_field_name("right"))
                other = right if left.text.decode() == acc else left if right.text.decode() == acc else None
                if other is not None:
                    bias = self.element(other, st.env)
            if bias is None:
                self.refuse(f"the stored value `{st.value.text.decode()}` is not the sum (nor the sum plus a bias): the "
                            "generator writes out = a @ b")
        return where, bias


def _identifiers(node) -> set[str]:
    return {n.text.decode() for n in syntax.walk(node) if n.type == "identifier"} if node is not None else set()


def _is_zero(node) -> bool:
    v = loopnest.literal(strip(node).text.decode()) if strip(node).type == "number_literal" else None
    return v is not None and bool(v.is_zero)


# ---- the host side: from the entry point to the launch ------------------------------------------------------


def _calls(node):
    return [n for n in syntax.walk(node) if n.type == "call_expression"]


def _launch(fns: dict, fname: str, args: dict, depth: int = 0) -> list:
    """[(kernel, grid components, stream, arguments)] of the kernel launches reached from host function
    `fname` (through the host functions of the file it calls), its parameters bound by `args` (symbol
    -> expression in the entry point's terms); every value a sympy expression in the entry's terms."""
    _, read = fns[fname]
    out = []
    for s in read.steps:
        node = s.value if s.kind in ("decl", "return", "call") else s.node
        if node is None:
            continue

        def val(n, env=s.env):
            return sympy.expand(loopnest.sym(n, env).subs(args, simultaneous=True))
        for c in _calls(node):
            name = loopnest.call_name(c)
            cfg = next((x for x in c.named_children if x.type == "kernel_call_syntax"), None)
            if cfg is not None:
                parts = [x for x in cfg.named_children if x.type != "comment"]
                grid = strip(parts[0]) if parts else None
                if grid is not None and grid.type == "identifier" and grid.text.decode() in read.arrays:
                    comps = [val(x) for x in read.arrays[grid.text.decode()]]
                elif grid is not None and grid.type == "call_expression" and loopnest.call_name(grid) == "dim3":
                    comps = [val(x) for x in loopnest.call_args(grid)]
                else:
                    comps = [val(grid)] if grid is not None else []
                stream = val(parts[3]) if len(parts) > 3 else None
                out.append((name, comps, stream, [val(a) for a in loopnest.call_args(c)]))
            elif name in fns and name != fname and depth < 4:
                params = [p.name for p in fns[name][1].params]
                got = loopnest.call_args(c)
                if len(got) == len(params):
                    out += _launch(fns, name, {sympy.Symbol(p): val(a) for p, a in zip(params, got)}, depth + 1)
    return out


def read_product(source: str, entry_names: list[str]) -> tuple[list[dict], bool, bool, str]:
    """([per entry point: the generator's call in the entry's terms (name, a, b, out, bias, M, N, K,
    batch, stream, kind)], a stored [K, M], b stored [N, K], element type) of a file whose entry points
    each launch one plain matrix product; Refused with the fact that blocked it otherwise."""
    tree = syntax.SourceTree(source)
    macros = {sympy.Symbol(k): sympy.Integer(v) for k, v in loopnest.integer_macros(source).items()}
    fns: dict = {}
    for fn in syntax.functions(tree):
        name = syntax.function_name(fn)
        if name and name not in fns:
            fns[name] = (fn, loopnest.read_function(fn))
    kernels = {n for n, (fn, _) in fns.items() if "__global__" in syntax.function_qualifiers(fn)}
    products: dict[str, dict] = {}
    out, layouts = [], set()
    for entry in entry_names:
        if entry not in fns:
            raise Refused(f"{entry}: the entry point's body is not readable")
        eparams = {p.name: p for p in fns[entry][1].params}
        launches = [la for la in _launch(fns, entry, {}) if la[0] in kernels]
        if not launches:
            raise Refused(f"{entry}: launches no kernel of this file")
        if len(launches) > 1:
            raise Refused(f"{entry}: launches {len(launches)} kernels ({', '.join(la[0] for la in launches)}); a plain "
                          "product is one launch")
        kname, grid, stream, args = launches[0]
        if kname not in products:
            products[kname] = _Kernel(*fns[kname]).read()
        kp = products[kname]
        kparams = fns[kname][1].params
        if len(args) != len(kparams):
            raise Refused(f"{entry}: launches {kname} with {len(args)} arguments for {len(kparams)} parameters")
        bind = {sympy.Symbol(p.name): a for p, a in zip(kparams, args)}

        def pointer(role: str) -> str:
            got = bind[sympy.Symbol(kp[role])]
            if not (isinstance(got, sympy.Symbol) and got.name in eparams and eparams[got.name].pointer):
                raise Refused(f"{entry}: the {role} operand `{kp[role]}` of {kname} is passed `{got}`, not a pointer "
                              "parameter of the entry point")
            return got.name

        def size(role: str, e) -> str:
            v = sympy.expand(sympy.sympify(e).subs(bind, simultaneous=True).subs(macros))
            bad = sorted(s.name for s in v.free_symbols if s.name not in eparams or eparams[s.name].pointer)
            if bad:
                raise Refused(f"{entry}: the size {role} of {kname} is `{v}`, which names {', '.join(bad)}: not an "
                              "integer parameter of the entry point")
            return _text(v)
        batch = None
        if kp["batched"]:
            if kp["from_grid"] is not None:
                dim = kp["from_grid"]
                if len(grid) <= dim:
                    raise Refused(f"{entry}: {kname}'s batch index is blockIdx.{'xyz'[dim]}, and the launch's grid "
                                  f"has no {'xyz'[dim]} extent")
                batch = _text(sympy.expand(grid[dim].subs(macros)))
                bad = sorted(s.name for s in grid[dim].subs(macros).free_symbols if s.name not in eparams)
                if bad:
                    raise Refused(f"{entry}: the batch count (the grid's {'xyz'[dim]} extent) is `{batch}`: not an "
                                  "integer parameter of the entry point")
            else:
                batch = size("batch", kp["batch"])
            if batch == "1":
                batch = None
        st = _text(stream) if stream is not None else None
        if st is None or st not in eparams:
            st = next((p.name for p in eparams.values() if p.type.split()[-1] == "cudaStream_t"), "0")
        bias = None
        if kp["bias"]:
            got = bind[sympy.Symbol(kp["bias"])]
            null = got == ZERO or (isinstance(got, sympy.Symbol) and got.name in ("nullptr", "NULL"))
            if null and not kp["optional_bias"]:
                raise Refused(f"{entry}: passes no bias ({got}) to {kname}, which reads one")
            if not null:
                bias = pointer("bias")
                if kp["batched"] and batch is not None:
                    raise Refused(f"{entry}: a bias with batches is not written here")
        out.append({"name": entry, "a": pointer("a"), "b": pointer("b"), "out": pointer("out"), "bias": bias,
                    "M": size("M", kp["M"]), "N": size("N", kp["N"]), "K": size("K", kp["K"]), "batch": batch,
                    "stream": st, "kind": "bmm" if batch else "addmm" if bias else "mm"})
        layouts.add((kp["a_mmajor"], kp["b_kmajor"], kp["dtype"]))
    if len(layouts) != 1:
        raise Refused("the entry points launch products of different layouts or element types")
    a_mmajor, b_kmajor, dtype = layouts.pop()
    return out, a_mmajor, b_kmajor, dtype
