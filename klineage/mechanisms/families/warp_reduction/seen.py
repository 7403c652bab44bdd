"""Warp reductions seen but not rewritten: the source forms the rewrite does not take
(WarpReduction.detect_more), and reduction steps read from the compiled PTX (WarpReduction.compiled).
"""
from __future__ import annotations

import re

from klineage.mechanisms.base import Feature, Kernel, detail, number_loci, squash
from klineage.mechanisms.vector_forms import device_function
from klineage.parse import syntax
from klineage.parse.syntax import Node, node_path, walk


def _args(call: Node) -> list:
    return [a for a in call.child_by_field_name("arguments").named_children if a.type != "comment"]


def _int(text: str) -> int | None:
    try:
        return int(text.rstrip("uUlL"), 0)
    except ValueError:
        return None


_COMBINE = ("add", "sub", "mul", "fma", "mad", "max", "min", "and", "or", "xor")


def _reduction_shuffles(ck, fn) -> list:
    """Butterfly / down shuffles that are steps of a reduction: the shuffled value (or a value one
    step from it) is combined (add, max, fma, ...) with the value the lane sent (or one step from it),
    and the combination flows into a shuffle again (the next step, or the same one around a loop).
    A compare-exchange (the result taken through both min and max, as a bitonic network does) is not
    a reduction."""
    from klineage.mechanisms.compiled import MOVES
    out = []
    shuffles = [i for i in fn.instrs if i.op == "shfl" and (i.has("bfly") or i.has("down"))]
    shuffle_inputs = set()
    moved_in = {}
    for s in shuffles:
        regs = _moved(ck, fn, s.srcs[:1], back=True)
        moved_in[s.index] = regs
        shuffle_inputs |= regs
    for s in shuffles:
        res = _moved(ck, fn, s.dests[:1], back=False)
        sent = _moved(ck, fn, list(moved_in[s.index]), back=False)
        near_res = res | _one_step(fn, res)
        near_sent = sent | _one_step(fn, sent)
        combines = sorted((u for r in near_res for u in fn.uses.get(r, []) if u.op in _COMBINE
                           and set(u.srcs) & near_sent and u.op not in MOVES), key=lambda u: u.index)
        direct = {u.op for r in res for u in fn.uses.get(r, [])}
        if not combines or {"min", "max"} <= direct:
            continue
        outs = _moved(ck, fn, [d for c in combines for d in c.dests], back=False)
        outs |= _one_step(fn, outs)
        outs = _moved(ck, fn, list(outs), back=False)
        if outs & shuffle_inputs:
            out.append((s, combines))
    return out


def _moved(ck, fn, regs, back: bool) -> set:
    """`regs` and the registers value moves (and selects: an if/else merge compiles to selp) copy them to
    (forward) or from (back)."""
    from klineage.mechanisms.compiled import MOVES
    MOVES = MOVES + ("selp",)
    seen, frontier = set(regs), list(regs)
    while frontier:
        r = frontier.pop()
        nxt = ([s for d in fn.defs.get(r, []) if d.op in MOVES for s in d.srcs] if back else
               [d for u in fn.uses.get(r, []) if u.op in MOVES for d in u.dests])
        for n in nxt:
            if n not in seen:
                seen.add(n)
                frontier.append(n)
    return seen


def _one_step(fn, regs) -> set:
    """Registers computed by one arithmetic instruction from `regs`."""
    return {d for r in regs for u in fn.uses.get(r, []) if u.op in _COMBINE for d in u.dests}


# ---- the forms the rewrite does not take: seen, not removable -------------------------------

_SHFL_FNS = {"__shfl_xor_sync": "shfl_xor", "__shfl_down_sync": "shfl_down"}
_SHFL_MEMBERS = {"shfl_xor": "shfl_xor", "shfl_down": "shfl_down"}
_REDUX = re.compile(r"__reduce_(?:add|min|max|and|or|xor)_sync")
_MIN_FNS = {"fminf", "fmin", "min", "__hmin", "__hmin2", "minf"}
_MAX_FNS = {"fmaxf", "fmax", "max", "__hmax", "__hmax2", "maxf"}


