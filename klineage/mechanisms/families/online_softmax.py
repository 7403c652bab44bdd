"""Online (single-pass) softmax: a running maximum with a rescaled running sum."""
from __future__ import annotations

import re

from klineage.mechanisms.base import Family, Form, squash
from klineage.mechanisms.codescan import assignments, base_name, call_args, callee_name, identifiers, strip
from klineage.mechanisms.structural import _Structural
from klineage.parse.syntax import ancestors, walk


_MAX_FNS = {"fmaxf", "fmax", "max", "__hmax", "hmax", "__hmax_nan"}
_EXP_FNS = {"expf", "__expf", "exp2f", "exp2", "exp", "__exp2f", "hexp", "hexp2", "h2exp", "h2exp2"}
_FMA_FNS = {"fmaf", "fma", "__fmaf_rn", "__fmaf_rz", "__hfma", "__hfma2", "fmaf_rn"}


class OnlineSoftmax(_Structural):
    NAME = "online_softmax"
    DESCRIPTION = "online (single-pass) softmax: running max with rescaled running sum"
    ANCHOR = "running max / sum"

    def evidence(self, s, fn):
        live = [(l, op, r, st) for l, op, r, st in assignments(fn.node) if s.live(st.start_point.row + 1)]
        assigns = [(l, op, r) for l, op, r, st in live]
        maxed = {base_name(l) for l, op, r in assigns if op == "=" and (_is_call(r, _MAX_FNS) or _ternary_max(r))}
        maxed -= {None}
        pairs = set()
        for l, op, r, st in live:
            a, b, rs = base_name(l), base_name(r), strip(r)
            plain = rs.type in ("identifier", "subscript_expression", "field_expression")
            if op == "=" and a and b and a != b and plain and (a in maxed or b in maxed):
                pairs.add(frozenset((a, b)))
            elif op == "=" and a and b and a != b and plain and _raised_under(st, l, r):
                maxed.add(a)  # `if (x > m) { ...; m = x; }`: a running maximum written as a branch
                pairs.add(frozenset((a, b)))
        if not pairs:
            return None
        in_pair = set().union(*pairs)
        exp_fns = _EXP_FNS | {f.name for f in s.fns if "exp" in f.own and re.search(r"(?i)ex(?:p|2)", f.name)}
        derived: dict[str, set[str]] = {}
        for _ in range(2):
            for l, op, r in assigns:
                v = base_name(l)
                if not v or op != "=" or v in in_pair or any(_is_call(c, exp_fns) for c in walk(r)):
                    continue
                src = {i for i in identifiers(r) if i in in_pair} | set().union(*[derived.get(i, set())
                                                                                  for i in identifiers(r)])
                if src:
                    derived.setdefault(v, set()).update(src)

        def sides(node) -> set[str]:
            ids = _names(node)
            return {i for i in ids if i in in_pair} | set().union(*[derived.get(i, set()) for i in ids])

        factors = []
        for n in walk(fn.node):
            if _is_call(n, exp_fns) and s.live(n.start_point.row + 1):
                args = n.child_by_field_name("arguments")
                if args is not None and "-" in args.text.decode() and any(p <= sides(args) for p in pairs):
                    factors.append(n)
        if not factors:
            return None
        # names holding a rescale factor (`alpha = exp2f((m_prev - m) * scale)`), not self-updates using one
        fnames = {base_name(l) for l, op, r in assigns if op == "=" and any(_within(f, r) for f in factors)
                  and base_name(l) not in _names(r)} - {None}

        def scales(node) -> bool:
            return any(_within(f, node) for f in factors) or bool(identifiers(node) & fnames)

        rescaled = set()
        for l, op, r in assigns:
            acc = base_name(l)
            if not acc or acc in in_pair or acc in fnames:
                continue
            if op == "*=" and scales(r):
                rescaled.add(acc)
            elif op == "=":
                for b in walk(r):
                    if b.type == "binary_expression" and b.child_by_field_name("operator").type == "*":
                        x, y = b.child_by_field_name("left"), b.child_by_field_name("right")
                        if (base_name(x) == acc and scales(y)) or (base_name(y) == acc and scales(x)):
                            rescaled.add(acc)
                    elif _is_call(b, _FMA_FNS):
                        a2 = call_args(b)[:2]
                        if len(a2) == 2 and ((base_name(a2[0]) == acc and scales(a2[1]))
                                             or (base_name(a2[1]) == acc and scales(a2[0]))):
                            rescaled.add(acc)
        if not rescaled:
            return None
        new = {v for v in in_pair if v in maxed}
        lines = {n.start_point.row + 1 for n in walk(fn.node)
                 if n.type == "identifier" and n.text.decode() in new and s.live(n.start_point.row + 1)}
        return lines, ({"rescaled": ",".join(sorted(rescaled))} if len(rescaled) > 1 else {})


def _names(node) -> set[str]:
    """Variables and struct fields an expression reads (`md.m - m_new` -> md, m, m_new)."""
    return identifiers(node) | {n.text.decode() for n in walk(node) if n.type == "field_identifier"}


def _compares(cond, x, y) -> str | None:
    """'gt' when `cond` says x > y (`x > y`, `y < x`, with >= / <=), 'lt' when x < y, else None."""
    c = strip(cond)
    if c is not None and c.type == "condition_clause":
        c = strip(c.named_children[0]) if c.named_children else None
    if c is None or c.type != "binary_expression":
        return None
    op = c.child_by_field_name("operator").type
    left, right = (squash(c.child_by_field_name(f).text.decode()) for f in ("left", "right"))
    if (left, right) == (x, y):
        return {">": "gt", ">=": "gt", "<": "lt", "<=": "lt"}.get(op)
    if (left, right) == (y, x):
        return {">": "lt", ">=": "lt", "<": "gt", "<=": "gt"}.get(op)
    return None


def _ternary_max(node) -> bool:
    """`a > b ? a : b` (or `b < a ? a : b`): a maximum written as a conditional expression."""
    n = strip(node)
    if n is None or n.type != "conditional_expression":
        return False
    a, b = (n.child_by_field_name(f) for f in ("consequence", "alternative"))
    if a is None or b is None:
        return False
    return _compares(n.child_by_field_name("condition"), squash(a.text.decode()), squash(b.text.decode())) == "gt"


def _raised_under(stmt, lhs, rhs) -> bool:
    """`lhs = rhs` runs only when rhs > lhs: inside the then-branch of `if (rhs > lhs)`."""
    x, y = squash(rhs.text.decode()), squash(lhs.text.decode())
    for a in ancestors(stmt):
        if a.type == "if_statement":
            cons = a.child_by_field_name("consequence")
            if cons is not None and cons.start_byte <= stmt.start_byte < cons.end_byte:
                return _compares(a.child_by_field_name("condition"), x, y) == "gt"
            return False
        if a.type in ("function_definition", "for_statement", "while_statement"):
            return False
    return False


def _is_call(node, names: set[str]) -> bool:
    node = strip(node)
    return node is not None and node.type == "call_expression" and callee_name(node) in names


def _within(inner, outer) -> bool:
    return outer.start_byte <= inner.start_byte and inner.end_byte <= outer.end_byte


FAMILY = Family(
    OnlineSoftmax, rank=260,
    forms=(
        Form("a running maximum with a running sum rescaled by exp(old max - new max)", rewritable=False),
    ),
    forward=("shape",),
    addresses=frozenset({"memory"}),
    rules=("warp_mask", "dtype_intrinsics", "fast_math"),
)
