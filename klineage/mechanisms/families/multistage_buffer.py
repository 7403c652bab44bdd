"""Multi-stage shared-memory buffers: software pipelining over a ring of tiles."""
from __future__ import annotations

import re

from klineage.mechanisms.base import Family, Form
from klineage.mechanisms.codescan import Scan, assignments, base_name, identifiers
from klineage.mechanisms.families._pipeline import _CP_WAIT, _stage_names, _stages
from klineage.mechanisms.structural import _joined, _lines, _Structural
from klineage.parse.syntax import walk


class MultistageBuffer(_Structural):
    NAME = "multistage_buffer"
    DESCRIPTION = "multi-stage shared-memory buffers (software pipelining over STAGES tiles)"
    ANCHOR = "shared tile ring"
    FILE_SIGNATURES = ()

    def evidence(self, s, fn):
        names = [n for n in _stage_names(s, fn) if s.value(n, fn) is None or s.value(n, fn) >= 2]
        lines, stages = set(), {}
        if names:
            alt = "|".join(map(re.escape, names))
            ring = re.compile(rf"%\s*\(?\s*(?:{alt})\b|&\s*\(\s*(?:{alt})\s*-\s*1\s*\)|\+\+\s*\w+\s*==\s*(?:{alt})\b|"
                              rf"\b\w+\s*\+\s*1\s*==\s*(?:{alt})\b|==\s*(?:{alt})\s*-\s*1\s*\?|"
                              rf"__shared__[^;]*\[\s*(?:{alt})\s*\]")
            hits = s.find(fn, ring)
            rings = {m.group(0) for _, m in hits}
            used = [n for n in names if any(re.search(rf"\b{re.escape(n)}\b", r) for r in rings)]
            used += [n for n in names if n not in used and _struct_ring(s, fn, n)]
            if used:
                lines = _lines(hits) | _lines(s.find(fn, rf"\b(?:{alt})\b"))
                stages = _stages(s, fn, used)
        for ln, m in s.find(fn, r"\b(\w*(?:stage|buf|pipe|slot)\w*)\s*=\s*\(\s*\1\s*\+\s*1\s*\)\s*%\s*(\w+)"):
            v = s.value(m.group(2), fn)
            if v is not None and v >= 2:
                lines.add(ln)
                stages = stages or {"stages": v}
        if not lines and fn.cats & {"cp_async", "tma_copy"}:
            lines = _double_buffer(s, fn)
            stages = {"stages": 2} if lines else {}
        if not lines:
            lines = _prefetch_double_buffer(s, fn)
            stages = {"stages": 2} if lines else {}
        if not lines:
            lines = _stage_offsets(s, fn)
            stages = {"stages": 2, "form": "stage offset"} if lines else {}
        if not lines:
            return None
        info = dict(stages)
        info["copy"] = _joined(["cp.async" if "cp_async" in fn.cats else "", "tma" if "tma_copy" in fn.cats else ""])
        if "cp_async" in fn.cats:
            info["wait"] = _joined(next((g for g in m.groups() if g), "") for _, m in s.find(fn, _CP_WAIT))
        return lines, {k: v for k, v in info.items() if v != ""}


def _struct_ring(s: Scan, fn, name: str) -> bool:
    """The function uses a struct (e.g. the shared-storage struct) with a field dimensioned by `name`."""
    structs = set()
    for n in walk(s.tree.root):
        if n.type == "struct_specifier" and n.child_by_field_name("name") is not None:
            body = n.child_by_field_name("body")
            if body is not None and re.search(rf"\[\s*{re.escape(name)}\s*\]", s.tree.text_of(body)):
                structs.add(s.tree.text_of(n.child_by_field_name("name")))
    return bool(structs) and any(re.search(rf"\b{re.escape(t)}\b", s.code(i)) for t in structs for i in s.lines(fn))


def _double_buffer(s: Scan, fn) -> set[int]:
    """`__shared__ T buf[2][...]` indexed by a toggled variable (`b ^= 1`, `b = 1 - b`, `k & 1`, `k % 2`)."""
    arrays = {m.group(1): ln for ln, m in s.find(fn, r"__shared__[^;=]*?\b(\w+)\s*\[\s*2\s*\]\s*\[")}
    if not arrays:
        return set()
    flips = s.find(fn, r"\b(\w+)\s*\^=\s*1\b|\b(\w+)\s*=\s*1\s*-\s*\2\b")
    toggles = "|".join(sorted({re.escape(m.group(1) or m.group(2)) for _, m in flips})) or "(?!)"
    out = set()
    for name, decl in arrays.items():
        idx = (rf"\b{re.escape(name)}\s*\[\s*(?:(?:{toggles})\s*(?:\^\s*1\s*)?\]|1\s*-\s*(?:{toggles})\s*\]|"
               rf"[^\]]*?(?:&\s*1|%\s*2)\s*\)?\s*\])")
        hits = s.find(fn, idx)
        if hits:
            out |= {decl} | _lines(hits) | {ln for ln, m in flips if any(
                re.search(rf"\b{re.escape(m.group(1) or m.group(2))}\b", h.group(0)) for _, h in hits)}
    return out


