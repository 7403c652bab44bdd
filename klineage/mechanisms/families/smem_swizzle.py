"""Swizzled shared-memory indices: an XOR of the row into the column (or a TMA / descriptor swizzle mode)."""
from __future__ import annotations

import re

from klineage.mechanisms.base import Family, Form
from klineage.mechanisms.codescan import Scan, base_name, callee_name, strip
from klineage.mechanisms.families.online_softmax import _within
from klineage.mechanisms.structural import _joined, _Structural
from klineage.parse.syntax import ancestors, walk


_TMA_SWIZZLE = re.compile(r"\bCU_TENSOR_MAP_SWIZZLE_(32B|64B|128B)\w*")
_DESC_SWIZZLE = re.compile(r"(?:\b([123])(?:ull|ULL|ul|UL|llu|LLU|ll|LL|u|U)?|\(\s*(?:uint64_t|unsigned long long)\s*\)"
                           r"\s*([123])|\buint64_t\s*\(\s*([123])\s*\))\s*\)?\s*<<\s*62\b|"
                           r"\blayout_type\w*\s*=\s*([123])\b")
_DESC_MODE = {"1": "128B", "2": "64B", "3": "32B"}


class SmemSwizzle(_Structural):
    NAME = "smem_swizzle"
    DESCRIPTION = ("swizzled shared-memory layouts against bank conflicts: XOR of a column (chunk) index with "
                   "masked row bits, or the TMA / wgmma-descriptor swizzle modes (128B, 64B, 32B)")
    ANCHOR = "shared index"

    def evidence(self, s, fn):
        lines, kinds, modes, masks = set(), set(), set(), set()
        if _has_shared(s):
            for x in walk(fn.node):
                if x.type != "binary_expression" or x.child_by_field_name("operator").type != "^":
                    continue
                if not s.live(x.start_point.row + 1):
                    continue
                mask = _xor_mask(x)
                if mask and _index_use(s, fn, x):
                    lines.add(x.start_point.row + 1)
                    kinds.add("xor")
                    masks.add(mask)
        for ln, m in s.find(fn, _TMA_SWIZZLE):
            lines.add(ln)
            kinds.add("tma")
            modes.add(m.group(1))
        if re.search(r"(?i)desc|>>\s*4\b", " ".join(s.code(i) for i in s.lines(fn))):
            for ln, m in s.find(fn, _DESC_SWIZZLE):
                lines.add(ln)
                kinds.add("wgmma_desc")
                modes.add(_DESC_MODE[next(g for g in m.groups() if g)])
        if not lines:
            return None
        return lines, {k: v for k, v in {"kind": _joined(kinds), "mode": _joined(modes), "mask": _joined(masks)}.items()
                       if v}


def _has_shared(s: Scan) -> bool:
    return any("__shared__" in line for line in s.code_lines)


def _xor_mask(x) -> str | None:
    """The mask when one operand of the XOR (or the XOR itself) is masked: `c ^ (r & 7)`, `(c ^ r) % 8`."""
    def masked(n):
        n = strip(n)
        while n is not None and n.type == "binary_expression" and \
                n.child_by_field_name("operator").type in (">>", "<<"):
            n = strip(n.child_by_field_name("left"))  # `(off & 0x380) >> 3`
        if n is None or n.type != "binary_expression" or n.child_by_field_name("operator").type not in ("&", "%"):
            return None
        for side in (n.child_by_field_name("right"), n.child_by_field_name("left")):
            side = strip(side)
            if side is not None and side.type in ("number_literal", "identifier"):
                text = side.text.decode()
                try:  # a parity bit (`& 1`, `% 2`) is no swizzle
                    if int(text.rstrip("uUlL"), 0) < 3:
                        return None
                except ValueError:
                    pass
                return text
        return None
    found = masked(x.child_by_field_name("left")) or masked(x.child_by_field_name("right"))
    if found:
        return found
    p = x.parent
    while p is not None and p.type == "parenthesized_expression":
        p = p.parent
    return masked(p) if p is not None else None


def _index_use(s: Scan, fn, x) -> bool:
    """The XOR feeds an index: a subscript, a variable later used as an index or offset, or the value a
    swizzle / offset helper returns."""
    for a in ancestors(x):
        if a.type == "subscript_argument_list":
            return True
        if a.type == "return_statement":
            return bool(re.search(r"(?i)swiz|swz|offset|addr|idx|index|chunk", fn.name)) or _called_as_index(s, fn.name)
        if a.type in ("init_declarator", "assignment_expression"):
            target = a.child_by_field_name("declarator" if a.type == "init_declarator" else "left")
            ty = a.parent.child_by_field_name("type") if a.type == "init_declarator" and a.parent is not None else None
            if ty is not None and ty.text.decode() in ("bool", "float", "double"):
                return False  # a flag or a value, not an index
            v = base_name(target)
            return v is not None and _used_as_index(fn.node, v, a)
        if a.type.endswith("_statement") or a.type == "declaration":
            return False
    return False


def _used_as_index(root, v: str, skip) -> bool:
    for n in walk(root):
        if n.type != "identifier" or n.text.decode() != v or _within(n, skip):
            continue
        for a in ancestors(n):
            if a.type == "subscript_argument_list":
                return True
            if a.type == "binary_expression" and a.child_by_field_name("operator").type == "+":
                return True
            if a.type in ("gnu_asm_input_operand", "gnu_asm_output_operand"):
                return True
            if a.type.endswith("_statement") or a.type == "declaration":
                break
    return False


def _called_as_index(s: Scan, name: str) -> bool:
    for f in s.fns:
        for n in walk(f.node):
            if n.type == "call_expression" and callee_name(n) == name:
                for a in ancestors(n):
                    if a.type == "subscript_argument_list" or (a.type == "binary_expression"
                                                                and a.child_by_field_name("operator").type == "+"):
                        return True
                    if a.type.endswith("_statement") or a.type == "declaration":
                        break
    return False


FAMILY = Family(
    SmemSwizzle, rank=270,
    forms=(
        Form("an XOR of a column (chunk) index with masked row bits, used as a shared-memory index", rewritable=False),
        Form("TMA or wgmma-descriptor swizzle modes (128B, 64B, 32B)", rewritable=False),
    ),
    forward=("shape",),
    addresses=frozenset(),  # none: see Family.addresses
    rules=("shared_memory",),
    conflicts=(("shared tile", "smem_padding"),),
)
