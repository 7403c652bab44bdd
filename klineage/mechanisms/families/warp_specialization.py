"""Warp specialization: producer and consumer warp roles split by a branch."""
from __future__ import annotations

import re

from klineage.mechanisms.base import Family, Form
from klineage.mechanisms.codescan import COPY_CATEGORIES, MMA_CATEGORIES, Scan, assignments, base_name, identifiers
from klineage.mechanisms.structural import _joined, _lines, _ptx_sites, _Structural
from klineage.parse.syntax import walk


_SETMAXNREG = re.compile(r"\bsetmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s*(\d+)?")
_TID_EXPR = r"(?:threadIdx\.x|{aliases})"


class WarpSpecialization(_Structural):
    NAME = "warp_specialization"
    DESCRIPTION = ("warp specialization: warps (or warpgroups) with different roles, producers issuing the copies "
                   "and consumers computing, split by a branch on the warp(group) index; setmaxnreg moves "
                   "registers from producers to consumers")
    ANCHOR = "warp role branch"
    FILE_SIGNATURES = (r"setmaxnreg",)

    def evidence(self, s, fn):
        regs = s.find(fn, _SETMAXNREG)
        roles, role_lines, patterns = _role_vars(s, fn)
        branch_lines, splits = set(), set()
        for n in walk(fn.node):
            if n.type != "if_statement" or not s.live(n.start_point.row + 1):
                continue
            cond = n.child_by_field_name("condition")
            split = _role_split(s, fn, cond, roles, patterns)
            if split and _producer_consumer(s, n):
                branch_lines.add(n.start_point.row + 1)
                splits.add(split)
        if not regs and not branch_lines:
            return None
        lines = _lines(regs) | branch_lines
        used = {v for v in roles if any(re.search(rf"\b{re.escape(v)}\b", s.code(ln)) for ln in branch_lines)}
        for _ in range(3):  # and the role variables those are computed from
            used |= {w for v, ln in role_lines if v in used for w in roles
                     if re.search(rf"\b{re.escape(w)}\b", s.code(ln))}
        lines |= {ln for v, ln in role_lines if v in used}
        lines |= _lines(s.find(fn, r"(?i)\b\w*(?:producer|consumer)\w*\b(?!\s*\()")) if branch_lines else set()
        info = {"split": _joined(splits), "roles": "producer/consumer" if branch_lines else "",
                "setmaxnreg": ", ".join(dict.fromkeys(f"{m.group(1)} {m.group(2)}".strip() for _, m in regs))}
        return lines, {k: v for k, v in info.items() if v}

    def compiled(self, ck) -> list:
        """setmaxnreg, the register hand-over between warp roles (the role branch itself leaves no
        instruction of its own)."""
        return _ptx_sites(self, ck, lambda i: i.op == "setmaxnreg")


def _role_vars(s: Scan, fn) -> tuple[dict[str, str], list[tuple[str, int]], dict]:
    """Variables holding a warpgroup or warp index (or derived from one): name -> 'warpgroup' / 'warp'."""
    assigns = [(base_name(l), r, st.start_point.row + 1) for l, op, r, st in assignments(fn.node) if op == "="]
    aliases = {v for v, r, _ in assigns if v and re.fullmatch(r"\(?(?:int|unsigned)?\)?\(?threadIdx\.x\)?",
                                                                 re.sub(r"\s+|static_cast<\w+>", "", r.text.decode()))}
    tid = _TID_EXPR.format(aliases="|".join(map(re.escape, sorted(aliases))) or "(?!)")
    group = re.compile(rf"{tid}\s*(?:/\s*(?:128\b|\(\s*(?:4\s*\*\s*32|32\s*\*\s*4)\s*\)|\w*(?:WARP_?GROUP|WarpGroup|"
                       rf"warpgroup|Warpgroup)\w*)|>>\s*7\b)|\b\w*[Ww]arp_?[Gg]roup_?(?:idx|id|index)\w*\s*\(")
    warp = re.compile(rf"{tid}\s*(?:/\s*(?:32\b|warpSize\b|WARP_SIZE\b|kWarpSize\b)|>>\s*5\b)")
    roles: dict[str, str] = {}
    lines = []
    for _ in range(3):
        for v, r, ln in assigns:
            if not v or v in roles or not s.live(ln):
                continue
            text = r.text.decode()
            kind = "warpgroup" if group.search(text) else "warp" if warp.search(text) else \
                next((roles[i] for i in identifiers(r) if i in roles), None)
            if kind:
                roles[v] = kind
                lines.append((v, ln))
    return roles, lines, {"warpgroup": group, "warp": warp, "tid": tid}


def _role_split(s: Scan, fn, cond, roles: dict[str, str], patterns: dict) -> str | None:
    """How the condition splits the block: by a warpgroup or warp index, or a thread-index threshold."""
    if cond is None:
        return None
    for i in identifiers(cond):
        if i in roles:
            return roles[i]
    text = cond.text.decode()
    for kind in ("warpgroup", "warp"):
        if patterns[kind].search(text):
            return kind
    m = re.search(rf"{patterns['tid']}\s*(?:<|>=|>|<=)\s*([\w\s*()+]+)", text)
    if m:
        v = s.value(m.group(1).strip().rstrip(")"), fn)
        if v is not None and v >= 32 and v % 32 == 0:
            return "threads"
    return None


def _producer_consumer(s: Scan, branch) -> bool:
    """One side of the branch issues copies and runs no MMA; the other side does not copy, or runs the MMAs."""
    cons = branch.child_by_field_name("consequence")
    alt = branch.child_by_field_name("alternative")
    if alt is not None and alt.type == "else_clause":
        alt = alt.named_children[0] if alt.named_children else None
    sides = [s.cats_of(cons)] if cons is not None else []
    if alt is not None:
        sides.append(s.cats_of(alt))
    elif cons is not None and any(n.type == "return_statement" for n in walk(cons)):
        rest, nxt = set(), branch.next_named_sibling
        while nxt is not None:
            rest |= s.cats_of(nxt)
            nxt = nxt.next_named_sibling
        sides.append(rest)
    if len(sides) != 2:
        return False

    def role(c):
        if c & COPY_CATEGORIES and not c & MMA_CATEGORIES:
            return "producer"
        return "consumer" if c & MMA_CATEGORIES or not c & COPY_CATEGORIES else None
    return {role(sides[0]), role(sides[1])} == {"producer", "consumer"}


FAMILY = Family(
    WarpSpecialization, rank=250,
    forms=(
        Form("a branch on the warp(group) index splitting producers (copies) from consumers (MMAs)", rewritable=False),
        Form("setmaxnreg register hand-over between roles", rewritable=False),
    ),
    compiler="setmaxnreg, the register hand-over between warp roles",
    forward=("shape",),
    addresses=frozenset(),  # none: see Family.addresses
    hardware=("wgmma", "setmaxnreg", "tma"),
)