def _prefetch_double_buffer(s: Scan, fn) -> set[int]:
    """Two shared stages used as a pipeline without (or around) a copy engine: an array of two tiles
    (`[2][N]`, or one `[2 * N]` array) whose halves are picked by a toggled or parity variable (`cur =
    k & 1`, `nxt = cur ^ 1`, `b ^= 1`), written with values that do not come from the array itself
    (the next tile's global loads) while the other half is read. A scan's ping-pong halves, each
    written from the other, are not a pipeline."""
    arrays = {m.group(1): ln for ln, m in s.find(fn, r"__shared__[^;=]*?\b(\w+)\s*\[\s*(?:2\s*\]\s*\[|2\s*\*|"
                                                     r"[^\]]*\*\s*2\s*\])")}
    if not arrays:
        return set()
    flips = s.find(fn, r"\b(\w+)\s*\^=\s*1\b|\b(\w+)\s*=\s*1\s*-\s*\2\b|\b(\w+)\s*=\s*[^;=]*?(?:&\s*1|%\s*2)\s*\)?\s*;|"
                   r"\b(\w+)\s*=\s*\w+\s*\^\s*1\s*;")
    toggles = {next(g for g in m.groups() if g) for _, m in flips}
    if not toggles:
        return set()
    alt = "|".join(sorted(map(re.escape, toggles)))
    out = set()
    for name, decl in arrays.items():
        idx = rf"\b{re.escape(name)}\s*\[\s*\(?\s*(?:{alt})\s*(?:\]|\*|\^\s*1\s*\])"
        hits = s.find(fn, idx)
        if hits and not _written_from_itself(s, fn, name):
            out |= {decl} | _lines(hits) | {ln for ln, m in flips if any(
                re.search(rf"\b{re.escape(next(g for g in m.groups() if g))}\b", h.group(0)) for _, h in hits)}
    return out


_TOGGLES = (r"\b(\w+)\s*\^=\s*\w+\s*;",                        # stage ^= 1; off ^= TILE
            r"\b(\w+)\s*=\s*1\s*-\s*\w+\s*;",                    # s = 1 - s
            r"\b(\w+)\s*=\s*[^;=]*?(?:&\s*1|%\s*2)\b[^;]*;",      # cur = ((k / BK) & 1) * STAGE
            r"\b(\w+)\s*=\s*\(?\s*\w+\s*\^\s*\w+\s*\)?[^;]*;")   # nxt = off ^ TILE; (s ^ 1) * N


def _stage_offsets(s: Scan, fn) -> set[int]:
    """Two stages in one flat shared array reached by a computed offset: a `[2 * N]` array (or dynamic
    shared memory) indexed or offset by a variable that flips between stages (`cur = (k & 1) *
    STAGE; nxt = STAGE - cur`, `nxt = off ^ TILE; ...; off = nxt`, `smem + (stage ^ 1) * N`), written
    from outside the array (the next tile) while the other stage is read."""
    arrays = {m.group(1): ln for ln, m in s.find(fn, r"__shared__[^;=]*?\b(\w+)\s*\[\s*(?:2\s*\*|[^\]]*\*\s*2\s*\]|\s*\])")}
    if not arrays or not s.loops(fn):
        return set()
    offsets, flips = set(), []
    for pat in _TOGGLES:
        for ln, m in s.find(fn, pat):
            offsets.add(m.group(1))
            flips.append(ln)
    for _ in range(3):  # nxt = STAGE - cur; off = nxt
        for ln, m in s.find(fn, r"\b(\w+)\s*=\s*(?:\w+\s*-\s*)?(\w+)\s*;"):
            if m.group(2) in offsets and m.group(1) not in offsets:
                offsets.add(m.group(1))
                flips.append(ln)
    if not offsets:
        return set()
    alt = "|".join(sorted(map(re.escape, offsets)))
    out = set()
    for name, decl in arrays.items():
        use = rf"\b{re.escape(name)}\s*(?:\[|\+)\s*\(?\s*(?:{alt})\b"
        hits = s.find(fn, use)
        if len(hits) >= 2 and not _written_from_itself(s, fn, name):
            out |= {decl} | _lines(hits) | set(flips)
    return out


def _written_from_itself(s: Scan, fn, name: str) -> bool:
    """Some store into array `name` (or a pointer into it) takes a value read from the array."""
    aliases = {name}
    defs: dict[str, str] = {}
    for lhs, op, rhs, _ in assignments(fn.node):
        v = base_name(lhs)
        if v:
            defs[v] = defs.get(v, "") + " " + rhs.text.decode()
        if v and re.search(rf"&\s*{re.escape(name)}\s*\[|\b{re.escape(name)}\s*\+", rhs.text.decode()):
            aliases.add(v)
    reads = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(aliases))) + r")\s*\[")
    named = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(aliases))) + r")\b")
    for lhs, op, rhs, _ in assignments(fn.node):
        target = lhs.text.decode()
        if not (reads.search(target) or (target.lstrip().startswith("*") and named.search(target))):
            continue  # not a store into the array (the declaration of a pointer into it, say)
        text = rhs.text.decode() + (" " + lhs.text.decode() if op != "=" else "")
        if reads.search(text) or any(reads.search(defs.get(i, "")) for i in identifiers(rhs)):
            return True
    return False


FAMILY = Family(
    MultistageBuffer, rank=240,
    forms=(
        Form("a ring of shared stages indexed modulo (or masked by) a stage count", rewritable=False),
        Form("a double buffer [2][...] picked by a toggled index", rewritable=False),
        Form("a prefetch double buffer: one half written with the next tile while the other is read", rewritable=False),
    ),
    addresses=frozenset(),  # none: see Family.addresses
    rules=("shared_memory",),
    hardware=("cp.async",),
    companions=frozenset({"async_copy"}),
)
