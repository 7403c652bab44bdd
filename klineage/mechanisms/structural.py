"""Structural mechanisms that no rule can remove mechanically: detected, so audits see that they
are kept and skills list them as prior features, but never rewritten here (the versions proposer,
or an LLM proposer, removes them).

A feature per function that carries the mechanism (locus `<function>:<mechanism>`): its lines span
the evidence, its detail counts the evidence lines (`signatures`) and records what the code says
of the configuration (MMA flavour, shape and types; copy engine; stage count; swizzle mode; tile
shape; ...). Evidence comes from live code only: comments and `#if`-dead branches do not count, the
PTX in the continuation lines of a multi-line `asm volatile(...)` does, and macros are expanded
(codescan.py).

The families live by kind, in registry order: `pipeline` (tensor cores, asynchronous copies, stage
rings, warp roles), `dataflow` (online softmax, swizzled shared indices, register tiles) and
`declared` (thread-block clusters, found by signature, and the families only a ladder names). This
module holds what they share: the detector over codescan facts and the PTX site helper.
"""
from __future__ import annotations

import re
from typing import ClassVar

from klineage.mechanisms.base import Feature, Kernel, Mechanism, detail, number_loci
from klineage.mechanisms.codescan import Scan, scan


def _ptx_sites(mech, ck, wanted) -> list:
    """One site per PTX instruction `wanted(instr)` accepts."""
    out = []
    for fn in ck.module.functions:
        for i in fn.instrs:
            if wanted(i):
                site = ck.site(mech.NAME, fn, [i])
                if site is not None:
                    out.append(site)
    return out


class _Structural(Mechanism):
    """A detector over codescan facts: `evidence` gives (lines, detail) per function, or None."""
    STRUCTURAL = True
    COMPILED_MATCH = "function"
    ANCHOR: ClassVar[str] = ""
    # signatures searched outside every function when no function carries the mechanism
    FILE_SIGNATURES: ClassVar[tuple[str, ...]] = ()

    def evidence(self, s: Scan, fn) -> tuple[set[int], dict] | None:
        raise NotImplementedError

    def detect(self, k: Kernel) -> list[Feature]:
        s = scan(k)
        items = []
        for fn in s.fns:
            found = self.evidence(s, fn)
            if found is not None and found[0]:
                items.append((f"{fn.name}:{self.NAME}", (fn, found)))
        feats = []
        for locus, (fn, (lines, info)) in number_loci(items):
            ls = sorted(lines)
            feats.append(Feature(self.NAME, locus, (ls[0], ls[-1]), anchor=self.ANCHOR,
                                 detail=detail(signatures=len(ls), **info), removable=False,
                                 path=f"{fn.name} > {self.ANCHOR}"))
        if not feats and self.FILE_SIGNATURES:
            pats = [re.compile(p) for p in self.FILE_SIGNATURES]
            line = next((i for i in s.outside_functions() if any(p.search(s.code(i)) for p in pats)), None)
            if line is not None:
                feats.append(Feature(self.NAME, f"<file>:{self.NAME}", (line, line), anchor=self.ANCHOR,
                                     detail=detail(signatures=1), removable=False, path=f"file > {self.ANCHOR}"))
        return feats


def _lines(hits) -> set[int]:
    return {ln for ln, _ in hits}


def _joined(values) -> str:
    return ",".join(sorted({v for v in values if v}))