def _shuffle_kind(k: Kernel, call: Node, macros: dict[str, str]) -> tuple[str, list] | None:
    """(kind, value-argument candidates) when `call` exchanges a value across lanes by xor or down: the
    intrinsic, a cooperative-groups tile's member (`tile.shfl_down(v, o)`), or a macro over either."""
    from klineage.mechanisms.codescan import call_args, callee_name
    f = call.child_by_field_name("function")
    name = callee_name(call)
    args = call_args(call)
    if f is not None and f.type == "field_expression" and name in _SHFL_MEMBERS:
        return _SHFL_MEMBERS[name], args[:1]
    if name in _SHFL_FNS and f is not None and f.type in ("identifier", "qualified_identifier"):
        return _SHFL_FNS[name], args[1:2]
    body = macros.get(name)
    if body:
        for fn, kind in _SHFL_FNS.items():
            if fn in body:
                return kind, args
    return None


def _offset_var(k: Kernel, loop: Node) -> str | None:
    """The induction variable of a loop over warp-lane offsets: halving from at most a warp's half
    (a literal <= 16, or `X / 2`, `X >> 1` of a width or a tile size), or doubling from 1 below a warp."""
    init, cond, upd = (loop.child_by_field_name(x) for x in ("initializer", "condition", "update"))
    if loop.type != "for_statement" or init is None or cond is None or upd is None:
        return None
    m = re.fullmatch(r"(?:[\w ]+ )?(\w+) = (.+?);?", squash(k.tree.text_of(init)))
    if not m:
        return None
    var, start = m.group(1), m.group(2)
    q = re.escape(var)
    c, u = squash(k.tree.text_of(cond)), squash(k.tree.text_of(upd))
    halving = re.fullmatch(rf"{q} >>= 1|{q} /= 2|{q} = {q} >> 1|{q} = {q} / 2", u)
    doubling = re.fullmatch(rf"{q} <<= 1|{q} \*= 2|{q} = {q} << 1|{q} = {q} \* 2|{q} \+= {q}", u)
    if halving and re.fullmatch(rf"{q} > 0|{q} >= 1|{q} != 0|0 < {q}|{q}|{q} > 0u", c):
        first = _int(start)
        if (first is not None and 1 <= first <= 16) or re.fullmatch(r"\(?.+ (?:/ 2|>> 1)\)?", start):
            return var
    if doubling and _int(start) == 1 and re.fullmatch(rf"{q} < \w+|{q} <= \w+", c):
        return var
    return None


def _root(node) -> str | None:
    """The variable an expression names at its root: `w.n` -> w, `acc[c]` -> acc, `(x)` -> x."""
    from klineage.mechanisms.codescan import strip
    n = strip(node)
    while n is not None:
        if n.type == "identifier":
            return n.text.decode()
        if n.type in ("field_expression", "subscript_expression", "pointer_expression"):
            n = strip(n.child_by_field_name("argument"))
        else:
            return None
    return None


def _updated(body: Node) -> set[str]:
    from klineage.mechanisms.codescan import assignments
    return {r for lhs, _, _, _ in assignments(body) for r in [_root(lhs)] if r}


def _compare_exchange(k: Kernel, body: Node) -> bool:
    """A bitonic compare-exchange keeps the min or the max by lane: both appear, under a condition."""
    from klineage.mechanisms.codescan import callee_name
    calls = {callee_name(n) for n in walk(body) if n.type == "call_expression"}
    cond = any(n.type in ("conditional_expression", "if_statement") for n in walk(body))
    return bool(calls & _MIN_FNS) and bool(calls & _MAX_FNS) and cond


