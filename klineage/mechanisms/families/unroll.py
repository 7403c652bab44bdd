"""`#pragma unroll [N]` on a loop: the compiler replicates the body, so independent iterations
(loads, FMAs) issue back to back and loop overhead goes away.

The removed form is `#pragma unroll 1` (unrolling explicitly off), not a deleted pragma: nvcc
unrolls small constant-trip loops on its own, so deleting the pragma would often change nothing and
the step would measure noise. Locus: the loop, by function and header text. Reoptimize turns
`#pragma unroll 1` back into the configured pragma, or on natural code puts `#pragma unroll` before
the first `for` loop with a compile-time trip count bound (a literal or an upper-case name).
"""
from __future__ import annotations

import re

from klineage.mechanisms.base import Applied, Family, Feature, Form, Kernel, Mechanism, NotApplicable, detail, \
    number_loci, squash
from klineage.parse.syntax import Edit, node_path, walk

_PRAGMA = re.compile(r"#\s*pragma\s+unroll\b\s*(\S*)")


def _pragmas(k: Kernel):
    items = []
    for n in walk(k.tree.root):
        if n.type != "preproc_call" or not k.tree.text_of(n).lstrip().startswith("#pragma"):
            continue
        m = _PRAGMA.match(k.tree.text_of(n).strip())
        if not m:
            continue
        loop = n.next_named_sibling
        while loop is not None and loop.type == "comment":
            loop = loop.next_named_sibling
        if loop is None or loop.type not in ("for_statement", "while_statement", "do_statement"):
            continue
        header = k.tree.text_of(loop).split(")")[0] + ")" if loop.type == "for_statement" else loop.type
        fn = k.function_of(n)
        items.append((f"{fn}:loop:{squash(header)}", (n, loop, m.group(1))))
    return number_loci(items)


class Unroll(Mechanism):
    NAME = "unroll"
    DESCRIPTION = "#pragma unroll on a loop (independent iterations issued back to back)"
    PRECONDITIONS = {
        "storage": [{"condition": "the unrolled body's registers fit the per-thread budget",
                     "fails_without": "register spills to local memory; the step gets slower, not wrong"}],
    }

    def detect_more(self, k: Kernel) -> list[Feature]:
        return self._macros(k)

    def detect(self, k: Kernel) -> list[Feature]:
        out = []
        for locus, (n, loop, count) in _pragmas(k):
            if count == "1" or not k.live(loop):
                continue  # `#pragma unroll 1` is the mechanism switched off
            out.append(Feature(self.NAME, locus, (k.lines(n)[0], k.lines(loop)[1]), anchor="loop",
                               detail=detail(count=count or "full"), path=node_path(k.tree, loop)))
        return out

    def _macros(self, k: Kernel) -> list[Feature]:
        """Loops unrolled through a macro that carries `_Pragma("unroll")` (a library's unrolled-for):
        seen, not rewritten (the pragma is in the macro, shared by every loop that uses it)."""
        from klineage.mechanisms.codescan import macro_calls
        items = [(f"{fn}:loop:{squash(_invocation(k.tree.text_of(call)))}", (call, macro, m.group(1) or "full"))
                 for fn, call, macro, m in macro_calls(k, r'_Pragma\s*\(\s*"\s*unroll\s*(\d*)\s*"\s*\)')
                 if (m.group(1) or "") != "1"]
        return [Feature(self.NAME, locus, k.lines(call), anchor="loop", detail=detail(count=count, macro=macro),
                        removable=False, path=node_path(k.tree, call))
                for locus, (call, macro, count) in number_loci(items)]

    def deoptimize(self, k: Kernel, feature: Feature):
        hit = dict(_pragmas(k)).get(feature.locus)
        if hit is None or hit[2] == "1":
            return NotApplicable(f"no #pragma unroll at {feature.locus}")
        n, loop, count = hit
        old = k.tree.text_of(n).rstrip("\n")
        new_text = "#pragma unroll 1"
        start = n.start_byte
        return Applied(k.tree.edit([Edit(start, start + len(old.encode()), new_text)]), self.NAME, feature.locus,
                       before=old, after=new_text, config={"pragma": old, "locus": feature.locus})

    def reoptimize(self, k: Kernel, locus: str | None = None, config: dict | None = None):
        config = config or {}
        pragmas = dict(_pragmas(k))
        if locus and locus in pragmas and pragmas[locus][2] == "1":
            n = pragmas[locus][0]
            old = k.tree.text_of(n).rstrip("\n")
            text = config.get("pragma", "#pragma unroll")
            return Applied(k.tree.edit([Edit(n.start_byte, n.start_byte + len(old.encode()), text)]), self.NAME,
                           locus, before=old, after=text, config={"pragma": text})
        covered = {id(v[1]) for v in pragmas.values()}
        for loop in walk(k.tree.root):
            if loop.type != "for_statement" or not k.live(loop) or k.function_of(loop) == "<file>":
                continue
            prev = loop.prev_named_sibling
            if prev is not None and prev.type == "preproc_call" and "unroll" in k.tree.text_of(prev):
                continue
            cond = loop.child_by_field_name("condition")
            if cond is None or not re.search(r"<=?\s*([0-9]+|[A-Z_][A-Z0-9_]*)\s*$", k.tree.text_of(cond)):
                continue
            indent = " " * loop.start_point.column
            line_start = k.tree.data.rfind(b"\n", 0, loop.start_byte) + 1
            own_line = not k.tree.data[line_start:loop.start_byte].strip()
            text = "#pragma unroll\n" + indent if own_line else "\n#pragma unroll\n"
            header = squash(k.tree.text_of(loop).split(")")[0] + ")")
            new = k.tree.edit([Edit(loop.start_byte, loop.start_byte, text)])
            return Applied(new, self.NAME, f"{k.function_of(loop)}:loop:{header}", before=header,
                           after="#pragma unroll\n" + header, config={"pragma": "#pragma unroll"})
        return NotApplicable("no loop with a compile-time trip count bound and without an unroll pragma")


def _invocation(text: str) -> str:
    """`NAME(args)` at the start of a macro loop's text (its body left out)."""
    m = re.match(r"\w+\s*\((?:[^()]|\([^()]*\))*\)", text)
    return m.group(0) if m else text


FAMILY = Family(
    Unroll, rank=40,
    forms=(
        Form("#pragma unroll [N] on a loop (taken out as #pragma unroll 1)"),
        Form('a loop unrolled through a macro that carries _Pragma("unroll")', rewritable=False),
    ),
    forward=("reoptimize",),
    anchor_query='((preproc_call) @pragma . (for_statement) @loop (#match? @pragma "unroll"))',
    addresses=frozenset({"compute", "latency", "memory"}),
    rules=("unroll",),
)