def _other_forms(k: Kernel, taken: list[tuple[int, int]], mechanism: str) -> list[Feature]:
    """Warp reductions in the forms klineage does not rewrite: cg::reduce and the hardware
    __reduce_*_sync; loops over lane offsets whose body holds several statements, tile member
    shuffles, or macros over the intrinsics (the shuffled value combined with the lane's own, which
    the loop updates: value pairs, rescales, merges in a helper); unrolled runs of such steps."""
    from klineage.mechanisms.codescan import qualified_callee, scan
    s = scan(k)
    found: list[tuple[str, Node, Node | None, str, str]] = []

    def free(node) -> bool:
        a, b = k.lines(node)
        return not any(x <= b and a <= y for x, y in taken)

    for fn in s.fns:
        if device_function(fn.node) is None and not ({"__device__", "__global__"} & syntax.function_qualifiers(fn.node)):
            continue
        for n in walk(fn.node):
            if n.type != "call_expression" or not k.live(n):
                continue
            q = qualified_callee(n)
            if re.fullmatch(r"(?:cg|cooperative_groups)::(?:\w+::)?reduce", q) or _REDUX.fullmatch(q):
                stmt = _statement(n)
                if free(stmt):
                    kind = "redux" if _REDUX.fullmatch(q) else "cg_reduce"
                    found.append((kind, stmt, None, fn.name, q))
        for lp in s.loops(fn):
            if not k.live(lp.node) or not free(lp.node):
                continue
            var = _offset_var(k, lp.node)
            if var is None:
                continue
            shuffles = [(c, kd) for c in walk(lp.body) if c.type == "call_expression"
                        for kd in [_shuffle_kind(k, c, s.macros)] if kd and any(
                            var in {x.text.decode() for x in walk(a) if x.type == "identifier"}
                            for a in _args(c))]
            if not shuffles:
                continue
            sent = {r for _, (_, vals) in shuffles for v in vals for r in [_root(v)] if r}
            if not sent & _updated(lp.body) or _compare_exchange(k, lp.body):
                continue
            kinds = sorted({kd for _, (kd, _) in shuffles})
            found.append(("+".join(kinds), lp.node, lp.body, fn.name, "loop"))
        found += _unrolled(k, s, fn, free)
    from klineage.mechanisms.codescan import macro_calls
    for fname, call, macro, m in macro_calls(k, r"\bfor\s*\(.*\b__shfl_(xor|down)_sync\s*\("):
        stmt = _statement(call)
        if free(stmt):
            found.append((f"shfl_{m.group(1)}", stmt, None, fname, f"macro {macro}"))
    found.sort(key=lambda x: x[1].start_byte)
    out = []
    for locus, (kind, node, body, fname, form) in number_loci(
            [(f"{f[3]}:{f[0]}:{squash(k.tree.text_of(_first_statement(f[1], f[2])).rstrip(';'))[:120]}", f)
             for f in found]):
        out.append(Feature(mechanism, locus, k.lines(node), anchor="warp reduction",
                           detail=detail(form=form if form in ("loop", "unrolled") else kind, shuffle=kind),
                           removable=False, path=node_path(k.tree, node)))
    return out


def _unrolled(k: Kernel, s, fn, free) -> list:
    """Runs of two or more consecutive statements each updating one variable with a shuffle of it at
    a literal offset below 32 (through a macro or a tile member as well)."""
    out = []
    run: list = []

    def flush():
        if len(run) >= 2 and free(run[0][0]):
            out.append((run[0][1], run[0][0], None, fn.name, "unrolled"))
        run.clear()
    for blk in walk(fn.node):
        if blk.type != "compound_statement":
            continue
        for st in [c for c in blk.named_children if c.type != "comment"]:
            hit = None
            if st.type in ("expression_statement", "declaration") and k.live(st):
                for c in walk(st):
                    if c.type != "call_expression":
                        continue
                    kd = _shuffle_kind(k, c, s.macros)
                    if not kd:
                        continue
                    lits = [_int(a.text.decode()) for a in _args(c)]
                    roots = {r for v in kd[1] for r in [_root(v)] if r}
                    if any(v is not None and 0 < v < 32 for v in lits[1:]) and roots & _updated(st):
                        hit = (st, kd[0], roots)
                        break
            if hit and (not run or (run[-1][1] == hit[1] and run[-1][2] == hit[2])):
                run.append(hit)
            else:
                flush()
                if hit:
                    run.append(hit)
        flush()
    return out


def _statement(n: Node) -> Node:
    while n.parent is not None and n.type not in ("expression_statement", "declaration", "return_statement"):
        n = n.parent
    return n


def _first_statement(node: Node, body: Node | None) -> Node:
    if body is None:
        return node
    kids = [c for c in body.named_children if c.type != "comment"] if body.type == "compound_statement" else [body]
    return kids[0] if kids else node
